"""The example spiders: ``dmoz`` (plain CrawlSpider), ``myspider_redis`` and ``mycrawler_redis``."""
