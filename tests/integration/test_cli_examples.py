"""Every command docs/cli.md shows in its examples that needs no cluster runs as shown, against a real store
server: exit code 0 and no traceback. The example ids are replaced by real ones made for the purpose."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from conftest import RunningStoreServer

REPO = Path(__file__).resolve().parents[2]
CLI_DOC = (REPO / "docs" / "cli.md").read_text()
NEEDS_A_CLUSTER = ("memsync status",)
EXAMPLE_STORE, EXAMPLE_VERSION = "memstore_01abc", "memver_01xyz"


def shown_commands(doc: str) -> list[str]:
    """The ``memsync ...`` commands of the doc's ``sh`` blocks (also inside ``$(...)``), without comments
    and redirections, in order."""
    blocks = re.findall(r"```sh\n(.*?)```", doc, re.S)
    found: list[str] = []
    for line in "\n".join(blocks).splitlines():
        code = line.split("  #", 1)[0].strip()
        inner = re.findall(r"\$\((memsync [^)]*)\)", code)
        for command in inner or ([code] if code.startswith("memsync ") else []):
            found.append(command.split(" > ", 1)[0].strip())
    return [c for c in found if not c.startswith(NEEDS_A_CLUSTER)]


def test_the_doc_shows_store_and_completion_examples() -> None:
    commands = shown_commands(CLI_DOC)
    assert any(c.startswith("memsync store cat ") for c in commands)
    assert any(c.startswith("memsync completion ") for c in commands)
    assert not [c for c in commands if c.startswith("memsync status")]


async def test_every_example_without_a_cluster_runs_as_shown(store_server: RunningStoreServer) -> None:
    async with store_server.admin_client() as admin:
        store = await admin.create_store("Examples")
        leaked = await admin.create_memory(store.id, "/notes/leak.md", "token=not-really-a-secret")
        await admin.delete_memory(store.id, leaked.id)
        versions = [v async for v in admin.list_versions(store.id, memory_id=leaked.id)]
    written = next(v.id for v in versions if v.operation == "created")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    env.update(MEMSYNC_STORE_URL=store_server.url, MEMSYNC_ADMIN_KEY=store_server.admin_key)
    ran = []
    for command in shown_commands(CLI_DOC):
        line = command.replace(EXAMPLE_STORE, store.id).replace(EXAMPLE_VERSION, written)
        argv = shlex.split(line)
        result = subprocess.run(
            [sys.executable, "-m", "memsync", *argv[1:]],
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, (line, result.stderr)
        assert "Traceback" not in result.stderr, line
        ran.append(argv[1])
    assert {"store", "completion"} <= set(ran)
