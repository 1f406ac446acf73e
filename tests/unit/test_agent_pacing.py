"""When the sync sidecar starts its next pass: a random phase after the first, the interval +/- 10 % after."""

from __future__ import annotations

import pytest

from memsync.agent.commands import wait_before_next_pass


@pytest.mark.parametrize("draw", [0.0, 0.25, 0.5, 0.999])
def test_after_the_first_pass_the_phase_is_random_over_the_whole_interval(draw: float) -> None:
    assert wait_before_next_pass(15.0, 0.3, first=True, draw=draw) == pytest.approx(15.0 * draw)


def test_sidecars_started_together_spread_over_the_interval() -> None:
    waits = [wait_before_next_pass(15.0, 0.2, first=True, draw=i / 100) for i in range(100)]
    assert min(waits) == 0.0 and max(waits) > 14.0  # a herd of 100 is spread over the interval


@pytest.mark.parametrize(("draw", "expected"), [(0.0, 13.5 - 2.0), (0.5, 15.0 - 2.0), (0.999, 16.497 - 2.0)])
def test_later_passes_keep_the_interval_within_ten_percent(draw: float, expected: float) -> None:
    assert wait_before_next_pass(15.0, 2.0, first=False, draw=draw) == pytest.approx(expected)


def test_a_pass_longer_than_the_interval_is_followed_at_once() -> None:
    assert wait_before_next_pass(15.0, 40.0, first=False, draw=0.5) == 0.0
