"""The sidecar's health document (contracts/health.py): the operator's decoder never fails, and what the
sidecar encodes decodes back unchanged.

For any bytes or text: ``decode_health`` returns None or a ``SyncHealth``, raising nothing. For any health
the sidecar can hold (store ids by the id rule, any outcome, time and error text, non-negative counts, any
path samples): ``encode_health`` gives valid UTF-8 JSON and ``decode_health`` of it gives the same health
back, where a lone surrogate in a text (a file name that was not UTF-8, as Python escapes it) reads as a
replacement character.
"""

from __future__ import annotations

import re
from dataclasses import fields, replace

from harness import Provider, holds, pick, provider

from memsync.contracts.health import StoreHealth, SyncHealth, decode_health, encode_health
from memsync.contracts.report import StoreCounts

COUNTS = tuple(f.name for f in fields(StoreCounts) if not f.name.endswith("_paths"))
PATHS = tuple(f.name for f in fields(StoreCounts) if f.name.endswith("_paths"))


def text(fdp: Provider, most: int) -> str:
    return fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, most))


LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def readable(value: str) -> str:
    """``value`` as the document carries it: each lone surrogate a replacement character."""
    return LONE_SURROGATE.sub("\ufffd", value)


def as_read(health: SyncHealth) -> SyncHealth:
    stores = {}
    for sid, h in health.stores.items():
        totals = replace(h.totals, **{n: [readable(p) for p in getattr(h.totals, n)] for n in PATHS})
        stores[sid] = replace(
            h,
            outcome=readable(h.outcome),
            last_success=None if h.last_success is None else readable(h.last_success),
            last_error=None if h.last_error is None else readable(h.last_error),
            totals=totals,
        )
    return SyncHealth(healthy=health.healthy, stores=stores)


def store_health(fdp: Provider) -> StoreHealth:
    totals = StoreCounts(
        **{n: fdp.ConsumeIntInRange(0, 2**63 - 1) for n in COUNTS if fdp.ConsumeBool()},  # type: ignore[arg-type]
        **{
            n: [text(fdp, 100) for _ in range(fdp.ConsumeIntInRange(0, 5))]
            for n in PATHS
            if fdp.ConsumeBool()
        },
    )
    return StoreHealth(
        healthy=fdp.ConsumeBool(),
        outcome=text(fdp, 20),
        last_success=text(fdp, 30) if fdp.ConsumeBool() else None,
        last_error=text(fdp, 600) if fdp.ConsumeBool() else None,
        failing_passes=fdp.ConsumeIntInRange(0, 2**31),
        totals=totals,
    )


def test_one_input(data: bytes) -> None:
    fdp = provider(data)
    mode = fdp.ConsumeIntInRange(0, 2)
    if mode == 0:
        raw = fdp.ConsumeBytes(fdp.remaining_bytes())
        decoded = decode_health(raw)
        holds(decoded is None or isinstance(decoded, SyncHealth), f"decode_health({raw!r}) = {decoded!r}")
    elif mode == 1:
        raw_text = fdp.ConsumeUnicode(fdp.remaining_bytes())
        decoded = decode_health(raw_text)
        holds(
            decoded is None or isinstance(decoded, SyncHealth), f"decode_health({raw_text!r}) = {decoded!r}"
        )
    else:
        ids = [f"memstore_{i}" + "".join(pick(fdp, "az09_-") for _ in range(8)) for i in range(8)]
        stores = {ids[i]: store_health(fdp) for i in range(fdp.ConsumeIntInRange(0, 8))}
        health = SyncHealth(healthy=fdp.ConsumeBool(), stores=stores)
        document = encode_health(health)
        try:
            document.decode("utf-8")
        except UnicodeDecodeError as exc:
            holds(False, f"encode_health wrote invalid UTF-8 ({exc}) for {health}")
        back = decode_health(document)
        holds(back == as_read(health), f"{health} came back as {back}")
