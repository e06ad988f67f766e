"""Worker threads for synchronous handlers.

Daemon threads, unlike ``concurrent.futures.ThreadPoolExecutor``'s, do not
hold the process at exit: a handler still running when shutdown hands its
task back must not keep a stopped worker alive. Threads are made on demand
(as many as handlers run at once) and reused.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# A call for a worker thread: the future of its result, the function, its arguments.
_Work = tuple["concurrent.futures.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class HandlerExit(RuntimeError):
    """A synchronous handler raised SystemExit or KeyboardInterrupt."""


class Threads:
    def __init__(self, name: str = "aedb-queue-handler", on_exit: Callable[[], None] | None = None) -> None:
        self._name = name
        self._on_exit = on_exit
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._free = 0
        self._started = 0
        self._closed = False

    def submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Run ``fn(*args)`` in a worker thread; an asyncio future of its result."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the handler threads are shut down")
            if self._free > 0:
                self._free -= 1
            else:
                self._started += 1
                threading.Thread(
                    target=self._worker, name=f"{self._name}-{self._started}", daemon=True
                ).start()
        self._work.put((future, fn, args))
        return asyncio.wrap_future(future)

    def _worker(self) -> None:
        try:
            self._serve()
        finally:
            if self._on_exit is not None:
                self._on_exit()

    def _serve(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            future, fn, args = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except Exception as exc:
                    future.set_exception(exc)
                except BaseException as exc:  # SystemExit, KeyboardInterrupt in a handler
                    future.set_exception(HandlerExit(f"{type(exc).__name__}: {exc}"))
            del item, future, fn, args
            with self._lock:
                if self._closed:
                    return
                self._free += 1

    def close(self) -> None:
        """Let idle threads end; busy ones end after their current call."""
        with self._lock:
            self._closed = True
            idle = self._free
            self._free = 0
        for _ in range(idle):
            self._work.put(None)
