"""Producer API: enqueue on the caller's own connection, inside the caller's transaction.

Nothing here commits. On a psycopg connection that is not in autocommit
mode (psycopg's default) the task is part of the transaction in progress:
it exists if and only if that transaction commits (the outbox). In
autocommit mode each call is its own transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any, NamedTuple

import psycopg
from psycopg.rows import tuple_row

from . import args as _args
from . import sql
from .payloads import to_jsonb

MAX_BATCH = 10_000


class Enqueued(NamedTuple):
    task_id: int
    deduplicated: bool
    """True if the idempotency key was already taken: ``task_id`` is the first task's."""


def _options(
    *,
    delay: Any,
    priority: Any,
    max_attempts: Any,
    backoff_base: Any,
    backoff_max: Any,
    wait_for: Any,
    on_parent_failure: Any,
    concurrency_key: Any,
    ordering_key: Any,
    fairness_key: Any,
) -> dict[str, Any]:
    base = _args.duration_or_text(backoff_base, "backoff_base", positive=True)
    ceiling = _args.duration_or_text(backoff_max, "backoff_max", positive=True)
    if isinstance(base, timedelta) and isinstance(ceiling, timedelta) and ceiling < base:
        raise ValueError("backoff_max: must not be less than backoff_base")
    concurrency, ordering, fairness = _args.flow_keys(concurrency_key, ordering_key, fairness_key)
    return {
        "delay": _args.duration_or_text(delay, "delay") or timedelta(0),
        "priority": _args.integer(priority, "priority") or 0,
        "max_attempts": _args.integer(max_attempts, "max_attempts", minimum=1),
        "backoff_base": base,
        "backoff_max": ceiling,
        "wait_for": _args.task_ids(wait_for),
        "on_parent_failure": _args.on_parent_failure(on_parent_failure),
        "concurrency_key": concurrency,
        "ordering_key": ordering,
        "fairness_key": fairness,
    }


def check_options(**options: Any) -> None:
    """The checks ``enqueue`` makes of its options, before a round trip (``task.Child``)."""
    _options(**options)


# The durations of an enqueue; a str is the server's to read (interval input).
_DURATIONS = ("delay", "backoff_base", "backoff_max")


def _texts(params: dict[str, Any]) -> list[tuple[str, str]]:
    """The durations given as text: (argument, text)."""
    return [(name, params[name]) for name in _DURATIONS if isinstance(params[name], str)]


def _check_read(params: dict[str, Any], read: dict[str, float]) -> None:
    """The checks of ``_options`` on the seconds the server read the texts as."""
    for name, secs in read.items():
        _args.check_read(secs, params[name], name, positive=name != "delay")
    seconds = {name: read[name] if name in read else value.total_seconds()
               for name in ("backoff_base", "backoff_max")
               if (value := params[name]) is not None}
    if len(seconds) == 2 and seconds["backoff_max"] < seconds["backoff_base"]:
        raise ValueError(f"backoff_max: must not be less than backoff_base "
                         f"(got {params['backoff_max']!r} and {params['backoff_base']!r})")


def _refused(arg: str, text: str, exc: psycopg.Error) -> ValueError:
    return _args.bad_text(arg, text, exc.diag.message_primary or str(exc))


def _read_durations(cur: psycopg.Cursor, params: dict[str, Any]) -> None:
    """The durations given as text, read by the server's interval input before
    anything is enqueued, inside a savepoint: a text it refuses is a ValueError
    naming the argument, and the caller's transaction goes on unharmed. The
    text itself is what the enqueue then sends, as an interval."""
    texts = _texts(params)
    if not texts:
        return
    read: dict[str, float] = {}
    arg, text = texts[0]
    try:
        with cur.connection.transaction():
            for arg, text in texts:
                row = cur.execute(_args.INTERVAL_SECONDS, (text,)).fetchone()
                assert row is not None
                read[arg] = row[0]
    except psycopg.errors.DataError as exc:  # SQLSTATE class 22: what interval input refuses
        raise _refused(arg, text, exc) from exc
    _check_read(params, read)


async def _aread_durations(cur: psycopg.AsyncCursor, params: dict[str, Any]) -> None:
    """:func:`_read_durations` on an AsyncCursor."""
    texts = _texts(params)
    if not texts:
        return
    read: dict[str, float] = {}
    arg, text = texts[0]
    try:
        async with cur.connection.transaction():
            for arg, text in texts:
                await cur.execute(_args.INTERVAL_SECONDS, (text,))
                row = await cur.fetchone()
                assert row is not None
                read[arg] = row[0]
    except psycopg.errors.DataError as exc:
        raise _refused(arg, text, exc) from exc
    _check_read(params, read)


def _enqueue_params(queue: str, payload: Any, idempotency_key: Any, **options: Any) -> dict[str, Any]:
    params = _options(**options)
    params["queue"] = _args.queue_name(queue)
    params["payload"] = to_jsonb(payload, "payload")
    params["idempotency_key"] = _args.text(idempotency_key, "idempotency_key")
    return params


def _batch_params(queue: str, payloads: Any, **options: Any) -> dict[str, Any]:
    if isinstance(payloads, (str, bytes, dict)) or not isinstance(payloads, Iterable):
        raise TypeError(f"payloads: expected a sequence of payloads, got {type(payloads).__name__}")
    items = list(payloads)
    if len(items) > MAX_BATCH:
        raise ValueError(f"payloads: at most {MAX_BATCH} per call, got {len(items)}")
    params = _options(**options)
    params["queue"] = _args.queue_name(queue)
    params["payloads"] = [to_jsonb(p, f"payloads[{i}]") for i, p in enumerate(items)]
    return params


def _cursor(conn: Any, name: str) -> psycopg.Cursor:
    """A tuple-row cursor on the caller's connection (so its transaction), whatever
    row factory the caller set."""
    if isinstance(conn, (psycopg.AsyncConnection, psycopg.AsyncCursor)):
        raise TypeError(f"conn: {name}() takes a psycopg Connection or Cursor; use a{name}() with an AsyncConnection")
    if isinstance(conn, psycopg.Cursor):
        conn = conn.connection
    if not isinstance(conn, psycopg.Connection):
        raise TypeError(f"conn: expected a psycopg Connection or Cursor, got {type(conn).__name__}")
    return conn.cursor(row_factory=tuple_row)


def _acursor(conn: Any, name: str) -> psycopg.AsyncCursor:
    if isinstance(conn, psycopg.AsyncCursor):
        conn = conn.connection
    if not isinstance(conn, psycopg.AsyncConnection):
        raise TypeError(f"conn: {name}() takes a psycopg AsyncConnection or AsyncCursor, got {type(conn).__name__}")
    return conn.cursor(row_factory=tuple_row)


def enqueue(
    conn: psycopg.Connection | psycopg.Cursor,
    queue: str,
    payload: Any = None,
    *,
    delay: _args.Duration | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    backoff_base: _args.Duration | None = None,
    backoff_max: _args.Duration | None = None,
    idempotency_key: str | None = None,
    wait_for: Sequence[int] | None = None,
    on_parent_failure: str | None = None,
    concurrency_key: str | None = None,
    ordering_key: str | None = None,
    fairness_key: str | None = None,
) -> Enqueued:
    """Enqueue one task on ``conn`` (in its current transaction) and return its id.

    ``payload`` is any JSON value, a dataclass or a pydantic model. Durations
    (``delay``, ``backoff_base``, ``backoff_max``) are seconds (int or float),
    timedeltas, or text written as in SQL (``"30 seconds"``, ``"1h30m"``,
    ``"500ms"``, ``"2 days"``): PostgreSQL's interval input reads the text,
    first in a savepoint (a text it refuses is a ValueError naming the
    argument, with the server's reason; nothing is enqueued and the caller's
    transaction goes on), then as the interval the enqueue sends.
    With ``idempotency_key``, a second enqueue of the key returns the first
    task's id with ``deduplicated=True``.
    """
    params = _enqueue_params(
        queue, payload, idempotency_key,
        delay=delay, priority=priority, max_attempts=max_attempts,
        backoff_base=backoff_base, backoff_max=backoff_max, wait_for=wait_for,
        on_parent_failure=on_parent_failure, concurrency_key=concurrency_key,
        ordering_key=ordering_key, fairness_key=fairness_key,
    )
    cur = _cursor(conn, "enqueue")
    with cur:
        _read_durations(cur, params)
        row = cur.execute(sql.ENQUEUE, params).fetchone()
    assert row is not None
    return Enqueued(row[0], row[1])


def enqueue_batch(
    conn: psycopg.Connection | psycopg.Cursor,
    queue: str,
    payloads: Iterable[Any],
    *,
    delay: _args.Duration | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    backoff_base: _args.Duration | None = None,
    backoff_max: _args.Duration | None = None,
    wait_for: Sequence[int] | None = None,
    on_parent_failure: str | None = None,
    concurrency_key: str | None = None,
    ordering_key: str | None = None,
    fairness_key: str | None = None,
) -> list[int]:
    """Enqueue one task per payload, with the same options, in one statement; ids in order.

    Options as for :func:`enqueue` (durations as text too)."""
    params = _batch_params(
        queue, payloads,
        delay=delay, priority=priority, max_attempts=max_attempts,
        backoff_base=backoff_base, backoff_max=backoff_max, wait_for=wait_for,
        on_parent_failure=on_parent_failure, concurrency_key=concurrency_key,
        ordering_key=ordering_key, fairness_key=fairness_key,
    )
    cur = _cursor(conn, "enqueue_batch")
    with cur:
        if not params["payloads"]:
            return []
        _read_durations(cur, params)
        return [row[0] for row in cur.execute(sql.ENQUEUE_BATCH, params).fetchall()]


async def aenqueue(
    conn: psycopg.AsyncConnection | psycopg.AsyncCursor,
    queue: str,
    payload: Any = None,
    *,
    delay: _args.Duration | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    backoff_base: _args.Duration | None = None,
    backoff_max: _args.Duration | None = None,
    idempotency_key: str | None = None,
    wait_for: Sequence[int] | None = None,
    on_parent_failure: str | None = None,
    concurrency_key: str | None = None,
    ordering_key: str | None = None,
    fairness_key: str | None = None,
) -> Enqueued:
    """:func:`enqueue` on a psycopg ``AsyncConnection``."""
    params = _enqueue_params(
        queue, payload, idempotency_key,
        delay=delay, priority=priority, max_attempts=max_attempts,
        backoff_base=backoff_base, backoff_max=backoff_max, wait_for=wait_for,
        on_parent_failure=on_parent_failure, concurrency_key=concurrency_key,
        ordering_key=ordering_key, fairness_key=fairness_key,
    )
    cur = _acursor(conn, "aenqueue")
    async with cur:
        await _aread_durations(cur, params)
        await cur.execute(sql.ENQUEUE, params)
        row = await cur.fetchone()
    assert row is not None
    return Enqueued(row[0], row[1])


async def aenqueue_batch(
    conn: psycopg.AsyncConnection | psycopg.AsyncCursor,
    queue: str,
    payloads: Iterable[Any],
    *,
    delay: _args.Duration | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    backoff_base: _args.Duration | None = None,
    backoff_max: _args.Duration | None = None,
    wait_for: Sequence[int] | None = None,
    on_parent_failure: str | None = None,
    concurrency_key: str | None = None,
    ordering_key: str | None = None,
    fairness_key: str | None = None,
) -> list[int]:
    """:func:`enqueue_batch` on a psycopg ``AsyncConnection``."""
    params = _batch_params(
        queue, payloads,
        delay=delay, priority=priority, max_attempts=max_attempts,
        backoff_base=backoff_base, backoff_max=backoff_max, wait_for=wait_for,
        on_parent_failure=on_parent_failure, concurrency_key=concurrency_key,
        ordering_key=ordering_key, fairness_key=fairness_key,
    )
    cur = _acursor(conn, "aenqueue_batch")
    async with cur:
        if not params["payloads"]:
            return []
        await _aread_durations(cur, params)
        await cur.execute(sql.ENQUEUE_BATCH, params)
        return [row[0] for row in await cur.fetchall()]


# -- events of durable workflows ----------------------------------------------


def _emit_params(queue: str, key: str, payload: Any) -> dict[str, Any]:
    return {"queue": _args.queue_name(queue), "key": _args.queue_name(key, "key"),
            "payload": to_jsonb(payload, "payload")}


def emit(conn: psycopg.Connection | psycopg.Cursor, queue: str, key: str, payload: Any = None) -> bool:
    """Emit the event ``key`` of ``queue`` on ``conn``, in its current transaction.

    Workflow tasks of ``queue`` waiting for it (``task.wait_for_event(name,
    key, timeout)``) become due when the transaction commits, and a wait
    that starts later finds it. True if this call emitted the event; False
    if it was emitted already (the first emit and its payload stand).
    ``payload`` is any JSON value, a dataclass or a pydantic model. Needs
    the producer right on the queue (``aedb_queue_producer``).
    """
    params = _emit_params(queue, key, payload)
    cur = _cursor(conn, "emit")
    with cur:
        row = cur.execute(sql.EMIT, params).fetchone()
    assert row is not None
    return bool(row[0])


async def aemit(conn: psycopg.AsyncConnection | psycopg.AsyncCursor, queue: str, key: str,
                payload: Any = None) -> bool:
    """:func:`emit` on a psycopg ``AsyncConnection``."""
    params = _emit_params(queue, key, payload)
    cur = _acursor(conn, "aemit")
    async with cur:
        await cur.execute(sql.EMIT, params)
        row = await cur.fetchone()
    assert row is not None
    return bool(row[0])
