"""Plain helpers every layer uses: class-level defaults for old-style subclasses, what is
read of Scrapy's engine, bounded log values. Imports nothing else of the package."""
