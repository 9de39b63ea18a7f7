"""The verbs of ``scrapy redis``: one module each (see :mod:`scrapy_redis.commands`)."""
