"""The producer API on the caller's own connection: the outbox, batches, keys, errors."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import re
import uuid

import psycopg
import pytest
from psycopg.rows import dict_row

from aedb_queue import PayloadError, aenqueue, aenqueue_batch, enqueue, enqueue_batch
from helpers import task_row


def test_outbox_task_exists_iff_the_transaction_commits(cluster, su, queue):
    with cluster.connect("app_service") as conn:  # not autocommit: a transaction is open
        with conn.transaction():
            order = conn.execute("INSERT INTO orders (email) VALUES ('ada@example.com') RETURNING id").fetchone()[0]
            kept = enqueue(conn, queue, {"order_id": order})
        with pytest.raises(RuntimeError):
            with conn.transaction():
                conn.execute("INSERT INTO orders (email) VALUES ('bob@example.com')")
                dropped = enqueue(conn, queue, {"order_id": -1})
                raise RuntimeError("the application changes its mind")
    assert task_row(su, kept.task_id)["state"] == "ready"
    assert task_row(su, dropped.task_id) is None
    payloads = su.execute("SELECT payload FROM aedb_queue.task WHERE queue = %s", (queue,)).fetchall()
    assert payloads == [({"order_id": order},)]
    assert su.execute("SELECT count(*) FROM orders WHERE email = 'bob@example.com'").fetchone()[0] == 0


def test_enqueue_is_invisible_to_others_until_commit(cluster, su, queue):
    with cluster.connect("app_producer") as conn:
        result = enqueue(conn, queue, {"n": 1})
        assert task_row(su, result.task_id) is None  # another session sees nothing yet
        conn.commit()
    assert task_row(su, result.task_id)["state"] == "ready"


def test_async_outbox_commit_and_rollback(cluster, su, queue):
    async def main():
        async with await psycopg.AsyncConnection.connect(cluster.dsn("app_producer")) as conn:
            async with conn.transaction():
                kept = await aenqueue(conn, queue, {"n": 1})
                batch = await aenqueue_batch(conn, queue, [{"n": 2}, {"n": 3}])
            try:
                async with conn.transaction():
                    dropped = await aenqueue(conn, queue, {"n": 4})
                    raise KeyError("roll back")
            except KeyError:
                pass
            return kept, batch, dropped

    kept, batch, dropped = asyncio.run(main())
    assert not kept.deduplicated
    assert [task_row(su, t)["state"] for t in [kept.task_id, *batch]] == ["ready"] * 3
    assert task_row(su, dropped.task_id) is None


def test_batch_ids_in_payload_order_with_shared_options(producer, su, queue):
    ids = enqueue_batch(producer, queue, [{"i": i} for i in range(5)], priority=7, delay=3600, max_attempts=2)
    assert len(ids) == 5 and ids == sorted(ids)
    rows = su.execute("SELECT task_id, payload, priority, max_attempts, state::text FROM aedb_queue.task "
                      "WHERE queue = %s ORDER BY task_id", (queue,)).fetchall()
    assert [(r[0], r[1]["i"], r[2], r[3], r[4]) for r in rows] == [
        (t, i, 7, 2, "scheduled") for i, t in enumerate(ids)]
    assert enqueue_batch(producer, queue, []) == []


def test_idempotency_key_dedups(producer, queue):
    first = enqueue(producer, queue, {"n": 1}, idempotency_key="receipt-1")
    second = enqueue(producer, queue, {"n": 2}, idempotency_key="receipt-1")
    assert (first.deduplicated, second.deduplicated) == (False, True)
    assert second.task_id == first.task_id


def test_wait_for_and_keys(producer, su, queue):
    parent = enqueue(producer, queue, {"step": 1})
    child = enqueue(producer, queue, {"step": 2}, wait_for=[parent.task_id], fairness_key="tenant-7")
    keyed = enqueue(producer, queue, {"step": 3}, ordering_key="account-7")
    assert task_row(su, child.task_id)["state"] == "waiting"
    assert task_row(su, keyed.task_id)["state"] == "ready"


def test_caller_row_factory_does_not_matter(cluster, su, queue):
    with cluster.connect("app_producer", autocommit=True, row_factory=dict_row) as conn:
        result = enqueue(conn.cursor(), queue, {"n": 1})
        [batch_id] = enqueue_batch(conn, queue, [{"n": 2}])
    assert isinstance(result.task_id, int) and task_row(su, result.task_id) is not None
    assert task_row(su, batch_id) is not None


@dataclasses.dataclass
class Address:
    city: str


@dataclasses.dataclass
class Signup:
    email: str
    at: dt.datetime
    ref: uuid.UUID
    address: Address


def test_dataclass_and_pydantic_payloads_are_stored_as_json(producer, su, queue):
    pydantic = pytest.importorskip("pydantic")

    class Invoice(pydantic.BaseModel):
        number: int
        lines: list[str]

    ref = uuid.UUID(int=7)
    at = dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.timezone.utc)
    a = enqueue(producer, queue, Signup("ada@example.com", at, ref, Address("Berlin")))
    b = enqueue(producer, queue, Invoice(number=12, lines=["x"]))
    assert task_row(su, a.task_id) is not None
    payloads = dict(su.execute("SELECT task_id, payload FROM aedb_queue.task WHERE queue = %s", (queue,)).fetchall())
    assert payloads[a.task_id] == {"email": "ada@example.com", "at": "2026-12-01T09:30:00+00:00",
                                   "ref": str(ref), "address": {"city": "Berlin"}}
    assert payloads[b.task_id] == {"number": 12, "lines": ["x"]}


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        ({"queue": ""}, ValueError, "queue"),
        ({"queue": 5}, TypeError, "queue"),
        ({"queue": "x" * 129}, ValueError, "queue"),
        ({"delay": -1}, ValueError, "delay"),
        ({"delay": b"5 minutes"}, TypeError, "delay"),
        ({"delay": "5 fortnights"}, ValueError, "delay"),
        ({"backoff_base": "1 minute", "backoff_max": "5 seconds"}, ValueError, "backoff_max"),
        ({"priority": 1.5}, TypeError, "priority"),
        ({"priority": True}, TypeError, "priority"),
        ({"max_attempts": 0}, ValueError, "max_attempts"),
        ({"backoff_base": 10, "backoff_max": 5}, ValueError, "backoff_max"),
        ({"idempotency_key": ""}, ValueError, "idempotency_key"),
        ({"wait_for": [1, "2"]}, TypeError, "wait_for[1]"),
        ({"wait_for": "12"}, TypeError, "wait_for"),
        ({"on_parent_failure": "ignore"}, ValueError, "on_parent_failure"),
        ({"concurrency_key": "a", "ordering_key": "b"}, ValueError, "concurrency_key"),
        ({"payload": object()}, PayloadError, "payload"),
        ({"payload": float("nan")}, PayloadError, "payload"),
    ],
)
def test_bad_arguments_name_the_argument(producer, kwargs, error, text):
    kwargs = {"queue": "q", "payload": {}, **kwargs}
    with pytest.raises(error, match="^" + re.escape(text)):
        enqueue(producer, kwargs.pop("queue"), kwargs.pop("payload"), **kwargs)


def test_bad_batch_and_connection_arguments(cluster, producer):
    with pytest.raises(TypeError, match="^payloads"):
        enqueue_batch(producer, "q", {"not": "a list"})
    with pytest.raises(PayloadError, match=r"^payloads\[1\]"):
        enqueue_batch(producer, "q", [{}, {1, object()}])
    with pytest.raises(ValueError, match="^payloads"):
        enqueue_batch(producer, "q", [{}] * 10_001)
    with pytest.raises(TypeError, match="^conn"):
        enqueue("postgresql://nowhere", "q", {})

    async def wrong_kind():
        async with await psycopg.AsyncConnection.connect(cluster.dsn("app_producer")) as conn:
            with pytest.raises(TypeError, match="^conn: enqueue.*aenqueue"):
                enqueue(conn, "q", {})
        with pytest.raises(TypeError, match="^conn"):
            await aenqueue(producer, "q", {})

    asyncio.run(wrong_kind())


def test_server_errors_surface_as_psycopg_errors(cluster, queue):
    # The extension is the authority: a role without producer rights is refused (42501).
    with cluster.connect("app_worker", autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            enqueue(conn, queue, {})
