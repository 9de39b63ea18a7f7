"""The documented path of :mod:`scrapy_redis.dupefilters.migrate`: users import and run it here.

python -m scrapy_redis.migrate_dupefilter --help
"""

from scrapy_redis.dupefilters.migrate import (
    BatchFilter,
    RecordingFilter,
    install_project_reactor,
    main,
    make_way,
    migrate,
    project_settings,
    record_batch,
    set_aside_key,
    source_batches,
    writes_into,
)

__all__ = [
    "BatchFilter",
    "RecordingFilter",
    "install_project_reactor",
    "main",
    "make_way",
    "migrate",
    "project_settings",
    "record_batch",
    "set_aside_key",
    "source_batches",
    "writes_into",
]

if __name__ == "__main__":
    raise SystemExit(main())
