"""The one schema renders, for each backend, exactly the DDL the earlier releases issued (their statements
are kept in ``data/server_schema_v3.json``, taken from the per-backend migrations before they were folded
into one schema): a database created by any release still opens, is recognised at its version and upgrades
with the same statements. Later versions are only ever appended."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memsync.server.storage import migrations

_RECORDED = json.loads((Path(__file__).parent / "data" / "server_schema_v3.json").read_text())


@pytest.mark.parametrize("backend", ["SQLITE", "POSTGRES"])
def test_each_backend_gets_the_recorded_ddl(backend: str) -> None:
    rendered = [
        {"version": m.version, "description": m.description, "statements": list(m.statements)}
        for m in getattr(migrations, backend)
    ]
    recorded = _RECORDED[backend]
    assert rendered[: len(recorded)] == recorded
    assert [m["version"] for m in rendered] == list(range(1, len(rendered) + 1))


def test_the_meta_table_is_unchanged() -> None:
    assert _RECORDED["META_TABLE"] == migrations.META_TABLE
