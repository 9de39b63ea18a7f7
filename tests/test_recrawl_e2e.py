"""End-to-end (issue 27.1): two real workers recrawl a site whose pages change, with a
3-second DUPEFILTER_LIFETIME. Pushed again before the lifetime, the start URL leads to no
page fetched again; pushed after it, every page is fetched once more (exactly twice in
all, across both workers) and the items show the new content."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from helpers import LocalSite, scrapy_redis, wait_until
from scrapy_redis.scheduling.enqueue import FORGETS_EVERY
from test_e2e import DOMAIN, start_worker, wait_all

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

PAGES = 12
LIFETIME = 3
SPIDER = "mycrawler_redis"
START_KEY = "mycrawler:start_urls"


class ChangingSite(LocalSite):
    """``/`` (any query) links to every page, then to ``/end/<round>`` (a page never seen
    before: once it is fetched, the links before it were checked). Page ``i`` links to two
    other pages; its title carries the site's version."""

    def __init__(self) -> None:
        self.version = 1
        self.hits: Counter[str] = Counter()
        self.first_hit: dict[str, float] = {}
        super().__init__()

    def hit(self, path: str) -> None:
        self.hits[path.split("?")[0]] += 1
        self.first_hit.setdefault(path, time.time())

    def page(self, path: str) -> str:
        if path.startswith("/?round="):
            links = [f"/p/{i}.html" for i in range(PAGES)] + [f"/end/{path.split('=')[1]}"]
        elif path.startswith("/p/"):
            i = int(path[3:].split(".")[0])
            links = [f"/p/{(i + 1) % PAGES}.html", f"/p/{(i + 5) % PAGES}.html"]
        else:
            links = []
        anchors = "".join(f'<a href="{link}">{link}</a>' for link in links)
        return f"<html><title>{path} v{self.version}</title><body>{anchors}</body></html>"

    def count(self, path: str) -> int:
        with self._lock:
            return self.hits[path]

    def pages(self) -> dict[str, int]:
        with self._lock:
            return {path: n for path, n in self.hits.items() if path.startswith("/p/")}


def round_done(server, site, n: int) -> bool:
    """``/end/<n>`` (the last link of round ``n``'s start page) was fetched, and the queue
    is empty with no lease left (a lease goes once the requests its page led to are
    pushed): every request round ``n`` led to was fetched or dropped as a duplicate."""
    queue = f"{SPIDER}:requests"
    return (
        site.count(f"/end/{n}") == 1
        and not server.exists(queue)
        and not server.hlen(f"{queue}:leases")
    )


def two_workers(redis_url: str, tmp_path, settings: dict) -> list:
    """Two ``scrapy crawl`` workers of example-project's ``mycrawler_redis``."""
    return [
        start_worker(SPIDER, redis_url, tmp_path / f"w{n}.log", settings, arguments=DOMAIN)
        for n in (1, 2)
    ]


def crawl_three_rounds(server, site, workers, first_expiry, expired) -> None:
    """Round 1 crawls every page; round 2, pushed before ``first_expiry()`` (ms, the
    server's clock: when the filter's first fingerprint expires), fetches none again;
    round 3, pushed once ``expired()``, after the site changed to version 2, every page
    again. Then the workers are waited for and the site closed."""
    try:
        server.lpush(START_KEY, f"{site.url}/?round=1")
        wait_until(lambda: round_done(server, site, 1), "crawling round 1", workers)
        assert set(site.pages().values()) == {1} and len(site.pages()) == PAGES
        first = first_expiry()

        # Before the lifetime: the start page is fetched (dont_filter), no page again.
        server.lpush(START_KEY, f"{site.url}/?round=2")
        wait_until(lambda: round_done(server, site, 2), "crawling round 2", workers)
        seconds, micros = server.time()
        done = seconds * 1000 + micros / 1000
        assert done < first, "round 2 ended past the lifetime: too slow to test it"
        assert set(site.pages().values()) == {1}, site.pages()

        site.version = 2
        wait_until(expired, "expiring", workers)
        server.lpush(START_KEY, f"{site.url}/?round=3")
        wait_until(lambda: round_done(server, site, 3), "crawling round 3", workers)
    finally:
        wait_all(workers)
        site.close()


def assert_every_page_crawled_twice(server, site, workers) -> None:
    """Each page fetched exactly twice in all (both workers), its items of both versions."""
    assert site.pages() == {f"/p/{i}.html": 2 for i in range(PAGES)}
    items = [json.loads(raw) for raw in server.lrange(f"{SPIDER}:items", 0, -1)]
    names = Counter(item["name"].split()[-1] for item in items if "/p/" in item["url"])
    assert names == {"v1": PAGES, "v2": PAGES}
    versions: dict[str, set[str]] = {item["url"]: set() for item in items}
    for item in items:
        versions[item["url"]].add(item["name"].split()[-1])
    assert all(found == {"v1", "v2"} for url, found in versions.items() if "/p/" in url)
    fetched = [w.stats.get("response_received_count", 0) for w in workers]
    assert sum(fetched) == 3 + 2 * PAGES + 3  # 3 start pages, each page twice, 3 ends


def test_pages_are_crawled_again_after_their_lifetime_only(server, redis_url, tmp_path):
    site = ChangingSite()
    settings = {"DUPEFILTER_LIFETIME": LIFETIME, "MAX_IDLE_TIME_BEFORE_CLOSE": 8}
    workers = two_workers(redis_url, tmp_path, settings)
    filter_key = f"{SPIDER}:dupefilter"
    crawl_three_rounds(
        server,
        site,
        workers,
        first_expiry=lambda: server.zrange(filter_key, 0, 0, withscores=True)[0][1],
        expired=lambda: not server.exists(filter_key),  # it expires with its last one
    )
    assert_every_page_crawled_twice(server, site, workers)


def test_a_forgotten_url_is_crawled_once_more_the_others_not(server, redis_url, tmp_path):
    site = ChangingSite()
    settings = {"MAX_IDLE_TIME_BEFORE_CLOSE": 8}  # workers remember links (SeenCache)
    workers = two_workers(redis_url, tmp_path, settings)
    forgotten = [f"{site.url}/p/3.html", f"{site.url}/p/7.html"]
    try:
        server.lpush(START_KEY, f"{site.url}/?round=1")
        wait_until(lambda: round_done(server, site, 1), "crawling round 1", workers)
        result = scrapy_redis(redis_url, "forget", SPIDER, forgotten[0], "-", stdin=forgotten[1])
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"Forgot 2 of 2 URLs of {SPIDER}."
        # The documented delay: a running worker looks at the forget counter at most every
        # FORGETS_EVERY seconds before trusting what it remembers (a lower bound, no race).
        time.sleep(FORGETS_EVERY)
        server.lpush(START_KEY, f"{site.url}/?round=2")
        wait_until(lambda: round_done(server, site, 2), "crawling round 2", workers)
    finally:
        wait_all(workers)
        site.close()
    again = {"/p/3.html", "/p/7.html"}
    assert site.pages() == {f"/p/{i}.html": 1 + (f"/p/{i}.html" in again) for i in range(PAGES)}


def test_a_request_due_later_is_fetched_when_due_across_a_kill(server, redis_url, tmp_path):
    """A start message due in 3 s, read by a worker killed (-9) as soon as it scheduled it:
    the other worker (reading another start key, sharing the queue) fetches it no sooner
    than 3 s after it was scheduled, by the Redis server's clock (the same host's clock as
    the site's), and within a poll interval of that (plus a second of a busy machine)."""
    from scrapy_redis.scheduling.due import POLL

    site = ChangingSite()
    settings = {"MAX_IDLE_TIME_BEFORE_CLOSE": 10}
    reader = start_worker(SPIDER, redis_url, tmp_path / "reader.log", settings, DOMAIN)
    other_key = {**DOMAIN, "redis_key": "elsewhere:start_urls"}
    other = start_worker(SPIDER, redis_url, tmp_path / "other.log", settings, other_key)
    due_key = f"{SPIDER}:requests:due"
    try:
        wait_until(
            lambda: server.hlen(f"{SPIDER}:requests:workers") == 2, "starting", [reader, other]
        )
        message = {"url": f"{site.url}/p/0.html", "meta": {"due_in": 3}}
        server.lpush(START_KEY, json.dumps(message))
        wait_until(lambda: server.zcard(due_key) == 1, "scheduling", [reader, other])
        reader.process.kill()  # kill -9: the worker that scheduled it
        reader.process.wait()
        due_ms = server.zrange(due_key, 0, 0, withscores=True)[0][1]
        wait_until(lambda: site.count("/p/0.html") == 1, "fetching when due", [other], 30)
    finally:
        wait_all([other])
        site.close()
    fetched_ms = site.first_hit["/p/0.html"] * 1000
    assert due_ms <= fetched_ms <= due_ms + (POLL + 1) * 1000
    assert not server.exists(due_key)
