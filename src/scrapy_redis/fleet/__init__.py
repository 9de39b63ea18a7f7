"""Looking at a crawl from outside and operating on it: status, diagnosis, crawl keys,
operations, moving a crawl."""
