"""Sphinx configuration of the scrapy-redis documentation.

Built with ``python -m sphinx -W -b html docs docs/_build/html``. It uses no
extension, so the build needs nothing but Sphinx and no network access.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path


def _version() -> str:
    """The version in ``src/scrapy_redis/__init__.py``, without importing the package."""
    init = Path(__file__).resolve().parents[1] / "src" / "scrapy_redis" / "__init__.py"
    if init.is_file():
        found = re.search(r'__version__ = "([^"]+)"', init.read_text(encoding="utf-8"))
        if found:
            return found.group(1)
    try:
        return metadata.version("scrapy-redis")
    except metadata.PackageNotFoundError:
        return "unknown"


project = "scrapy-redis"
author = "scrapy-redis developers"
copyright = "scrapy-redis developers"
release = _version()
version = ".".join(release.split(".")[:2])

# The ``confval`` directive and role (one entry per setting) are built into Sphinx >= 7.4.
needs_sphinx = "7.4"
extensions: list[str] = []

root_doc = "index"
source_suffix = {".rst": "restructuredtext"}
exclude_patterns = ["_build"]
default_role = "literal"
highlight_language = "python"
pygments_style = "sphinx"

html_title = f"scrapy-redis {release}"
html_static_path: list[str] = []
html_show_sourcelink = False
