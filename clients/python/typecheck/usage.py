"""Type-checked, never run: `mypy --strict` over this file, with the package
installed from its wheel (clients/python/test.sh), proves the wheel ships
py.typed and that its public API is typed for an application's code."""

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg

import aedb_queue
from aedb_queue import (App, AsyncTask, Child, ChildFailed, ChildResult, Complete, DeadLetter, Enqueued, Event,
                        FollowUp, Retry, Task, aemit, emit, enqueue)


@dataclass
class Welcome:
    order_id: int
    email: str


app = App("host=127.0.0.1 dbname=app user=app_service")


@app.task("emails", concurrency=8, lease=30)
def send_welcome(task: Task[Welcome]) -> Complete:
    welcome: Welcome = task.payload
    if welcome.email.endswith(".invalid"):
        raise DeadLetter(f"cannot deliver to {welcome.email}")
    if task.attempts > 3:
        raise Retry("later", in_=60)
    return Complete(result={"sent_to": welcome.email},
                    follow_ups=[FollowUp("email-audit", {"order_id": welcome.order_id})])


@app.task("email-audit")
async def audit(task: AsyncTask[dict[str, int]]) -> None:
    await task.heartbeat()


def produce(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    queued: Enqueued = enqueue(conn, "emails", Welcome(1, "ada@example.com"), idempotency_key="welcome-1")
    return queued.task_id


@app.task("reports", lease="2 minutes", poll_interval="500ms", heartbeat_interval=20)
def report(task: Task[dict[str, int]]) -> None:
    pass


def produce_later(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    return enqueue(conn, "emails", {"n": 1}, delay="1h30m", backoff_base=5, backoff_max="10 minutes").task_id


@app.task("orders")
def fulfil(task: Task[dict[str, int]]) -> dict[str, Any]:
    receipt = task.step("charge", lambda: {"receipt": "r-1"})

    def ship(conn: psycopg.Connection[Any]) -> int:
        conn.execute("INSERT INTO sent_emails (order_id) VALUES (%s)", (task.payload["order"],))
        return 1

    task.step("ship", ship, transactional=True)
    task.sleep("cool-off", "1 day")
    task.sleep("short", timedelta(seconds=5))
    task.sleep_until("monday", datetime(2030, 1, 7, tzinfo=timezone.utc))
    packed: Event = task.wait_for_event("packed", "order-1/packed", timeout="2 days")
    return {"receipt": receipt, "boxes": packed.payload, "late": packed.timed_out}


@app.task("orders-async")
async def fulfil_async(task: AsyncTask[dict[str, int]]) -> None:
    async def charge() -> int:
        return 1

    await task.step("charge", charge)

    async def ship(conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute("SELECT 1")

    await task.step("ship", ship, transactional=True)
    await task.sleep("nap", 30)
    event = await task.wait_for_event("packed", "k", 60)
    assert event.timed_out or event.payload is not None


@app.task("albums")
def thumbnails(task: Task[dict[str, list[str]]]) -> list[Any]:
    children = [Child("thumbs", {"image": name}, priority=5, delay="1 second") for name in task.payload["images"]]
    ids: list[int] = task.spawn("resize", [*children, ("thumbs", {"image": "cover"})])
    try:
        results: list[ChildResult] = task.wait_for_tasks("resized", ids)
    except ChildFailed as exc:
        return [(r.task_id, r.state, r.error) for r in exc.failed]
    lenient = task.wait_for_tasks("resized-again", ids, raise_on_failure=False)
    return [r.result for r in results if r.ok] + [r.state for r in lenient]


@app.task("albums-async")
async def athumbnails(task: AsyncTask[None]) -> int:
    ids = await task.spawn("resize", [Child("thumbs", None, idempotency_key="cover")])
    results = await task.wait_for_tasks("resized", ids)
    return sum(1 for r in results if r.ok)


def warehouse(conn: psycopg.Connection[tuple[object, ...]]) -> bool:
    return emit(conn, "orders", "order-1/packed", {"boxes": 2})


async def awarehouse(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> bool:
    return await aemit(conn, "orders", "order-1/packed")


slow = App("host=127.0.0.1 dbname=app user=app_service", shutdown_timeout="90 seconds")

version: str = aedb_queue.__version__
