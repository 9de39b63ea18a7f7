"""Stand-ins for the Redis client in users' tests: fakeredis, hand-written fakes.

Users test their spiders with a stand-in for the client (``fakeredis``, with or
without its Lua support, or a fake of their own implementing the commands the
original scrapy-redis used). Before a script runs on a client that is not
redis-py's, :func:`check_client` makes sure, once per client, that it runs Lua
with the libraries Redis gives scripts (fakeredis's Lua lacks ``cmsgpack``, and
a script failing half-way would have written half its changes). Where it cannot,
the script call raises :class:`~scrapy_redis.exceptions.ScriptsUnavailableError`,
one line naming the fix; where the semantics allow, the caller falls back to the
original's plain commands instead (the duplicate filter's ``SADD``, the item
pipeline's ``RPUSH``: what the scripts add, a write applied once when a reply is
lost, cannot happen in a process-local stand-in). A real Redis never takes
these paths.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

from redis.client import NEVER_DECODE

from scrapy_redis.exceptions import ScriptsUnavailableError

#: Uses each Redis Lua library our scripts use; answers 2.
_PROBE = "return bit.band(cmsgpack.unpack(cmsgpack.pack(3)), 1) + #cjson.encode(1)"
_LIBRARIES = ("cmsgpack", "cjson", "bit")
# client type -> whether it is redis-py's own (no check needed)
_REDIS_PY: dict[type, bool] = {}
# stand-in client -> why it cannot run our scripts ("" if it can)
_CHECKED: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def check_client(client: Any, name: str) -> None:
    """ScriptsUnavailableError if ``client`` cannot run the script ``name``."""
    kind = type(client)
    redis_py = _REDIS_PY.get(kind)
    if redis_py is None:
        redis_py = _REDIS_PY[kind] = kind.__module__.split(".")[0] == "redis"
    if redis_py:
        return
    try:
        reason = _CHECKED.get(client)
    except TypeError:  # not hashable: checked every time
        reason = None
    if reason is None:
        reason = _why_not(client)
        with contextlib.suppress(TypeError):
            _CHECKED[client] = reason
    if reason:
        raise cannot_run(client, name, reason)


def _why_not(client: Any) -> str:
    """Why ``client`` cannot run our scripts, or "" if it can."""
    execute = getattr(client, "execute_command", None)
    if not callable(execute):
        return "it has no execute_command()"
    try:
        reply = execute("EVAL", _PROBE, 0, **{NEVER_DECODE: True})
    except Exception as exc:  # a stand-in may raise anything
        text = str(exc)
        if text.startswith(("unknown command 'eval'", "unknown command 'evalsha'")):
            return "it has no EVAL command"
        missing = [lib for lib in _LIBRARIES if f"'{lib}' (a nil value)" in text]
        if missing:
            return f"its Lua lacks Redis's {missing[0]} library"
        return f"a test script failed: {type(exc).__name__}: {text[:200]}"
    if type(reply) is not int or reply != 2:
        return f"it answered a test script with {type(reply).__name__}, not 2"
    return ""


def cannot_run(client: Any, name: str, reason: str) -> ScriptsUnavailableError:
    """The one-line error for a ``client`` that cannot run the script ``name``."""
    return ScriptsUnavailableError(
        f"The Redis client {type(client).__module__}.{type(client).__qualname__} cannot run "
        f"scrapy-redis's Lua script {name}.lua ({reason}): test against a real redis-server "
        "(REDIS_URL), not a stand-in for the client (fakeredis, fakeredis[lua] or a fake)."
    )


def delete_keys(server: Any, *keys: str) -> Any:
    """``UNLINK`` the keys (freed in the background); ``DEL`` on a stand-in that has no
    ``unlink()`` (the original deleted with ``DEL``)."""
    remove = getattr(server, "unlink", None) or server.delete
    return remove(*keys)
