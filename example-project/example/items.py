"""Items of the example project.

See https://docs.scrapy.org/en/latest/topics/items.html and
https://docs.scrapy.org/en/latest/topics/loaders.html
"""

from __future__ import annotations

from itemloaders.processors import Join, MapCompose, TakeFirst
from scrapy.item import Field, Item
from scrapy.loader import ItemLoader


class ExampleItem(Item):
    name = Field()
    description = Field()
    link = Field()
    url = Field()
    crawled = Field()
    spider = Field()


class ExampleLoader(ItemLoader):
    """Fills an :class:`ExampleItem`: first value of each field, descriptions joined."""

    default_item_class = ExampleItem
    default_input_processor = MapCompose(str.strip)
    default_output_processor = TakeFirst()
    description_out = Join()
