// GET /tasks/{id}: the fields (as the database has them), the payload, the
// errors, dependencies; 404 for what the role may not read.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ADMIN, TENANT, openBrowser, visit, seed, sql, text } from './lib.mjs';

const FIELDS = ['id', 'queue', 'state', 'attempts', 'max_attempts', 'fencing_token', 'owner', 'lease_until',
  'due_at', 'created_at', 'progress', 'idempotency_key'];
let browser, page, ids;
before(async () => { browser = await openBrowser(); page = await browser.page(); ids = seed(); });
after(async () => { await browser?.close(); });

const field = (f) => text(page.locator(`dl#task dd[data-field="${f}"]`));
const dbTask = (id) => {
  const [r] = sql(`SELECT task_id, queue, state, attempts, max_attempts, fencing_token, coalesce(owner_id, ''),
                          coalesce(idempotency_key, ''), coalesce(progress::text, ''), coalesce(last_error, '')
                   FROM aedb_queue.queue_find(task_id => ${Number(id)})`);
  assert.ok(r, `task ${id} in the database`);
  return { id: r[0], queue: r[1], state: r[2], attempts: r[3], max_attempts: r[4], fencing_token: r[5], owner: r[6],
    idempotency_key: r[7], progress: r[8], last_error: r[9] };
};

test('an in-flight task: every field, as the database has it', async () => {
  await visit(page, `${ADMIN()}/tasks/${ids.e_run}`);
  assert.match(await page.title(), /^aedb_queue/);
  for (const f of FIELDS) {
    assert.equal(await page.locator(`dl#task dd[data-field="${f}"]`).count(), 1, `field ${f}`);
  }
  const db = dbTask(ids.e_run);
  for (const f of ['id', 'queue', 'state', 'attempts', 'max_attempts', 'fencing_token', 'owner', 'idempotency_key']) {
    assert.equal(await field(f), db[f], `${f}: page vs database`);
  }
  assert.equal(db.state, 'in_flight');
  assert.match(await field('lease_until'), /\d{4}-\d{2}-\d{2}/);
  assert.match(await field('created_at'), /\d{4}-\d{2}-\d{2}/);
  assert.match(await field('progress'), /"step":\s*2/);
  // The queue field links to the queue.
  assert.equal(await page.locator('dl#task dd[data-field="queue"] a[href="/queues/emails"]').count(), 1);
});

test('the payload is shown whole, as JSON', async () => {
  await visit(page, `${ADMIN()}/tasks/${ids.e_run}`);
  const payload = JSON.parse(await page.locator('pre#payload').innerText());
  assert.deepEqual(payload, { to: 'ada@example.com', order_id: 7 });
});

test('a dead task: its error, attempts used up, and the retry and cancel actions', async () => {
  await visit(page, `${ADMIN()}/tasks/${ids.e_dead}`);
  const db = dbTask(ids.e_dead);
  assert.equal(await field('state'), 'dead');
  assert.equal(await field('attempts'), '2');
  assert.equal(await field('max_attempts'), '2');
  const errors = page.locator('section#errors');
  assert.equal(await errors.count(), 1);
  assert.ok((await text(errors)).includes(db.last_error), 'the last error, whole');
  assert.equal(await page.locator('form[data-action="retry"]').count(), 1);
  assert.equal(await page.locator('form[data-action="cancel"]').count(), 1);
});

test('every error kept, oldest first, as queue_errors has them', async () => {
  const db = sql(`SELECT attempt, error FROM aedb_queue.queue_errors('emails', ${ids.e_dead}) ORDER BY failed_at`);
  assert.equal(db.length, 2, 'two failed attempts in the database');
  await visit(page, `${ADMIN()}/tasks/${ids.e_dead}`);
  const rows = page.locator('section#errors tr[data-attempt]');
  assert.equal(await rows.count(), 2, 'one row per failed attempt');
  for (const [i, [attempt, error]] of db.entries()) {
    assert.equal(await rows.nth(i).getAttribute('data-attempt'), attempt);
    assert.ok((await rows.nth(i).innerText()).includes(error), `attempt ${attempt}: ${error}`);
  }
  const all = await page.locator('section#errors').innerText();
  assert.ok(all.indexOf('SMTP timeout: 421') < all.indexOf('SMTP 550'), 'oldest first');
});

test('a scheduled task: due in the future, no retry action (not dead)', async () => {
  await visit(page, `${ADMIN()}/tasks/${ids.e_sched}`);
  assert.equal(await field('state'), 'scheduled');
  const due = Date.parse((await field('due_at')).split(' ')[0]);
  assert.ok(due > Date.now() + 30 * 60 * 1000, 'due in about an hour');
  assert.equal(await page.locator('form[data-action="retry"]').count(), 0);
  assert.equal(await page.locator('form[data-action="cancel"]').count(), 1);
  assert.equal(await page.locator('section#errors pre, section#errors tr[data-attempt]').count(), 0, 'no error recorded');
});

test('a completed task kept: state, result, idempotency key', async () => {
  await visit(page, `${ADMIN()}/tasks/${ids.e_done}`);
  assert.equal(await field('state'), 'completed');
  assert.equal(await field('idempotency_key'), 'receipt-0');
  assert.match(await text(page.locator('main')), /message_id/, 'the result is shown');
  assert.equal(await page.locator('form[data-action="cancel"]').count(), 0, 'nothing to cancel');
});

test('dependencies: a task shows its parents and its children, linked', async () => {
  await visit(page, `${ADMIN()}/tasks/${ids.p_child}`);
  assert.equal(await field('state'), 'waiting');
  const deps = page.locator('section#dependencies');
  assert.equal(await deps.count(), 1);
  assert.equal(await deps.locator(`a[href="/tasks/${ids.p_parent}"]`).count(), 1, 'the parent, linked');
  assert.equal(await deps.locator(`a[href="/tasks/${ids.p_grandchild}"]`).count(), 1, 'the child, linked');
  await visit(page, `${ADMIN()}/tasks/${ids.p_parent}`);
  const children = sql(`SELECT task_id FROM aedb_queue.queue_children('pipeline', ${ids.p_parent})`).map((r) => Number(r[0]));
  assert.deepEqual(children, [ids.p_child]);
  assert.equal(await page.locator(`section#dependencies a[href="/tasks/${ids.p_child}"]`).count(), 1, 'the parent lists its child');
  await visit(page, `${ADMIN()}/tasks/${ids.e_ready}`);
  assert.equal(await page.locator('section#dependencies').count(), 0, 'none where there are none');
});

test('an unknown task is 404, and so is one in a queue the role may not read', async () => {
  await visit(page, `${ADMIN()}/tasks/999999999`, 404);
  await visit(page, `${TENANT()}/tasks/${ids.tb_ready}`, 404);
  await visit(page, `${TENANT()}/tasks/${ids.r_dup}`, 404);
  await visit(page, `${TENANT()}/tasks/${ids.ta_ready}`, 200);
  await visit(page, `${TENANT()}/tasks/${ids.e_ready}`, 200);
});
