"""The sync agent's termination report (contracts/report.py): the operator's parser never fails, and every
report the agent renders fits the kubelet's 4 KiB and reads back as what was reported.

For any text (and any JSON value in place of it): ``parse_report`` returns None or a report, raising nothing;
counts read are non-negative integers, path samples at most 5 strings, a failure's error is non-blank and
at most 4,096 characters. For any report the agent can write (at most 8 stores, ids by the id rule, any
counts, paths and error text): ``render_report`` gives one line of at most ``REPORT_MAX_BYTES`` bytes of
UTF-8, and parsing it gives the report back, except for what rendering documents it drops to fit: the path
samples first, then the end of a failure's error (cut, ending in '...'), then the running totals.
"""

from __future__ import annotations

import json
from dataclasses import fields, replace

from harness import Provider, holds, pick, provider

from memsync.contracts.report import (
    BASE_COUNTS,
    MESSAGE_LIMIT,
    REPORT_MAX_BYTES,
    FlushReport,
    MountFailure,
    MountReport,
    Report,
    StoreCounts,
    parse_report,
    render_report,
)

ID_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_-"
COUNTS = tuple(f.name for f in fields(StoreCounts) if not f.name.endswith("_paths"))
PATHS = tuple(f.name for f in fields(StoreCounts) if f.name.endswith("_paths"))


def check_parsed(report: Report | None, text: object) -> None:
    if report is None:
        return
    if isinstance(report, MountFailure):
        holds(
            bool(report.error.strip()) and len(report.error) <= MESSAGE_LIMIT,
            f"{text!r}: error {report.error!r}",
        )
        holds(report.store is None or isinstance(report.store, str), f"{text!r}: store {report.store!r}")
    elif isinstance(report, MountReport):
        holds(all(isinstance(n, int) and n >= 0 for n in report.memories.values()), f"{text!r}: {report}")
    else:
        for counts in [*report.stores.values(), *report.totals.values()]:
            holds(all(getattr(counts, n) >= 0 for n in COUNTS), f"{text!r}: a negative count in {counts}")
            holds(all(len(getattr(counts, n)) <= 5 for n in PATHS), f"{text!r}: over 5 paths in {counts}")


def store_id(fdp: Provider) -> str:
    return "memstore_" + "".join(pick(fdp, ID_CHARS) for _ in range(fdp.ConsumeIntInRange(1, 119)))


def counts(fdp: Provider) -> StoreCounts:
    values: dict[str, object] = {}
    for name in COUNTS:
        if fdp.ConsumeBool():
            values[name] = (
                fdp.ConsumeIntInRange(0, 2**63 - 1) if fdp.ConsumeBool() else fdp.ConsumeIntInRange(0, 9)
            )
    for name in PATHS:
        if fdp.ConsumeBool():
            values[name] = [
                "/" + fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 300))
                for _ in range(fdp.ConsumeIntInRange(0, 5))
            ]
    return StoreCounts(**values)  # type: ignore[arg-type]


def long_text(fdp: Provider) -> str:
    """An error message as long ones are: runs of plain text and of any characters, up to a few kB."""
    runs = []
    for _ in range(fdp.ConsumeIntInRange(0, 6)):
        if fdp.ConsumeBool():
            runs.append(pick(fdp, "ab /.-") * fdp.ConsumeIntInRange(0, 3000))
        else:
            runs.append(fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 200)))
    return "".join(runs)


def report_from(fdp: Provider) -> Report:
    kind = fdp.ConsumeIntInRange(0, 2)
    ids = [store_id(fdp) for _ in range(fdp.ConsumeIntInRange(0, 8))]
    if kind == 0:
        return MountReport(memories={i: fdp.ConsumeIntInRange(0, 10_000) for i in ids})
    if kind == 1:
        error = long_text(fdp)
        return MountFailure(store=ids[0] if ids else None, error=error if error.strip() else "x")
    stores = {i: counts(fdp) for i in ids}
    totals = {i: counts(fdp) for i in ids if fdp.ConsumeBool()}
    return FlushReport(complete=fdp.ConsumeBool(), stores=stores, totals=totals)


def as_json_reads(text: str) -> str:
    """``text`` as JSON reads it back: its escapes join a high and a low lone surrogate into one character."""
    read: str = json.loads(json.dumps(text))
    return read


def without_samples(c: StoreCounts) -> StoreCounts:
    return replace(c, **{n: [] for n in PATHS})


def as_sent(c: StoreCounts) -> StoreCounts:
    return replace(c, **{n: [as_json_reads(p) for p in getattr(c, n)] for n in PATHS})


def as_totals(c: StoreCounts) -> StoreCounts:
    """What a report's totals carry: the counts set, never the samples, and the base counts always."""
    kept = {n: getattr(c, n) for n in COUNTS if n in BASE_COUNTS or getattr(c, n)}
    return StoreCounts(**kept)


def check_round_trip(report: Report) -> None:
    line = render_report(report)
    holds(
        len(line.encode("utf-8")) <= REPORT_MAX_BYTES,
        f"rendered report of {len(line.encode())} bytes: {report}",
    )
    holds("\n" not in line, "the rendered report is more than one line")
    back = parse_report(line)
    if isinstance(report, MountFailure):
        holds(isinstance(back, MountFailure) and back.store == report.store, f"{report} came back as {back}")
        assert isinstance(back, MountFailure)
        kept = back.error.removesuffix("...")
        sent = as_json_reads(report.error)
        full = sent[:MESSAGE_LIMIT]
        holds(back.error == full or (back.error.endswith("...") and sent.startswith(kept)), f"{back.error!r}")
        return
    if isinstance(report, MountReport):
        holds(back == report, f"{report} came back as {back}")
        return
    assert isinstance(back, FlushReport)
    totals = {sid: as_totals(c) for sid, c in report.totals.items()}
    full = replace(report, stores={sid: as_sent(c) for sid, c in report.stores.items()}, totals=totals)
    lean = replace(full, stores={sid: without_samples(c) for sid, c in report.stores.items()})
    holds(back in (full, lean, replace(lean, totals={})), f"{report} came back as {back}")


def test_one_input(data: bytes) -> None:
    fdp = provider(data)
    if fdp.ConsumeBool():
        text = fdp.ConsumeUnicode(fdp.remaining_bytes())
        check_parsed(parse_report(text), text)
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except (ValueError, RecursionError):
                return
            check_parsed(parse_report(value), value)
        return
    check_round_trip(report_from(fdp))
