"""The task model: what a handler receives, and what it may return or raise."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from . import args as _args
from .payloads import to_json_value

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


class Task(_TaskFields[P]):
    """The task a synchronous handler runs (in a worker thread)."""

    _beat: Callable[[Any], bool]

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

    async def heartbeat(self) -> bool:
        """Extend the lease by the task's lease length now. False if the lease was lost."""
        return await self._beat(None)

    async def checkpoint(self, progress: Any) -> bool:
        """Store ``progress`` (JSON) with the task and extend the lease; False if lost."""
        if progress is None:
            raise ValueError("progress: must not be None (use heartbeat() to only extend the lease)")
        return await self._beat(progress)
