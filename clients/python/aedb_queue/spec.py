"""A registered handler and its options (what ``@app.task(...)`` records)."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any

from . import args as _args
from .task import AsyncTask, Task


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    queue: str
    handler: Callable[..., Any]
    is_async: bool
    concurrency: int
    lease: float
    """Seconds; every claim asks for it and every heartbeat extends by it."""
    batch_size: int
    poll_interval: float
    heartbeat_interval: float
    transactional: bool
    payload_type: Any
    texts: tuple[tuple[str, str], ...] = ()
    """The durations given as text, (option, text): PostgreSQL's interval
    input reads them when the runtime starts (:meth:`read`); until then the
    seconds above are placeholders."""
    options: tuple[Any, Any, Any] = dataclasses.field(default=(None, None, None), compare=False, repr=False)
    """lease, poll_interval and heartbeat_interval as given."""

    @classmethod
    def build(
        cls,
        queue: Any,
        handler: Any,
        *,
        concurrency: Any,
        lease: Any,
        batch_size: Any,
        poll_interval: Any,
        heartbeat_interval: Any,
        transactional: Any,
        payload_type: Any,
    ) -> "TaskSpec":
        _args.queue_name(queue)
        if not callable(handler):
            raise TypeError(f"handler: expected a function, got {type(handler).__name__}")
        concurrency = _args.integer(concurrency, "concurrency", minimum=1, optional=False)
        given = {"lease": _args.seconds_or_text(lease, "lease"),
                 "poll_interval": _args.seconds_or_text(poll_interval, "poll_interval")}
        if heartbeat_interval is not None:
            given["heartbeat_interval"] = _args.seconds_or_text(heartbeat_interval, "heartbeat_interval")
        texts = tuple((name, value) for name, value in given.items() if isinstance(value, str))
        if texts:
            lease_s, poll, beat = 30.0, 5.0, 10.0  # placeholders until read()
        else:
            lease_s, poll, beat = _timing(lease, poll_interval, heartbeat_interval, {})
        batch = _args.integer(batch_size, "batch_size", minimum=1)
        if batch is not None and batch > 10_000:
            raise ValueError(f"batch_size: at most 10000, got {batch}")
        if not isinstance(transactional, bool):
            raise TypeError(f"transactional: expected a bool, got {type(transactional).__name__}")
        is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)
        )
        if payload_type is None:
            payload_type = _declared_payload_type(handler)
        return cls(
            queue=queue,
            handler=handler,
            is_async=is_async,
            concurrency=concurrency,
            lease=lease_s,
            batch_size=batch or concurrency,
            poll_interval=poll,
            heartbeat_interval=beat,
            transactional=transactional,
            payload_type=payload_type,
            texts=texts,
            options=(lease, poll_interval, heartbeat_interval),
        )

    def read(self, seconds: dict[str, float]) -> "TaskSpec":
        """This spec with its durations given as text replaced by ``seconds``
        (what the server read each text as, by the text), checked as numbers
        are (ValueError naming the option)."""
        if not self.texts:
            return self
        lease, poll, beat = _timing(*self.options, seconds)
        return dataclasses.replace(self, lease=lease, poll_interval=poll, heartbeat_interval=beat, texts=())

    def with_concurrency(self, concurrency: int) -> "TaskSpec":
        return dataclasses.replace(self, concurrency=concurrency, batch_size=min(self.batch_size, concurrency))


def _timing(lease: Any, poll_interval: Any, heartbeat_interval: Any,
            read: dict[str, float]) -> tuple[float, float, float]:
    """lease, poll_interval and heartbeat_interval in seconds, checked; a text
    is taken from ``read`` (its seconds as the server read it)."""

    def secs(value: Any, name: str) -> float:
        if isinstance(value, str):
            return _args.check_read(read[value], value, name, positive=True)
        return _args.seconds(value, name)

    def shown(value: Any, seconds: float) -> str:
        return f"{value!r} ({seconds:g} s)" if isinstance(value, str) else repr(value)

    lease_s = secs(lease, "lease")
    if lease_s < 1:
        raise ValueError(f"lease: at least 1 second, got {shown(lease, lease_s)}")
    poll = secs(poll_interval, "poll_interval")
    beat = lease_s / 3 if heartbeat_interval is None else secs(heartbeat_interval, "heartbeat_interval")
    if beat >= lease_s:
        raise ValueError(f"heartbeat_interval: must be shorter than the lease ({lease_s:g} s), "
                         f"got {shown(heartbeat_interval, beat)}")
    return lease_s, poll, beat


def _declared_payload_type(handler: Callable[..., Any]) -> Any:
    """``X`` from a first parameter annotated ``Task[X]`` or ``AsyncTask[X]``, else None."""
    try:
        hints = typing.get_type_hints(handler)
        first = next(iter(inspect.signature(handler).parameters))
    except Exception:  # unresolvable annotations, builtins, no parameters
        return None
    hint = hints.get(first)
    if typing.get_origin(hint) in (Task, AsyncTask):
        (payload_type,) = typing.get_args(hint)
        return None if isinstance(payload_type, typing.TypeVar) else payload_type
    return None
