"""End-to-end: with SCHEDULER_FLEET_LIMITS, the downloads that bypass the scheduler (a
media pipeline's, a spider's own ``engine.download_async()``) count in their site's
fleet-wide limits with the pages (politeness/outside.py): real ``scrapy runspider``
workers against polite_site.py, whose pages each have a file on the same site."""

from __future__ import annotations

import pytest

from polite_site import ADDRESSES, PoliteSites
from test_e2e import wait_all
from test_politeness_e2e import POLITE, fleet

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

PAGES = 10
SITE = ADDRESSES[0]


def expected_paths() -> list[str]:
    pages = ["/", *(f"/p/{i}.html" for i in range(PAGES))]
    return sorted([*pages, *(f"/f/{i}.bin" for i in range(PAGES))])


@pytest.mark.parametrize("outside", ["files", "download"])
def test_pages_and_their_files_keep_the_sites_delay(server, redis_url, tmp_path, outside):
    """DOWNLOAD_DELAY = 0.5, three workers: no two requests to the site (pages and files
    together) less than 0.45 s apart. Before the gate, each file went out right after
    its page's response, whatever the others' starts."""
    settings = {
        **POLITE,
        "SCHEDULER_FLEET_LIMITS": True,
        "POLITE_OUTSIDE": outside,
        "FILES_STORE": tmp_path / "files",
    }
    with PoliteSites([SITE], pages=PAGES) as sites:
        wait_all(fleet(server, redis_url, tmp_path, settings, sites, workers=3))
    assert sorted(sites.paths(SITE)) == expected_paths()
    short = sorted(gap for gap in sites.gaps(SITE) if gap < 0.45)
    assert not short, short[:5]


def test_files_take_an_in_flight_place_of_the_site(server, redis_url, tmp_path):
    """CONCURRENT_REQUESTS_PER_DOMAIN = 1, no delay, pages and files answering in 0.2 s:
    never two downloads in flight at the site across the fleet, and the crawl ends. A
    page waiting in its worker's item pipeline for its file still holds its own place
    (its lease): the file downloads in it. This passes on main too (files were not
    counted); it guards against the gate's deadlock: with a place of their own, the
    files waited for ever (2 pages crawled in 2 minutes, then killed)."""
    settings = {
        "SCHEDULER_FLEET_LIMITS": True,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "POLITE_OUTSIDE": "files",
        "FILES_STORE": tmp_path / "files",
    }
    with PoliteSites([SITE], pages=PAGES, latency=0.2) as sites:
        wait_all(fleet(server, redis_url, tmp_path, settings, sites, workers=3))
    assert sorted(sites.paths(SITE)) == expected_paths()
    assert sites.max_in_flight[SITE] == 1
