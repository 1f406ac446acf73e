"""The contracts between memsync's processes: defined once (``memsync.contracts``), used by both sides."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from memsync.contracts import env
from memsync.contracts.health import StoreHealth, SyncHealth, decode_health, encode_health
from memsync.contracts.report import (
    REPORT_MAX_BYTES,
    FlushReport,
    MountFailure,
    MountReport,
    StoreCounts,
    parse_report,
    render_report,
)

PACKAGE = Path(env.__file__).resolve().parents[1]
ENV_NAMES = sorted(
    value
    for name, value in vars(env).items()
    if name.isupper() and isinstance(value, str) and value.isupper()
)
REPORT_FIELDS = [*sorted(f.name for f in dataclasses.fields(StoreCounts)), "totals"]


# The store server and the wire models speak the store API (whose "deleted" is a version's operation), and
# the scripted agent writes its own report: neither reads or writes the sync agent's termination report.
OTHER_CONTRACTS = ("server/", "api/", "devtools/")
# Words that happen to equal a report field but name something else: `memsync dev`'s folders for the files it
# keeps (.memsync/refused, .memsync/conflicts), the store API's "deleted" operation asked for by `store
# memories --deleted`, and the status view's "refused" store health.
SAME_WORD_OTHER_MEANING = {
    "cli/dev_keep.py": {"refused", "conflicts"},
    "cli/store/inspect.py": {"deleted"},
    "status/view.py": {"refused"},
}


def _string_constants() -> dict[str, set[str]]:
    """string literal -> the runtime modules (relative paths) where it is written."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.setdefault(node.value, set()).add(rel)
    return found


@pytest.fixture(scope="module")
def constants() -> dict[str, set[str]]:
    return _string_constants()


@pytest.mark.parametrize("name", ENV_NAMES)
def test_each_env_name_is_spelled_in_one_runtime_module(name: str, constants: dict[str, set[str]]) -> None:
    assert constants.get(name) == {"contracts/env.py"}


@pytest.mark.parametrize("field", REPORT_FIELDS)
def test_each_report_field_is_spelled_in_one_runtime_module(
    field: str, constants: dict[str, set[str]]
) -> None:
    where = {
        m
        for m in constants.get(field, set())
        if not m.startswith(OTHER_CONTRACTS) and field not in SAME_WORD_OTHER_MEANING.get(m, set())
    }
    assert where <= {"contracts/report.py"}  # a dataclass field is an identifier there, not a string


def test_env_names_cover_what_the_pod_sets() -> None:
    assert {"MEMSYNC_STORES", "ANTHROPIC_WORK_SECRET", "MEMSYNC_CONFLICT_POLICY"} <= set(ENV_NAMES)
    assert all(env.is_reserved(name) for name in ENV_NAMES)
    assert not env.is_reserved("HTTPS_PROXY") and env.is_reserved("memsync_anything")


@pytest.mark.parametrize(
    "report",
    [
        MountReport(memories={"memstore_a": 3}),
        MountFailure(store=None, error="boom"),
        FlushReport(
            complete=False,
            stores={"memstore_a": StoreCounts(uploaded=1, unsent=2, unreadable=1, unreadable_paths=["x.md"])},
            totals={"memstore_a": StoreCounts(uploaded=5, downloaded=7)},
        ),
    ],
)
def test_what_the_agent_writes_the_operator_reads(report: MountReport | MountFailure | FlushReport) -> None:
    assert parse_report(render_report(report)) == report


@pytest.mark.parametrize(
    "error",
    [
        # found by the report fuzz target: the error was cut by its UTF-8 length, but the line escapes every
        # character outside ASCII (6 bytes each), so the report came out at 4,021 bytes
        "\u0a0a\u7726\u7777\u7777" + "\ud7d7" * 9 + "b" * 5000,
        "é" * 300 + "a" * 3000,  # 4,295 bytes before: past the kubelet's 4 KiB, so nothing could be read
        "\U0001f600" * 50 + "x" * 4000,
        "\n" * 3000,
    ],
)
def test_a_long_error_is_cut_to_fit_however_it_is_escaped(error: str) -> None:
    line = render_report(MountFailure(store="memstore_a", error=error))
    assert len(line.encode("utf-8")) <= REPORT_MAX_BYTES
    back = parse_report(line)
    assert isinstance(back, MountFailure)
    assert back.error.endswith("...")
    kept = back.error.removesuffix("...")
    assert error.startswith(kept)
    assert len(line.encode("utf-8")) > REPORT_MAX_BYTES - 12  # cut no shorter than needed


def test_the_report_keeps_its_wire_shape_for_older_readers() -> None:
    text = render_report(
        FlushReport(complete=True, stores={"memstore_a": StoreCounts(uploaded=2, deleted=1)})
    )
    assert text == (
        '{"complete":true,"phase":"flushed","stores":{"memstore_a":'
        '{"conflicts":0,"deleted":1,"refused":0,"unsent":0,"uploaded":2}}}'
    )


def test_the_health_document_is_valid_utf8_when_a_text_is_not_valid_unicode() -> None:
    """Found by the health fuzz target: a lone surrogate (an error naming a file whose name was not UTF-8,
    as Python escapes it) made encode_health raise (in a value) or write bytes no UTF-8 reader takes (in a
    key). Each is written as U+FFFD now; the rest of the document is unchanged."""
    health = SyncHealth(
        healthy=False,
        stores={
            "memstore_a": StoreHealth(
                healthy=False,
                outcome="failed",
                last_error="cannot read /mnt/memory/notes/caf\udce9.md",
                totals=StoreCounts(uploaded=1, unreadable=1, unreadable_paths=["caf\udce9.md"]),
            )
        },
    )
    document = encode_health(health)
    text = document.decode("utf-8")
    assert json.loads(text)["stores"]["memstore_a"]["outcome"] == "failed"
    back = decode_health(document)
    assert back is not None
    assert back.stores["memstore_a"].last_error == "cannot read /mnt/memory/notes/caf\ufffd.md"
    assert back.stores["memstore_a"].totals.unreadable_paths == ["caf\ufffd.md"]
    keyed = decode_health(encode_health(SyncHealth(healthy=True, stores={"\udbdb": StoreHealth()})))
    assert keyed is not None
    assert list(keyed.stores) == ["\ufffd"]
    assert back.stores["memstore_a"].totals.uploaded == 1
    ordinary = SyncHealth(healthy=True, stores={"memstore_a": StoreHealth(last_error="é ok")})
    assert decode_health(encode_health(ordinary)) == ordinary


@pytest.mark.parametrize("text", ['{"phase":' + "[" * 3000, "log line\n" + '{"a":' + "{" * 3000])
def test_a_report_nested_past_the_recursion_limit_reads_as_none(text: str) -> None:
    """Found by review of the report fuzz target's property (parse_report never fails): such a termination
    message raised RecursionError into the operator (the target's corpus holds these inputs now)."""
    assert parse_report(text) is None
