"""The shared part of the Python peer drivers: the request, the payload, the
three scenarios with their timing, and the commits and WAL of the measured
window. Each peer's file (procrastinate_driver.py, pgqueuer_driver.py,
oban_driver.py, pgque_driver.py) holds only an adapter and calls `main`.

Same protocol as bench/peers/node/driver.mjs: one JSON request as the first
argument, one JSON result as the last stdout line, diagnostics on stderr, a
non-zero exit on failure (2 = bad request or a peer that cannot run here,
3 = overall time guard). See README.md next to this file.

An adapter is an object with:

    name, version                      strings for the result
    async setup()                      schema (and queue), untimed, on a fresh database
    async open() / async close()       a client; close() must release every connection
    async enqueue_batch(payloads)      one call of the peer's batch API
    async enqueue_one(payload)         one call of its single-job API (called from W tasks)
    async start_workers(on_jobs)       W workers with a no-op handler that calls
                                       on_jobs(wall_ms, [payload, ...]) when it starts
    async stop_workers()
    count_sql                          one row, one bigint: see completed_from
    completed_from(n, enqueued)        jobs done, given count_sql's value
    analyze_tables                     tables to ANALYZE after the drain's preload
    async fill_backlog(mix, chunk)     optional (the backlog scenario): with the client
                                       open, write mix["ready"] jobs the workers do not
                                       consume, mix["scheduled"] due in a year and
                                       mix["dead"] failed ones, through the peer's own
                                       API; chunk(n, f) calls await f(payloads) with
                                       batches of PRELOAD_CHUNK adding up to n
    settings(scenario)                 how it was configured, for the result

Handlers may run on other threads (pgque's consumer is synchronous): on_jobs
is thread-safe.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import threading
import time
from urllib.parse import unquote, urlparse

import psycopg

PRELOAD_CHUNK = 1000  # jobs per batch call of the drain's untimed preload
POLL_MS = 50  # how often the drain polls the database for jobs done
TICK_MS = 10  # steady: pacing period of the producer
MAX_INFLIGHT = 4  # steady: enqueue calls in flight at most

T0 = time.monotonic()
PROG = os.path.basename(sys.argv[0]) or "driver"


def log(msg: str) -> None:
    sys.stderr.write(f"{PROG}: {time.monotonic() - T0:7.2f} s {msg}\n")


def die(msg: str, code: int = 1) -> None:
    sys.stderr.write(f"{PROG}: error: {msg}\n")
    sys.stderr.flush()
    os._exit(code)


class NotDrivable(Exception):
    """The peer cannot run here (a missing install step, an unsupported
    scenario): exit 2 with the reason."""


def now_ms() -> float:
    """Wall-clock milliseconds, as the payload's enqueue time."""
    return time.time() * 1000.0


def payload(nbytes: int, i: int, t: float) -> dict:
    """{"i":n,"t":ms,"pad":"xxx"}, about `nbytes` bytes as compact JSON."""
    p = {"i": i, "t": t, "pad": ""}
    p["pad"] = "x" * max(0, nbytes - len(json.dumps(p, separators=(",", ":"))))
    return p


def parse_request(argv: list[str], system: str) -> dict:
    if len(argv) < 2:
        raise NotDrivable(f"usage: {PROG} '{{\"db\":...,\"scenario\":...}}'")
    try:
        a = json.loads(argv[1])
    except json.JSONDecodeError as e:
        raise NotDrivable(f"argument is not valid JSON: {e}") from e

    def num(key: str, default: float) -> float:
        v = a.get(key, default)
        if not isinstance(v, (int, float)) or v < 0:
            raise NotDrivable(f'"{key}" must be a non-negative number (got {v!r})')
        return v

    cfg = {
        "system": a.get("system", system),
        "db": a.get("db"),
        "admin_db": a.get("admin_db") if isinstance(a.get("admin_db"), str) else None,
        "scenario": a.get("scenario"),
        "jobs": int(num("jobs", 0)),
        "workers": int(num("workers", 1)),
        "batch": int(num("batch", 1)),
        "rate": float(num("rate", 0)),
        "seconds": float(num("seconds", 0)),
        "payload_bytes": int(num("payload_bytes", 100)),
        # Optional (steady only): per-second buckets in the result, and a
        # burst, the producer at burst_rate from burst_at for burst_seconds.
        "timeline": bool(a.get("timeline", False)),
        "burst_rate": float(num("burst_rate", 0)),
        "burst_at": float(num("burst_at", 0)),
        "burst_seconds": float(num("burst_seconds", 0)),
        # Optional (drain, faults scenario): each handler records its job's
        # payload "i" in bench_ledger (see Ledger).
        "ledger": bool(a.get("ledger", False)),
        # Optional (the harness's backlog scenario): jobs already waiting when
        # the scenario starts, written untimed after the schema (see fill_backlog).
        "backlog": a.get("backlog") if isinstance(a.get("backlog"), dict) else None,
        "backlog_sql": a.get("backlog_sql") if isinstance(a.get("backlog_sql"), str) else None,
    }
    if cfg["system"] != system:
        raise NotDrivable(f'this driver runs "{system}" (asked for {cfg["system"]!r})')
    if not isinstance(cfg["db"], str) or not cfg["db"]:
        raise NotDrivable('"db" must be a postgres:// connection string')
    if cfg["scenario"] not in ("enqueue", "drain", "steady"):
        raise NotDrivable(f'"scenario" must be enqueue, drain or steady (got {cfg["scenario"]!r})')
    if cfg["workers"] < 1 or cfg["batch"] < 1:
        raise NotDrivable('"workers" and "batch" must be >= 1')
    if cfg["scenario"] != "steady" and cfg["jobs"] < 1:
        raise NotDrivable('"jobs" must be >= 1 for enqueue and drain')
    if cfg["scenario"] == "steady" and (cfg["rate"] <= 0 or cfg["seconds"] <= 0):
        raise NotDrivable('steady needs "rate" > 0 and "seconds" > 0')
    return cfg


class Monitor:
    """One autocommit connection to the bench database that counts its own
    statements (each one a commit), so the window's commits can leave them out."""

    def __init__(self, db: str):
        self.db = db
        self.conn: psycopg.AsyncConnection | None = None
        self.statements = 0

    async def execute(self, sql: str) -> list:
        # Reconnects and retries for up to a minute: the faults scenario
        # ends backends and restarts the cluster under the drain.
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.conn is None:
                    self.conn = await psycopg.AsyncConnection.connect(
                        self.db, autocommit=True, application_name="bench-monitor"
                    )
                self.statements += 1
                cur = await self.conn.execute(sql)
                return await cur.fetchall() if cur.description else []
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                try:
                    if self.conn is not None:
                        await self.conn.close()
                except psycopg.Error:
                    pass
                self.conn = None
                await asyncio.sleep(0.2)

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None


# Jobs done that the backlog shows before the scenario (negative for a peer
# that counts remaining rows): left out of every count.
BACKLOG_BASE = [0]


async def count_done(sys_, monitor: Monitor, enqueued: int) -> int:
    rows = await monitor.execute(sys_.count_sql)
    return sys_.completed_from(int(rows[0][0]), enqueued) - BACKLOG_BASE[0]


async def fill_backlog(cfg: dict, sys_, monitor: Monitor) -> float:
    t0 = time.monotonic()
    counter = [0]

    async def chunk(n: int, f) -> None:
        done = 0
        while done < n:
            k = min(PRELOAD_CHUNK, n - done)
            t = now_ms()
            await f([payload(cfg["payload_bytes"], counter[0] + j, t) for j in range(k)])
            counter[0] += k
            done += k

    if cfg["backlog_sql"]:
        await monitor.execute(cfg["backlog_sql"])
    if cfg["backlog"]:
        if not hasattr(sys_, "fill_backlog"):
            raise NotDrivable(f"{cfg['system']}: this driver has no backlog fill")
        mix = {k: int(cfg["backlog"].get(k, 0)) for k in ("ready", "scheduled", "dead")}
        await sys_.fill_backlog(mix, chunk)
    await monitor.execute("VACUUM ANALYZE")
    try:
        await monitor.execute("CHECKPOINT")
    except psycopg.Error as e:
        log(f"CHECKPOINT skipped: {e}")
    BACKLOG_BASE[0] = await count_done(sys_, monitor, 0)
    secs = time.monotonic() - t0
    log(f"backlog of {counter[0]} filled in {secs:.1f} s")
    return secs


# ------------------------------------------------------------------ scenarios


async def scenario_enqueue(cfg: dict, sys_) -> dict:
    jobs, pb = cfg["jobs"], cfg["payload_bytes"]
    t0 = time.monotonic()
    if cfg["batch"] > 1:
        done = 0
        while done < jobs:
            n = min(cfg["batch"], jobs - done)
            t = now_ms()
            await sys_.enqueue_batch([payload(pb, done + k, t) for k in range(n)])
            done += n
    else:
        counter = iter(range(jobs))

        async def producer() -> None:
            for i in counter:
                await sys_.enqueue_one(payload(pb, i, now_ms()))

        await asyncio.gather(*(producer() for _ in range(cfg["workers"])))
    return {"jobs": jobs, "seconds": time.monotonic() - t0, "latency_us": None, "backlog_end": None}


async def preload(cfg: dict, sys_, monitor: Monitor) -> None:
    done = 0
    while done < cfg["jobs"]:
        n = min(PRELOAD_CHUNK, cfg["jobs"] - done)
        t = now_ms()
        await sys_.enqueue_batch([payload(cfg["payload_bytes"], done + k, t) for k in range(n)])
        done += n
    await monitor.execute("ANALYZE " + ", ".join(sys_.analyze_tables))
    try:
        await monitor.execute("CHECKPOINT")
    except psycopg.Error as e:
        log(f"CHECKPOINT skipped: {e}")


HOLDER_APP = "aedb-bench-hold"  # the harness's snapshot holder: not a client of ours
LEDGER_APP = "bench-ledger"  # the handlers' ledger connections (not ended by the faults)
LEDGER_SQL = "CREATE TABLE IF NOT EXISTS bench_ledger (job_id bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"


class Ledger:
    """The faults scenario's ledger: each handler call inserts its jobs'
    payload "i" into bench_ledger, in its own autocommit transaction (no
    Python peer lends the handler the job's transaction), on a thread-local
    synchronous connection (handlers may run on other threads; the insert
    blocks the loop for a round trip, which the faults scenario does not
    time). Reconnects and retries for up to a minute; a failure raises in
    the handler, so the peer sees the job fail."""

    def __init__(self, db: str):
        self.db = db
        self.local = threading.local()

    def record(self, ids: list[int]) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = getattr(self.local, "conn", None)
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.db, autocommit=True, application_name=LEDGER_APP)
                    self.local.conn = conn
                conn.execute("INSERT INTO bench_ledger (job_id) SELECT unnest(%s::bigint[])", (ids,))
                return
            except psycopg.OperationalError:
                self.local.conn = None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def due_by(cfg: dict, elapsed: float) -> float:
    """Jobs the steady producer owes after `elapsed` seconds: `rate`, and
    `burst_rate` instead from `burst_at` for `burst_seconds`."""
    extra = 0.0
    if cfg["burst_seconds"] > 0 and cfg["burst_rate"] > 0:
        extra = (cfg["burst_rate"] - cfg["rate"]) * min(max(0.0, elapsed - cfg["burst_at"]), cfg["burst_seconds"])
    return cfg["rate"] * elapsed + extra


class Timeline:
    """Per second of the window: jobs enqueued, jobs handled and their
    pickup latencies (reported as p50/p99)."""

    def __init__(self, t0_wall_ms: float):
        self.t0 = t0_wall_ms
        self.enqueued: list[int] = []
        self.done: list[int] = []
        self.lat: list[list[float]] = []

    def _grow(self, i: int) -> None:
        while len(self.done) <= i:
            self.enqueued.append(0)
            self.done.append(0)
            self.lat.append([])

    def enq(self, wall_ms: float, n: int) -> None:
        i = max(0, int((wall_ms - self.t0) / 1000))
        self._grow(i)
        self.enqueued[i] += n

    def handled(self, wall_ms: float, lat_us: float) -> None:
        i = max(0, int((wall_ms - self.t0) / 1000))
        self._grow(i)
        self.done[i] += 1
        self.lat[i].append(lat_us)

    def to_json(self) -> dict:
        ls = [sorted(x) for x in self.lat]
        return {
            "t0_ms": self.t0,
            "enqueued": self.enqueued,
            "done": self.done,
            "p50_us": [percentile(x, 0.5) for x in ls],
            "p99_us": [percentile(x, 0.99) for x in ls],
        }


class Handled:
    """What the handlers saw: thread-safe, and an event set at the first call."""

    def __init__(self, loop: asyncio.AbstractEventLoop, record_latency: bool):
        self.loop = loop
        self.lock = threading.Lock()
        self.count = 0
        self.first: float | None = None
        self.started = asyncio.Event()
        self.recording = record_latency
        self.latencies_us: list[float] = []
        self.timeline: Timeline | None = None
        self.ledger: Ledger | None = None

    def __call__(self, wall_ms: float, payloads: list) -> None:
        if self.ledger is not None:
            self.ledger.record([int(p["i"]) for p in payloads])
        with self.lock:
            if self.first is None:
                self.first = time.monotonic()
                self.loop.call_soon_threadsafe(self.started.set)
            self.count += len(payloads)
            if self.recording:
                for p in payloads:
                    lat = (wall_ms - float(p["t"])) * 1000.0
                    self.latencies_us.append(lat)
                    if self.timeline is not None:
                        self.timeline.handled(wall_ms, lat)


async def scenario_drain(cfg: dict, sys_, monitor: Monitor) -> dict:
    handled = Handled(asyncio.get_running_loop(), False)
    if cfg["ledger"]:
        handled.ledger = Ledger(cfg["db"])
    await sys_.start_workers(handled)
    await handled.started.wait()
    start = handled.first
    cap = cfg["seconds"] if cfg["seconds"] > 0 else float("inf")
    while True:
        await asyncio.sleep(max(0.0, min(POLL_MS / 1000, start + cap - time.monotonic())))
        completed = await count_done(sys_, monitor, cfg["jobs"])
        end = time.monotonic()
        if completed >= cfg["jobs"] or end - start >= cap:
            break
    await sys_.stop_workers()
    return {
        "jobs": completed,
        "seconds": end - start,
        "latency_us": None,
        "backlog_end": cfg["jobs"] - completed,
        "extra": {"enqueued": cfg["jobs"], "handler_jobs": handled.count, "capped": completed < cfg["jobs"]},
    }


def percentile(sorted_: list[float], p: float) -> int | None:
    if not sorted_:
        return None
    idx = min(len(sorted_) - 1, max(0, math.ceil(p * len(sorted_)) - 1))
    return round(sorted_[idx])


async def scenario_steady(cfg: dict, sys_, monitor: Monitor) -> dict:
    handled = Handled(asyncio.get_running_loop(), True)
    await sys_.start_workers(handled)
    rate, secs, pb = cfg["rate"], cfg["seconds"], cfg["payload_bytes"]
    target = round(due_by(cfg, secs))
    sent = acked = 0
    inflight: set[asyncio.Task] = set()
    failure: list[BaseException] = []

    async def send(batch: list, n: int) -> None:
        nonlocal acked
        try:
            await sys_.enqueue_batch(batch)
            acked += n
        except BaseException as e:  # noqa: BLE001 - surfaced by the pacing loop
            failure.append(e)

    t0 = time.monotonic()
    timeline = Timeline(now_ms()) if cfg["timeline"] else None
    with handled.lock:
        handled.timeline = timeline
    tick = 0
    while True:
        tick += 1
        if failure:
            raise failure[0]
        elapsed = time.monotonic() - t0
        due = min(target, int(due_by(cfg, elapsed)))
        if due > sent and len(inflight) < MAX_INFLIGHT:
            n = due - sent
            t = now_ms()
            if timeline is not None:
                with handled.lock:
                    timeline.enq(t, n)
            batch = [payload(pb, sent + k, t) for k in range(n)]
            sent += n
            task = asyncio.create_task(send(batch, n))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        if elapsed >= secs and sent >= target:
            break
        wait = t0 + tick * TICK_MS / 1000 - time.monotonic()
        await asyncio.sleep(max(0.0, wait))
    if inflight:
        await asyncio.gather(*inflight)
    if failure:
        raise failure[0]
    producer_secs = time.monotonic() - t0
    completed = await count_done(sys_, monitor, acked)
    with handled.lock:
        handled.recording = False
        lat = sorted(handled.latencies_us)
    await sys_.stop_workers()
    return {
        "jobs": completed,
        "seconds": producer_secs,
        "latency_us": {"p50": percentile(lat, 0.5), "p99": percentile(lat, 0.99)} if lat else None,
        "backlog_end": acked - completed,
        "extra": {
            "enqueued": acked,
            "picked_up": len(lat),
            "latency_max_us": round(lat[-1]) if lat else None,
            **({"timeline": timeline.to_json()} if timeline is not None else {}),
        },
    }


# ------------------------------------------------------------------ commits and WAL


def db_name(url: str) -> str:
    return unquote(urlparse(url).path.lstrip("/"))


async def read_counters(cfg: dict) -> tuple[int, int]:
    """Commits of the bench database and cluster WAL bytes, read from
    `admin_db` once no client backend is connected to the bench database:
    every backend flushes its statistics when it exits."""
    name = db_name(cfg["db"])
    async with await psycopg.AsyncConnection.connect(cfg["admin_db"], autocommit=True) as admin:
        deadline = time.monotonic() + 15
        grace = time.monotonic() + 5
        while True:
            cur = await admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend' AND application_name <> %s",
                (name, HOLDER_APP),
            )
            (n,) = await cur.fetchone()
            if n == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{n} client backend(s) still connected to {name}")
            if time.monotonic() > grace:
                # A closed client's connection that lingers: ended, it
                # flushes its statistics as it exits.
                await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend' AND application_name <> %s",
                    (name, HOLDER_APP),
                )
                log(f"ended {n} lingering connection(s) of a closed client")
                grace = float("inf")
            await asyncio.sleep(0.01)
        await admin.execute("SELECT pg_stat_clear_snapshot()")
        cur = await admin.execute(
            "SELECT xact_commit, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint FROM pg_stat_database WHERE datname = %s",
            (name,),
        )
        c, w = await cur.fetchone()
        return int(c), int(w)


async def autovacuum_runs(cfg: dict) -> int:
    async with await psycopg.AsyncConnection.connect(cfg["db"], autocommit=True) as c:
        cur = await c.execute(
            "SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0)::bigint FROM pg_stat_user_tables"
        )
        (n,) = await cur.fetchone()
        return int(n)


# ------------------------------------------------------------------ main


async def run(cfg: dict, make_adapter) -> dict:
    # Untimed: the schema, and for drain the jobs; then every connection closes.
    sys_ = make_adapter(cfg)
    monitor = Monitor(cfg["db"])
    try:
        await sys_.setup()
        if cfg["ledger"]:
            await monitor.execute(LEDGER_SQL)
        log("set up")
        backlog_seconds = None
        if cfg["backlog"] or cfg["backlog_sql"]:
            await sys_.open()
            backlog_seconds = await fill_backlog(cfg, sys_, monitor)
        if cfg["scenario"] == "drain":
            if backlog_seconds is None:
                await sys_.open()
            await preload(cfg, sys_, monitor)
            pre = await count_done(sys_, monitor, cfg["jobs"])
            if pre != 0:
                raise RuntimeError(f"expected 0 jobs done before the drain, found {pre}")
            log(f"preloaded {cfg['jobs']} jobs")
    finally:
        await sys_.close()
        await monitor.close()

    # The measured window: a new client (its start-up is in the window), the
    # scenario, shutdown, and a last count of the jobs done.
    av0 = await autovacuum_runs(cfg) if cfg["admin_db"] else 0
    c0 = await read_counters(cfg) if cfg["admin_db"] else None
    sys_ = make_adapter(cfg)
    monitor = Monitor(cfg["db"])
    try:
        await sys_.open()
        if cfg["scenario"] == "enqueue":
            res = await scenario_enqueue(cfg, sys_)
        elif cfg["scenario"] == "drain":
            res = await scenario_drain(cfg, sys_, monitor)
        else:
            res = await scenario_steady(cfg, sys_, monitor)
        await sys_.close()
        settled = cfg["jobs"] if cfg["scenario"] == "enqueue" else await count_done(
            sys_, monitor, res.get("extra", {}).get("enqueued", cfg["jobs"])
        )
    finally:
        await sys_.close()
        await monitor.close()
    log("client closed")
    cost = None
    if c0 is not None:
        c1 = await read_counters(cfg)
        cost = {
            "commits": c1[0] - c0[0] - monitor.statements,
            "wal_bytes": c1[1] - c0[1],
            "jobs": settled,
            "autovacuum": await autovacuum_runs(cfg) - av0,
        }
    out = {
        "system": cfg["system"],
        "scenario": cfg["scenario"],
        "jobs": res["jobs"],
        "seconds": res["seconds"],
        "latency_us": res["latency_us"],
        "backlog_end": res["backlog_end"],
        "cost": cost,
        "settings": f"{sys_.name} {sys_.version}; {sys_.settings(cfg['scenario'])}; payload ~{cfg['payload_bytes']}B JSON",
        **res.get("extra", {}),
    }
    if backlog_seconds is not None:
        out["backlog_fill_seconds"] = backlog_seconds
    return out


def main(system: str, make_adapter, runner=asyncio.run) -> None:
    """Parses the request, runs it under `runner` (asyncio.run, or a peer's
    own loop such as uvloop.run) with an overall time guard, prints the result."""
    try:
        cfg = parse_request(sys.argv, system)
        if hasattr(make_adapter, "check"):
            make_adapter.check(cfg)
    except NotDrivable as e:
        die(str(e), 2)
    guard = cfg["seconds"] + 120 if cfg["seconds"] > 0 else 300
    if cfg["backlog"] or cfg["backlog_sql"]:
        guard += 7200  # a backlog's fill gets up to two hours more
    timer = threading.Timer(guard, lambda: die(f"overall timeout: no result after {guard:.0f} s ({system} {cfg['scenario']})", 3))
    timer.daemon = True
    timer.start()
    try:
        out = runner(run(cfg, make_adapter))
    except NotDrivable as e:
        die(str(e), 2)
    except BaseException as e:  # noqa: BLE001 - any failure is one line last on stderr
        import traceback

        traceback.print_exc()
        die(f"{type(e).__name__}: {e}")
    timer.cancel()
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    # Library threads (pools, consumers) must not keep a finished run alive.
    os._exit(0)


def pkg_version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"
