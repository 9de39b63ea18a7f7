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
    the environment variable SCRAPY_REDIS_DASHBOARD_TOKEN) is required to listen on
    anything but a loopback address. Returns the listening port (``.getHost().port``)."""
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scrapy_redis.dashboard",
        description="Serve a live dashboard of the project's crawls in Redis "
        "(run it in the Scrapy project's directory).",
    )
    parser.add_argument("--host", default=defaults.DASHBOARD_HOST, help="address to listen on")
    parser.add_argument("--port", type=int, default=defaults.DASHBOARD_PORT, help="0: a free one")
    parser.add_argument("--token", help=f"required off loopback (or set {TOKEN_ENV})")
    parser.add_argument(
        "--interval", type=float, default=defaults.DASHBOARD_INTERVAL, help="page refresh (s)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from scrapy.utils.project import get_project_settings
    from twisted.internet import reactor as installed

    reactor: Any = installed
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s"
    )
    try:
        listening: Any = serve(
            get_project_settings(), args.host, args.port, args.token, reactor, args.interval
        )
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"Dashboard: {url_of(args.host, listening.getHost().port)}", flush=True)
    reactor.run()
    return 0
