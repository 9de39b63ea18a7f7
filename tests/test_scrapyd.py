"""Deploying example-project with scrapyd: two scrapyd instances stand for two hosts.

What docs/deploying.rst shows, for real: a ``[deploy:NAME]`` target per instance
added to a copy of example-project's scrapy.cfg, ``scrapyd-deploy -a``,
``schedule.json`` of ``mycrawler_redis`` on both instances, both workers
registered with the shared queue, the start URL pushed, and then the local demo
site crawled once in all: every page fetched once, every item stored once, both
crawls finished without an error.

scrapyd and scrapyd-client come from setup.py's ``test`` extra: scrapyd runs its
crawls with its own Python (``python -m scrapyd.runner crawl ...``), here the
test environment's, so they use this checkout's scrapy-redis. Each instance has
a working directory and a HOME of its own (scrapyd reads ``scrapyd.conf`` from
both), a free loopback port, and a process group of its own: the group (scrapyd
and its crawls) is killed at the end, whatever happened.

The scrapyd.conf and the deploy targets are those of docs/deploying.rst, with the
instances' ports. The first instance's crawl gets REDIS_URL from scrapyd's environment (which
scrapyd passes on, and example/settings.py reads); the second's gets it as a
``setting=REDIS_URL=...`` parameter of ``schedule.json``: its environment names
a port where no Redis listens, so a crawl that ignored the parameter would fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.error import URLError
from urllib.parse import urlencode
from urllib.request import urlopen

import pytest

from redis_server import free_port
from scrapy_redis import defaults
from scrapy_redis.store.keys import format_key, workers_key
from test_e2e import (
    EXAMPLE,
    PROBLEM,
    DemoSite,
    assert_hits,
    assert_items,
    expected_hits,
    expected_pages,
    keys,
    parse_stats,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

BIN = Path(sys.executable).parent
DOCS = EXAMPLE.parent / "docs" / "deploying.rst"
PROJECT = "example"
SPIDER = "mycrawler_redis"
START_KEY = "mycrawler:start_urls"
PAGES = 300
#: MAX_IDLE_TIME_BEFORE_CLOSE of the crawls (they run until released: see the test).
IDLE = 2
#: Seconds to wait for scrapyd to answer, for the workers to register, for the crawls to end.
STARTUP, REGISTER, CRAWL = 30, 40, 90


def ini_blocks() -> list[str]:
    """The ``.. code-block:: ini`` blocks of docs/deploying.rst, dedented: scrapyd.conf,
    the deploy targets, the systemd unit."""
    text = DOCS.read_text(encoding="utf-8")
    blocks = re.findall(r"^\.\. code-block:: ini\n\n((?:(?: {3}.*)?\n)+)", text, re.MULTILINE)
    return [textwrap.dedent(block) for block in blocks]


def replaced(text: str, changes: dict[str, str]) -> str:
    for old, new in changes.items():
        assert old in text, f"{old!r} is no longer in docs/deploying.rst:\n{text}"
        text = text.replace(old, new)
    return text


@dataclass
class Scrapyd:
    """One scrapyd process, in its own directory and process group."""

    name: str
    directory: Path
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def get(self, endpoint: str, **params: str) -> dict[str, Any]:
        return self._answer(urlopen(f"{self.url}{endpoint}?{urlencode(params)}", timeout=10))

    def post(self, endpoint: str, fields: list[tuple[str, str]]) -> dict[str, Any]:
        return self._answer(urlopen(self.url + endpoint, urlencode(fields).encode(), timeout=10))

    def _answer(self, response: Any) -> dict[str, Any]:
        with response:
            answer: dict[str, Any] = json.load(response)
        assert answer["status"] == "ok", f"{self.name}: {answer}\n{self.describe()}"
        return answer

    def job_log(self, job: str) -> str:
        path = self.directory / "logs" / PROJECT / SPIDER / f"{job}.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    def describe(self) -> str:
        """The end of scrapyd's log (without the HTTP requests) and of its crawls' logs."""
        log = (self.directory / "scrapyd.log").read_text(encoding="utf-8", errors="replace")
        lines = [line for line in log.splitlines() if ' HTTP/1.1" ' not in line]
        text = f"--- scrapyd {self.name} ({self.directory}), exit {self.process.poll()}:\n"
        text += "\n".join(lines[-20:])
        for job in sorted((self.directory / "logs").glob(f"{PROJECT}/{SPIDER}/*.log")):
            crawl = job.read_text(encoding="utf-8", errors="replace").splitlines()
            text += f"\n--- crawl {job.stem}:\n" + "\n".join(crawl[-30:])
        return text

    def kill(self) -> None:
        """SIGKILL the process group: scrapyd and the crawls it started. scrapyd is reaped
        only after, so its group id cannot have been reused by then."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def start_scrapyd(name: str, directory: Path, env: dict[str, str]) -> Scrapyd:
    """``scrapyd`` in ``directory`` (its working directory and HOME), on a free port."""
    directory.mkdir()
    port = free_port()
    conf = replaced(ini_blocks()[0], {"http_port = 6800": f"http_port = {port}"})
    # Jobs start within 0.2 s of schedule.json instead of up to 5 s.
    (directory / "scrapyd.conf").write_text(conf + "poll_interval = 0.2\n")
    scrapyd = BIN / "scrapyd"
    assert scrapyd.exists(), f"no {scrapyd}: install the test extra (pip install -e '.[test]')"
    env = {**env, "HOME": str(directory), "PYTHONWARNINGS": "default"}
    with (directory / "scrapyd.log").open("wb") as log:
        process = subprocess.Popen(
            [str(scrapyd)],
            cwd=directory,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Scrapyd(name, directory, port, process)


def wait_ready(instance: Scrapyd) -> None:
    deadline = time.monotonic() + STARTUP
    while time.monotonic() < deadline:
        assert instance.process.poll() is None, instance.describe()
        with contextlib.suppress(URLError, ConnectionError):
            instance.get("daemonstatus.json")
            return
        time.sleep(0.1)
    pytest.fail(f"scrapyd did not answer within {STARTUP}s\n{instance.describe()}")


@pytest.fixture
def scrapyds(tmp_path: Path, redis_url: str) -> Iterator[list[Scrapyd]]:
    """Two scrapyd instances: "host1" with REDIS_URL in its environment, "host2" with a
    REDIS_URL where nothing listens (its crawls get theirs from schedule.json)."""
    base = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    instances: list[Scrapyd] = []
    try:
        for name, url in (("host1", redis_url), ("host2", nowhere)):
            instances.append(start_scrapyd(name, tmp_path / name, {**base, "REDIS_URL": url}))
        for instance in instances:
            wait_ready(instance)
        yield instances
    finally:
        for instance in instances:
            instance.kill()


def deploy(tmp_path: Path, instances: list[Scrapyd]) -> str:
    """A copy of example-project with a deploy target per instance, deployed to all with
    ``scrapyd-deploy -a``; returns what it printed."""
    project = tmp_path / "example-project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__"))
    ports = {f"http://127.0.0.1:{6800 + n}/": each.url for n, each in enumerate(instances)}
    with (project / "scrapy.cfg").open("a") as cfg:
        cfg.write("\n" + replaced(ini_blocks()[1], ports))
    result = subprocess.run(
        [str(BIN / "scrapyd-deploy"), "-a", "-v", "1.0"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = result.stderr + result.stdout
    assert result.returncode == 0, output
    return output


def registered_workers(server: Any, spider: str) -> set[str]:
    """The ids of the workers registered with ``spider``'s queue (the hash ``<queue
    key>:workers``), read directly: polled while the crawls start."""
    queue_key = format_key(defaults.SCHEDULER_QUEUE_KEY, spider)
    return {worker.decode() for worker in server.hkeys(workers_key(queue_key))}


def wait_for_workers(server: Any, instances: list[Scrapyd]) -> set[str]:
    """Wait until both crawls run and are registered with the queue; their ids. Fails
    as soon as a crawl ends."""
    deadline = time.monotonic() + REGISTER
    while True:
        jobs = [each.get("listjobs.json", project=PROJECT) for each in instances]
        pids = {int(job["pid"]) for answer in jobs for job in answer["running"]}
        workers = registered_workers(server, SPIDER)
        if len(workers) == len(pids) == len(instances):
            # A worker id is host:pid:random: each scrapyd runs one of the two.
            assert {int(worker.split(":")[-2]) for worker in workers} == pids
            return workers
        ended = [job["id"] for answer in jobs for job in answer["finished"]]
        if ended or time.monotonic() > deadline:
            report = "\n".join(each.describe() for each in instances)
            pytest.fail(f"workers {workers}, running jobs {pids}, ended {ended}\n{report}")
        time.sleep(0.05)


def status(project: Path, redis_url: str) -> dict[str, Any]:
    """What ``scrapy redis status SPIDER --json`` says, run in the deployed project."""
    result = subprocess.run(
        [str(BIN / "scrapy"), "redis", "status", SPIDER, "--json"],
        cwd=project, capture_output=True, text=True, timeout=60,
        env={**os.environ, "REDIS_URL": redis_url},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (crawl,) = json.loads(result.stdout)["spiders"]
    return crawl


def wait_finished(instance: Scrapyd, job: str) -> None:
    deadline = time.monotonic() + CRAWL
    while time.monotonic() < deadline:
        finished = instance.get("listjobs.json", project=PROJECT)["finished"]
        if any(each["id"] == job for each in finished):
            return
        time.sleep(0.2)
    pytest.fail(f"job {job} still running after {CRAWL}s\n{instance.describe()}")


def schedule_fields(redis_url: str | None) -> list[tuple[str, str]]:
    """``schedule.json``'s form: the spider, its argument, and ``setting=NAME=VALUE``s."""
    settings = {
        "MAX_IDLE_TIME_BEFORE_CLOSE": IDLE,
        "SCHEDULER_PERSIST": False,  # the last worker to stop deletes the queue
        "TELNETCONSOLE_ENABLED": False,
        **({"REDIS_URL": redis_url} if redis_url else {}),
    }
    fields = [("project", PROJECT), ("spider", SPIDER), ("domain", "127.0.0.1")]
    return fields + [("setting", f"{name}={value}") for name, value in settings.items()]


def test_deployed_with_scrapyd_to_two_hosts(scrapyds, server, redis_url, tmp_path):
    host1, host2 = scrapyds
    output = deploy(tmp_path, scrapyds)
    for instance in scrapyds:
        assert f'Deploying to project "{PROJECT}" in {instance.url}addversion.json' in output
        assert SPIDER in instance.get("listspiders.json", project=PROJECT)["spiders"]

    with DemoSite(pages=PAGES) as site:
        # The first page waits until released: the first worker is busy and the other
        # waits for its work, so that neither stops, however long the other takes to start.
        site.hold_after(0)
        server.lpush(START_KEY, site.url)
        jobs = {
            host1.name: host1.post("schedule.json", schedule_fields(None))["jobid"],
            host2.name: host2.post("schedule.json", schedule_fields(redis_url))["jobid"],
        }
        workers = wait_for_workers(server, scrapyds)
        assert len(workers) == 2
        # what an operator sees: both workers, alive, one per scrapyd
        shown = status(tmp_path / "example-project", redis_url)
        assert {w["id"] for w in shown["workers"] if w["alive"]} == workers
        assert shown["workers_alive"] == 2
        site.release()
        for instance in scrapyds:
            wait_finished(instance, jobs[instance.name])
        hits = site.snapshot()

    for instance in scrapyds:
        log = instance.job_log(jobs[instance.name])
        assert not PROBLEM.search(log), f"{log[-3000:]}\n{instance.describe()}"
        stats = parse_stats(log)
        assert stats.get("finish_reason") == "finished", f"{log[-3000:]}"
        assert stats.get("response_received_count", 0) > 0, f"{instance.name} fetched nothing"
    assert_hits(hits, expected_hits(PAGES))
    assert_items(server, SPIDER, site, expected_pages(PAGES) - {"/"})
    # The last worker deleted the queue, the filter and the registry; the items remain.
    assert keys(server) == {f"{SPIDER}:items"}
    assert not registered_workers(server, SPIDER)
