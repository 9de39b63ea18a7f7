"""The spider's start side: start messages read under leases, their settings, polling,
the idle timer."""
