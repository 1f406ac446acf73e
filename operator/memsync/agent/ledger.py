"""One store's saved sync state during a pass: loaded under the store's lock, changed only by applying the
pass's journal of records (``apply.apply_outcomes``), checked (``apply.check_invariants``) and saved
atomically (docs/sync-semantics.md#the-baseline)."""

from __future__ import annotations

from memsync.agent.apply import apply_outcomes, check_invariants
from memsync.agent.context import StoreContext
from memsync.agent.localfs import sync_filesystem
from memsync.agent.records import Counted, Journal
from memsync.agent.state import StoreState, load_state, save_state


class Ledger:
    """The state as the pass last applied it, and the records it has not applied yet."""

    def __init__(self, ctx: StoreContext) -> None:
        self.ctx = ctx
        self.state = self.fresh()
        self.journal = Journal()

    def fresh(self) -> StoreState:
        return StoreState(memory_store_id=self.ctx.id, mount_path=self.ctx.store.mount_path)

    def load(self) -> StoreState:
        """The saved state (a fresh one when there is none yet)."""
        state = load_state(self.ctx.config.state_path, self.ctx.id)
        return self.fresh() if state is None else state

    def begin(self, state: StoreState) -> None:
        """Start a pass from ``state`` with an empty journal."""
        self.state = state
        self.journal = Journal()

    def apply(self) -> StoreState:
        """Apply what the pass journaled so far (without saving)."""
        self.state = apply_outcomes(self.state, self.journal.take())
        return self.state

    def save(self) -> None:
        """Apply the journal and the counts since the last save, check the invariants, save atomically."""
        if self.ctx.wrote_files:
            # Files written this pass reach the disk before the baseline that records them: after a crash a
            # half-written file can never look like a local edit of the recorded content.
            sync_filesystem(self.ctx.path.parent)
            self.ctx.wrote_files = False
        self.journal.add(Counted(delta=self.ctx.recorder.take_delta()))
        state = self.apply()
        check_invariants(state)
        save_state(self.ctx.config.state_path, state)
        self.ctx.sync.metrics.pending_deletes.labels(self.ctx.id).set(len(state.pending_deletes))

    def baseline_now(self, rel: str) -> str | None:
        """``rel``'s baseline with what the pass journaled so far."""
        return self.journal.baseline(self.state, rel)
