"""A durable workflow: charge, cool off, wait for the warehouse, ship. Each step runs once."""

import logging
import os
import sys

import psycopg

from aedb_queue import App, emit, enqueue

DSN = os.environ.get("AEDB_QUEUE_DSN", "host=127.0.0.1 dbname=app user=app_service")
app = App(DSN)


@app.task("orders", lease=30, poll_interval=1)
def fulfil(task):
    order = task.payload["order"]
    receipt = task.step("charge", lambda: {"receipt": f"r-{order}"})  # recorded: a rerun does not charge again
    task.sleep("cool-off", "1 second")  # the task parks until then: no worker is held
    packed = task.wait_for_event("packed", f"order-{order}/packed", timeout="2 days")
    if packed.timed_out:
        return {"cancelled": receipt}

    def ship(conn):  # a write to this database, committed with the step's record: exactly once
        conn.execute("INSERT INTO sent_emails (order_id) VALUES (%s)", (order,))
        return packed.payload

    shipped = task.step("ship", ship, transactional=True)
    print(f"order {order} shipped: {shipped}", flush=True)
    return {"receipt": receipt, "shipped": shipped}


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    if sys.argv[1:2] == ["packed"]:  # the warehouse says: python examples/workflow.py packed 42
        with psycopg.connect(DSN) as conn:  # in the transaction that makes it true
            emit(conn, "orders", f"order-{sys.argv[2]}/packed", {"boxes": 2})
    else:
        with psycopg.connect(DSN) as conn:
            enqueue(conn, "orders", {"order": 42})
        app.run()  # until SIGTERM or Ctrl-C
