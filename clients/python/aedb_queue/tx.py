"""Transactional handlers: the handler's writes and the completion commit together.

The handler gets a connection inside an open transaction. When it returns,
``queue_complete(..., strict => true)`` (or, while the queue is busy,
``queue_complete_and_claim(..., strict => true)``) runs in that same
transaction, and the commit makes both durable, or neither. If the lease
was lost, the completion raises SQLSTATE 40002: the transaction rolls back,
the writes with it, and the task is dropped (another worker owns it). A
handler that raises rolls its writes back and fails the task as any handler
does. Asynchronous handlers get a psycopg ``AsyncConnection`` from the
runtime's pool; synchronous ones a ``Connection`` kept by their worker
thread.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import errors as pg_errors

from . import sql
from .connections import Backoff, connect_kwargs, is_transient
from .runner import Job, QueueRunner, Row, Settle, error_text, fetchall, fetchval, next_row
from .task import DeadLetter, Retry

if TYPE_CHECKING:
    from .runtime import Runtime

log = logging.getLogger("aedb_queue")

# How often a connection that fails before the handler started is replaced
# and the transaction begun again (idle connections die with a restart).
START_ATTEMPTS = 5


@dataclasses.dataclass
class Outcome:
    kind: str  # "done", "lost", "unknown", "failed", "not_started"
    row: Row | None = None
    chained: bool = False
    settle: Settle | None = None
    error: BaseException | None = None


async def run_transactional(runner: QueueRunner, job: Job) -> Row | None:
    beats = runner.start_heartbeats(job)
    try:
        if runner.spec.is_async:
            out = await _run_async(runner, job, beats.cancel)
        else:
            out = await runner.rt.threads.submit(_run_sync, runner, job, beats.cancel)
    finally:
        beats.cancel()
    return await _finish(runner, job, out)


async def _finish(runner: QueueRunner, job: Job, out: Outcome) -> Row | None:
    if job.abandoned:
        return None
    if out.kind == "done":
        await runner.log_outcome(job, "applied", Settle(True))
        if out.chained and out.row is None:
            runner.busy = False
        return out.row
    if out.kind == "lost":
        log.warning("%r: lease lost at commit (40002); the handler's writes were rolled back "
                    "(another worker owns the task now)", job)
        return None
    if out.kind == "unknown":
        log.error("%r: connection lost at commit (%s): the writes and the completion committed "
                  "together or not at all; if not, the lease expires and the task runs again",
                  job, _why(out))
        return None
    if out.kind == "not_started":
        log.warning("%r: no connection for the handler (%s); handing it back", job, _why(out))
        await runner.rt.hand_back(job)
        return None
    assert out.settle is not None
    return await runner.settle(job, out.settle)


def _why(out: Outcome) -> str:
    return "no reason given" if out.error is None else error_text(out.error)


def _failure(job: Job, exc: BaseException) -> Outcome:
    # The failure itself is logged when it settles; here the traceback.
    if not isinstance(exc, (Retry, DeadLetter)):
        log.info("%r raised (writes rolled back)", job, exc_info=exc)
    return Outcome("failed", settle=Settle.failure(exc))


def _completion_params(runner: QueueRunner, job: Job, settle: Settle, chain: bool) -> tuple[str, dict[str, Any]]:
    params: dict[str, Any] = {**job.key(), **settle.params(), "strict": True}
    if chain:
        params.update(owner_id=runner.rt.owner_id, lease=timedelta(seconds=runner.spec.lease), max=1)
        return sql.COMPLETE_AND_CLAIM, params
    return sql.COMPLETE, params


class _Failed(Exception):
    """Leaves the transaction block (rolling back) with the outcome to report."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome


# -- async handlers -----------------------------------------------------------


async def _run_async(runner: QueueRunner, job: Job, stop_beats: Callable[[], object]) -> Outcome:
    rt, spec = runner.rt, runner.spec
    backoff = Backoff()
    for attempt in range(START_ATTEMPTS):
        started = False
        try:
            conn = await rt.pool.acquire()
        except psycopg.Error as exc:
            if attempt + 1 == START_ATTEMPTS or not is_transient(exc):
                return Outcome("not_started", error=exc)
            await rt.sleep_unless_stopping(backoff.next())
            continue
        discard = True
        pending: Outcome | None = None
        try:
            async with conn.transaction():
                started = True
                try:
                    value = await spec.handler(job.task, conn)
                except Exception as exc:
                    pending = _failure(job, exc)
                    raise _Failed(pending) from None
                settle = Settle.completion(value)
                if not settle.complete:
                    raise _Failed(Outcome("failed", settle=settle))
                stop_beats()
                job.phase = "settle"
                chain = runner.chaining
                query, params = _completion_params(runner, job, settle, chain)
                if chain:
                    _, row = next_row(await fetchall(conn, query, params))
                else:
                    await fetchval(conn, query, params, str)
                    row = None
            discard = False
            return Outcome("done", row=row, chained=chain)
        except _Failed as failed:
            discard = conn.broken
            return failed.outcome
        except pg_errors.TransactionIntegrityConstraintViolation:
            discard = False
            return Outcome("lost")
        except psycopg.Error as exc:
            if pending is not None:  # the handler failed, then the rollback did too
                return pending
            if is_transient(exc, conn):
                rt.pool.drop_idle()
                if not started and attempt + 1 < START_ATTEMPTS:
                    continue  # the connection died before we began: take a new one
                if not started:
                    return Outcome("not_started", error=exc)
                return Outcome("unknown", error=exc)
            discard = False
            return Outcome("failed", settle=Settle(False, error=f"completion refused: {error_text(exc)}"))
        finally:
            rt.pool.release(conn, discard=discard)
    raise AssertionError("unreachable")


# -- sync handlers (run in a worker thread) -----------------------------------

_local = threading.local()


def thread_connection(rt: "Runtime") -> psycopg.Connection:
    conn: psycopg.Connection | None = getattr(_local, "conn", None)
    if conn is not None and not (conn.closed or conn.broken):
        return conn
    conn = psycopg.Connection.connect(
        rt.conninfo, autocommit=True,
        **connect_kwargs(rt.conninfo, rt.application_name, rt.transaction_pooler)
    )
    _local.conn = conn
    return conn


def drop_thread_connection() -> None:
    """Close this thread's connection, if any (also as the worker thread ends)."""
    conn = getattr(_local, "conn", None)
    _local.conn = None
    if conn is not None:
        try:
            conn.close()
        except Exception:
            pass


def _run_sync(runner: QueueRunner, job: Job, stop_beats: Callable[[], object]) -> Outcome:
    rt, spec = runner.rt, runner.spec
    loop = rt.loop
    assert loop is not None  # the runtime runs: a handler thread works for it
    backoff = Backoff()
    for attempt in range(START_ATTEMPTS):
        started = False
        try:
            conn = thread_connection(rt)
        except psycopg.Error as exc:
            if attempt + 1 == START_ATTEMPTS or not is_transient(exc) or rt.stopping:
                return Outcome("not_started", error=exc)
            time.sleep(backoff.next())
            continue
        pending: Outcome | None = None
        try:
            with conn.transaction():
                started = True
                try:
                    value = spec.handler(job.task, conn)
                except Exception as exc:
                    pending = _failure(job, exc)
                    raise _Failed(pending) from None
                settle = Settle.completion(value)
                if not settle.complete:
                    raise _Failed(Outcome("failed", settle=settle))
                loop.call_soon_threadsafe(stop_beats)
                if job.abandoned:
                    raise _Failed(Outcome("failed", settle=Settle(False, error="handed back")))
                job.phase = "settle"
                chain = runner.chaining
                query, params = _completion_params(runner, job, settle, chain)
                if chain:
                    _, row = next_row(conn.execute(query, params).fetchall())
                else:
                    conn.execute(query, params).fetchone()
                    row = None
            return Outcome("done", row=row, chained=chain)
        except _Failed as failed:
            if conn.broken:
                drop_thread_connection()
            return failed.outcome
        except pg_errors.TransactionIntegrityConstraintViolation:
            return Outcome("lost")
        except psycopg.Error as exc:
            if pending is not None:
                drop_thread_connection()
                return pending
            if is_transient(exc, conn):
                drop_thread_connection()
                if not started and attempt + 1 < START_ATTEMPTS:
                    continue
                return Outcome("not_started" if not started else "unknown", error=exc)
            return Outcome("failed", settle=Settle(False, error=f"completion refused: {error_text(exc)}"))
    raise AssertionError("unreachable")
