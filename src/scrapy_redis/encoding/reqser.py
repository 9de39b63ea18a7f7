"""Requests to and from the dicts that serializers store.

Decoding is careful with data read from Redis: a ``_class`` entry may only name
a :class:`scrapy.Request` subclass from a module this process has already
imported, so a crafted entry cannot make a worker import arbitrary modules.

A stored URL is the ``url`` of a request built earlier, which Scrapy already
made safe; rebuilding the request would make it safe again (w3lib's
``safe_url_string``, a third of the cost of a ``Request``). When the URL has
a shape and characters that function leaves as they are, it is passed with
the ``verbatim_url`` meta key ("take the URL as it is", in the Scrapy versions
that know it), which is removed again once the request is built. Any other
URL, a crafted one included, is made safe as usual, unless the stored ``meta``
itself asks for ``verbatim_url`` (kept, as Scrapy's ``request_from_dict()``
keeps it).
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Any

from scrapy import Request, Spider

from scrapy_redis.core.logsafe import short_repr, shorten

if TYPE_CHECKING:
    from collections.abc import Callable


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


_VERBATIM = "verbatim_url"
_SAFE_CHARS = r"A-Za-z0-9!$%&()*+,\-./:;=@_~"
#: URLs that safe_url_string() returns unchanged: lowercase http(s), a plain lowercase host,
#: a port below 10000 without a leading zero, a path, a non-empty query, of printable ASCII
#: characters it keeps as they are (checked against w3lib on generated URLs in the tests).
SAFE_URL = re.compile(
    rf"https?://[a-z0-9.-]+(?::[1-9][0-9]{{0,3}})?/[{_SAFE_CHARS}]*(?:\?[{_SAFE_CHARS}?]+)?"
)


def dict_to_request(data: Any, spider: Spider | None) -> Request:
    """The request described by ``data``; ValueError when ``data`` does not describe one.

    The same request as ``scrapy.utils.request.request_from_dict(data, spider=spider)``.
    ``data`` is left as it is.
    """
    if isinstance(data, dict):
        data = dict(data)
        if isinstance(data.get("meta"), dict):
            data["meta"] = dict(data["meta"])
    return owned_dict_to_request(data, spider)


def owned_dict_to_request(data: Any, spider: Spider | None) -> Request:
    """:func:`dict_to_request` for a dict nobody else uses, as the serializer's
    ``loads()`` returns it: ``data`` and its ``meta`` dict are changed (one copy of
    each fewer)."""
    if not isinstance(data, dict) or not isinstance(url := data.get("url"), str):
        raise ValueError(f"not a request dict: {type(data).__name__}")
    cls = _request_class(data["_class"]) if "_class" in data else Request
    attributes = _attributes(cls)
    # The usual case, a plain Request: its dict is keyword arguments only, used as is.
    kwargs = (
        data
        if attributes.issuperset(data)
        else {key: value for key, value in data.items() if key in attributes}
    )
    if spider is not None:
        if callback := kwargs.get("callback"):
            kwargs["callback"] = spider_method(spider, callback)
        if errback := kwargs.get("errback"):
            kwargs["errback"] = spider_method(spider, errback)
    meta = kwargs.get("meta")
    own_meta = not meta or (type(meta) is dict and _VERBATIM not in meta)
    verbatim = own_meta and SAFE_URL.fullmatch(url) is not None
    if verbatim:
        if meta:
            meta[_VERBATIM] = True  # the request takes a copy
        else:
            kwargs["meta"] = {_VERBATIM: True}
    try:
        request = cls(**kwargs)
    except (TypeError, AttributeError, KeyError) as exc:
        raise ValueError(f"invalid request dict: {shorten(repr(exc))}") from exc
    if verbatim:
        del request.meta[_VERBATIM]
    return request


_ATTRIBUTES: dict[type[Request], frozenset[str]] = {}


def _attributes(cls: type[Request]) -> frozenset[str]:
    """The keyword arguments of ``cls`` that its dict holds (``cls.attributes``), as a set."""
    attributes = _ATTRIBUTES.get(cls)
    if attributes is None:
        attributes = _ATTRIBUTES[cls] = frozenset(cls.attributes)
    return attributes


def spider_method(spider: Spider, name: Any, *, private: bool = True) -> Callable[..., Any]:
    """The callback (or errback) ``name`` of ``spider``, for a name read from Redis.

    It must name a method bound to ``spider`` that the spider's own classes
    define (CrawlSpider's ``_callback`` included), or the base ``Spider.parse``;
    not another method of Scrapy's base ``Spider`` (``log``, ``_set_crawler``)
    nor of scrapy-redis (``setup_redis``, ``_stop_polling``); not a name starting
    with ``__`` (``__init__``), a static or class method (``close``,
    ``from_crawler``) or another attribute; and, unless ``private``, not a name
    starting with ``_``. ValueError otherwise.
    """
    if isinstance(name, str) and not name.startswith("__" if private else "_"):
        method = getattr(spider, name, None)
        if getattr(method, "__self__", None) is spider and _is_callback(type(spider), name):
            return method  # type: ignore[return-value]
    raise ValueError(f"spider has no method {short_repr(name)}")


#: Methods of Scrapy's base Spider that a request may name: ``parse`` (inherited by a
#: spider that does not define it, the request then fails as Scrapy's would).
_BASE_CALLBACKS = frozenset({"parse"})

# (spider class, attribute name) -> whether a class of the spider's own defines it.
_CALLBACKS: dict[tuple[type[Any], str], bool] = {}


def _is_callback(cls: type[Any], name: str) -> bool:
    known = _CALLBACKS.get((cls, name))
    if known is None:
        owner = next((klass for klass in cls.__mro__ if name in vars(klass)), None)
        if owner is None:  # an instance attribute: never written by request_to_dict()
            return False
        known = _CALLBACKS[(cls, name)] = name in _BASE_CALLBACKS or not (
            owner is Spider or owner is object or owner.__module__.startswith("scrapy_redis.")
        )
    return known


def _request_class(path: Any) -> type[Request]:
    if not isinstance(path, str) or "." not in path:
        raise ValueError(f"invalid request class {short_repr(path)}")
    module_name, _, name = path.rpartition(".")
    module = sys.modules.get(module_name)
    cls = getattr(module, name, None) if module is not None else None
    if not (isinstance(cls, type) and issubclass(cls, Request)):
        raise ValueError(
            f"request class {short_repr(path)} is not a scrapy.Request subclass of an imported "
            "module"
        )
    return cls
