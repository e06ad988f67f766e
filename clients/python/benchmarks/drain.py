"""Drain an already-loaded queue through the runtime with no-op handlers.

    python benchmarks/drain.py --dsn "host=127.0.0.1 dbname=app user=app_worker" \
        --queue bench --handlers 8 [--max-seconds 120] [--sync] [--lease 30]

Prints one JSON line: {"jobs": N, "seconds": S, "jobs_per_s": R}. It stops
when the queue has no ready task and no handler is running, or after
--max-seconds. N counts handler calls; S runs from the start of the worker
(connections included) to the end of the last handler call.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time

import psycopg

from aedb_queue import App

READY = "SELECT count(*) FROM aedb_queue.queue_list(%s, 'ready', 1)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True, help="a role in aedb_queue_worker")
    parser.add_argument("--queue", required=True)
    parser.add_argument("--handlers", type=int, default=8, help="handlers running at once (default 8)")
    parser.add_argument("--max-seconds", type=float, default=120.0)
    parser.add_argument("--sync", action="store_true", help="plain-function handlers (threads) instead of async")
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--log-level", default="WARNING")
    options = parser.parse_args(argv)
    if options.handlers < 1:
        parser.error("--handlers: at least 1")
    logging.basicConfig(level=options.log_level.upper(), stream=sys.stderr)

    lock = threading.Lock()
    state = {"jobs": 0, "running": 0, "last": None}

    def begin() -> None:
        with lock:
            state["running"] += 1

    def end() -> None:
        with lock:
            state["running"] -= 1
            state["jobs"] += 1
            state["last"] = time.monotonic()

    app = App(options.dsn, application_name="aedb_queue drain benchmark", shutdown_timeout=10)
    register = app.task(options.queue, concurrency=options.handlers, lease=options.lease, poll_interval=0.5)
    if options.sync:

        @register
        def noop(task):
            begin()
            end()
    else:

        @register
        async def noop(task):
            begin()
            end()

    started = time.monotonic()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            app.run(handle_signals=False)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    with psycopg.connect(options.dsn, autocommit=True) as conn:
        empty_checks = 0
        while time.monotonic() - started < options.max_seconds and thread.is_alive():
            time.sleep(0.1)
            ready = conn.execute(READY, (options.queue,)).fetchone()[0]
            with lock:
                idle = state["running"] == 0
            empty_checks = empty_checks + 1 if (ready == 0 and idle) else 0
            if empty_checks >= 3:
                break
    app.stop()
    thread.join(30)
    if errors:
        print(f"drain: the worker failed: {errors[0]}", file=sys.stderr)
        return 1
    end_time = state["last"] or time.monotonic()
    seconds = max(end_time - started, 1e-9)
    print(json.dumps({"jobs": state["jobs"], "seconds": round(seconds, 3),
                      "jobs_per_s": round(state["jobs"] / seconds, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
