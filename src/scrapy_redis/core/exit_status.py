"""The exit status of ``scrapy crawl`` when the scheduler stops a crawl that needs an operator.

Scrapy exits 0 whenever a spider was closed, whatever the reason. A crawl the
scrapy-redis scheduler stops itself (``redis_unavailable``, ``redis_wrong_type``,
``scheduler_serializer_error``) did not finish its work and will not by being run
again unchanged: ``scrapy crawl`` (and ``scrapy runspider``, scrapyd's runner) then
exits with SCHEDULER_STOP_EXIT_CODE, so that scrapyd, systemd or a container
supervisor sees a failure. Scrapy offers no hook for it: the running command is
found on the main thread's stack (the reactor runs inside it) and its ``exitcode``,
which Scrapy passes to ``sys.exit()``, is set. A crawl run from a script (no
command) is left as it is: its ``finish_reason`` stat says why it stopped.
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


def fail_running_command(code: int) -> bool:
    """Make the running Scrapy command exit with ``code`` (unless 0, or already failing);
    whether a command was found."""
    if code == 0:
        return False
    command = _running_command()
    if command is None:
        return False
    if not getattr(command, "exitcode", 0):
        command.exitcode = code
    return True


def _running_command() -> Any:
    """The ScrapyCommand whose ``run()`` is on the main thread's stack, or None."""
    from scrapy.commands import ScrapyCommand

    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    while frame is not None:
        candidate = frame.f_locals.get("self") if frame.f_code.co_name == "run" else None
        if isinstance(candidate, ScrapyCommand):
            return candidate
        frame = frame.f_back
    return None
