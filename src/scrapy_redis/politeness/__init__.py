"""Fleet-wide limits per download slot (SCHEDULER_FLEET_LIMITS): per-slot queues in Redis,
and the delay and concurrency of each slot held across every worker of a crawl.

See docs/politeness.rst. Modules: ``limits`` (a request's slot and the limits the
settings give it, as Scrapy computes them), ``queue`` (:class:`SlotQueue`, over the
scripts ``lua/_slots.lua``, ``pop_slots.lua``, ``push_slots.lua``,
``dedup_push_slots.lua``), ``pacing`` (how a worker takes and starts what the fleet
allows), ``hold`` (a request handed out early, held until its start), ``outside``
(each download outside the scheduler within its site's limits: robots.txt, a media
pipeline's, ``engine.download()``'s), ``robots`` (robots.txt's own case), ``setup``
(the setting, and a persisted crawl carried over).
"""

from scrapy_redis.politeness.queue import SlotQueue

__all__ = ["SlotQueue"]
