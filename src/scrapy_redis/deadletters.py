"""The documented path of :mod:`scrapy_redis.queues.deadletters`: users import it here."""

from scrapy_redis.queues.deadletters import (
    DeadLetter,
    dead_letters,
    requeue_dead_letters,
)

__all__ = [
    "DeadLetter",
    "dead_letters",
    "requeue_dead_letters",
]
