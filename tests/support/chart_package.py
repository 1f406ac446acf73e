"""``make chart`` as a release runs it: the packaged chart (.tgz) and its repository index, in a folder."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import memsync

REPO = Path(__file__).resolve().parents[2]


def package_chart(out: Path, helm: Path, image: str, tag: str = "", url: str = "") -> Path:
    """Run ``make chart`` into ``out``; the path of ``memsync-VERSION.tgz``."""
    make = shutil.which("make")
    assert make is not None, "make is needed to package the chart"
    argv = [make, "--no-print-directory", "-C", str(REPO), "chart", f"HELM={helm}", f"CHART_OUT={out}"]
    argv += [f"CHART_IMAGE={image}", f"CHART_IMAGE_TAG={tag}", f"CHART_URL={url}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"make chart: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return out / f"memsync-{memsync.__version__}.tgz"
