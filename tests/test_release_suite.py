"""The original's released test suite, run unchanged against this package.

scrapy-redis 0.9.1 ships its ``tests/`` in its sdist on the package index. The
sdist is downloaded at test time (``pip download --no-binary :all: --no-deps``,
into a temporary directory: it is never copied into this repository), its
``tests/`` and ``pytest.ini`` unpacked alone (its ``src/`` never on the path),
its own test requirements installed (``pytest<7``, which still runs the
nose-style ``setup()`` methods it uses, or pytest 7.4 on Python 3.12 and later,
where pytest 6 no longer works; and ``mock``) with ``pip --target`` into
a directory of their own, and the suite run by ``python -m pytest`` in a process
of its own, importing this package and talking to the test Redis.

Every test must pass except the documented ones (docs/migrating.rst, "Your tests,
and the original's"), each failing for its documented reason.

If pip cannot download or install them the test fails in CI (CI is set) and is
skipped elsewhere, as tests/test_third_party_e2e.py does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import scrapy_redis
from redis_server import in_ci

pytestmark = pytest.mark.timeout(400)

RELEASE = "scrapy-redis==0.9.1"
# Their requirements-tests.txt lines that running the suite needs (the others are
# flake8, pytest-cov and tox).
TEST_REQUIREMENTS = ("pytest", "mock")
#: Their pytest<7 on Python 3.12 and later: the last pytest that still runs nose-style
#: setup() methods (with a deprecation warning).
PYTEST_FOR_NEW_PYTHON = "pytest>=7.4,<8"

#: Tests that assert how the original talks to a mock server rather than what it does:
#: test id -> a text their failure must show (why: docs/migrating.rst).
EXPECTED_FAILURES = {
    # clear() deletes with UNLINK, not DEL: the assertion on mock.delete fails.
    "tests.test_dupefilter.TestRFPDupeFilter::test_clear_deletes": "Expected: delete(",
}

EXPECTED_PASSED = {
    "tests.test_connection.TestGetRedis::test_default_instance",
    "tests.test_connection.TestGetRedis::test_custom_class",
    "tests.test_connection.TestGetRedis::test_from_url",
    "tests.test_connection.TestFromSettings::test_redis_cls_default",
    "tests.test_connection.TestFromSettings::test_redis_cls_custom_path",
    "tests.test_connection.TestFromSettings::test_default_params",
    "tests.test_connection.TestFromSettings::test_override_default_params",
    "tests.test_connection::test_get_server_from_settings_alias",
    "tests.test_dupefilter.TestRFPDupeFilter::test_request_seen",
    "tests.test_dupefilter.TestRFPDupeFilter::test_overridable_request_fingerprinter",
    "tests.test_dupefilter.TestRFPDupeFilter::test_close_calls_clear",
    "tests.test_dupefilter::test_log_dupes",
    "tests.test_dupefilter.TestFromMethods::test_from_settings",
    "tests.test_dupefilter.TestFromMethods::test_from_crawler",
    "tests.test_package_import::test_package_metadata",
    "tests.test_picklecompat::test_picklecompat",
    "tests.test_queue.TestBaseQueue::test_encode_decode_requests",
    "tests.test_queue.TestBaseQueue::test_custom_serializer",
    "tests.test_scrapy_redis.DupeFilterTest::test_dupe_filter",
    "tests.test_scrapy_redis.FifoQueueTest::test_clear",
    "tests.test_scrapy_redis.FifoQueueTest::test_queue",
    "tests.test_scrapy_redis.PriorityQueueTest::test_clear",
    "tests.test_scrapy_redis.PriorityQueueTest::test_queue",
    "tests.test_scrapy_redis.LifoQueueTest::test_clear",
    "tests.test_scrapy_redis.LifoQueueTest::test_queue",
    "tests.test_scrapy_redis.SchedulerTest::test_scheduler",
    "tests.test_scrapy_redis.SchedulerTest::test_scheduler_persistent",
    "tests.test_scrapy_redis.ConnectionTest::test_redis_default",
    "tests.test_scrapy_redis.ConnectionTest::test_redis_host_port",
    "tests.test_scrapy_redis.ConnectionTest::test_redis_host_port_fallback",
    "tests.test_scrapy_redis.ConnectionTest::test_redis_url",
    "tests.test_scrapy_redis.ConnectionTest::test_redis_url_precedence",
    "tests.test_spiders.TestRedisMixin_setup_redis::test_crawler_required",
    "tests.test_spiders.TestRedisMixin_setup_redis::test_requires_redis_key",
    "tests.test_spiders.TestRedisMixin_setup_redis::test_invalid_batch_size",
    "tests.test_spiders.TestRedisMixin_setup_redis::test_invalid_idle_time",
    "tests.test_spiders.TestRedisMixin_setup_redis::test_via_from_crawler",
    *(
        f"tests.test_spiders::test_from_crawler_with_spider_arguments[{cls}]"
        for cls in ("MySpider", "MyCrawlSpider")
    ),
    *(
        f"tests.test_spiders::test_consume_urls_from_redis[{a}-{b}-{cls}]"
        for a in ("False", "True")
        for b in ("False", "True")
        for cls in ("MySpider", "MyCrawlSpider")
    ),
    "tests.test_utils::test_bytes_to_str",
}


def _pip(*args: str) -> None:
    """Run pip; fail in CI, skip elsewhere, when it cannot (offline)."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=300
    )
    if result.returncode != 0:
        message = f"pip {args[0]} failed: {result.stderr[-2000:]}"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def release_suite(tmp_path_factory) -> tuple[Path, Path]:
    """The suite's directory (its tests/ and pytest.ini alone) and its requirements'."""
    download = tmp_path_factory.mktemp("release-sdist")
    _pip("download", RELEASE, "--no-binary", ":all:", "--no-deps", "-d", str(download))
    [sdist] = download.glob("scrapy_redis-*.tar.gz")
    suite = tmp_path_factory.mktemp("release-suite")
    with tarfile.open(sdist) as archive:
        wanted = [
            member
            for member in archive.getmembers()
            if member.name.split("/", 1)[-1].startswith(("tests/", "pytest.ini", "requirements-"))
        ]
        for member in wanted:
            member.name = member.name.split("/", 1)[1]
        archive.extractall(suite, members=wanted, filter="data")
    requirements = [
        line.strip()
        for line in (suite / "requirements-tests.txt").read_text().splitlines()
        if re.split(r"[<>=~!\s]", line.strip(), maxsplit=1)[0] in TEST_REQUIREMENTS
    ]
    assert sorted(re.split(r"[<>=]", r, maxsplit=1)[0] for r in requirements) == ["mock", "pytest"]
    if sys.version_info >= (3, 12):  # pytest 6 cannot rewrite asserts there (ast.Str is gone)
        requirements = [*(r for r in requirements if r.startswith("mock")), PYTEST_FOR_NEW_PYTHON]
    deps = tmp_path_factory.mktemp("release-deps")
    _pip("install", "-q", "--target", str(deps), *requirements)
    return suite, deps


def _outcomes(junit: Path) -> dict[str, str]:
    """Test id -> "passed", or the text of its failure, error or skip."""
    outcomes = {}
    for case in ET.parse(junit).iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        problems = [child for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[test_id] = (
            "passed"
            if not problems
            else " ".join(f"{p.tag}: {p.get('message')} {p.text}" for p in problems)
        )
    return outcomes


def test_the_original_release_suite_passes(release_suite, redis_server, server, tmp_path):
    suite, deps = release_suite
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))},
        "PYTHONPATH": str(deps),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # our pytest plugins need pytest >= 7
        "REDIS_HOST": "127.0.0.1",
        "REDIS_PORT": str(redis_server.port),
    }
    ours = Path(scrapy_redis.__file__).parent
    where = subprocess.run(
        [sys.executable, "-c", "import scrapy_redis; print(scrapy_redis.__file__)"],
        cwd=suite, env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert Path(where.stdout.strip()).parent == ours, "the suite must import this package"
    junit = tmp_path / "junit.xml"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests", f"--junitxml={junit}"],
        cwd=suite, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert junit.exists(), result.stdout[-3000:] + result.stderr[-3000:]
    outcomes = _outcomes(junit)
    passed = {test_id for test_id, outcome in outcomes.items() if outcome == "passed"}
    failed = {test_id: outcome for test_id, outcome in outcomes.items() if outcome != "passed"}
    assert passed == EXPECTED_PASSED, (
        f"not passing: {sorted(EXPECTED_PASSED - passed)}; unexpected: "
        f"{sorted(passed - EXPECTED_PASSED)}\n{result.stdout[-4000:]}"
    )
    assert set(failed) == set(EXPECTED_FAILURES), result.stdout[-4000:]
    for test_id, shows in EXPECTED_FAILURES.items():
        assert shows in failed[test_id], failed[test_id]
