"""The shared stats hash and each worker's stats."""
