"""Errors that stop a crawl before it starts, reported as one clear line.

Scrapy builds the spider and the components (scheduler, pipelines, stats) in
the asyncio task of the crawl, and re-raises what they raise there; asyncio then
logs it with a long "Task exception was never retrieved" traceback in which the
clear message (say, that Redis cannot be reached) is easy to miss. The crawl
still fails (``scrapy crawl`` exits with status 1).
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial

logger = logging.getLogger(__name__)


def report_if_it_stops_the_crawl(exc: BaseException) -> None:
    """Log ``exc``, about to be raised, as one ``ERROR`` line if it ends the crawl.

    Call it where ``exc`` is raised, inside the crawl's asyncio task. If the task
    ends with this very exception, it is logged as its message alone, and asyncio
    does not log the traceback. Outside a task (tests, Twisted's Deferred-based
    crawler process) nothing changes.
    """
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running event loop
        return
    if task is not None:
        task.add_done_callback(partial(_report, exc))


def _report(exc: BaseException, task: asyncio.Task[object]) -> None:
    if task.cancelled():
        return
    failure = task.exception()  # retrieved: asyncio no longer logs it
    if failure is exc:
        logger.error("%(error)s", {"error": exc})
    elif failure is not None and _caused_by(failure, exc):
        # Scrapy's clean-up after ``exc`` failed in turn ("Engine slot not assigned"
        # when the scheduler could not be built): ``exc`` is what the user must fix.
        logger.error("%(error)s", {"error": exc})
        logger.debug("Then, while stopping: %(error)r", {"error": failure})
    elif failure is not None:  # another error: reported as asyncio would have
        task.get_loop().call_exception_handler(
            {"message": "Task exception was never retrieved", "exception": failure, "future": task}
        )


def _caused_by(failure: BaseException, exc: BaseException) -> bool:
    """Whether ``failure`` was raised while handling ``exc`` (its context chain)."""
    seen: set[int] = set()
    current: BaseException | None = failure
    while current is not None and id(current) not in seen:
        if current is exc:
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
