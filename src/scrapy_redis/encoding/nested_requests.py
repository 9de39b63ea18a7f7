"""Requests held in a request's ``meta`` (or ``cb_kwargs``), stored as requests.

Middlewares that wrap a request keep the original in the new one's ``meta``
(the FlareSolverr pattern: ``meta["original_request"] = request``). No safe
serializer can encode a ``Request`` object, so such requests stayed in the
memory of the worker that made them (lost with it, never shared). When the
serializer refuses a request dict whose ``meta`` or ``cb_kwargs`` hold requests
(in dicts and lists too), each of them is replaced by ``{MARK: <its request
dict>}``, built as the request itself is (:func:`~scrapy_redis.encoding.reqser.request_to_dict`),
and the dict is flagged with :data:`NESTED`; decoding a flagged dict rebuilds
them as the request itself is rebuilt (its class and callbacks checked the same
way: data read from Redis is untrusted). Requests nest at most
:data:`MAX_DEPTH` deep; deeper, the request cannot be stored (it stays in the
worker's memory, counted in ``scheduler/unserializable``).
"""

from __future__ import annotations

from typing import Any

from scrapy import Request, Spider

from scrapy_redis.encoding.reqser import owned_dict_to_request, request_to_dict

#: Field of a stored request dict: its meta or cb_kwargs hold stored requests.
NESTED = "_nested_requests"
#: A dict ``{MARK: request dict}`` stands for a request in meta or cb_kwargs.
MARK = "__scrapy_redis_request__"
#: Requests inside requests inside ... a stored request, at most.
MAX_DEPTH = 4
#: Dicts and lists inside dicts and lists searched for requests, at most.
MAX_LEVELS = 16
_FIELDS = ("meta", "cb_kwargs")


def encode_nested(data: dict[str, Any], spider: Spider | None, depth: int = 0) -> dict | None:
    """``data`` (a request dict) with the requests in its meta and cb_kwargs replaced by
    their dicts, flagged; None if they hold none. ValueError if they nest too deep."""
    found: list[bool] = []
    replaced = {}
    for field in _FIELDS:
        if data.get(field):
            replaced[field] = _encode(data[field], spider, depth, 0, found)
    return {**data, **replaced, NESTED: True} if found else None


def _encode(value: Any, spider: Spider | None, depth: int, level: int, found: list[bool]) -> Any:
    if isinstance(value, Request):
        if depth >= MAX_DEPTH:
            raise ValueError(f"requests nested in meta more than {MAX_DEPTH} deep")
        found.append(True)
        inner = request_to_dict(value, spider)
        return {MARK: encode_nested(inner, spider, depth + 1) or inner}
    if level >= MAX_LEVELS:
        return value
    if type(value) is dict:
        return {key: _encode(item, spider, depth, level + 1, found) for key, item in value.items()}
    if type(value) in (list, tuple):
        return [_encode(item, spider, depth, level + 1, found) for item in value]
    return value


def decode_nested(data: dict[str, Any], spider: Spider | None, depth: int = 0) -> dict:
    """``data`` (a flagged request dict read from Redis) with its stored requests rebuilt
    (changed in place). ValueError if one cannot be."""
    del data[NESTED]
    for field in _FIELDS:
        if field in data:
            data[field] = _decode(data[field], spider, depth, 0)
    return data


def _decode(value: Any, spider: Spider | None, depth: int, level: int) -> Any:
    if level >= MAX_LEVELS:
        return value
    if type(value) is dict:
        if len(value) == 1 and MARK in value:
            return _rebuild(value[MARK], spider, depth)
        return {key: _decode(item, spider, depth, level + 1) for key, item in value.items()}
    if type(value) is list:
        return [_decode(item, spider, depth, level + 1) for item in value]
    return value


def _rebuild(inner: Any, spider: Spider | None, depth: int) -> Request:
    if depth >= MAX_DEPTH:
        raise ValueError(f"requests nested in meta more than {MAX_DEPTH} deep")
    if not isinstance(inner, dict):
        raise ValueError(f"not a request dict in meta: {type(inner).__name__}")
    if NESTED in inner:
        inner = decode_nested(inner, spider, depth + 1)
    return owned_dict_to_request(inner, spider)
