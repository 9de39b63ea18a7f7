"""End-to-end: with SCHEDULER_FLEET_LIMITS and ROBOTSTXT_OBEY, the robots.txt each worker
fetches (Scrapy's RobotsTxtMiddleware, outside the scheduler) counts in its site's
fleet-wide delay: real ``scrapy runspider`` workers against polite_site.py, which logs
every arrival (robots.txt included) with the kernel's stamp."""

from __future__ import annotations

import os
import signal
import time
from itertools import pairwise

import pytest

from polite_site import ADDRESSES, PoliteSites
from test_e2e import PROBLEM, wait_all
from test_politeness_e2e import POLITE, fleet

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

PAGES = 10
ROBOTS = "User-agent: *\nDisallow: /private/\n"


def all_gaps(sites: PoliteSites, address: str) -> list[tuple[float, str, str]]:
    """Seconds between consecutive arrivals at one site, robots.txt included, with the
    two paths."""
    with sites.lock:
        arrivals = list(sites.arrivals[address])
    return [(b - a, first, second) for (a, first), (b, second) in pairwise(arrivals)]


@pytest.mark.parametrize("robots_latency", [0.0, 4.0], ids=["quick", "slow"])
def test_every_workers_robots_txt_keeps_the_sites_delay(
    server, redis_url, tmp_path, robots_latency
):
    """With "slow", robots.txt answers in 4 s, longer than a slot waits for the report of a
    start (3 s): the start of the request that made a worker fetch it must not count for
    both."""
    settings = {**POLITE, "SCHEDULER_FLEET_LIMITS": True, "ROBOTSTXT_OBEY": True}
    with PoliteSites(ADDRESSES, pages=PAGES) as sites:
        sites.robots_latency = robots_latency
        for address in ADDRESSES:
            sites.robots[address] = ROBOTS
        workers = fleet(server, redis_url, tmp_path, settings, sites)
        wait_all(workers)
    assert not PROBLEM.search("".join(w.log for w in workers))
    expected = sorted(["/", *(f"/p/{i}.html" for i in range(PAGES))])
    for address in ADDRESSES:
        assert sorted(sites.paths(address)) == expected, address
        with sites.lock:
            robots = [path for _, path in sites.arrivals[address] if path == "/robots.txt"]
        assert 1 <= len(robots) <= 4, (address, len(robots))  # once per worker at most
        gaps = all_gaps(sites, address)
        short = sorted(gap for gap in gaps if gap[0] < 0.45)
        assert not short, (address, short[:5])


def lease_holders(server) -> set[int]:
    """The pids of the workers holding leases (ids ``<host>:<pid>:<hex>:<n>``)."""
    return {int(lease.split(b":")[-3]) for lease in server.hkeys("polite:requests:leases")}


def test_a_worker_killed_fetching_robots_txt_does_not_hold_the_site(server, redis_url, tmp_path):
    """The worker fetching robots.txt holds the site's one in-flight place (of the request
    waiting for it): killed, its lease is recovered and the other worker crawls the site."""
    settings = {
        "SCHEDULER_FLEET_LIMITS": True,
        "ROBOTSTXT_OBEY": True,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "SCHEDULER_WORKER_TIMEOUT": 2,
    }
    site = ADDRESSES[0]
    with PoliteSites([site], pages=3) as sites:
        sites.robots_latency = 3.0
        sites.robots[site] = ROBOTS
        workers = fleet(server, redis_url, tmp_path, settings, sites, workers=2)
        deadline = time.monotonic() + 60
        while not (sites.arrivals[site] and lease_holders(server)):
            assert time.monotonic() < deadline, "no robots.txt fetched"
            time.sleep(0.02)
        (pid,) = lease_holders(server)  # it fetches robots.txt, its request waiting
        killed = next(w for w in workers if w.process.pid == pid)
        os.kill(pid, signal.SIGKILL)
        killed.process.wait()
        wait_all([w for w in workers if w is not killed])
    assert sorted(sites.paths(site)) == ["/", "/p/0.html", "/p/1.html", "/p/2.html"]
    assert sites.max_in_flight[site] <= 2  # the killed worker's robots.txt, then the other's
