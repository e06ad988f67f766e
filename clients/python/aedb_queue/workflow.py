"""Durable workflows: the steps, sleeps and event waits of one claimed task.

A :class:`Workflow` belongs to one claim (a :class:`~aedb_queue.runner.Job`).
It reads the task's recorded steps once (``queue_steps``), on the first
workflow call of the handler, and keeps them: a recorded step returns its
result without a round trip. A step that runs is recorded under the
claim's fencing token (``queue_step_record``); a step run with
``transactional=True`` runs its function on a connection inside a
transaction and records with ``strict => true`` in that same transaction,
so its writes and its record commit together or not at all.

Children: a spawn is a transactional step that enqueues the children
(with the producer functions), links them to the task (``queue_await_tasks``
with ``park => false``, so a child that completes at once is kept with its
result) and records their ids as the step, all in one transaction: a
crash leaves either all of it or none, so a rerun never spawns twice. A
wait for tasks (``queue_await_tasks``) parks the task until the last of them
ends, then records one entry per task as its step.

A sleep, an event wait or a wait for tasks that parks the task (``waiting``) ends the handler
at once with :class:`~aedb_queue.task.Parked`; a step, sleep or wait whose
fence failed ends it with :class:`~aedb_queue.task.LeaseLost`. Either way
the runtime settles nothing: the task is parked (scheduled, its attempt not
counted) or another worker's.

Every method here is a coroutine on the runtime's loop; the synchronous
``Task`` runs them from its handler thread with :meth:`Workflow.blocking`,
except the transactional step, which runs on the thread's own connection.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import errors as pg_errors

from . import sql
from .payloads import dumps, to_jsonb
from .producer import aenqueue, aenqueue_batch, enqueue, enqueue_batch
from .task import Child, ChildResult, Event, LeaseLost, Parked, child_results, spawned
from .tx import drop_thread_connection, thread_connection

if TYPE_CHECKING:
    from .runner import Job, QueueRunner

log = logging.getLogger("aedb_queue")

T = TypeVar("T")


def _json(value: Any, arg: str) -> Any:
    """``value`` as the JSON it is recorded as: what a replay returns."""
    return None if value is None else json.loads(dumps(value, arg))


class Workflow:
    """The workflow calls of one claim of a task."""

    def __init__(self, runner: "QueueRunner", job: "Job") -> None:
        self.runner = runner
        self.rt = runner.rt
        self.job = job
        self.steps: dict[str, Any] | None = None  # step -> recorded result, once read
        self._loaded_with: set[str] = set()  # the steps recorded before this claim's first call
        self._resumed: set[str] = set()  # the sleeps this claim logged as over

    def __repr__(self) -> str:
        return repr(self.job)

    # -- helpers -----------------------------------------------------------------

    def blocking(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the runtime's loop from a handler thread and wait for it."""
        loop = self.rt.loop
        assert loop is not None
        try:
            future = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:  # the loop is gone: the runtime stopped
            coro.close()
            raise LeaseLost("the worker stopped") from None
        return future.result()

    def _params(self, **extra: Any) -> dict[str, Any]:
        return {**self.job.key(), **extra}

    def _lost(self, what: str) -> LeaseLost:
        self.job.workflow_exit = "lease_lost"
        task = self.job.task
        if task is not None:
            task.lease_lost = True
        log.warning("%r: lease lost (%s not recorded); the handler stops and settles nothing "
                    "(another worker owns the task now)", self.job, what)
        return LeaseLost(f"lease lost: {what} not recorded")

    async def _fetch(self, query: str, params: dict[str, Any], what: str) -> list[tuple[Any, ...]]:
        async def op(conn: psycopg.AsyncConnection[Any]) -> list[tuple[Any, ...]]:
            async with conn.cursor() as cur:
                await cur.execute(query, params)
                return await cur.fetchall()

        return await self.rt.run_db(op, what=f"{what} of {self.job!r}")

    # -- the recorded steps ----------------------------------------------------------

    async def load(self) -> dict[str, Any]:
        """The task's recorded steps, read once per claim."""
        if self.steps is None:
            rows = await self._fetch(sql.STEPS, {"queue": self.job.spec.queue, "task_id": self.job.task_id},
                                     "read the steps")
            self.steps = {step: result for step, result in rows}
            self._loaded_with = set(self.steps)
        return self.steps

    def _keep(self, name: str, value: Any) -> Any:
        assert self.steps is not None
        self.steps[name] = value
        return value

    async def record(self, name: str, value: Any) -> Any:
        """Record a step that ran; its result as recorded (JSON), which a replay returns too."""
        result = _json(value, f"step {name!r}")
        params = self._params(step=name, result=to_jsonb(result, f"step {name!r}"), strict=False)
        try:
            rows = await self._fetch(sql.STEP_RECORD, params, f"record step {name!r}")
        except pg_errors.UniqueViolation:
            # Recorded already under this claim: a retry after the connection
            # was lost at commit. The first record stands.
            self.steps = None
            return (await self.load()).get(name)
        if rows[0][0] != "applied":
            raise self._lost(f"step {name!r}")
        return self._keep(name, result)

    # -- steps in a transaction (strict) -----------------------------------------------

    def _record_params(self, name: str, value: Any) -> tuple[Any, dict[str, Any]]:
        result = _json(value, f"step {name!r}")
        return result, self._params(step=name, result=to_jsonb(result, f"step {name!r}"), strict=True)

    async def step_in_transaction(self, name: str, fn: Callable[[psycopg.AsyncConnection[Any]], Any]) -> Any:
        """Run ``fn(conn)`` in a transaction that records the step strictly, then commits."""
        pool = self.rt.pool
        conn = await pool.acquire()
        discard = True
        try:
            async with conn.transaction():
                value = fn(conn)
                if inspect.isawaitable(value):
                    value = await value
                result, params = self._record_params(name, value)
                async with conn.cursor() as cur:
                    await cur.execute(sql.STEP_RECORD, params)
            discard = False
        except pg_errors.TransactionIntegrityConstraintViolation:  # 40002: the fence failed
            discard = False
            raise self._lost(f"step {name!r}") from None
        except Exception:  # fn raised (rolled back), or the server refused: keep a healthy connection
            discard = conn.closed or conn.broken
            raise
        finally:
            pool.release(conn, discard=discard)
        return self._keep(name, result)

    def step_in_transaction_sync(self, name: str, fn: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        """:meth:`step_in_transaction` in a handler thread, on the thread's own connection."""
        conn = thread_connection(self.rt)
        try:
            with conn.transaction():
                value = fn(conn)
                result, params = self._record_params(name, value)
                conn.execute(sql.STEP_RECORD, params).fetchone()
        except pg_errors.TransactionIntegrityConstraintViolation:
            raise self._lost(f"step {name!r}") from None
        except psycopg.Error:
            if conn.closed or conn.broken:
                drop_thread_connection()
            raise
        return self._keep(name, result)

    # -- sleeps and event waits --------------------------------------------------------

    def _park(self) -> None:
        """Set before a call that may park the task: heartbeats stop beating."""
        self.job.workflow_exit = "parking"

    def _parked(self, what: str) -> Parked:
        self.job.workflow_exit = "parked"
        log.info("%r parked: %s; its slot is free", self.job, what)
        return Parked(what)

    async def sleep(self, name: str, duration: timedelta | str | None, until: datetime | None) -> None:
        steps = await self.load()
        self._park()
        try:
            rows = await self._fetch(sql.SLEEP, self._params(step=name, duration=duration, until=until),
                                     f"sleep {name!r}")
        finally:
            if self.job.workflow_exit == "parking":
                self.job.workflow_exit = None
        outcome, waiting, wake_at = rows[0]
        if outcome != "applied":
            raise self._lost(f"sleep {name!r}")
        if waiting:
            raise self._parked(f"sleeping until {wake_at.isoformat()} (step {name!r})")
        if name in self._loaded_with and name not in self._resumed:
            self._resumed.add(name)
            log.info("%r resumed: slept until %s (step %r)", self.job, wake_at.isoformat(), name)
        steps.setdefault(name, {"until": wake_at.isoformat()})

    async def await_event(self, name: str, key: str, timeout: timedelta | str) -> Event:
        steps = await self.load()
        ended = _event(steps.get(name))
        if ended is not None:
            return ended
        self._park()
        try:
            rows = await self._fetch(sql.AWAIT_EVENT, self._params(step=name, key=key, timeout=timeout),
                                     f"wait for event {key!r}")
        finally:
            if self.job.workflow_exit == "parking":
                self.job.workflow_exit = None
        outcome, waiting, wake_at, payload, timed_out = rows[0]
        if outcome != "applied":
            raise self._lost(f"wait for event {key!r}")
        if waiting:
            raise self._parked(f"waiting for event {key!r} until {wake_at.isoformat()} (step {name!r})")
        if timed_out:
            log.info("%r resumed: the wait for event %r timed out (step %r)", self.job, key, name)
        else:
            log.info("%r resumed: event %r arrived (step %r)", self.job, key, name)
        event = Event(payload=payload, timed_out=bool(timed_out))
        steps[name] = {"payload": payload, "timed_out": event.timed_out}
        return event

    # -- children ----------------------------------------------------------------------

    def _link_params(self, name: str, ids: list[int]) -> dict[str, Any]:
        # park => false: link and report only; strict: a lost lease is 40002,
        # which rolls the enqueues back with it.
        return self._params(step=name, task_ids=ids, park=False, strict=True)

    async def spawn(self, name: str, children: Sequence[Child]) -> list[int]:
        """Enqueue ``children``, link them and record their ids as the step ``name``, in one transaction."""
        async def fn(conn: psycopg.AsyncConnection[Any]) -> list[int]:
            ids = await _aenqueue_children(conn, children)
            async with conn.cursor() as cur:
                await cur.execute(sql.AWAIT_TASKS, self._link_params(name, ids))
            return ids

        ids = spawned(name, await self.step_in_transaction(name, fn))
        log.info("%r spawned %d task(s) (step %r)", self.job, len(ids), name)
        return ids

    def spawn_sync(self, name: str, children: Sequence[Child]) -> list[int]:
        """:meth:`spawn` in a handler thread, on the thread's own connection."""
        def fn(conn: psycopg.Connection[Any]) -> list[int]:
            ids = _enqueue_children(conn, children)
            conn.execute(sql.AWAIT_TASKS, self._link_params(name, ids)).fetchone()
            return ids

        ids = spawned(name, self.step_in_transaction_sync(name, fn))
        log.info("%r spawned %d task(s) (step %r)", self.job, len(ids), name)
        return ids

    async def await_tasks(self, name: str, ids: list[int]) -> list[ChildResult]:
        """The results of the tasks ``ids`` (recorded as the step ``name``), parking until none is live."""
        steps = await self.load()
        if name in steps:
            return child_results(name, steps[name])
        self._park()
        try:
            rows = await self._fetch(sql.AWAIT_TASKS, self._params(step=name, task_ids=ids, park=True, strict=False),
                                     f"wait for tasks (step {name!r})")
        finally:
            if self.job.workflow_exit == "parking":
                self.job.workflow_exit = None
        outcome, waiting, recorded = rows[0]
        if outcome != "applied":
            raise self._lost(f"wait for tasks (step {name!r})")
        if waiting:
            raise self._parked(f"waiting for {len(ids)} task(s) (step {name!r})")
        results = child_results(name, recorded)
        counts = ", ".join(f"{n} {state}" for state in ("completed", "dead", "missing")
                           if (n := sum(r.state == state for r in results)))
        log.info("%r resumed: the %d task(s) it waited for ended: %s (step %r)",
                 self.job, len(results), counts or "none", name)
        steps[name] = recorded
        return results


# -- children, enqueued in runs ---------------------------------------------------------


def _runs(children: Sequence[Child]) -> list[tuple[Child, list[Any]]]:
    """Consecutive children of one queue with the same options (and no
    idempotency key) go in one ``enqueue_batch``: (the first child, the payloads)."""
    runs: list[tuple[Child, list[Any]]] = []
    for child in children:
        if runs:
            first, payloads = runs[-1]
            if (child.idempotency_key is None and first.idempotency_key is None and child.queue == first.queue
                    and child.options() == first.options()):
                payloads.append(child.payload)
                continue
        runs.append((child, [child.payload]))
    return runs


def _enqueue_children(conn: psycopg.Connection[Any], children: Sequence[Child]) -> list[int]:
    ids: list[int] = []
    for child, payloads in _runs(children):
        if len(payloads) == 1:
            ids.append(enqueue(conn, child.queue, child.payload, idempotency_key=child.idempotency_key,
                               **child.options()).task_id)
        else:
            ids.extend(enqueue_batch(conn, child.queue, payloads, **child.options()))
    return ids


async def _aenqueue_children(conn: psycopg.AsyncConnection[Any], children: Sequence[Child]) -> list[int]:
    ids: list[int] = []
    for child, payloads in _runs(children):
        if len(payloads) == 1:
            ids.append((await aenqueue(conn, child.queue, child.payload, idempotency_key=child.idempotency_key,
                                       **child.options())).task_id)
        else:
            ids.extend(await aenqueue_batch(conn, child.queue, payloads, **child.options()))
    return ids


def _event(result: Any) -> Event | None:
    """An ended event wait, from its recorded step (None if not recorded)."""
    if isinstance(result, dict) and isinstance(result.get("timed_out"), bool):
        return Event(payload=result.get("payload"), timed_out=result["timed_out"])
    return None
