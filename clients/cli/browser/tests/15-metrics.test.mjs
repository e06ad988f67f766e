// GET /metrics: the agreed names, figures as the database has them, only the
// role's queues, counters_up 0 without the preload, the label cap.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { ADMIN, TENANT, PLAIN, sql } from './lib.mjs';

async function scrape(base) {
  const r = await fetch(`${base}/metrics`);
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type') || '', /^text\/plain/);
  const samples = [];
  for (const line of (await r.text()).split('\n')) {
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/);
    if (!m) continue;
    const labels = Object.fromEntries([...(m[2] || '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return samples;
}
const find = (ss, name, labels = {}) => ss.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));

test('admin: up, counters up, task gauges as queue_overview has them, estimates flagged', async () => {
  const ss = await scrape(ADMIN());
  assert.equal(find(ss, 'aedb_queue_up')[0]?.value, 1);
  assert.equal(find(ss, 'aedb_queue_counters_up')[0]?.value, 1);
  assert.equal(find(ss, 'aedb_queue_scrape_duration_seconds').length, 1);
  const rows = sql("SELECT queue, ready, dead, in_flight FROM aedb_queue.queue_overview() WHERE queue IN ('emails', 'reports', 'retry_me')");
  for (const [queue, ready, dead, inFlight] of rows) {
    assert.equal(find(ss, 'aedb_queue_tasks', { queue, state: 'ready' })[0]?.value, Number(ready), `${queue} ready`);
    assert.equal(find(ss, 'aedb_queue_tasks', { queue, state: 'dead' })[0]?.value, Number(dead), `${queue} dead`);
    assert.equal(find(ss, 'aedb_queue_tasks', { queue, state: 'in_flight' })[0]?.value, Number(inFlight), `${queue} in_flight`);
  }
  assert.equal(find(ss, 'aedb_queue_tasks_estimated', { queue: 'bulk', state: 'ready' })[0]?.value, 1);
  assert.equal(find(ss, 'aedb_queue_tasks_estimated', { queue: 'emails', state: 'ready' })[0]?.value, 0);
  assert.ok(find(ss, 'aedb_queue_completed_total', { queue: 'emails' })[0]?.value >= 1, 'emails completed a task');
  assert.ok(find(ss, 'aedb_queue_dead_lettered_total', { queue: 'reports' })[0]?.value >= 3);
  for (const n of ['aedb_queue_oldest_ready_age_seconds', 'aedb_queue_expired_leases', 'aedb_queue_paused',
    'aedb_queue_enqueued_total', 'aedb_queue_failed_total', 'aedb_queue_reclaimed_total', 'aedb_queue_cancelled_total']) {
    assert.ok(find(ss, n).length >= 1, n);
  }
});

test('the confined tenant scrapes only its queues', async () => {
  const ss = await scrape(TENANT());
  const queues = new Set(ss.filter((s) => s.labels.queue).map((s) => s.labels.queue));
  assert.deepEqual([...queues].sort(), ['emails', 'tenant_a.jobs']);
});

test('without the preload: counters_up 0 and no counters, gauges still there', async () => {
  const ss = await scrape(PLAIN());
  assert.equal(find(ss, 'aedb_queue_up')[0]?.value, 1);
  assert.equal(find(ss, 'aedb_queue_counters_up')[0]?.value, 0);
  assert.equal(find(ss, 'aedb_queue_completed_total').length, 0);
  assert.equal(find(ss, 'aedb_queue_tasks', { queue: 'plain', state: 'ready' })[0]?.value, 1);
});

test('--max-queues caps the queue labels; the rest are summed under "other"', async (t) => {
  const bin = process.env.AEDB_QUEUE_BIN;
  if (!bin) return t.skip('AEDB_QUEUE_BIN not set');
  const dsn = `host=${process.env.PGHOST} port=${process.env.PGPORT} dbname=${process.env.PGDATABASE} user=dash_admin`;
  const child = spawn(bin, ['serve', '--listen', '127.0.0.1:0', '--no-login', '--max-queues', '3', '--dsn', dsn], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    let out = '';
    const url = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no "listening on" line: ${out}`)), 20000);
      child.stdout.on('data', (d) => {
        out += d;
        const m = out.match(/listening on (http:\/\/[0-9.:]+)/);
        if (m) { clearTimeout(timer); resolve(m[1]); }
      });
      child.on('exit', (c) => reject(new Error(`exited ${c}: ${out}`)));
    });
    const ss = await scrape(url);
    const queues = new Set(find(ss, 'aedb_queue_tasks').map((s) => s.labels.queue));
    assert.ok(queues.has('other'), 'an "other" bucket');
    assert.ok(queues.size <= 4, `at most 3 queues and other: ${[...queues]}`);
    const total = find(ss, 'aedb_queue_tasks', { state: 'dead' }).reduce((a, s) => a + s.value, 0);
    const db = Number(sql('SELECT sum(dead) FROM aedb_queue.queue_overview()')[0][0]);
    assert.equal(total, db, 'nothing lost in the sum');
  } finally {
    child.kill();
    await once(child, 'exit').catch(() => {});
  }
});
