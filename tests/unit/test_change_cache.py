"""The PostgreSQL change-marker cache's rules: a marker read before an invalidation is never kept after it,
nothing is answered from memory unless changes are being heard now, and losing the listener forgets all."""

from __future__ import annotations

from memsync.server.storage.change_cache import ChangeCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def listening_cache(clock: Clock, **kwargs: int) -> ChangeCache:
    cache = ChangeCache(clock=clock, liveness_s=3.0, **kwargs)
    cache.heard(clock.now)
    return cache


def test_nothing_is_remembered_or_answered_before_the_listener_first_hears() -> None:
    clock = Clock()
    cache = ChangeCache(clock=clock)
    cache.put("s1", ("c1", 1), cache.generation)
    cache.heard(clock.now)
    assert cache.get("s1") is None


def test_a_marker_read_in_the_current_generation_is_answered() -> None:
    clock = Clock()
    cache = listening_cache(clock)
    cache.put("s1", ("c1", 1), cache.generation)
    assert cache.get("s1") == ("c1", 1)
    assert cache.get("s2") is None


def test_a_read_that_began_before_an_invalidation_is_not_kept() -> None:
    clock = Clock()
    cache = listening_cache(clock)
    began = cache.generation  # a reader reads the old marker...
    cache.forget(["s1"])  # ...a write to the store is heard meanwhile...
    cache.put("s1", ("old", 1), began)  # ...and the reader comes back with what it read
    assert cache.get("s1") is None
    cache.put("s1", ("new", 2), cache.generation)
    assert cache.get("s1") == ("new", 2)


def test_an_invalidation_of_any_store_refuses_every_read_in_flight() -> None:
    clock = Clock()
    cache = listening_cache(clock)
    began = cache.generation
    cache.forget(["other"])
    cache.put("s1", ("c1", 1), began)
    assert cache.get("s1") is None


def test_forget_drops_the_named_stores_only() -> None:
    clock = Clock()
    cache = listening_cache(clock)
    for store in ("s1", "s2", "s3"):
        cache.put(store, (store, 1), cache.generation)
    cache.forget(["s1", "s3"])
    assert [cache.get(s) for s in ("s1", "s2", "s3")] == [None, ("s2", 1), None]
    cache.forget_all()
    assert cache.get("s2") is None


def test_answers_stop_when_the_listener_stops_confirming_and_resume_when_it_does() -> None:
    clock = Clock()
    cache = listening_cache(clock)
    cache.put("s1", ("c1", 1), cache.generation)
    clock.now += 2.9
    assert cache.get("s1") == ("c1", 1)
    clock.now += 0.2  # past the last confirmation's liveness: a stalled listener may have missed a change
    assert not cache.listening
    assert cache.get("s1") is None
    cache.heard(clock.now)  # it confirms again, having forgotten everything it was told meanwhile
    assert cache.get("s1") == ("c1", 1)


def test_a_lost_listener_forgets_everything_and_keeps_nothing_until_it_hears_again() -> None:
    clock = Clock()
    cache = listening_cache(clock)
    cache.put("s1", ("c1", 1), cache.generation)
    cache.deaf()
    assert cache.get("s1") is None
    cache.put("s1", ("c1", 1), cache.generation)  # read while deaf: not kept
    cache.heard(clock.now)
    assert cache.get("s1") is None
    began = cache.generation
    cache.put("s1", ("c2", 2), began)
    assert cache.get("s1") == ("c2", 2)


def test_a_marker_kept_before_the_listener_was_lost_is_not_answered_after_it_reconnects() -> None:
    clock = Clock()
    cache = listening_cache(clock)
    began = cache.generation  # a read in flight while the connection drops and comes back
    cache.deaf()
    cache.heard(clock.now)
    cache.put("s1", ("c1", 1), began)
    assert cache.get("s1") is None


def test_the_oldest_markers_go_first_beyond_the_bound() -> None:
    clock = Clock()
    cache = listening_cache(clock, max_markers=2)
    for i in range(3):
        cache.put(f"s{i}", (f"c{i}", i), cache.generation)
    assert [cache.get(f"s{i}") for i in range(3)] == [None, ("c1", 1), ("c2", 2)]
