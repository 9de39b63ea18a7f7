"""A real headless browser for the tests: Debian's ``chromium``, driven by Selenium
through Debian's ``chromium-driver`` (scripts/test.sh installs both).

Selenium is given both programs' paths, so Selenium Manager never looks for (or
downloads) a browser or a driver. Without them the test is skipped, saying how to
install them, except on CI, where it fails.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from redis_server import in_ci

#: Needed to run as root on a machine without a network: no sandbox (root), no GPU, and
#: none of Chromium's own connections (updates, sync...), which the network refuses.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1300,1800",
]


def programs() -> tuple[str, str]:
    """The paths of chromium and chromedriver; a skip (a failure on CI) without them."""
    chromium = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    missing = [
        name for name, path in [("chromium", chromium), ("chromium-driver", driver)] if not path
    ]
    if missing:
        reason = (
            f"no {' and '.join(missing)}: install Debian's chromium and chromium-driver "
            "(`apt-get install chromium chromium-driver`, which scripts/test.sh does)"
        )
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    assert chromium and driver
    return chromium, driver


def chromium_driver(profile: Path, log: Path):
    """A headless Chromium with a new empty profile in ``profile``."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:  # the test extra is not installed
        if in_ci():
            raise
        pytest.skip(f"no selenium ({exc}): pip install -e '.[test]'")
    chromium, driver = programs()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(driver, log_output=str(log)))
