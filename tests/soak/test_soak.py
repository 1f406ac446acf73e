"""The randomized soak: two sessions' sidecars (real ``memsync sync`` processes) and another client change
three stores for thousands of seeded operations while a fault proxy breaks 10 % of the sidecars' requests,
sidecars are SIGKILLed and restarted and the store server restarts; then both sessions end and the verdict
is checked (see ``checks``).

The seed is printed and appears in every failure; ``MEMSYNC_SOAK_SEED=<seed>`` replays the same operation
sequence (the interleaving with the sidecars' passes still varies). ``MEMSYNC_SOAK_OPS`` sets the count
(default 10,000); ``--soak-long`` (or ``MEMSYNC_SOAK_LONG=1``) runs 100,000. ``MEMSYNC_SOAK_KINDS`` (a
comma list of ``driver.ALL_KINDS``) replaces the operation mix of ``test_soak``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .checks import summarize
from .driver import ALL_KINDS, Soak

if TYPE_CHECKING:  # the fixture's type; the module name ``conftest`` is ambiguous at run time under xdist
    from conftest import RunningStoreServer

LONG = os.environ.get("MEMSYNC_SOAK_LONG") == "1"
DEFAULT_OPS = 100_000 if LONG else 10_000
DEFAULT_KINDS = ALL_KINDS
SHORT_OPS = 1_500

pytestmark = [pytest.mark.soak, pytest.mark.timeout(6 * 3600 if LONG else 3600)]


def _seed() -> int:
    given = os.environ.get("MEMSYNC_SOAK_SEED")
    if given:
        return int(given)
    return random.SystemRandom().randrange(2**32)


def _soak(
    request: pytest.FixtureRequest,
    server: RunningStoreServer,
    base: Path,
    kinds: tuple[str, ...],
    ops: int,
    *,
    final_outage_s: float = 0.0,
    weights: Mapping[str, float] | None = None,
) -> None:
    seed = _seed()
    print(f"\nsoak: seed {seed}, {ops} operations, kinds {','.join(kinds)}", flush=True)
    soak = Soak(
        seed=seed,
        ops=ops,
        kinds=kinds,
        base=base,
        server=server,
        final_outage_s=final_outage_s,
        weights=weights,
    )
    try:
        soak.setup()
        outcome = soak.run()
    finally:
        soak.close()
    request.node.user_properties.append(("soak", outcome.figures))
    print(f"soak figures: {outcome.figures}", flush=True)
    assert not outcome.violations, (
        f"soak seed {seed} (MEMSYNC_SOAK_SEED={seed} replays it): {len(outcome.violations)} violations\n"
        f"{summarize(outcome.violations)}\nfigures: {outcome.figures}\nfolders and agent logs: {base}"
    )


def test_soak(request: pytest.FixtureRequest, fresh_store_server: RunningStoreServer, tmp_path: Path) -> None:
    given = os.environ.get("MEMSYNC_SOAK_KINDS")
    kinds = tuple(k.strip() for k in given.split(",") if k.strip()) if given else DEFAULT_KINDS
    ops = int(os.environ.get("MEMSYNC_SOAK_OPS") or DEFAULT_OPS)
    _soak(request, fresh_store_server, tmp_path / "pods", kinds, ops)


# The weighted soaks below push one kind five times harder than the default mix; they run on demand
# (`make soak`), with the longer mode, and not in `make test`, which runs the default mix.
@pytest.mark.soak_on_demand
def test_soak_with_unreadable_files(
    request: pytest.FixtureRequest, fresh_store_server: RunningStoreServer, tmp_path: Path
) -> None:
    """More unreadable files than the default mix; half of those still unreadable at the end are made readable
    again before the sessions end (their edits must land), the rest must be the unsent ones, named."""
    _soak(
        request, fresh_store_server, tmp_path / "pods", DEFAULT_KINDS, SHORT_OPS, weights={"unreadable": 10.0}
    )


@pytest.mark.soak_on_demand
def test_soak_with_file_directory_swaps(
    request: pytest.FixtureRequest, fresh_store_server: RunningStoreServer, tmp_path: Path
) -> None:
    """More file<->directory swaps than the default mix makes, in the shared store as in the others."""
    _soak(request, fresh_store_server, tmp_path / "pods", ALL_KINDS, SHORT_OPS, weights={"swap": 10.0})


# On demand (make soak) like the weighted variants: its seeds found rare gaps in the verdict (each now fixed
# and unit-tested in test_checks.py) more often than the default mix; the outage itself is proven every run by
# tests/integration/test_agent_faults.py (a 10 s outage during a 30 s final flush loses nothing).
@pytest.mark.soak_on_demand
def test_soak_with_a_store_outage_during_the_final_flush(
    request: pytest.FixtureRequest, fresh_store_server: RunningStoreServer, tmp_path: Path
) -> None:
    """The store is unreachable for the first 10 s of the sidecars' 30 s final sync and flush: nothing may be
    lost. The fault proxy answers for the store then, so the outage lasts 10 s however slowly a store server
    process restarts on a loaded machine (server restarts are operations of the mix)."""
    _soak(request, fresh_store_server, tmp_path / "pods", DEFAULT_KINDS, SHORT_OPS, final_outage_s=10.0)
