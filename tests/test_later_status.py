"""Seeing what a crawl keeps for later (issue 27.5): the requests due later and the
fingerprints that expire, in ``scrapy redis status`` (run as a user runs it, from a
project directory), its ``--json``, ``/metrics`` and the dashboard."""

from __future__ import annotations

import time

import pytest
from scrapy import Request
from scrapy.settings import Settings

from dashboard_process import DashboardProcess, http
from helpers import DemoSpider
from scrapy_redis.core.lifetime import META_KEY as LIFETIME
from scrapy_redis.dashboard import metrics
from scrapy_redis.dupefilter import request_fingerprint
from scrapy_redis.dupefilters.lean_expiry import GENERATIONS
from scrapy_redis.dupefilters.lean_layout import layout_from_meta
from scrapy_redis.fleet import later
from scrapy_redis.fleet.status import crawl_status
from scrapy_redis.scheduling.due import META_KEY
from scrapy_redis.store.keys import lean_meta_key
from test_commands import leave, schedule, write_project

#: The queue and filter keys of example-project's myspider_redis (the dashboard's crawl).
MYSPIDER_KEYS = {
    "SCHEDULER_QUEUE_KEY": "myspider_redis:requests",
    "SCHEDULER_DUPEFILTER_KEY": "myspider_redis:dupefilter",
}


def _settings(redis_url: str, dupefilter: str = "RFPDupeFilter", **extra) -> dict:
    """A crawl's settings on the test server: ``dupefilter`` (a class name), small filters,
    a 2-hour DUPEFILTER_LIFETIME unless ``extra`` says otherwise."""
    return {
        "REDIS_URL": redis_url,
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": f"scrapy_redis.dupefilter.{dupefilter}",
        "DUPEFILTER_LEAN_CAPACITY": 10_000,
        "BLOOMFILTER_CAPACITY": 10_000,
        "DUPEFILTER_LIFETIME": 7200,
        **extra,
    }


def _server_ms(server) -> int:
    seconds, micros = server.time()
    return seconds * 1000 + micros // 1000


def _with_settings(project, **settings) -> None:
    path = project.path / "proj" / "settings.py"
    path.write_text(path.read_text() + "".join(f"{k} = {v!r}\n" for k, v in settings.items()))


def _due_crawl(schedulers, settings: dict) -> None:
    requests = [
        Request("http://a.test/soon", meta={META_KEY: 600}),
        Request("http://a.test/late", meta={META_KEY: 3 * 3600}),
    ]
    leave(schedule(schedulers, settings, requests))


def test_status_shows_the_requests_due_later_and_when_the_next_is_due(
    tmp_path, redis_url, server, schedulers, settings_dict
):
    _due_crawl(schedulers, settings_dict)
    project = write_project(tmp_path, redis_url)
    result = project.run("status", "demo")
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith("  due later")]
    assert line.startswith("  due later    2, next due in ")
    assert float(line.split("next due in ")[1].split()[0]) > 9.0  # min: 10 less the run
    [diagnosis] = [line for line in result.stdout.splitlines() if "diagnosis" in line]
    assert "nothing to fetch now: 2 requests are due later, the next in " in diagnosis
    assert "no worker is alive: start one by then with `scrapy crawl demo`" in diagnosis
    [crawl] = project.json("status", "demo")["spiders"]
    due = crawl["due_later"]
    assert due["count"] == 2 and due["due_now"] == 0
    assert 500 < due["next_due_in"] <= 600
    assert abs(due["next_due_at"] * 1000 - (_server_ms(server) + due["next_due_in"] * 1000)) < 5000


def test_requests_due_already_but_no_worker_to_move_them_is_the_diagnosis(
    settings_dict, server, schedulers
):
    scheduler = schedulers(settings_dict)
    scheduler.stop_timers()
    scheduler.enqueue_request(Request("http://a.test/", meta={META_KEY: 0}))
    assert scheduler.send_enqueued()
    leave(scheduler)
    status = crawl_status(server, Settings(settings_dict), DemoSpider)
    assert status.due_later["due_now"] == 1 and status.due_later["next_due_in"] == 0
    assert "are due, but no worker is alive to move them" in status.diagnosis
    assert later.render_due(status.due_later).startswith("1, 1 due now")


def test_a_live_worker_waiting_for_requests_due_later_is_the_diagnosis(
    settings_dict, server, schedulers
):
    scheduler = schedulers(settings_dict)  # alive: in the registry
    scheduler.stop_timers()
    scheduler.enqueue_request(Request("http://a.test/", meta={META_KEY: 90}))
    assert scheduler.send_enqueued()
    status = crawl_status(server, Settings(settings_dict), DemoSpider)
    assert status.diagnosis.startswith("nothing to fetch now: 1 requests are due later")
    assert "s (by the Redis server's clock); workers stay open for those due within" in (
        status.diagnosis
    )


def test_a_due_time_no_worker_writes_is_shown_as_never(settings_dict, server):
    server.zadd("demo:requests:due", {b"x": float("inf")})  # anyone may write to Redis
    status = crawl_status(server, Settings(settings_dict), DemoSpider)
    assert status.due_later == {"count": 1, "due_now": 0, "next_due_at": None, "next_due_in": None}
    assert "1 requests are due later, the next never (by the Redis" in status.diagnosis
    assert later.render_due(status.due_later) == "1"


def test_status_counts_the_set_filters_fingerprints_alive_expiring_and_expired(
    tmp_path, redis_url, server, schedulers, settings_dict
):
    settings = {**settings_dict, "DUPEFILTER_LIFETIME": 1800, "SCHEDULER_PERSIST": True}
    requests = [Request(f"http://a.test/{n}") for n in range(3)]
    requests.append(Request("http://a.test/forever", meta={"dupefilter_lifetime": None}))
    requests.append(Request("http://a.test/day", meta={"dupefilter_lifetime": 86400}))
    leave(schedule(schedulers, settings, requests))
    server.zadd("demo:dupefilter", {"0" * 40: _server_ms(server) - 1000})  # not swept yet
    project = write_project(tmp_path, redis_url)
    _with_settings(project, DUPEFILTER_LIFETIME=1800)
    text = project.run("status", "demo").stdout
    assert (
        "  expiring     5 alive, 3 expire within 1.0 h, 1 kept forever, 1 expired (not removed yet)"
    ) in text
    [crawl] = project.json("status", "demo")["spiders"]
    assert crawl["expiring"] == {
        "layout": "sorted set", "alive": 5, "forever": 1, "expiring_soon": 3, "expired": 1,
        "soon_seconds": 3600,
    }  # fmt: skip


def test_a_crawl_without_a_lifetime_shows_no_expiring_fingerprints(
    settings_dict, server, schedulers
):
    leave(schedule(schedulers, settings_dict, [Request("http://a.test/")]))
    status = crawl_status(server, Settings(settings_dict), DemoSpider)
    assert status.expiring is None and status.due_later["count"] == 0
    samples = metrics.render([status.to_json()])
    assert 'scrapy_redis_due_later{spider="demo"} 0' in samples
    assert "scrapy_redis_fingerprints_alive{" not in samples
    assert "scrapy_redis_due_next_seconds{" not in samples  # none due: no sample, not 0


@pytest.mark.parametrize("capacity, estimated", [(10_000, False), (1_000_000, True)])
def test_status_shows_the_lean_filters_live_generations(
    redis_url, server, schedulers, capacity, estimated
):
    settings = _settings(redis_url, "LeanDupeFilter", DUPEFILTER_LEAN_CAPACITY=capacity)
    requests = [Request(f"http://a.test/{n}") for n in range(200)]
    leave(schedule(schedulers, settings, requests))
    status = crawl_status(server, Settings(settings), DemoSpider)
    view = status.expiring
    assert view["layout"] == "lean" and view["lifetime"] == 7200
    generations = view["generations"]
    assert len(generations) == GENERATIONS + 1  # the live ones
    assert all(0 <= gen["expires_in"] <= 3 * 3600 for gen in generations)
    assert [gen["estimated"] for gen in generations] == [estimated] * (GENERATIONS + 1)
    held = [g["fingerprints"] for g in generations]
    assert held.count(0) == GENERATIONS  # one lifetime: every fingerprint in one generation
    if not estimated:
        assert view["alive"] == 200 and sum(held) == 200
    else:  # 64 of 4,096 buckets counted, evenly spread: the 200 URLs' fingerprints are
        # known, so is how many fall in the counted buckets (too few for a tolerance)
        assert view["alive"] == sum(held) == _estimate(server, "demo:dupefilter", requests)
    assert status.fingerprints == view["alive"]  # nothing kept forever: no count
    lines = later.render_expiring(view)
    assert "(lean generations, lifetime 2.0 h)" in lines[0]
    assert lines[1].startswith(f"generation {generations[0]['generation']}: ")
    samples = metrics.render([status.to_json()]).splitlines()
    sizes = [s for s in samples if s.startswith("scrapy_redis_fingerprint_generation_size{")]
    assert [s.split(" ")[0] for s in sizes] == [
        f'scrapy_redis_fingerprint_generation_size{{spider="demo",age="{age}"}}'
        for age in range(GENERATIONS + 1)
    ]
    assert f'scrapy_redis_fingerprints{{spider="demo"}} {view["alive"]}' in samples


def _estimate(server, key: str, requests: list[Request]) -> int:
    """What counting :data:`later.SAMPLE` evenly spread buckets of the lean filter ``key``'s
    generations estimates they hold, ``requests`` recorded (distinct fingerprints)."""
    meta = lean_meta_key(key)
    fields = {k.decode(): v for k, v in server.hgetall(meta).items()}
    layout, buckets = layout_from_meta(fields, meta), int(fields["gen_buckets"])
    step = buckets // later.SAMPLE
    located = layout.locate_parts([request_fingerprint(r) for r in requests], buckets)
    counted = sum(1 for _, _, bucket in located if bucket % step == 0)
    return round(counted * buckets / len(range(0, buckets, step)))


def test_status_counts_a_lean_filters_fingerprints_with_a_lifetime(redis_url, server, schedulers):
    """Its own buckets (kept forever: the count does not follow them once a lifetime is
    set) and its live generations; /metrics follows."""
    settings = _settings(redis_url, "LeanDupeFilter")  # 64 buckets or fewer: all counted
    requests = [Request(f"http://a.test/{n}") for n in range(30)]
    requests += [Request(f"http://a.test/kept/{n}", meta={LIFETIME: None}) for n in range(5)]
    leave(schedule(schedulers, settings, requests))
    status = crawl_status(server, Settings(settings), DemoSpider)
    assert status.expiring["alive"] == 30
    assert status.fingerprints == 35
    samples = metrics.render([status.to_json()]).splitlines()
    assert 'scrapy_redis_fingerprints{spider="demo"} 35' in samples


def test_metrics_show_the_requests_due_later_and_the_fingerprints_expiring(
    settings_dict, server, schedulers
):
    settings = {**settings_dict, "DUPEFILTER_LIFETIME": 60}
    _due_crawl(schedulers, settings)
    status = crawl_status(server, Settings(settings), DemoSpider).to_json()
    samples = metrics.render([status]).splitlines()
    assert 'scrapy_redis_due_later{spider="demo"} 2' in samples
    assert 'scrapy_redis_due_now{spider="demo"} 0' in samples
    [next_due] = [s for s in samples if s.startswith("scrapy_redis_due_next_seconds{")]
    assert 500 < float(next_due.rsplit(" ", 1)[1]) <= 600
    assert 'scrapy_redis_fingerprints_alive{spider="demo"} 2' in samples
    assert 'scrapy_redis_fingerprints_expiring_soon{spider="demo"} 2' in samples


def test_the_dashboard_serves_them(tmp_path, redis_url, server, schedulers):
    """The dashboard's /api/status and /metrics (its page fills its tiles from them)."""
    settings = _settings(redis_url, DUPEFILTER_LIFETIME=0, **MYSPIDER_KEYS)
    _due_crawl(schedulers, settings)
    dashboard = DashboardProcess(redis_url, "--interval", "1").start()
    try:
        deadline = time.monotonic() + 30
        while True:
            crawls = http(dashboard.url + "api/status").json()["crawls"]
            [crawl] = [c for c in crawls if c["spider"] == "myspider_redis"]
            if crawl["due_later"] and crawl["due_later"]["count"] == 2:
                break
            assert time.monotonic() < deadline, crawl["due_later"]
            time.sleep(0.2)
        text = http(dashboard.url + "metrics").text
        assert 'scrapy_redis_due_later{spider="myspider_redis"} 2' in text
        page = http(dashboard.url).text
        assert 'data-field="due_later"' in page and 'data-field="fingerprints_expiring"' in page
    finally:
        dashboard.stop()


@pytest.mark.e2e
@pytest.mark.timeout(90)
def test_the_page_shows_the_requests_due_later_and_the_fingerprints_expiring(
    tmp_path, redis_url, server, schedulers
):
    """The page's tiles, in a real headless Chromium (see tests/browser.py)."""
    from browser import chromium_driver

    settings = _settings(redis_url, DUPEFILTER_LIFETIME=600, **MYSPIDER_KEYS)
    _due_crawl(schedulers, settings)
    dashboard = DashboardProcess(redis_url, "--interval", "0.5").start()
    browser = chromium_driver(tmp_path / "profile", tmp_path / "chromedriver.log")
    try:
        browser.get(dashboard.url)
        script = (
            "const s = document.querySelector('[data-spider=\"myspider_redis\"]');"
            "if (!s) return null; const t = s.querySelector('.tiles.later');"
            "return [t.hidden, ...['due_later', 'due_next', 'fingerprints_alive',"
            "'fingerprints_expiring'].map(f => s.querySelector(`[data-field=\"${f}\"]`)"
            ".innerText.trim())];"
        )
        deadline = time.monotonic() + 30
        while (shown := browser.execute_script(script)) is None or shown[1] != "2":
            assert time.monotonic() < deadline, shown
            time.sleep(0.1)
        hidden, due, next_due, alive, expiring_soon = shown
        assert not hidden and due == "2" and next_due.endswith(" min")
        assert float(next_due.split()[0]) > 8  # 10 min less the run
        assert alive == "2" and expiring_soon == "2"
    finally:
        browser.quit()
        dashboard.stop()


def test_status_shows_the_bloom_filters_live_generations(redis_url, server, schedulers):
    """A Bloom filter whose fingerprints expire (bloom_expiry.py): its count is the sum of
    its live time generations, which status lists with when each expires whole."""
    settings = _settings(redis_url, "BloomDupeFilter")
    requests = [Request(f"http://a.test/{n}") for n in range(200)]
    leave(schedule(schedulers, settings, requests))
    status = crawl_status(server, Settings(settings), DemoSpider)
    assert status.fingerprints == 200
    view = status.expiring
    assert view["layout"] == "bloom" and view["lifetime"] == 7200 and view["alive"] == 200
    [generation] = view["generations"]  # all recorded now: one generation
    assert generation["fingerprints"] == 200 and 3600 <= generation["expires_in"] <= 3 * 3600
    lines = later.render_expiring(view)
    assert "(bloom generations, lifetime 2.0 h)" in lines[0]
    samples = metrics.render([status.to_json()]).splitlines()
    assert 'scrapy_redis_fingerprints_alive{spider="demo"} 200' in samples


def _generation_series(server, settings: dict) -> tuple[set[str], list[int], list[str]]:
    """The /metrics series of the filter's live generations, their numbers, the samples."""
    status = crawl_status(server, Settings(settings), DemoSpider)
    samples = metrics.render([status.to_json()]).splitlines()
    series = {s.split(" ")[0] for s in samples if s.startswith("scrapy_redis_fingerprint_gen")}
    return series, [gen["generation"] for gen in status.expiring["generations"]], samples


@pytest.mark.parametrize("dupefilter", ["LeanDupeFilter", "BloomDupeFilter"])
def test_metrics_keep_their_series_as_the_generations_turn_over(
    redis_url, server, schedulers, dupefilter
):
    """A generation's number is no label (a new series every half lifetime, without end in
    a crawl of months): its age rank is, "0" the newest; the number is a value."""
    settings = _settings(redis_url, dupefilter, DUPEFILTER_LIFETIME=2)  # a generation a second
    worker = schedule(schedulers, settings, [Request("http://a.test/first")])
    first, numbers, samples = _generation_series(server, settings)
    newest = f'scrapy_redis_fingerprint_generation_number{{spider="demo",age="0"}} {max(numbers)}'
    assert newest in samples
    first_number = max(numbers)
    seen, deadline = set(first), time.monotonic() + 30
    while max(numbers) < first_number + 3:  # three turnovers (Bloom: a new one written)
        worker.enqueue_request(Request(f"http://a.test/{time.monotonic()}"))
        assert worker.send_enqueued()
        series, numbers, _ = _generation_series(server, settings)
        seen |= series
        assert time.monotonic() < deadline, numbers
        time.sleep(0.05)
    assert len(seen) <= 3 * 5, sorted(seen)  # 3 families, 5 ages at most
    ages = {line.split('age="')[1].split('"')[0] for line in seen}
    assert ages <= {"0", "1", "2", "3", "4"}  # the live ones: at most GENERATIONS + 3
    if dupefilter == "LeanDupeFilter":  # always GENERATIONS + 1 live: the same series
        assert seen == first
    leave(worker)
