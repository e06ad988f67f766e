#!/usr/bin/env python3
"""Benchmark driver for PgQueuer (PyPI `pgqueuer`), over asyncpg, configured
as its own benchmark tool (tools/benchmark.py of the PgQueuer repository)
runs it. Protocol and scenarios: harness.py and README.md next to this file.

    python pgqueuer_driver.py '{"system":"pgqueuer","db":"postgres://...","scenario":"drain",...}'
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
import json

import asyncpg
import uvloop
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver, AsyncpgPoolDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries

import harness

ENTRYPOINT = "noop"


def encode(p: dict) -> bytes:
    return json.dumps(p, separators=(",", ":")).encode()


class PgQueuerAdapter:
    name = "pgqueuer"

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.version = harness.pkg_version("pgqueuer")
        self.pool: asyncpg.Pool | None = None
        self.queries: Queries | None = None
        self.worker_conns: list[asyncpg.Connection] = []
        self.pgqs: list[PgQueuer] = []
        self.runs: list[asyncio.Task] = []
        # Producers share a pool ("Always use a direct asyncpg connection
        # (not a pool) for the QueueManager. Reserve the pool for
        # producers": docs/guides/performance-tuning.md, Connection pooling).
        if cfg["scenario"] == "enqueue" and cfg["batch"] == 1:
            self.producer_pool = cfg["workers"]
        elif cfg["scenario"] == "steady":
            self.producer_pool = harness.MAX_INFLIGHT
        else:
            self.producer_pool = 1

    async def setup(self) -> None:
        conn = await asyncpg.connect(self.cfg["db"])
        try:
            q = Queries(AsyncpgDriver(conn))
            await q.install()
            # `pgq autovac`: "Apply PgQueuer's recommended autovacuum
            # settings" (docs/guides/performance-tuning.md, Autovacuum tuning).
            await q.optimize_autovacuum()
        finally:
            await conn.close()

    async def open(self) -> None:
        self.pool = await asyncpg.create_pool(
            dsn=self.cfg["db"], min_size=self.producer_pool, max_size=self.producer_pool
        )
        self.queries = Queries(AsyncpgPoolDriver(self.pool))

    async def enqueue_batch(self, payloads: list[dict]) -> None:
        n = len(payloads)
        await self.queries.enqueue([ENTRYPOINT] * n, [encode(p) for p in payloads], [0] * n)

    async def fill_backlog(self, mix: dict, chunk) -> None:
        # Ready: an entrypoint no worker registers; scheduled: execute_after a
        # year. PgQueuer keeps no failed jobs in its queue table (they move to
        # pgqueuer_log): the dead part is enqueued and then ended with
        # mark_job_as_cancelled, which logs them ('canceled') and removes them.
        async def dead(ps: list[dict]) -> None:
            n = len(ps)
            ids = await self.queries.enqueue([ENTRYPOINT] * n, [encode(p) for p in ps], [0] * n)
            await self.queries.mark_job_as_cancelled(ids)

        await chunk(mix["dead"], dead)
        year = timedelta(days=365)
        await chunk(mix["scheduled"], lambda ps: self.queries.enqueue(
            [ENTRYPOINT] * len(ps), [encode(p) for p in ps], [0] * len(ps), [year] * len(ps)))
        await chunk(mix["ready"], lambda ps: self.queries.enqueue(
            ["backlog_other"] * len(ps), [encode(p) for p in ps], [0] * len(ps)))

    async def enqueue_one(self, payload: dict) -> None:
        await self.queries.enqueue(ENTRYPOINT, encode(payload), 0)

    async def start_workers(self, on_jobs) -> None:
        # W PgQueuer instances, each on its own asyncpg connection, each
        # running run(batch_size=B): the benchmark tool's --dequeue and
        # --dequeue-batch-size (tools/benchmark.py, driver "apg", its default).
        for _ in range(self.cfg["workers"]):
            conn = await asyncpg.connect(self.cfg["db"])
            self.worker_conns.append(conn)
            pgq = PgQueuer(AsyncpgDriver(conn))

            @pgq.entrypoint(ENTRYPOINT)
            async def noop(job: Job) -> None:
                on_jobs(harness.now_ms(), [json.loads(job.payload)])

            self.pgqs.append(pgq)
        for pgq in self.pgqs:
            self.runs.append(asyncio.create_task(pgq.run(batch_size=self.cfg["batch"])))

    async def stop_workers(self) -> None:
        for pgq in self.pgqs:
            pgq.shutdown.set()
        if self.runs:
            done, pending = await asyncio.wait(self.runs, timeout=10)
            for t in pending:
                t.cancel()
            await asyncio.gather(*self.runs, return_exceptions=True)
        self.pgqs, self.runs = [], []
        for c in self.worker_conns:
            await c.close()
        self.worker_conns = []

    async def close(self) -> None:
        await self.stop_workers()
        if self.pool is not None:
            await self.pool.close()
            self.pool = None

    # Finished jobs leave the queue table (for pgqueuer_log).
    count_sql = f"SELECT count(*)::bigint FROM pgqueuer WHERE entrypoint = '{ENTRYPOINT}'"

    @staticmethod
    def completed_from(n: int, enqueued: int) -> int:
        return enqueued - n

    analyze_tables = ["pgqueuer"]

    def settings(self, scenario: str) -> str:
        cfg = self.cfg
        base = "asyncpg, uvloop, durability durable, optimize_autovacuum()"
        if scenario == "enqueue":
            return (
                f"Queries.enqueue([{cfg['batch']} jobs]) per call, 1 producer; {base}"
                if cfg["batch"] > 1
                else f"Queries.enqueue() one job per call, {cfg['workers']} concurrent producers (asyncpg pool {self.producer_pool}); {base}"
            )
        work = f"{cfg['workers']} x PgQueuer(own asyncpg connection).run(batch_size={cfg['batch']}); {base}"
        if scenario == "drain":
            return f"{work}; preload Queries.enqueue() x{harness.PRELOAD_CHUNK} + ANALYZE + CHECKPOINT (untimed); done = row gone from pgqueuer"
        return f"{work}; producer Queries.enqueue() every {harness.TICK_MS}ms at {cfg['rate']:g}/s (<={harness.MAX_INFLIGHT} calls in flight)"


if __name__ == "__main__":
    # The benchmark tool runs under uvloop (`uvloop.run(runner.execute())`).
    harness.main("pgqueuer", PgQueuerAdapter, runner=uvloop.run)
