#!/usr/bin/env python3
"""Workflow benchmark: aedb_queue, DBOS and Absurd on one PostgreSQL cluster.

    python wf.py harness --port 54400 [--n 2000 --steps 5 --workers 4 --nb 200 --sleep 1.0]

The harness (this file, run with the virtualenv of requirements.txt) makes
one fresh database per system and shape, then runs two counted phases, each
in subprocesses of this same file:

  enqueue  one producer process starts N workflows, one per transaction
           (and, in shape B, emits/sends each workflow's event, before the
           workflow runs: "an event emitted before the wait");
  run      W workers run them to completion.

Around each phase it reads, from the `postgres` database with no client
connected to the bench database (a backend flushes its statistics when it
exits), pg_stat_database.xact_commit of the bench database and
pg_current_wal_lsn(). The run phase ends when a poller (its own
connection, its transactions counted and subtracted) sees all N workflows
finished. See README.md next to this file.

Shapes:
  A  S no-op steps (each returns {"k": k}).
  B  step, durable sleep of --sleep seconds, wait for an event (emitted
     before the workflow runs), step: four recorded operations.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
QUEUE = "bench"
T0 = time.monotonic()


def log(msg):
    sys.stderr.write(f"wf.py: {time.monotonic() - T0:7.1f} s {msg}\n")
    sys.stderr.flush()


def url(args, db):
    return f"postgresql://postgres@{args.host}:{args.port}/{db}"


# ---------------------------------------------------------------- counters

def wait_no_clients(admin, db, grace=5.0, deadline=30.0):
    start = time.monotonic()
    terminated = False
    while True:
        (n,) = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend'",
            (db,)).fetchone()
        if n == 0:
            return
        if time.monotonic() - start > deadline:
            raise RuntimeError(f"{n} client backend(s) still connected to {db}")
        if not terminated and time.monotonic() - start > grace:
            (k,) = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = %s AND backend_type = 'client backend'", (db,)).fetchone()
            log(f"ended {k} lingering connection(s) to {db}")
            terminated = True
        time.sleep(0.02)


def counters(args, db):
    with psycopg.connect(url(args, "postgres"), autocommit=True) as admin:
        wait_no_clients(admin, db)
        time.sleep(0.05)
        admin.execute("SELECT pg_stat_clear_snapshot()")
        (commits, lsn) = admin.execute(
            "SELECT xact_commit, pg_current_wal_lsn() - '0/0'::pg_lsn FROM pg_stat_database WHERE datname = %s",
            (db,)).fetchone()
        return int(commits), int(lsn)


# ------------------------------------------------------------------- setup

def fresh_db(args, db):
    with psycopg.connect(url(args, "postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{db}"')


def setup(args, system, db):
    fresh_db(args, db)
    if system == "aedb_queue":
        with psycopg.connect(url(args, db), autocommit=True) as c:
            c.execute("CREATE EXTENSION aedb_queue")
    elif system == "absurd":
        # Absurd's docs (docs/database.md): `absurdctl init` applies the
        # schema; absurdctl 0.5.1 carries the 0.5.1 absurd.sql in the package.
        env = dict(os.environ, ABSURD_DATABASE_URL=url(args, db))
        absurdctl = os.path.join(os.path.dirname(sys.executable), "absurdctl")
        for cmd in ([absurdctl, "init"], [absurdctl, "create-queue", QUEUE]):
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    elif system.startswith("dbos"):
        # DBOS creates and migrates its system database at launch; the
        # client (DBOSClient) needs it made already.
        child(args, "dbos-init", db).wait_ok()


# --------------------------------------------------------------- processes

class Child:
    def __init__(self, argv):
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)

    def wait_ok(self):
        out, _ = self.p.communicate()
        if self.p.returncode != 0:
            raise RuntimeError(f"{self.p.args} failed ({self.p.returncode})")
        return out


def child(args, role, db, worker=0):
    argv = [sys.executable, os.path.abspath(__file__), role, "--host", args.host, "--port", str(args.port),
            "--db", db, "--shape", args.shape, "--n", str(args.n), "--steps", str(args.steps),
            "--workers", str(args.workers), "--sleep", str(args.sleep), "--worker", str(worker),
            "--dbos-poll", str(args.dbos_poll), "--poll", str(args.poll)]
    return Child(argv)


DONE_SQL = {
    # aedb_queue deletes a completed task (no retention asked): done = gone.
    "aedb_queue": "SELECT %(n)s - count(*) FROM aedb_queue.task WHERE queue = 'bench'",
    "absurd": "SELECT count(*) FROM absurd.t_bench WHERE state = 'completed'",
    "dbos": "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS' AND name = 'wf'",
    "dbos_direct": "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS' AND name = 'wf'",
}


def poll_until_done(args, system, db, n, timeout):
    """Returns (seconds at done, transactions this poller committed)."""
    txns = 0
    with psycopg.connect(url(args, db), autocommit=True) as c:
        start = time.monotonic()
        while True:
            (done,) = c.execute(DONE_SQL[system], {"n": n}).fetchone()
            txns += 1
            if done >= n:
                return time.time(), txns
            if time.monotonic() - start > timeout:
                raise RuntimeError(f"{system}: {done}/{n} done after {timeout} s")
            time.sleep(0.1)


def poller_overhead(args, db, system):
    """Commits of a poller's connection besides its polls (calibrated on
    the fresh database: connect, 10 polls, close)."""
    before = counters(args, db)[0]
    with psycopg.connect(url(args, db), autocommit=True) as c:
        for _ in range(10):
            c.execute(DONE_SQL[system], {"n": 0}).fetchone()
    return counters(args, db)[0] - before - 10


def run_one(args, system, shape):
    db = f"wf_{system}_{shape}".lower()
    n = args.n if shape == "A" else args.nb
    ops = args.steps if shape == "A" else 4
    sub = argparse.Namespace(**vars(args))
    sub.shape, sub.n = shape, n
    log(f"{system} shape {shape}: setup of {db}")
    setup(sub, system, db)
    extra = poller_overhead(sub, db, system)
    res = dict(system=system, shape=shape, workflows=n, ops_per_workflow=ops, workers=args.workers)
    c0, w0 = counters(sub, db)
    if system != "dbos_direct":
        t = time.time()
        child(sub, f"{system}-enqueue", db).wait_ok()
        res["enqueue_seconds"] = round(time.time() - t, 2)
    c1, w1 = counters(sub, db)
    log(f"{system} shape {shape}: run")
    workers = [child(sub, f"{system}-worker", db, worker=i)
               for i in range(1 if system.startswith("dbos") else args.workers)]
    t_done, polls = poll_until_done(sub, system, db, n, timeout=args.timeout)
    for w in workers:
        w.p.send_signal(signal.SIGTERM)
    firsts = []
    for w in workers:
        out = w.wait_ok()
        firsts += [float(l.split()[1]) for l in out.splitlines() if l.startswith("FIRST ")]
    c2, w2 = counters(sub, db)
    run_commits = c2 - c1 - polls - extra
    secs = t_done - min(firsts)
    res.update(
        enqueue_commits=c1 - c0, enqueue_wal=w1 - w0,
        run_commits=run_commits, run_wal=w2 - w1, run_seconds=round(secs, 2),
        poller_commits_subtracted=polls + extra,
        ops_per_second=round(n * ops / secs, 1),
        commits_per_op=round((c1 - c0 + run_commits) / (n * ops), 3),
        wal_per_op=round((w1 - w0 + w2 - w1) / (n * ops)),
        run_commits_per_op=round(run_commits / (n * ops), 3),
        run_wal_per_op=round((w2 - w1) / (n * ops)),
        commits_per_workflow=round((c1 - c0 + run_commits) / n, 2),
        wal_per_workflow=round((w2 - w0) / n),
    )
    res["check"] = check(sub, system, db, n, ops)
    log(f"{system} shape {shape}: {json.dumps(res)}")
    return res


def check(args, system, db, n, ops):
    """What the run left: every workflow finished, every op recorded once."""
    q = {
        "aedb_queue": "SELECT (SELECT count(*) FROM aedb_queue.task WHERE queue = 'bench')::text || ' tasks left'",
        "absurd": "SELECT (SELECT count(*) FROM absurd.t_bench WHERE state = 'completed')::text || ' completed, '"
                  " || (SELECT count(*) FROM absurd.c_bench) || ' checkpoints, '"
                  " || (SELECT count(*) FROM absurd.r_bench) || ' runs'",
        "dbos": "SELECT (SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS')::text || ' succeeded, '"
                " || (SELECT count(*) FROM dbos.operation_outputs) || ' operation outputs'",
    }[system.split("_direct")[0] if system != "aedb_queue" else system]
    with psycopg.connect(url(args, db), autocommit=True) as c:
        return c.execute(q).fetchone()[0]


def harness(args):
    with psycopg.connect(url(args, "postgres"), autocommit=True) as c:
        settings = dict(c.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN ('fsync','synchronous_commit','shared_buffers',"
            "'wal_level','full_page_writes','max_wal_size','checkpoint_timeout','autovacuum',"
            "'shared_preload_libraries','server_version','aedb_queue.reaper_interval')").fetchall())
    results = []
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load = [os.getloadavg()]
    for shape in args.shapes.split(","):
        for system in args.systems.split(","):
            if shape == "B" and system == "dbos_direct":
                continue
            results.append(run_one(args, system, shape))
            load.append(os.getloadavg())
    out = dict(started=started, settings=settings, args=vars(args), loadavg=load, results=results,
               versions=versions())
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    log(f"wrote {args.out}")


def versions():
    from importlib.metadata import version
    return {p: version(p) for p in ("dbos", "absurd-sdk", "absurdctl", "psycopg")}


# -------------------------------------------------------------- aedb_queue

def aedb_enqueue(args):
    with psycopg.connect(url(args, args.db), autocommit=True) as c:
        for i in range(args.n):
            c.execute("SELECT task_id FROM aedb_queue.queue_enqueue('bench', %s)", (json.dumps({"i": i}),))
            if args.shape == "B":
                c.execute("SELECT aedb_queue.queue_emit('bench', %s, %s)", (f"ev-{i}", '{"v": 1}'))


def aedb_worker(args):
    """The handler of docs/guide.md "Durable workflows", on the SQL
    functions: on every claim read the recorded steps, run the others, each
    recorded under the claim's token; a sleep or a wait that parks the task
    ends the handler with nothing settled; the completion claims the next
    task in the same statement (queue_complete_and_claim)."""
    stop = install_stop()
    owner = f"w{args.worker}"
    first = None
    with psycopg.connect(url(args, args.db), autocommit=True) as c:
        held = None
        while not stop["flag"]:
            if held is None:
                held = c.execute("SELECT task_id, fencing_token, payload FROM aedb_queue.queue_claim('bench', %s, "
                                 "lease => '60 seconds')", (owner,)).fetchone()
                if held is None:
                    time.sleep(args.poll)
                    continue
            if first is None:
                first = time.time()
            t, tok, payload = held
            done = {s for (s,) in c.execute("SELECT step FROM aedb_queue.queue_steps('bench', %s)", (t,))}

            def step(name, k):
                if name not in done:
                    c.execute("SELECT aedb_queue.queue_step_record('bench', %s, %s, %s, %s)",
                              (t, tok, name, json.dumps({"k": k})))

            parked = False
            if args.shape == "A":
                for k in range(args.steps):
                    step(f"s{k}", k)
            else:
                step("s0", 0)
                (waiting,) = c.execute("SELECT waiting FROM aedb_queue.queue_sleep('bench', %s, %s, 'nap', "
                                       "duration => make_interval(secs => %s))", (t, tok, args.sleep)).fetchone()
                if not waiting:
                    (waiting, to) = c.execute(
                        "SELECT waiting, timed_out FROM aedb_queue.queue_await_event('bench', %s, %s, 'ev', %s, "
                        "timeout => '60 seconds')", (t, tok, f"ev-{payload['i']}")).fetchone()
                    assert waiting or not to, "event wait timed out"
                parked = waiting
                if not parked:
                    step("s1", 1)
            if parked:
                held = None  # handed back: settle nothing
                continue
            row = c.execute("SELECT settled, task_id, fencing_token, payload FROM aedb_queue.queue_complete_and_claim("
                            "'bench', %s, %s, %s, lease => '60 seconds')", (owner, t, tok)).fetchone()
            assert row[0] == "applied", row
            held = (row[1], row[2], row[3]) if row[1] is not None else None
    if first is not None:
        print(f"FIRST {first}", flush=True)


def install_stop():
    stop = {"flag": False}

    def handler(*_):
        stop["flag"] = True
    signal.signal(signal.SIGTERM, handler)
    return stop


# ------------------------------------------------------------------ absurd

def absurd_app(args):
    from absurd_sdk import Absurd
    app = Absurd(url(args, args.db), queue_name=QUEUE)
    first = {}

    @app.register_task(name="wf")
    def wf(params, ctx):
        first.setdefault("t", time.time())
        if args.shape == "A":
            for k in range(args.steps):
                ctx.step(f"s{k}", lambda k=k: {"k": k})
        else:
            ctx.step("s0", lambda: {"k": 0})
            ctx.sleep_for("nap", args.sleep)
            ctx.await_event(f"ev-{params['i']}", timeout=60)
            ctx.step("s1", lambda: {"k": 1})
        return {"ok": True}
    return app, first


def absurd_enqueue(args):
    app, _ = absurd_app(args)
    for i in range(args.n):
        app.spawn("wf", {"i": i})
        if args.shape == "B":
            app.emit_event(f"ev-{i}", {"v": 1})
    app.close()


def absurd_worker(args):
    """One worker process (Absurd's docs: scale by processes), the sync
    worker loop with its defaults (concurrency 1, poll 0.25 s, claim
    timeout 120 s)."""
    app, first = absurd_app(args)
    signal.signal(signal.SIGTERM, lambda *_: app.stop_worker())
    app.start_worker(worker_id=f"w{args.worker}")
    app.close()
    if "t" in first:
        print(f"FIRST {first['t']}", flush=True)


# -------------------------------------------------------------------- dbos

def dbos_app(args, queue=True):
    from dbos import DBOS
    DBOS(config={"name": "wfbench", "system_database_url": url(args, args.db), "log_level": "WARNING"})
    first = {}

    @DBOS.step()
    def noop(k):
        return {"k": k}

    @DBOS.workflow(name="wf")
    def wf(i):
        first.setdefault("t", time.time())
        if args.shape == "A":
            for k in range(args.steps):
                noop(k)
        else:
            noop(0)
            DBOS.sleep(args.sleep)
            msg = DBOS.recv("ev", timeout_seconds=60)
            assert msg is not None, "event wait timed out"
            noop(1)
        return {"ok": True}
    return DBOS, wf, first


def dbos_init(args):
    DBOS, _, _ = dbos_app(args)
    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=args.workers, polling_interval_sec=args.dbos_poll)
    DBOS.destroy()


def dbos_enqueue(args):
    from dbos import DBOSClient
    client = DBOSClient(system_database_url=url(args, args.db), application_name="wfbench")
    for i in range(args.n):
        client.enqueue({"queue_name": QUEUE, "workflow_name": "wf", "workflow_id": f"wf-{i}"}, i)
        if args.shape == "B":
            client.send(f"wf-{i}", {"v": 1}, topic="ev")
    client.destroy()


def dbos_worker(args):
    """One DBOS process: the queue with worker_concurrency W dequeues into
    DBOS's executor threads."""
    DBOS, _, first = dbos_app(args)
    stop = install_stop()
    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=args.workers, polling_interval_sec=args.dbos_poll)
    while not stop["flag"]:
        time.sleep(0.05)
    DBOS.destroy()
    if "t" in first:
        print(f"FIRST {first['t']}", flush=True)


def dbos_direct_worker(args):
    """No queue: W threads call the workflow function directly (each call
    runs the workflow durably in the calling thread), N calls in all."""
    import threading
    DBOS, wf, first = dbos_app(args)
    stop = install_stop()
    DBOS.launch()
    nxt = iter(range(args.n))
    lock = threading.Lock()

    def loop():
        while True:
            with lock:
                i = next(nxt, None)
            if i is None:
                return
            wf(i)
    threads = [threading.Thread(target=loop) for _ in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    while not stop["flag"]:
        time.sleep(0.05)
    DBOS.destroy()
    print(f"FIRST {first['t']}", flush=True)


def table(path):
    """The summary tables of a results file, in Markdown."""
    with open(path) as f:
        data = json.load(f)
    names = {"aedb_queue": "aedb_queue", "absurd": "Absurd", "dbos": "DBOS (queue)", "dbos_direct": "DBOS (direct calls, no queue)"}
    out = []
    for shape in ("A", "B"):
        rows = [r for r in data["results"] if r["shape"] == shape]
        if not rows:
            continue
        ref = next(r for r in rows if r["system"] == "aedb_queue")
        r0 = rows[0]
        what = (f"{r0['workflows']:,} workflows of {r0['ops_per_workflow']} no-op steps" if shape == "A" else
                f"{r0['workflows']:,} workflows of step, sleep {data['args']['sleep']:g} s, event wait, step (4 ops)")
        out += [f"Shape {shape}: {what}, {r0['workers']} workers. Per op = per step (shape B: per recorded op); "
                "commits and WAL include starting the workflows.", "",
                "| system | ops/s (indicative) | commits/op | WAL bytes/op | commits/op vs aedb_queue | WAL/op vs aedb_queue | "
                "commits/workflow | WAL bytes/workflow | check |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in rows:
            out.append(f"| {names[r['system']]} | {r['ops_per_second']:,.0f} | {r['commits_per_op']:.2f} | {r['wal_per_op']:,} | "
                       f"{r['commits_per_op'] / ref['commits_per_op']:.2f}× | {r['wal_per_op'] / ref['wal_per_op']:.2f}× | "
                       f"{r['commits_per_workflow']:.1f} | {r['wal_per_workflow']:,} | {r['check']} |")
        out.append("")
        out += ["| system | enqueue commits | enqueue WAL bytes | run commits | run WAL bytes | run seconds | poller commits subtracted |",
                "|---|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            out.append(f"| {names[r['system']]} | {r['enqueue_commits']:,} | {r['enqueue_wal']:,} | {r['run_commits']:,} | "
                       f"{r['run_wal']:,} | {r['run_seconds']} | {r['poller_commits_subtracted']} |")
        out.append("")
    print("\n".join(out))


ROLES = {
    "aedb_queue-enqueue": aedb_enqueue, "aedb_queue-worker": aedb_worker,
    "absurd-enqueue": absurd_enqueue, "absurd-worker": absurd_worker,
    "dbos-init": dbos_init, "dbos-enqueue": dbos_enqueue, "dbos-worker": dbos_worker,
    "dbos_direct-worker": dbos_direct_worker,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["harness", "table"] + sorted(ROLES))
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=54400)
    ap.add_argument("--db", default=None)
    ap.add_argument("--systems", default="aedb_queue,absurd,dbos,dbos_direct")
    ap.add_argument("--shapes", default="A,B")
    ap.add_argument("--shape", default="A")
    ap.add_argument("--n", type=int, default=2000, help="workflows in shape A")
    ap.add_argument("--nb", type=int, default=200, help="workflows in shape B")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--worker", type=int, default=0)
    ap.add_argument("--sleep", type=float, default=1.0)
    ap.add_argument("--poll", type=float, default=0.25, help="aedb_queue worker's idle poll, s (Absurd's default)")
    ap.add_argument("--dbos-poll", type=float, default=0.05, help="DBOS queue polling_interval_sec")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "results", "workflows.json"))
    args = ap.parse_args()
    if args.role == "harness":
        harness(args)
    elif args.role == "table":
        table(args.out)
    else:
        ROLES[args.role](args)


if __name__ == "__main__":
    main()
