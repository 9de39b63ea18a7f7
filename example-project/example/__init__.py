"""The scrapy-redis example project."""
