"""The task model: what a handler receives, and what it may return or raise."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, overload

import psycopg

from . import args as _args
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
    (``step``, ``sleep``, ``wait_for_event``) and caught by the runtime.

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


def _no_workflow() -> RuntimeError:
    return RuntimeError("workflow steps, sleeps and event waits need a handler registered without "
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

    async def heartbeat(self) -> bool:
        """Extend the lease by the task's lease length now. False if the lease was lost."""
        return await self._beat(None)

    async def checkpoint(self, progress: Any) -> bool:
        """Store ``progress`` (JSON) with the task and extend the lease; False if lost."""
        if progress is None:
            raise ValueError("progress: must not be None (use heartbeat() to only extend the lease)")
        return await self._beat(progress)
