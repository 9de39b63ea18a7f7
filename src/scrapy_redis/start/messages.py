"""Start messages: what producers push to ``redis_key``, turned into requests.

A message is either a bare URL or a JSON object::

    {"url": "https://example.com/p", "method": "POST", "meta": {...},
     "headers": {"Name": "value"}, "body": "...", "cb_kwargs": {...},
     "priority": 10, "dont_filter": true, "callback": "parse_item",
     "errback": "on_error", "formdata": {"q": "x"}}

Only ``url`` is required; a ``null`` value means the key is not given. As in
the original, any other key with a string (or
list of strings) value is form data. Anything else is rejected with
:class:`InvalidStartMessageError` naming the reason.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from scrapy import FormRequest, Request

from scrapy_redis.core.logsafe import short_repr, shorten
from scrapy_redis.encoding.reqser import spider_method
from scrapy_redis.exceptions import InvalidStartMessageError

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Spider

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
