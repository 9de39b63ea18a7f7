"""Every Redis key name scrapy-redis uses is formatted here, and only here.

Templates come from settings (see :mod:`scrapy_redis.defaults`) and are
formatted once, with ``%(spider)s`` and ``%(name)s`` both standing for the
spider name. Derived keys append a fixed suffix to an already formatted key
(``<queue key>:leases``). On a Redis Cluster (``cluster=True``) a derived key
must be in its base key's slot, for the scripts that use both: a hash tag in
the base key (``{%(spider)s}:requests``) is kept; a base key without one, which
is hashed whole, becomes the tag (``{<queue key>}:leases``, see :func:`derived`).
The scheduler's filter is put in its queue's slot the same way
(:func:`crawl_filter_key`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from redis.crc import key_slot

from scrapy_redis.exceptions import ConfigurationError


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


def derived(base_key: str, suffix: str, cluster: bool = False) -> str:
    """``<base key>:<suffix>``; on a Redis Cluster in the slot of ``base_key`` (see the
    module's doc): ``{<base key>}:<suffix>`` unless ``base_key`` has a hash tag."""
    return f"{slot_base(base_key, cluster)}:{suffix}"


def slot_base(key: str, cluster: bool = False) -> str:
    """What keys derived from ``key`` start with: ``key``, or on a Redis Cluster
    ``{key}`` if ``key`` has no hash tag (it is hashed whole: the tag keeps its slot)."""
    if cluster and hash_tag(key) is None and "}" not in key:
        return f"{{{key}}}"
    return key


def glob_escape(key: str) -> str:
    """``key`` as a SCAN pattern matching itself only (``*?[]\\`` escaped)."""
    return "".join(f"\\{char}" if char in "*?[]\\" else char for char in key)


def derived_pattern(base_key: str, prefix: str, cluster: bool = False) -> str:
    """A SCAN pattern matching every :func:`derived` key of ``base_key`` whose suffix
    starts with ``prefix`` (``lean:`` matches the lean filter's buckets)."""
    return f"{glob_escape(slot_base(base_key, cluster))}:{glob_escape(prefix)}*"


def crawl_filter_key(filter_key: str, queue_key: str, cluster: bool = False) -> str:
    """The scheduler's filter key: ``filter_key``; on a Redis Cluster, in the slot of
    ``queue_key`` (the push script checks the filter and pushes to the queue in one
    call): ``<filter key>:{<queue key's tag, or the queue key>}`` unless both have the
    same hash tag already."""
    if not cluster:
        return filter_key
    queue_tag = hash_tag(queue_key) or queue_key
    filter_tag = hash_tag(filter_key)
    if filter_tag == queue_tag:
        return filter_key
    if filter_tag is not None or "}" in filter_key or "{" in queue_tag or "}" in queue_tag:
        raise ConfigurationError(
            f"On a Redis Cluster the duplicate filter {filter_key!r} must share the hash "
            f"slot of the queue {queue_key!r}. Give SCHEDULER_DUPEFILTER_KEY and "
            "SCHEDULER_QUEUE_KEY the same hash tag ('{%(spider)s}:dupefilter' and "
            "'{%(spider)s}:requests'), or no hash tag (the default ones)."
        )
    return f"{filter_key}:{{{queue_tag}}}"


#: Hash slots of a Redis Cluster.
CLUSTER_SLOTS = 16384


def lane_tags(queue_key: str, lanes: int) -> list[str]:
    """The hash tags of the ``lanes`` lanes of the queue ``queue_key`` (SCHEDULER_SHARDS):
    ``<queue key>/<n>``, or ``<queue key>/<n>.<m>`` with the first ``m`` that puts lane
    ``n`` in the n-th of ``lanes`` equal ranges of slots. A cluster's masters serve
    ranges of slots (``redis-cli --cluster create`` splits them evenly), so the lanes
    spread over them about evenly; every worker computes the same tags."""
    tags = []
    for lane in range(lanes):
        tag, attempt = f"{queue_key}/{lane}", 0
        while key_slot(tag.encode()) * lanes // CLUSTER_SLOTS != lane:
            attempt += 1
            tag = f"{queue_key}/{lane}.{attempt}"
        tags.append(tag)
    return tags


def lanes_key(queue_key: str, cluster: bool = False) -> str:
    """The string holding how many lanes the crawl of ``queue_key`` is split into
    (SCHEDULER_SHARDS; 1: not split), so that workers with other settings are refused."""
    return derived(queue_key, "lanes", cluster)


def lane_queue_key(tag: str) -> str:
    """The queue of one lane: its hash tag alone (``{<queue key>/<n>}``); the keys derived
    from it (``{...}:leases``...) are in its slot."""
    return f"{{{tag}}}"


def lane_filter_key(filter_key: str, tag: str) -> str:
    """The duplicate filter of one lane: ``<filter key>:{<tag>}``, in the lane's slot."""
    return f"{filter_key}:{{{tag}}}"


def priority_list_key(queue_key: str, priority: int, cluster: bool = False) -> str:
    """The list holding the requests of one priority of a PriorityQueue."""
    return derived(queue_key, f"prio:{priority}", cluster)


def slot_queue_keys(queue_key: str, cluster: bool = False) -> list[str]:
    """The keys of the per-slot queues of the queue ``queue_key`` (fleet-wide limits, see
    :mod:`scrapy_redis.politeness` and ``lua/_slots.lua``), in one slot: the queued
    requests, the ready slots, the waiting slots, the slots' state, the sequence."""
    return [
        derived(queue_key, f"polite:{name}", cluster)
        for name in ("pq", "ready", "waiting", "slots", "seq")
    ]


def slot_store_keys(queue_key: str, cluster: bool = False) -> list[str]:
    """The keys of the per-slot queues' lists (see ``lua/_slot_store.lua``), in the slot
    of :func:`slot_queue_keys`: the index of the lists (a sorted set of their groups) and
    the count of the requests they hold, the count of bad values replaced and not
    reported yet."""
    names = ("lists", "more", "corrupt")
    return [derived(queue_key, f"polite:{name}", cluster) for name in names]


def slot_list_key(queue_key: str, group: bytes, cluster: bool = False) -> bytes:
    """The list of one group (``<slot> NUL <12 hex priority>``) of the per-slot queues:
    ``<queue key>:polite:q:<group>``."""
    return derived(queue_key, "polite:q:", cluster).encode() + group


def forgotten_key(filter_key: str, cluster: bool = False) -> str:
    """A counter of a filter's forget calls (see fleet/forget.py): workers that remember
    fingerprints they met (SeenCache) drop that memory when it changes."""
    return derived(filter_key, "forgotten", cluster)


def due_key(queue_key: str, cluster: bool = False) -> str:
    """The requests of a queue due later (see scheduling/due.py): a sorted set, scored by
    when each is due (ms, the server's clock)."""
    return derived(queue_key, "due", cluster)


def recurring_key(start_key: str, cluster: bool = False) -> str:
    """The recurring start messages of a spider (see start/recurring.py): a sorted set of
    the messages, each scored by its next run (ms, the server's clock); derived from the
    first start key, in its slot."""
    return derived(start_key, "recurring", cluster)


def recurring_every_key(start_key: str, cluster: bool = False) -> str:
    """The interval of each recurring start message (message -> ms): a hash, in the slot
    of the first start key."""
    return derived(start_key, "recurring:every", cluster)


def invalid_entries_key(queue_key: str, cluster: bool = False) -> str:
    """Where queue entries that cannot be decoded are moved (never deleted)."""
    return derived(queue_key, "invalid", cluster)


def moving_key(queue_key: str, cluster: bool = False) -> str:
    """The entries ``move_crawl`` pushed into the queue (or lane) ``queue_key`` whose
    release on the source is not confirmed yet (SHA1 -> copies; deleted when it ends)."""
    return derived(queue_key, "moving", cluster)


def workers_key(queue_key: str, cluster: bool = False) -> str:
    """The hash of live workers sharing a queue (see :mod:`scrapy_redis.scheduling.workers`)."""
    return derived(queue_key, "workers", cluster)


def leases_key(base_key: str, cluster: bool = False) -> str:
    """The hash of leases (see :mod:`scrapy_redis.queues.leases`) of a queue or start key."""
    return derived(base_key, "leases", cluster)


def lease_deadlines_key(base_key: str, cluster: bool = False) -> str:
    """The sorted set of lease deadlines of a queue or start key."""
    return derived(base_key, "lease_deadlines", cluster)


def news_channel(queue_key: str, cluster: bool = False) -> str:
    """The pub/sub channel on which pushes to a queue are announced (see wakeup.py):
    ``<queue key>:news``. On a Redis Cluster a sharded channel (``SPUBLISH``), which
    only the master of its slot serves, in the slot of ``queue_key`` (the push script
    announces there, and a script may only publish in the slot of its keys): a lane's
    queue ``{<tag>}`` gives ``{<tag>}:news``, a queue key without a hash tag
    ``{<queue key>}:news`` (see :func:`derived`)."""
    return derived(queue_key, "news", cluster)


def deliveries_key(base_key: str, cluster: bool = False) -> str:
    """The hash counting, per leased entry, the deliveries that ended with its worker gone."""
    return derived(base_key, "deliveries", cluster)


def dead_letters_key(base_key: str, cluster: bool = False) -> str:
    """Where entries delivered SCHEDULER_MAX_DELIVERIES times are moved (never deleted)."""
    return derived(base_key, "dead", cluster)


def worker_stats_key(stats_key: str, worker_id: str, cluster: bool = False) -> str:
    """The hash of one worker's own stats (see stats.py): ``<stats key>:worker:<worker id>``,
    in the Redis Cluster slot of the fleet's hash ``stats_key`` (written by one script)."""
    return derived(stats_key, f"worker:{worker_id}", cluster)


def stats_workers_key(stats_key: str, cluster: bool = False) -> str:
    """The sorted set of the workers that have a hash of their own stats (member: worker
    id, score: its last write, POSIX seconds on the Redis server's clock):
    ``<stats key>:workers``, in the slot of ``stats_key``."""
    return derived(stats_key, "workers", cluster)


def writes_key(data_key: str, writer: str) -> str:
    """Where the last write of ``writer`` to ``data_key`` is recorded (see writes.py).

    In the same Redis Cluster slot as ``data_key``: a key with a hash tag keeps it
    (``<data key>:writes:<writer>``); a key without one, which is hashed whole, becomes
    the tag (``{<data key>}:writes:<writer>``).
    """
    return derived(data_key, f"writes:{writer}", cluster=True)


def hash_tag(key: str) -> str | None:
    """The hash tag of ``key`` on Redis Cluster (the text of its first ``{...}``), if any."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    return key[start + 1 : end] if end > start + 1 else None


def lean_meta_key(filter_key: str, cluster: bool = False) -> str:
    """The hash holding the layout and count of the lean filter ``filter_key`` (see
    lean_layout.py). Every other key of the filter derives from what it holds, so no
    tool needs SCAN."""
    return derived(filter_key, "lean", cluster)


def lean_bucket_key(filter_key: str, bucket: int, bucket_bits: int, cluster: bool = False) -> str:
    """One bucket (an intset) of the lean filter ``filter_key``: ``<key>:lean:<bucket>``,
    the bucket number in fixed-width hex, so its leading digits (the fingerprint's top
    bits) can later name a Redis Cluster shard and its hash tag without renaming the
    rest (a new layout version)."""
    return derived(filter_key, f"lean:{bucket:0{(bucket_bits + 3) // 4}x}", cluster)


def lean_bucket_keys(
    filter_key: str, buckets: Iterable[int], bucket_bits: int, cluster: bool = False
) -> list[str]:
    """:func:`lean_bucket_key` of each of ``buckets`` (the prefix formatted once: the
    scheduler names the buckets of every batch)."""
    prefix, width = derived(filter_key, "lean:", cluster), (bucket_bits + 3) // 4
    return [f"{prefix}{bucket:0{width}x}" for bucket in buckets]


def lean_generation_key(
    filter_key: str, generation: int, part: int, bucket: int, buckets: int, cluster: bool = False
) -> str:
    """One bucket of one part of one generation of a lean filter's fingerprints that expire
    (see lean_expiry.py): ``<key>:lean:g<generation>.<part>:<bucket in hex>``, the bucket
    in as many hex digits as the generation's ``buckets`` need; it expires whole."""
    width = len(f"{max(buckets - 1, 0):x}")
    return derived(filter_key, f"lean:g{generation}.{part}:{bucket:0{width}x}", cluster)


def bloom_blocks_key(filter_key: str, cluster: bool = False) -> str:
    """The hash listing the block groups of a Bloom filter (see bloom_dupefilter.py): field
    ``<generation>:<layer>`` = its block count, and the last ``generation``. The filter's own
    key (its meta hash) may be deleted with the crawl's shared keys; this one survives, so
    the blocks of a deleted filter are found and deleted when the next one is made."""
    return derived(filter_key, "bloom", cluster)


def bloom_block_key(
    filter_key: str, generation: str, layer: int, block: int, cluster: bool = False
) -> str:
    """The string holding one block of one layer of a Bloom filter.

    Blocks are independent (all bits of a fingerprint are in one block), so on Redis
    Cluster they may spread over slots: a later version can group the blocks of one
    shard under one hash tag (``{<filter key>:<shard>}:bloom:...``) without changing
    the layout. Today they follow the filter key's own tag, if any.
    """
    return derived(filter_key, f"bloom:{generation}:{layer}:{block}", cluster)


def bloom_generation_key(filter_key: str, generation: int, cluster: bool = False) -> str:
    """The count of one time generation of a Bloom filter whose fingerprints expire (see
    bloom_expiry.py): ``<key>:bloom:t<generation>``, a string that expires with it."""
    return derived(filter_key, f"bloom:t{generation}", cluster)


def bloom_generation_block_keys(
    filter_key: str, generation: int, blocks: Iterable[int], cluster: bool = False
) -> list[str]:
    """The blocks ``blocks`` of one time generation of a Bloom filter whose fingerprints
    expire: ``<key>:bloom:t<generation>:<block>``, strings that expire with it (in the
    filter key's slot: one script call reads every generation)."""
    prefix = derived(filter_key, f"bloom:t{generation}:", cluster)
    return [f"{prefix}{block}" for block in blocks]
