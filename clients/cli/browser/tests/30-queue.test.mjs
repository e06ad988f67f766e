// GET /queues/{q}: charts, in-flight (owner, lease left), scheduled, dead
// (errors), schedules and keys where they exist; 404 for unknown queues.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ADMIN, TENANT, openBrowser, visit, seed, sql, text, until } from './lib.mjs';

let browser, page, ids;
before(async () => { browser = await openBrowser(); page = await browser.page(); ids = seed(); });
after(async () => { await browser?.close(); });

const rowIds = (section) => page.locator(`section#${section} tr[data-task-id]`)
  .evaluateAll((trs) => trs.map((tr) => Number(tr.dataset.taskId)));

test('the heading is the queue name and the depth and throughput charts are drawn', async () => {
  await visit(page, `${ADMIN()}/queues/emails`);
  assert.match(await page.title(), /^aedb_queue/);
  assert.equal(await text(page.locator('h1')), 'emails');
  await until(async () => {
    await page.reload();
    const n = await page.locator('section#depth svg g[data-series="ready"] polyline').count();
    return n >= 1;
  }, { what: 'a depth chart with a ready line' });
  for (const s of ['ready', 'in_flight', 'scheduled', 'dead']) {
    assert.equal(await page.locator(`section#depth svg [data-series="${s}"]`).count(), 1, `depth series ${s}`);
  }
  for (const s of ['completed', 'failed']) {
    assert.equal(await page.locator(`section#throughput svg [data-series="${s}"]`).count(), 1, `throughput series ${s}`);
  }
  const box = await page.locator('section#depth svg').first().boundingBox();
  assert.ok(box && box.width > 200 && box.height > 50, 'the depth chart is visible');
});

test('in flight: the task with its owner and the lease left', async () => {
  await visit(page, `${ADMIN()}/queues/emails`);
  const db = sql("SELECT task_id FROM aedb_queue.tasks WHERE queue = 'emails' AND state = 'in_flight' ORDER BY task_id").map((r) => Number(r[0]));
  assert.deepEqual((await rowIds('in-flight')).sort(), db.sort());
  const tr = page.locator(`section#in-flight tr[data-task-id="${ids.e_run}"]`);
  assert.match(await text(tr), /worker-7/);
  // The lease is an hour: what is left reads in minutes.
  const row = await text(tr);
  assert.match(row, /\b(5[0-9]|60) ?m(in)?\b|\b0?(59|60):[0-9]{2}\b/, `lease left of about an hour in: ${row}`);
});

test('scheduled and dead sections list their tasks; a dead row shows its last error', async () => {
  await visit(page, `${ADMIN()}/queues/emails`);
  assert.deepEqual((await rowIds('scheduled')).sort((a, b) => a - b), [ids.e_sched, ids.e_sched_cancel].sort((a, b) => a - b));
  assert.deepEqual(await rowIds('dead'), [ids.e_dead]);
  assert.match(await text(page.locator(`section#dead tr[data-task-id="${ids.e_dead}"]`)), /SMTP 550 5\.1\.1 mailbox unavailable/);
  await visit(page, `${ADMIN()}/queues/reports`);
  const dead = sql("SELECT task_id FROM aedb_queue.tasks WHERE queue = 'reports' AND state = 'dead'").map((r) => Number(r[0]));
  assert.deepEqual((await rowIds('dead')).sort((a, b) => a - b), dead.sort((a, b) => a - b));
  for (const id of ids.r_dead) {
    assert.match(await text(page.locator(`section#dead tr[data-task-id="${id}"]`)), /template not found: weekly-digest-v2/);
  }
});

test('a task id in a section links to the task page', async () => {
  await visit(page, `${ADMIN()}/queues/emails`);
  await Promise.all([
    page.waitForURL(new RegExp(`/tasks/${ids.e_dead}$`)),
    page.locator(`section#dead tr[data-task-id="${ids.e_dead}"] a[href="/tasks/${ids.e_dead}"]`).click(),
  ]);
  assert.equal(await text(page.locator('dl#task dd[data-field="id"]')), String(ids.e_dead));
});

test('schedules and keys appear where they exist, and only there', async () => {
  await visit(page, `${ADMIN()}/queues/reports`);
  const sched = page.locator('section#schedules');
  assert.equal(await sched.count(), 1);
  assert.match(await text(sched), /nightly/);
  assert.match(await text(sched), /30 2 \* \* \*/);
  assert.match(await text(sched), /Europe\/Berlin/);
  assert.equal(await page.locator('section#keys').count(), 0, 'reports has no keys');

  await visit(page, `${ADMIN()}/queues/sync`);
  const keys = page.locator('section#keys');
  assert.equal(await keys.count(), 1);
  assert.match(await text(keys), /account-7/);
  assert.equal(await page.locator('section#schedules').count(), 0, 'sync has no schedules');

  await visit(page, `${ADMIN()}/queues/ledger`);
  assert.match(await text(page.locator('section#keys')), /account-7/, 'an ordering key is shown too');
});

test('an unknown queue is 404, and so is a queue the role may not read', async () => {
  await visit(page, `${ADMIN()}/queues/no_such_queue`, 404);
  assert.match(await page.title(), /^aedb_queue/);
  await visit(page, `${TENANT()}/queues/tenant_b.jobs`, 404);
  await visit(page, `${TENANT()}/queues/tenant_a.jobs`, 200);
});
