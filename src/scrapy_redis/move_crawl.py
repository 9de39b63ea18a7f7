"""The documented path of :mod:`scrapy_redis.fleet.move_crawl`: users import and run it here.

python -m scrapy_redis.move_crawl --help
"""

from scrapy_redis.fleet.move_crawl import (
    BATCH,
    Moved,
    MoveRefusedError,
    check_movable,
    main,
    move,
    move_fingerprints,
    move_requests,
    push_once,
)
from scrapy_redis.fleet.move_keys import check_named_keys, copy_named_keys

__all__ = [
    "BATCH",
    "MoveRefusedError",
    "Moved",
    "check_movable",
    "check_named_keys",
    "copy_named_keys",
    "main",
    "move",
    "move_fingerprints",
    "move_requests",
    "push_once",
]

if __name__ == "__main__":
    raise SystemExit(main())
