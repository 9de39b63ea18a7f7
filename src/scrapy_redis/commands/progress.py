"""A tiny progress bar on stderr, for long operations (purge, export).

Drawn only when stderr is a terminal, at most every :data:`REDRAW_EVERY` seconds; a
pipe or a file gets nothing (the verb's own summary says what was done).
"""

from __future__ import annotations

import time
from typing import TextIO

#: Seconds between two redraws.
REDRAW_EVERY = 0.1
#: Characters of the bar itself.
WIDTH = 30


class Progress:
    """``label``: ``done``/``total`` (``total`` None: unknown, a count only)."""

    def __init__(
        self, stream: TextIO, label: str, total: int | None = None, enabled: bool | None = None
    ) -> None:
        self.stream = stream
        self.label = label
        self.total = total
        self.done = 0
        self.enabled = stream.isatty() if enabled is None else enabled
        self._drawn = 0.0

    def advance(self, count: int = 1) -> None:
        """``count`` more done; redraw if it is time."""
        self.done += count
        now = time.monotonic()
        if self.enabled and now - self._drawn >= REDRAW_EVERY:
            self._drawn = now
            self._draw()

    def finish(self) -> None:
        """Draw the last state and end the line."""
        if self.enabled:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()

    def line(self) -> str:
        """What the bar shows now."""
        if not self.total:
            return f"{self.label}: {self.done:,}"
        share = min(1.0, self.done / self.total)
        filled = int(share * WIDTH)
        bar = "#" * filled + "-" * (WIDTH - filled)
        return f"{self.label} [{bar}] {self.done:,}/{self.total:,} {share:4.0%}"

    def _draw(self) -> None:
        self.stream.write("\r" + self.line())
        self.stream.flush()
