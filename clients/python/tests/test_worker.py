"""The worker runtime in this process: handlers, outcomes, heartbeats, wake-ups."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time

import pytest

from aedb_queue import App, AsyncTask, Complete, DeadLetter, FollowUp, Retry, Task, enqueue, enqueue_batch
from helpers import tag, completed, configure, live, running, states, task_row, wait_until


def app_for(cluster, role: str = "app_service", **kwargs) -> App:
    return App(cluster.dsn(role), **kwargs)


# -- typed payloads -----------------------------------------------------------


@dataclasses.dataclass
class Address:
    city: str
    zip: str | None = None


@dataclasses.dataclass
class Signup:
    email: str
    address: Address
    tags: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Welcome:
    sent_to: str
    city: str


def test_typed_payloads_sync_async_and_pydantic(cluster, admin, producer, su, queue):
    pydantic = pytest.importorskip("pydantic")

    class Invoice(pydantic.BaseModel):
        number: int
        total: float

    seen: dict[str, object] = {}
    q_sync, q_async, q_model = f"{queue}_s", f"{queue}_a", f"{queue}_m"
    for q in (q_sync, q_async, q_model):
        configure(admin, q, keep_completed="1 hour")
    app = app_for(cluster)

    @app.task(q_sync, poll_interval=0.2)
    def welcome(task: Task[Signup]) -> Welcome:  # payload type read from the annotation
        seen["sync"] = task.payload
        return Welcome(sent_to=task.payload.email, city=task.payload.address.city)

    @app.task(q_async, payload_type=Signup, poll_interval=0.2)
    async def welcome_async(task):
        assert isinstance(task, AsyncTask)
        seen["async"] = task.payload
        return {"raw": task.raw_payload}

    @app.task(q_model, payload_type=Invoice, poll_interval=0.2)
    async def bill(task):
        seen["model"] = task.payload
        return task.payload

    signup = Signup("ada@example.com", Address("Berlin"), ["vip"])
    a = enqueue(producer, q_sync, signup)
    b = enqueue(producer, q_async, signup)
    c = enqueue(producer, q_model, Invoice(number=7, total=12))
    bad = enqueue(producer, q_sync, {"email": "x", "address": {"town": "nowhere"}})
    with running(app):
        wait_until(lambda: completed(su, a.task_id) and completed(su, b.task_id) and completed(su, c.task_id)
                   and (task_row(su, bad.task_id) or {}).get("state") == "dead", 60, "typed tasks handled")
    assert seen["sync"] == signup and isinstance(seen["sync"].address, Address)
    assert seen["async"] == signup
    assert seen["model"] == Invoice(number=7, total=12.0)
    assert completed(su, a.task_id)["result"] == {"sent_to": "ada@example.com", "city": "Berlin"}
    assert completed(su, b.task_id)["result"] == {"raw": {"email": "ada@example.com",
                                                          "address": {"city": "Berlin", "zip": None},
                                                          "tags": ["vip"]}}
    assert completed(su, c.task_id)["result"] == {"number": 7, "total": 12.0}
    # a payload that cannot be a Signup is dead-lettered at once, saying why
    row = task_row(su, bad.task_id)
    assert row["attempts"] == 1
    assert "does not decode" in row["last_error"] and "town" in row["last_error"]


# -- outcomes -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_retry_dead_letter_and_failures(cluster, admin, producer, su, queue, kind):
    configure(admin, queue, keep_completed="1 hour", backoff_base="200 milliseconds")
    app = app_for(cluster)

    def decide(task):
        what = task.payload["do"]
        if what == "retry" and task.attempts == 1:
            raise Retry(in_=0.1)
        if what == "later":
            raise Retry("not yet", in_=3600)
        if what == "dead":
            raise DeadLetter("address bounced")
        if what == "boom":
            raise ValueError(f"boom on attempt {task.attempts}")
        return {"attempt": task.attempts}

    if kind == "sync":
        app.task(queue, poll_interval=0.2)(decide)
    else:

        @app.task(queue, poll_interval=0.2)
        async def handle(task):
            return decide(task)

    retry = enqueue(producer, queue, {"do": "retry"})
    dead = enqueue(producer, queue, {"do": "dead"}, max_attempts=5)
    boom = enqueue(producer, queue, {"do": "boom"}, max_attempts=2)
    later = enqueue(producer, queue, {"do": "later"})
    with running(app):
        wait_until(lambda: completed(su, retry.task_id) and live(su, queue) == 3
                   and states(su, queue).get("dead") == 2 and states(su, queue).get("scheduled") == 1,
                   60, "every outcome settled")
    # Retry(in_=3600) replaced the queue's 200 ms backoff
    wait_s = su.execute("SELECT extract(epoch FROM not_before - now()) FROM aedb_queue.task WHERE task_id = %s",
                        (later.task_id,)).fetchone()[0]
    assert 3500 < wait_s <= 3600
    assert task_row(su, later.task_id)["last_error"] == "Retry: not yet"
    assert completed(su, retry.task_id)["result"] == {"attempt": 2}
    dead_row = task_row(su, dead.task_id)
    assert (dead_row["state"], dead_row["attempts"]) == ("dead", 1)
    assert dead_row["last_error"] == "DeadLetter: address bounced"
    boom_row = task_row(su, boom.task_id)
    assert (boom_row["state"], boom_row["attempts"]) == ("dead", 2)  # retried with backoff, then out of attempts
    assert boom_row["last_error"] == "ValueError: boom on attempt 2"


def test_checkpoint_progress_reaches_the_next_attempt(cluster, admin, producer, su, queue):
    configure(admin, queue, keep_completed="1 hour")
    app = app_for(cluster)
    seen = []

    @app.task(queue, poll_interval=0.2)
    def resumable(task):
        seen.append((task.attempts, task.progress))
        if task.attempts == 1:
            assert task.checkpoint({"step": 3}) is True
            raise Retry(in_=0)
        return {"resumed_from": task.progress}

    t = enqueue(producer, queue, {})
    with running(app):
        wait_until(lambda: completed(su, t.task_id), 60, "resumed task completed")
    assert seen == [(1, None), (2, {"step": 3})]
    assert completed(su, t.task_id)["result"] == {"resumed_from": {"step": 3}}


def test_follow_ups_are_enqueued_with_the_completion(cluster, admin, producer, su, queue):
    nxt = f"{queue}_next"
    configure(admin, queue, keep_completed="1 hour")
    app = app_for(cluster)

    @app.task(queue, poll_interval=0.2)
    async def first(task):
        return Complete(result={"ok": True},
                        follow_ups=[FollowUp(nxt, {"from": task.task_id}, delay=0, priority=3)])

    t = enqueue(producer, queue, {})
    with running(app):
        wait_until(lambda: completed(su, t.task_id), 60, "first step completed")
    rows = su.execute("SELECT payload, priority, state::text FROM aedb_queue.task WHERE queue = %s", (nxt,)).fetchall()
    assert rows == [({"from": t.task_id}, 3, "ready")]
    assert completed(su, t.task_id)["result"] == {"ok": True}


def test_result_that_does_not_encode_fails_the_task(cluster, producer, su, queue):
    app = app_for(cluster)

    @app.task(queue, poll_interval=0.2)
    def odd(task):
        return object()

    t = enqueue(producer, queue, {}, max_attempts=1)
    with running(app):
        wait_until(lambda: (task_row(su, t.task_id) or {}).get("state") == "dead", 60, "task failed")
    assert "result" in task_row(su, t.task_id)["last_error"]


# -- leases ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_heartbeats_keep_a_task_past_its_lease(cluster, admin, producer, su, queue, kind):
    """The handler runs until the test has seen its first lease run out on the
    server's clock (no guess at how long that takes on a loaded machine); the
    4 s lease lets a heartbeat (every 1.3 s) come late by more than 2 s."""
    configure(admin, queue, keep_completed="1 hour")
    app = app_for(cluster)
    release = threading.Event()
    if kind == "sync":

        @app.task(queue, lease=4, poll_interval=0.2)
        def slow(task):
            release.wait(120)
            return {"lease_lost": task.lease_lost}
    else:

        @app.task(queue, lease=4, poll_interval=0.2)
        async def slow(task):
            while not release.is_set():
                await asyncio.sleep(0.05)
            return {"lease_lost": task.lease_lost}

    t = enqueue(producer, queue, {})
    with running(app):
        try:
            wait_until(lambda: (task_row(su, t.task_id) or {}).get("state") == "in_flight", 60, "task claimed")
            first = su.execute("SELECT lease_deadline FROM aedb_queue.task WHERE task_id = %s",
                               (t.task_id,)).fetchone()[0]
            wait_until(lambda: su.execute("SELECT now() > %s", (first,)).fetchone()[0], 60, "past the first lease")
            row = task_row(su, t.task_id)
            assert (row["state"], row["attempts"]) == ("in_flight", 1)
            lease_left = su.execute("SELECT lease_deadline > now() FROM aedb_queue.task WHERE task_id = %s",
                                    (t.task_id,)).fetchone()[0]
            assert lease_left, "the lease was not extended"
            with cluster.connect("app_worker", autocommit=True) as other:  # a competing worker gets nothing
                assert other.execute("SELECT count(*) FROM aedb_queue.queue_claim(%s, 'competitor')",
                                     (queue,)).fetchone()[0] == 0
        finally:
            release.set()
        wait_until(lambda: completed(su, t.task_id), 60, "slow task completed")
    done = completed(su, t.task_id)
    assert done["attempts"] == 1 and done["result"] == {"lease_lost": False}


def test_lease_lost_result_is_dropped_and_logged(cluster, admin, producer, su, queue, caplog):
    configure(admin, queue, keep_completed="1 hour")
    app = app_for(cluster)

    @app.task(queue, poll_interval=0.2)
    def loses_its_task(task):
        with cluster.connect("app_admin", autocommit=True) as conn:  # someone cancels it meanwhile
            conn.execute("SELECT aedb_queue.queue_cancel(%s, %s)", (task.queue, task.task_id))
        return {"done": True}

    t = enqueue(producer, queue, {})
    with caplog.at_level(logging.WARNING, logger="aedb_queue"):
        with running(app):
            wait_until(lambda: any("lease lost" in r.getMessage() for r in caplog.records), 60, "lease_lost logged")
    assert completed(su, t.task_id) is None and task_row(su, t.task_id) is None


# -- transactional handlers -----------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_transactional_writes_commit_iff_the_completion_applies(cluster, admin, producer, su, queue, kind):
    configure(admin, queue, keep_completed="1 hour")
    app = app_for(cluster)
    insert = "INSERT INTO ledger (queue, task_id, worker, attempt) VALUES (%s, %s, 'tx', %s)"

    def after_write(task):
        do = task.payload["do"]
        if do == "lose":  # the lease is lost before the commit: another worker owns it now
            with cluster.connect("app_admin", autocommit=True) as conn:
                conn.execute("SELECT aedb_queue.queue_cancel(%s, %s)", (task.queue, task.task_id))
        if do == "fail_once" and task.attempts == 1:
            raise RuntimeError("after writing")
        return {"attempt": task.attempts}

    if kind == "sync":

        @app.task(queue, transactional=True, poll_interval=0.2)
        def handle(task, conn):
            conn.execute(insert, (task.queue, task.task_id, task.attempts))
            return after_write(task)
    else:

        @app.task(queue, transactional=True, poll_interval=0.2)
        async def handle(task, conn):
            await conn.execute(insert, (task.queue, task.task_id, task.attempts))
            return after_write(task)

    ok = enqueue(producer, queue, {"do": "ok"})
    lose = enqueue(producer, queue, {"do": "lose"})
    fail_once = enqueue(producer, queue, {"do": "fail_once"}, max_attempts=3, backoff_base=0.1)
    with running(app):
        wait_until(lambda: completed(su, ok.task_id) and completed(su, fail_once.task_id)
                   and live(su, queue) == 0, 60, "tasks settled")
    ledger = su.execute("SELECT task_id, attempt FROM ledger WHERE queue = %s ORDER BY task_id, attempt",
                        (queue,)).fetchall()
    # the lost one left no write; the failed attempt's write was rolled back
    assert ledger == [(ok.task_id, 1), (fail_once.task_id, 2)]
    assert completed(su, fail_once.task_id)["result"] == {"attempt": 2}
    assert completed(su, lose.task_id) is None


# -- the loop -------------------------------------------------------------------


def test_busy_queue_claims_in_batches_and_settles_and_claims_in_one_call(cluster, admin, producer, su, queue):
    """Function-call counts (track_functions = all): a busy queue is drained
    mostly by queue_complete_and_claim, with few separate claims."""
    n = 300
    app = app_for(cluster, owner_id=f"counting-{queue}")

    @app.task(queue, concurrency=4, poll_interval=0.2)
    def noop(task):
        return None

    def calls() -> dict[str, int]:
        su.execute("SELECT pg_stat_clear_snapshot()")
        return dict(su.execute(
            "SELECT funcname, calls FROM pg_stat_user_functions WHERE schemaname = 'aedb_queue'").fetchall())

    for start in range(0, n, 100):
        enqueue_batch(producer, queue, [{"i": i} for i in range(start, start + 100)])
    before = calls()
    with running(app):
        wait_until(lambda: live(su, queue) == 0, 60, "queue drained")
    # the App's connections are closed now, which flushes their statistics
    def delta():
        after = calls()
        return {f: after.get(f, 0) - before.get(f, 0)
                for f in ("queue_claim", "queue_complete", "queue_complete_and_claim")}

    d = wait_until(lambda: (lambda d: d if sum(d.values()) >= n else None)(delta()), 60, "stats flushed")
    assert d["queue_complete_and_claim"] + d["queue_complete"] == n
    assert d["queue_complete_and_claim"] >= n * 0.8, d
    assert d["queue_claim"] <= n * 0.1, d


def test_listen_wakes_the_worker_long_before_the_poll(cluster, admin, producer, su, queue):
    configure(admin, queue, notify=True, keep_completed="1 hour")
    app = app_for(cluster, application_name=f"listen-{tag(queue)}")

    # A poll far beyond the bounds below: only the notification can be in time.
    @app.task(queue, poll_interval=600)
    def handle(task):
        return None

    first = enqueue(producer, queue, {})
    with running(app):
        wait_until(lambda: completed(su, first.task_id), 60, "first task (initial claim)")
        wait_until(lambda: su.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND query = 'LISTEN aedb_queue'",
            (f"listen-{tag(queue)} listener",)).fetchone()[0], 60, "listener connected")
        time.sleep(0.5)  # the initial claim cycle is over; the next poll is 600 s away
        second = enqueue(producer, queue, {})
        wait_until(lambda: completed(su, second.task_id), 60, "woken by NOTIFY, not by the 600 s poll")


def test_bad_task_options_name_the_option(cluster):
    app = app_for(cluster)
    cases = [
        ({"concurrency": 0}, ValueError, "concurrency"),
        ({"concurrency": "8"}, TypeError, "concurrency"),
        ({"lease": 0}, ValueError, "lease"),
        ({"lease": 0.5}, ValueError, "lease"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"poll_interval": -1}, ValueError, "poll_interval"),
        ({"lease": 3, "heartbeat_interval": 3}, ValueError, "heartbeat_interval"),
        ({"transactional": "yes"}, TypeError, "transactional"),
    ]
    for kwargs, error, name in cases:
        with pytest.raises(error, match=f"^{name}"):
            app.task("q", **kwargs)(lambda task: None)
    with pytest.raises(ValueError, match="^queue"):
        app.task("")
    app.task("q")(lambda task: None)
    with pytest.raises(ValueError, match="^queue: 'q' already"):
        app.task("q")
    with pytest.raises(ValueError, match="^queues"):
        app.run(queues=["nope"], handle_signals=False)
    with pytest.raises(TypeError, match="^conninfo"):
        App(None)
    with pytest.raises(ValueError, match="^in_"):
        Retry(in_=-1)
