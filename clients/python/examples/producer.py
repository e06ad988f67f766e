"""Enqueue a welcome email in the transaction that creates the order."""

import os
from dataclasses import dataclass

import psycopg

from aedb_queue import enqueue

# A role in aedb_queue_producer (and with INSERT on orders).
DSN = os.environ.get("AEDB_QUEUE_DSN", "host=127.0.0.1 dbname=app user=app_producer")


@dataclass
class Welcome:
    order_id: int
    email: str


with psycopg.connect(DSN) as conn:  # one transaction, committed when the block ends
    order_id = conn.execute(
        "INSERT INTO orders (email) VALUES (%s) RETURNING id", ("ada@example.com",)
    ).fetchone()[0]
    task = enqueue(conn, "emails", Welcome(order_id, "ada@example.com"),
                   idempotency_key=f"welcome-{order_id}")
    # Had anything raised before the commit, neither the order nor the task would exist.
print(f"order {order_id}: task {task.task_id}")
