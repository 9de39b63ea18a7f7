"""Start the dashboard: :func:`serve` listens; :func:`main` is what
``python -m scrapy_redis.dashboard`` runs."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from twisted.internet.error import CannotListenError

from scrapy_redis import defaults
from scrapy_redis.connection import describe_server, from_settings
from scrapy_redis.dashboard.fleet import Fleet
from scrapy_redis.dashboard.limits import DashboardSite
from scrapy_redis.dashboard.reads import describe_error
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
    server = from_settings(settings)
    fleet = Fleet(server, settings)
    dashboard = Dashboard(fleet, Guard(token), reactor, interval, describe_server(server))
    site = DashboardSite(dashboard)
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


def listening_line(url: str, redis: str) -> str:
    """The line saying where the dashboard listens and which Redis it reads."""
    return f"Dashboard: {url} (Redis: {redis})"


def run(settings: BaseSettings, args: argparse.Namespace, announce: Any = None) -> int:
    """Serve as ``args`` say until the reactor stops; ``announce(url, redis)`` is told
    the dashboard's address and the Redis it reads (password masked); by default it
    prints :func:`listening_line`. 2 after a configuration error, or a port taken
    (printed on stderr)."""
    from twisted.internet import reactor as installed

    reactor: Any = installed
    host, port, interval = options(settings, args)
    try:
        listening: Any = serve(settings, host, port, args.token, reactor, interval)
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except CannotListenError as exc:
        print(f"error: {port_taken(host, port, exc)}", file=sys.stderr)
        return 2
    redis = check_redis(settings)
    url = url_of(host, listening.getHost().port)
    if announce is None:
        print(listening_line(url, redis), flush=True)
    else:
        announce(url, redis)
    reactor.run()
    return 0


def port_taken(host: str, port: int, error: CannotListenError) -> str:
    """One line saying why the dashboard cannot listen on ``host``:``port``, and what to do."""
    reason = getattr(error.socketError, "strerror", None) or str(error.socketError)
    return (
        f"the dashboard cannot listen on {host}:{port}: {reason} (another dashboard or "
        "program has it?). Pass another --port (or set DASHBOARD_PORT), or --port 0 for "
        "a free one."
    )


def check_redis(settings: BaseSettings) -> str:
    """The project's Redis (password masked); a warning on stderr if it does not answer
    (the dashboard starts anyway, and shows the crawls once it does)."""
    try:
        server = from_settings(settings)
        described = describe_server(server)
    except Exception as exc:  # a bad REDIS_URL is serve()'s to refuse; say it anyway
        return f"unknown ({describe_error(exc)})"
    try:
        server.ping()
    except Exception as exc:  # any failure to answer is "unreachable"
        print(
            f"warning: Redis at {described} is unreachable ({describe_error(exc)}): the "
            "dashboard starts anyway and shows the crawls once it answers.",
            file=sys.stderr,
            flush=True,
        )
    finally:
        server.close()
    return described


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
    return run(settings, parser.parse_args(argv))
