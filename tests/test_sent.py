"""politeness/sent.py: a start is reported once its request's bytes have left, step by step
on a stand-in reactor (Twisted's task.Clock with a set of writers) and downloader slot.
The real thing: test_politeness_e2e.py::test_a_start_is_reported_after_its_request_reached_
the_site."""

from __future__ import annotations

from types import SimpleNamespace

from twisted.internet.task import Clock

from scrapy_redis.politeness.sent import MAX_WATCH, POLL, when_sent


class Reactor(Clock):
    """(Clock.advance() also runs the calls its calls make due: a turn is a POLL step.)"""

    def __init__(self) -> None:
        super().__init__()
        self.writers: set[object] = set()

    def getWriters(self) -> list[object]:
        return list(self.writers)


def setup(*busy: object) -> tuple[Reactor, SimpleNamespace, object, list[str]]:
    """A request that just reached the downloader, while ``busy`` transports had bytes
    to send."""
    reactor = Reactor()
    reactor.writers.update(busy)
    request = object()
    slot = SimpleNamespace(active={request}, transferring=set())
    downloader = SimpleNamespace(slots={"site": slot})
    calls: list[str] = []
    when_sent(reactor, downloader, request, "site", lambda: calls.append("sent"))
    return reactor, slot, request, calls


def test_the_call_waits_for_the_write_then_for_the_send():
    busy = object()  # a transport busy before the request reached the downloader
    reactor, slot, request, calls = setup(busy)
    for _ in range(3):  # the download task has not run yet
        reactor.advance(POLL)
    assert calls == []
    transport = object()
    slot.transferring.add(request)  # the task wrote it into its connection's buffer
    reactor.writers.add(transport)
    reactor.advance(POLL)
    assert calls == []
    reactor.writers.discard(transport)  # the I/O pass sent it (busy still is: not ours)
    reactor.advance(POLL)
    assert calls == ["sent"]
    reactor.advance(MAX_WATCH)
    assert calls == ["sent"]  # once


def test_a_request_done_before_a_check_counts_as_sent():
    reactor, slot, request, calls = setup()
    slot.active.discard(request)
    reactor.advance(0)
    assert calls == ["sent"]


def test_the_call_runs_after_the_longest_wait_whatever_happens():
    reactor, slot, request, calls = setup()
    slot.transferring.add(request)
    reactor.writers.add(object())  # never sends
    reactor.advance(0)
    elapsed = 0.0
    while not calls:
        assert elapsed <= MAX_WATCH + 0.1
        reactor.advance(0.01)
        elapsed += 0.01
    assert elapsed >= MAX_WATCH - 0.02
