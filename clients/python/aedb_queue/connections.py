"""Connections for the runtime: a small async pool, what counts as a lost
connection, the backoff between reconnection attempts, and how a
connection string is shown in logs (never its password)."""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import random
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict

log = logging.getLogger("aedb_queue")

# SQLSTATEs after which the same call may simply be tried again: the
# connection is gone (class 08, admin/crash shutdown, the server is
# starting), too many connections, or a serialization failure/deadlock.
_TRANSIENT = {"57P01", "57P02", "57P03", "53300", "40001", "40P01"}


def is_transient(exc: BaseException, conn: Any = None) -> bool:
    """Whether ``exc`` means "reconnect and try again" rather than "this call is wrong"."""
    if conn is not None and (conn.closed or conn.broken):
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _TRANSIENT


class StartupError(RuntimeError):
    """The worker's first connection could not be made (wrong host, port,
    password or database, or no aedb_queue extension there): a wrong
    configuration, reported at once instead of retried forever."""


# What a log line shows of a connection string, and the libpq variables
# that stand in for what it leaves out.
_SHOWN = (("host", "PGHOST"), ("port", "PGPORT"), ("dbname", "PGDATABASE"), ("user", "PGUSER"))


def describe(conninfo: str) -> str:
    """``host=... port=... dbname=... user=...`` of ``conninfo``, without its password."""
    try:
        given = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "(unparsable connection string)"
    shown = []
    for key, env in _SHOWN:
        value = given.get(key) or os.environ.get(env)
        if value:
            shown.append(f"{key}={value}")
    return " ".join(shown) or "(libpq defaults)"


class Backoff:
    """Exponential delays with jitter: 0.1 s, 0.2 s, ... up to ``cap``."""

    def __init__(self, initial: float = 0.1, cap: float = 5.0) -> None:
        self.initial, self.cap, self._next = initial, cap, initial

    def next(self) -> float:
        delay = self._next
        self._next = min(self.cap, self._next * 2)
        return delay * random.uniform(0.75, 1.25)

    def reset(self) -> None:
        self._next = self.initial


def connect_kwargs(conninfo: str, application_name: str, transaction_pooler: bool = False) -> dict[str, Any]:
    """Defaults for our connections that the caller's conninfo may override.

    Behind a pooler in transaction mode nothing is prepared server-side
    (psycopg prepares a statement run 5 times on a connection, and the next
    transaction may run on a server connection that never saw it).
    """
    given = conninfo_to_dict(conninfo)
    extra: dict[str, Any] = {"prepare_threshold": None} if transaction_pooler else {}
    if "application_name" not in given:
        extra["application_name"] = application_name
    if "connect_timeout" not in given:
        extra["connect_timeout"] = 10
    return extra


class PoolClosed(RuntimeError):
    pass


class Pool:
    """At most ``size`` autocommit AsyncConnections, made on demand, dropped when broken."""

    def __init__(self, conninfo: str, size: int, application_name: str, transaction_pooler: bool = False) -> None:
        self._conninfo = conninfo
        self._kwargs = connect_kwargs(conninfo, application_name, transaction_pooler)
        self._size = size
        self._idle: list[psycopg.AsyncConnection] = []
        self._count = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    async def connect(self) -> psycopg.AsyncConnection:
        return await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True, **self._kwargs)

    async def acquire(self) -> psycopg.AsyncConnection:
        while True:
            if self._closed:
                raise PoolClosed("the runtime's connection pool is closed")
            while self._idle:
                conn = self._idle.pop()
                if not (conn.closed or conn.broken):
                    return conn
                self._count -= 1
            if self._count < self._size:
                self._count += 1
                try:
                    return await self.connect()
                except BaseException:
                    self._count -= 1
                    self._wake_one()
                    raise
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if not waiter.cancelled() and waiter.done():
                    self._wake_one()  # we were handed the turn: pass it on
                raise

    def release(self, conn: psycopg.AsyncConnection, *, discard: bool = False) -> None:
        clean = conn.info.transaction_status == pq.TransactionStatus.IDLE
        if discard or self._closed or conn.closed or conn.broken or not clean:
            self._count -= 1
            task = asyncio.ensure_future(self._close(conn))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        else:
            self._idle.append(conn)
        self._wake_one()

    def drop_idle(self) -> None:
        """Close every idle connection: after one was found dead, the others likely are."""
        idle, self._idle = self._idle, []
        for conn in idle:
            self._count -= 1
            task = asyncio.ensure_future(self._close(conn))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        for _ in idle:
            self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    @staticmethod
    async def _close(conn: psycopg.AsyncConnection) -> None:
        try:
            await conn.close()
        except Exception:  # closing a broken connection: nothing left to do
            pass

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await self._close(conn)
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
