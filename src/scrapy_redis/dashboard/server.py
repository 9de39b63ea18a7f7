"""Start the dashboard: :func:`serve` listens; :func:`main` is what
``python -m scrapy_redis.dashboard`` runs."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from twisted.web.server import Site

from scrapy_redis import defaults
from scrapy_redis.connection import from_settings
from scrapy_redis.dashboard.fleet import Fleet
from scrapy_redis.dashboard.security import TOKEN_ENV, Guard, check_binding
from scrapy_redis.dashboard.web import Dashboard
from scrapy_redis.exceptions import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from scrapy.settings import BaseSettings
    from twisted.internet.interfaces import IListeningPort


def serve(
    settings: BaseSettings,
    host: str = defaults.DASHBOARD_HOST,
    port: int = defaults.DASHBOARD_PORT,
    token: str | None = None,
    reactor: Any = None,
    interval: float = defaults.DASHBOARD_INTERVAL,
) -> IListeningPort:
    """Listen on ``host``:``port`` (0: a free port) for the dashboard of the crawls of
    the project ``settings`` describe; the caller runs ``reactor``. ``token`` (default:
    the environment variable SCRAPY_REDIS_DASHBOARD_TOKEN) is required, with at least 16
    characters, to listen on anything but a loopback address. Returns the listening
    port (``.getHost().port``)."""
    token = token or os.environ.get(TOKEN_ENV) or None
    check_binding(host, token)
    if interval <= 0:
        raise ConfigurationError(f"--interval must be more than 0 seconds, not {interval}")
    if reactor is None:
        from twisted.internet import reactor
    fleet = Fleet(from_settings(settings), settings)
    site = Site(Dashboard(fleet, Guard(token), reactor, interval))  # type: ignore[no-untyped-call]
    site.displayTracebacks = False
    listening: IListeningPort = reactor.listenTCP(port, site, interface=host)
    return listening


def url_of(host: str, port: int) -> str:
    """The dashboard's address as a browser takes it."""
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else host
    return f"http://[{shown}]:{port}/" if ":" in shown else f"http://{shown}:{port}/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The dashboard's options; those not given come from the project's DASHBOARD_HOST,
    DASHBOARD_PORT and DASHBOARD_INTERVAL settings (see :func:`options`)."""
    parser.add_argument("--host", help="address to listen on (DASHBOARD_HOST: 127.0.0.1)")
    parser.add_argument("--port", type=int, help="0: a free one (DASHBOARD_PORT: 6793)")
    parser.add_argument("--token", help=f"required off loopback, 16+ chars (or set {TOKEN_ENV})")
    parser.add_argument("--interval", type=float, help="page refresh (DASHBOARD_INTERVAL: 2 s)")


def options(settings: BaseSettings, args: argparse.Namespace) -> tuple[str, int, float]:
    """Host, port and interval: the options given, else the settings, else the defaults."""
    host = args.host or settings.get("DASHBOARD_HOST") or defaults.DASHBOARD_HOST
    port = settings.getint("DASHBOARD_PORT", defaults.DASHBOARD_PORT)
    interval = settings.getfloat("DASHBOARD_INTERVAL", defaults.DASHBOARD_INTERVAL)
    return (
        host,
        port if args.port is None else args.port,
        interval if args.interval is None else args.interval,
    )


def run(settings: BaseSettings, args: argparse.Namespace, announce: Any = print) -> int:
    """Serve as ``args`` say until the reactor stops; ``announce`` gets the line naming
    the address. 2 after a configuration error (printed on stderr)."""
    from twisted.internet import reactor as installed

    reactor: Any = installed
    host, port, interval = options(settings, args)
    try:
        listening: Any = serve(settings, host, port, args.token, reactor, interval)
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    announce(f"Dashboard: {url_of(host, listening.getHost().port)}")
    reactor.run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m scrapy_redis.dashboard``: as ``scrapy redis dashboard``."""
    from scrapy.utils.project import get_project_settings

    settings = get_project_settings()
    parser = argparse.ArgumentParser(
        prog="python -m scrapy_redis.dashboard",
        description="Serve a live dashboard of the project's crawls in Redis "
        "(run it in the Scrapy project's directory).",
    )
    add_arguments(parser)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s"
    )
    return run(settings, parser.parse_args(argv), lambda line: print(line, flush=True))
