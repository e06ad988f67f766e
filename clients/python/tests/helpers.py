"""Test helpers: bounded waits, an App in a thread, worker processes, queue state."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from aedb_queue import App

HERE = pathlib.Path(__file__).resolve().parent


def tag(queue: str) -> str:
    """A short name for a test's connections (application_name keeps 63 bytes)."""
    return "t" + queue.rsplit("_", 1)[-1]


def wait_until(predicate: Callable[[], Any], timeout: float, message: str, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s: {message} (last: {value!r})")
        time.sleep(interval)


@contextlib.contextmanager
def running(app: App, *, stop_timeout: float = 30.0, **run_kwargs: Any) -> Iterator[threading.Thread]:
    """Run ``app`` in a thread for the ``with`` block, then stop it and wait (bounded)."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            app.run(handle_signals=False, **run_kwargs)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    thread = threading.Thread(target=target, name=f"app-{app.owner_id}", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        app.stop()
        thread.join(stop_timeout)
        if thread.is_alive():
            raise AssertionError(f"the App did not stop within {stop_timeout} s")
        if errors:
            raise errors[0]


class Worker:
    """``python -m aedb_queue worker TARGET`` in a process of its own, output in a file."""

    def __init__(self, target: str, dsn: str, log_dir: pathlib.Path, *args: str, env: dict | None = None) -> None:
        self.log_path = log_dir / f"worker-{target.replace(':', '-')}-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "w")
        full_env = {**os.environ, "AEDB_TEST_DSN": dsn, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "aedb_queue", "worker", target, *args],
            cwd=HERE, env=full_env, stdout=self._log, stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker still running after {timeout} s; output:\n{self.output()}") from None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


@contextlib.contextmanager
def worker(target: str, dsn: str, log_dir: pathlib.Path, *args: str, env: dict | None = None) -> Iterator[Worker]:
    w = Worker(target, dsn, log_dir, *args, env=env)
    try:
        yield w
    finally:
        w.close()


def stop_worker(w: Worker, timeout: float = 30.0) -> int:
    w.signal(signal.SIGTERM)
    return w.wait(timeout)


# -- queue state (superuser reads, for assertions) -----------------------------


def states(su, queue: str) -> dict[str, int]:
    rows = su.execute(
        "SELECT state::text, count(*) FROM aedb_queue.task WHERE queue = %s GROUP BY 1", (queue,)
    ).fetchall()
    out = dict(rows)
    done = su.execute("SELECT count(*) FROM aedb_queue.completed_task WHERE queue = %s", (queue,)).fetchone()[0]
    if done:
        out["completed"] = done
    return out


def live(su, queue: str) -> int:
    return su.execute("SELECT count(*) FROM aedb_queue.task WHERE queue = %s", (queue,)).fetchone()[0]


def task_row(su, task_id: int) -> dict | None:
    cur = su.execute(
        "SELECT state::text AS state, attempts, progress, last_error, owner_id, fencing_token "
        "FROM aedb_queue.task WHERE task_id = %s", (task_id,))
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip([d.name for d in cur.description], row))


def completed(su, task_id: int) -> dict | None:
    cur = su.execute("SELECT attempts, result, owner_id, progress FROM aedb_queue.completed_task "
                     "WHERE task_id = %s", (task_id,))
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip([d.name for d in cur.description], row))


def configure(admin, queue: str, **settings: Any) -> None:
    """``queue_configure`` as the admin role; names are fixed here, values bound."""
    allowed = {"notify": "boolean", "keep_completed": "interval", "max_attempts": "int",
               "backoff_base": "interval", "backoff_max": "interval", "default_lease": "interval"}
    parts, values = [], []
    for name, value in settings.items():
        parts.append(f"{name} => %s::{allowed[name]}")
        values.append(value)
    admin.execute(f"SELECT aedb_queue.queue_configure(%s, {', '.join(parts)})", (queue, *values))
