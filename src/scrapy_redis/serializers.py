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
#: Most bytes of msgpack one entry may hold (once inflated), by default. Decoding builds
#: at most one Python object per byte, ~70 bytes each at worst (an empty map): reading
#: any entry allocates at most ~70 MiB, in well under a second. Larger entries are
#: refused when written (the request stays in the worker's memory) and when read (the
#: entry is set aside).
MAX_ENTRY_SIZE = 1024 * 1024
#: Most items (elements, or key/value pairs) one list or map of an entry may hold, by
#: default: a hostile entry of one huge container is refused when its header is read.
MAX_ITEMS = 100_000
# Deflate expands a byte into at most ~1032: an entry up to max_entry_size // _MAX_RATIO
# bytes cannot inflate past the limit, so it is inflated in one call.
_MAX_RATIO = 1100

#: The stored format: fields holding these values are left out of an entry, and the
#: fields are stored under their number in FIELD_CODES (part of the format: never renumber).
STORED_DEFAULTS: dict[str, Any] = {
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
_FIELDS = ("url", *STORED_DEFAULTS)
FIELD_CODES = {name: code for code, name in enumerate(_FIELDS)}
# Defaults that each decoded dict needs a new copy of.
_MUTABLE = tuple(name for name, value in STORED_DEFAULTS.items() if isinstance(value, (dict, list)))


@runtime_checkable
class Serializer(Protocol):
    def dumps(self, obj: Any) -> bytes: ...

    def loads(self, s: bytes) -> Any: ...


def looks_like_pickle(data: Any) -> bool:
    """Whether ``data`` seems to be a pickle (protocol 2 or later); False for what is not
    bytes (what a custom serializer's ``dumps`` returned: the original stored it as is)."""
    if not isinstance(data, (bytes, bytearray)):
        return False
    return len(data) > 2 and data[0] == 0x80 and 2 <= data[1] <= 5 and data.endswith(b".")


_NO_DEFAULT = object()


class MsgpackSerializer:
    """The default request serializer: safe, compact, bytes-aware.

    An entry may hold at most ``max_entry_size`` bytes of msgpack (once inflated),
    and no list or map of more than ``max_items`` items: data read from Redis is
    untrusted, and these bound what decoding one entry may build. A request over
    these limits cannot be stored (ValueError). For larger requests, on every worker::

        SCHEDULER_SERIALIZER = MsgpackSerializer(max_entry_size=16 * 1024 * 1024)
    """

    def __init__(self, max_entry_size: int = MAX_ENTRY_SIZE, max_items: int = MAX_ITEMS) -> None:
        if max_entry_size < 1 or max_items < 1:
            raise ValueError("max_entry_size and max_items must be positive")
        self.max_entry_size = max_entry_size
        self.max_items = max_items
        self._inflate_at_once = max_entry_size // _MAX_RATIO

    def dumps(self, obj: dict[str, Any]) -> bytes:
        packed = {}
        for name, value in obj.items():
            default = STORED_DEFAULTS.get(name, _NO_DEFAULT)
            if type(value) is not type(default) or value != default:
                packed[FIELD_CODES.get(name, name)] = value
        try:
            packed_bytes: bytes = msgpack.packb(packed, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"msgpack cannot encode it: {exc}") from exc
        self._check_limits(packed_bytes)
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
            packed = self._unpack(self._inflate(s))
        except (ValueError, zlib.error, msgpack.UnpackException) as exc:
            raise ValueError(f"corrupt msgpack data: {exc}") from exc
        if not isinstance(packed, dict):
            raise ValueError("msgpack data is not a map")
        count = len(_FIELDS)
        return {
            _FIELDS[key] if type(key) is int and 0 <= key < count else key: value
            for key, value in packed.items()
        }

    def _unpack(self, data: bytes) -> Any:
        size, items = self.max_entry_size, self.max_items
        return msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=False,
            max_str_len=size,
            max_bin_len=size,
            max_array_len=items,
            max_map_len=items,
            max_ext_len=0,  # never written
        )

    def _check_limits(self, packed: bytes) -> None:
        """ValueError, with the fix, for an entry that :meth:`loads` would refuse."""
        problem = ""
        if len(packed) > self.max_entry_size:
            problem = f"its {_size(len(packed))} are over the {_size(self.max_entry_size)} limit"
        elif len(packed) > self.max_items:  # else no container can hold more items
            try:
                self._unpack(packed)
            except ValueError:
                problem = f"a list or map in it holds more than {self.max_items} items"
        if problem:
            raise ValueError(
                f"the request is too large to store: {problem}. To store such requests set, "
                f"on every worker, SCHEDULER_SERIALIZER = "
                f"MsgpackSerializer(max_entry_size=..., max_items=...) "
                f"(from scrapy_redis.serializers)"
            )

    def _inflate(self, s: bytes) -> bytes:
        """The msgpack bytes of an entry (``s`` starts with the tag), up to the size limit."""
        limit = self.max_entry_size
        if not s.startswith(_DEFLATED_TAG):
            data = s[1:]
        elif len(s) <= self._inflate_at_once:
            data = zlib.decompress(s[2:], -15)
        else:
            inflater = zlib.decompressobj(wbits=-15)
            data = inflater.decompress(s[2:], limit + 1)
            if len(data) <= limit and (inflater.unconsumed_tail or not inflater.eof):
                raise ValueError("truncated deflate data")
        if len(data) > limit:
            raise ValueError(f"larger than {_size(limit)} once inflated (max_entry_size)")
        return data

    def __repr__(self) -> str:
        if (self.max_entry_size, self.max_items) == (MAX_ENTRY_SIZE, MAX_ITEMS):
            return "scrapy_redis.serializers.msgpack_serializer"
        return (
            f"scrapy_redis.serializers.MsgpackSerializer(max_entry_size={self.max_entry_size}, "
            f"max_items={self.max_items})"
        )


def _size(count: int) -> str:
    if count % (1024 * 1024) == 0:
        return f"{count // (1024 * 1024)} MiB"
    return f"{count} bytes"


def with_defaults(stored: dict[str, Any]) -> dict[str, Any]:
    """``stored`` (see :meth:`MsgpackSerializer.loads_stored`) with the fields it leaves
    out set to Scrapy's default values."""
    obj = dict(STORED_DEFAULTS)
    obj.update(stored)
    for name in _MUTABLE:
        if obj[name] is STORED_DEFAULTS[name]:
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
