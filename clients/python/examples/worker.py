"""A worker: send welcome emails, then record each one exactly once."""

import logging
import os
from dataclasses import dataclass

from aedb_queue import App, Complete, DeadLetter, FollowUp, Task

# A role in aedb_queue_worker, and in aedb_queue_producer for the follow-ups.
DSN = os.environ.get("AEDB_QUEUE_DSN", "host=127.0.0.1 dbname=app user=app_service")

app = App(DSN)


@dataclass
class Welcome:
    order_id: int
    email: str


@app.task("emails", concurrency=8, lease=30)
def send_welcome(task: Task[Welcome]) -> Complete:
    welcome = task.payload  # a Welcome, decoded from the task's JSON
    if welcome.email.endswith(".invalid"):
        raise DeadLetter(f"cannot deliver to {welcome.email}")
    logging.info("sending welcome to %s (attempt %d)", welcome.email, task.attempts)
    return Complete(
        result={"sent_to": welcome.email},
        follow_ups=[FollowUp("email-audit", {"order_id": welcome.order_id})],
    )


@app.task("email-audit", transactional=True)
async def record(task, conn):
    # Commits together with the task's completion, or not at all.
    await conn.execute("INSERT INTO sent_emails (order_id) VALUES (%s)", (task.payload["order_id"],))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    app.run()  # until SIGTERM or Ctrl-C
