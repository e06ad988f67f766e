"""Type-checked, never run: `mypy --strict` over this file, with the package
installed from its wheel (clients/python/test.sh), proves the wheel ships
py.typed and that its public API is typed for an application's code."""

from dataclasses import dataclass

import psycopg

import aedb_queue
from aedb_queue import App, AsyncTask, Complete, DeadLetter, Enqueued, FollowUp, Retry, Task, enqueue


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


slow = App("host=127.0.0.1 dbname=app user=app_service", shutdown_timeout="90 seconds")

version: str = aedb_queue.__version__
