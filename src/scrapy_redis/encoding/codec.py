"""Requests to the bytes a queue stores, and back (SCHEDULER_SERIALIZER).

The queues (:class:`scrapy_redis.queue.Base`) call these through
``_encode_request()`` / ``_decode_request()``, as the original's did, so that a
queue class of its own keeps working. Data read from Redis is untrusted: every
failure to decode it is an :class:`~scrapy_redis.exceptions.UndecodableRequestError`
that says why and what to do, in particular for pickle data written by the
original scrapy-redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy_redis.core.logsafe import shorten
from scrapy_redis.encoding.nested_requests import NESTED, decode_nested, encode_nested
from scrapy_redis.encoding.reqser import dict_to_request, owned_dict_to_request, request_to_dict
from scrapy_redis.exceptions import UndecodableRequestError, UnserializableRequestError
from scrapy_redis.serializers import MsgpackSerializer, looks_like_pickle, with_defaults

if TYPE_CHECKING:
    from scrapy import Request, Spider

#: The serializers that read pickle (their module ``__name__``).
PICKLE_SERIALIZERS = frozenset({"pickle", "scrapy_redis.picklecompat"})


def encode_request(request: Request, spider: Spider, serializer: Any) -> bytes:
    """The bytes stored for ``request``; UnserializableRequestError with the reason.

    A request dict the serializer refuses is tried again with the requests its meta
    holds stored as requests (see :mod:`scrapy_redis.encoding.nested_requests`)."""
    try:
        data = request_to_dict(request, spider)
        try:
            stored = serializer.dumps(data)
        except Exception:
            nested = encode_nested(data, spider)
            if nested is None:
                raise
            stored = serializer.dumps(nested)
    except Exception as exc:  # any serializer, any failure: normalised here, once
        raise UnserializableRequestError(shorten(str(exc) or repr(exc), 1000)) from exc
    return stored.encode() if isinstance(stored, str) else stored


def decode_request(encoded: bytes, spider: Spider, serializer: Any, key: str) -> Request:
    """The request stored as ``encoded`` in the Redis key ``key``;
    UndecodableRequestError with the fix."""
    try:
        if type(serializer) is MsgpackSerializer:  # the stored fields: fewer to build from
            data = serializer.loads_stored(encoded)
            if "_class" in data:  # a subclass may have other defaults than Request
                data = with_defaults(data)
            if NESTED in data:
                data = decode_nested(data, spider)
            return owned_dict_to_request(data, spider)
        data = serializer.loads(encoded)
        if isinstance(data, dict) and NESTED in data:
            return owned_dict_to_request(decode_nested(dict(data), spider), spider)
        return dict_to_request(data, spider)
    except Exception as exc:  # untrusted data: every failure is a decoding failure
        pickled = looks_like_pickle(encoded) and not is_pickle(serializer)
        raise UndecodableRequestError(
            decode_error_message(exc, pickled, serializer, key), looks_like_pickle=pickled
        ) from exc


def is_pickle(serializer: Any) -> bool:
    """Whether ``serializer`` reads pickle (then pickle data is no wrong setting)."""
    return getattr(serializer, "__name__", None) in PICKLE_SERIALIZERS


def decode_error_message(exc: Exception, pickled: bool, serializer: Any, key: str) -> str:
    """What an UndecodableRequestError says: the key, the serializer, the cause, and
    for ``pickled`` data the setting that reads it."""
    message = (
        f"Cannot decode a request read from Redis key {key!r} with "
        f"SCHEDULER_SERIALIZER = {serializer!r}: {shorten(exc)}."
    )
    if pickled:
        message += (
            " It looks like pickle data, as written by the original scrapy-redis. To read "
            "it set SCHEDULER_SERIALIZER = 'scrapy_redis.picklecompat' (only if everyone "
            "who can write to this Redis is trusted), or delete the key."
        )
    return message
