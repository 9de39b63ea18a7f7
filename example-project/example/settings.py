"""Settings of the scrapy-redis example project.

Every worker of a crawl uses the same Redis server: set the environment variable
REDIS_URL (default: redis://localhost:6379), or override it per run with
``scrapy crawl SPIDER -s REDIS_URL=redis://host:port/db``.

See https://docs.scrapy.org/en/latest/topics/settings.html for Scrapy's settings.
"""

import os

BOT_NAME = "example"

SPIDER_MODULES = ["example.spiders"]
NEWSPIDER_MODULE = "example.spiders"

USER_AGENT = "scrapy-redis-example (a demo of distributed crawling with scrapy-redis)"

# The demo site is local and has no robots.txt; obey it when you crawl real sites.
ROBOTSTXT_OBEY = False

# Share the request queue and the duplicate filter between all workers, in Redis.
SCHEDULER = "scrapy_redis.scheduler.Scheduler"
DUPEFILTER_CLASS = "scrapy_redis.dupefilter.RFPDupeFilter"

# Keep the queue and the fingerprints when the crawl stops, so that it can be
# resumed (run the same command again). Set to False to clear them when the
# last worker stops.
SCHEDULER_PERSIST = True

# The shared queue (default: PriorityQueue, by Request.priority then first in, first out).
# SCHEDULER_QUEUE_CLASS = "scrapy_redis.queue.PriorityQueue"
# SCHEDULER_QUEUE_CLASS = "scrapy_redis.queue.FifoQueue"
# SCHEDULER_QUEUE_CLASS = "scrapy_redis.queue.LifoQueue"

# Seconds a Redis spider waits for new start URLs before closing (0: wait forever).
# MAX_IDLE_TIME_BEFORE_CLOSE = 10

# Share the stats of all workers in the Redis hash <spider>:stats.
# STATS_CLASS = "scrapy_redis.stats.RedisStatsCollector"

ITEM_PIPELINES = {
    "example.pipelines.ExamplePipeline": 300,
    # Push every item, as JSON, to the Redis list <spider>:items (see process_items.py).
    "scrapy_redis.pipelines.RedisPipeline": 400,
}

REDIS_URL = os.environ.get("REDIS_URL", "redis://localhost:6379")

LOG_LEVEL = "INFO"

# No DOWNLOAD_DELAY: the demo site is local. Be polite to real sites:
# DOWNLOAD_DELAY = 1

FEED_EXPORT_ENCODING = "utf-8"
