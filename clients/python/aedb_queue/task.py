"""The task model: what a handler receives, and what it may return or raise."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

import psycopg

from . import args as _args
from . import producer as _producer
from .payloads import to_json_value

if TYPE_CHECKING:
    from .workflow import Workflow

P = TypeVar("P")


# -- what a handler raises --------------------------------------------------


class Retry(Exception):
    """Fail this attempt and retry in ``in_`` seconds (or a timedelta), not the queue's backoff.

    ``raise Retry(in_=30)``; ``Retry(in_=0)`` makes the task ready again at once.
    The attempt counts: out of attempts, the task is dead as with any failure.
    """

    def __init__(self, message: str = "retry requested", *, in_: _args.Seconds = 0) -> None:
        super().__init__(message)
        self.in_ = _args.duration(in_, "in_", optional=False)


class DeadLetter(Exception):
    """Fail the task for good: it goes to the dead letters at once, whatever attempts are left."""


class WorkflowExit(BaseException):
    """Ends a handler without settling its task: raised by a workflow call
    (``step``, ``sleep``, ``wait_for_event``, ``spawn``, ``wait_for_tasks``)
    and caught by the runtime.

    A ``BaseException``, as ``asyncio.CancelledError`` is, so that ``except
    Exception`` in a handler lets it through; do not catch it. Should a
    handler swallow it anyway, the runtime still settles nothing.
    """


class Parked(WorkflowExit):
    """The task was handed back until its sleep ends or its event comes
    (scheduled, the attempt not counted): this claim is over."""


class LeaseLost(WorkflowExit):
    """A workflow call found the lease lost (the fence failed): nothing was
    recorded, and another worker owns the task now."""


@dataclasses.dataclass(frozen=True)
class Event:
    """How an event wait ended (``task.wait_for_event``)."""

    payload: Any
    """The payload the event was emitted with (parsed JSON; None if none, or if it timed out)."""
    timed_out: bool
    """True if the wait's deadline passed before the event was emitted."""


# -- children of a workflow ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Child:
    """A child task for ``task.spawn``: its queue, payload and :func:`~aedb_queue.enqueue`'s options.

    The options are checked here, as ``enqueue`` checks them (durations as
    text are read by the server when the child is enqueued).
    """

    queue: str
    payload: Any = None
    delay: _args.Duration | None = None
    priority: int | None = None
    max_attempts: int | None = None
    backoff_base: _args.Duration | None = None
    backoff_max: _args.Duration | None = None
    idempotency_key: str | None = None
    wait_for: Sequence[int] | None = None
    on_parent_failure: str | None = None
    concurrency_key: str | None = None
    ordering_key: str | None = None
    fairness_key: str | None = None

    def __post_init__(self) -> None:
        try:
            _args.queue_name(self.queue)
            _args.text(self.idempotency_key, "idempotency_key")
            _producer.check_options(**self.options())
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"Child.{exc}") from None

    def options(self) -> dict[str, Any]:
        """The options :func:`~aedb_queue.enqueue_batch` takes (all but the payload and the idempotency key)."""
        return {"delay": self.delay, "priority": self.priority, "max_attempts": self.max_attempts,
                "backoff_base": self.backoff_base, "backoff_max": self.backoff_max,
                "wait_for": self.wait_for, "on_parent_failure": self.on_parent_failure,
                "concurrency_key": self.concurrency_key, "ordering_key": self.ordering_key,
                "fairness_key": self.fairness_key}


ChildLike = Child | tuple[str, Any]
"""A child for ``task.spawn``: a :class:`Child`, or ``(queue, payload)``."""


def _children(children: Any) -> list[Child]:
    """``children`` as Child objects (a ``(queue, payload)`` pair made one), checked."""
    if isinstance(children, (str, bytes, dict, Child)) or not isinstance(children, Iterable):
        raise TypeError(f"children: expected a sequence of Child or (queue, payload), "
                        f"got {type(children).__name__}")
    out: list[Child] = []
    for i, item in enumerate(children):
        if isinstance(item, Child):
            out.append(item)
        elif isinstance(item, tuple) and len(item) == 2:
            try:
                out.append(Child(item[0], item[1]))
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"children[{i}]: {exc}") from None
        else:
            raise TypeError(f"children[{i}]: expected a Child or a (queue, payload) pair, "
                            f"got {type(item).__name__}")
    if len(out) > _producer.MAX_BATCH:
        raise ValueError(f"children: at most {_producer.MAX_BATCH} per spawn, got {len(out)}")
    return out


ChildState = Literal["completed", "dead", "missing"]


@dataclasses.dataclass(frozen=True)
class ChildResult:
    """How one awaited task ended (``task.wait_for_tasks``)."""

    task_id: int
    state: ChildState
    """``completed``; ``dead`` (dead-lettered); ``missing``: cancelled, gone, never made,
    or in a queue this worker may not read."""
    result: Any = None
    """The task's result (parsed JSON) if it completed, else None."""
    error: str | None = None
    """The task's last error if it is dead, else None."""

    @property
    def ok(self) -> bool:
        """True if the task completed."""
        return self.state == "completed"


class ChildFailed(DeadLetter):
    """Raised by ``task.wait_for_tasks`` when an awaited task did not complete
    (dead or missing). Every task's :class:`ChildResult` is in ``results``,
    the failed ones in ``failed``.

    A :class:`DeadLetter`: uncaught, it dead-letters the workflow at once, as
    another attempt would read the same recorded results (an operator's
    ``queue_retry_from_step`` from the spawn spawns the children again).
    Catch it to carry on, or pass ``raise_on_failure=False``.
    """

    def __init__(self, step: str, results: Sequence[ChildResult]) -> None:
        self.step = step
        self.results = list(results)
        self.failed = [r for r in self.results if not r.ok]
        shown = "; ".join(f"task {r.task_id} {r.state}" + (f" ({r.error})" if r.error else "")
                          for r in self.failed[:5])
        more = f"; and {len(self.failed) - 5} more" if len(self.failed) > 5 else ""
        super().__init__(f"{len(self.failed)} of {len(self.results)} task(s) awaited by step {step!r} "
                         f"did not complete: {shown}{more}")


# -- what a handler returns -------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FollowUp:
    """A task to enqueue in the same transaction as the completion."""

    queue: str
    payload: Any = None
    delay: _args.Seconds | None = None
    priority: int | None = None
    max_attempts: int | None = None
    backoff_base: _args.Seconds | None = None
    backoff_max: _args.Seconds | None = None
    idempotency_key: str | None = None
    wait_for: Sequence[int] | None = None

    def __post_init__(self) -> None:
        _args.queue_name(self.queue, "FollowUp.queue")
        for name in ("delay", "backoff_base", "backoff_max"):
            _args.duration(getattr(self, name), f"FollowUp.{name}")
        _args.integer(self.priority, "FollowUp.priority")
        _args.integer(self.max_attempts, "FollowUp.max_attempts", minimum=1)
        _args.text(self.idempotency_key, "FollowUp.idempotency_key")
        _args.task_ids(self.wait_for, "FollowUp.wait_for")

    def spec(self) -> dict[str, Any]:
        """The follow-up as the JSON spec ``queue_complete(follow_ups => ...)`` reads."""
        out: dict[str, Any] = {"queue": self.queue}
        if self.payload is not None:
            out["payload"] = to_json_value(self.payload, "FollowUp.payload")
        for name in ("delay", "backoff_base", "backoff_max"):
            value = _args.duration(getattr(self, name), f"FollowUp.{name}")
            if value is not None:
                secs = value.total_seconds()
                out[name] = int(secs) if secs.is_integer() else secs
        for name in ("priority", "max_attempts", "idempotency_key"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.wait_for is not None:
            out["wait_for"] = list(self.wait_for)
        return out


@dataclasses.dataclass(frozen=True)
class Complete:
    """Return this from a handler to complete with ``result`` and enqueue ``follow_ups``.

    Returning any other value completes with that value as the result.
    """

    result: Any = None
    follow_ups: Sequence[FollowUp] = ()

    def __post_init__(self) -> None:
        for i, item in enumerate(self.follow_ups):
            if not isinstance(item, FollowUp):
                raise TypeError(f"follow_ups[{i}]: expected a FollowUp, got {type(item).__name__}")


# -- what a handler receives ------------------------------------------------


@dataclasses.dataclass(eq=False)
class _TaskFields(Generic[P]):
    task_id: int
    queue: str
    payload: P
    """The payload, decoded as the handler's declared payload type (else parsed JSON)."""
    raw_payload: Any
    """The payload as parsed JSON, whatever the declared type."""
    attempts: int
    """This attempt's number: 1 on the first claim."""
    fencing_token: int
    progress: Any
    """What an earlier attempt stored with checkpoint() (None if nothing)."""
    lease_deadline: datetime
    priority: int
    enqueued_at: datetime
    lease: timedelta
    lease_lost: bool = dataclasses.field(default=False, init=False)
    """True once a heartbeat found the task no longer ours."""


def _step_name(name: Any) -> str:
    return _args.queue_name(name, "name")


def _sleep_duration(duration: Any) -> timedelta | str:
    value = _args.duration_or_text(duration, "duration", optional=False)
    assert value is not None
    return value


def _wake_time(when: Any) -> datetime:
    if not isinstance(when, datetime):
        raise TypeError(f"until: expected a datetime, got {type(when).__name__}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError("until: expected a timezone-aware datetime (a naive one is ambiguous)")
    return when


def _event_timeout(timeout: Any) -> timedelta | str:
    value = _args.duration_or_text(timeout, "timeout", positive=True, optional=False)
    assert value is not None
    return value


async def _call(fn: Callable[[], Any]) -> Any:
    """``fn()``, awaited if it returns an awaitable (a step of an async handler)."""
    value = fn()
    if inspect.isawaitable(value):
        value = await value
    return value


def _not_a(name: str, what: str) -> ValueError:
    return ValueError(f"step {name!r} is recorded, but not as {what}: give each step, spawn "
                      f"and wait a name of its own")


def spawned(name: str, recorded: Any) -> list[int]:
    """The task ids a spawn recorded as its step."""
    if not isinstance(recorded, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in recorded):
        raise _not_a(name, "a spawn (a list of task ids)")
    return recorded


def child_results(name: str, recorded: Any) -> list[ChildResult]:
    """The results a wait for tasks recorded as its step, one per task, in order."""
    if not isinstance(recorded, list):
        raise _not_a(name, "a wait for tasks")
    out: list[ChildResult] = []
    for entry in recorded:
        if not (isinstance(entry, dict) and isinstance(entry.get("task_id"), int)
                and entry.get("state") in ("completed", "dead", "missing")):
            raise _not_a(name, "a wait for tasks")
        error = entry.get("error")
        out.append(ChildResult(task_id=entry["task_id"], state=entry["state"], result=entry.get("result"),
                               error=None if error is None else str(error)))
    return out


def _wait_ids(task_ids: Any) -> list[int]:
    ids = _args.task_ids(task_ids, "task_ids")
    if ids is None:
        raise TypeError("task_ids: expected a sequence of task ids, got None")
    if len(ids) > _producer.MAX_BATCH:
        raise ValueError(f"task_ids: at most {_producer.MAX_BATCH}, got {len(ids)}")
    return ids


def _settled(step: str, results: list[ChildResult], raise_on_failure: bool) -> list[ChildResult]:
    if raise_on_failure and not all(r.ok for r in results):
        raise ChildFailed(step, results)
    return results


def _no_workflow() -> RuntimeError:
    return RuntimeError("workflow steps, sleeps, event waits and children need a handler registered without "
                        "transactional=True (run a write in a step's own transaction with "
                        "step(name, fn, transactional=True))")


class Task(_TaskFields[P]):
    """The task a synchronous handler runs (in a worker thread)."""

    _beat: Callable[[Any], bool]
    _wf: "Workflow | None" = None

    def _workflow(self) -> "Workflow":
        if self._wf is None:
            raise _no_workflow()
        return self._wf

    @overload
    def step(self, name: str, fn: Callable[[], Any], *, transactional: Literal[False] = False) -> Any: ...

    @overload
    def step(self, name: str, fn: Callable[[psycopg.Connection[Any]], Any], *,
             transactional: Literal[True]) -> Any: ...

    def step(self, name: str, fn: Callable[..., Any], *, transactional: bool = False) -> Any:
        """The result of the durable step ``name``: recorded, or ``fn()`` run and recorded.

        If this task recorded the step (an earlier claim ran it), its result
        is returned without running ``fn`` and without a round trip (the
        task's steps are read once per claim). Otherwise ``fn()`` runs and
        its result (JSON; a dataclass or pydantic model is stored as its
        JSON) is recorded under this claim's fencing token; the step returns
        it as recorded, as a replay would. If the lease was lost, nothing is
        recorded and the handler ends (:class:`LeaseLost`) without settling.

        ``transactional=True``: ``fn(conn)`` runs on a connection inside a
        transaction, and the step is recorded (strictly) in that same
        transaction: the writes ``fn`` makes there commit with the record or
        not at all, so they happen exactly once. Do not commit ``conn``.
        """
        name = _step_name(name)
        wf = self._workflow()
        steps = wf.blocking(wf.load())
        if name in steps:
            return steps[name]
        if transactional:
            return wf.step_in_transaction_sync(name, fn)
        return wf.blocking(wf.record(name, fn()))

    def sleep(self, name: str, duration: _args.Duration) -> None:
        """Sleep durably for ``duration`` (seconds, a timedelta or SQL text such as ``"2 days"``).

        The first call records the wake time on the database's clock. While
        it is ahead, the task is handed back until then (its attempt not
        counted) and the handler ends at once (:class:`Parked`), freeing its
        slot; the task runs again at the wake time and this call returns.
        """
        name, wait = _step_name(name), _sleep_duration(duration)
        wf = self._workflow()
        wf.blocking(wf.sleep(name, wait, None))

    def sleep_until(self, name: str, until: datetime) -> None:
        """:meth:`sleep` until ``until`` (a timezone-aware datetime)."""
        name, when = _step_name(name), _wake_time(until)
        wf = self._workflow()
        wf.blocking(wf.sleep(name, None, when))

    def wait_for_event(self, name: str, key: str, timeout: _args.Duration) -> Event:
        """Wait durably, as the step ``name``, for the event ``key`` of this queue (see ``emit``).

        An event emitted before or during the wait ends it with its payload;
        until then the task is handed back (its attempt not counted) and the
        handler ends (:class:`Parked`); an emit makes it due at once. Past
        ``timeout`` (from the first call) the wait ends with ``timed_out``.
        """
        name, key, wait = _step_name(name), _args.queue_name(key, "key"), _event_timeout(timeout)
        wf = self._workflow()
        return wf.blocking(wf.await_event(name, key, wait))

    def spawn(self, name: str, children: Iterable[ChildLike]) -> list[int]:
        """Enqueue ``children`` as the durable step ``name``; their task ids, in order.

        Each child is a :class:`Child` (a queue, a payload and ``enqueue``'s
        options) or a ``(queue, payload)`` pair. The children are enqueued,
        linked to this task (so a child that completes at once is kept with
        its result for :meth:`wait_for_tasks`) and their ids recorded as the
        step, in one transaction: a crash leaves all of it or none of it, and
        a rerun of the handler gets the recorded ids without enqueuing again.
        If the lease was lost, nothing is enqueued and the handler ends
        (:class:`LeaseLost`). Consecutive children of one queue with the same
        options go in one statement.
        """
        name, items = _step_name(name), _children(children)
        wf = self._workflow()
        steps = wf.blocking(wf.load())
        if name in steps:
            return spawned(name, steps[name])
        return wf.spawn_sync(name, items)

    def wait_for_tasks(self, name: str, task_ids: Iterable[int], *,
                       raise_on_failure: bool = True) -> list[ChildResult]:
        """Wait durably, as the step ``name``, until none of ``task_ids`` is live; a
        :class:`ChildResult` per task, in the order given.

        While any is live the task is handed back (its attempt not counted)
        and the handler ends (:class:`Parked`); it is due again when the last
        one completes, is dead-lettered or cancelled, and this call returns
        the results, recorded as the step. If a task did not complete (dead
        or missing), :class:`ChildFailed` is raised (with every result), which
        uncaught dead-letters this task; ``raise_on_failure=False`` returns
        the results as they are.
        """
        name, ids = _step_name(name), _wait_ids(task_ids)
        wf = self._workflow()
        return _settled(name, wf.blocking(wf.await_tasks(name, ids)), raise_on_failure)

    def heartbeat(self) -> bool:
        """Extend the lease by the task's lease length now. False if the lease was lost."""
        return self._beat(None)

    def checkpoint(self, progress: Any) -> bool:
        """Store ``progress`` (JSON) with the task and extend the lease.

        The next attempt, if there is one, receives it as ``task.progress``.
        False if the lease was lost (nothing stored).
        """
        if progress is None:
            raise ValueError("progress: must not be None (use heartbeat() to only extend the lease)")
        return self._beat(progress)


class AsyncTask(_TaskFields[P]):
    """The task an ``async def`` handler runs (on the event loop)."""

    _beat: Callable[[Any], Awaitable[bool]]
    _wf: "Workflow | None" = None

    def _workflow(self) -> "Workflow":
        if self._wf is None:
            raise _no_workflow()
        return self._wf

    @overload
    async def step(self, name: str, fn: Callable[[], Any], *, transactional: Literal[False] = False) -> Any: ...

    @overload
    async def step(self, name: str, fn: Callable[[psycopg.AsyncConnection[Any]], Any], *,
                   transactional: Literal[True]) -> Any: ...

    async def step(self, name: str, fn: Callable[..., Any], *, transactional: bool = False) -> Any:
        """:meth:`Task.step` in an async handler: ``fn()`` may return an awaitable
        (``fn(conn)`` with ``transactional=True``, on an ``AsyncConnection``)."""
        name = _step_name(name)
        wf = self._workflow()
        steps = await wf.load()
        if name in steps:
            return steps[name]
        if transactional:
            return await wf.step_in_transaction(name, fn)
        return await wf.record(name, await _call(fn))

    async def sleep(self, name: str, duration: _args.Duration) -> None:
        """:meth:`Task.sleep` in an async handler."""
        name, wait = _step_name(name), _sleep_duration(duration)
        await self._workflow().sleep(name, wait, None)

    async def sleep_until(self, name: str, until: datetime) -> None:
        """:meth:`Task.sleep_until` in an async handler."""
        name, when = _step_name(name), _wake_time(until)
        await self._workflow().sleep(name, None, when)

    async def wait_for_event(self, name: str, key: str, timeout: _args.Duration) -> Event:
        """:meth:`Task.wait_for_event` in an async handler."""
        name, key, wait = _step_name(name), _args.queue_name(key, "key"), _event_timeout(timeout)
        return await self._workflow().await_event(name, key, wait)

    async def spawn(self, name: str, children: Iterable[ChildLike]) -> list[int]:
        """:meth:`Task.spawn` in an async handler."""
        name, items = _step_name(name), _children(children)
        wf = self._workflow()
        steps = await wf.load()
        if name in steps:
            return spawned(name, steps[name])
        return await wf.spawn(name, items)

    async def wait_for_tasks(self, name: str, task_ids: Iterable[int], *,
                             raise_on_failure: bool = True) -> list[ChildResult]:
        """:meth:`Task.wait_for_tasks` in an async handler."""
        name, ids = _step_name(name), _wait_ids(task_ids)
        return _settled(name, await self._workflow().await_tasks(name, ids), raise_on_failure)

    async def heartbeat(self) -> bool:
        """Extend the lease by the task's lease length now. False if the lease was lost."""
        return await self._beat(None)

    async def checkpoint(self, progress: Any) -> bool:
        """Store ``progress`` (JSON) with the task and extend the lease; False if lost."""
        if progress is None:
            raise ValueError("progress: must not be None (use heartbeat() to only extend the lease)")
        return await self._beat(progress)
