"""Small helpers kept importable for compatibility."""

from __future__ import annotations

import json
from typing import Any

from scrapy.utils.misc import load_object

from scrapy_redis.exceptions import ConfigurationError


class TextColor:
    """ANSI colour codes (kept for compatibility; scrapy-redis logs no colours)."""

    HEADER = "\033[95m"
    OKBLUE = "\033[94m"
    OKCYAN = "\033[96m"
    OKGREEN = "\033[92m"
    WARNING = "\033[93m"
    FAIL = "\033[91m"
    ENDC = "\033[0m"
    BOLD = "\033[1m"
    UNDERLINE = "\033[4m"


def bytes_to_str(s: Any, encoding: str = "utf-8") -> Any:
    """``s`` decoded if it is bytes, else unchanged."""
    if isinstance(s, bytes):
        return s.decode(encoding)
    return s


def is_dict(string_content: str | bytes) -> bool:
    """Whether ``string_content`` is a JSON object (the original accepted any JSON value)."""
    try:
        return isinstance(json.loads(string_content), dict)
    except (ValueError, TypeError):
        return False


def convert_bytes_to_str(data: Any, encoding: str = "utf-8") -> Any:
    """``data`` with every bytes object, also inside dicts, lists and tuples, decoded."""
    if isinstance(data, bytes):
        return data.decode(encoding)
    if isinstance(data, dict):
        return {
            convert_bytes_to_str(k, encoding): convert_bytes_to_str(v, encoding)
            for k, v in data.items()
        }
    if isinstance(data, (list, tuple)):
        return type(data)(convert_bytes_to_str(item, encoding) for item in data)
    return data


def load_configured(setting: str, value: Any) -> Any:
    """The object a setting names (``value``: a dotted path or the object itself).

    A path that cannot be loaded raises :class:`ConfigurationError` naming ``setting``,
    instead of Scrapy's ``NameError``/``ImportError`` that names neither the setting nor
    the fix.
    """
    if not isinstance(value, str):
        return value
    try:
        return load_object(value)
    except (ImportError, NameError, ValueError, AttributeError) as exc:
        raise ConfigurationError(
            f"{setting} = {value!r} cannot be loaded ({exc}). Check the spelling of the "
            "module and of the class name in that setting."
        ) from exc
