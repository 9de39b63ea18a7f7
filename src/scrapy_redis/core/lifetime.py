"""How long a request's fingerprint is kept: DUPEFILTER_LIFETIME and the ``meta`` key.

With DUPEFILTER_LIFETIME at 0 (the default) fingerprints are kept forever, in the
original's set. Set to a number of seconds, it turns expiry on: a fingerprint is kept
that long after it was recorded, then its request is new again (see docs/incremental.rst).
``float("inf")`` turns expiry on with fingerprints kept forever unless a request says
otherwise. A request gives its own lifetime in ``meta["dupefilter_lifetime"]``:
seconds, or ``0`` / ``None`` / ``float("inf")`` for forever.

Lifetimes are handed to the scripts in milliseconds, 0 meaning forever.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

#: The ``Request.meta`` key giving a request's own fingerprint lifetime, in seconds.
META_KEY = "dupefilter_lifetime"
#: Expired fingerprints removed per write, on top of twice the fingerprints it adds: the
#: sweep outpaces the adds, so expired fingerprints do not pile up.
SWEEP_MIN = 64


@dataclass(frozen=True, slots=True)
class Expiry:
    """Fingerprints that expire: the default lifetime (ms, 0 = forever)."""

    default_ms: int

    def lifetime_ms(self, request: Any) -> int:
        """The lifetime of ``request``'s fingerprint, in ms (0: forever)."""
        meta = getattr(request, "meta", None) or {}
        if META_KEY not in meta:
            return self.default_ms
        try:
            return seconds_to_ms(meta[META_KEY])
        except ValueError as exc:
            logger.warning("%s: using DUPEFILTER_LIFETIME for %s", exc, request)
            return self.default_ms


def seconds_to_ms(value: Any) -> int:
    """A lifetime in seconds as ms (0 for forever: 0, None or infinity); ValueError if it
    is not a number >= 0."""
    if value is None:
        return 0
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(
            f"meta[{META_KEY!r}] must be seconds >= 0 (0 or None: forever), not {value!r}"
        )
    if math.isinf(seconds) or seconds == 0:
        return 0
    return max(1, round(seconds * 1000))


def expiry_from_setting(value: Any) -> Expiry | None:
    """DUPEFILTER_LIFETIME read: None (0, the default: kept forever, the original's set), or
    the expiry it asks for. ValueError naming the setting for anything but seconds >= 0."""
    try:
        seconds = float(value or 0)
    except (TypeError, ValueError):
        seconds = -1.0
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(
            f"DUPEFILTER_LIFETIME must be seconds >= 0 (0: fingerprints kept forever; "
            f"inf: expiry on, forever unless meta[{META_KEY!r}] says otherwise), not {value!r}."
        )
    if seconds == 0:
        return None
    return Expiry(0 if math.isinf(seconds) else max(1, round(seconds * 1000)))


def lifetime_of(dupefilter: Any, request: Any) -> int:
    """The lifetime (ms, 0 = forever) ``dupefilter`` gives ``request``'s fingerprint; 0 if
    its fingerprints do not expire."""
    expiry = getattr(dupefilter, "expiry", None)
    return expiry.lifetime_ms(request) if expiry is not None else 0
