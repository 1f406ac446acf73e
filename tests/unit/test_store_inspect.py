"""Pure parts of the store admin commands: sizes, the memory tree, the history table, progress steps."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from memsync.api.models import ApiActor, Memory, MemoryVersion, SessionActor
from memsync.cli.store import store
from memsync.cli.store.inspect import actor, human_size, render_history, render_tree
from memsync.cli.store.transfer import crossed_step

T = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def memory(path: str, size: int, n: int) -> Memory:
    return Memory(
        id=f"mem_{n}",
        memory_store_id="memstore_x",
        path=path,
        content_sha256="0" * 64,
        content_size_bytes=size,
        memory_version_id=f"memver_{n}",
        created_at=T,
        updated_at=T,
    )


def test_human_size() -> None:
    assert [human_size(n) for n in (0, 1023, 1024, 1536, 5 * 1024 * 1024, 3 * 1024**3)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 KiB",
        "5.0 MiB",
        "3072.0 MiB",
    ]


def test_tree_groups_folders_sorts_by_bytes_and_aligns_details() -> None:
    found = [
        memory("/b.md", 10, 1),
        memory("/a/z.md", 2048, 2),
        memory("/a/b/c.md", 1, 3),
        memory("/a-b", 0, 4),
    ]
    assert render_tree("memstore_x", found).splitlines() == [
        "memstore_x (4 memories, 2.0 KiB)",
        "├── a/",
        "│   ├── b/",
        "│   │   └── c.md       1 B   mem_3",
        "│   └── z.md       2.0 KiB   mem_2",
        "├── a-b                0 B   mem_4",
        "└── b.md              10 B   mem_1",
    ]
    assert render_tree("memstore_x", [memory("/only", 1, 9)]).splitlines()[0] == "memstore_x (1 memory, 1 B)"
    assert render_tree("memstore_x", []) == "memstore_x (0 memories, 0 B)"


def test_history_table_names_who_wrote_each_version() -> None:
    versions = [
        MemoryVersion(
            id="memver_2",
            memory_id="mem_1",
            memory_store_id="memstore_x",
            operation="modified",
            content_sha256="ab" * 32,
            content_size_bytes=12,
            path="/a.md",
            created_at=T,
            created_by=SessionActor(session_id="sesn_1"),
        ),
        MemoryVersion(
            id="memver_1",
            memory_id="mem_1",
            memory_store_id="memstore_x",
            operation="created",
            created_at=T,
            created_by=ApiActor(api_key_id="apikey_1"),
            redacted_at=T,
        ),
    ]
    assert actor(versions[0]) == "sesn_1" and actor(versions[1]) == "apikey_1"
    rows = [line.split("   ") for line in render_history(versions).splitlines()]
    assert [c.strip() for c in rows[1] if c.strip()] == [
        "memver_2",
        "modified",
        "2026-01-02T03:04:05Z",
        "sesn_1",
        "12 B",
        "abababababab",
        "/a.md",
        "no",
    ]
    assert [c.strip() for c in rows[2] if c.strip()][-1] == "2026-01-02T03:04:05Z"


def test_progress_lines_every_ten_percent() -> None:
    assert [d for d in range(1, 26) if crossed_step(d, 25)] == [3, 5, 8, 10, 13, 15, 18, 20, 23, 25]
    assert [d for d in range(1, 4) if crossed_step(d, 3)] == [1, 2, 3]
    assert not crossed_step(0, 10) and not crossed_step(1, 0)


def test_the_store_group_lists_every_command_and_loads_each() -> None:
    """The group is a table (``memsync.cli.store.COMMANDS``): each entry loads the command it names."""
    ctx = click.Context(store)
    assert store.list_commands(ctx) == [
        "admin-key",
        "archive",
        "backup",
        "cat",
        "create",
        "delete",
        "export",
        "history",
        "import",
        "list",
        "memories",
        "redact",
        "restore",
        "serve",
        "show",
        "token",
        "viewer-key",
    ]
    for name in store.list_commands(ctx):
        command = store.get_command(ctx, name)
        assert command is not None and command.name == name
