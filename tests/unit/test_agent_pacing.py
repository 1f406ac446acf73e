"""When the sync sidecar starts its next pass: a random phase after the first, the interval +/- 10 % after."""

from __future__ import annotations

import pytest

from memsync.agent.schedule import periodic_due


@pytest.mark.parametrize("draw", [0.0, 0.25, 0.5, 0.999])
def test_after_the_first_pass_the_next_comes_half_to_one_and_a_half_intervals_later(draw: float) -> None:
    assert periodic_due(100.0, 100.3, 15.0, first=True, draw=draw) == pytest.approx(
        100.3 + 15.0 * (0.5 + draw)
    )


def test_sidecars_started_together_spread_over_a_whole_interval() -> None:
    waits = [periodic_due(0.0, 0.2, 15.0, first=True, draw=i / 100) - 0.2 for i in range(100)]
    assert min(waits) == pytest.approx(7.5) and max(waits) > 22.0  # a herd of 100 is spread over 15 s


@pytest.mark.parametrize(("draw", "expected"), [(0.0, 13.5), (0.5, 15.0), (0.999, 16.497)])
def test_later_passes_keep_the_interval_within_ten_percent(draw: float, expected: float) -> None:
    # counted from the pass's start, not its end
    assert periodic_due(100.0, 102.0, 15.0, first=False, draw=draw) == pytest.approx(100.0 + expected)


def test_a_pass_longer_than_the_interval_is_due_again_at_once() -> None:
    assert periodic_due(100.0, 140.0, 15.0, first=False, draw=0.5) < 140.0
