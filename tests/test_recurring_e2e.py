"""End-to-end (issue 27.3): a recurring start message pushed with ``scrapy redis push
--every 2`` to two real workers (``scrapy crawl`` processes of example-project) is served
every 2 s: in 10 s 5 or 6 runs, never 2 in one interval of its schedule (first run + n x
2 s, by the Redis server's clock, the clock of this machine too); workers killed and
started again keep the schedule."""

from __future__ import annotations

import signal
import time

import pytest

from helpers import LocalSite, scrapy_redis, wait_until
from scrapy_redis.connection import is_cluster
from scrapy_redis.fleet.recurring import cancel_recurring
from scrapy_redis.scheduling.workers import server_time_ms
from scrapy_redis.start.recurring import RecurringMessages
from scrapy_redis.store.keys import leases_key
from test_e2e import DOMAIN, start_worker, wait_all

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

SPIDER = "myspider_redis"
START_KEY = "myspider:start_urls"
EVERY = 2.0
SETTINGS = {"REDIS_START_URLS_POLL_INTERVAL": 0.1, "MAX_IDLE_TIME_BEFORE_CLOSE": 0}


class FeedSite(LocalSite):
    """Serves ``/feed`` (no links), recording when each fetch arrived (ms, this machine's
    clock)."""

    def __init__(self) -> None:
        self.fetches: list[float] = []
        super().__init__()
        self.url += "/feed"

    def hit(self, path: str) -> None:
        self.fetches.append(time.time() * 1000)

    def page(self, path: str) -> str:
        return "<html><title>feed</title></html>"

    def times(self) -> list[float]:
        with self._lock:
            return list(self.fetches)


@pytest.fixture
def site():
    feed = FeedSite()
    yield feed
    feed.close()


def opened(worker) -> bool:
    return "Spider opened" in worker.log_path.read_text(errors="replace")


def server_ms(server) -> float:
    return server_time_ms(server)


@pytest.fixture(params=["one Redis", "Redis Cluster"])
def redis_target(request):
    """(client, REDIS_URL) of a single redis-server, or of the real cluster."""
    if request.param == "one Redis":
        return request.getfixturevalue("server"), request.getfixturevalue("redis_url")
    return request.getfixturevalue("cluster"), request.getfixturevalue("redis_cluster").url


def schedule_origin(server, key: str, member: str, first_fetch: float) -> float:
    """The first run of the schedule (ms): the run due last before the first fetch. Runs
    are due at first run + n intervals, so every score has the schedule's phase."""
    phase = float(server.zscore(key, member)) % (EVERY * 1000)
    return first_fetch - (first_fetch - phase) % (EVERY * 1000)


def run_windows(fetches: list[float], origin: float) -> list[int]:
    """The interval of the schedule each fetch falls in (0: the first run's)."""
    return [int((fetch - origin) // (EVERY * 1000)) for fetch in fetches]


def stop(workers) -> None:
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGINT)
    wait_all(workers, finish_reason="shutdown")


def test_every_2_s_for_10_s_gives_5_or_6_runs_never_2_in_one_interval(redis_target, tmp_path, site):
    server, redis_url = redis_target
    recurring = RecurringMessages(server, START_KEY)
    workers = [
        start_worker(SPIDER, redis_url, tmp_path / f"w{n}.log", SETTINGS, DOMAIN) for n in (1, 2)
    ]
    try:
        wait_until(lambda: all(opened(w) for w in workers), "starting the workers", workers)
        pushed = scrapy_redis(redis_url, "push", SPIDER, "--every", "2s", site.url)
        assert pushed.returncode == 0, pushed.stderr
        assert "Made 1 message recurring for myspider_redis, first run due now" in pushed.stdout
        wait_until(lambda: site.times(), "the first run", workers)
        origin = schedule_origin(server, recurring.key, site.url, site.times()[0])
        while server_ms(server) < origin + 10_000:  # the 10 s measured: runs 0 to 4 (5?)
            assert all(w.process.poll() is None for w in workers)
            time.sleep(0.01)
        cancel_recurring(server, START_KEY, [site.url])
        ended = server_ms(server)
        leases = leases_key(START_KEY, is_cluster(server))
        wait_until(lambda: not server.exists(leases), "the last run", workers)
    finally:
        stop(workers)
    fetches = site.times()
    windows = run_windows(fetches, origin)
    seen = f"fetches (ms after the first run): {[round(f - origin) for f in fetches]}"
    assert len(fetches) in (5, 6), seen
    assert windows == sorted(set(windows)), seen  # never 2 in one interval
    assert windows[:5] == [0, 1, 2, 3, 4], seen
    assert all(fetch <= ended + 1000 for fetch in fetches), seen  # none after the cancel
    served = sum(w.stats.get("redis/start_messages/recurring", 0) for w in workers)
    assert served == len(fetches)


def test_the_schedule_survives_workers_killed_and_started_again(server, redis_url, tmp_path, site):
    pushed = scrapy_redis(redis_url, "push", SPIDER, "--every", "2", site.url)
    assert pushed.returncode == 0, pushed.stderr
    first = start_worker(SPIDER, redis_url, tmp_path / "first.log", SETTINGS, DOMAIN)
    try:
        wait_until(lambda: len(site.times()) >= 2, "two runs", [first])
    finally:
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
    killed = server_ms(server)
    assert server.zcard(f"{START_KEY}:recurring") == 1  # kept in Redis
    again = start_worker(SPIDER, redis_url, tmp_path / "again.log", SETTINGS, DOMAIN)
    try:
        wait_until(lambda: any(fetch > killed for fetch in site.times()), "a run after", [again])
        wait_until(lambda: len(site.times()) >= 4, "more runs", [again])
    finally:
        stop([again])
    fetches = site.times()
    origin = schedule_origin(server, f"{START_KEY}:recurring", site.url, fetches[0])
    windows = run_windows(fetches, origin)
    seen = f"fetches (ms after the first run): {[round(f - origin) for f in fetches]}"
    assert windows == sorted(set(windows)), seen  # on one schedule, none caught up
