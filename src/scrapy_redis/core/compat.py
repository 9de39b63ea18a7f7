"""Class-level defaults for subclasses whose ``__init__`` does not call ours.

Code written for the original scrapy-redis subclasses its components with an
``__init__`` of its own that sets only the original's attributes (e.g.
scrapy-redis-bloomfilter's dupefilter). Every other attribute our methods read
has a class-level default: a plain class attribute when it is immutable, a
:class:`PerInstance` when each instance needs its own object (a list, a queue).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class PerInstance(Generic[T]):
    """A class attribute whose value is built, per instance, on first read.

    ``factory(instance)`` builds it; it is then stored in the instance's
    ``__dict__``, so later reads are plain attribute reads. An ``__init__`` that
    assigns the attribute never calls the factory.
    """

    def __init__(self, factory: Callable[[Any], T]) -> None:
        self.factory = factory
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> PerInstance[T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> Any:
        if instance is None:
            return self
        value = self.factory(instance)
        instance.__dict__[self.name] = value
        return value


class Derived(Generic[T]):
    """A class attribute computed from the instance on every read, until the instance
    sets a value of its own (e.g. a scheduler's crawler, from its spider)."""

    def __init__(self, getter: Callable[[Any], T]) -> None:
        self.getter = getter

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> Derived[T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> Any:
        return self if instance is None else self.getter(instance)
