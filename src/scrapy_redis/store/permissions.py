"""What the Redis user of a worker or a command may do (Redis ACLs), told in one line.

An ACL user without ``@scripting`` or without the crawl's key patterns makes redis-py
raise :class:`~redis.exceptions.NoPermissionError` deep in a call: :func:`check_access`
finds it out when a component starts (before Scrapy opens the engine, so the crawl
stops with one line), and :func:`permission_error` words what was refused anywhere
else, naming the ``ACL SETUSER`` that grants it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import redis
from redis.exceptions import NoPermissionError

from scrapy_redis.exceptions import ConfigurationError
from scrapy_redis.store.bootstrap import report_if_it_stops_the_crawl

_COMMAND = re.compile(r"permissions to run the '([^']+)' command")
_SCRIPTING = {"eval", "evalsha", "eval_ro", "evalsha_ro", "script", "fcall"}
#: A probe that needs only the permission to run scripts.
_PROBE_SCRIPT = "return 1"


def acl_user(client: Any) -> str:
    """The ACL user ``client`` logs in as ("default" when it names none)."""
    kwargs = _connection_kwargs(client)
    return str(kwargs.get("username") or "default")


def _connection_kwargs(client: Any) -> dict[str, Any]:
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if kwargs is None:  # a cluster client
        kwargs = getattr(getattr(client, "nodes_manager", None), "connection_kwargs", None)
    return kwargs if isinstance(kwargs, dict) else {}


def acl_hint(client: Any, exc: BaseException, key: str | None = None) -> str:
    """``: ACL SETUSER <user> ...`` granting what ``exc`` (a refusal) says was denied ("" if
    it does not say)."""
    user, text = acl_user(client), str(exc)
    command = _COMMAND.search(text)
    if command is not None:
        name = command.group(1).lower()
        grant = "+@scripting" if name in _SCRIPTING else f"+{name.replace('|', ' ')}"
        return f"; grant it: ACL SETUSER {user} {grant}"
    if "keys" in text or "key" in text:
        pattern = f"~{key}" if key else "~<key pattern>"
        return f"; grant the keys: ACL SETUSER {user} '{pattern}'"
    if "channel" in text:
        return f"; grant the channels: ACL SETUSER {user} '&*'"
    return ""


def permission_error(client: Any, exc: NoPermissionError, doing: str) -> ConfigurationError:
    """The one-line error of a refusal met while ``doing`` something."""
    reason = str(exc).rstrip(".")
    return ConfigurationError(
        f"Redis refused {doing} to the ACL user {acl_user(client)!r}: {reason}"
        f"{acl_hint(client, exc)} (or give another user in REDIS_URL)."
    )


def check_access(
    client: Any, keys: Iterable[tuple[str, str]], component: str, crawler: Any = None
) -> None:
    """ConfigurationError, one line naming the missing permission, if ``client``'s user
    may not run scripts or read one of ``keys`` (key, the setting naming it). Any other
    answer (a client or proxy without scripts: see the docs) is left to the calls.
    Checked for a crawl only (``crawler.crawling``): the commands build the spider and
    the scheduler too, and a user who only pushes start messages needs no scripts."""
    if not getattr(crawler, "crawling", False):
        return
    _check(client, component, "scripts (EVAL/EVALSHA)", lambda: client.eval(_PROBE_SCRIPT, 0))
    for key, setting in keys:
        _check(
            client, component, f"the key {key!r} ({setting})", lambda k=key: client.exists(k), key
        )


def check_keys(client: Any, keys: Iterable[str], doing: str) -> None:
    """ConfigurationError naming the first of ``keys`` that ``client``'s user may not read
    (and the ``ACL SETUSER`` granting it), before ``doing`` anything with them."""
    for key in keys:
        try:
            client.exists(key)
        except NoPermissionError as exc:
            raise ConfigurationError(
                f"Redis refused {doing} to the ACL user {acl_user(client)!r}: it may not use "
                f"the key {key!r}{acl_hint(client, exc, _pattern(key))} (or give another "
                "user in REDIS_URL)."
            ) from None
        except (redis.ResponseError, AttributeError, NotImplementedError):
            return  # not a permission: the calls will say


def _check(client: Any, component: str, what: str, probe: Any, key: str | None = None) -> None:
    try:
        probe()
    except NoPermissionError as exc:
        error = ConfigurationError(
            f"The {component} cannot start: the Redis ACL user {acl_user(client)!r} may not "
            f"use {what}{acl_hint(client, exc, _pattern(key))}, or give another user in "
            "REDIS_URL."
        )
        report_if_it_stops_the_crawl(error)
        raise error from None
    except Exception:  # not a permission (a stand-in client, a cluster's routing, a
        return  # lost connection): the calls themselves will say


def _pattern(key: str | None) -> str | None:
    """A key pattern covering ``key`` and the keys derived from it (``myspider:*``)."""
    if key is None:
        return None
    head = key.split(":", 1)[0] if ":" in key else key
    return f"{head}:*" if ":" in key else key
