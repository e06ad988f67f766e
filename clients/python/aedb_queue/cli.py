"""Run an App from the command line: ``python -m aedb_queue worker module:app``,
or the installed script ``aedb-queue-worker module:app`` (named apart from the
operator CLI ``aedb-queue``, which it would otherwise shadow on PATH)."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import sys

from .app import App
from .connections import StartupError


def load_app(target: str) -> App:
    """The App named by ``module:attribute`` (``module`` alone means ``module:app``)."""
    module_name, _, attr = target.partition(":")
    if not module_name:
        raise ValueError(f"app: expected module:attribute, got {target!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
    obj = module
    for part in (attr or "app").split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"app: module {module_name!r} has no attribute {attr or 'app'!r}") from None
    if not isinstance(obj, App):
        raise TypeError(f"app: {target!r} is a {type(obj).__name__}, not an aedb_queue.App")
    return obj


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


# Seconds, as interval input reads a bare number: digits with at most one point.
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)")


def _duration(text: str) -> float | str:
    """A plain number is seconds, read here; any other text (``'90 seconds'``,
    ``'1h30m'``) goes as it is to the App, whose runtime has PostgreSQL's
    interval input read it on its first connection (a bad one is a startup
    error, exit 1)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a duration such as '90 seconds', '1m' or a number of seconds")
    if not _PLAIN_NUMBER.fullmatch(text.strip()):
        return text
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def _worker_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("app", help="the App to run, as module:attribute (module alone: module:app)")
    parser.add_argument("--concurrency", type=_positive_int, help="handlers per queue running at once (overrides each task's)")
    parser.add_argument("--queues", help="comma-separated queues to work (default: every registered queue)")
    parser.add_argument("--shutdown-timeout", type=_duration, metavar="DURATION",
                        help="how long running handlers get to finish after SIGTERM: seconds, or a duration "
                             "as in SQL ('90 seconds', '2 minutes') that PostgreSQL reads at start")
    parser.add_argument("--log-level", default=os.environ.get("AEDB_QUEUE_LOG_LEVEL", "INFO"),
                        help="logging level (default INFO, or $AEDB_QUEUE_LOG_LEVEL)")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m aedb_queue", description="aedb_queue worker runtime")
    commands = top.add_subparsers(dest="command", required=True)
    worker = commands.add_parser("worker", help="run the handlers of an App until SIGTERM/SIGINT")
    _worker_options(worker)
    return top


def worker_parser() -> argparse.ArgumentParser:
    worker = argparse.ArgumentParser(prog="aedb-queue-worker",
                                     description="run the handlers of an aedb_queue App until SIGTERM/SIGINT")
    _worker_options(worker)
    return worker


def main(argv: list[str] | None = None) -> int:
    """``python -m aedb_queue worker module:app ...``"""
    return run(parser().parse_args(argv))


def worker_main(argv: list[str] | None = None) -> int:
    """``aedb-queue-worker module:app ...`` (the installed script)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) >= 2 and argv[0] == "worker" and not argv[1].startswith("-"):
        # The old script's usage (`aedb-queue worker module:app`): say what changed.
        print(f"aedb-queue-worker: takes the app directly: aedb-queue-worker {argv[1]} "
              "(the `worker` word belongs to `python -m aedb_queue worker`)", file=sys.stderr)
        return 2
    return run(worker_parser().parse_args(argv))


def run(options: argparse.Namespace) -> int:
    logging.basicConfig(
        level=options.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s",
    )
    queues = [q.strip() for q in options.queues.split(",") if q.strip()] if options.queues else None
    try:
        app = load_app(options.app)
        app.select(queues, options.concurrency)  # refuse unknown queues before connecting
    except (ImportError, ValueError, TypeError) as exc:
        print(f"aedb_queue worker: {exc}", file=sys.stderr)
        return 2
    try:
        app.run(queues=queues, concurrency=options.concurrency,
                shutdown_timeout=options.shutdown_timeout, handle_signals=True)
    except StartupError as exc:  # the first connection failed: nothing to retry into
        print(f"aedb_queue worker: {exc}", file=sys.stderr)
        return 1
    return 0
