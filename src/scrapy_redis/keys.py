"""Every Redis key name scrapy-redis uses is formatted here, and only here.

Templates come from settings (see :mod:`scrapy_redis.defaults`) and are
formatted once, with ``%(spider)s`` and ``%(name)s`` both standing for the
spider name. Derived keys append a fixed suffix to an already formatted key so
that, on Redis Cluster, a hash tag in the base key (``{%(spider)s}:requests``)
puts them in the same slot.
"""

from __future__ import annotations

import time


def format_key(template: str, spider_name: str) -> str:
    """Return ``template`` with the spider name filled in."""
    try:
        return template % {"spider": spider_name, "name": spider_name}
    except (KeyError, ValueError, TypeError) as exc:
        raise ValueError(
            f"Invalid Redis key template {template!r}: {exc!r}. A key template may use "
            "%(spider)s or %(name)s for the spider name; write a literal % as %%."
        ) from exc


def needs_formatting(key: str) -> bool:
    """Whether ``key`` still holds a ``%(...)s`` placeholder."""
    return "%(" in key


def standalone_dupefilter_key(template: str) -> str:
    """The one-time key of a dupefilter running under Scrapy's own scheduler."""
    return template % {"timestamp": int(time.time())}


def priority_list_key(queue_key: str, priority: int) -> str:
    """The list holding the requests of one priority of a PriorityQueue."""
    return f"{queue_key}:prio:{priority}"


def invalid_entries_key(queue_key: str) -> str:
    """Where queue entries that cannot be decoded are moved (never deleted)."""
    return f"{queue_key}:invalid"


def workers_key(queue_key: str) -> str:
    """The hash of live workers sharing a queue (see :mod:`scrapy_redis.workers`)."""
    return f"{queue_key}:workers"


def leases_key(base_key: str) -> str:
    """The hash of leases (see :mod:`scrapy_redis.leases`) of a queue or start key."""
    return f"{base_key}:leases"


def lease_deadlines_key(base_key: str) -> str:
    """The sorted set of lease deadlines of a queue or start key."""
    return f"{base_key}:lease_deadlines"


def news_channel(queue_key: str) -> str:
    """The pub/sub channel on which pushes to a queue are announced (see wakeup.py)."""
    return f"{queue_key}:news"


def deliveries_key(base_key: str) -> str:
    """The hash counting, per leased entry, the deliveries that ended with its worker gone."""
    return f"{base_key}:deliveries"


def dead_letters_key(base_key: str) -> str:
    """Where entries delivered SCHEDULER_MAX_DELIVERIES times are moved (never deleted)."""
    return f"{base_key}:dead"


def writes_key(data_key: str, writer: str) -> str:
    """Where the last write of ``writer`` to ``data_key`` is recorded (see writes.py).

    In the same Redis Cluster slot as ``data_key``: a key with a hash tag keeps it
    (``<data key>:writes:<writer>``); a key without one, which is hashed whole, becomes
    the tag (``{<data key>}:writes:<writer>``).
    """
    if _hash_tag(data_key) is None and "}" not in data_key:
        return f"{{{data_key}}}:writes:{writer}"
    return f"{data_key}:writes:{writer}"


def _hash_tag(key: str) -> str | None:
    """The hash tag of ``key`` on Redis Cluster (the text of its first ``{...}``), if any."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    return key[start + 1 : end] if end > start + 1 else None


def lean_meta_key(filter_key: str) -> str:
    """The hash holding the layout and count of the lean filter ``filter_key`` (see
    lean_layout.py). Every other key of the filter derives from what it holds, so no
    tool needs SCAN."""
    return f"{filter_key}:lean"


def lean_bucket_key(filter_key: str, bucket: int, bucket_bits: int) -> str:
    """One bucket (an intset) of the lean filter ``filter_key``: ``<key>:lean:<bucket>``,
    the bucket number in fixed-width hex, so its leading digits (the fingerprint's top
    bits) can later name a Redis Cluster shard and its hash tag without renaming the
    rest (a new layout version)."""
    return f"{filter_key}:lean:{bucket:0{(bucket_bits + 3) // 4}x}"


def bloom_blocks_key(filter_key: str) -> str:
    """The hash listing the block groups of a Bloom filter (see bloom_dupefilter.py): field
    ``<generation>:<layer>`` = its block count, and the last ``generation``. The filter's own
    key (its meta hash) may be deleted with the crawl's shared keys; this one survives, so
    the blocks of a deleted filter are found and deleted when the next one is made."""
    return f"{filter_key}:bloom"


def bloom_block_key(filter_key: str, generation: str, layer: int, block: int) -> str:
    """The string holding one block of one layer of a Bloom filter.

    Blocks are independent (all bits of a fingerprint are in one block), so on Redis
    Cluster they may spread over slots: a later version can group the blocks of one
    shard under one hash tag (``{<filter key>:<shard>}:bloom:...``) without changing
    the layout. Today they follow the filter key's own tag, if any.
    """
    return f"{filter_key}:bloom:{generation}:{layer}:{block}"
