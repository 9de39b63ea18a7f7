"""Exceptions and warnings raised by scrapy-redis.

Every error of ours derives from :class:`ScrapyRedisError`; errors about a bad
value also derive from :class:`ValueError` so that existing ``except
ValueError`` blocks keep working.
"""

from __future__ import annotations

import warnings


class ScrapyRedisError(Exception):
    """Root of all scrapy-redis errors."""


class ConfigurationError(ScrapyRedisError, ValueError):
    """A setting names something that cannot be used (the message names the setting)."""


class WrongKeyTypeError(ConfigurationError):
    """A Redis key the crawl uses exists with another type (the message names it)."""


class ScriptsUnavailableError(ConfigurationError):
    """The Redis client cannot run scrapy-redis's Lua scripts: a test's stand-in for the
    client (fakeredis, a hand-written fake), the message names the fix."""


class RedisUnavailableError(ScrapyRedisError, ConnectionError):
    """Redis could not be reached when a component started."""


class UnserializableRequestError(ScrapyRedisError, ValueError):
    """A request could not be turned into bytes for the Redis queue."""


class UndecodableRequestError(ScrapyRedisError, ValueError):
    """An entry read from the Redis queue could not be turned back into a request.

    ``looks_like_pickle`` tells whether the entry seems to be pickle data, i.e.
    written by the original scrapy-redis or with a pickle serializer.
    """

    def __init__(self, message: str, *, looks_like_pickle: bool = False) -> None:
        super().__init__(message)
        self.looks_like_pickle = looks_like_pickle


class InvalidStartMessageError(ScrapyRedisError, ValueError):
    """A start message read from ``redis_key`` cannot be turned into a request."""


class ScrapyRedisDeprecationWarning(Warning):
    """A deprecated scrapy-redis name, setting or signature was used.

    A :class:`Warning`, not a :class:`DeprecationWarning`, as Scrapy's own
    ``ScrapyDeprecationWarning``: Python hides DeprecationWarnings raised from
    library code by default, and the projects still using a deprecated name
    would never see it.
    """


def warn_from_settings(component: str) -> None:
    """Warn that ``component.from_settings()`` (never called by Scrapy >= 2.14) is deprecated."""
    warnings.warn(
        f"{component}.from_settings() is deprecated, use {component}.from_crawler()",
        ScrapyRedisDeprecationWarning,
        stacklevel=3,
    )
