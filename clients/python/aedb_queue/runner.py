"""One queue's claim loop, and the life of each task it claims.

A runner claims up to its free slots in one call. Each claimed task runs in
a slot: the handler, with heartbeats every third of the lease, then the
settle. While the queue is busy (the last claim came back full) a slot
settles and claims its next task in one statement
(``queue_complete_and_claim`` / ``queue_fail_and_claim``), one commit per
job; when that claim comes back empty the queue is no longer busy and slots
settle with ``queue_complete``/``queue_fail`` alone. No transaction is open
while a handler runs, except a transactional handler's own (``tx.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import traceback
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg.types.json import Jsonb

from . import sql
from .connections import Backoff, is_transient
from .payloads import PayloadError, decode, to_jsonb
from .spec import TaskSpec
from .task import AsyncTask, Complete, DeadLetter, Retry, Task, WorkflowExit

if TYPE_CHECKING:
    from .runtime import Runtime

log = logging.getLogger("aedb_queue")

MAX_ERROR_CHARS = 8000

Row = tuple[Any, ...]
"""A row as the runtime's connections return it (psycopg's tuple rows)."""

T = TypeVar("T")


@dataclasses.dataclass
class Settle:
    """How a task ends this attempt."""

    complete: bool
    result: Jsonb | None = None
    follow_ups: Jsonb | None = None
    error: str = ""
    retry_in: timedelta | None = None
    dead_letter: bool = False

    @classmethod
    def failure(cls, exc: BaseException) -> "Settle":
        if isinstance(exc, Retry):
            return cls(False, error=error_text(exc), retry_in=exc.in_)
        return cls(False, error=error_text(exc), dead_letter=isinstance(exc, DeadLetter))

    @classmethod
    def completion(cls, value: Any) -> "Settle":
        """Settle for a handler's return value (a failure if it does not encode)."""
        try:
            if isinstance(value, Complete):
                follow = [f.spec() for f in value.follow_ups]
                return cls(
                    True,
                    result=to_jsonb(value.result, "result"),
                    follow_ups=to_jsonb(follow, "follow_ups") if follow else None,
                )
            return cls(True, result=to_jsonb(value, "result"))
        except (PayloadError, TypeError, ValueError) as exc:
            return cls(False, error=error_text(exc))

    def params(self) -> dict[str, Any]:
        if self.complete:
            return {"result": self.result, "follow_ups": self.follow_ups}
        return {"error": self.error, "retry_in": self.retry_in, "dead_letter": self.dead_letter}


def error_text(exc: BaseException) -> str:
    """What ``queue_fail`` records: the exception's type and message."""
    if isinstance(exc, (Retry, DeadLetter)):
        text = f"{type(exc).__name__}: {exc}"
    else:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


class Job:
    """A claimed task while this worker holds it."""

    def __init__(self, row: Row, spec: TaskSpec) -> None:
        (self.task_id, self.payload, self.attempts, self.fencing_token, self.lease_deadline,
         self.priority, self.enqueued_at, self.progress) = row
        self.spec = spec
        self.phase = "handler"  # then "settle"
        self.abandoned = False  # handed back at shutdown: drop whatever the handler does
        # A workflow call ended the claim: "parking" while a sleep or an event
        # wait may park the task, then "parked" or "lease_lost" (settle nothing).
        self.workflow_exit: str | None = None
        self.task: Task[Any] | AsyncTask[Any] | None = None
        self.slot: asyncio.Task[None] | None = None

    def key(self) -> dict[str, Any]:
        return {"queue": self.spec.queue, "task_id": self.task_id, "fencing_token": self.fencing_token}

    def __repr__(self) -> str:
        return f"{self.spec.queue}#{self.task_id} (attempt {self.attempts})"


async def fetchall(conn: psycopg.AsyncConnection, query: str, params: dict[str, Any]) -> list[Row]:
    async with conn.cursor() as cur:
        await cur.execute(query, params)
        return await cur.fetchall()


async def fetchval(conn: psycopg.AsyncConnection, query: str, params: dict[str, Any], kind: type[T]) -> T:
    """The first column of the first row, which must be a ``kind``."""
    rows = await fetchall(conn, query, params)
    return of_kind(rows[0][0], kind)


def of_kind(value: Any, kind: type[T]) -> T:
    """``value``, checked to be the ``kind`` a statement's column has."""
    if not isinstance(value, kind):
        raise TypeError(f"expected a {kind.__name__} from the server, got {type(value).__name__}")
    return value


def next_row(rows: list[Row]) -> tuple[str, Row | None]:
    """The outcome of a settle-and-claim call, and the task it claimed (if any)."""
    first = rows[0]
    return first[0], (first[1:] if first[1] is not None else None)


class QueueRunner:
    def __init__(self, runtime: "Runtime", spec: TaskSpec) -> None:
        self.rt = runtime
        self.spec = spec
        self.active = 0
        self.busy = False
        self.wanted = True
        self.jobs: set[Job] = set()
        self.slots: set[asyncio.Task[None]] = set()
        self._kick = asyncio.Event()

    # -- the claim loop ------------------------------------------------------

    def wake(self) -> None:
        """Claim as soon as a slot is free (a notification, a reconnect)."""
        self.wanted = True
        self._kick.set()

    def kick(self) -> None:
        self._kick.set()

    @property
    def chaining(self) -> bool:
        return self.busy and not self.rt.stopping

    async def run(self) -> None:
        """The claim loop, restarted (after a pause) should it ever raise."""
        while not self.rt.stopping:
            try:
                await self._claim_loop()
            except Exception:
                log.exception("claim loop of %r failed; restarting it in 1 s", self.spec.queue)
                self.wanted = True
                await self.rt.sleep_unless_stopping(1.0)

    async def _claim_loop(self) -> None:
        spec, loop = self.spec, asyncio.get_running_loop()
        backoff = Backoff()
        next_poll = 0.0
        while not self.rt.stopping:
            self._kick.clear()
            free = spec.concurrency - self.active
            now = loop.time()
            if free > 0 and (self.wanted or now >= next_poll):
                self.wanted = False
                ask = min(free, spec.batch_size)
                try:
                    rows = await self.rt.run_db(self._claim(ask), what=f"claim from {spec.queue!r}")
                except psycopg.Error as exc:
                    self.wanted = True
                    if is_transient(exc):
                        delay = backoff.next()
                        log.warning("claim from %r: %s; retrying in %.1f s", spec.queue, _one_line(exc), delay)
                    else:
                        delay = spec.poll_interval
                        log.error("claim from %r refused: %s; retrying in %.1f s", spec.queue, _one_line(exc), delay)
                    await self.rt.sleep_unless_stopping(delay)
                    continue
                backoff.reset()
                next_poll = loop.time() + spec.poll_interval
                self.busy = len(rows) == ask
                if self.rt.stopping:
                    for row in rows:  # claimed as the stop came: hand back untouched
                        await self.rt.hand_back(Job(row, spec))
                    break
                for row in rows:
                    self._spawn(row)
                if self.busy and self.active < spec.concurrency:
                    self.wanted = True
                continue
            timeout = None if free <= 0 else max(0.0, next_poll - now)
            try:
                await asyncio.wait_for(self._kick.wait(), timeout)
            except TimeoutError:
                pass

    def _claim(self, ask: int) -> Callable[[psycopg.AsyncConnection], Awaitable[list[Row]]]:
        params = {"queue": self.spec.queue, "owner_id": self.rt.owner_id,
                  "lease": timedelta(seconds=self.spec.lease), "max": ask}

        async def op(conn: psycopg.AsyncConnection) -> list[Row]:
            return await fetchall(conn, sql.CLAIM, params)

        return op

    def _spawn(self, row: Row) -> None:
        self.active += 1
        slot = asyncio.ensure_future(self._slot(row))
        self.slots.add(slot)
        slot.add_done_callback(self._slot_done)

    def _slot_done(self, slot: asyncio.Task[None]) -> None:
        self.slots.discard(slot)
        self.active -= 1
        if not slot.cancelled() and slot.exception() is not None:
            log.error("slot of %r crashed", self.spec.queue, exc_info=slot.exception())
            self.wanted = True
        self.kick()

    async def _slot(self, row: Row | None) -> None:
        """Run a claimed task, then each task claimed along with its settle."""
        while row is not None:
            job = Job(row, self.spec)
            if self.rt.stopping:  # claimed along with a settle as the stop came
                await self.rt.hand_back(job)
                return
            job.slot = asyncio.current_task()
            self.jobs.add(job)
            try:
                row = await self._process(job)
            finally:
                self.jobs.discard(job)

    # -- one task --------------------------------------------------------------

    async def _process(self, job: Job) -> Row | None:
        try:
            job.task = self._make_task(job)
        except PayloadError as exc:
            log.error("%r: %s; dead-lettering it", job, exc)
            return await self.settle(job, Settle(False, error=str(exc), dead_letter=True))
        if self.spec.transactional:
            from .tx import run_transactional  # one concern per module

            return await run_transactional(self, job)
        settle = await self._run_handler(job)
        if settle is None:  # parked, or the lease was lost: nothing to settle
            if self.busy:
                self.wake()  # this slot claimed through the settle; the runner claims now
            return None
        return await self.settle(job, settle)

    def _make_task(self, job: Job) -> Task[Any] | AsyncTask[Any]:
        spec = self.spec
        payload = job.payload if spec.payload_type is None else decode(spec.payload_type, job.payload)
        cls = AsyncTask if spec.is_async else Task
        task = cls(
            task_id=job.task_id, queue=spec.queue, payload=payload, raw_payload=job.payload,
            attempts=job.attempts, fencing_token=job.fencing_token, progress=job.progress,
            lease_deadline=job.lease_deadline, priority=job.priority, enqueued_at=job.enqueued_at,
            lease=timedelta(seconds=spec.lease),
        )
        if spec.is_async:
            task._beat = lambda progress: self.beat(job, progress)
        else:
            task._beat = lambda progress: self.rt.call_from_thread(self.beat(job, progress))
        if not spec.transactional:
            from .workflow import Workflow

            task._wf = Workflow(self, job)
        return task

    async def _run_handler(self, job: Job) -> Settle | None:
        """How the handler's attempt settles; None when a workflow call ended
        it (the task parked, or the lease was lost): settle nothing."""
        beats = self.start_heartbeats(job)
        try:
            if self.spec.is_async:
                value = await self.spec.handler(job.task)
            else:
                value = await self.rt.threads.submit(self.spec.handler, job.task)
        except WorkflowExit:
            return None
        except (Retry, DeadLetter) as exc:
            if job.workflow_exit is not None:
                return None
            return Settle.failure(exc)
        except Exception as exc:
            # A sync handler's WorkflowExit comes back from its thread as a
            # HandlerExit; the flag on the job says what it was.
            if job.workflow_exit is not None:
                return None
            log.info("%r raised", job, exc_info=exc)  # the traceback; the failure is logged when it settles
            return Settle.failure(exc)
        finally:
            beats.cancel()
        if job.workflow_exit is not None:  # the handler swallowed the WorkflowExit
            return None
        return Settle.completion(value)

    # -- heartbeats ------------------------------------------------------------

    def start_heartbeats(self, job: Job) -> asyncio.Task[None]:
        return asyncio.ensure_future(self._heartbeats(job))

    async def _heartbeats(self, job: Job) -> None:
        while True:
            await asyncio.sleep(self.spec.heartbeat_interval)
            try:
                await self.beat(job, None)
            except psycopg.Error as exc:
                log.warning("heartbeat of %r: %s", job, _one_line(exc))

    async def beat(self, job: Job, progress: Any) -> bool:
        """Extend the lease (and store progress); False once the lease is lost."""
        task = job.task
        if job.abandoned or (task is not None and task.lease_lost):
            return False
        if job.workflow_exit in ("parking", "parked"):
            return True  # handed back by the workflow (or about to be): not lost, nothing to extend
        params = {**job.key(), "extend": timedelta(seconds=self.spec.lease),
                  "progress": to_jsonb(progress, "progress")}

        async def op(conn: psycopg.AsyncConnection) -> str:
            return await fetchval(conn, sql.HEARTBEAT, params, str)

        try:
            outcome = await self.rt.run_db(op, what=f"heartbeat of {job!r}")
        except psycopg.Error as exc:
            if not is_transient(exc):
                raise
            log.warning("heartbeat of %r: %s", job, _one_line(exc))
            return True  # not known to be lost; the next beat tries again
        if outcome != "applied":
            if job.workflow_exit in ("parking", "parked"):
                return True  # a beat that crossed the park
            if task is not None:
                task.lease_lost = True
            log.warning("%r: lease lost (heartbeat refused); its result will be dropped", job)
            return False
        return True

    # -- settling --------------------------------------------------------------

    async def settle(self, job: Job, settle: Settle, *, chain: bool | None = None) -> Row | None:
        """Complete or fail the task; while the queue is busy, claim the next in the same call."""
        if job.abandoned:
            return None
        job.phase = "settle"
        if chain is None:
            chain = self.chaining
        base = {**job.key(), **settle.params()}
        if chain:
            query = sql.COMPLETE_AND_CLAIM if settle.complete else sql.FAIL_AND_CLAIM
            params = {**base, "strict": False, "owner_id": self.rt.owner_id,
                      "lease": timedelta(seconds=self.spec.lease), "max": 1}

            async def chained(conn: psycopg.AsyncConnection) -> list[Row]:
                return await fetchall(conn, query, params)

            try:
                outcome, row = next_row(await self.rt.run_db(chained, what=f"settle {job!r}"))
            except psycopg.Error as exc:
                if is_transient(exc):
                    log.warning("settle-and-claim of %r: %s; settling alone", job, _one_line(exc))
                    await self._settle_alone(job, settle, base, retried=True)
                else:
                    await self._refused(job, settle, exc)
                return None
            await self.log_outcome(job, outcome, settle)
            if row is None:
                self.busy = False
            return row
        await self._settle_alone(job, settle, base)
        return None

    async def _settle_alone(self, job: Job, settle: Settle, base: dict[str, Any], *, retried: bool = False) -> None:
        query = sql.COMPLETE if settle.complete else sql.FAIL
        params = {**base, "strict": False}

        async def op(conn: psycopg.AsyncConnection) -> str:
            return await fetchval(conn, query, params, str)

        try:
            outcome = await self.rt.run_db(op, what=f"settle {job!r}", retry=True)
        except psycopg.Error as exc:
            if is_transient(exc):
                log.error("%r: could not settle (%s); its lease will expire and it runs again",
                          job, _one_line(exc))
                return None
            return await self._refused(job, settle, exc)
        if retried and outcome == "lease_lost":
            log.info("%r: settled before the connection was lost", job)
        else:
            await self.log_outcome(job, outcome, settle)
        if self.busy:
            self.wake()  # this slot claims through the runner now
        return None

    async def _refused(self, job: Job, settle: Settle, exc: psycopg.Error) -> None:
        """The server refused the completion (a result too large, a bad follow-up...): fail the task."""
        if not settle.complete:
            log.error("%r: the server refused queue_fail: %s", job, _one_line(exc))
            return None
        log.error("%r: the server refused the completion: %s; failing the task", job, _one_line(exc))
        failure = Settle(False, error=f"completion refused: {error_text(exc)}")
        return await self._settle_alone(job, failure, {**job.key(), **failure.params()})

    async def log_outcome(self, job: Job, outcome: str, settle: Settle) -> None:
        if outcome != "applied":
            log.warning("%r: lease lost; the %s was dropped (another worker owns the task now)",
                        job, "result" if settle.complete else "failure")
        elif not settle.complete:
            fate = "dead-lettered" if settle.dead_letter or await self._dead(job) else "will be retried"
            log.warning("task %d of queue %r failed (attempt %d): %s; %s",
                        job.task_id, job.spec.queue, job.attempts, settle.error, fate)
        elif log.isEnabledFor(logging.DEBUG):
            log.debug("%r completed", job)

    async def _dead(self, job: Job) -> bool:
        """Whether the failure that applied dead-lettered the task (no attempt left)."""
        async def op(conn: psycopg.AsyncConnection) -> bool:
            return await fetchval(conn, sql.DEAD_AT_TOKEN, job.key(), bool)

        try:
            return await self.rt.run_db(op, what=f"fate of {job!r}")
        except psycopg.Error as exc:
            log.warning("could not read back whether %r was dead-lettered: %s", job, _one_line(exc))
            return False


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
