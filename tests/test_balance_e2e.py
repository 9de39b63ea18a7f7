"""Load balance: two workers on a polite crawl (DOWNLOAD_DELAY, one request at a time
per domain) share the pages.

With ``scrapy startproject``'s defaults (DOWNLOAD_DELAY = 1,
CONCURRENT_REQUESTS_PER_DOMAIN = 1) Scrapy's engine still takes up to
CONCURRENT_REQUESTS (16) requests from the scheduler at once, most of them only
to wait in the downloader for their turn: the worker that fetched a listing page
leased all the pages it linked to and the other fetched none. A worker now takes
only what its downloader will start within about a second (see
docs/scheduler.rst, "Pacing"); the rest stays in Redis for the others.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from test_e2e import DOMAIN, keys, start_worker, wait_all

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

#: The listing page links to this many pages (fewer than CONCURRENT_REQUESTS' 16 more
#: would let one greedy worker take them all, and more would only lengthen the test).
PAGES = 20
SPIDER = "myspider_redis"
POLITE = {
    "DOWNLOAD_DELAY": 0.3,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
    "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
    "SCHEDULER_PERSIST": False,
}


class ListingSite:
    """A listing page ``/`` linking to ``/p/0.html`` ... ``/p/<pages - 1>.html`` (no other
    links): all the work of the crawl appears at once. Counts the requests per path."""

    def __init__(self, pages: int) -> None:
        self.hits: Counter[str] = Counter()
        lock = threading.Lock()
        links = "".join(f'<a href="/p/{i}.html">page {i}</a>' for i in range(pages))

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with lock:
                    site.hits[self.path] += 1
                body = f"<html><head><title>{self.path}</title></head><body>"
                body += (links if self.path == "/" else "") + "</body></html>"
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        site = self
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ListingSite:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def wait_for_workers(server, count: int, workers, timeout: float = 60) -> None:
    """Wait until ``count`` workers have joined the registry of the spider's queue."""
    deadline = time.monotonic() + timeout
    while server.hlen(f"{SPIDER}:requests:workers") < count:
        assert all(w.process.poll() is None for w in workers), "a worker exited early"
        assert time.monotonic() < deadline, f"fewer than {count} workers after {timeout}s"
        time.sleep(0.05)


def test_two_polite_workers_share_the_pages(server, redis_url, tmp_path):
    with ListingSite(PAGES) as site:
        workers = [
            start_worker(SPIDER, redis_url, tmp_path / f"polite-{n}.log", POLITE, DOMAIN)
            for n in (1, 2)
        ]
        wait_for_workers(server, 2, workers)  # both ready: neither starts with a head start
        server.lpush("myspider:start_urls", site.url)
        wait_all(workers)
    expected = {"/": 1, **{f"/p/{i}.html": 1 for i in range(PAGES)}}
    assert dict(site.hits) == expected  # every page once
    fetched = sorted(worker.stats.get("downloader/request_count", 0) for worker in workers)
    assert sum(fetched) == PAGES + 1
    assert fetched[1] <= 2 * fetched[0], f"unfair shares (requests per worker): {fetched}"
    assert keys(server) == {f"{SPIDER}:items"}
