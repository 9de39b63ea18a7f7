"""Default values of every scrapy-redis setting, in alphabetical order.

Each constant is documented in ``docs/settings.rst`` (a test checks it). The
constant names are the original package's, so ``from scrapy_redis import
defaults`` keeps working; the setting each one backs is named in its comment.
Key templates may use ``%(spider)s`` (or ``%(name)s``) for the spider name.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

#: DASHBOARD_HOST: address ``scrapy redis dashboard`` listens on: loopback only, unless a
#: token is given.
DASHBOARD_HOST = "127.0.0.1"

#: DASHBOARD_INTERVAL: seconds between two refreshes of the dashboard's page.
DASHBOARD_INTERVAL = 2.0

#: DASHBOARD_PORT: port the dashboard listens on (0: a free port).
DASHBOARD_PORT = 6793

#: Standalone dupefilter key, used when RFPDupeFilter runs under Scrapy's own scheduler.
DUPEFILTER_KEY = "dupefilter:%(timestamp)s"

#: DUPEFILTER_LIFETIME: seconds a request's fingerprint is kept; 0: forever (the original's
#: set). On (> 0, or inf), the filter is a sorted set and a request is new again once its
#: fingerprint expired; meta["dupefilter_lifetime"] gives a request its own.
DUPEFILTER_LIFETIME = 0

#: DUPEFILTER_LEAN_CAPACITY: fingerprints a new LeanDupeFilter is sized for (its bucket count).
DUPEFILTER_LEAN_CAPACITY = 10_000_000

#: MAX_IDLE_TIME_BEFORE_CLOSE: seconds a RedisSpider may idle before closing (0: never).
MAX_IDLE_TIME = 0

#: REDIS_ITEMS_KEY: list that RedisPipeline appends items to.
PIPELINE_KEY = "%(spider)s:items"

#: REDIS_ITEMS_BATCH_SIZE: most items RedisPipeline pushes in one script call.
REDIS_ITEMS_BATCH_SIZE = 100

#: REDIS_ITEMS_DELAY: seconds an item may wait in the worker before it is pushed with
#: others (0: each item at once, one round trip per item).
REDIS_ITEMS_DELAY = 0.1

#: Client class used when REDIS_PARAMS has no ``redis_cls``.
REDIS_CLS = redis.StrictRedis

#: Fallback for the start-message batch size when CONCURRENT_REQUESTS is missing.
REDIS_CONCURRENT_REQUESTS = 16

#: REDIS_ENCODING: text encoding of the client and of start messages.
REDIS_ENCODING = "utf-8"

#: REDIS_KEY_CHECK_INTERVAL: seconds between scans for a higher-priority start key.
REDIS_KEY_CHECK_INTERVAL = None

#: REDIS_OUTAGE_TIMEOUT: seconds Redis may stay unreachable before the spider closes.
REDIS_OUTAGE_TIMEOUT = 300

#: REDIS_PARAMS: keyword arguments of the Redis client, merged under the user's. Calls run on
#: Twisted's reactor thread, so a dead server must fail fast: one immediate retry (a dropped
#: connection is reopened), short timeouts; scrapy-redis backs off and retries itself.
#: ``retry_on_error`` names the errors retried: redis-py 5.0 retries only those listed.
REDIS_PARAMS: dict[str, Any] = {
    "socket_timeout": 10,
    "socket_connect_timeout": 5,
    "retry": Retry(NoBackoff(), 1),
    "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
    "encoding": REDIS_ENCODING,
}

#: REDIS_SENTINEL_PARAMS: keyword arguments of the connections to the sentinels of a
#: ``redis+sentinel://`` REDIS_URL, merged under the user's. A sentinel only says where the
#: master is, so it must answer at once; a dead one is skipped for the next (no retry).
REDIS_SENTINEL_PARAMS: dict[str, Any] = {
    "socket_timeout": 2,
    "socket_connect_timeout": 2,
    "retry": Retry(NoBackoff(), 0),
}

#: DUPEFILTER_CLASS used by the scheduler when the setting is missing.
SCHEDULER_DUPEFILTER_CLASS = "scrapy_redis.dupefilter.RFPDupeFilter"

#: SCHEDULER_DUPEFILTER_KEY: set of request fingerprints shared by the workers.
SCHEDULER_DUPEFILTER_KEY = "%(spider)s:dupefilter"

#: SCHEDULER_ENQUEUE_BATCH_SIZE: most requests deduplicated and pushed by one script call.
SCHEDULER_ENQUEUE_BATCH_SIZE = 100

#: SCHEDULER_ENQUEUE_DELAY: seconds an enqueued request may wait in the worker before it is
#: pushed with others (0: at once, and enqueue_request() returns False for duplicates).
SCHEDULER_ENQUEUE_DELAY = 0.1

#: SCHEDULER_FLEET_LIMITS: queue requests per download slot and hold each slot's delay and
#: concurrency across the whole fleet (see docs/politeness.rst); False: as the original.
SCHEDULER_FLEET_LIMITS = False

#: SCHEDULER_FLEET_EARLY: with fleet-wide limits, seconds before its slot's next start a
#: request may be handed to a worker, which holds it until then (0: only at the start;
#: at most 1).
SCHEDULER_FLEET_EARLY = 0.25

#: SCHEDULER_FLUSH_ON_START: clear queue and fingerprints on open if no other worker is alive.
SCHEDULER_FLUSH_ON_START = False

#: SCHEDULER_IDLE_BEFORE_CLOSE: seconds to wait for new requests before idling.
SCHEDULER_IDLE_BEFORE_CLOSE = 0

#: SCHEDULER_MAX_DELIVERIES: a leased request whose worker died this many times is moved
#: to the dead letters ``<queue key>:dead`` instead of the queue (0: never).
SCHEDULER_MAX_DELIVERIES = 3

#: SCHEDULER_PERSIST: keep queue, fingerprints and stats when the last worker closes.
SCHEDULER_PERSIST = False

#: SCHEDULER_PREFETCH: most requests one pop leases to the worker (1: one at a time). Pops
#: lease about a quarter second of the worker's hand-out rate (see scrapy_redis.scheduling.pacing).
SCHEDULER_PREFETCH = 128

#: SCHEDULER_QUEUE_CLASS: the shared request queue.
SCHEDULER_QUEUE_CLASS = "scrapy_redis.queue.PriorityQueue"

#: SCHEDULER_QUEUE_KEY: key of the shared request queue.
SCHEDULER_QUEUE_KEY = "%(spider)s:requests"

#: SCHEDULER_SHARDS: lanes one crawl's queue and filter are split into (see lanes.py); None:
#: on a Redis Cluster the count the crawl has, or its masters' for a new one; 1 on one Redis.
SCHEDULER_SHARDS = None

#: SCHEDULER_SEEN_CACHE_SIZE: fingerprints a worker remembers as recorded, to drop repeated
#: links without a round trip (0: none).
SCHEDULER_SEEN_CACHE_SIZE = 100_000

#: SCHEDULER_SERIALIZER: how requests are stored (safe msgpack; pickle is opt-in).
SCHEDULER_SERIALIZER = "scrapy_redis.serializers.msgpack_serializer"

#: SCHEDULER_STOP_EXIT_CODE: exit status of ``scrapy crawl`` when the scheduler stopped the
#: crawl itself (Redis unreachable too long, a key of another type, an unreadable queue); 0:
#: Scrapy's (0, as for any closed spider).
SCHEDULER_STOP_EXIT_CODE = 3

#: SCHEDULER_WORKER_TIMEOUT: seconds without a heartbeat after which a worker is gone.
SCHEDULER_WORKER_TIMEOUT = 30

#: REDIS_START_URLS_AS_SET: start messages are read from a set (SPOP).
START_URLS_AS_SET = False

#: REDIS_START_URLS_AS_ZSET: start messages are read from a sorted set, highest score first.
START_URLS_AS_ZSET = False

#: REDIS_START_URLS_BATCH_SIZE: start messages read per fetch (None: CONCURRENT_REQUESTS).
START_URLS_BATCH_SIZE = None

#: REDIS_START_URLS_DONT_FILTER: default ``dont_filter`` of requests made from start messages
#: (True, as in the original: a URL pushed again is crawled again).
START_URLS_DONT_FILTER = True

#: REDIS_START_URLS_KEY: where start messages are read from.
START_URLS_KEY = "%(name)s:start_urls"

#: REDIS_START_URLS_MAX_SIZE: bytes a start message may have (0: no limit); a longer one is
#: refused by ``push`` and set aside as invalid by the spiders, before it is decoded.
START_URLS_MAX_SIZE = 1_048_576

#: REDIS_START_URLS_POLL_INTERVAL: seconds between reads of new start messages while busy.
START_URLS_POLL_INTERVAL = 1.0

#: REDIS_START_URLS_SCHEMES: URL schemes start messages may use (``file://``, ``s3://`` or
#: ``data:`` read what the worker can reach, not the web): others are set aside as invalid.
START_URLS_SCHEMES = ["http", "https"]

#: STATS_FLUSH_INTERVAL: seconds stat updates are kept, merged, before being written (0: at once).
STATS_FLUSH_INTERVAL = 1.0

#: STATS_KEY: hash holding the stats shared by the workers.
STATS_KEY = "%(spider)s:stats"

#: STATS_WORKER_TTL: seconds a worker's own stats hash (``<stats key>:worker:<id>``) is kept
#: after the worker's last write to it (a dead worker's hash goes away).
STATS_WORKER_TTL = 86400

#: BLOOMFILTER_BACKEND: where the Bloom filter lives: "auto" (RedisBloom's BF.* when the
#: server has it, else "lua"), "lua" (bit blocks in plain strings) or "redisbloom".
BLOOMFILTER_BACKEND = "auto"

#: BLOOMFILTER_CAPACITY: URLs the Bloom filter's first layer holds at BLOOMFILTER_ERROR_RATE.
BLOOMFILTER_CAPACITY = 1_000_000

#: BLOOMFILTER_ERROR_RATE: bound on the Bloom filter's false-positive rate (new URLs dropped).
BLOOMFILTER_ERROR_RATE = 0.001
