"""Durations written as in SQL ('30 seconds', '1h30m', '500ms'), read by
PostgreSQL's interval input: the producer's delay and backoffs, the App's
shutdown_timeout and a task's lease, poll_interval and heartbeat_interval,
and ``aedb-queue-worker --shutdown-timeout``."""

from __future__ import annotations

import asyncio
import datetime as dt
import pathlib
import subprocess
import sys

import psycopg
import pytest

from aedb_queue import App, StartupError, aenqueue, enqueue, enqueue_batch
from helpers import running, wait_until

HERE = pathlib.Path(__file__).resolve().parent
SCRIPT = pathlib.Path(sys.executable).parent / "aedb-queue-worker"

# (as given, seconds): text as in SQL, a bare number in a str is seconds; numbers and timedeltas as before.
ACCEPTED = [
    ("30 seconds", 30.0),
    ("1h30m", 5400.0),
    ("500ms", 0.5),
    ("2 days", 172_800.0),
    ("PT1H", 3600.0),
    ("1 minute 30 seconds", 90.0),
    ("90", 90.0),
    (45, 45.0),
    (2.5, 2.5),
    (dt.timedelta(minutes=5), 300.0),
]


def durations(su, task_id: int) -> tuple[float, float, float]:
    """(delay, backoff_base, backoff_max) of a task, in seconds."""
    return su.execute(
        "SELECT extract(epoch FROM not_before - created_at)::float8, extract(epoch FROM backoff_base)::float8, "
        "extract(epoch FROM backoff_max)::float8 FROM aedb_queue.task WHERE task_id = %s", (task_id,)).fetchone()


def count(su, queue: str) -> int:
    return su.execute("SELECT count(*) FROM aedb_queue.task WHERE queue = %s", (queue,)).fetchone()[0]


@pytest.mark.parametrize("given, seconds", ACCEPTED, ids=[repr(g) for g, _ in ACCEPTED])
def test_enqueue_takes_each_form_for_each_duration(producer, su, queue, given, seconds):
    delayed = enqueue(producer, queue, {}, delay=given).task_id
    delay, _, _ = durations(su, delayed)
    assert delay == pytest.approx(seconds, abs=0.01)
    backoffs = enqueue(producer, queue, {}, backoff_base=given, backoff_max=given).task_id
    _, base, ceiling = durations(su, backoffs)
    assert (base, ceiling) == (pytest.approx(seconds), pytest.approx(seconds))


def test_batch_and_async_enqueue_take_text(cluster, producer, su, queue):
    ids = enqueue_batch(producer, queue, [1, 2], delay="1h30m", backoff_base="2s", backoff_max="1 minute")
    assert [durations(su, i) for i in ids] == [(5400.0, 2.0, 60.0)] * 2

    async def main() -> int:
        async with await psycopg.AsyncConnection.connect(cluster.dsn("app_producer"), autocommit=True) as conn:
            return (await aenqueue(conn, queue, {}, delay="PT2M", backoff_base=1, backoff_max="3 minutes")).task_id

    assert durations(su, asyncio.run(main())) == (120.0, 1.0, 180.0)


@pytest.mark.parametrize("arg", ["delay", "backoff_base", "backoff_max"])
def test_a_text_postgresql_refuses_names_its_argument(producer, su, queue, arg):
    for bad in ["1 fortnight", "soon", "1x"]:
        with pytest.raises(ValueError, match=rf"^{arg}: '{bad}' is not a duration PostgreSQL reads "
                                             r"\(invalid input syntax for type interval: "):
            enqueue(producer, queue, {}, **{arg: bad})
        with pytest.raises(ValueError, match=rf"^{arg}: '{bad}' is not a duration"):
            enqueue_batch(producer, queue, [1, 2], **{arg: bad})
    with pytest.raises(ValueError, match=rf"^{arg}: must not be empty"):
        enqueue(producer, queue, {}, **{arg: "  "})
    assert count(su, queue) == 0


def test_texts_out_of_range_name_their_argument(producer, su, queue):
    with pytest.raises(ValueError, match=r"^delay: must not be negative, got '1 hour ago' \(-3600 s\)"):
        enqueue(producer, queue, {}, delay="1 hour ago")
    with pytest.raises(ValueError, match=r"^backoff_base: must be positive, got '0 seconds'"):
        enqueue(producer, queue, {}, backoff_base="0 seconds")
    with pytest.raises(ValueError, match=r"^backoff_max: must not be less than backoff_base"):
        enqueue(producer, queue, {}, backoff_base="2 minutes", backoff_max=60)
    with pytest.raises(TypeError, match=r"^delay: expected seconds \(int or float\), a timedelta or a str"):
        enqueue(producer, queue, {}, delay=[1])
    assert count(su, queue) == 0


def test_a_bad_delay_enqueues_nothing_and_the_callers_transaction_goes_on(cluster, su, queue):
    with cluster.connect("app_service") as conn:  # not autocommit: a transaction is open
        conn.execute("INSERT INTO orders (email) VALUES (%s)", (queue,))
        with pytest.raises(ValueError, match=r"^delay: '1 fortnight' is not a duration") as caught:
            enqueue(conn, queue, {"n": 1}, delay="1 fortnight")
        assert isinstance(caught.value.__cause__, psycopg.errors.InvalidDatetimeFormat)
        # Nothing enqueued, seen from another connection, and the transaction still works.
        assert count(su, queue) == 0
        kept = enqueue(conn, queue, {"n": 2}, delay="10 seconds").task_id
        conn.commit()
    assert su.execute("SELECT task_id FROM aedb_queue.task WHERE queue = %s", (queue,)).fetchall() == [(kept,)]
    assert su.execute("SELECT count(*) FROM orders WHERE email = %s", (queue,)).fetchone()[0] == 1


def test_a_bad_delay_in_autocommit_and_async_enqueues_nothing(cluster, producer, su, queue):
    with pytest.raises(ValueError, match=r"^delay: 'an hour' is not a duration"):
        enqueue(producer, queue, {}, delay="an hour")

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(cluster.dsn("app_producer")) as conn:
            with pytest.raises(ValueError, match=r"^backoff_max: 'a while' is not a duration"):
                await aenqueue(conn, queue, {}, backoff_max="a while")
            await conn.commit()

    asyncio.run(main())
    assert count(su, queue) == 0


# -- the worker's options ------------------------------------------------------


def test_runtime_options_as_text_are_read_at_start(cluster, producer, su, queue):
    app = App(cluster.dsn("app_worker"), shutdown_timeout="1 minute 5 seconds")
    seen: list[tuple[dt.timedelta, float]] = []

    @app.task(queue, lease="2 minutes", poll_interval="200ms", heartbeat_interval="PT20S")
    def handle(task):
        remaining = su_deadline(cluster, task.task_id)
        seen.append((task.lease, remaining))

    with running(app):
        wait_until(lambda: app._runtime is not None and app._runtime.shutdown_timeout == 65.0, 30,
                   "shutdown_timeout read")
        spec = app._runtime.runners[queue].spec
        assert (spec.lease, spec.poll_interval, spec.heartbeat_interval) == (120.0, 0.2, 20.0)
        enqueue(producer, queue, {})
        wait_until(lambda: seen, 30, "the task ran")
    lease, remaining = seen[0]
    assert lease == dt.timedelta(minutes=2)
    assert 100 < remaining <= 120, remaining


def su_deadline(cluster, task_id: int) -> float:
    with cluster.su() as su:
        return su.execute("SELECT extract(epoch FROM lease_deadline - now())::float8 FROM aedb_queue.task "
                          "WHERE task_id = %s", (task_id,)).fetchone()[0]


@pytest.mark.parametrize("options, message", [
    ({"lease": "1 fortnight"}, r"queue '{q}': lease: '1 fortnight' is not a duration PostgreSQL reads "
                               r"\(invalid input syntax for type interval"),
    ({"poll_interval": "soon"}, r"queue '{q}': poll_interval: 'soon' is not a duration"),
    ({"heartbeat_interval": "1 lifetime"}, r"queue '{q}': heartbeat_interval: '1 lifetime' is not a duration"),
    ({"lease": "500ms"}, r"queue '{q}': lease: at least 1 second, got '500ms' \(0.5 s\)"),
    ({"lease": 30, "heartbeat_interval": "1 minute"},
     r"queue '{q}': heartbeat_interval: must be shorter than the lease \(30 s\), got '1 minute' \(60 s\)"),
    ({"poll_interval": "1 second ago"}, r"queue '{q}': poll_interval: must be positive, got '1 second ago'"),
])
def test_a_bad_task_option_is_a_startup_error_naming_it(cluster, queue, options, message):
    app = App(cluster.dsn("app_worker"))

    @app.task(queue, **options)
    def handle(task):
        return None

    with pytest.raises(StartupError, match="^" + message.format(q=queue)):
        asyncio.run(asyncio.wait_for(app.run_async(), 60))  # bounded: a worker that starts fails the test


def test_a_bad_shutdown_timeout_is_a_startup_error_naming_it(cluster, queue):
    app = App(cluster.dsn("app_worker"), shutdown_timeout="a moment")

    @app.task(queue)
    def handle(task):
        return None

    with pytest.raises(StartupError, match=r"^shutdown_timeout: 'a moment' is not a duration PostgreSQL reads"):
        asyncio.run(asyncio.wait_for(app.run_async(), 60))
    with pytest.raises(StartupError, match=r"^shutdown_timeout: must not be negative, got '1 minute ago'"):
        asyncio.run(asyncio.wait_for(app.run_async(shutdown_timeout="1 minute ago"), 60))


def test_texts_are_checked_for_type_and_emptiness_at_registration(cluster):
    with pytest.raises(ValueError, match="^shutdown_timeout: must not be empty"):
        App(cluster.dsn("app_worker"), shutdown_timeout="")
    app = App(cluster.dsn("app_worker"))
    with pytest.raises(ValueError, match="^lease: must not be empty"):
        app.task("q", lease=" ")(lambda task: None)
    with pytest.raises(TypeError, match="^poll_interval: expected seconds"):
        app.task("q", poll_interval=b"1s")(lambda task: None)


def worker(dsn: str, queue: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([str(SCRIPT), "apps.plain_app:app", *args], cwd=HERE, stderr=subprocess.PIPE,
                            text=True, env={"AEDB_TEST_DSN": dsn, "AEDB_TEST_QUEUE": queue,
                                            "PATH": "/usr/bin:/bin"})


def test_worker_script_shutdown_timeout_takes_durations(cluster, queue):
    bad = worker(cluster.dsn("app_worker"), queue, "--shutdown-timeout", "1 fortnight")
    _, err = bad.communicate(timeout=60)
    assert bad.returncode == 1, err
    assert "shutdown_timeout: '1 fortnight' is not a duration PostgreSQL reads" in err, err
    for given in ["2 seconds", "1.5"]:
        ok = worker(cluster.dsn("app_worker"), queue, "--shutdown-timeout", given)
        try:
            assert ok.stderr is not None
            line = ok.stderr.readline()
            while "started" not in line and line:
                line = ok.stderr.readline()
            assert "started" in line, line
        finally:
            ok.terminate()
            assert ok.wait(30) == 0
    usage = subprocess.run([str(SCRIPT), "apps.plain_app:app", "--shutdown-timeout", "-1"], cwd=HERE,
                           capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "must not be negative" in usage.stderr, usage.stderr
