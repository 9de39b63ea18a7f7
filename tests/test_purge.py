"""Purging a queue while its workers push (``lua/queue_purge.lua``), and the registry's
live workers as the purges read them, on a real redis-server."""

from __future__ import annotations

import pytest
import redis
from scrapy import Request

from scrapy_redis.exceptions import ScrapyRedisError
from scrapy_redis.fleet.operations import PURGE_ATTEMPTS, purge_queue
from scrapy_redis.scheduling.workers import alive_workers
from scrapy_redis.store.scripts import script

QUEUE = "demo:requests"


def push(scheduler, priority: int, path: str = "") -> None:
    """The worker ``scheduler`` pushes a request of ``priority`` (a list and its index)."""
    request = Request(f"http://a.test/{priority}/{path}", priority=priority)
    assert scheduler.enqueue_request(request)
    assert scheduler.send_enqueued()


class RacingClient(redis.Redis):
    """A client of the test server before whose first ``races`` calls of the purge
    script a worker (``racer``, with its own client) pushes a request of a new priority:
    what a worker running during a purge may do at any time."""

    racer = None
    races = 0
    purge_calls = 0

    def execute_command(self, *args, **options):
        if args[:2] == ("EVALSHA", script("queue_purge").sha):
            self.purge_calls += 1
            if self.purge_calls <= self.races:
                push(self.racer, 100 + self.purge_calls)
        return super().execute_command(*args, **options)


@pytest.fixture
def racing(redis_url):
    client = RacingClient.from_url(redis_url)
    yield client
    client.close()


def test_the_script_refuses_a_priority_pushed_after_the_index_was_read(
    server, settings_dict, schedulers
):
    worker = schedulers(settings_dict)
    push(worker, 0)
    seen = server.zrange(QUEUE, 0, -1)  # what the purging client read: priority 0
    push(worker, 7)  # then a worker pushes a new priority
    keys = [QUEUE, f"{QUEUE}:prio:0"]
    assert script("queue_purge")(server, keys, seen) == [0, b"7"]
    assert server.zrange(QUEUE, 0, -1) == [b"7", b"0"]  # nothing deleted
    assert server.llen(f"{QUEUE}:prio:7") == 1
    reply = script("queue_purge")(server, [*keys, f"{QUEUE}:prio:7"], [*seen, b"7"])
    assert reply == [1, 3]
    assert server.keys(f"{QUEUE}:prio:*") == []


def test_purge_retries_with_the_priorities_pushed_meanwhile_and_leaves_no_list(
    racing, server, settings_dict, schedulers
):
    worker = schedulers(settings_dict)
    push(worker, 0)
    racing.racer, racing.races = worker, 3
    assert purge_queue(racing, QUEUE) > 0
    assert racing.purge_calls == 4  # each of the 3 pushes made one call refuse
    assert server.keys(f"{QUEUE}*") == [b"demo:requests:workers"]  # the registry stays
    push(worker, 103, "new")  # a priority raced before: nothing purged comes back
    assert server.llen(f"{QUEUE}:prio:103") == 1


def test_purge_gives_up_while_new_priorities_keep_coming_and_deletes_nothing(
    racing, server, settings_dict, schedulers
):
    worker = schedulers(settings_dict)
    push(worker, 0)
    racing.racer, racing.races = worker, PURGE_ATTEMPTS
    with pytest.raises(ScrapyRedisError, match="Stop the crawl's workers, then purge again"):
        purge_queue(racing, QUEUE)
    assert server.zcard(QUEUE) == PURGE_ATTEMPTS + 1
    assert len(server.keys(f"{QUEUE}:prio:*")) == PURGE_ATTEMPTS + 1


def test_purge_deletes_priority_lists_no_index_names(server, settings_dict, schedulers):
    """Left by a purge that read the index, then deleted, while a worker pushed."""
    push(schedulers(settings_dict), 0)
    server.rpush(f"{QUEUE}:prio:9", b"stale")
    server.rpush("demo:requests:prio", b"not a priority list")
    assert purge_queue(server, QUEUE, orphans=False) == 2  # the index and its list
    assert server.exists(f"{QUEUE}:prio:9")
    assert purge_queue(server, QUEUE) == 1
    assert not server.exists(f"{QUEUE}:prio:9")
    assert server.exists("demo:requests:prio")


def test_purge_of_a_list_queue_with_its_leases(server, settings_dict, schedulers):
    fifo = {**settings_dict, "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.FifoQueue"}
    worker = schedulers(fifo)
    for n in range(3):
        worker.enqueue_request(Request(f"http://a.test/{n}"))
    assert worker.next_request() is not None  # leases what it pops
    assert server.hlen(f"{QUEUE}:leases") == 1
    assert purge_queue(server, QUEUE) == 2  # nothing left queued: the leases' two keys
    assert server.keys(f"{QUEUE}*") == [b"demo:requests:workers"]


def test_alive_workers_are_the_registry_entries_not_expired_on_the_servers_clock(
    server, settings_dict, schedulers
):
    worker = schedulers(settings_dict)
    seconds, _ = server.time()
    registry = f"{QUEUE}:workers"
    server.hset(registry, mapping={"gone": (seconds - 5) * 1000, "~flushing": 2**50})
    server.hset(registry, "zombie", "not a deadline")
    assert alive_workers(server, QUEUE) == [worker.worker_id]
    assert alive_workers(server, "other:requests") == []
