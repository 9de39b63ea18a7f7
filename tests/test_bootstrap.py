"""report_if_it_stops_the_crawl(): one line for the error that ends a crawl's task, and
nothing hidden when another error ends it (the real case: test_start_e2e.py)."""

from __future__ import annotations

import asyncio
import gc
import logging

from scrapy_redis.store.bootstrap import report_if_it_stops_the_crawl


def run_task(body) -> list[dict]:
    """Run ``body`` as a task whose exception nobody retrieves; what asyncio reported."""
    reported: list[dict] = []

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: reported.append(ctx))
        task = asyncio.get_running_loop().create_task(body())
        await asyncio.wait([task])
        await asyncio.sleep(0)  # the done callbacks
        del task
        gc.collect()

    loop = asyncio.new_event_loop()  # not made the current loop: the reactor's stays
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return reported


def test_the_error_that_ends_the_task_is_one_line(caplog):
    async def body():
        error = ConnectionError("Cannot connect to Redis at redis://h:1/0")
        report_if_it_stops_the_crawl(error)
        raise error

    with caplog.at_level(logging.ERROR):
        assert run_task(body) == []
    assert [r.getMessage() for r in caplog.records] == ["Cannot connect to Redis at redis://h:1/0"]


def test_an_error_of_the_clean_up_after_it_still_reports_its_cause(caplog):
    """Scrapy's engine fails to stop ("Engine slot not assigned") after the scheduler
    could not be built: what the user must fix is the first error."""

    async def body():
        error = ConnectionError("Cannot connect to Redis at redis://h:1/0")
        try:
            report_if_it_stops_the_crawl(error)
            raise error
        except ConnectionError:
            raise RuntimeError("Engine slot not assigned") from None

    with caplog.at_level(logging.ERROR):
        assert run_task(body) == []
    assert [r.getMessage() for r in caplog.records] == ["Cannot connect to Redis at redis://h:1/0"]


def test_another_error_is_still_reported(caplog):
    async def body():
        try:
            error = ConnectionError("caught")
            report_if_it_stops_the_crawl(error)
            raise error
        except ConnectionError:
            pass
        raise RuntimeError("something else")

    with caplog.at_level(logging.ERROR):
        [context] = run_task(body)
    assert isinstance(context["exception"], RuntimeError)
    assert "caught" not in caplog.text


def test_outside_a_task_nothing_happens(caplog):
    report_if_it_stops_the_crawl(ConnectionError("x"))
    assert caplog.records == []
