"""End-to-end: real ``scrapy runspider`` workers crawl three sites on 127.0.0.2-4 (see
polite_site.py) with SCHEDULER_FLEET_LIMITS: each site sees the configured limits for
the whole fleet, not per worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scrapy import signals as scrapy_signals
from scrapy.core import downloader as scrapy_downloader

from polite_site import ADDRESSES, PoliteSites
from test_e2e import PROBLEM, Worker, wait_all

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

SPIDER_FILE = Path(__file__).parent / "spiders" / "polite_spider.py"
PAGES = 30
#: No random variation of the delay: RANDOMIZE_DOWNLOAD_DELAY = False (DOWNLOAD_DELAY_JITTER
#: = 0 from Scrapy 2.19 on, which deprecates the former).
NO_JITTER = (
    {"DOWNLOAD_DELAY_JITTER": 0}
    if hasattr(scrapy_downloader, "_default_jitter")
    else {"RANDOMIZE_DOWNLOAD_DELAY": False}
)
POLITE = {"DOWNLOAD_DELAY": 0.5, **NO_JITTER}
#: The hash of the workers of the crawl (on a Redis Cluster: {polite:requests}:workers).
WORKERS_KEY = "polite:requests:workers"


def start(redis_url: str, log_path: Path, settings: dict) -> Worker:
    command = [sys.executable, "-m", "scrapy", "runspider", str(SPIDER_FILE)]
    for name, value in {"REDIS_URL": redis_url, **settings}.items():
        command += ["-s", f"{name}={value}"]
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, cwd=log_path.parent, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    return Worker(log_path.stem, process, log_path)


def wait_joined(
    server, count: int, workers: list[Worker], timeout: float = 60, key: str = WORKERS_KEY
) -> None:
    deadline = time.monotonic() + timeout
    while server.hlen(key) < count:
        assert all(w.process.poll() is None for w in workers), "a worker exited early"
        assert time.monotonic() < deadline, f"fewer than {count} workers joined"
        time.sleep(0.05)


def fleet(
    server, redis_url, tmp_path, settings, sites, workers=4, tag="w", key=WORKERS_KEY
) -> list[Worker]:
    """``workers`` workers, all joined (in the hash ``key``), then the sites' listing
    pages pushed."""
    running = [start(redis_url, tmp_path / f"{tag}{n}.log", settings) for n in range(workers)]
    wait_joined(server, workers, running, key=key)
    server.lpush("polite:start_urls", *sites.urls)
    return running


def expected_paths() -> list[str]:
    return sorted(["/", *(f"/p/{i}.html" for i in range(PAGES))])


def assert_every_page_once(sites: PoliteSites) -> None:
    for address in sites.addresses:
        assert_every_page_once_at(sites, address)


def assert_every_page_once_at(sites: PoliteSites, address: str) -> None:
    assert sorted(sites.paths(address)) == expected_paths(), address


def assert_each_site_at_its_delay(sites: PoliteSites) -> None:
    """Every page once; no two requests to a site less than 0.45 s apart; each site's rate
    within 10 % of 2 a second (DOWNLOAD_DELAY = 0.5: polite, and not slower than needed)."""
    assert_every_page_once(sites)
    for address in ADDRESSES:
        gaps = sites.gaps(address)
        assert min(gaps) >= 0.45, (address, sorted(gaps)[:5])
    rates = [round(sites.rate(address), 2) for address in ADDRESSES]
    assert all(1.8 <= rate <= 2.2 for rate in rates), rates


def test_four_workers_give_each_site_its_delay_fleet_wide(server, redis_url, tmp_path):
    settings = {**POLITE, "SCHEDULER_FLEET_LIMITS": True}
    with PoliteSites(ADDRESSES, pages=PAGES) as sites:
        wait_all(fleet(server, redis_url, tmp_path, settings, sites))
    assert_each_site_at_its_delay(sites)


def test_busy_workers_still_give_each_site_its_rate(server, redis_url, tmp_path):
    """Workers that block their reactor 0.1 s per request between the pop and the send
    (a middleware: a busy worker) would add that to every gap; a request handed out a
    little before its slot's start, held by its worker until then, hides it."""
    settings = {**POLITE, "SCHEDULER_FLEET_LIMITS": True, "POLITE_BUSY": 0.1}
    with PoliteSites(ADDRESSES, pages=PAGES) as sites:
        wait_all(fleet(server, redis_url, tmp_path, settings, sites))
    assert_each_site_at_its_delay(sites)


def held_start(server) -> float | None:
    """The start (ms, server clock) of a request of 127.0.0.2 handed out early and not
    started yet, if any (its slot's unreported start, still ahead)."""
    import msgpack

    from scrapy_redis.store.keys import slot_queue_keys

    raw = server.hget(slot_queue_keys("polite:requests")[3], ADDRESSES[0])
    state = msgpack.unpackb(raw) if raw else []
    seconds, micros = server.time()
    now = seconds * 1000 + micros // 1000
    return state[8] if len(state) > 8 and state[8] > now else None


def test_a_worker_stopped_while_it_holds_a_request_early_loses_nothing(server, redis_url, tmp_path):
    """A graceful stop while a request handed out early waits for its start: it starts
    no earlier (the engine finishes what its downloader holds), the rest goes back, and
    another worker crawls it with the delay held."""
    settings = {
        **POLITE,
        "DOWNLOAD_DELAY": 2,
        "SCHEDULER_FLEET_LIMITS": True,
        "SCHEDULER_FLEET_EARLY": 1,
        "SCHEDULER_PERSIST": True,
    }
    with PoliteSites(ADDRESSES[:1], pages=3) as sites:
        (first,) = fleet(server, redis_url, tmp_path, settings, sites, 1, tag="a")
        deadline = time.monotonic() + 60
        while held_start(server) is None:  # its / fetched, /p/0 handed out 1 s early
            assert first.process.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        first.process.send_signal(signal.SIGTERM)
        wait_all([first], finish_reason="shutdown")
        assert server.hlen("polite:requests:leases") == 0  # given back, or done
        second = start(redis_url, tmp_path / "b.log", settings)
        wait_all([second])
    paths = sorted(sites.paths(ADDRESSES[0]))
    assert paths == ["/", "/p/0.html", "/p/1.html", "/p/2.html"]  # each once
    gaps = sites.gaps(ADDRESSES[0])
    assert min(gaps) >= 1.8, sorted(gaps)


def test_a_start_is_reported_after_its_request_reached_the_site(server, redis_url, tmp_path):
    """The report of a start counts the slot's next start from then: it must leave after
    the request's bytes did (their arrival stamped by the site's kernel, on the clock of
    time.time()), else a worker descheduled between the two sends late, and another
    worker's next request comes less than the delay after it."""
    log = tmp_path / "starts.log"
    settings = {**POLITE, "DOWNLOAD_DELAY": 0.1, "SCHEDULER_FLEET_LIMITS": True}
    site = ADDRESSES[0]
    with PoliteSites([site], pages=PAGES) as sites:
        worker = fleet(
            server, redis_url, tmp_path, {**settings, "POLITE_STARTS_LOG": log}, sites, 1
        )
        wait_all(worker)
    assert_every_page_once_at(sites, site)
    reports = sorted(float(line.split()[0]) for line in log.read_text().splitlines())
    arrived = sites.wall[site]
    assert len(reports) == len(arrived)  # one worker: the n-th report is the n-th start's
    early = [(n, round(arrived[n] - at, 6)) for n, at in enumerate(reports) if at < arrived[n]]
    assert not early, (early, sites.ports[site])


def test_without_fleet_limits_each_site_sees_the_fleets_rate(server, redis_url, tmp_path):
    """Today's behaviour, kept with the setting off: each worker applies the delay to its
    own downloads only, so the sites see about four times the rate."""
    with PoliteSites(ADDRESSES, pages=PAGES) as sites:
        wait_all(fleet(server, redis_url, tmp_path, POLITE, sites))
    assert_every_page_once(sites)
    assert max(sites.rate(address) for address in ADDRESSES) > 2.2
    assert min(min(sites.gaps(address)) for address in ADDRESSES) < 0.45


def test_the_concurrency_per_domain_holds_across_the_fleet(server, redis_url, tmp_path):
    settings = {"SCHEDULER_FLEET_LIMITS": True, "CONCURRENT_REQUESTS_PER_DOMAIN": 2}
    with PoliteSites(ADDRESSES, pages=PAGES, latency=0.3) as sites:
        wait_all(fleet(server, redis_url, tmp_path, settings, sites))
    assert_every_page_once(sites)
    assert dict(sites.max_in_flight) == {address: 2 for address in ADDRESSES}


def test_a_killed_worker_loses_nothing_and_the_limits_hold(server, redis_url, tmp_path):
    settings = {**POLITE, "SCHEDULER_FLEET_LIMITS": True, "SCHEDULER_WORKER_TIMEOUT": 2}
    with PoliteSites(ADDRESSES, pages=PAGES) as sites:
        workers = fleet(server, redis_url, tmp_path, settings, sites)
        deadline = time.monotonic() + 60
        while sites.served() < 20:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(workers[0].process.pid, signal.SIGKILL)
        workers[0].process.wait()
        wait_all(workers[1:])
    for address in ADDRESSES:
        assert set(sites.paths(address)) == set(expected_paths()), address  # all fetched
        assert min(sites.gaps(address)) >= 0.45, (address, sorted(sites.gaps(address))[:5])
    logs = "".join(w.log for w in workers[1:])
    assert not PROBLEM.search(logs)
    assert server.keys("polite:*") == []


def test_a_retry_after_slows_the_site_for_the_whole_fleet(server, redis_url, tmp_path):
    # One download of the site at a time: a Retry-After cannot recall the requests already
    # on their way (with 8, one started 0.1 s after the 429 left the site, before any worker
    # had read it, came 0.12 s later on a loaded machine)
    settings = {
        "SCHEDULER_FLEET_LIMITS": True,
        "DOWNLOAD_DELAY": 0.1,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        **NO_JITTER,
    }
    slowed = ADDRESSES[0]
    with PoliteSites(ADDRESSES, pages=PAGES) as sites:
        sites.retry_after[(slowed, "/p/5.html")] = 2
        wait_all(fleet(server, redis_url, tmp_path, settings, sites))
    paths = sites.paths(slowed)
    assert paths.count("/p/5.html") == 2  # the 429, then its retry
    assert sorted(set(paths)) == expected_paths()
    times = sites.times(slowed)
    at = times[paths.index("/p/5.html")]
    after = [t for t in times if t > at]
    assert after and after[0] - at >= 1.9, after[0] - at  # nobody came back before 2 s
    others = [t for address in ADDRESSES[1:] for t in sites.times(address)]
    assert any(at < t < at + 1.9 for t in others)  # the other sites were not held up


def test_autothrottle_sets_one_delay_for_the_fleet(server, redis_url, tmp_path):
    settings = {
        "SCHEDULER_FLEET_LIMITS": True,
        "AUTOTHROTTLE_ENABLED": True,
        "AUTOTHROTTLE_START_DELAY": 0.1,
        "AUTOTHROTTLE_MAX_DELAY": 5,
        "AUTOTHROTTLE_TARGET_CONCURRENCY": 1,
        **NO_JITTER,
    }
    with PoliteSites(ADDRESSES, pages=PAGES, latency=0.3) as sites:
        wait_all(fleet(server, redis_url, tmp_path, settings, sites))
    assert_every_page_once(sites)
    for address in ADDRESSES:
        settled = sites.gaps(address)[10:]  # after the delay grew from 0.1 to the latency
        assert min(settled) >= 0.2, (address, sorted(settled)[:5])
        assert sites.max_in_flight[address] <= 2


def test_a_robots_crawl_delay_holds_for_the_fleet(server, redis_url, tmp_path):
    if not hasattr(scrapy_signals, "robots_parsed"):
        pytest.skip("Scrapy < 2.18 has no robots_parsed signal (Crawl-delay not applied)")
    settings = {"SCHEDULER_FLEET_LIMITS": True, "ROBOTSTXT_OBEY": True}
    delayed = ADDRESSES[0]
    with PoliteSites(ADDRESSES, pages=15) as sites:
        sites.robots[delayed] = "User-agent: *\nCrawl-delay: 0.5\n"
        wait_all(fleet(server, redis_url, tmp_path, settings, sites))
    assert min(sites.gaps(delayed)) >= 0.45, sorted(sites.gaps(delayed))[:5]
    assert len(sites.paths(delayed)) == 16
    assert min(sites.gaps(ADDRESSES[1])) < 0.2  # no delay where robots.txt sets none
