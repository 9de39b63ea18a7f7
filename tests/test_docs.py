"""The documentation covers every setting, and builds without a warning.

* every constant of :mod:`scrapy_redis.defaults` appears in ``docs/settings.rst``,
  in the table of defaults, with its current value;
* every setting that ``src/scrapy_redis`` reads has a ``.. confval::`` entry there;
* ``sphinx-build -W`` succeeds (skipped when Sphinx is missing, except on CI).
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import (
    DecorrelatedJitterBackoff,
    EqualJitterBackoff,
    ExponentialBackoff,
    ExponentialWithJitterBackoff,
    FullJitterBackoff,
    NoBackoff,
)
from redis.retry import Retry

from scrapy_redis import connection, defaults

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SRC = ROOT / "src" / "scrapy_redis"
SETTINGS_RST = DOCS / "settings.rst"

# settings.get("NAME"), crawler.settings.getbool(\n    "NAME", ...), settings.getpriority("NAME")...
SETTING_READ = re.compile(r"""settings\s*\.\s*get\w*\(\s*["']([A-Z][A-Z0-9_]*)["']""")


def settings_rst() -> str:
    return SETTINGS_RST.read_text(encoding="utf-8")


def default_constants() -> list[str]:
    return sorted(name for name in vars(defaults) if name.isupper() and not name.startswith("_"))


def settings_read_by_src() -> list[str]:
    names: set[str] = set()
    for path in sorted(SRC.rglob("*.py")):
        names.update(SETTING_READ.findall(path.read_text(encoding="utf-8")))
    # Read through a loop over this mapping, not by a literal settings.get("...").
    names.update(connection.SETTINGS_PARAMS_MAP)
    return sorted(names)


def mentions(text: str, name: str) -> bool:
    """Whether ``name`` is in ``text`` as a whole word (not MAX_IDLE_TIME in MAX_IDLE_TIME_X)."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text) is not None


def documented_value(value: Any) -> set[str]:
    """How the docs may write ``value``: Python syntax with double-quoted strings."""
    if isinstance(value, type):
        aliases = {f"redis.{name}" for name, obj in vars(redis).items() if obj is value}
        return aliases | {f"{value.__module__}.{value.__qualname__}"}
    return {python_text(value)}


def python_text(value: Any) -> str:
    """``value`` as Python source, with double-quoted strings (objects as their constructor)."""
    if isinstance(value, dict):
        pairs = (f"{python_text(k)}: {python_text(v)}" for k, v in value.items())
        return "{" + ", ".join(pairs) + "}"
    if isinstance(value, Retry):  # its repr() is "<redis.retry.Retry object at 0x...>"
        return retry_text(value)
    if isinstance(value, list):
        return "[" + ", ".join(python_text(v) for v in value) + "]"
    if isinstance(value, type):  # an exception class, as imported from redis
        return value.__name__
    return repr(value).replace("'", '"')


BACKOFFS = (
    NoBackoff,
    ExponentialBackoff,
    ExponentialWithJitterBackoff,
    FullJitterBackoff,
    EqualJitterBackoff,
    DecorrelatedJitterBackoff,
)


def retry_text(retry: Retry) -> str:
    """``retry`` as its constructor, found by equality (a Retry compares its backoff,
    retries and errors): the docs show the backoff classes built without arguments."""
    retries = retry.get_retries()
    for backoff in BACKOFFS:
        if retry == Retry(backoff(), retries):
            return f"Retry({backoff.__name__}(), {retries})"
    return repr(retry)


def table_row(text: str, constant: str) -> str | None:
    """The row of the defaults table that starts with ``constant``."""
    for line in text.splitlines():
        if line.startswith(f"``{constant}``"):
            return line
    return None


def test_the_regex_finds_the_settings_src_reads() -> None:
    names = settings_read_by_src()
    # one-line reads, reads split over lines, getpriority(), and the connection map
    for expected in (
        "REDIS_PARAMS",
        "SCHEDULER_PERSIST",
        "SCHEDULER_FLUSH_ON_START",
        "REDIS_START_URLS_KEY",
        "DUPEFILTER_CLASS",
        "REDIS_URL",
    ):
        assert expected in names


@pytest.mark.parametrize("constant", default_constants())
def test_every_default_constant_is_in_settings_rst(constant: str) -> None:
    assert mentions(settings_rst(), constant), (
        f"scrapy_redis.defaults.{constant} is not documented in docs/settings.rst"
    )


@pytest.mark.parametrize("constant", default_constants())
def test_defaults_table_shows_the_current_value(constant: str) -> None:
    row = table_row(settings_rst(), constant)
    assert row is not None, f"no row for ``{constant}`` in the defaults table of docs/settings.rst"
    value = getattr(defaults, constant)
    if isinstance(value, dict):  # too long for the table: shown in the setting's entry
        assert any(v in settings_rst() for v in documented_value(value)), (
            f"defaults.{constant} = {value!r} is not shown in docs/settings.rst"
        )
        return
    expected = documented_value(value)
    assert any(f"``{v}``" in row for v in expected), (
        f"the defaults table shows {row!r}, but defaults.{constant} = {value!r}"
    )


@pytest.mark.parametrize("setting", settings_read_by_src())
def test_every_setting_read_by_src_is_in_settings_rst(setting: str) -> None:
    text = settings_rst()
    assert mentions(text, setting), f"setting {setting} is not documented in docs/settings.rst"
    assert re.search(rf"^\.\. confval:: {re.escape(setting)}$", text, re.MULTILINE), (
        f"setting {setting} has no '.. confval:: {setting}' entry in docs/settings.rst"
    )


def test_docs_build_without_warnings(tmp_path: Path) -> None:
    try:
        from sphinx.cmd.build import build_main
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"Sphinx is required on CI to build the docs: {exc}")
        pytest.skip(f"Sphinx is not installed: {exc}")
    args = ["-W", "--keep-going", "-E", "-q", "-b", "html", "-d", str(tmp_path / "doctrees")]
    with warnings.catch_warnings():
        # Python deprecation warnings inside Sphinx or docutils are not documentation
        # problems; Sphinx's own warnings go through its logging and -W makes them fatal.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        status = build_main([*args, str(DOCS), str(tmp_path / "html")])
    assert status == 0, "sphinx-build -W failed, see the output above"
