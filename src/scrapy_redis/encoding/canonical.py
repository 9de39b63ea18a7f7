"""A faster ``w3lib.url.canonicalize_url`` for the URLs crawls mostly see.

Duplicate filtering canonicalizes every request URL, and w3lib's general
implementation (about 20 µs a URL) was more than half of the scheduler's
enqueue time. Fingerprints must stay byte-identical to w3lib's, so that
existing Redis fingerprint sets stay valid; :func:`canonical_url` therefore
computes the canonical form directly only for a conservative class of URLs
whose canonical form is known exactly, and hands everything else to w3lib:

* ``http://`` or ``https://`` in lowercase, a lowercase ``[a-z0-9.-]+`` host,
  an optional port ``1``-``65535`` without leading zeros, no userinfo;
* a path of unreserved characters, ``:``, ``@``, ``/``, the sub-delimiters
  but ``;`` (params) and uppercase ``%XX`` escapes that w3lib keeps escaped,
  without ``.`` or ``..`` segments (an empty path becomes ``/``);
* a query of ``&``-separated fields made of unreserved characters, ``+`` and
  kept ``%XX`` escapes, each with at most one ``=``: empty fields are dropped,
  ``k`` becomes ``k=``, and the pairs are sorted by decoded key then value;
* any printable ASCII fragment, which is dropped.

On first use a self-check (:func:`self_check`) compares the fast path with the
reference, w3lib, on probe URLs (:data:`PROBES`) that exercise each of these
rules; if any differs (another w3lib version), the fast path is switched off for
the process and every URL goes to w3lib. :data:`reference` and
:data:`fast_path_on` are the hooks to test that with.
"""

from __future__ import annotations

import logging
import re
import string
from urllib.parse import unquote_to_bytes

from w3lib.url import canonicalize_url

logger = logging.getLogger(__name__)

#: The reference the fast path must agree with, and what canonicalizes the URLs out of
#: its class: w3lib's ``canonicalize_url`` (a hook: tests replace it).
reference = canonicalize_url

_UNRESERVED = string.ascii_letters + string.digits + "-._~"
# Characters w3lib leaves as they are in a path (besides "%" escapes); ";"
# is left out as it starts the params of the last segment.
_PATH_CHARS = _UNRESERVED + "!$&'()*+,=:@/"
# Characters w3lib writes back unescaped after decoding a path escape.
_PATH_DECODED_SAFE = _PATH_CHARS + ";?[]|%"
# Path escapes w3lib protects from decoding, so they come back as they were.
_PATH_PROTECTED = frozenset({"25", "2F", "3B", "3F"})


def _kept_escapes(decoded_safe: str, protected: frozenset[str]) -> frozenset[str]:
    """The uppercase ``XX`` of the ``%XX`` escapes that w3lib writes back unchanged."""
    return frozenset(
        f"{byte:02X}"
        for byte in range(256)
        if chr(byte) not in decoded_safe or f"{byte:02X}" in protected
    )


_PATH_ESCAPES = _kept_escapes(_PATH_DECODED_SAFE, _PATH_PROTECTED)
# A decoded query byte is written back unescaped if unreserved, as "+" if a space.
_QUERY_ESCAPES = _kept_escapes(_UNRESERVED + " ", frozenset())

_QUERY_FIELD = r"[A-Za-z0-9\-._~+%]*(?:=[A-Za-z0-9\-._~+%]*)?"  # at most one "="
_URL_RE = re.compile(
    r"(https?://[a-z0-9.-]+)"  # scheme and host, kept as they are
    r"(?::([1-9][0-9]{0,4}))?"  # port
    r"(/[A-Za-z0-9\-._~!$&'()*+,=:@/%]*)?"  # path
    rf"(?:\?({_QUERY_FIELD}(?:&{_QUERY_FIELD})*))?"  # query
    r"(?:#[\x21-\x7e]*)?"  # fragment, dropped
)

#: Whether :func:`canonical_url` takes the fast path: None until :func:`self_check`
#: has run (on first use; set it back to None to run it again), then its result.
fast_path_on: bool | None = None


def canonical_url(url: str) -> str:
    """Exactly ``w3lib.url.canonicalize_url(url)``, faster for common URLs."""
    on = fast_path_on
    if on is None:
        on = self_check()
    if on:
        fast = fast_path(url)
        if fast is not None:
            return fast
    return reference(url)


def fast_path(url: str) -> str | None:
    """The canonical form of ``url`` if it is in the fast-path class, else None."""
    match = _URL_RE.fullmatch(url)
    if match is None:
        return None
    origin, port, path, query = match.groups()
    if port is not None:
        if int(port) > 65535:
            return None
        origin = f"{origin}:{port}"
    if not path:
        path = "/"
    elif ("%" in path or "/." in path) and not _path_kept(path):
        return None
    if query:
        query = _query(query)
        if query:
            return f"{origin}{path}?{query}"
        if query is None:
            return None
    return origin + path


def _path_kept(path: str) -> bool:
    """True if w3lib leaves ``path`` (starting with "/") unchanged."""
    if "%" in path and not _escapes_kept(path, _PATH_ESCAPES):
        return False
    return not ("/." in path and _has_dot_segment(path))


def _escapes_kept(text: str, kept: frozenset[str]) -> bool:
    """True if every "%" in ``text`` starts an escape that is in ``kept``."""
    return all(piece[:2] in kept for piece in text.split("%")[1:])


def _has_dot_segment(path: str) -> bool:
    segments = path.split("/")
    return "." in segments or ".." in segments


def _query(query: str) -> str | None:
    """The canonical query (maybe empty), or None if w3lib would rewrite a field.

    The URL pattern already allows at most one "=" a field.
    """
    if "%" in query:
        return _escaped_query(query)
    if "&" not in query:  # a single field: nothing to sort
        return query if "=" in query else query + "="
    # Sorted as (key, value) pairs: with "=" as "\0", below any other character,
    # the fields sort as strings. "+" (a space for w3lib) sorts below the other
    # characters either way.
    fields = query.replace("=", "\0").split("&")
    if "" in fields:
        fields = [field for field in fields if field]
    fields.sort()
    if query.count("=") != len(fields):
        fields = [field if "\0" in field else field + "\0" for field in fields]
    return "&".join(fields).replace("\0", "=")


def _escaped_query(query: str) -> str | None:
    """As :func:`_query`, for a query with "%" escapes: sorted on decoded pairs."""
    if not _escapes_kept(query, _QUERY_ESCAPES):
        return None
    pairs = [field.partition("=") for field in query.split("&") if field]
    pairs.sort(key=_decoded_pair)
    return "&".join([f"{key}={value}" for key, _, value in pairs])


def _decoded_pair(pair: tuple[str, str, str]) -> tuple[bytes, bytes]:
    """The (key, value) bytes w3lib sorts on: "+" is a space, escapes decoded."""
    key, _, value = pair
    return unquote_to_bytes(key.replace("+", " ")), unquote_to_bytes(value.replace("+", " "))


#: The URLs :func:`self_check` tries: each exercises a rule of the fast path; all must
#: be in its class.
PROBES = (
    "http://example.com",
    "http://example.com:80/?#",
    "http://example.com?a",
    "https://example.com/?&&",
    "https://sub-1.example.co.uk.:8080//a/.b/..c/x./Index.HTML"
    "?q=z&Q=Z&&b&a-b=1&a=2&a&a=&=x&=#frag?x=1",
    "http://example.com/p?q=a+b&q=a-b&q=a&a+=1&a=2#top",
    "http://example.com/p?x=%C3%A9&x=%7F&x=~&y=%2B&y=+&z",
    "http://example.com/a/%C3%A9/%2F%25%3B%3F%23%22%20/~_-.!$&'()*+,=:@",
)


def self_check() -> bool:
    """Compare the fast path with the reference on the probes; keep it on (set
    :data:`fast_path_on`) if all agree."""
    global fast_path_on
    for probe in PROBES:
        fast = fast_path(probe)
        expected = reference(probe)
        if fast != expected:
            logger.debug(
                "canonical_url fast path off: %r gives %r, the reference %r",
                probe,
                fast,
                expected,
            )
            fast_path_on = False
            return False
    fast_path_on = True
    return True
