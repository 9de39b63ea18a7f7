"""The scheduler's parts: the enqueue buffer, feeds, lanes, pacing, idle watch, news,
the worker registry, its settings and counters."""
