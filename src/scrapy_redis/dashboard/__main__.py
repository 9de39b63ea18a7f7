"""``python -m scrapy_redis.dashboard [--host H] [--port P] [--token T] [--interval S]``."""

from __future__ import annotations

import sys

from scrapy_redis.dashboard.server import main

if __name__ == "__main__":
    sys.exit(main())
