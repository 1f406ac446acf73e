"""The release artifacts as a release makes them: ``python -m build`` gives a wheel and an sdist that
``twine check`` accepts, and the wheel installed into a fresh virtualenv runs both of its commands and
``memsync dev`` (its embedded server, the demo store synced into a folder, Ctrl-C's final flush).

The build runs on a copy of the repository's tracked files (nothing is written into the checkout); the
fresh virtualenv installs with ``constraints.txt``, as ``make install`` and the image do.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import httpx
import pytest

import memsync
from conftest import free_port
from support.dev_process import DevProcess

REPO = Path(__file__).resolve().parents[2]
VERSION = memsync.__version__

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def run(*argv: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=1100, check=False
    )
    assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def tracked_copy(dest: Path) -> Path:
    """The tracked (and new, not ignored) files of the checkout, as a clean clone would have them."""
    names = run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=REPO)
    for name in filter(None, names.split("\0")):
        source = REPO / name
        if source.is_file() and not source.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tracked_copy(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, source)
    return out


def test_build_makes_a_wheel_and_an_sdist_that_twine_accepts(dist: Path) -> None:
    wheel = dist / f"memsync-{VERSION}-py3-none-any.whl"
    sdist = dist / f"memsync-{VERSION}.tar.gz"
    assert sorted(p.name for p in dist.iterdir()) == sorted([wheel.name, sdist.name])
    checked = run(sys.executable, "-m", "twine", "check", "--strict", wheel, sdist)
    assert checked.count("PASSED") == 2, checked
    files = set(zipfile.ZipFile(wheel).namelist())
    assert {"memsync/py.typed", "memsync/cli/__init__.py", "memsync/crd/core_v1.json"} <= files
    ui = REPO / "operator" / "memsync" / "server" / "ui"
    shipped = {
        f"memsync/server/ui/{p.relative_to(ui)}"
        for p in ui.glob("*/*")
        if p.suffix in (".html", ".css", ".js")
    }
    assert len(shipped) >= 15 and shipped <= files, (
        shipped - files
    )  # the store browser's templates and assets
    assert not any(name.startswith(("tests/", "bench/")) for name in files)
    entry_points = zipfile.ZipFile(wheel).read(f"memsync-{VERSION}.dist-info/entry_points.txt").decode()
    assert "memsync = memsync.cli:main" in entry_points
    assert "kubectl-memsync = memsync.cli:kubectl_plugin" in entry_points
    with tarfile.open(sdist) as archive:
        members = {m.name.split("/", 1)[1] for m in archive.getmembers() if "/" in m.name}
    assert {"LICENSE", "README.md", "pyproject.toml", "operator/memsync/__init__.py"} <= members


def test_the_wheel_installs_into_a_fresh_venv_and_runs(dist: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    wheel = dist / f"memsync-{VERSION}-py3-none-any.whl"
    run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", "-c", REPO / "constraints.txt", wheel)
    assert run(venv / "bin" / "memsync", "--version").strip() == f"memsync, version {VERSION}"
    assert "Usage: memsync [OPTIONS] COMMAND" in run(venv / "bin" / "memsync", "--help")
    assert "Usage: kubectl memsync status" in run(venv / "bin" / "kubectl-memsync", "status", "--help")
    # the installed package is the wheel's, not this checkout's
    where = run(venv / "bin" / "python", "-c", "import memsync; print(memsync.__file__)").strip()
    assert where.startswith(str(venv))


def test_the_installed_wheel_runs_memsync_dev_and_its_final_flush_saves(dist: Path, tmp_path: Path) -> None:
    """The runtime dependencies alone (no test extra) run the whole local lifecycle, twice over one store."""
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    wheel = dist / f"memsync-{VERSION}-py3-none-any.whl"
    run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", "-c", REPO / "constraints.txt", wheel)
    work, port = tmp_path / "work", free_port()
    work.mkdir()
    folder = work / ".memsync" / "mnt" / "memory" / "demo-memory"
    runs: list[DevProcess] = []
    try:
        runs.append(DevProcess(work, port, memsync=[venv / "bin" / "memsync"]))
        runs[0].wait_mounted()
        # the store browser's templates and assets came with the wheel
        signin = httpx.get(f"http://127.0.0.1:{port}/ui/signin", timeout=10)
        assert signin.status_code == 200 and 'action="/ui/signin"' in signin.text
        assert httpx.get(f"http://127.0.0.1:{port}/ui/static/ui.js", timeout=10).status_code == 200
        (folder / "from-the-wheel.md").write_text("written under the installed wheel\n")
        assert runs[0].interrupt() == 0, runs[0].output()
        assert "memory flush outcome" in runs[0].output() and not folder.exists()
        runs.append(DevProcess(work, port, memsync=[venv / "bin" / "memsync"]))
        runs[1].wait_mounted()
        assert (folder / "from-the-wheel.md").read_text() == "written under the installed wheel\n"
        assert runs[1].interrupt() == 0, runs[1].output()
    finally:
        for each in runs:
            each.stop()
