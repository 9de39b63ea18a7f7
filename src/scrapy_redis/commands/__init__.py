"""``scrapy redis <verb>``: the commands that operate a fleet, inside a Scrapy project.

One Scrapy command, ``redis`` (:class:`scrapy_redis.commands.redis.Command`, registered
through the ``scrapy.commands`` entry point), runs verbs. A verb is a module of the
package :mod:`scrapy_redis.commands.verbs`, found there by :mod:`pkgutil` (a module
whose name starts with ``_`` is not a verb): dropping in a module adds a verb, without
editing the command. The verb's name is the module's name; it keeps this protocol:

* its module docstring: the first line is the verb's one-line help (``scrapy redis -h``),
  the rest its description (``scrapy redis <verb> -h``);
* ``add_arguments(parser: argparse.ArgumentParser) -> None``: adds the verb's own
  arguments (``--json`` is added for every verb, as ``args.json``);
* ``run(args: argparse.Namespace, context: Context) -> int``: does the work and returns
  the exit code (0: done; 1: done in part, or refused, as said on stderr). The
  :class:`~scrapy_redis.commands.context.Context` holds the project's settings, the
  Redis client built from them, the spiders, the crawl's keys
  (:class:`~scrapy_redis.commands.crawl.Crawl`), the output streams, a progress bar
  and the confirmation prompt. A verb raises
  :class:`~scrapy_redis.commands.context.CommandError` for a usage error (the command
  prints it and exits with 2).

With ``--json`` a verb writes one JSON document to stdout (``export`` and ``watch``:
JSON lines); without it, text for people.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

#: The package whose modules are the verbs.
VERBS_PACKAGE = "scrapy_redis.commands.verbs"


def verb_modules() -> dict[str, ModuleType]:
    """The verbs, by name: the modules of :data:`VERBS_PACKAGE` keeping the protocol."""
    package = importlib.import_module(VERBS_PACKAGE)
    verbs: dict[str, ModuleType] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{VERBS_PACKAGE}.{info.name}")
        if callable(getattr(module, "add_arguments", None)) and callable(
            getattr(module, "run", None)
        ):
            verbs[info.name] = module
    return dict(sorted(verbs.items()))


def verb_help(module: ModuleType) -> tuple[str, str]:
    """A verb's one-line help and its description (its module docstring)."""
    doc = (module.__doc__ or "").strip()
    first, _, rest = doc.partition("\n")
    return first.strip(), rest.strip()
