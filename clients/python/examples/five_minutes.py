import os

import psycopg
from aedb_queue import App, Complete, enqueue

DSN = os.environ.get("AEDB_QUEUE_DSN", "host=127.0.0.1 dbname=app user=app_worker")

with psycopg.connect(DSN) as conn:  # one transaction: the task commits with the block
    enqueue(conn, "welcome-emails", {"to": "ada@example.com"})

app = App(DSN)


@app.task("welcome-emails", concurrency=8, lease=30)
def send(task) -> Complete:
    print("sending to", task.payload["to"], flush=True)
    return Complete(result={"sent": True})


app.run()  # until SIGTERM or Ctrl-C; a failure is retried with backoff, then dead-lettered
