"""Stores read from the session: MEMSYNC_STORES=session, the session's entries (checked like given stores,
under /mnt/memory only), given stores that disagree with the session named by spec.stores[i] and field,
and the resolved list kept in the state directory for the sidecar."""

from __future__ import annotations

from pathlib import Path

import pytest

from memsync.agent import session_stores as ss
from memsync.agent.config import ConfigError, StoreConfig, load_config, with_stores
from memsync.api.models import MemoryStoreResource, Session
from memsync.contracts import env

SESSION = Session(
    id="sesn_01abc",
    resources=[
        MemoryStoreResource(memory_store_id="memstore_a", name="Notes", mount_path="/mnt/memory/notes"),
        MemoryStoreResource(
            memory_store_id="memstore_b", name="Shared", mount_path="/mnt/memory/shared", access="read_only"
        ),
    ],
)


def given(*stores: tuple[str, str, str]) -> list[StoreConfig]:
    config = load_config(
        stores=[{"memory_store_id": i, "name": n, "access": a} for i, n, a in stores],
        session_id="sesn_01abc",
    )
    return config.stores


def test_memsync_stores_session_means_read_them_from_the_session() -> None:
    config = load_config(stores=env.STORES_FROM_SESSION, session_id="sesn_01abc")
    assert config.stores_from_session and config.stores == []
    with pytest.raises(ConfigError, match=r"stores \(MEMSYNC_STORES\): at least 1 store, or 'session'"):
        load_config(stores="[]")


def test_the_session_entries_keep_its_names_paths_and_access() -> None:
    entries = ss.session_entries(SESSION)
    assert [(e.memory_store_id, e.name, e.mount_path, e.access) for e in entries] == [
        ("memstore_a", "Notes", "/mnt/memory/notes", "read_write"),
        ("memstore_b", "Shared", "/mnt/memory/shared", "read_only"),
    ]
    unnamed = Session(id="sesn_x", resources=[MemoryStoreResource(memory_store_id="memstore_q")])
    assert ss.session_entries(unnamed)[0].mount_path == "/mnt/memory/memstore-q"


@pytest.mark.parametrize(
    ("mount_path", "why"),
    [("/etc/cron.d", "not under /mnt/memory/"), ("/mnt/memory/../etc", "no empty, '.' or '..' segment")],
)
def test_a_session_store_outside_the_memory_root_is_refused(mount_path: str, why: str) -> None:
    bad = Session(
        id="sesn_x",
        resources=[MemoryStoreResource(memory_store_id="memstore_a", name="n", mount_path=mount_path)],
    )
    with pytest.raises(
        ss.SessionStoresError, match=r"resources\[0\] \(memstore_a\) cannot be mounted"
    ) as info:
        ss.session_entries(bad)
    assert why in info.value.message
    assert info.value.store == "memstore_a"


def test_given_stores_that_agree_with_the_session_pass_names_and_paths_aside() -> None:
    entries = ss.session_entries(SESSION)
    same = given(("memstore_a", "Notes", "read_write"), ("memstore_b", "Shared", "read_only"))
    assert ss.disagreement(same, entries, "sesn_01abc") is None
    assert ss.mount_path_differences(same, entries) == []
    renamed = given(("memstore_a", "Other", "read_write"), ("memstore_b", "Shared", "read_only"))
    assert ss.disagreement(renamed, entries, "sesn_01abc") is None
    assert ss.mount_path_differences(renamed, entries) == [
        "spec.stores[0] mounts memstore_a at /mnt/memory/other, the session at /mnt/memory/notes"
    ]


def test_given_stores_that_disagree_with_the_session_name_the_store_and_field() -> None:
    wrong = given(("memstore_a", "Notes", "read_only"), ("memstore_z", "Z", "read_write"))
    found = ss.disagreement(wrong, ss.session_entries(SESSION), "sesn_01abc")
    assert found is not None
    message, store = found
    assert message.startswith("spec.stores disagree with session sesn_01abc: ")
    assert "spec.stores[0].access of memstore_a is read_only, the session attaches it read_write" in message
    assert "spec.stores[1] (memstore_z) is not attached to the session" in message
    assert "the session also attaches memstore_b, which spec.stores lacks" in message
    assert store == "memstore_a"


def test_the_resolved_stores_reach_the_sidecar_through_the_state_directory(tmp_path: Path) -> None:
    config = load_config(stores=env.STORES_FROM_SESSION, session_id="sesn_01abc", state_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="written by memsync mount from the session"):
        ss.load_resolved(config)  # the sidecar before any mount
    resolved = with_stores(config, ss.session_entries(SESSION))
    ss.save_resolved(resolved)
    loaded = ss.load_resolved(config)
    assert not loaded.stores_from_session
    assert [(s.memory_store_id, s.mount_path, s.access) for s in loaded.stores] == [
        ("memstore_a", "/mnt/memory/notes", "read_write"),
        ("memstore_b", "/mnt/memory/shared", "read_only"),
    ]
    given_config = load_config(stores=[{"memory_store_id": "memstore_a"}], state_dir=str(tmp_path))
    assert ss.load_resolved(given_config) is given_config  # given stores are never replaced
