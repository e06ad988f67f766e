#!/usr/bin/env python3
"""Instructions per hot call, counted by callgrind on a single-user backend.

Each workload runs in a fresh copy of a prepared data directory, once with
N calls and once with 2N; (Ir(2N) - Ir(N)) / N is the cost of one call,
with the backend's startup, the first calls' plan preparation and cache
fills cancelled out. Collection stops at proc_exit, so the shutdown
checkpoint (which grows with the data written) is not counted.

Single-user mode runs every line as its own transaction (autocommit): the
count includes parse/plan of the top-level statement (simple mode; with
PREPARE/EXECUTE in prepared mode), the executor, and the commit (WAL
insert + flush call; with fsync=off the flush does no fdatasync, which
valgrind would not count anyway: it is a system call).

Driven by bench/icount.sh; see bench/results/instructions.md.
"""

import argparse
import concurrent.futures
import datetime
import json
import os
import re
import shutil
import subprocess
import sys

PAYLOAD = '{"n":1}'
BATCH = 100
# A statement of constant cost whose function callgrind dumps after.
MARKER_FUNCTION = "pg_backend_pid"
MARKER = "SELECT pg_catalog.pg_backend_pid()"
LEASE = "1 hour"
# Workflows parked ahead of the ready tasks in the parked/delayed templates.
PARKED = 100_000

BASELINE_SCHEMA = [
    # bench/src/systems.rs BASELINE_SCHEMA, one statement a line.
    "CREATE TABLE jobs (id bigserial PRIMARY KEY, queue text NOT NULL, priority int NOT NULL DEFAULT 0, "
    "run_at timestamptz NOT NULL DEFAULT now(), payload jsonb, state text NOT NULL DEFAULT 'ready', "
    "attempts int NOT NULL DEFAULT 0, locked_by text, locked_until timestamptz)",
    "CREATE INDEX jobs_ready ON jobs (queue, priority DESC, id) WHERE state = 'ready'",
]

BASELINE_PICK = (
    "SELECT id FROM jobs WHERE queue = {q} AND state = 'ready' AND run_at <= now() "
    "ORDER BY priority DESC, id LIMIT 1 FOR UPDATE SKIP LOCKED"
)
# The bench's baseline claim of N (bench/src/systems.rs `claim`).
BASELINE_CLAIM_MANY = (
    "WITH c AS (SELECT id FROM jobs WHERE queue = {q} AND state = 'ready' AND run_at <= now() "
    "ORDER BY priority DESC, id LIMIT {n} FOR UPDATE SKIP LOCKED) "
    "UPDATE jobs j SET state = 'running', attempts = j.attempts + 1, locked_by = {w}, "
    "locked_until = now() + {lease}::interval FROM c WHERE j.id = c.id "
    "RETURNING j.id, j.attempts::bigint, j.payload"
)
BASELINE_CLAIM = (
    "UPDATE jobs SET state = 'running', attempts = attempts + 1, locked_by = {w}, "
    "locked_until = now() + {lease}::interval WHERE id = (" + BASELINE_PICK + ") "
    "RETURNING id, payload, attempts"
)


def lit(s):
    return "'" + s.replace("'", "''") + "'"


def array_literal(n):
    """A jsonb[] literal of n payloads."""
    elem = '"' + PAYLOAD.replace('"', '\\"') + '"'
    return "{" + ",".join([elem] * n) + "}"


# Each workload: system, template, the per-call statement in simple mode
# (a function of the call's index i, 0-based) and in prepared mode (PREPARE
# text, EXECUTE text of i), and a check of the state after k calls.
def workloads(m):
    q, w, lease = lit("q"), lit("w"), lit(LEASE)

    def ids(i):
        """The ids of call i's batch: BATCH * i + 1 .. BATCH * (i + 1)."""
        return "{" + ",".join(str(BATCH * i + j) for j in range(1, BATCH + 1)) + "}"

    def ones():
        return "{" + ",".join(["1"] * BATCH) + "}"
    arr = lit(array_literal(BATCH))
    values = ", ".join(f"({q}, {lit(PAYLOAD)})" for _ in range(BATCH))
    p = lit(PAYLOAD)
    aedb_claim1 = dict(
        call="claim (max 1)", system="aedb_queue", template="ready",
        simple=lambda i: f"SELECT * FROM aedb_queue.queue_claim({q}, {w}, lease => {lease})",
        prepare="PREPARE s(text, text, interval) AS SELECT * FROM aedb_queue.queue_claim($1, $2, lease => $3)",
        execute=lambda i: f"EXECUTE s({q}, {w}, {lease})",
        check=("SELECT count(*) FROM aedb_queue.task WHERE state = 'in_flight'", lambda k: k))
    base_claim1 = dict(
        call="claim (max 1)", system="baseline", template="ready",
        simple=lambda i: BASELINE_CLAIM.format(q=q, w=w, lease=lease),
        prepare="PREPARE s(text, text, interval) AS "
        + BASELINE_CLAIM.format(q="$1", w="$2", lease="$3"),
        execute=lambda i: f"EXECUTE s({q}, {w}, {lease})",
        check=("SELECT count(*) FROM jobs WHERE state = 'running'", lambda k: k))
    return [
        # The bench's statement (bench/src/systems.rs): the id read from the
        # call in the select list.
        dict(call="enqueue", system="aedb_queue", template="empty",
             simple=lambda i: f"SELECT (aedb_queue.queue_enqueue({q}, {p})).task_id",
             prepare="PREPARE s(text, jsonb) AS SELECT (aedb_queue.queue_enqueue($1, $2)).task_id",
             execute=lambda i: f"EXECUTE s({q}, {p})",
             check=("SELECT count(*) FROM aedb_queue.task", lambda k: k)),
        # The clients' form (clients/rust, clients/python): the function in
        # FROM, which PostgreSQL runs as a function scan.
        dict(call="enqueue, task_id from FROM", system="aedb_queue", template="empty",
             simple=lambda i: f"SELECT task_id FROM aedb_queue.queue_enqueue({q}, {p})",
             prepare="PREPARE s(text, jsonb) AS SELECT task_id FROM aedb_queue.queue_enqueue($1, $2)",
             execute=lambda i: f"EXECUTE s({q}, {p})",
             check=("SELECT count(*) FROM aedb_queue.task", lambda k: k)),
        dict(call="enqueue", system="baseline", template="empty",
             simple=lambda i: f"INSERT INTO jobs (queue, payload) VALUES ({q}, {p})",
             prepare="PREPARE s(text, jsonb) AS INSERT INTO jobs (queue, payload) VALUES ($1, $2)",
             execute=lambda i: f"EXECUTE s({q}, {p})",
             check=("SELECT count(*) FROM jobs", lambda k: k)),
        dict(call="enqueue with idempotency key", system="aedb_queue", template="empty",
             simple=lambda i: f"SELECT aedb_queue.queue_enqueue({q}, {p}, idempotency_key => 'key-{i}')",
             prepare="PREPARE s(text, jsonb, text) AS SELECT aedb_queue.queue_enqueue($1, $2, idempotency_key => $3)",
             execute=lambda i: f"EXECUTE s({q}, {p}, 'key-{i}')",
             check=("SELECT count(*) FROM aedb_queue.task WHERE idempotency_key IS NOT NULL", lambda k: k)),
        dict(call=f"batch enqueue of {BATCH}", system="aedb_queue", template="empty", per=BATCH,
             simple=lambda i: f"SELECT count(*) FROM aedb_queue.queue_enqueue_batch({q}, {arr}::jsonb[])",
             prepare="PREPARE s(text, jsonb[]) AS SELECT count(*) FROM aedb_queue.queue_enqueue_batch($1, $2)",
             execute=lambda i: f"EXECUTE s({q}, {arr})",
             check=("SELECT count(*) FROM aedb_queue.task", lambda k: k * BATCH)),
        dict(call=f"batch enqueue of {BATCH}", system="baseline", template="empty", per=BATCH,
             simple=lambda i: f"INSERT INTO jobs (queue, payload) VALUES {values}",
             prepare="PREPARE s(text, jsonb[]) AS INSERT INTO jobs (queue, payload) SELECT $1, unnest($2)",
             execute=lambda i: f"EXECUTE s({q}, {arr})",
             check=("SELECT count(*) FROM jobs", lambda k: k * BATCH)),
        aedb_claim1,
        # The same claim with PARKED workflows parked ahead of the ready tasks
        # (lower ids) in the same queue: each claimed once and put to sleep
        # for 30 days by queue_sleep (state scheduled, not_before ahead, the
        # sleep recorded as a step); and the same number enqueued with a
        # 30-day delay. Baseline: as many jobs with run_at 30 days ahead.
        # Selected only with --only (their templates take a while to fill).
        *[dict(call=f"claim (max 1), {PARKED:,} {kind.split(',')[0]} ahead" + (", vacuumed" if "vacuumed" in kind else ""),
               system=system, template="ready-" + slug(kind).replace("_", "-"), optional=True,
               simple=base_w["simple"], prepare=base_w["prepare"], execute=base_w["execute"],
               check=(("SELECT (count(*) FILTER (WHERE state = 'in_flight' AND task_id > {p}))::bigint * 1000000 "
                       "+ count(*) FILTER (WHERE state = 'scheduled') FROM aedb_queue.task").replace("{p}", str(PARKED))
                      if system == "aedb_queue" else
                      ("SELECT (count(*) FILTER (WHERE state = 'running' AND id > {p}))::bigint * 1000000 "
                       "+ count(*) FILTER (WHERE state = 'ready' AND run_at > now()) FROM jobs").replace("{p}", str(PARKED)),
                      lambda k: k * 1000000 + PARKED))
          for kind, system, base_w in [
              ("parked", "aedb_queue", aedb_claim1), ("parked, vacuumed", "aedb_queue", aedb_claim1),
              ("delayed", "aedb_queue", aedb_claim1),
              ("delayed", "baseline", base_claim1)]],
        base_claim1,
        # The many templates hold BATCH times as many tasks (ready, or in
        # flight at token 1); batch workloads run N/10 calls of BATCH each.
        dict(call=f"claim of {BATCH}", system="aedb_queue", template="ready-many", per=BATCH,
             # The columns the bench's worker reads (bench/src/systems.rs).
             simple=lambda i: f"SELECT task_id, fencing_token, payload FROM aedb_queue.queue_claim({q}, {w}, lease => {lease}, max => {BATCH})",
             prepare="PREPARE s(text, text, interval, int) AS SELECT task_id, fencing_token, payload FROM aedb_queue.queue_claim($1, $2, lease => $3, max => $4)",
             execute=lambda i: f"EXECUTE s({q}, {w}, {lease}, {BATCH})",
             check=("SELECT count(*) FROM aedb_queue.task WHERE state = 'in_flight'", lambda k: k * BATCH)),
        dict(call=f"claim of {BATCH}", system="baseline", template="ready-many", per=BATCH,
             simple=lambda i: BASELINE_CLAIM_MANY.format(q=q, w=w, lease=lease, n=BATCH),
             prepare="PREPARE s(text, text, interval, int) AS "
             + BASELINE_CLAIM_MANY.format(q="$1", w="$2", lease="$3", n="$4"),
             execute=lambda i: f"EXECUTE s({q}, {w}, {lease}, {BATCH})",
             check=("SELECT count(*) FROM jobs WHERE state = 'running'", lambda k: k * BATCH)),
        dict(call=f"complete batch of {BATCH}", system="aedb_queue", template="inflight-many", per=BATCH,
             simple=lambda i: f"SELECT * FROM aedb_queue.queue_complete_batch({q}, {lit(ids(i))}, {lit(ones())})",
             prepare="PREPARE s(text, bigint[], bigint[]) AS SELECT * FROM aedb_queue.queue_complete_batch($1, $2, $3)",
             execute=lambda i: f"EXECUTE s({q}, {lit(ids(i))}, {lit(ones())})",
             check=("SELECT count(*) FROM aedb_queue.task", lambda k: m * BATCH - k * BATCH)),
        # The same settle reading back only the fenced-out tasks (none here).
        dict(call=f"complete batch of {BATCH}, lease_lost rows only", system="aedb_queue", template="inflight-many",
             per=BATCH,
             simple=lambda i: f"SELECT task_id FROM aedb_queue.queue_complete_batch({q}, {lit(ids(i))}, {lit(ones())}) "
             "WHERE outcome = 'lease_lost'",
             prepare="PREPARE s(text, bigint[], bigint[]) AS SELECT task_id FROM aedb_queue.queue_complete_batch($1, $2, $3) "
             "WHERE outcome = 'lease_lost'",
             execute=lambda i: f"EXECUTE s({q}, {lit(ids(i))}, {lit(ones())})",
             check=("SELECT count(*) FROM aedb_queue.task", lambda k: m * BATCH - k * BATCH)),
        dict(call=f"complete batch of {BATCH}", system="baseline", template="inflight-many", per=BATCH,
             simple=lambda i: f"DELETE FROM jobs WHERE id = ANY({lit(ids(i))}::bigint[])",
             prepare="PREPARE s(bigint[]) AS DELETE FROM jobs WHERE id = ANY($1)",
             execute=lambda i: f"EXECUTE s({lit(ids(i))})",
             check=("SELECT count(*) FROM jobs", lambda k: m * BATCH - k * BATCH)),
        # The in-flight template holds tasks 1..m claimed once (token 1).
        dict(call="complete", system="aedb_queue", template="inflight",
             simple=lambda i: f"SELECT aedb_queue.queue_complete({q}, {i + 1}, 1)",
             prepare="PREPARE s(text, bigint, bigint) AS SELECT aedb_queue.queue_complete($1, $2, $3)",
             execute=lambda i: f"EXECUTE s({q}, {i + 1}, 1)",
             check=("SELECT count(*) FROM aedb_queue.task", lambda k: m - k)),
        # The keyed template: tasks 1..m in flight at token 1, each the first
        # of its own concurrency key (limit 1), m+1..2m the second of each,
        # blocked: each completion hands its key's slot to the next.
        dict(call="complete, keyed (unblocks the next)", system="aedb_queue", template="inflight-keyed",
             simple=lambda i: f"SELECT aedb_queue.queue_complete({q}, {i + 1}, 1)",
             prepare="PREPARE s(text, bigint, bigint) AS SELECT aedb_queue.queue_complete($1, $2, $3)",
             execute=lambda i: f"EXECUTE s({q}, {i + 1}, 1)",
             check=("SELECT count(*) FROM aedb_queue.task WHERE state = 'ready'", lambda k: k)),
        dict(call="complete", system="baseline", template="inflight",
             simple=lambda i: f"DELETE FROM jobs WHERE id = {i + 1}",
             prepare="PREPARE s(bigint) AS DELETE FROM jobs WHERE id = $1",
             execute=lambda i: f"EXECUTE s({i + 1})",
             check=("SELECT count(*) FROM jobs", lambda k: m - k)),
        # The hold template: task 1 claimed (token 1), 2..m ready; call i
        # completes task i+1 and claims task i+2, each at token 1.
        dict(call="complete_and_claim (max 1)", system="aedb_queue", template="hold", needs="queue_complete_and_claim",
             simple=lambda i: f"SELECT * FROM aedb_queue.queue_complete_and_claim({q}, {w}, {i + 1}, 1, lease => {lease})",
             prepare="PREPARE s(text, text, bigint, bigint, interval) AS "
             "SELECT * FROM aedb_queue.queue_complete_and_claim($1, $2, $3, $4, lease => $5)",
             execute=lambda i: f"EXECUTE s({q}, {w}, {i + 1}, 1, {lease})",
             check=("SELECT count(*) FROM aedb_queue.task WHERE state = 'in_flight' AND task_id = {k} + 1", lambda k: 1)),
        dict(call="complete_and_claim (max 1)", system="baseline", template="hold",
             simple=lambda i: f"WITH done AS (DELETE FROM jobs WHERE id = {i + 1}) "
             + BASELINE_CLAIM.format(q=q, w=w, lease=lease),
             prepare="PREPARE s(bigint, text, text, interval) AS WITH done AS (DELETE FROM jobs WHERE id = $1) "
             + BASELINE_CLAIM.format(q="$2", w="$3", lease="$4"),
             execute=lambda i: f"EXECUTE s({i + 1}, {q}, {w}, {lease})",
             check=("SELECT count(*) FROM jobs WHERE state = 'running' AND id = {k} + 1", lambda k: 1)),
    ]


class Bench:
    def __init__(self, args):
        self.args = args
        self.bin = args.pg_bin
        self.work = args.work
        self.settings = ["-c", "fsync=off", "-c", "aedb_queue.claim_rescan_interval=1h"]
        for setting in args.pg_setting:
            self.settings += ["-c", setting]

    def as_postgres(self, cmd, **kw):
        return subprocess.run(["runuser", "-u", "postgres", "--"] + cmd, **kw)

    def single(self, datadir, lines, valgrind_out=None):
        """Runs lines through a single-user backend; returns its stdout."""
        cmd = [os.path.join(self.bin, "postgres"), "--single", "-D", datadir] + self.settings + ["postgres"]
        if valgrind_out:
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={valgrind_out}",
                   "--toggle-collect=proc_exit", "--collect-atstart=yes",
                   f"--dump-after={MARKER_FUNCTION}"] + cmd
        r = self.as_postgres(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True)
        err = [l for l in (r.stdout + r.stderr).splitlines() if re.search(r"\b(ERROR|FATAL|PANIC):", l)]
        if r.returncode != 0 or err:
            raise RuntimeError(f"single-user backend on {datadir} failed ({r.returncode}): {err[:3]}\n{r.stderr[-2000:]}")
        return r.stdout

    def query_values(self, datadir, sql):
        out = self.single(datadir, [sql])
        return re.findall(r'^\s*\d+: \S+ = "([^"]*)"', out, re.M)

    def copy(self, src, dst):
        if os.path.exists(dst):
            shutil.rmtree(dst)
        subprocess.run(["cp", "-a", src, dst], check=True)

    def setup_sql(self):
        """Statements of --setup-sql, one a line (-- comments skipped): run
        after CREATE EXTENSION, before the templates are filled, e.g. to
        alter aedb_queue.task for a schema variant."""
        if not self.args.setup_sql:
            return []
        with open(self.args.setup_sql) as f:
            return [l.strip() for l in f if l.strip() and not l.lstrip().startswith("--")]

    def selected(self, w):
        """Optional workloads (their templates are slow to fill) run only
        when --only names them."""
        if self.args.only:
            return re.search(self.args.only, f"{w['system']}:{w['call']}") is not None
        return not w.get("optional")

    def setup_parked(self, base, m):
        """The ready-parked and ready-delayed templates, when a selected
        workload needs them: PARKED tasks (ids 1..PARKED) parked 30 days
        ahead, then m ready tasks (ids PARKED+1..); jobs 1..PARKED with
        run_at 30 days ahead, then m ready jobs."""
        needed = {w["template"] for w in workloads(m) if self.selected(w)}
        jobs = [
            f"INSERT INTO jobs (queue, payload, run_at) SELECT 'q', {lit(PAYLOAD)}, now() + '30 days' FROM generate_series(1, {PARKED})",
            f"INSERT INTO jobs (queue, payload) SELECT 'q', {lit(PAYLOAD)} FROM generate_series(1, {m})",
        ]
        ready = f"SELECT count(*) FROM aedb_queue.queue_enqueue_batch('q', ARRAY(SELECT {lit(PAYLOAD)}::jsonb FROM generate_series(1, {m})))"
        if "ready-parked" in needed:
            d = os.path.join(self.work, "tmpl-ready-parked")
            self.copy(base, d)
            # Each workflow claimed once, then queue_sleep for 30 days: it is
            # handed back scheduled (attempt not counted), the sleep recorded.
            self.single(d, [
                f"SELECT count(*) FROM aedb_queue.queue_enqueue_batch('q', ARRAY(SELECT {lit(PAYLOAD)}::jsonb FROM generate_series(1, 1000)))"
                for _ in range(PARKED // 1000)
            ] + [
                "DO $$ DECLARE c record; s record; BEGIN "
                "FOR c IN SELECT task_id, fencing_token FROM aedb_queue.queue_claim('q', 'w', lease => '1 hour', max => 1000) LOOP "
                "SELECT * INTO s FROM aedb_queue.queue_sleep('q', c.task_id, c.fencing_token, 'nap', duration => '30 days'); "
                "IF NOT s.waiting THEN RAISE EXCEPTION 'not parked'; END IF; END LOOP; END $$"
                for _ in range(PARKED // 1000)
            ] + [ready] + jobs)
            got = self.query_values(d, "SELECT count(*)::text || ',' || min(task_id) || ',' || max(task_id) || ',' || "
                                    "bool_and(not_before > now() + '29 days') || ',' || max(attempts) "
                                    "FROM aedb_queue.task WHERE state = 'scheduled'")
            assert got == [f"{PARKED},1,{PARKED},true,0"], f"parked tasks: {got}"
            got = self.query_values(d, "SELECT count(*) FROM aedb_queue.queue_steps('q', 1)")
            assert got == ["1"], f"the sleep of task 1 is not recorded: {got}"
        if "ready-parked-vacuumed" in needed:
            # The same after VACUUM (what autovacuum leaves): the parking
            # left the 100,000 tasks' old entries in the ready index (they
            # were ready, then claimed), dead until a vacuum removes them.
            assert "ready-parked" in needed, "ready-parked-vacuumed is copied from ready-parked"
            d = os.path.join(self.work, "tmpl-ready-parked-vacuumed")
            self.copy(os.path.join(self.work, "tmpl-ready-parked"), d)
            self.single(d, ["VACUUM aedb_queue.task"])
        if "ready-delayed" in needed:
            d = os.path.join(self.work, "tmpl-ready-delayed")
            self.copy(base, d)
            self.single(d, [
                f"SELECT count(*) FROM aedb_queue.queue_enqueue_batch('q', ARRAY(SELECT {lit(PAYLOAD)}::jsonb FROM generate_series(1, 1000)), delay => '30 days')"
                for _ in range(PARKED // 1000)
            ] + [ready] + jobs)
            got = self.query_values(d, "SELECT count(*)::text || ',' || min(task_id) || ',' || max(task_id) "
                                    "FROM aedb_queue.task WHERE state = 'scheduled' AND not_before > now() + '29 days'")
            assert got == [f"{PARKED},1,{PARKED}"], f"delayed tasks: {got}"

    def setup(self, m):
        os.makedirs(self.work, exist_ok=True)
        shutil.chown(self.work, "postgres", "postgres")
        base = os.path.join(self.work, "tmpl-empty")
        if os.path.exists(base):
            shutil.rmtree(base)
        self.as_postgres([os.path.join(self.bin, "initdb"), "-D", base, "-U", "postgres", "--no-sync",
                          "-E", "UTF8", "--locale=C"], check=True, capture_output=True)
        self.single(base, [
            "CREATE EXTENSION aedb_queue",
            "CREATE ROLE app LOGIN",
            "GRANT aedb_queue_producer, aedb_queue_worker TO app",
        ] + BASELINE_SCHEMA + [
            "GRANT SELECT, INSERT, UPDATE, DELETE ON jobs TO app",
            "GRANT USAGE ON SEQUENCE jobs_id_seq TO app",
        ] + self.setup_sql())
        fill = [
            f"SELECT count(*) FROM aedb_queue.queue_enqueue_batch('q', ARRAY(SELECT {lit(PAYLOAD)}::jsonb FROM generate_series(1, {m})))",
            f"INSERT INTO jobs (queue, payload) SELECT 'q', {lit(PAYLOAD)} FROM generate_series(1, {m})",
        ]
        self.copy(base, os.path.join(self.work, "tmpl-ready"))
        self.single(os.path.join(self.work, "tmpl-ready"), fill)
        inflight = os.path.join(self.work, "tmpl-inflight")
        self.copy(base, inflight)
        claims = [f"SELECT count(*) FROM aedb_queue.queue_claim('q', 'w', lease => '1 day', max => 100)"
                  for _ in range((m + 99) // 100)]
        self.single(inflight, fill + claims + [
            "UPDATE jobs SET state = 'running', attempts = 1, locked_by = 'w', locked_until = now() + '1 day'"])
        mm = m * BATCH
        fill_many = [  # batches of 1,000 (a batch holds at most 10,000)
            f"SELECT count(*) FROM aedb_queue.queue_enqueue_batch('q', ARRAY(SELECT {lit(PAYLOAD)}::jsonb FROM generate_series(1, {min(1000, mm - s)})))"
            for s in range(0, mm, 1000)
        ] + [
            f"INSERT INTO jobs (queue, payload) SELECT 'q', {lit(PAYLOAD)} FROM generate_series(1, {mm})",
        ]
        self.copy(base, os.path.join(self.work, "tmpl-ready-many"))
        self.single(os.path.join(self.work, "tmpl-ready-many"), fill_many)
        inflight_many = os.path.join(self.work, "tmpl-inflight-many")
        self.copy(base, inflight_many)
        self.single(inflight_many, fill_many + [
            f"SELECT count(*) FROM aedb_queue.queue_claim('q', 'w', lease => '1 day', max => 1000)"
            for _ in range((mm + 999) // 1000)
        ] + ["UPDATE jobs SET state = 'running', attempts = 1, locked_by = 'w', locked_until = now() + '1 day'"])
        got = self.query_values(inflight_many, "SELECT min(task_id)::text || ',' || max(task_id) || ',' || count(*) || ',' || "
                                "min(fencing_token) || ',' || max(fencing_token) FROM aedb_queue.task WHERE state = 'in_flight'")
        assert got == [f"1,{mm},{mm},1,1"], f"in-flight tasks are not 1..{mm} at token 1: {got}"
        keyed = os.path.join(self.work, "tmpl-inflight-keyed")
        self.copy(base, keyed)
        self.single(keyed, [
            f"SELECT count(*) FROM (SELECT aedb_queue.queue_enqueue('q', {lit(PAYLOAD)}, concurrency_key => 'k' || (g % {m})) "
            f"FROM generate_series(0, {2 * m - 1}) g) e",
        ] + claims)
        got = self.query_values(keyed, "SELECT count(*)::text || ',' || min(task_id) || ',' || max(task_id) "
                                "FROM aedb_queue.task WHERE state = 'in_flight'")
        assert got == [f"{m},1,{m}"], f"keyed in-flight tasks are not 1..{m}: {got}"
        hold = os.path.join(self.work, "tmpl-hold")
        self.copy(base, hold)
        self.single(hold, fill + [
            "SELECT count(*) FROM aedb_queue.queue_claim('q', 'w', lease => '1 day')",
            "UPDATE jobs SET state = 'running', attempts = 1, locked_by = 'w', locked_until = now() + '1 day' WHERE id = 1"])
        # What the workloads take for granted.
        got = self.query_values(inflight, "SELECT min(task_id)::text || ',' || max(task_id) || ',' || count(*) || ',' || "
                                "min(fencing_token) || ',' || max(fencing_token) FROM aedb_queue.task WHERE state = 'in_flight'")
        assert got == [f"1,{m},{m},1,1"], f"in-flight tasks are not 1..{m} at token 1: {got}"
        got = self.query_values(hold, "SELECT task_id::text || ',' || fencing_token FROM aedb_queue.task WHERE state = 'in_flight'")
        assert got == ["1,1"], got
        got = self.query_values(inflight, "SELECT min(id)::text || ',' || max(id) FROM jobs")
        assert got == [f"1,{m}"], got
        self.setup_parked(base, m)
        have = self.query_values(base, "SELECT string_agg(proname, ',') FROM pg_proc WHERE pronamespace = 'aedb_queue'::regnamespace")
        self.functions = set(have[0].split(",")) if have else set()
        self.version = self.query_values(base, "SELECT extversion FROM pg_extension WHERE extname = 'aedb_queue'")[0]
        self.pg_version = self.query_values(base, "SELECT version()")[0]

    def run_one(self, w, role, mode, n, keep):
        """One backend: N calls, a marker, N more calls, two markers. The
        dump after each marker's function splits the run: the second part is
        the calls N+1..2N plus one marker statement, the third part one
        marker statement alone."""
        name = f"{w['system']}-{slug(w['call'])}-{role}-{mode}"
        datadir = os.path.join(self.work, "run-" + name)
        self.copy(os.path.join(self.work, "tmpl-" + w["template"]), datadir)
        lines = [] if role == "superuser" else ["SET SESSION AUTHORIZATION app"]
        call = w["simple"] if mode == "simple" else w["execute"]
        if mode == "prepared":
            lines.append(w["prepare"])
        lines += [call(i) for i in range(n)] + [MARKER]
        lines += [call(i) for i in range(n, 2 * n)] + [MARKER, MARKER]
        out_file = os.path.join(self.work, f"callgrind.{name}")
        for old in (out_file, *(f"{out_file}.{i}" for i in range(1, 4))):
            if os.path.exists(old):
                os.remove(old)
        self.single(datadir, lines, valgrind_out=out_file)
        sql, expect = w["check"]
        k = 2 * n
        got = self.query_values(datadir, sql.format(k=k))
        if got != [str(expect(k))]:
            raise RuntimeError(f"{name}: after {k} calls {sql.format(k=k)} gave {got}, expected {expect(k)}")
        first, second, marker = (callgrind_total(f"{out_file}.{i}") for i in (1, 2, 3))
        shutil.rmtree(datadir)
        files = [f"{out_file}.{i}" for i in (1, 2, 3)]
        os.remove(out_file)
        if not keep:
            for f in files:
                os.remove(f)
        return dict(ir_first=first, ir_second=second, ir_marker=marker,
                    per_call=(second - marker) / n, files=files)

    def measure(self):
        n = self.args.n
        cases = []
        for w in workloads(self.m):
            if not self.selected(w):
                continue
            if w.get("needs") and w["needs"] not in self.functions:
                cases.append(dict(w=w, skipped=f"aedb_queue.{w['needs']} is not in installed version {self.version}"))
                continue
            roles = ["ordinary"] + (["superuser"] if w["system"] == "aedb_queue" and not self.args.ordinary_only else [])
            for role in roles:
                for mode in self.args.modes:
                    calls = n if not w.get("per") else max(1, n // 10)
                    cases.append(dict(w=w, role=role, mode=mode, n=calls))
        with concurrent.futures.ThreadPoolExecutor(self.args.jobs) as pool:
            for c in cases:
                if "skipped" not in c:
                    c["future"] = pool.submit(self.run_one, c["w"], c["role"], c["mode"], c["n"], self.args.keep)
            for c in cases:
                if "future" in c:
                    c.update(c.pop("future").result())
                    print(f"{c['w']['system']:>10} {c['w']['call']:<30} {c['role']:<9} {c['mode']:<8} "
                          f"{c['per_call']:>12,.0f} Ir/call", flush=True)
        return cases


def slug(s):
    return re.sub(r"[^a-z0-9]+", "_", s.lower()).strip("_")


def callgrind_total(path):
    with open(path) as f:
        for line in f:
            if line.startswith("totals:") or line.startswith("summary:"):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pg-bin", required=True)
    ap.add_argument("--work", default="/dev/shm/aedb_icount")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--modes", default="prepared,simple")
    ap.add_argument("--keep", action="store_true", help="keep the callgrind files (for the profile)")
    ap.add_argument("--pg-setting", action="append", default=[], help="name=value, one more -c for every backend (repeatable; later wins)")
    ap.add_argument("--only", default=None, help="only workloads whose 'system:call' matches this regex")
    ap.add_argument("--ordinary-only", action="store_true", help="skip the superuser runs")
    ap.add_argument("--setup-sql", default=None, help="a file of statements run after CREATE EXTENSION (schema variants)")
    ap.add_argument("--out", default=None, help="write instructions.md/json into this directory")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--command", default="")
    args = ap.parse_args()
    args.modes = args.modes.split(",")
    b = Bench(args)
    b.m = 2 * args.n + 10
    started = datetime.datetime.now(datetime.timezone.utc)
    b.setup(b.m)
    cases = b.measure()
    elapsed = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
    if args.out:
        write_results(args, b, cases, started, elapsed)


def write_results(args, b, cases, started, elapsed):
    rows = []
    for c in cases:
        w = c["w"]
        if "skipped" in c:
            rows.append(dict(call=w["call"], system=w["system"], skipped=c["skipped"]))
            continue
        rows.append(dict(call=w["call"], system=w["system"], role=c["role"], mode=c["mode"], n=c["n"],
                         ir_first=c["ir_first"], ir_second=c["ir_second"], ir_marker=c["ir_marker"], ir_per_call=round(c["per_call"]),
                         tasks_per_call=w.get("per", 1), template=w["template"],
                         statement=(w["prepare"] + "; " + w["execute"](0)) if c["mode"] == "prepared" else w["simple"](0)))
    meta = dict(commit=args.commit, aedb_queue_version=b.version, postgres=b.pg_version,
                valgrind=subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip(),
                date=started.isoformat(timespec="seconds"), seconds=round(elapsed), n=args.n,
                settings=b.settings, command=args.command)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "instructions.json"), "w") as f:
        json.dump(dict(meta=meta, results=rows), f, indent=1)
        f.write("\n")
    with open(os.path.join(args.out, "instructions.md"), "w") as f:
        f.write(render_md(meta, rows))


def render_md(meta, rows):
    def find(call, system, role, mode):
        for r in rows:
            if r["call"] == call and r["system"] == system and r.get("role") == role and r.get("mode") == mode:
                return r
        return None

    calls = list(dict.fromkeys(r["call"] for r in rows))
    out = ["# Instructions per call (callgrind)", "",
           f"Generated by `{meta['command']}` at commit {meta['commit']} (aedb_queue {meta['aedb_queue_version']}), "
           f"{meta['postgres']}, {meta['valgrind']}, {meta['date']}, {meta['seconds']} s.", "",
           "Ir = instructions executed by the backend (callgrind), per call. One fresh single-user backend "
           "per workload, on its own copy of a prepared data directory, runs N calls, a marker statement "
           "(`" + MARKER + "`), N more calls and two more markers; callgrind dumps its counts after each "
           "marker's function returns, so the second part holds calls N+1..2N plus one marker statement, and "
           "the third part one marker statement alone. Ir/call = (second − third) / N, which is "
           "(Ir(2N) − Ir(N)) / N: startup, the first calls' statement preparation and cache fills fall in "
           f"the first part (N = {meta['n']}, batches N/10). Every call is its own transaction (single-user "
           "mode autocommits each line): **the count includes parsing/planning of the top-level statement "
           "(simple) or of EXECUTE with its cached plan (prepared), the executor, and the commit** (WAL "
           "insert and flush; the shutdown checkpoint is excluded: collection stops at `proc_exit`). Settings: "
           f"`{' '.join(meta['settings'])}` (fsync=off removes only fdatasync system calls, which callgrind "
           "does not count; data directories are on tmpfs; rescan interval 1h so every claim resumes its "
           "scan, as a busy worker does at the default 1 s, and so no path depends on valgrind's speed).", "",
           "*ordinary* = `SET SESSION AUTHORIZATION app`, a login role granted aedb_queue_producer and "
           "aedb_queue_worker (session, outer and current user are app); *superuser* = postgres. Baseline "
           "statements run as app (granted DML on `jobs`).", ""]
    for mode in ("prepared", "simple"):
        if not any(r.get("mode") == mode for r in rows):
            continue
        out += [f"## {mode} ({'PREPARE once, EXECUTE per call, as drivers with prepared statements do' if mode == 'prepared' else 'a SQL text per call, parsed and planned each time'})", "",
                "| call | aedb_queue Ir/call (ordinary role) | aedb_queue Ir/call (superuser) | baseline Ir/call | ratio (ordinary / baseline) |",
                "|---|---:|---:|---:|---:|"]
        for call in calls:
            a = find(call, "aedb_queue", "ordinary", mode)
            s = find(call, "aedb_queue", "superuser", mode)
            base = find(call, "baseline", "ordinary", mode)
            skipped = [r for r in rows if r["call"] == call and "skipped" in r]
            fmt = lambda r: f"{r['ir_per_call']:,}" if r else "–"
            if skipped and not a:
                out.append(f"| {call} | skipped: {skipped[0]['skipped']} | – | {fmt(base)} | – |")
                continue
            ratio = f"{a['ir_per_call'] / base['ir_per_call']:.2f}" if a and base else "–"
            out.append(f"| {call} | {fmt(a)} | {fmt(s)} | {fmt(base)} | {ratio} |")
        out.append("")
    out += ["## Workloads", "",
            "| system | call | template | statement (first call) |", "|---|---|---|---|"]
    seen = set()
    for r in rows:
        if "skipped" in r or r["mode"] != "simple" or (r["system"], r["call"]) in seen:
            continue
        seen.add((r["system"], r["call"]))
        stmt = r["statement"]
        if len(stmt) > 220:
            stmt = stmt[:200] + " …"
        out.append(f"| {r['system']} | {r['call']} | {r['template']} | `{stmt}` |")
    out += ["",
            "Templates: *empty* (schema only) for enqueues; *ready* (2N+10 ready tasks in `q`, and as many "
            "`jobs` rows) for claims; *in flight* (the same, all claimed once: task ids 1..2N+10 at fencing "
            "token 1, checked before measuring) for completes, which name the task by literal id, so no "
            "claim output has to be fed back; *hold* (task 1 / job 1 claimed, the rest ready) for "
            "complete-and-claim, where call i completes task i and claims task i+1, again at token 1. After "
            "every run a query checks the state the calls should have left (count of tasks, in-flight tasks, "
            "…); a run whose calls did not all take effect fails the benchmark.", "",
            f"Optional templates (run only when `--only` names them): *ready-parked*: {PARKED:,} workflows "
            "(task ids 1.." f"{PARKED}" ") each claimed once and parked by `queue_sleep(..., duration => '30 days')` "
            "(state scheduled, not_before 30 days ahead, attempts back to 0, the sleep recorded as a step), then "
            "2N+10 ready tasks; *ready-delayed*: as many tasks enqueued with `delay => '30 days'` instead, then the "
            "ready tasks; *ready-parked-vacuumed*: ready-parked after `VACUUM aedb_queue.task`; all hold the same jobs rows, the first " f"{PARKED:,}" " with run_at 30 days ahead. Their "
            "check: the claimed tasks are ready ones (ids above " f"{PARKED:,}" ") and every parked one is still "
            "there (aedb_queue: scheduled; baseline: ready, run_at ahead).", "",
            "Batches: Ir per call of 100 tasks (divide by 100 for per task). The three parts' raw counts "
            "are in instructions.json (ir_first, ir_second, ir_marker).", ""]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
