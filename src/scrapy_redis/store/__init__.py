"""The Redis side: key names and types, Lua scripts (``lua/``), Sentinel, the client's
bootstrap, the outage guard and guarded calls, writes applied once."""
