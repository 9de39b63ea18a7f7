"""What a new user reads and runs: the README's install line, example and docs command,
and the demo script (real processes; see test_e2e.py for the crawl checks)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "example-project"))

from demo_site import DemoSite  # noqa: E402

README = (ROOT / "README.rst").read_text(encoding="utf-8")


def code_blocks(text: str, language: str = "python") -> list[str]:
    """The ``.. code-block:: language`` blocks of an reST text, dedented."""
    blocks = re.findall(
        rf"^\.\. code-block:: {language}\n\n((?:(?:    .*)?\n)+)", text, flags=re.MULTILINE
    )
    return [textwrap.dedent(block) for block in blocks]


def literal_lines(text: str) -> list[str]:
    """The lines of the reST literal blocks (``::`` and code blocks), stripped."""
    return [line.strip() for line in text.splitlines() if line.startswith("   ")]


@pytest.mark.parametrize("path", ["README.rst", "docs/install.rst"])
def test_install_instructions_get_this_package_not_the_original(path):
    """On the package index, scrapy-redis is the original 0.9.1: the install commands
    given install this checkout, and the text says which is which."""
    text = (ROOT / path).read_text(encoding="utf-8")
    commands = [re.sub(r"^\$ ", "", line) for line in literal_lines(text) if "pip install" in line]
    assert commands
    for command in commands:
        target = command.split("pip install", 1)[1].split("#")[0].replace("-e ", "")
        assert target.strip().strip('"').startswith(("/", ".")), command
    assert "0.9.1" in text and "not on the package index" in text


def test_the_docs_build_command_says_where_sphinx_comes_from():
    commands = [line for line in literal_lines(README) if "sphinx" in line or "[docs]" in line]
    assert commands == [
        '.venv/bin/python -m pip install -e ".[docs]"',
        ".venv/bin/python -m sphinx -W -b html docs docs/_build/html",
    ]
    assert re.search(r'"docs": \["sphinx>=', (ROOT / "setup.py").read_text(encoding="utf-8"))


def test_migrating_says_what_the_code_does_with_a_pickled_queue():
    """A worker halted by a pickled entry keeps the queue, even as the last worker with
    SCHEDULER_PERSIST off (test_scheduler.py::
    test_pickled_queue_without_pickle_stops_worker_and_keeps_data)."""
    text = (ROOT / "docs" / "migrating.rst").read_text(encoding="utf-8")
    box = text.split(".. important::", 1)[1].split("What is identical", 1)[0]
    assert "deletes the queue" not in box
    assert "the queue is kept" in " ".join(box.split())


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_the_readme_example_crawls_a_site_and_stops(server, redis_url, tmp_path):
    """The README's settings and spider, as a user copies them into a project: the
    spider follows the links, and the worker stops by itself when the crawl is done."""
    settings_block, spider_block = code_blocks(README)
    assert "SCHEDULER =" in settings_block and "class MySpider" in spider_block
    (tmp_path / "scrapy.cfg").write_text("[settings]\ndefault = readme_settings\n")
    (tmp_path / "readme_settings.py").write_text(
        settings_block + '\nSPIDER_MODULES = ["readme_spiders"]\n'
    )
    (tmp_path / "readme_spiders").mkdir()
    (tmp_path / "readme_spiders" / "__init__.py").write_text("")
    # the user's site is example.com; ours is served on 127.0.0.1
    spider_code = spider_block.replace('"example.com"', '"127.0.0.1"')
    assert spider_code != spider_block
    (tmp_path / "readme_spiders" / "myspider.py").write_text(spider_code)
    with DemoSite(pages=40) as site:
        server.rpush("myspider:start_urls", site.url)
        command = [sys.executable, "-m", "scrapy", "crawl", "myspider"]
        for setting in (f"REDIS_URL={redis_url}", "TELNETCONSOLE_ENABLED=False"):
            command += ["-s", setting]
        result = subprocess.run(
            command,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=100,
            env={**os.environ, "PYTHONWARNINGS": "default"},
        )
        hits = site.snapshot()
    assert result.returncode == 0, result.stderr[-3000:]
    assert "'finish_reason': 'finished'" in result.stderr
    pages = {path for path in hits if path.startswith("/p/")}
    assert len(pages) == 40, sorted(hits)
    items = [json.loads(raw) for raw in server.lrange("myspider:items", 0, -1)]
    assert {item["url"] for item in items} >= {site.url.rstrip("/") + path for path in pages}


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_the_demo_script_uses_a_virtualenv_and_tells_what_happened(server, redis_url):
    """``bash example-project/demo.sh`` runs in a virtual environment (here the one
    running the tests, given as VENV: nothing is installed), says so, explains why
    there are more items than pages, is truthful about its logs, and ends with what
    to do next."""
    assert sys.prefix != sys.base_prefix, "the tests must run in a virtual environment"
    result = subprocess.run(
        ["bash", "example-project/demo.sh", "--pages", "200", "--idle", "1"],
        cwd=ROOT,
        env={**os.environ, "REDIS_URL": redis_url, "VENV": sys.prefix},
        capture_output=True,
        text=True,
        timeout=170,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert f"Using the virtual environment {sys.prefix}" in out
    assert "Installing" not in out
    log_dir = re.search(r"logs go to (\S+) and are deleted at the end unless something", out)
    assert log_dir and not Path(log_dir.group(1)).exists()
    explained = re.search(r"one per page: the (\d+) pages, and (\d+) /error/ pages that", out)
    assert explained, out
    items = int(re.search(r"items +(\d+) in mycrawler_redis:items", out).group(1))
    assert items == int(explained.group(1)) + int(explained.group(2)) > 200
    assert out.rstrip().splitlines()[-8] == "What next"
