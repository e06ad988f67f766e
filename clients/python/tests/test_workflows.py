"""Durable workflows: steps recorded once, sleeps and event waits that park the
task, emits, the strict step under a lost lease, a workflow worker
SIGKILLed at every point of its run, and children: spawned once, awaited
with their results, a dead child surfacing, a worker SIGKILLed around a spawn."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import threading
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from aedb_queue import App, Child, ChildFailed, ChildResult, DeadLetter, Event, Retry, emit, enqueue
from helpers import Worker, completed, configure, live, running, states, task_row, wait_until


def app_for(cluster, **kwargs) -> App:
    return App(cluster.dsn("app_service"), **kwargs)


def recorded_steps(su, task_id: int) -> list[str]:
    return [r[0] for r in su.execute("SELECT step FROM aedb_queue.task_step WHERE task_id = %s "
                                     "ORDER BY recorded_at, step", (task_id,)).fetchall()]


def parked(su, task_id: int) -> bool:
    row = task_row(su, task_id)
    return row is not None and row["state"] == "scheduled"


@dataclasses.dataclass
class Parcel:
    weight: int
    label: str


# -- steps ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_recorded_steps_are_not_run_again(cluster, admin, producer, su, queue, mode):
    """The first claim runs step a, then step b fails the attempt; the second
    claim gets a's recorded result without running it, and runs b."""
    configure(admin, queue, keep_completed="1 hour")
    calls: Counter[str] = Counter()

    def a() -> dict:
        calls["a"] += 1
        return {"a": calls["a"]}

    def b() -> Parcel:
        calls["b"] += 1
        if calls["b"] == 1:
            raise Retry("b failed once", in_=0)
        return Parcel(3, "fragile")

    app = app_for(cluster)
    if mode == "sync":
        @app.task(queue, poll_interval=0.2)
        def handle(task):
            ra = task.step("a", a)
            rb = task.step("b", b)
            again = task.step("a", a)  # the same name in one run: the recorded result
            return {"a": ra, "b": rb, "again": again, "attempt": task.attempts}
    else:
        @app.task(queue, poll_interval=0.2)
        async def handle(task):
            async def async_a() -> dict:
                return a()

            ra = await task.step("a", async_a)
            rb = await task.step("b", b)  # a plain function in an async handler is fine too
            again = await task.step("a", async_a)
            return {"a": ra, "b": rb, "again": again, "attempt": task.attempts}

    t = enqueue(producer, queue, {}).task_id
    with running(app):
        wait_until(lambda: completed(su, t), 30, "the workflow completed")
    assert completed(su, t)["result"] == {"a": {"a": 1}, "b": {"weight": 3, "label": "fragile"},
                                          "again": {"a": 1}, "attempt": 2}
    assert calls == {"a": 1, "b": 2}, "a recorded step ran again"
    assert recorded_steps(su, t) == ["a", "b"]


def test_workflow_calls_refuse_wrong_arguments_and_transactional_handlers(cluster, admin, producer, su, queue):
    q_plain, q_tx = f"{queue}_p", f"{queue}_t"
    for q in (q_plain, q_tx):
        configure(admin, q, keep_completed="1 hour")
    seen: dict[str, str] = {}
    app = app_for(cluster)

    def refused(what: str, call) -> None:
        try:
            call()
        except (RuntimeError, TypeError, ValueError) as exc:
            seen[what] = f"{type(exc).__name__}: {exc}"

    @app.task(q_plain, poll_interval=0.2)
    def plain(task):
        refused("name", lambda: task.sleep("", 1))
        refused("type", lambda: task.step(7, lambda: 1))
        refused("naive", lambda: task.sleep_until("s", datetime.now()))
        refused("timeout", lambda: task.wait_for_event("e", "k", 0))
        refused("key", lambda: task.wait_for_event("e", "", 1))
        return "ok"

    @app.task(q_tx, poll_interval=0.2, transactional=True)
    def in_tx(task, conn):
        refused("tx", lambda: task.step("a", lambda: 1))
        return "ok"

    a, b = enqueue(producer, q_plain, {}).task_id, enqueue(producer, q_tx, {}).task_id
    with running(app):
        wait_until(lambda: completed(su, a) and completed(su, b), 30, "completed")
    assert seen == {
        "name": "ValueError: name: must not be empty",
        "type": "TypeError: name: expected a str, got int",
        "naive": "ValueError: until: expected a timezone-aware datetime (a naive one is ambiguous)",
        "timeout": "ValueError: timeout: must be positive, got 0",
        "key": "ValueError: key: must not be empty",
        "tx": seen.get("tx", "missing"),
    }
    assert seen["tx"].startswith("RuntimeError: workflow steps") and "transactional=True" in seen["tx"]
    assert recorded_steps(su, a) == [] and recorded_steps(su, b) == []
    with pytest.raises(TypeError, match="conn: expected a psycopg Connection"):
        emit(object(), queue, "k")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="key: must not be empty"):
        emit(producer, queue, "")


# -- sleeps ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sleep_parks_without_counting_the_attempt_and_frees_the_slot(
        cluster, admin, producer, su, queue, mode, caplog):
    configure(admin, queue, keep_completed="1 hour")
    runs: list[int] = []
    before = Counter[str]()
    app = app_for(cluster)
    if mode == "sync":
        @app.task(queue, concurrency=1, poll_interval=0.2)
        def handle(task):
            if task.payload.get("plain"):
                return "plain"
            runs.append(task.attempts)
            task.step("before", lambda: before.update(["x"]))
            task.sleep("nap", "2 seconds")
            before.update(["after"])
            return "woke"
    else:
        @app.task(queue, concurrency=1, poll_interval=0.2)
        async def handle(task):
            if task.payload.get("plain"):
                return "plain"
            runs.append(task.attempts)
            await task.step("before", lambda: before.update(["x"]))
            await task.sleep_until("nap", datetime.now(timezone.utc) + timedelta(seconds=2))
            before.update(["after"])
            return "woke"

    t = enqueue(producer, queue, {}, max_attempts=1).task_id
    with caplog.at_level(logging.INFO, logger="aedb_queue"), running(app):
        wait_until(lambda: parked(su, t), 30, "the sleeping task parked")
        assert task_row(su, t)["attempts"] == 0, "parking counted the attempt"
        # concurrency 1: the parked workflow holds no slot
        plain = enqueue(producer, queue, {"plain": True}).task_id
        wait_until(lambda: completed(su, plain), 30, "a task ran while the workflow slept")
        assert completed(su, t) is None, "woke before its time"
        wait_until(lambda: completed(su, t), 30, "the workflow woke and completed")
    done = completed(su, t)
    assert done["result"] == "woke" and done["attempts"] == 1
    assert runs == [1, 1] and before == {"x": 1, "after": 1}, "a step ran again, or the handler went on while parked"
    assert recorded_steps(su, t) == ["before", "nap"]
    text = caplog.text
    assert f"#{t} (attempt 1) parked: sleeping until" in text
    assert f"#{t} (attempt 1) resumed: slept until" in text


# -- events --------------------------------------------------------------------------


def test_an_event_emitted_before_the_wait_ends_it_at_once(cluster, admin, producer, su, queue):
    configure(admin, queue, keep_completed="1 hour")
    runs: list[int] = []
    app = app_for(cluster)

    @app.task(queue, poll_interval=0.2)
    def handle(task):
        runs.append(task.attempts)
        event = task.wait_for_event("packed", "order-1/packed", timeout="1 hour")
        assert isinstance(event, Event)
        return dataclasses.asdict(event)

    assert emit(producer, queue, "order-1/packed", {"boxes": 2}) is True
    assert emit(producer, queue, "order-1/packed", {"boxes": 3}) is False, "a second emit changed something"
    t = enqueue(producer, queue, {}).task_id
    with running(app):
        wait_until(lambda: completed(su, t), 30, "completed")
    assert completed(su, t)["result"] == {"payload": {"boxes": 2}, "timed_out": False}
    assert runs == [1], "it parked although the event was there"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_emit_wakes_a_parked_waiter_when_its_transaction_commits(
        cluster, admin, producer, su, queue, mode, caplog):
    configure(admin, queue, keep_completed="1 hour")
    runs: list[int] = []
    key = f"{queue}/packed"
    app = app_for(cluster)
    if mode == "sync":
        @app.task(queue, poll_interval=0.2)
        def handle(task):
            runs.append(task.attempts)
            event = task.wait_for_event("packed", key, timeout="1 minute")
            runs.append(0)
            return {"payload": event.payload, "timed_out": event.timed_out}
    else:
        @app.task(queue, poll_interval=0.2)
        async def handle(task):
            runs.append(task.attempts)
            event = await task.wait_for_event("packed", key, timeout=60)
            runs.append(0)
            return {"payload": event.payload, "timed_out": event.timed_out}

    t = enqueue(producer, queue, {}).task_id
    with caplog.at_level(logging.INFO, logger="aedb_queue"), running(app):
        wait_until(lambda: parked(su, t), 30, "the waiter parked")
        assert task_row(su, t)["attempts"] == 0
        with psycopg.connect(cluster.dsn("app_producer")) as conn:  # the caller's transaction...
            assert emit(conn, queue, key, {"boxes": 2}) is True
            conn.rollback()  # ...rolled back: no event
        time.sleep(0.6)
        assert parked(su, t), "an emit that rolled back woke the waiter"
        with psycopg.connect(cluster.dsn("app_producer")) as conn:
            assert emit(conn, queue, key, {"boxes": 2}) is True
        wait_until(lambda: completed(su, t), 30, "the waiter woke and completed")
        assert emit(producer, queue, key, {"boxes": 9}) is False
    assert completed(su, t)["result"] == {"payload": {"boxes": 2}, "timed_out": False}
    assert runs == [1, 1, 0], "the handler went on while parked, or ran again after the event"
    assert f"parked: waiting for event '{key}' until" in caplog.text
    assert f"resumed: event '{key}' arrived (step 'packed')" in caplog.text


def test_a_wait_past_its_timeout_ends_timed_out(cluster, admin, producer, su, queue):
    configure(admin, queue, keep_completed="1 hour")
    app = app_for(cluster)

    @app.task(queue, poll_interval=0.2)
    def handle(task):
        event = task.wait_for_event("packed", "late", timeout="1 second")
        return {"payload": event.payload, "timed_out": event.timed_out}

    t = enqueue(producer, queue, {}).task_id
    with running(app):
        wait_until(lambda: completed(su, t), 30, "the wait timed out and the task completed")
    assert completed(su, t)["result"] == {"payload": None, "timed_out": True}
    assert emit(producer, queue, "late", {"boxes": 1}) is True  # emitted, but the wait is over
    assert completed(su, t)["result"]["timed_out"] is True


# -- a lost lease ----------------------------------------------------------------------


@pytest.mark.parametrize("mode,transactional", [("sync", True), ("async", True), ("sync", False)])
def test_a_step_whose_lease_was_lost_records_nothing_and_stops_the_handler(
        cluster, admin, producer, su, queue, mode, transactional, caplog):
    """While the step runs, its lease is expired (superuser) and the task
    reclaimed by another worker: the step's record is refused; a strict
    step's write rolls back with it; the handler stops and settles nothing."""
    configure(admin, queue, backoff_base="100 milliseconds", backoff_max="100 milliseconds")
    entered, go = threading.Event(), threading.Event()
    went_on: list[str] = []
    app = app_for(cluster)

    def write(conn):
        conn.execute("INSERT INTO ledger (queue, task_id, worker) VALUES (%s, %s, 'old')", (queue, 0))
        entered.set()
        go.wait(30)
        return "charged"

    def plain():
        entered.set()
        go.wait(30)
        return "charged"

    if mode == "sync":
        @app.task(queue, concurrency=1, poll_interval=0.2)
        def handle(task):
            task.step("charge", write if transactional else plain, transactional=transactional)
            went_on.append("after")
            return "done"
    else:
        @app.task(queue, concurrency=1, poll_interval=0.2)
        async def handle(task):
            async def awrite(conn):
                await conn.execute("INSERT INTO ledger (queue, task_id, worker) VALUES (%s, %s, 'old')",
                                   (queue, 0))
                entered.set()
                await asyncio.get_running_loop().run_in_executor(None, go.wait, 30)
                return "charged"

            await task.step("charge", awrite, transactional=True)
            went_on.append("after")
            return "done"

    t = enqueue(producer, queue, {}).task_id
    with caplog.at_level(logging.INFO, logger="aedb_queue"), running(app):
        assert entered.wait(30), "the step did not start"
        su.execute("UPDATE aedb_queue.task SET lease_deadline = now() - interval '1 second' WHERE task_id = %s",
                   (t,))
        with cluster.connect("app_worker", autocommit=True) as thief:
            # The first claim reaps the expired lease (a retry after the backoff); a later one takes it.
            stolen = wait_until(lambda: thief.execute(
                "SELECT task_id FROM aedb_queue.queue_claim(%s, 'thief', lease => '1 minute')", (queue,)).fetchall(),
                30, "the task reclaimed by another worker")
        assert stolen == [(t,)]
        go.set()
        wait_until(lambda: "charge" in caplog.text and "lease lost (step 'charge' not recorded)" in caplog.text,
                   30, "the old worker saw its lease lost")
        time.sleep(0.5)  # whatever the old worker would settle, it would have by now
    assert went_on == [], "the handler went on after its step's lease was lost"
    assert recorded_steps(su, t) == []
    assert su.execute("SELECT count(*) FROM ledger WHERE queue = %s", (queue,)).fetchone()[0] == 0, \
        "the strict step's write survived a lost lease"
    row = task_row(su, t)
    assert (row["state"], row["owner_id"]) == ("in_flight", "thief"), f"the old worker settled it: {row}"


# -- the key test: SIGKILL at every point ------------------------------------------------

POINTS = [
    "before-charge", "effect-charge", "after-charge",
    "parked-sleep",
    "before-label", "effect-label", "after-label",
    "parked-event", "after-event",
    "before-ship", "effect-ship", "after-ship",
]


class Run:
    """One workflow task of its own queue, driven through a worker killed at ``point``, then a rescuer."""

    def __init__(self, point: str, queue: str, task_id: int, dsn: str, tmp_path) -> None:
        self.point, self.queue, self.task_id = point, queue, task_id
        self.key = f"{queue}/{task_id}/packed"
        self.dsn, self.tmp_path = dsn, tmp_path
        self.emitted = False
        self.victim = self._worker(point)
        self.rescuer: Worker | None = None
        self.victim_output = ""
        self.done = False

    def _worker(self, kill: str) -> Worker:
        env = {"AEDB_TEST_QUEUE": self.queue, "AEDB_TEST_LEASE": "5"}
        if kill:
            env["AEDB_TEST_KILL"] = kill
        return Worker("apps.workflow_app:app", self.dsn, self.tmp_path, env=env)

    def advance(self, su, producer) -> None:
        if not self.emitted and su.execute("SELECT EXISTS (SELECT FROM aedb_queue.event_wait WHERE task_id = %s)",
                                           (self.task_id,)).fetchone()[0]:
            assert emit(producer, self.queue, self.key, {"boxes": 2}) is True
            self.emitted = True
        if self.rescuer is None:
            code = self.victim.proc.poll()
            if code is None:
                return
            self.victim_output = self.victim.output()
            assert code == -signal.SIGKILL, f"{self.point}: the victim exited {code}:\n{self.victim_output}"
            assert f"killed at {self.point}" in self.victim_output
            self.victim.close()
            # reclaimable at once rather than after the 5 s lease
            su.execute("UPDATE aedb_queue.task SET lease_deadline = now() - interval '1 second' "
                       "WHERE task_id = %s AND state = 'in_flight'", (self.task_id,))
            self.rescuer = self._worker("")
        elif not self.done and live(su, self.queue) == 0:
            self.rescuer.signal(signal.SIGTERM)
            assert self.rescuer.wait(30) == 0, self.rescuer.output()
            self.done = True

    def close(self) -> None:
        for w in (self.victim, self.rescuer):
            if w is not None:
                w.close()


def test_a_workflow_killed_at_every_point_does_each_step_exactly_once(cluster, admin, producer, su, queue, tmp_path):
    """charge -> sleep 1 s -> label -> wait for 'packed' -> ship, each step's
    ledger row written in the step's transaction; a worker SIGKILLs itself at
    each point in turn (each point a task and queue of its own, all at once),
    a rescuer finishes the workflow, and the event is emitted when it waits."""
    dsn = cluster.dsn("app_service")
    runs: list[Run] = []
    try:
        for point in POINTS:
            q = f"{queue}_{point.replace('-', '_')}"
            configure(admin, q, keep_completed="1 hour")
            runs.append(Run(point, q, enqueue(producer, q, {}).task_id, dsn, tmp_path))
        deadline = time.monotonic() + 90
        while not all(r.done for r in runs):
            for r in runs:
                r.advance(su, producer)
            if time.monotonic() > deadline:
                late = {r.point: (task_row(su, r.task_id), r.rescuer.output()[-1500:] if r.rescuer else
                                  r.victim.output()[-1500:]) for r in runs if not r.done}
                raise AssertionError(f"workflows not done in 90 s: {late}")
            time.sleep(0.1)
    finally:
        for r in runs:
            r.close()
    for r in runs:
        ledger = dict(su.execute("SELECT worker, count(*) FROM ledger WHERE queue = %s GROUP BY 1",
                                 (r.queue,)).fetchall())
        assert ledger == {"charge": 1, "label": 1, "ship": 1}, f"killed at {r.point}: ledger {ledger}"
        assert recorded_steps(su, r.task_id) == ["charge", "cool-off", "label", "packed", "ship"], r.point
        done = completed(su, r.task_id)
        assert done is not None, f"killed at {r.point}: not completed"
        assert done["result"] == {"steps": [{"done": "charge"}, {"done": "label"}, {"done": "ship"}],
                                  "packed": {"boxes": 2}}, r.point


# -- children ------------------------------------------------------------------------------


def waiting(su, task_id: int) -> bool:
    row = task_row(su, task_id)
    return row is not None and row["state"] == "waiting"


def kid_ids(su, queue: str) -> list[int]:
    """Every task ever enqueued into ``queue`` (live, or completed and kept), by id."""
    return [r[0] for r in su.execute(
        "SELECT task_id FROM aedb_queue.task WHERE queue = %s UNION ALL "
        "SELECT task_id FROM aedb_queue.completed_task WHERE queue = %s ORDER BY 1", (queue, queue)).fetchall()]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_children_fan_out_and_the_parent_resumes_with_their_results_in_order(
        cluster, admin, producer, su, queue, mode, caplog):
    """A workflow spawns six children (five in one batch, the last with
    options of its own), parks until a real worker has done them all (the
    last spawned ends first), and resumes with their results in the order it
    spawned them; the rerun after the wake gets the recorded ids and
    enqueues nothing."""
    kids, n = f"{queue}_kids", 6
    configure(admin, queue, keep_completed="1 hour")
    configure(admin, kids, keep_completed="1 hour")
    runs: list[int] = []
    spawns: list[list[int]] = []
    app = app_for(cluster)

    @app.task(kids, concurrency=n, poll_interval=0.2)
    def child(task):
        time.sleep(0.2 * (n - task.payload["n"]))  # the last spawned ends first; the parent parks for > 1 s
        return {"square": task.payload["n"] ** 2}

    def children() -> list:
        return [(kids, {"n": i}) for i in range(n - 1)] + [
            Child(kids, {"n": n - 1}, priority=5, idempotency_key=f"{queue}-last")]

    def summary(ids: list[int], results: list[ChildResult]) -> dict:
        return {"ids": ids, "order": [r.task_id for r in results], "states": [r.state for r in results],
                "squares": [r.result["square"] for r in results]}

    if mode == "sync":
        @app.task(queue, poll_interval=0.2)
        def parent(task):
            runs.append(task.attempts)
            ids = task.spawn("fan-out", children())
            spawns.append(ids)
            return summary(ids, task.wait_for_tasks("fan-in", ids))
    else:
        @app.task(queue, poll_interval=0.2)
        async def parent(task):
            runs.append(task.attempts)
            ids = await task.spawn("fan-out", children())
            spawns.append(ids)
            return summary(ids, await task.wait_for_tasks("fan-in", ids))

    t = enqueue(producer, queue, {}, max_attempts=1).task_id
    with caplog.at_level(logging.INFO, logger="aedb_queue"), running(app):
        wait_until(lambda: waiting(su, t), 30, "the workflow parked waiting for its children")
        assert task_row(su, t)["attempts"] == 0, "parking counted the attempt"
        wait_until(lambda: completed(su, t), 30, "the workflow resumed and completed")
    done = completed(su, t)
    ids = done["result"]["ids"]
    assert done["result"] == {"ids": ids, "order": ids, "states": ["completed"] * n,
                              "squares": [i * i for i in range(n)]}
    assert done["attempts"] == 1
    assert runs == [1, 1], "the workflow did not park, or ran again"
    assert spawns == [ids, ids], "the rerun after the wake did not get the recorded ids"
    assert kid_ids(su, kids) == sorted(ids), "a child was enqueued twice"
    assert states(su, kids) == {"completed": n}
    assert recorded_steps(su, t) == ["fan-out", "fan-in"]
    assert f"#{t} (attempt 1) spawned {n} task(s) (step 'fan-out')" in caplog.text
    assert f"#{t} (attempt 1) parked: waiting for {n} task(s) (step 'fan-in')" in caplog.text
    assert f"#{t} (attempt 1) resumed: the {n} task(s) it waited for ended: {n} completed (step 'fan-in')" \
        in caplog.text


def test_children_that_end_before_the_wait_are_kept_with_their_results(cluster, admin, producer, su, queue):
    """The children's queue keeps no completed tasks; they all end before
    the workflow waits (it does not park): the spawn linked them, so their
    results are there."""
    kids = f"{queue}_kids"
    configure(admin, queue, keep_completed="1 hour")
    runs: list[int] = []
    app = app_for(cluster)

    @app.task(kids, concurrency=3, poll_interval=0.2)
    def child(task):
        return task.payload

    @app.task(queue, poll_interval=0.2)
    def parent(task):
        runs.append(task.attempts)
        ids = task.spawn("spawn", [(kids, {"n": i}) for i in range(3)])
        with cluster.su() as conn:
            wait_until(lambda: live(conn, kids) == 0, 30, "the children ended")
        return [dataclasses.asdict(r) for r in task.wait_for_tasks("join", ids)]

    t = enqueue(producer, queue, {}).task_id
    with running(app):
        wait_until(lambda: completed(su, t), 30, "the workflow completed")
    results = completed(su, t)["result"]
    assert [(r["state"], r["result"], r["error"]) for r in results] == [
        ("completed", {"n": i}, None) for i in range(3)]
    assert runs == [1], "the workflow parked although its children had ended"


def test_a_dead_or_cancelled_child_surfaces_in_the_parent(cluster, admin, producer, su, queue):
    """Three workflows each spawn a child that completes, one that is
    dead-lettered and one cancelled while they wait: uncaught, ChildFailed
    dead-letters the workflow at once with what failed; caught, it carries
    every result; raise_on_failure=False returns them."""
    kids = f"{queue}_kids"
    configure(admin, queue, keep_completed="1 hour")
    app = app_for(cluster)

    @app.task(kids, concurrency=3, poll_interval=0.2)
    def child(task):
        if task.payload.get("fail"):
            raise DeadLetter("no such image")
        return {"n": task.payload["n"]}

    @app.task(queue, concurrency=3, poll_interval=0.2)
    def parent(task):
        ids = task.spawn("spawn", [Child(kids, {"n": 0}), Child(kids, {"n": 1, "fail": True}),
                                   Child(kids, {"n": 2}, delay="1 hour")])
        how = task.payload["how"]
        if how == "uncaught":
            task.wait_for_tasks("join", ids)
            return "went on"
        if how == "caught":
            try:
                task.wait_for_tasks("join", ids)
            except ChildFailed as exc:
                assert exc.step == "join" and isinstance(exc, DeadLetter)
                return {"failed": [r.task_id for r in exc.failed], "all": [r.state for r in exc.results],
                        "ids": ids, "message": str(exc)}
            return "not raised"
        return {"ids": ids, "results": [dataclasses.asdict(r) for r in
                                        task.wait_for_tasks("join", ids, raise_on_failure=False)]}

    wfs = {how: enqueue(producer, queue, {"how": how}).task_id for how in ("uncaught", "caught", "returned")}
    with running(app):
        wait_until(lambda: all(waiting(su, t) for t in wfs.values()), 30, "the workflows parked")
        wait_until(lambda: states(su, kids).get("dead") == 3, 30, "the failing children dead-lettered")
        assert all(waiting(su, t) for t in wfs.values()), "a workflow woke while a child was scheduled"
        delayed = [r[0] for r in su.execute("SELECT task_id FROM aedb_queue.task WHERE queue = %s "
                                            "AND state = 'scheduled'", (kids,)).fetchall()]
        assert len(delayed) == 3
        for kid in delayed:
            su.execute("SELECT aedb_queue.queue_cancel(%s, %s)", (kids, kid))
        wait_until(lambda: all(completed(su, t) or (task_row(su, t) or {}).get("state") == "dead"
                               for t in wfs.values()), 30, "the workflows ended")

    assert completed(su, wfs["uncaught"]) is None, \
        f"the workflow went on past a dead child: {completed(su, wfs['uncaught'])}"
    dead = task_row(su, wfs["uncaught"])
    assert (dead["state"], dead["attempts"]) == ("dead", 1), "ChildFailed did not dead-letter the workflow at once"
    assert dead["last_error"].startswith("ChildFailed: 2 of 3 task(s) awaited by step 'join' did not complete: task ")
    assert " dead (DeadLetter: no such image); task " in dead["last_error"]
    assert dead["last_error"].endswith(" missing")
    caught = completed(su, wfs["caught"])["result"]
    assert caught["failed"] == caught["ids"][1:] and caught["all"] == ["completed", "dead", "missing"]
    assert caught["message"] == (f"2 of 3 task(s) awaited by step 'join' did not complete: task {caught['ids'][1]} "
                                 f"dead (DeadLetter: no such image); task {caught['ids'][2]} missing")
    returned = completed(su, wfs["returned"])["result"]
    a, b, c = returned["ids"]
    assert returned["results"] == [
        {"task_id": a, "state": "completed", "result": {"n": 0}, "error": None},
        {"task_id": b, "state": "dead", "result": None, "error": "DeadLetter: no such image"},
        {"task_id": c, "state": "missing", "result": None, "error": None},
    ]


def test_a_spawn_refused_part_way_enqueues_nothing_and_bad_arguments_are_refused(
        cluster, admin, producer, su, queue):
    kids = f"{queue}_kids"
    configure(admin, queue, keep_completed="1 hour")
    configure(admin, kids, keep_completed="1 hour")
    seen: dict[str, str] = {}
    app = app_for(cluster)

    def refused(what: str, call) -> None:
        try:
            call()
        except (TypeError, ValueError) as exc:
            seen[what] = f"{type(exc).__name__}: {exc}"

    @app.task(queue, poll_interval=0.2)
    def parent(task):
        refused("children", lambda: task.spawn("s", "abc"))
        refused("item", lambda: task.spawn("s", [42]))
        refused("pair", lambda: task.spawn("s", [("", 1)]))
        refused("child", lambda: Child(kids, delay=-1))
        refused("ids", lambda: task.wait_for_tasks("w", ["x"]))
        # The first child is enqueued, then the server refuses the second's
        # delay: the spawn's transaction rolls back, the first child with it.
        refused("text", lambda: task.spawn("s", [Child(kids, {"n": 0}), Child(kids, {"n": 1}, delay="two fortnights")]))
        ids = task.spawn("s", [(kids, {"n": 0})])
        refused("same name", lambda: task.wait_for_tasks("s", ids))
        return ids

    t = enqueue(producer, queue, {}).task_id
    with running(app):
        wait_until(lambda: completed(su, t), 30, "completed")
    ids = completed(su, t)["result"]
    assert seen.pop("text").startswith("ValueError: delay: 'two fortnights' is not a duration PostgreSQL reads")
    assert seen == {
        "children": "TypeError: children: expected a sequence of Child or (queue, payload), got str",
        "item": "TypeError: children[0]: expected a Child or a (queue, payload) pair, got int",
        "pair": "ValueError: children[0]: Child.queue: must not be empty",
        "child": "ValueError: Child.delay: must not be negative, got -1",
        "ids": "TypeError: task_ids[0]: expected an int task id, got str",
        "same name": "ValueError: step 's' is recorded, but not as a wait for tasks: "
                     "give each step, spawn and wait a name of its own",
    }
    assert kid_ids(su, kids) == ids and len(ids) == 1, "the refused spawn left a child behind"
    assert recorded_steps(su, t) == ["s"]


CHILD_POINTS = ["mid-spawn", "after-spawn", "parked-wait", "after-wait"]


def test_a_worker_killed_around_a_spawn_spawns_each_child_exactly_once(cluster, admin, producer, su, queue, tmp_path):
    """apps/children_app.py: a workflow spawns four children and waits for
    them; its worker SIGKILLs itself at each point in turn (a workflow and
    queues of their own for each, all at once), a rescuer finishes. Each
    workflow had exactly four children, each done once."""
    dsn, n = cluster.dsn("app_service"), 4
    runs: dict[str, dict] = {}
    try:
        for point in CHILD_POINTS:
            q = f"{queue}_{point.replace('-', '_')}"
            configure(admin, q, keep_completed="1 hour")
            configure(admin, f"{q}_kids", keep_completed="1 hour")
            env = {"AEDB_TEST_QUEUE": q, "AEDB_TEST_LEASE": "5", "AEDB_TEST_CHILDREN": str(n)}
            runs[point] = {"queue": q, "env": env, "task_id": enqueue(producer, q, {}).task_id, "rescuer": None,
                           "victim": Worker("apps.children_app:app", dsn, tmp_path,
                                            env={**env, "AEDB_TEST_KILL": point})}
        deadline = time.monotonic() + 90
        while not all(completed(su, r["task_id"]) for r in runs.values()):
            for point, r in runs.items():
                if r["rescuer"] is None and r["victim"].proc.poll() is not None:
                    out = r["victim"].output()
                    assert r["victim"].proc.returncode == -signal.SIGKILL, f"{point}: the victim exited:\n{out}"
                    assert f"killed at {point}" in out
                    # the victim's tasks reclaimable at once rather than after the 5 s lease
                    su.execute("UPDATE aedb_queue.task SET lease_deadline = now() - interval '1 second' "
                               "WHERE queue IN (%s, %s) AND state = 'in_flight'", (r["queue"], r["queue"] + "_kids"))
                    r["rescuer"] = Worker("apps.children_app:app", dsn, tmp_path, env=r["env"])
            if time.monotonic() > deadline:
                late = {p: (task_row(su, r["task_id"]), (r["rescuer"] or r["victim"]).output()[-1500:])
                        for p, r in runs.items() if not completed(su, r["task_id"])}
                raise AssertionError(f"workflows not done in 90 s: {late}")
            time.sleep(0.1)
    finally:
        for r in runs.values():
            for w in (r["victim"], r["rescuer"]):
                if w is not None:
                    w.close()
    for point, r in runs.items():
        assert r["rescuer"] is not None, f"{point}: the victim finished its workflow, never killed there"
        kids = r["queue"] + "_kids"
        done = completed(su, r["task_id"])
        ids = done["result"]["ids"]
        assert done["result"] == {"ids": ids, "squares": [i * i for i in range(n)]}, point
        assert kid_ids(su, kids) == sorted(ids), f"killed at {point}: children {kid_ids(su, kids)}, spawned {ids}"
        ledger = su.execute("SELECT count(*), count(DISTINCT task_id) FROM ledger WHERE queue = %s",
                            (kids,)).fetchone()
        assert ledger == (n, n), f"killed at {point}: ledger {ledger}"
        assert recorded_steps(su, r["task_id"]) == ["spawn", "join"], point
