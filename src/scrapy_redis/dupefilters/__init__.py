"""The lean and Bloom duplicate filters, their layouts, copying a set of fingerprints
into another filter. ``scrapy_redis.dupefilter`` re-exports the filters."""
