"""End-to-end: a worker stalled between the pop and the send of a request for longer
than the slot waits for the report of its start (the delay plus REPORT_GRACE, 3 s) has
lost that start: another worker started the slot meanwhile. It must not send its request
then, but take a new start and wait for it (politeness.late)."""

from __future__ import annotations

import pytest

from polite_site import ADDRESSES, PoliteSites
from test_e2e import wait_all
from test_politeness_e2e import POLITE, assert_every_page_once_at, fleet

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

PAGES = 30


def test_a_worker_stalled_past_the_grace_does_not_send_a_start_it_lost(server, redis_url, tmp_path):
    """A request handed out 0.25 s early (SCHEDULER_FLEET_EARLY) keeps its start the delay
    (0.5 s) plus 3 s after it: a 4.25 s stall on it lands it among the other worker's
    starts (0.5 s apart from then), unless the stalled worker checks its start."""
    site = ADDRESSES[0]
    settings = {**POLITE, "SCHEDULER_FLEET_LIMITS": True, "POLITE_STALL": "4.25:/p/10.html"}
    with PoliteSites([site], pages=PAGES) as sites:
        workers = fleet(server, redis_url, tmp_path, settings, sites, workers=2)
        wait_all(workers)
    assert_every_page_once_at(sites, site)
    gaps = sites.gaps(site)
    assert min(gaps) >= 0.45, sorted(gaps)[:5]
    # the stalled request found its start lost (the gaps are not held by chance)
    stats = [w.stats for w in workers]
    assert sum(s.get("scheduler/fleet/late_lost", 0) for s in stats) >= 1, stats
