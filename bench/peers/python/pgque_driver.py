#!/usr/bin/env python3
"""Benchmark driver for PgQue through its Python client (PyPI `pgque-py`).
Protocol and scenarios: harness.py and README.md next to this file.

    python pgque_driver.py '{"system":"pgque","db":"postgres://...","scenario":"drain",...,
                             "pgque_sql":"/path/to/pgque.sql"}'

pgque-py does not ship PgQue's schema: the driver installs it from the file
the request's "pgque_sql" or the environment's AEDB_PGQUE_SQL names (the
sql/pgque.sql of the PgQue repository, which no package registry carries).
Without one it exits 2 saying so.

The client is synchronous (psycopg 3): producers run on a thread pool, each
thread with its own autocommit connection, and the consumer and the ticker
each run on a thread of their own.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pgque
import psycopg

import harness

QUEUE = "bench"
CONSUMER = "bench_consumer"
TYPE = "noop"
# benchmark/tick-rate/bench.py sets '0 seconds' for both periods; this SQL
# refuses periods that are not > 0, so they get the smallest step instead.
TICKER = [("ticker_max_lag", "1 millisecond"), ("ticker_idle_period", "1 millisecond"), ("ticker_max_count", "1")]


def sql_path(cfg: dict) -> str | None:
    path = cfg.get("pgque_sql") or os.environ.get("AEDB_PGQUE_SQL")
    return path if path and os.path.isfile(path) else None


class CountingConsumer(pgque.Consumer):
    """pgque.Consumer as it is, counting the events of each batch once the
    batch's receive-and-ack transaction has committed (the database then
    shows them consumed)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pending = 0
        self.acked = 0
        self.lock = threading.Lock()

    def _poll_once(self, conn: psycopg.Connection) -> None:
        self.pending = 0
        super()._poll_once(conn)
        with self.lock:
            self.acked += self.pending


class PgQueAdapter:
    name = "pgque"

    @staticmethod
    def check(cfg: dict) -> None:
        if sql_path(cfg) is None:
            raise harness.NotDrivable(
                "PgQue's schema is not installed: pgque-py does not ship it and no package "
                "registry carries it (it is sql/pgque.sql of the PgQue repository, NikolayS/pgque); "
                "name a copy with AEDB_PGQUE_SQL"
            )
        if cfg["scenario"] == "drain" and cfg["workers"] > 1:
            raise harness.NotDrivable(
                "PgQue drains with one consumer: a second consumer of the same name reads the same "
                "batches (PgQ semantics; its cooperative consumers are experimental)"
            )

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.cfg["pgque_sql"] = sql_path(cfg)
        self.version = "pgque-py " + harness.pkg_version("pgque-py")
        self.sql_version = "?"
        with open(self.cfg["pgque_sql"], encoding="utf-8") as f:
            for line in f.read(4096).splitlines():
                if line.startswith("-- Version:"):
                    self.sql_version = line.split(":", 1)[1].strip()
        threads = cfg["workers"] if cfg["scenario"] == "enqueue" and cfg["batch"] == 1 else harness.MAX_INFLIGHT
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="producer")
        self.local = threading.local()
        self.conns: list[psycopg.Connection] = []
        self.conns_lock = threading.Lock()
        self.consumer: CountingConsumer | None = None
        self.threads: list[threading.Thread] = []
        self.running = False
        self.failure: list[BaseException] = []

    # -------------------------------------------------------------- setup

    def _setup(self) -> None:
        with open(self.cfg["pgque_sql"], encoding="utf-8") as f:
            sql = f.read()
        with psycopg.connect(self.cfg["db"], autocommit=True) as conn:
            conn.execute(sql)  # no parameters: one simple-protocol batch, as psql -f would
            conn.execute("select pgque.create_queue(%s)", (QUEUE,))
            # A tick on every ticker call, whatever the batch's size or age,
            # as PgQue's own latency benchmark sets its queue
            # (benchmark/tick-rate/bench.py): otherwise PgQ's thresholds
            # hold a tick back until 500 events or 3 s.
            for param, value in TICKER:
                conn.execute("select pgque.set_queue_config(%s, %s, %s)", (QUEUE, param, value))
            # Subscribed before anything is sent: a consumer reads the
            # events after its registration only.
            pgque.PgqueClient(conn).subscribe(QUEUE, CONSUMER)

    async def setup(self) -> None:
        await asyncio.to_thread(self._setup)

    # -------------------------------------------------------------- producers

    def _client(self) -> pgque.PgqueClient:
        c = getattr(self.local, "client", None)
        if c is None:
            conn = psycopg.connect(self.cfg["db"], autocommit=True)
            with self.conns_lock:
                self.conns.append(conn)
            c = self.local.client = pgque.PgqueClient(conn)
        return c

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def open(self) -> None:
        pass

    async def enqueue_batch(self, payloads: list[dict]) -> None:
        # send_batch(queue, type, payloads): one call, one statement.
        await self._run(lambda: self._client().send_batch(QUEUE, TYPE, payloads))

    async def fill_backlog(self, mix: dict, chunk) -> None:
        # PgQ's model has no scheduled or dead events (a log read by
        # cursors): the whole backlog is events of a second queue, with a
        # subscriber so that they are kept, sent with send_batch.
        total = mix["ready"] + mix["scheduled"] + mix["dead"]

        def create() -> None:
            c = self._client()
            c.conn.execute("select pgque.create_queue(%s)", ("backlog_other",))
            c.subscribe("backlog_other", "backlog_consumer")

        await self._run(create)
        await chunk(total, lambda ps: self._run(lambda: self._client().send_batch("backlog_other", TYPE, ps)))

    async def enqueue_one(self, payload: dict) -> None:
        await self._run(lambda: self._client().send(QUEUE, payload, type=TYPE))

    # -------------------------------------------------------------- consumer

    def _ticker(self) -> None:
        # What pgque.start() schedules with pg_cron, which this cluster does
        # not have: `CALL pgque.ticker_loop()` every second, which ticks every
        # pgque.config.tick_period_ms (100 ms by default) for one second.
        try:
            with psycopg.connect(self.cfg["db"], autocommit=True) as conn:
                while self.running:
                    conn.execute("call pgque.ticker_loop()")
        except BaseException as e:  # noqa: BLE001 - reported by stop_workers
            self.failure.append(e)

    def _consume(self) -> None:
        try:
            self.consumer.start()
        except BaseException as e:  # noqa: BLE001
            self.failure.append(e)

    async def start_workers(self, on_jobs) -> None:
        # pgque.Consumer at its defaults (LISTEN/NOTIFY wake-up on each tick,
        # the whole tick batch per receive), but for poll_interval: 1 s
        # rather than 30 s, the fallback when a NOTIFY is missed.
        self.consumer = CountingConsumer(self.cfg["db"], queue=QUEUE, name=CONSUMER, poll_interval=1)
        consumer = self.consumer

        @consumer.on(TYPE)
        def noop(msg: pgque.Message) -> None:
            p = msg.payload if isinstance(msg.payload, dict) else json.loads(msg.payload)
            on_jobs(harness.now_ms(), [p])
            consumer.pending += 1

        self.running = True
        self.threads = [
            threading.Thread(target=self._consume, name="consumer", daemon=True),
            threading.Thread(target=self._ticker, name="ticker", daemon=True),
        ]
        for t in self.threads:
            t.start()

    async def stop_workers(self) -> None:
        if not self.threads:
            return
        self.running = False
        self.consumer.stop()
        for t in self.threads:
            await asyncio.to_thread(t.join, 10)
        self.threads = []
        if self.failure:
            raise self.failure[0]

    async def close(self) -> None:
        await self.stop_workers()
        with self.conns_lock:
            conns, self.conns = self.conns, []
        for c in conns:
            c.close()
        self.local = threading.local()
        self.executor.shutdown(wait=True)
        threads = self.executor._max_workers
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="producer")

    # Events consumed = the events of batches whose ack has committed,
    # counted by the consumer (PgQ keeps no per-event state to count).
    count_sql = "SELECT 0::bigint"

    def completed_from(self, n: int, enqueued: int) -> int:
        if self.consumer is None:
            return 0
        with self.consumer.lock:
            return self.consumer.acked

    analyze_tables: list[str] = []  # ANALYZE of the whole database (the event tables rotate)

    def settings(self, scenario: str) -> str:
        cfg = self.cfg
        ticker = " ".join(f"{p}={v!r}" for p, v in TICKER)
        base = f"PgQue SQL {self.sql_version} from {os.path.basename(cfg['pgque_sql'])}; queue {ticker}"
        if scenario == "enqueue":
            return (
                f"send_batch({cfg['batch']} events) per call, 1 producer; {base}"
                if cfg["batch"] > 1
                else f"send() one event per call, {cfg['workers']} concurrent producers; {base}"
            )
        work = (
            "1 Consumer (whole tick batch per receive, LISTEN wake-up, poll_interval=1); "
            f"ticker CALL pgque.ticker_loop() back to back (pg_cron's schedule, 100 ms ticks); {base}"
        )
        if scenario == "drain":
            return f"{work}; preload send_batch() x{harness.PRELOAD_CHUNK} + ANALYZE + CHECKPOINT (untimed); done = events of acked batches"
        return f"{work}; producer send_batch() every {harness.TICK_MS}ms at {cfg['rate']:g}/s (<={harness.MAX_INFLIGHT} calls in flight)"


if __name__ == "__main__":
    if len(sys.argv) > 1:
        try:
            req = json.loads(sys.argv[1])
        except json.JSONDecodeError:
            req = {}
        if isinstance(req, dict) and req.get("pgque_sql"):
            os.environ["AEDB_PGQUE_SQL"] = str(req["pgque_sql"])
    harness.main("pgque", PgQueAdapter)
