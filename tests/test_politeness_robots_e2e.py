"""End-to-end: with SCHEDULER_FLEET_LIMITS and ROBOTSTXT_OBEY, the robots.txt each worker
fetches (Scrapy's RobotsTxtMiddleware, outside the scheduler) counts in its site's
fleet-wide delay: real ``scrapy runspider`` workers against polite_site.py, which logs
every arrival (robots.txt included) with the kernel's stamp."""

from __future__ import annotations

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
