#!/usr/bin/env node
// Benchmark driver for the peer job queues pg-boss and graphile-worker.
//
//   node bench/peers/node/driver.mjs '{"system":"pg-boss","db":"postgres://...","scenario":"drain",
//        "jobs":50000,"workers":8,"batch":1,"rate":0,"seconds":0,"payload_bytes":100}'
//
// Prints exactly one JSON result line on stdout (the last line); all diagnostics go to stderr.
// Exits non-zero with a message on stderr on any failure or when the overall time guard fires.
// See README.md next to this file for what each scenario does with each system.

import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import PgBoss from 'pg-boss';
import { run, runMigrations, makeWorkerUtils, Logger } from 'graphile-worker';

// Keep stdout for the single result line: anything the libraries print goes to stderr.
console.log = console.error;
console.info = console.error;
console.warn = console.error;

const QUEUE = 'bench';          // pg-boss queue name
const TASK = 'noop';            // graphile-worker task identifier
const PREENQUEUE_CHUNK = 1000;  // batch size used to pre-enqueue for drain (untimed)
const POLL_MS = 50;             // completion polling period
const TICK_MS = 10;             // steady producer pacing period
const MAX_INFLIGHT_INSERTS = 4; // steady: concurrent producer calls at most

const nowMs = () => performance.timeOrigin + performance.now(); // wall-clock ms, sub-ms precision
const mono = () => performance.now();

function die(msg, code = 1) {
  process.stderr.write(`driver.mjs: error: ${msg}\n`);
  process.exit(code);
}

function pkgVersion(name) {
  try {
    const url = new URL(`./node_modules/${name}/package.json`, import.meta.url);
    return JSON.parse(readFileSync(url, 'utf8')).version;
  } catch {
    return 'unknown';
  }
}

// ---------------------------------------------------------------- arguments

function parseArgs() {
  if (process.argv.length < 3) die('usage: driver.mjs \'{"system":...,"db":...,"scenario":...}\'', 2);
  let a;
  try {
    a = JSON.parse(process.argv[2]);
  } catch (e) {
    die(`argument is not valid JSON: ${e.message}`, 2);
  }
  const num = (k, def) => {
    const v = a[k] ?? def;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) die(`"${k}" must be a non-negative number (got ${JSON.stringify(a[k])})`, 2);
    return v;
  };
  const cfg = {
    system: a.system,
    db: a.db,
    scenario: a.scenario,
    jobs: Math.floor(num('jobs', 0)),
    workers: Math.floor(num('workers', 1)),
    batch: Math.floor(num('batch', 1)),
    rate: num('rate', 0),
    seconds: num('seconds', 0),
    payload_bytes: Math.floor(num('payload_bytes', 100)),
    admin_db: typeof a.admin_db === 'string' ? a.admin_db : null, // another database, for the counters
  };
  if (!['pg-boss', 'graphile-worker'].includes(cfg.system)) die(`"system" must be "pg-boss" or "graphile-worker" (got ${JSON.stringify(cfg.system)})`, 2);
  if (typeof cfg.db !== 'string' || !cfg.db) die('"db" must be a postgres:// connection string', 2);
  if (!['enqueue', 'drain', 'steady'].includes(cfg.scenario)) die(`"scenario" must be enqueue, drain or steady (got ${JSON.stringify(cfg.scenario)})`, 2);
  if (cfg.workers < 1) die('"workers" must be >= 1', 2);
  if (cfg.batch < 1) die('"batch" must be >= 1', 2);
  if (cfg.scenario !== 'steady' && cfg.jobs < 1) die('"jobs" must be >= 1 for enqueue and drain', 2);
  if (cfg.scenario === 'steady' && (cfg.rate <= 0 || cfg.seconds <= 0)) die('steady needs "rate" > 0 and "seconds" > 0', 2);
  return cfg;
}

// ---------------------------------------------------------------- payloads

// A JSON object of about `bytes` bytes once serialised: {"i":<n>,"t":<ms>,"pad":"xxx..."}.
function makePayload(bytes, i, t) {
  const base = { i, t, pad: '' };
  const overhead = JSON.stringify(base).length;
  base.pad = 'x'.repeat(Math.max(0, bytes - overhead));
  return base;
}

// ---------------------------------------------------------------- system adapters

function silentGraphileLogger() {
  return new Logger(scope => (level, message) => {
    if (level === 'error' || level === 'warning') process.stderr.write(`graphile-worker ${level}: ${message}\n`);
  });
}

function pgBossAdapter(cfg) {
  const poolMax = Math.max(10, 2 * cfg.workers + 2 + (cfg.scenario === 'steady' ? MAX_INFLIGHT_INSERTS : 0));
  const pollingIntervalSeconds = 0.5; // pg-boss minimum
  let boss;
  const workerIds = [];
  return {
    version: pkgVersion('pg-boss'),
    async setup() {
      await this.open();             // start() installs the pgboss schema
      await boss.createQueue(QUEUE); // v10: queues must exist before send/insert/work
    },
    async open() {
      boss = new PgBoss({ connectionString: cfg.db, max: poolMax });
      boss.on('error', err => process.stderr.write(`pg-boss error: ${err?.message ?? err}\n`));
      await boss.start();
    },
    async enqueueBatch(payloads) {
      await boss.insert(payloads.map(data => ({ name: QUEUE, data })));
    },
    async enqueueOne(payload) {
      const id = await boss.send(QUEUE, payload);
      if (!id) throw new Error('pg-boss send() returned no id');
    },
    async startWorkers(onJobs) {
      for (let i = 0; i < cfg.workers; i++) {
        workerIds.push(await boss.work(QUEUE, { batchSize: cfg.batch, pollingIntervalSeconds }, async jobs => {
          onJobs(nowMs(), jobs.map(j => j.data));
        }));
      }
    },
    countSql: `SELECT count(*)::bigint AS n FROM pgboss.job WHERE name = '${QUEUE}' AND state = 'completed'`,
    // completed jobs, given the monitor's count
    completedFrom(n, _enqueued) { return n; },
    analyzeTables: ['pgboss.job'],
    async stopWorkers() {
      for (const id of workerIds) await boss.offWork({ id });
    },
    async close() {
      if (boss) await boss.stop({ graceful: true, wait: true, timeout: 2000 });
      boss = null;
      workerIds.length = 0;
    },
    settings(scn) {
      const pool = `pool max=${poolMax}`;
      if (scn === 'enqueue') {
        return cfg.batch > 1
          ? `insert([${cfg.batch} jobs]) per call, 1 producer; ${pool}`
          : `send() one job per call, ${cfg.workers} concurrent producers; ${pool}`;
      }
      const work = `work() x${cfg.workers} batchSize=${cfg.batch} pollingIntervalSeconds=${pollingIntervalSeconds}; ${pool}`;
      if (scn === 'drain') return `${work}; pre-enqueue insert() x${PREENQUEUE_CHUNK} + ANALYZE + CHECKPOINT (untimed); done = state 'completed'`;
      return `${work}; producer insert() every ${TICK_MS}ms at ${cfg.rate}/s (<=${MAX_INFLIGHT_INSERTS} calls in flight)`;
    },
  };
}

function graphileAdapter(cfg) {
  const logger = silentGraphileLogger();
  const runnerPool = cfg.workers + 2;
  const utilsPool = Math.max(10, cfg.workers + 2);
  const batched = cfg.batch > 1;
  let utils;
  let runner;
  return {
    version: pkgVersion('graphile-worker'),
    async setup() {
      await runMigrations({ connectionString: cfg.db, logger }); // installs graphile_worker schema
      await this.open();
    },
    async open() {
      utils = await makeWorkerUtils({ connectionString: cfg.db, logger, maxPoolSize: utilsPool });
    },
    async enqueueBatch(payloads) {
      await utils.addJobs(payloads.map(payload => ({ identifier: TASK, payload })));
    },
    async enqueueOne(payload) {
      await utils.addJob(TASK, payload);
    },
    async startWorkers(onJobs) {
      const opts = {
        connectionString: cfg.db,
        concurrency: cfg.workers,
        maxPoolSize: runnerPool,
        logger,
        noHandleSignals: true,
        taskList: { [TASK]: async payload => { onJobs(nowMs(), [payload]); } },
      };
      if (batched) opts.preset = { worker: { localQueue: { size: cfg.batch }, completeJobBatchDelay: 0 } };
      runner = await run(opts);
    },
    countSql: 'SELECT count(*)::bigint AS n FROM graphile_worker._private_jobs',
    // completed jobs = enqueued - rows still present (completed jobs are deleted)
    completedFrom(n, enqueued) { return enqueued - n; },
    analyzeTables: ['graphile_worker._private_jobs'],
    async stopWorkers() {
      if (runner) {
        const r = runner;
        runner = null;
        await r.stop();
        await r.promise.catch(() => {});
      }
    },
    async close() {
      await this.stopWorkers();
      if (utils) await utils.release();
      utils = null;
    },
    settings(scn) {
      if (scn === 'enqueue') {
        return cfg.batch > 1
          ? `makeWorkerUtils().addJobs([${cfg.batch} specs]) per call, 1 producer; utils pool max=${utilsPool}`
          : `makeWorkerUtils().addJob() one job per call, ${cfg.workers} concurrent producers; utils pool max=${utilsPool}`;
      }
      const mode = batched ? `localQueue.size=${cfg.batch} completeJobBatchDelay=0` : 'default (no localQueue, no completion batching)';
      const work = `run() concurrency=${cfg.workers} maxPoolSize=${runnerPool} ${mode}`;
      if (scn === 'drain') return `${work}; pre-enqueue addJobs() x${PREENQUEUE_CHUNK} + ANALYZE + CHECKPOINT (untimed); done = _private_jobs empty`;
      return `${work}; producer addJobs() every ${TICK_MS}ms at ${cfg.rate}/s (<=${MAX_INFLIGHT_INSERTS} calls in flight)`;
    },
  };
}

// ---------------------------------------------------------------- scenarios

async function scenarioEnqueue(cfg, sys) {
  const pb = cfg.payload_bytes;
  const t0 = mono();
  if (cfg.batch > 1) {
    for (let done = 0; done < cfg.jobs;) {
      const n = Math.min(cfg.batch, cfg.jobs - done);
      const payloads = new Array(n);
      for (let k = 0; k < n; k++) payloads[k] = makePayload(pb, done + k, nowMs());
      await sys.enqueueBatch(payloads);
      done += n;
    }
  } else {
    let next = 0;
    const producer = async () => {
      while (next < cfg.jobs) {
        const i = next++;
        await sys.enqueueOne(makePayload(pb, i, nowMs()));
      }
    };
    await Promise.all(Array.from({ length: cfg.workers }, producer));
  }
  const secs = (mono() - t0) / 1000;
  return { jobs: cfg.jobs, seconds: secs, latency_us: null, backlog_end: null };
}

async function preEnqueue(cfg, sys, monitor) {
  for (let done = 0; done < cfg.jobs;) {
    const n = Math.min(PREENQUEUE_CHUNK, cfg.jobs - done);
    const payloads = new Array(n);
    for (let k = 0; k < n; k++) payloads[k] = makePayload(cfg.payload_bytes, done + k, nowMs());
    await sys.enqueueBatch(payloads);
    done += n;
  }
  await monitor.query(`ANALYZE ${sys.analyzeTables.join(', ')}`);
  try {
    await monitor.query('CHECKPOINT');
  } catch (e) {
    process.stderr.write(`driver.mjs: CHECKPOINT skipped: ${e.message}\n`);
  }
}

async function countCompleted(sys, monitor, enqueued) {
  const { rows } = await monitor.query(sys.countSql);
  return sys.completedFrom(Number(rows[0].n), enqueued);
}

async function scenarioDrain(cfg, sys, monitor) {

  let firstCall = null;
  let resolveFirst;
  const first = new Promise(r => { resolveFirst = r; });
  let handled = 0;
  await sys.startWorkers((t, payloads) => {
    if (firstCall === null) { firstCall = mono(); resolveFirst(); }
    handled += payloads.length;
  });
  await first;
  const start = firstCall;
  const capMs = cfg.seconds > 0 ? cfg.seconds * 1000 : Infinity;
  let completed = 0;
  let end;
  for (;;) {
    const remainingWindow = start + capMs - mono();
    await sleep(Math.max(0, Math.min(POLL_MS, remainingWindow)));
    completed = await countCompleted(sys, monitor, cfg.jobs);
    end = mono();
    if (completed >= cfg.jobs) break;
    if (end - start >= capMs) break;
  }
  await sys.stopWorkers();
  return {
    jobs: completed,
    seconds: (end - start) / 1000,
    latency_us: null,
    backlog_end: cfg.jobs - completed,
    extra: { enqueued: cfg.jobs, handler_jobs: handled, capped: completed < cfg.jobs },
  };
}

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1));
  return Math.round(sorted[idx]);
}

async function scenarioSteady(cfg, sys, monitor) {
  const latencies = [];
  let recording = true;
  await sys.startWorkers((t, payloads) => {
    if (!recording) return;
    for (const p of payloads) latencies.push((t - p.t) * 1000);
  });

  const target = Math.round(cfg.rate * cfg.seconds);
  const durMs = cfg.seconds * 1000;
  let sent = 0;       // jobs handed to an enqueue call
  let acked = 0;      // jobs whose enqueue call returned
  let inflight = 0;
  let failure = null;
  const pending = new Set();
  const t0 = mono();
  for (let tick = 1; ; tick++) {
    if (failure) throw failure;
    const elapsed = mono() - t0;
    const due = Math.min(target, Math.floor((elapsed / 1000) * cfg.rate));
    if (due > sent && inflight < MAX_INFLIGHT_INSERTS) {
      const n = due - sent;
      const payloads = new Array(n);
      const t = nowMs();
      for (let k = 0; k < n; k++) payloads[k] = makePayload(cfg.payload_bytes, sent + k, t);
      sent += n;
      inflight++;
      const pr = sys.enqueueBatch(payloads)
        .then(() => { acked += n; }, e => { failure = failure ?? e; })
        .finally(() => { inflight--; pending.delete(pr); });
      pending.add(pr);
    }
    if (elapsed >= durMs && sent >= target) break;
    const wait = t0 + tick * TICK_MS - mono();
    if (wait > 0) await sleep(wait);
  }
  await Promise.all([...pending]);
  if (failure) throw failure;
  const producerSecs = (mono() - t0) / 1000;
  const completed = await countCompleted(sys, monitor, acked);
  recording = false;
  await sys.stopWorkers();

  const sorted = Float64Array.from(latencies).sort();
  return {
    jobs: completed,
    seconds: producerSecs,
    latency_us: sorted.length ? { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99) } : null,
    backlog_end: acked - completed,
    extra: {
      enqueued: acked,
      picked_up: sorted.length,
      latency_max_us: sorted.length ? Math.round(sorted[sorted.length - 1]) : null,
    },
  };
}

// ---------------------------------------------------------------- commits and WAL

// The window's cost: commits of the bench database (pg_stat_database.xact_commit)
// and cluster WAL bytes. Statistics reach the shared counters lazily (an idle
// backend may hold its counts for up to 10 s) but every backend flushes them
// when it exits, so the window is opened and closed with no client backend
// connected to the bench database, read from a connection to another database.
const dbName = url => decodeURIComponent(new URL(url).pathname.slice(1));

async function readCounters(cfg) {
  const admin = new pg.Client({ connectionString: cfg.admin_db });
  await admin.connect();
  try {
    const deadline = mono() + 15000;
    let grace = mono() + 5000;
    for (;;) {
      const { rows } = await admin.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'", [dbName(cfg.db)]);
      if (rows[0].n === 0) break;
      if (mono() > deadline) throw new Error(`${rows[0].n} client backend(s) still connected to ${dbName(cfg.db)}`);
      if (mono() > grace) {
        // A closed client's connection that lingers: ended, it flushes its statistics as it exits.
        await admin.query(
          "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'", [dbName(cfg.db)]);
        process.stderr.write('driver.mjs: ended lingering connection(s) of a closed client\n');
        grace = Infinity;
      }
      await sleep(10);
    }
    await admin.query('SELECT pg_stat_clear_snapshot()');
    const { rows } = await admin.query(
      "SELECT xact_commit::bigint AS c, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint AS w FROM pg_stat_database WHERE datname = $1",
      [dbName(cfg.db)]);
    return { commits: Number(rows[0].c), wal: Number(rows[0].w) };
  } finally {
    await admin.end();
  }
}

async function autovacuumRuns(cfg) {
  const c = new pg.Client({ connectionString: cfg.db });
  await c.connect();
  try {
    const { rows } = await c.query('SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0)::bigint AS n FROM pg_stat_user_tables');
    return Number(rows[0].n);
  } finally {
    await c.end();
  }
}

// A monitor pool that counts its own statements (each one autocommit
// transaction), so the window's commits can leave them out.
function makeMonitor(cfg) {
  const pool = new pg.Pool({ connectionString: cfg.db, max: 2, application_name: 'bench-monitor' });
  pool.on('error', e => process.stderr.write(`monitor pool error: ${e.message}\n`));
  let statements = 0;
  return {
    query(...args) { statements++; return pool.query(...args); },
    get statements() { return statements; },
    end() { return pool.end(); },
  };
}

// ---------------------------------------------------------------- main

async function main() {
  const cfg = parseArgs();
  const guardSecs = cfg.seconds > 0 ? cfg.seconds + 120 : 300;
  const guard = setTimeout(() => die(`overall timeout: no result after ${guardSecs}s (${cfg.system} ${cfg.scenario})`, 3), guardSecs * 1000);
  const adapter = () => (cfg.system === 'pg-boss' ? pgBossAdapter(cfg) : graphileAdapter(cfg));

  // Untimed: the schema, and for drain the jobs; then every connection closes.
  let sys = adapter();
  let monitor = makeMonitor(cfg);
  try {
    await sys.setup();
    if (cfg.scenario === 'drain') {
      await preEnqueue(cfg, sys, monitor);
      const pre = await countCompleted(sys, monitor, cfg.jobs);
      if (pre !== 0) throw new Error(`expected 0 completed jobs before the drain, found ${pre}`);
    }
  } finally {
    await sys.close().catch(e => process.stderr.write(`driver.mjs: shutdown: ${e.message}\n`));
    await monitor.end().catch(() => {});
  }

  // The measured window: a new client (its start-up is in the window), the
  // scenario, shutdown, and a last count of the jobs done.
  const av0 = cfg.admin_db ? await autovacuumRuns(cfg) : 0;
  const c0 = cfg.admin_db ? await readCounters(cfg) : null;
  sys = adapter();
  monitor = makeMonitor(cfg);
  let res;
  let settled;
  try {
    await sys.open();
    if (cfg.scenario === 'enqueue') res = await scenarioEnqueue(cfg, sys);
    else if (cfg.scenario === 'drain') res = await scenarioDrain(cfg, sys, monitor);
    else res = await scenarioSteady(cfg, sys, monitor);
    await sys.close();
    settled = cfg.scenario === 'enqueue' ? cfg.jobs : await countCompleted(sys, monitor, res.extra?.enqueued ?? cfg.jobs);
  } finally {
    // Shut down even on failure so connections are released; errors here only get logged.
    await sys.close().catch(e => process.stderr.write(`driver.mjs: shutdown: ${e.message}\n`));
    await monitor.end().catch(() => {});
  }
  let cost = null;
  if (c0) {
    const c1 = await readCounters(cfg);
    const av1 = await autovacuumRuns(cfg);
    cost = { commits: c1.commits - c0.commits - monitor.statements, wal_bytes: c1.wal - c0.wal, jobs: settled, autovacuum: av1 - av0 };
  }

  const out = {
    system: cfg.system,
    scenario: cfg.scenario,
    jobs: res.jobs,
    seconds: res.seconds,
    latency_us: res.latency_us,
    backlog_end: res.backlog_end,
    cost,
    settings: `${cfg.system} ${sys.version}; ${sys.settings(cfg.scenario)}; payload ~${cfg.payload_bytes}B JSON`,
    ...(res.extra ?? {}),
  };
  clearTimeout(guard);
  process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0));
}

main().catch(e => {
  // Full stack first, then the one-line reason last (callers often show only the last stderr lines).
  if (e?.stack) process.stderr.write(`${e.stack}\n`);
  die(`${e?.message ?? String(e)}${e?.code ? ` (code ${e.code})` : ''}`);
});
