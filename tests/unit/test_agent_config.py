"""The agent's configuration: every rule refuses with a message naming the field and what is allowed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memsync.agent import messages
from memsync.agent.config import ConfigError, load_config, with_stores
from memsync.contracts.stores import StoreEntry

STORE = {
    "memory_store_id": "memstore_01",
    "name": "Notes",
    "mount_path": "/mnt/memory/notes",
    "access": "read_write",
}


def cfg(**kw):
    kw.setdefault("stores", json.dumps([STORE]))
    return load_config(**kw)


def refused(**kw) -> str:
    with pytest.raises(ConfigError) as info:
        cfg(**kw)
    return str(info.value)


def test_defaults() -> None:
    c = cfg()
    assert (c.interval, c.deletions, c.flush_timeout, c.state_dir) == (
        15.0,
        "enabled",
        30.0,
        "/var/lib/memsync",
    )
    assert c.delete_window == 30.0 and c.work_secret is None and c.stores[0].access == "read_write"


@pytest.mark.parametrize("value", ["4.9", "nan", "NaN", "inf", "-inf", "-5", "0"])
def test_interval_below_five_or_not_finite_is_refused(value: str) -> None:
    assert "MEMSYNC_SYNC_INTERVAL" in refused(interval=value)


def test_interval_not_a_number() -> None:
    assert "must be a number of seconds" in refused(interval="soon")


def test_interval_five_is_fine() -> None:
    assert cfg(interval="5").interval == 5.0


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1", "3601"])
def test_flush_timeout(value: str) -> None:
    assert "MEMSYNC_FLUSH_TIMEOUT" in refused(flush_timeout=value)


def test_deletions_enum() -> None:
    message = refused(deletions="sometimes")
    assert "MEMSYNC_SYNC_DELETIONS" in message and "log_only" in message


def test_stores_required_and_json() -> None:
    assert "MEMSYNC_STORES" in refused(stores="")
    assert "not valid JSON" in refused(stores="[{")
    assert "JSON array" in refused(stores='{"a": 1}')


def test_one_to_eight_stores() -> None:
    assert "at least 1" in refused(stores="[]")
    many = [
        {**STORE, "memory_store_id": f"memstore_{i}", "mount_path": f"/mnt/memory/s{i}"} for i in range(9)
    ]
    assert "at most 8" in refused(stores=json.dumps(many))


def test_unique_ids_and_mount_paths() -> None:
    other = {**STORE, "mount_path": "/mnt/memory/other"}
    assert "memory_store_id may appear once" in refused(stores=json.dumps([STORE, other]))
    twin = {**STORE, "memory_store_id": "memstore_02"}
    assert "mount_path may appear once" in refused(stores=json.dumps([STORE, twin]))
    nested = {**STORE, "memory_store_id": "memstore_02", "mount_path": "/mnt/memory/notes/inner"}
    assert "must not nest" in refused(stores=json.dumps([STORE, nested]))


@pytest.mark.parametrize(
    "path",
    ["relative/x", "/mnt/memory/../etc", "/mnt/memory/x/", "/mnt//memory", "/", "/mnt/a\\b", "/mnt/./x"],
)
def test_mount_path_must_be_clean_absolute(path: str) -> None:
    assert messages.NOT_CLEAN_PATH in refused(stores=json.dumps([{**STORE, "mount_path": path}]))


def test_mount_path_defaults_from_the_name() -> None:
    c = cfg(stores=json.dumps([{"memory_store_id": "memstore_01", "name": "User Preferences"}]))
    assert c.stores[0].mount_path == "/mnt/memory/user-preferences"


def test_access_enum_and_id_alphabet() -> None:
    assert "read_only" in refused(stores=json.dumps([{**STORE, "access": "write"}]))
    assert "memory_store_id" in refused(stores=json.dumps([{**STORE, "memory_store_id": "../../etc"}]))


@pytest.mark.parametrize(
    "bad",
    ["sk-ant-api03-abcDEF", "SK-ANT-REQ-xyz", "sk-memsync-admin-abc", "memstore_01/x", "memstore 01", ""],
)
def test_an_id_of_the_wrong_shape_is_refused_naming_the_field_without_echoing_it(bad: str) -> None:
    store_message = refused(stores=json.dumps([{**STORE, "memory_store_id": bad}]))
    assert store_message.startswith("stores.0.memory_store_id (MEMSYNC_STORES): ")
    session_message = refused(session_id=bad or " ")
    assert session_message.startswith("session_id (MEMSYNC_SESSION_ID): ")
    for message in (store_message, session_message):
        assert bad not in message or not bad


def test_a_credential_in_the_session_stores_is_refused_before_any_request() -> None:
    config = cfg(stores="session", session_id="sesn_01")
    entry = StoreEntry(memory_store_id="sk-ant-api03-leaked", name="n", mount_path="/mnt/memory/n")
    with pytest.raises(ConfigError) as info:
        with_stores(config, [entry])
    assert "memory_store_id" in str(info.value) and "credential" in str(info.value)
    assert "leaked" not in str(info.value)


def test_secret_is_never_shown() -> None:
    c = cfg(work_secret="super-secret-value")
    assert "super-secret-value" not in repr(c) and "super-secret-value" not in str(c)
    assert c.secret_value() == "super-secret-value"


def test_test_root_remaps_every_configured_path(tmp_path: Path) -> None:
    c = cfg(test_root=str(tmp_path))
    assert c.mount_dir(c.stores[0]) == tmp_path / "mnt/memory/notes"
    assert c.state_path == tmp_path / "var/lib/memsync"
    assert c.termination_path == tmp_path / "dev/termination-log"


def test_test_delete_window() -> None:
    assert cfg(delete_window="0").delete_window == 0
    assert "MEMSYNC_TEST_DELETE_WINDOW" in refused(delete_window="-1")
    assert "MEMSYNC_TEST_DELETE_WINDOW" in refused(delete_window="nan")


def test_metrics_port() -> None:
    assert cfg(metrics_port="9477").metrics_port == 9477
    assert "MEMSYNC_METRICS_PORT" in refused(metrics_port="70000")


def test_early_sync_on_by_default_and_a_switch() -> None:
    assert cfg().early_sync is True
    assert cfg(early_sync="false").early_sync is False
    assert cfg(early_sync=" On ").early_sync is True
    assert "MEMSYNC_EARLY_SYNC" in refused(early_sync="sometimes")


@pytest.mark.parametrize("stores", ["[" * 3000, '{"a":' + "[" * 3000, "[" + "9" * 5000 + "]"])
def test_stores_json_too_deep_or_with_a_number_too_long_is_a_config_error(stores: str) -> None:
    """Found by review of the stores_env fuzz target's property: JSON nested past the recursion limit raised
    RecursionError, a number over 4,300 digits a bare ValueError, instead of a ConfigError naming the variable
    (the target's corpus holds these inputs now)."""
    with pytest.raises(ConfigError, match="MEMSYNC_STORES"):
        load_config(stores=stores)
