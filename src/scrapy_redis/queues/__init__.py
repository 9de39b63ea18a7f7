"""The queue classes' machinery: the base, lists and priority queues, leases and their
records, dead letters, where filters record fingerprints for the push scripts."""
