"""canonical_url: exactly w3lib's canonicalize_url, through the fast path or not."""

from __future__ import annotations

import hashlib
import json
import logging
import random

import pytest
from scrapy import Request
from w3lib.url import canonicalize_url

from scrapy_redis.dupefilter import fingerprint_of, request_fingerprint
from scrapy_redis.encoding import canonical
from scrapy_redis.encoding.canonical import canonical_url, fast_path

# Pieces that keep a URL in the fast path, and near misses that take it out.
SCHEMES = (["http", "https"], ["HTTP", "Https", "ftp", "ws", "file", "mailto", "foo"])
USERINFO = ([""], ["user@", "user:pw@", "u%40x:p%3Aw@", "User@", "@"])
HOSTS = (
    [
        "example.com",
        "www.example-shop.com",
        "a.b.c.example.co.uk",
        "localhost",
        "127.0.0.1",
        "h.",
        ".h",
        "a..b",
        "xn--bcher-kva.de",
        "0-9",
    ],
    [
        "Example.COM",
        "EXAMPLE.com",
        "h_x.com",
        "bücher.de",
        "例え.jp",
        "\uff45\uff58ample.com",  # fullwidth letters, NFKC-folded
        "[::1]",
        "[2001:db8::0:1]",
        "[2001:DB8::1]",
        "",
        "a%41.com",
        "exa mple.com",
    ],
)
PORTS = (["", ":80", ":443", ":8080", ":65535", ":1"], [":080", ":0", ":65536", ":", ":8a"])
SEGMENTS = (
    [
        "a",
        "catalog",
        "Item-0012345-Portable.html",
        "index.php",
        "~user",
        "",
        ".hidden",
        "..x",
        "x.",
        "...",
        "caf%C3%A9",
        "%2F",
        "%25",
        "%2525",
        "%3B",
        "%3F",
        "%23",
        "%20",
        "%22",
        "a+b",
        "it's",
        "*()!$&,=:@",
    ],
    [
        ".",
        "..",
        "caf%c3%a9",
        "%41",
        "%7E",
        "%2f",
        "%3b",
        "%7C",
        "%5B",
        "%2E",
        "%2E%2E",
        "%zz",
        "%",
        "%2",
        "a;b",
        "a;b=c",
        "a b",
        "café",
        "ü",
        "|",
        "[x]",
        "a\\b",
        '"',
        "<>",
        "^`{}",
        "\t",
    ],
)
QUERY_PARTS = (
    [
        "a",
        "b",
        "A",
        "ref",
        "page",
        "a-b",
        "a.b",
        "a_b",
        "a~",
        "24",
        "",
        "a+b",
        "+",
        "%2B",
        "%C3%A9",
        "%26",
        "%3D",
        "%25",
        "%7F",
        "%00",
    ],
    ["a b", "%20", "%2b", "%c3%a9", "%41", "%7E", "%zz", "%", "é", "'", "/", ":", "?", ";", "*"],
)
FRAGMENTS = (["", "top", "a?b=c", "x#y", "[1]", "%zz", "/p?q"], ["é", " x"])
OTHERS = [
    "",
    " ",
    "about:blank",
    "data:text/plain,hello%20world",
    "mailto:someone@example.com",
    "javascript:void(0)",
    "/relative/path?b=1&a=2",
    "relative",
    "//example.com/x",
    "http:example.com",
    "http:/x",
    "http:///x",
    "http://",
    "http://?a=1",
    "  http://example.com/a  ",
    "http://exa\tmple.com/\na",
    "http://example.com\\a\\b?c\\d",
    "http://example.com/a/../../b",
    "http://example.com/a?b#c?d",
    "https://example.com/?&",
    "https://example.com?",
    "https://example.com#",
    "HTTPS://EXAMPLE.COM/A?B=C",
    "http://[::1",
    "http://::1]/",
    "http://example.com/#\ud800",  # w3lib fails to encode the fragment
    "http://example.com/#a\nb",
]

# What a crawl mostly requests: all of it belongs to the fast path.
REAL_HOSTS = ["www.example-shop.com", "example.com", "shop.example.co.uk", "cdn1.example.net"]
REAL_SEGMENTS = [
    "catalog",
    "kitchen-appliances",
    "item-0012345-portable-wireless-stainless-classic.html",
    "p",
    "2024",
    "Caf%C3%A9",
    "en_US",
    "index.php",
    "~team",
    "a,b",
]
REAL_KEYS = ["ref", "page", "q", "sort", "id", "utm_source", "lang", "s"]
REAL_VALUES = ["listing", "24", "1", "price-asc", "blue+shoes", "%C3%A9t%C3%A9", "", "A.B"]


def outcome(function, url):
    """The result of ``function(url)``, or the type of what it raised."""
    try:
        return function(url)
    except Exception as exc:  # canonicalize_url raises on e.g. bad ports
        return type(exc)


def pick(rng, pieces, miss=0.04):
    """A piece from ``pieces`` (good, bad): a near miss with probability ``miss``."""
    good, bad = pieces
    return rng.choice(bad if rng.random() < miss else good)


def random_query(rng):
    fields = []
    for _ in range(rng.randrange(1, 6)):
        shape = rng.random()
        key = "".join(pick(rng, QUERY_PARTS) for _ in range(rng.randrange(1, 3)))
        value = "".join(pick(rng, QUERY_PARTS) for _ in range(rng.randrange(0, 3)))
        if shape < 0.8:
            fields.append(f"{key}={value}")
        elif shape < 0.9:
            fields.append(key)
        elif shape < 0.97:
            fields.append("")
        else:
            fields.append(f"{key}={value}={value}")
    if rng.random() < 0.2:  # a repeated key
        fields.append(fields[0].partition("=")[0] + "=" + pick(rng, QUERY_PARTS))
    return "&".join(fields)


def random_url(rng):
    authority = pick(rng, USERINFO) + pick(rng, HOSTS) + pick(rng, PORTS)
    path = "".join("/" + pick(rng, SEGMENTS) for _ in range(rng.randrange(0, 5)))
    url = f"{pick(rng, SCHEMES)}://{authority}{path}"
    roll = rng.random()
    if roll < 0.6:
        url += "?" + random_query(rng)
    elif roll < 0.7:
        url += "?"
    if rng.random() < 0.3:
        url += "#" + pick(rng, FRAGMENTS)
    return url


def realistic_url(rng):
    path = "".join("/" + rng.choice(REAL_SEGMENTS) for _ in range(rng.randrange(0, 5)))
    url = f"{rng.choice(['http', 'https'])}://{rng.choice(REAL_HOSTS)}{path}"
    if rng.random() < 0.7:
        pairs = [
            f"{rng.choice(REAL_KEYS)}={rng.choice(REAL_VALUES)}" for _ in range(rng.randrange(1, 5))
        ]
        url += "?" + "&".join(pairs)
    if rng.random() < 0.2:
        url += "#reviews"
    return url


def corpus():
    rng = random.Random(20240611)
    urls = [random_url(rng) for _ in range(40000)]
    urls += [realistic_url(rng) for _ in range(5000)]
    urls += OTHERS + list(canonical.PROBES)
    return urls


@pytest.fixture
def fast_path_on():
    assert canonical.self_check() is True
    assert canonical.fast_path_on is True


def test_canonical_url_is_canonicalize_url(fast_path_on):
    urls = corpus()
    fast = rejected = 0
    for url in urls:
        expected = outcome(canonicalize_url, url)
        assert outcome(canonical_url, url) == expected, url
        result = fast_path(url)
        if result is None:
            rejected += 1
        else:
            fast += 1
            assert result == expected, url
    # The corpus exercises both sides of the class.
    assert fast > 10000
    assert rejected > 10000


def test_realistic_urls_take_the_fast_path(fast_path_on):
    rng = random.Random(7)
    urls = [realistic_url(rng) for _ in range(2000)]
    handled = [url for url in urls if fast_path(url) is not None]
    assert len(handled) == len(urls)
    for url in handled:
        assert fast_path(url) == canonicalize_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "HTTP://example.com/",
        "http://Example.com/",
        "http://user@example.com/",
        "http://example.com:080/",
        "http://example.com:65536/",
        "http://[::1]/",
        "http://example.com/a/./b",
        "http://example.com/a/..",
        "http://example.com/a;p",
        "http://example.com/%7E",
        "http://example.com/%c3%a9",
        "http://example.com/?a=%20",
        "http://example.com/?a=b=c",
        "http://example.com/?a='",
        "http://bücher.de/",
        "ftp://example.com/",
        "about:blank",
    ],
)
def test_near_misses_leave_the_fast_path(fast_path_on, url):
    assert fast_path(url) is None
    assert outcome(canonical_url, url) == outcome(canonicalize_url, url)


def test_query_pairs_sort_by_key_then_value(fast_path_on):
    # As (key, value) pairs, not as "key=value" strings, where "-" < "=".
    url = "http://example.com/?a-b=1&a=2&a=10&a"
    assert fast_path(url) == "http://example.com/?a=&a=10&a=2&a-b=1"
    assert fast_path(url) == canonicalize_url(url)


def test_self_check_runs_on_first_use(monkeypatch):
    monkeypatch.setattr(canonical, "fast_path_on", None)
    assert canonical_url("http://example.com?b=1&a=2") == "http://example.com/?a=2&b=1"
    assert canonical.fast_path_on is True


def _fragment_keeping_reference(url):
    """A reference that disagrees with w3lib: it keeps fragments, as another version might."""
    return canonicalize_url(url, keep_fragments=True)


def test_disagreeing_reference_switches_the_fast_path_off(monkeypatch, caplog):
    monkeypatch.setattr(canonical, "reference", _fragment_keeping_reference)
    monkeypatch.setattr(canonical, "fast_path_on", None)
    with caplog.at_level(logging.DEBUG, logger="scrapy_redis.encoding.canonical"):
        url = "http://example.com/x?b=2&a=1#top"
        assert canonical_url(url) == "http://example.com/x?a=1&b=2#top"
    assert canonical.fast_path_on is False
    assert "fast path off" in caplog.text
    rng = random.Random(3)
    urls = [realistic_url(rng) for _ in range(300)]
    assert any("#" in url for url in urls)
    for url in urls:
        assert canonical_url(url) == _fragment_keeping_reference(url)


def test_any_probe_disagreeing_switches_the_fast_path_off(monkeypatch):
    for probe in canonical.PROBES:
        expected = canonicalize_url(probe)

        def reference(url, probe=probe, expected=expected):
            return expected + "#" if url == probe else canonicalize_url(url)

        monkeypatch.setattr(canonical, "reference", reference)
        assert canonical.self_check() is False, probe
    monkeypatch.undo()
    assert canonical.self_check() is True


def reference_fingerprint(method, url, body):
    data = {"method": method, "url": canonicalize_url(url), "body": body.hex()}
    return hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()


def test_request_fingerprints_unchanged(fast_path_on):
    rng = random.Random(11)
    urls = [realistic_url(rng) for _ in range(1000)] + [random_url(rng) for _ in range(3000)]
    urls += ["http://bücher.de/straße?q=ü&a=1", "https://例え.jp/パス#frag"]
    bodies = [b"", b"", b"k=v", b"\x00\xff", "é".encode(), b'{"a": 1}']
    checked = 0
    for url in urls:
        try:
            request = Request(
                url, method=rng.choice(["GET", "POST", "put"]), body=rng.choice(bodies)
            )
        except ValueError:  # URLs Scrapy refuses (no scheme, bad port...)
            continue
        expected = reference_fingerprint(request.method, request.url, request.body)
        assert request_fingerprint(request) == expected, request
        checked += 1
    assert checked > 3000


@pytest.mark.parametrize(
    "method, url",
    [
        ("GET", "http://example.com/"),
        ("GÉT", "http://example.com/"),  # non-ASCII method
        ('G"T', "http://example.com/"),
        ("G\\T", "http://example.com/"),
        ("G\x7fT", "http://example.com/"),
        ("GET", 'http://a"b.com/'),  # '"' and '\' survive in the host
        ("GET", "http://a\x01b.com/"),
        ("GET", "http://" + "ü" * 70 + ".com/"),  # IDNA fails: non-ASCII kept
        ("", ""),
    ],
)
@pytest.mark.parametrize("body", [b"", b"x\x00"])
def test_fingerprint_json_matches_json_dumps(method, url, body):
    assert fingerprint_of(method, url, body) == reference_fingerprint(method, url, body)
