"""The original package's interpreter: benchmarks/.venv-original with scrapy-redis 0.9.1.

Created on first use (``python -m venv`` + ``pip install scrapy-redis==0.9.1``) with
the same Scrapy, redis-py, Twisted, w3lib, lxml and parsel versions as the
interpreter running the benchmark, so that only the scrapy_redis package differs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from _util import HERE, log

VENV = HERE / ".venv-original"
ORIGINAL_VERSION = "0.9.1"
ORIGINAL = f"scrapy-redis=={ORIGINAL_VERSION}"
# Same versions as ours runs with, so only the scrapy_redis package differs.
PINNED = ("scrapy", "redis", "twisted", "w3lib", "lxml", "parsel")
#: Variables that would make a child import another scrapy_redis or load a project.
FOREIGN = ("PYTHONPATH", "SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT")


def clean_env() -> dict[str, str]:
    """This process' environment without FOREIGN, with a fixed hash seed."""
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN}
    env["PYTHONHASHSEED"] = "0"
    return env


def installed(python: Path) -> subprocess.CompletedProcess[str]:
    """Ask ``python`` for the version of the scrapy_redis it imports."""
    check = [str(python), "-c", "import scrapy_redis; print(scrapy_redis.__version__)"]
    return subprocess.run(check, capture_output=True, text=True, env=clean_env())


def original_python() -> Path:
    """The venv's interpreter with scrapy-redis 0.9.1, created on first use."""
    python = VENV / "bin" / "python"
    if python.exists() and installed(python).stdout.strip() == ORIGINAL_VERSION:
        return python
    log(f"creating {VENV} with {ORIGINAL} (one-time, ~30 s)")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
    pins = [f"{name}=={version(name)}" for name in PINNED]
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, ORIGINAL, *pins], check=True, env=clean_env())
    found = installed(python)
    if found.stdout.strip() != ORIGINAL_VERSION:
        raise SystemExit(f"the original package did not install: {found.stderr}")
    return python
