"""``App``: register handlers with ``@app.task(queue)``, then ``app.run()``."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from . import args as _args
from .runtime import Runtime
from .spec import TaskSpec

log = logging.getLogger("aedb_queue")

F = TypeVar("F", bound=Callable[..., Any])


def default_owner_id() -> str:
    return f"{socket.gethostname()[:80]}:{os.getpid()}:{secrets.token_hex(3)}"


class App:
    """A worker: handlers by queue, and the connection string they run with.

    ``conninfo`` is a libpq connection string or URI for a role that is a
    member of ``aedb_queue_worker`` (and of ``aedb_queue_producer`` for
    handlers that return follow-ups).

    Behind a pooler in transaction mode (PgBouncer's ``pool_mode =
    transaction``) pass ``transaction_pooler=True``: no statement is prepared
    server-side; LISTEN then needs ``listen_conninfo``, a direct connection
    (or ``listen=False``). See docs/pgbouncer.md.

    Durations (``shutdown_timeout`` here, ``lease``, ``poll_interval`` and
    ``heartbeat_interval`` of :meth:`task`) are seconds (int or float),
    timedeltas, or text written as in SQL (``"30 seconds"``, ``"1h30m"``,
    ``"500ms"``, ``"PT1M"``). PostgreSQL's interval input reads a text on the
    worker's first connection at start: one it refuses, or one out of its
    option's range, is a :class:`StartupError` naming the option and the text.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        owner_id: str | None = None,
        shutdown_timeout: _args.Duration = 30.0,
        listen: bool = True,
        application_name: str = "aedb_queue worker",
        transaction_pooler: bool = False,
        listen_conninfo: str | None = None,
    ) -> None:
        if not isinstance(conninfo, str):
            raise TypeError(f"conninfo: expected a str, got {type(conninfo).__name__}")
        self.conninfo = conninfo
        self.owner_id = _args.queue_name(owner_id, "owner_id") if owner_id is not None else default_owner_id()
        self.shutdown_timeout = _args.seconds_or_text(shutdown_timeout, "shutdown_timeout", positive=False)
        self.listen = bool(listen)
        self.application_name = application_name
        self.transaction_pooler = bool(transaction_pooler)
        if listen_conninfo is not None and not isinstance(listen_conninfo, str):
            raise TypeError(f"listen_conninfo: expected a str, got {type(listen_conninfo).__name__}")
        if self.transaction_pooler and self.listen and listen_conninfo is None:
            raise ValueError("listen_conninfo: behind a transaction pooler LISTEN needs a direct "
                             "connection (or listen=False)")
        self.listen_conninfo = listen_conninfo
        self.tasks: dict[str, TaskSpec] = {}
        self._runtime: Runtime | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._stop_early = False

    def task(
        self,
        queue: str,
        *,
        concurrency: int = 4,
        lease: _args.Duration = 30.0,
        batch_size: int | None = None,
        poll_interval: _args.Duration = 5.0,
        heartbeat_interval: _args.Duration | None = None,
        transactional: bool = False,
        payload_type: Any = None,
    ) -> Callable[[F], F]:
        """Register the decorated function as the handler of ``queue``.

        - ``concurrency``: handlers of this queue running at once in this worker.
        - ``lease``: how long each claim holds a task (at least 1 second); heartbeats
          renew it every ``heartbeat_interval`` (default: a third of the lease) while
          the handler runs.
        - ``batch_size``: most tasks one claim asks for (default: ``concurrency``;
          a claim never asks for more than the free slots).
        - ``poll_interval``: time between claims of an idle queue when no
          notification comes (turn them on with ``queue_configure(queue, notify => true)``).
        - Durations are seconds, timedeltas or text as in SQL (``lease="2 minutes"``),
          a text read by PostgreSQL when the worker starts (see :class:`App`).
        - ``transactional``: the handler is called as ``handler(task, conn)`` inside a
          transaction that commits its writes with the completion, or neither.
        - ``payload_type``: decode the payload as this dataclass / pydantic model
          (also read from a first parameter annotated ``Task[X]``).

        ``async def`` handlers run on the event loop; plain functions in worker threads.
        """
        _args.queue_name(queue)
        if queue in self.tasks:
            raise ValueError(f"queue: {queue!r} already has a handler")

        def register(handler: F) -> F:
            self.tasks[queue] = TaskSpec.build(
                queue, handler,
                concurrency=concurrency, lease=lease, batch_size=batch_size,
                poll_interval=poll_interval, heartbeat_interval=heartbeat_interval,
                transactional=transactional, payload_type=payload_type,
            )
            return handler

        return register

    # -- running -----------------------------------------------------------------

    def select(self, queues: Iterable[str] | None = None, concurrency: int | None = None) -> list[TaskSpec]:
        """The task specs a run with these options would use (ValueError/TypeError if wrong)."""
        if not self.tasks:
            raise ValueError("this App has no handlers: register one with @app.task(queue)")
        specs = list(self.tasks.values())
        if queues is not None:
            if isinstance(queues, str):
                raise TypeError("queues: expected a list of queue names, got a str")
            wanted = list(queues)
            unknown = [q for q in wanted if q not in self.tasks]
            if unknown:
                raise ValueError(f"queues: no handler for {', '.join(map(repr, unknown))}")
            specs = [self.tasks[q] for q in wanted]
        if concurrency is not None:
            _args.integer(concurrency, "concurrency", minimum=1, optional=False)
            specs = [s.with_concurrency(concurrency) for s in specs]
        return specs

    async def run_async(
        self,
        *,
        queues: Iterable[str] | None = None,
        concurrency: int | None = None,
        shutdown_timeout: _args.Duration | None = None,
        handle_signals: bool = False,
    ) -> None:
        """Run until :meth:`stop` (or SIGTERM/SIGINT with ``handle_signals``), then shut down gracefully."""
        specs = self.select(queues, concurrency)
        timeout = self.shutdown_timeout if shutdown_timeout is None else _args.seconds_or_text(
            shutdown_timeout, "shutdown_timeout", positive=False)
        runtime = Runtime(
            self.conninfo, specs, owner_id=self.owner_id, shutdown_timeout=timeout,
            listen=self.listen, application_name=self.application_name,
            transaction_pooler=self.transaction_pooler, listen_conninfo=self.listen_conninfo,
        )
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._runtime is not None:
                raise RuntimeError("this App is already running")
            self._runtime, self._loop = runtime, loop
            if self._stop_early:
                runtime.request_stop()
        installed: list[signal.Signals] = []
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, self._on_signal, sig)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError, ValueError):
                    log.warning("cannot handle %s here", signal.Signals(sig).name)
        try:
            await runtime.run()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            with self._lock:
                self._runtime = self._loop = None
                self._stop_early = False

    def run(
        self,
        *,
        queues: Iterable[str] | None = None,
        concurrency: int | None = None,
        shutdown_timeout: _args.Duration | None = None,
        handle_signals: bool = True,
    ) -> None:
        """Run the worker in this thread until SIGTERM/SIGINT or :meth:`stop`.

        Signal handlers can only be installed in the main thread: pass
        ``handle_signals=False`` to run elsewhere.
        """
        asyncio.run(self.run_async(queues=queues, concurrency=concurrency,
                                   shutdown_timeout=shutdown_timeout, handle_signals=handle_signals))

    def _on_signal(self, sig: int) -> None:
        runtime = self._runtime
        if runtime is None:
            return
        if runtime.stopping:
            log.info("%s again: handing back running tasks now", signal.Signals(sig).name)
            runtime.request_stop(force=True)
        else:
            log.info("%s: shutting down (again to hand running tasks back at once)", signal.Signals(sig).name)
            runtime.request_stop()

    def stop(self, *, force: bool = False) -> None:
        """Ask a running worker to shut down; safe from any thread.

        Claims stop; running handlers get the shutdown timeout to finish
        (``force``: none), then their tasks are handed back.
        """
        with self._lock:
            runtime, loop = self._runtime, self._loop
            if runtime is None or loop is None:
                self._stop_early = True  # run() has not started yet
                return
        loop.call_soon_threadsafe(lambda: runtime.request_stop(force=force))
