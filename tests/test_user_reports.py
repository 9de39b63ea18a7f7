"""What a worker tells its user: the last worker deleting the crawl's data says so, with
the counts (SCHEDULER_PERSIST = False)."""

from __future__ import annotations

import logging

import pytest
from scrapy import Request

LEAN = "scrapy_redis.dupefilter.LeanDupeFilter"


def cleared_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "Deleted this crawl's queue" in r.message]


@pytest.mark.parametrize("dupefilter", [None, LEAN])
def test_the_last_worker_deleting_the_crawl_logs_one_info_line_with_the_counts(
    settings_dict, server, schedulers, caplog, dupefilter
):
    settings = {**settings_dict, "SCHEDULER_ENQUEUE_DELAY": 0}
    if dupefilter:
        settings["DUPEFILTER_CLASS"] = dupefilter
    first, last = schedulers(settings), schedulers(settings)
    for page in range(3):
        first.enqueue_request(Request(f"http://example.com/{page}"))
    assert last.next_request() is not None  # never crawled: given back at close
    with caplog.at_level(logging.INFO, "scrapy_redis"):
        first.close("finished")
        assert cleared_lines(caplog) == []  # another worker still uses them
        last.close("finished")
    (line,) = cleared_lines(caplog)
    assert "(3 requests)" in line and "(3 fingerprints)" in line
    assert "SCHEDULER_PERSIST is False" in line
    assert last.cleared_shared_data is True


def test_a_persisted_crawl_logs_no_deletion(settings_dict, server, schedulers, caplog):
    scheduler = schedulers({**settings_dict, "SCHEDULER_PERSIST": True})
    scheduler.enqueue_request(Request("http://example.com/a"))
    with caplog.at_level(logging.INFO, "scrapy_redis"):
        scheduler.close("finished")
    assert cleared_lines(caplog) == []


def test_a_worker_names_the_redis_server_and_database_it_uses(
    settings_dict, server, schedulers, caplog, redis_url
):
    with caplog.at_level(logging.INFO, "scrapy_redis"):
        schedulers(settings_dict).close("finished")
    (line,) = [r.getMessage() for r in caplog.records if r.message.startswith("Sharing")]
    assert line == f"Sharing the queue demo:requests at {redis_url}"
