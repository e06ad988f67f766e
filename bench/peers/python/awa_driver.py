#!/usr/bin/env python3
"""Benchmark driver for awa through its Python SDK (the awa-pg Python SDK
over its Rust core): the harness's row awa-python (the row awa is awa's own
Rust runtime, bench/peers/awa).

    python awa_driver.py '{"system":"awa-python","db":"postgres://...","admin_db":"postgres://.../postgres",
                           "scenario":"enqueue|drain","jobs":N,"workers":W,"batch":B,"seconds":S}'

Same protocol as bench/peers/node/driver.mjs: one JSON result line on stdout
(the last line), diagnostics on stderr, non-zero exit on failure. See
README.md next to this file.
"""

import asyncio
import dataclasses
import json
import sys
import time

import awa
import psycopg

QUEUE = "bench"
PRELOAD_CHUNK = 1000
POLL_MS = 50


@dataclasses.dataclass
class Noop:
    i: int
    t: float
    pad: str


def payload(i: int) -> Noop:
    return Noop(i=i, t=time.time() * 1000, pad="x" * 64)


T0 = time.monotonic()


def log(msg: str) -> None:
    sys.stderr.write(f"awa_driver.py: {time.monotonic() - T0:7.2f} s {msg}\n")


def die(msg: str, code: int = 1) -> None:
    sys.stderr.write(f"awa_driver.py: error: {msg}\n")
    sys.exit(code)


def db_name(url: str) -> str:
    return url.rsplit("/", 1)[1].split("?", 1)[0]


# Commits (pg_stat_database.xact_commit of the bench database) and WAL bytes
# of the measured window, read from another database with no client backend
# connected to the bench database: every backend flushes its statistics when
# it exits (see the Rust harness, scenarios::Window).
def read_counters(cfg) -> tuple[int, int]:
    name = db_name(cfg["db"])
    with psycopg.connect(cfg["admin_db"], autocommit=True) as admin:
        deadline = time.monotonic() + 15
        grace = time.monotonic() + 5
        while True:
            (n,) = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend'",
                (name,),
            ).fetchone()
            if n == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{n} client backend(s) still connected to {name}")
            if time.monotonic() > grace:
                # A closed client's connection that lingers (seen once with
                # awa's pool): ended, it flushes its statistics as it exits.
                (k,) = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend'",
                    (name,),
                ).fetchone()
                sys.stderr.write(f"awa_driver.py: ended {k} lingering connection(s) of a closed client\n")
                grace = float("inf")
            time.sleep(0.01)
        admin.execute("SELECT pg_stat_clear_snapshot()")
        return admin.execute(
            "SELECT xact_commit, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint FROM pg_stat_database WHERE datname = %s",
            (name,),
        ).fetchone()


def autovacuum_runs(cfg) -> int:
    with psycopg.connect(cfg["db"], autocommit=True) as c:
        (n,) = c.execute(
            "SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0)::bigint FROM pg_stat_user_tables"
        ).fetchone()
        return int(n)


async def fill_backlog(cfg, client) -> None:
    """The backlog scenario's jobs, untimed, through awa's Python SDK, 1,000 a
    call: enqueue_many_copy into another queue (no worker runs it); with
    run_at a year ahead; and the dead part enqueued, then cancelled with
    cancel() one job at a time (state cancelled: failing a job for good needs
    it running), its ids read from awa's awa.jobs view."""
    import datetime

    t0 = time.monotonic()
    b = cfg["backlog"]
    counter = [0]

    async def chunks(n: int, **kw) -> None:
        done = 0
        while done < n:
            k = min(PRELOAD_CHUNK, n - done)
            await client.enqueue_many_copy([payload(counter[0] + j) for j in range(k)], **kw)
            counter[0] += k
            done += k

    dead = int(b.get("dead", 0))
    await chunks(dead, queue=QUEUE)
    with psycopg.connect(cfg["db"], autocommit=True) as c:
        ids = [r[0] for r in c.execute("SELECT id FROM awa.jobs WHERE queue = %s AND state = 'available'", (QUEUE,))]
    for job_id in ids:
        await client.cancel(job_id)
    year = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=365)
    await chunks(int(b.get("scheduled", 0)), queue=QUEUE, run_at=year)
    await chunks(int(b.get("ready", 0)), queue="backlog_other")
    with psycopg.connect(cfg["db"], autocommit=True) as c:
        c.execute("VACUUM ANALYZE")
    log(f"backlog of {counter[0]} filled in {time.monotonic() - t0:.1f} s")


async def setup(cfg) -> None:
    """Untimed: schema, queue storage, and for drain the jobs; then close."""
    client = awa.AsyncClient(cfg["db"], max_connections=4)
    try:
        await client.migrate()
        log("migrated")
        # enqueue_many_copy needs the queue-storage backend active.
        await client.install_queue_storage()
        log("queue storage installed")
        if cfg.get("backlog"):
            await fill_backlog(cfg, client)
        if cfg["scenario"] == "drain":
            done = 0
            while done < cfg["jobs"]:
                n = min(PRELOAD_CHUNK, cfg["jobs"] - done)
                await client.enqueue_many_copy([payload(done + k) for k in range(n)], queue=QUEUE)
                done += n
    finally:
        await client.close()
    with psycopg.connect(cfg["db"], autocommit=True) as c:
        c.execute("ANALYZE")
        c.execute("CHECKPOINT")


async def enqueue(cfg, client) -> dict:
    jobs, batch, workers = cfg["jobs"], cfg["batch"], cfg["workers"]
    t0 = time.monotonic()
    if batch > 1:
        done = 0
        while done < jobs:
            n = min(batch, jobs - done)
            await client.enqueue_many_copy([payload(done + k) for k in range(n)], queue=QUEUE)
            done += n
    else:
        counter = iter(range(jobs))

        async def producer():
            for i in counter:
                await client.insert(payload(i), queue=QUEUE)

        await asyncio.gather(*(producer() for _ in range(workers)))
    return {"jobs": jobs, "seconds": time.monotonic() - t0, "settled": jobs}


async def drain(cfg, client) -> dict:
    jobs, workers, batch = cfg["jobs"], cfg["workers"], cfg["batch"]
    handled = 0
    first = None
    started = asyncio.Event()

    @client.task(Noop, queue=QUEUE)
    async def handle(job):
        nonlocal handled, first
        if first is None:
            first = time.monotonic()
            started.set()
        handled += 1

    # awa runs one handler call per job, each holding a worker permit: for a
    # batch of B per worker, W x B permits and claims of B at a time.
    queue = {"name": QUEUE, "max_workers": workers * batch}
    if batch > 1:
        queue["claim_batch_size"] = batch
    await client.start([queue], poll_interval_ms=POLL_MS)
    await started.wait()
    cap = cfg["seconds"] if cfg["seconds"] > 0 else float("inf")
    while handled < jobs and time.monotonic() - first < cap:
        await asyncio.sleep(POLL_MS / 1000)
    end = time.monotonic()
    done = handled
    log("drained")
    await client.shutdown(timeout_ms=5000)
    log("shut down")
    return {"jobs": done, "seconds": end - first, "settled": handled, "backlog_end": jobs - done}


async def main() -> None:
    if len(sys.argv) < 2:
        die("usage: awa_driver.py '{json}'", 2)
    a = json.loads(sys.argv[1])
    cfg = {
        "db": a["db"],
        "admin_db": a.get("admin_db"),
        "scenario": a["scenario"],
        "jobs": int(a.get("jobs", 0)),
        "workers": max(1, int(a.get("workers", 1))),
        "batch": max(1, int(a.get("batch", 1))),
        "seconds": float(a.get("seconds", 0)),
        # Optional (the harness's backlog scenario): see fill_backlog.
        "backlog": a.get("backlog") if isinstance(a.get("backlog"), dict) else None,
    }
    if cfg["scenario"] not in ("enqueue", "drain"):
        die(f"scenario {cfg['scenario']!r} is not driven for awa (enqueue and drain only)", 2)
    await setup(cfg)
    log("set up")
    av0 = autovacuum_runs(cfg) if cfg["admin_db"] else 0
    c0 = read_counters(cfg) if cfg["admin_db"] else None
    log("window open")
    client = awa.AsyncClient(cfg["db"], max_connections=min(cfg["workers"] * cfg["batch"], 16) + 4)
    try:
        if cfg["scenario"] == "enqueue":
            res = await enqueue(cfg, client)
        else:
            res = await drain(cfg, client)
    finally:
        await client.close()
    log("client closed")
    cost = None
    if c0 is not None:
        c1 = read_counters(cfg)
        cost = {
            "commits": int(c1[0] - c0[0]),
            "wal_bytes": int(c1[1] - c0[1]),
            "jobs": res["settled"],
            "autovacuum": autovacuum_runs(cfg) - av0,
        }
    out = {
        "system": "awa-python",
        "scenario": cfg["scenario"],
        "jobs": res["jobs"],
        "seconds": res["seconds"],
        "latency_us": None,
        "backlog_end": res.get("backlog_end"),
        "cost": cost,
        "settings": f"awa-pg {awa_version()}; workers={cfg['workers']} batch={cfg['batch']} poll={POLL_MS}ms",
    }
    print(json.dumps(out), flush=True)


def awa_version() -> str:
    from importlib.metadata import version

    return version("awa-pg")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - report any failure as one line
        import traceback

        traceback.print_exc()
        die(f"{type(e).__name__}: {e}")
