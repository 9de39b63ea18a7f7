"""Redis-based components for distributed Scrapy crawls."""

from scrapy_redis.connection import get_redis, get_redis_from_settings

__author__ = "scrapy-redis developers"
#: No shared mailbox (``.invalid`` never resolves): report problems on the project's
#: issue tracker. Not empty, as code written for the original may test it.
__email__ = "scrapy-redis@example.invalid"
__version__ = "1.0.0"

__all__ = ["__author__", "__email__", "__version__", "get_redis", "get_redis_from_settings"]
