"""Request serializers: the safe default, and how SCHEDULER_SERIALIZER is resolved.

A serializer is any object (or module) with ``dumps(obj) -> bytes`` and
``loads(bytes) -> obj``; the scheduler hands it the dict of
:meth:`scrapy.Request.to_dict`.

The default, :data:`msgpack_serializer`, never runs code while decoding, keeps
``bytes`` and ``str`` apart (bodies and headers are bytes), and is compact: it
leaves out every field that has Scrapy's default value, names the standard
fields by a one-byte code, and deflates entries long enough to gain from it (a
URL and its ``Referer`` header share most of their bytes).
"""

from __future__ import annotations

import importlib
import zlib
from typing import Any, Protocol, runtime_checkable

import msgpack  # type: ignore[import-untyped]
from scrapy.utils.misc import load_object

# The byte 0xC1 is never used by msgpack, so it marks our format unambiguously:
# 0xC1 + msgpack map, or 0xC1 0xC1 + the raw-deflated msgpack map.
_TAG = b"\xc1"
_DEFLATED_TAG = b"\xc1\xc1"
# Entries shorter than this are stored as is: deflate would not make them smaller.
_DEFLATE_FROM = 128
# Entries up to this size are deflated with fixed codes (see _deflater()).
_FIXED_CODES_UP_TO = 4096
# Decoding stops past this size: a crafted entry cannot exhaust a worker's memory.
_MAX_INFLATED = 64 * 1024 * 1024
# Deflate expands a byte into at most ~1032: an entry up to this size cannot inflate
# past _MAX_INFLATED, so it is inflated in one call, without a bounded decompressor.
_INFLATE_AT_ONCE = _MAX_INFLATED // 1100

_DEFAULTS: dict[str, Any] = {
    "callback": None,
    "errback": None,
    "headers": {},
    "method": "GET",
    "body": b"",
    "cookies": {},
    "meta": {},
    "encoding": "utf-8",
    "priority": 0,
    "dont_filter": False,
    "flags": [],
    "cb_kwargs": {},
}
_FIELDS = ("url", *_DEFAULTS)
_CODE_OF = {name: code for code, name in enumerate(_FIELDS)}
# Defaults that each decoded dict needs a new copy of.
_MUTABLE = tuple(name for name, value in _DEFAULTS.items() if isinstance(value, (dict, list)))


@runtime_checkable
class Serializer(Protocol):
    def dumps(self, obj: Any) -> bytes: ...

    def loads(self, s: bytes) -> Any: ...


def looks_like_pickle(data: bytes) -> bool:
    """Whether ``data`` seems to be a pickle (protocol 2 or later)."""
    return len(data) > 2 and data[0] == 0x80 and 2 <= data[1] <= 5 and data.endswith(b".")


_NO_DEFAULT = object()


class MsgpackSerializer:
    """The default request serializer: safe, compact, bytes-aware."""

    def dumps(self, obj: dict[str, Any]) -> bytes:
        packed = {}
        for name, value in obj.items():
            default = _DEFAULTS.get(name, _NO_DEFAULT)
            if type(value) is not type(default) or value != default:
                packed[_CODE_OF.get(name, name)] = value
        try:
            packed_bytes: bytes = msgpack.packb(packed, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"msgpack cannot encode it: {exc}") from exc
        if len(packed_bytes) >= _DEFLATE_FROM:
            deflater = _deflater(len(packed_bytes))
            deflated: bytes = deflater.compress(packed_bytes) + deflater.flush()
            if len(deflated) + 1 < len(packed_bytes):
                return _DEFLATED_TAG + deflated
        return _TAG + packed_bytes

    def loads(self, s: bytes) -> dict[str, Any]:
        return with_defaults(self.loads_stored(s))

    def loads_stored(self, s: bytes) -> dict[str, Any]:
        """The fields ``s`` stores, by name: :meth:`loads` without the fields left at
        Scrapy's default value. A ``scrapy.Request`` built from it is the same; a
        subclass, whose defaults may differ, needs :func:`with_defaults` first."""
        if not s.startswith(_TAG):
            raise ValueError("not written by scrapy-redis' msgpack serializer")
        try:
            packed = msgpack.unpackb(_inflate(s), raw=False, strict_map_key=False)
        except (ValueError, zlib.error, msgpack.UnpackException) as exc:
            raise ValueError(f"corrupt msgpack data: {exc}") from exc
        if not isinstance(packed, dict):
            raise ValueError("msgpack data is not a map")
        count = len(_FIELDS)
        return {
            _FIELDS[key] if type(key) is int and 0 <= key < count else key: value
            for key, value in packed.items()
        }

    def __repr__(self) -> str:
        return "scrapy_redis.serializers.msgpack_serializer"


def with_defaults(stored: dict[str, Any]) -> dict[str, Any]:
    """``stored`` (see :meth:`MsgpackSerializer.loads_stored`) with the fields it leaves
    out set to Scrapy's default values."""
    obj = dict(_DEFAULTS)
    obj.update(stored)
    for name in _MUTABLE:
        if obj[name] is _DEFAULTS[name]:
            obj[name] = type(obj[name])()
    return obj


def _deflater(size: int) -> Any:
    """A raw deflate compressor (level 1) for ``size`` bytes.

    Up to _FIXED_CODES_UP_TO bytes with deflate's fixed Huffman codes: a few bytes
    larger than with codes fitted to the entry, but inflating it does not build code
    tables first, which made up two thirds of the cost of inflating a request.
    """
    strategy = zlib.Z_FIXED if size <= _FIXED_CODES_UP_TO else zlib.Z_DEFAULT_STRATEGY
    return zlib.compressobj(1, zlib.DEFLATED, -15, 8, strategy)


def _inflate(s: bytes) -> bytes:
    """The msgpack bytes of an entry (``s`` starts with the tag)."""
    if not s.startswith(_DEFLATED_TAG):
        return s[1:]
    if len(s) <= _INFLATE_AT_ONCE:
        return zlib.decompress(s[2:], -15)
    inflater = zlib.decompressobj(wbits=-15)
    data = inflater.decompress(s[2:], _MAX_INFLATED)
    if inflater.unconsumed_tail or not inflater.eof:
        raise ValueError("truncated deflate data, or larger than 64 MiB once inflated")
    return data


#: The default SCHEDULER_SERIALIZER.
msgpack_serializer = MsgpackSerializer()


def resolve_serializer(value: Any, setting: str = "SCHEDULER_SERIALIZER") -> Serializer:
    """A serializer from an object, an importable module path or a dotted object path."""
    if isinstance(value, str):
        value = _import(value, setting)
    missing = [name for name in ("loads", "dumps") if not callable(getattr(value, name, None))]
    if missing:
        raise TypeError(
            f"{setting} = {value!r} does not implement {' and '.join(missing)}(); use an "
            "object or module with dumps(obj) -> bytes and loads(bytes) -> obj, e.g. "
            f"{msgpack_serializer!r} (default) or 'scrapy_redis.picklecompat'."
        )
    return value  # type: ignore[no-any-return]


def _import(path: str, setting: str) -> Any:
    try:
        return importlib.import_module(path)
    except ImportError:
        pass
    try:
        return load_object(path)
    except (ImportError, NameError, ValueError) as exc:
        raise ValueError(
            f"{setting} = {path!r} is neither an importable module nor an object path: {exc}"
        ) from exc
