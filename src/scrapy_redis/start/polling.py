"""Calls repeated on the reactor while a spider runs (polling, the lease heartbeat).

A :class:`Poller` starts :class:`~twisted.internet.task.LoopingCall` loops on
its ``clock`` (the running reactor by default; a ``task.Clock`` in tests) and
stops them all at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import task


class Poller:
    """Loops started with :meth:`every`, stopped together by :meth:`stop`."""

    def __init__(self, clock: Any = None) -> None:
        #: The ``IReactorTime`` the loops run on; None: Twisted's reactor.
        self.clock = clock
        self.loops: list[task.LoopingCall] = []

    def every(self, seconds: float, call: Callable[[], object]) -> task.LoopingCall:
        """Call ``call`` every ``seconds`` seconds, the first time ``seconds`` from now."""
        loop = task.LoopingCall(call)
        if self.clock is not None:
            loop.clock = self.clock
        self.loops.append(loop)
        loop.start(seconds, now=False)
        return loop

    @property
    def running(self) -> bool:
        return any(loop.running for loop in self.loops)

    def stop(self) -> None:
        """Stop every loop still running, in the order they were started."""
        for loop in self.loops:
            if loop.running:
                loop.stop()
