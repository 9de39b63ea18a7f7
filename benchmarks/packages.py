"""How each package variant runs: its interpreter, its environment, where it imports from.

* ``ours``: this interpreter, ``PYTHONPATH`` = a copy of ``src/`` taken when the run
  starts (see snapshot_ours), then ``benchmarks/`` (for unleased_queues);
* ``ours-unleased``: the same, with ``unleased_queues.Unleased<queue>`` as queue class;
* ``ours-fleet``: the same, with SCHEDULER_FLEET_LIMITS on (fleet_speed.py);
* ``original``: the Python of benchmarks/.venv-original, ``PYTHONPATH`` removed;
* ``memory``: this interpreter with Scrapy's own scheduler (the ceiling crawl).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from _util import HERE
from original_venv import clean_env

#: Ours as is (leases), ours popping without leases (see unleased_queues.py), and ours with
#: SCHEDULER_FLEET_LIMITS on (per-slot queues; see crawls.FLEET_SETTINGS).
OURS_VARIANTS = ("ours", "ours-unleased", "ours-fleet")


def snapshot_ours(src: Path) -> tuple[Path, str]:
    """Copy ``src/scrapy_redis`` to a temporary folder, to import ours from there.

    Edits made to src/ during a run then cannot mix two versions. Returns the
    folder and a description of the version: git commit, and whether src/ has
    uncommitted changes.
    """
    dest = Path(tempfile.mkdtemp(prefix="bench-ours-src-"))
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(src / "scrapy_redis", dest / "scrapy_redis", ignore=ignore)
    git = ["git", "-C", str(src)]
    rev = _output([*git, "rev-parse", "--short", "HEAD"]) or "?"
    dirty = _output([*git, "status", "--porcelain", "--", "."])
    return dest, f"{src} at {rev}{' + uncommitted changes' if dirty else ''}"


def _output(command: list[str]) -> str:
    return subprocess.run(command, capture_output=True, text=True).stdout.strip()


@dataclass(frozen=True)
class Packages:
    """The interpreters and import paths of one benchmark run.

    ``ours_src``: the folder holding the snapshot of our scrapy_redis;
    ``original``: the venv's Python (None when the original is not measured).
    """

    ours_src: Path
    original: Path | None = None

    def python(self, package: str) -> str:
        """The interpreter a process of ``package`` runs with."""
        if package == "original":
            assert self.original is not None
            return str(self.original)
        return sys.executable

    def env(self, package: str) -> dict[str, str]:
        """The environment of a process of ``package``."""
        env = clean_env()
        if package in OURS_VARIANTS:
            # benchmarks/ after ours, for unleased_queues; both variants get the same path.
            env["PYTHONPATH"] = os.pathsep.join([str(self.ours_src), str(HERE)])
        return env

    def expected_module(self, package: str) -> str | None:
        """A part of the path every process of ``package`` must import scrapy_redis from."""
        if package in OURS_VARIANTS:
            return f"{self.ours_src}/scrapy_redis/"
        return "/.venv-original/" if package == "original" else None

    def ours_version(self) -> str:
        """``scrapy_redis.__version__`` of the snapshot of ours."""
        code = "import scrapy_redis; print(scrapy_redis.__version__)"
        command = [sys.executable, "-c", code]
        return subprocess.run(
            command, capture_output=True, text=True, env=self.env("ours")
        ).stdout.strip()
