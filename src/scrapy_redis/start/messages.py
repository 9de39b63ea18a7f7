"""Start messages: what producers push to ``redis_key``, turned into requests.

A message is either a bare URL or a JSON object::

    {"url": "https://example.com/p", "method": "POST", "meta": {...},
     "headers": {"Name": "value"}, "body": "...", "cb_kwargs": {...},
     "priority": 10, "dont_filter": true, "callback": "parse_item",
     "errback": "on_error", "formdata": {"q": "x"}, "every": "1h"}

``every`` makes the message recurring (see :mod:`scrapy_redis.start.recurring`).
Only ``url`` is required; a ``null`` value means the key is not given. As in
the original, any other key with a string (or
list of strings) value is form data (the spiders warn about such unknown keys,
often a misspelt one, and ``scrapy redis push`` refuses them without
``--force``). Anything else is rejected with
:class:`InvalidStartMessageError` naming the reason.

:class:`StartMessageRules` (REDIS_START_URLS_SCHEMES, REDIS_START_URLS_MAX_SIZE)
bound what a message may ask of a worker; :func:`check_start_message` is the one
check of a message before it is pushed (``scrapy redis push``, the dashboard,
:func:`scrapy_redis.fleet.operations.push_messages`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import FormRequest, Request

from scrapy_redis import defaults
from scrapy_redis.core.logsafe import short_repr, shorten
from scrapy_redis.encoding.reqser import spider_method
from scrapy_redis.exceptions import InvalidStartMessageError
from scrapy_redis.start.recurring import EVERY_KEY, parse_every

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Spider
    from scrapy.settings import BaseSettings

logger = logging.getLogger("scrapy_redis.spiders")

_TYPES: dict[str, tuple[type, ...]] = {
    "url": (str,),
    "method": (str,),
    "meta": (dict,),
    "headers": (dict,),
    "body": (str,),
    "cb_kwargs": (dict,),
    "priority": (int,),
    "dont_filter": (bool,),
    "callback": (str,),
    "errback": (str,),
    "formdata": (dict,),
    "every": (int, float, str),
}


def parse_message(text: str) -> dict[str, Any]:
    """The fields of a message: a JSON object, or ``{"url": text}`` for a bare URL."""
    stripped = text.strip()
    if not stripped:
        raise InvalidStartMessageError("empty message")
    try:
        fields = json.loads(stripped)
    except ValueError:
        if stripped[0] in '{["':
            raise InvalidStartMessageError("invalid JSON") from None
        return {"url": stripped}
    if not isinstance(fields, dict):
        raise InvalidStartMessageError(f"JSON {type(fields).__name__}, not an object")
    return fields


def as_requests(result: Any) -> list[Request]:
    """What ``make_request_from_data()`` returned (a request, requests or None) as a list;
    TypeError if anything in it is not a request."""
    if result is None:
        return []
    items = [result] if isinstance(result, Request) else list(result)
    for item in items:
        if not isinstance(item, Request):
            raise TypeError(f"make_request_from_data() returned {item!r}, not a Request")
    return items


def request_from_message(
    fields: dict[str, Any], spider: Spider, dont_filter: bool = False
) -> Request:
    """The request a message's ``fields`` describe."""
    fields = {name: value for name, value in fields.items() if value is not None}
    if "url" not in fields:
        raise InvalidStartMessageError("no 'url'")
    _check_types(fields)
    formdata = {**fields.pop("formdata", {}), **_extra_form_fields(fields)}
    kwargs: dict[str, Any] = {
        "url": fields["url"],
        "method": fields.get("method", "GET").upper(),
        "meta": fields.get("meta"),
        "headers": fields.get("headers"),
        "cb_kwargs": fields.get("cb_kwargs"),
        "priority": fields.get("priority", 0),
        "dont_filter": fields.get("dont_filter", dont_filter),
        "callback": _spider_method(spider, fields.get("callback")),
        "errback": _spider_method(spider, fields.get("errback")),
    }
    if "body" in fields:
        if formdata:
            raise InvalidStartMessageError("both 'body' and form data")
        kwargs["body"] = fields["body"]
    try:
        if formdata:
            return FormRequest(formdata=formdata, **kwargs)
        return Request(**kwargs)
    except (ValueError, TypeError) as exc:
        raise InvalidStartMessageError(shorten(exc)) from exc


def _check_types(fields: dict[str, Any]) -> None:
    for name, types in _TYPES.items():
        value = fields.get(name)
        if value is None:
            continue
        if not isinstance(value, types) or (name == "priority" and isinstance(value, bool)):
            expected = " or ".join(t.__name__ for t in types)
            raise InvalidStartMessageError(f"'{name}' must be {expected}, not {short_repr(value)}")
    if fields.get(EVERY_KEY) is not None:
        parse_every(fields[EVERY_KEY])


def _extra_form_fields(fields: dict[str, Any]) -> dict[str, Any]:
    extra = {name: value for name, value in fields.items() if name not in _TYPES}
    for name, value in extra.items():
        if not _is_form_value(value):
            raise InvalidStartMessageError(
                f"unknown key {short_repr(name)}: extra keys are form data and need a string "
                f"value (or a list of strings), not {short_repr(value)}"
            )
    return extra


def _is_form_value(value: Any) -> bool:
    if isinstance(value, str):
        return True
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _spider_method(spider: Spider, name: str | None) -> Callable[..., Any] | None:
    if name is None:
        return None
    try:
        # the rule of queue entries, and no private method: not an API for producers
        return spider_method(spider, name, private=False)
    except ValueError as exc:
        raise InvalidStartMessageError(str(exc)) from None


def unknown_keys(fields: dict[str, Any]) -> list[str]:
    """The keys of a message that are none of the documented ones (form data, or a typo;
    a ``null`` value counts as not given)."""
    return [str(name) for name, value in fields.items() if name not in _TYPES and value is not None]


class UnknownKeys:
    """A spider's record of the unknown keys in its start messages: each message having
    some counts in ``redis/start_messages/unknown_keys``; each key name is logged once."""

    def __init__(self, count: Callable[[str, int], None], spider: Any = None) -> None:
        self.count = count
        self.spider = spider
        self.logged: set[str] = set()

    def found(self, names: list[str]) -> None:
        self.count("redis/start_messages/unknown_keys", 1)
        new = [name for name in names if name not in self.logged][:10]
        if not new or len(self.logged) >= 100:  # (a producer of random keys: not all)
            return
        self.logged.update(new)
        logger.warning(
            "Start message with unknown key(s) %(names)s: sent as form data, as the original "
            'scrapy-redis did (known keys: %(known)s; form fields belong in "formdata"). '
            "Each key is logged once; stat redis/start_messages/unknown_keys counts them.",
            {"names": ", ".join(short_repr(name, 50) for name in new), "known": ", ".join(_TYPES)},
            extra={"spider": self.spider},
        )


@dataclass(frozen=True)
class StartMessageRules:
    """What a start message may ask of a worker: the URL schemes it may name and its
    size in bytes (0: any)."""

    schemes: frozenset[str] = frozenset(defaults.START_URLS_SCHEMES)
    max_size: int = defaults.START_URLS_MAX_SIZE

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> StartMessageRules:
        """REDIS_START_URLS_SCHEMES and REDIS_START_URLS_MAX_SIZE."""
        schemes = settings.getlist("REDIS_START_URLS_SCHEMES", defaults.START_URLS_SCHEMES)
        max_size = settings.getint("REDIS_START_URLS_MAX_SIZE", defaults.START_URLS_MAX_SIZE)
        if max_size < 0:
            raise ValueError(f"REDIS_START_URLS_MAX_SIZE must be 0 or more, not {max_size}")
        return cls(frozenset(str(s).strip().lower().rstrip(":/") for s in schemes), max_size)

    def check_size(self, data: bytes) -> None:
        """InvalidStartMessageError if ``data`` is longer than allowed."""
        if self.max_size and len(data) > self.max_size:
            raise InvalidStartMessageError(
                f"{len(data):,} bytes, over REDIS_START_URLS_MAX_SIZE ({self.max_size:,})"
            )

    def check_url(self, url: str) -> None:
        """InvalidStartMessageError if ``url`` has a scheme not allowed (or none)."""
        scheme = urlsplit(url).scheme.lower()
        if scheme in self.schemes:
            return
        allowed = ", ".join(sorted(self.schemes)) or "none"
        if not scheme:
            raise InvalidStartMessageError(f"not a URL ({short_repr(url)}): no scheme")
        raise InvalidStartMessageError(
            f"URL scheme {scheme!r} not allowed ({short_repr(url)}): REDIS_START_URLS_SCHEMES "
            f"allows {allowed}"
        )

    def check_requests(self, requests: list[Request]) -> None:
        """:meth:`check_url` for each request made from a message."""
        for request in requests:
            self.check_url(request.url)


def check_start_message(
    message: str,
    rules: StartMessageRules,
    spider: Any = None,
    allow_unknown_keys: bool = False,
) -> None:
    """InvalidStartMessageError naming why ``message`` must not be pushed: too long, a
    URL scheme not allowed, or what ``spider.make_request_from_data()`` refuses (or,
    without a spider, not a URL nor a JSON object with a ``url``); unknown keys too
    (sent as form data by the default reader) unless ``allow_unknown_keys``."""
    encoding = getattr(spider, "redis_encoding", None) or "utf-8"
    data = message.encode(encoding)
    rules.check_size(data)
    if spider is None or _reads_messages_by_default(spider):
        fields = parse_message(message)
        if not allow_unknown_keys and (unknown := unknown_keys(fields)):
            raise InvalidStartMessageError(
                f"unknown key {short_repr(unknown[0])} (a worker would send it as form data; "
                f"known keys: {', '.join(_TYPES)}): fix it, or push it with --force"
            )
    if spider is None:
        _check_fields(fields)
        rules.check_url(fields["url"])
        return
    requests = as_requests(spider.make_request_from_data(data))
    if not requests:
        raise InvalidStartMessageError("the spider makes no request of it")
    rules.check_requests(requests)


def _reads_messages_by_default(spider: Any) -> bool:
    """Whether ``spider`` reads messages with the documented keys (its class does not
    replace ``make_request_from_data()``)."""
    method = getattr(type(spider), "make_request_from_data", None)
    # RedisMixin's own, named rather than imported (scrapy_redis.spiders imports this module)
    return (getattr(method, "__module__", None), getattr(method, "__qualname__", None)) == (
        "scrapy_redis.spiders",
        "RedisMixin.make_request_from_data",
    )


def _check_fields(fields: dict[str, Any]) -> None:
    fields = {name: value for name, value in fields.items() if value is not None}
    if "url" not in fields:
        raise InvalidStartMessageError("no 'url'")
    _check_types(fields)
