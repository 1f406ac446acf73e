"""The stores environment (``MEMSYNC_STORES``: contracts/stores.py, read by agent/config.py): any value is a
configuration or a ``ConfigError`` naming the variable, an accepted one only mounts where it may, and what
the operator encodes the agent reads back unchanged.

For any text: ``load_config(stores=...)`` returns a configuration or raises only ``ConfigError`` (its message
names ``MEMSYNC_STORES`` or a field of it). An accepted configuration has 1-8 stores, each id accepted by the
id rule and each id once, and mount paths that are clean absolute paths, each once and none inside another.
For any stores the operator may list (valid ids, names, clean distinct mount paths or none, either access),
``load_config(stores=encode_stores(entries))`` gives the same entries back (an empty mount path as the
store's default one).
"""

from __future__ import annotations

import json

from harness import Provider, holds, one_of, pick

from memsync.agent.config import ConfigError, load_config
from memsync.api.ids import id_problem
from memsync.api.paths import default_mount_path, is_ancestor, is_clean_absolute_path
from memsync.contracts.stores import StoreEntry, encode_stores

KEYS = ("memory_store_id", "name", "mount_path", "access", "other")
VALUES: tuple[object, ...] = (
    "memstore_a",
    "memstore_b",
    "sk-ant-oops",
    "",
    "/mnt/memory/a",
    "/mnt/memory/a/b",
    "/mnt/memory/../etc",
    "relative",
    "read_only",
    "read_write",
    "write",
    None,
    0,
    True,
    [],
    {},
    "\x00",
    "\ud800",
    1e309,
)


def structured(fdp: Provider) -> str:
    """A JSON array of store-like objects built from the keys and values on the rules' edges."""
    items: list[object] = []
    for _ in range(fdp.ConsumeIntInRange(0, 10)):
        if fdp.ConsumeIntInRange(0, 7) == 0:
            items.append(pick(fdp, VALUES))
            continue
        item = {}
        for _ in range(fdp.ConsumeIntInRange(0, 5)):
            value = (
                pick(fdp, VALUES) if fdp.ConsumeBool() else fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 30))
            )
            item[pick(fdp, KEYS)] = value
        items.append(item)
    return json.dumps(items)


def check_loaded(text: str) -> None:
    try:
        config = load_config(stores=text)
    except ConfigError as exc:
        holds("MEMSYNC_STORES" in str(exc) or "stores" in str(exc), f"load_config({text!r}): {exc}")
        return
    stores = config.stores
    holds(1 <= len(stores) <= 8 or config.stores_from_session, f"{text!r}: {len(stores)} stores accepted")
    ids = [s.memory_store_id for s in stores]
    holds(all(id_problem(i) is None for i in ids) and len(set(ids)) == len(ids), f"{text!r}: ids {ids}")
    mounts = [s.mount_path for s in stores]
    holds(all(is_clean_absolute_path(m) for m in mounts), f"{text!r}: mount paths {mounts}")
    holds(len(set(mounts)) == len(mounts), f"{text!r}: a mount path twice")
    holds(not any(is_ancestor(a, b) for a in mounts for b in mounts), f"{text!r}: nested mounts {mounts}")


def entries(fdp: Provider) -> list[StoreEntry]:
    out = []
    for i in range(fdp.ConsumeIntInRange(1, 8)):
        name = fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 40))
        store_id = f"memstore_{i}" + "".join(
            pick(fdp, "abcxyz019_-") for _ in range(fdp.ConsumeIntInRange(0, 20))
        )
        mount = f"/mnt/memory/m{i}" if fdp.ConsumeBool() else ""
        access = "read_only" if fdp.ConsumeBool() else "read_write"
        out.append(StoreEntry(memory_store_id=store_id, name=name, mount_path=mount, access=access))
    return out


def check_round_trip(given: list[StoreEntry]) -> None:
    mounts = [e.mount_path or default_mount_path(e.name, e.memory_store_id) for e in given]
    if len(set(mounts)) != len(mounts) or any(is_ancestor(a, b) for a in mounts for b in mounts):
        return  # two defaults may clash (names with the same slug): refused, as checked above
    config = load_config(stores=encode_stores(given))
    back = [StoreEntry.model_validate(s.model_dump()) for s in config.stores]
    expected = [e.model_copy(update={"mount_path": m}) for e, m in zip(given, mounts, strict=True)]
    holds(back == expected, f"{given} came back as {back}")


def test_one_input(data: bytes) -> None:
    one_of(
        data,
        lambda fdp: check_loaded(fdp.ConsumeUnicode(fdp.remaining_bytes())),
        lambda fdp: check_loaded(structured(fdp)),
        lambda fdp: check_round_trip(entries(fdp)),
    )
