"""Requests to and from the dicts that serializers store.

Decoding is careful with data read from Redis: a ``_class`` entry may only name
a :class:`scrapy.Request` subclass from a module this process has already
imported, so a crafted entry cannot make a worker import arbitrary modules.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.utils.request import request_from_dict

if TYPE_CHECKING:
    from scrapy import Spider


def request_to_dict(request: Request, spider: Spider | None) -> dict[str, Any]:
    """``request.to_dict(spider=spider)``: the same dict (ValueError for callbacks that
    are not spider methods).

    Scrapy finds a callback's name by listing every method of the spider; when
    the callback is the spider's method of the same name (the usual case) the
    name is taken directly and the dict built here, with the same content.
    """
    callback = _method_name(spider, request.callback)
    errback = _method_name(spider, request.errback)
    if callback is None or errback is None:
        return request.to_dict(spider=spider)
    data: dict[str, Any] = {
        "url": request.url,
        "callback": callback or None,
        "errback": errback or None,
        "headers": dict(request.headers),
    }
    for attr in request.attributes:
        if attr not in data:
            data[attr] = getattr(request, attr)
    if type(request) is not Request:
        data["_class"] = f"{type(request).__module__}.{type(request).__name__}"
    return data


def _method_name(spider: Spider | None, func: Any) -> str | None:
    """``""`` for no function, its name if it is ``spider``'s method of that name, else None."""
    if func is None:
        return ""
    name = getattr(func, "__name__", None)
    own = getattr(func, "__func__", None)
    if spider is None or not isinstance(name, str) or own is None:
        return None
    found = getattr(spider, name, None)
    return name if getattr(found, "__func__", None) is own else None


def dict_to_request(data: Any, spider: Spider | None) -> Request:
    """The request described by ``data``; ValueError when ``data`` does not describe one."""
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        raise ValueError(f"not a request dict: {type(data).__name__}")
    if "_class" in data:
        _check_request_class(data["_class"])
    try:
        return request_from_dict(data, spider=spider)
    except (TypeError, AttributeError, KeyError) as exc:
        raise ValueError(f"invalid request dict: {exc!r}") from exc


def _check_request_class(path: Any) -> None:
    if not isinstance(path, str) or "." not in path:
        raise ValueError(f"invalid request class {path!r}")
    module_name, _, name = path.rpartition(".")
    module = sys.modules.get(module_name)
    cls = getattr(module, name, None) if module is not None else None
    if not (isinstance(cls, type) and issubclass(cls, Request)):
        raise ValueError(
            f"request class {path!r} is not a scrapy.Request subclass of an imported module"
        )
