"""``-o table|wide|json|yaml`` (one listing shape), ``status --watch``, and picking deleted memories."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from memsync.api.models import MemoryVersion
from memsync.cli import status as status_cli
from memsync.cli.output import dump, listing, output_options, timestamp
from memsync.cli.store.inspect import deleted_only, render_deleted


@click.command()
@output_options
def shape(*, output: str) -> None:
    click.echo(output)


@pytest.mark.parametrize(
    ("args", "printed"),
    [([], "table"), (["-o", "wide"], "wide"), (["--json"], "json"), (["-o", "yaml"], "yaml")],
)
def test_output_option_and_its_deprecated_json_alias(args: list[str], printed: str) -> None:
    result = CliRunner().invoke(shape, args)
    assert result.exit_code == 0 and result.output.strip() == printed


def test_json_alias_refuses_another_format() -> None:
    result = CliRunner().invoke(shape, ["--json", "-o", "wide"])
    assert result.exit_code == 2 and "--json is -o json" in result.output


def test_one_listing_document_in_json_and_yaml() -> None:
    data = listing([{"id": "a", "path": "/é.md"}, {"id": "b", "path": None}])
    assert json.loads(dump(data, "json")) == {
        "items": [{"id": "a", "path": "/é.md"}, {"id": "b", "path": None}]
    }
    assert yaml.safe_load(dump(data, "yaml")) == data
    assert "/é.md" in dump(data, "yaml")  # text, not escapes
    assert (
        timestamp(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05Z"
        and timestamp(None) == "-"
    )


def _deletion(memory_id: str, path: str, at: int) -> MemoryVersion:
    return MemoryVersion(
        id=f"memver_{memory_id}_{at}",
        memory_id=memory_id,
        memory_store_id="memstore_x",
        operation="deleted",
        path=path,
        created_at=datetime(2026, 1, 1, 0, 0, at, tzinfo=UTC),
    )


def test_deleted_only_keeps_the_newest_deletion_of_memories_not_live_below_the_prefix() -> None:
    newest_first = [
        _deletion("mem_a", "/notes/a.md", 9),
        _deletion("mem_b", "/b.md", 8),
        _deletion("mem_a", "/notes/old-a.md", 7),
        _deletion("mem_live", "/notes/c.md", 6),
    ]
    picked = deleted_only(newest_first, live={"mem_live"}, prefix=None)
    assert [(v.memory_id, v.path) for v in picked] == [("mem_a", "/notes/a.md"), ("mem_b", "/b.md")]
    assert [v.memory_id for v in deleted_only(newest_first, set(), "/notes/")] == ["mem_a", "mem_live"]
    text = render_deleted(picked, wide=True).splitlines()
    assert text[0].split() == ["PATH", "DELETED", "BY", "MEMORY", "DELETION", "VERSION"]
    assert text[1].split() == ["/notes/a.md", "2026-01-01T00:00:09Z", "-", "mem_a", "memver_mem_a_9"]


def test_status_watch_prints_again_only_on_change_and_ctrl_c_exits_0(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[bool] = []
    conn = SimpleNamespace(namespace="agents", api=SimpleNamespace(close=lambda: closed.append(True)))
    monkeypatch.setattr("memsync.cli.status_cluster.connect", lambda kubeconfig, context: conn)
    fetched = iter([({"v": 1}, "first", ""), ({"v": 1}, "first again", ""), ({"v": 2}, "second", "")])
    monkeypatch.setattr(status_cli, "_fetch", lambda c, q: next(fetched))
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) > 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(status_cli.time, "sleep", sleep)
    result: Any = CliRunner().invoke(status_cli.status, ["--watch", "--interval", "3", "-o", "wide"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["first", "second"]  # unchanged data is not printed again
    assert sleeps == [3.0, 3.0, 3.0] and closed == [True]
