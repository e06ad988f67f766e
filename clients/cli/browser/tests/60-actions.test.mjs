// Every action, clicked in the browser as the admin, and its effect checked
// in the database: pause/resume, retry one dead task and all, cancel, purge
// (a wrong confirmation refused with nothing gone, then the right one).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ADMIN, openBrowser, visit, submit, seed, sql, sqlValue, taskState, paused, text } from './lib.mjs';

let browser, page, ids;
before(async () => { browser = await openBrowser(); page = await browser.page(); ids = seed(); });
after(async () => { await browser?.close(); });

const flash = () => text(page.locator('p.flash[role="status"]'));
const deadIn = (q) => sql(`SELECT task_id FROM aedb_queue.tasks WHERE queue = '${q}' AND state = 'dead' ORDER BY task_id`).map((r) => Number(r[0]));

test('pause, then resume: the queue flips in the database, the page says so and offers the other', async () => {
  assert.equal(paused('pause_me'), 'f');
  await visit(page, `${ADMIN()}/queues/pause_me`);
  assert.equal(await page.locator('form[data-action="resume"]').count(), 0);
  let resp = await submit(page, page.locator('form[data-action="pause"]'));
  assert.equal(resp.status(), 303);
  assert.equal(new URL(page.url()).pathname, '/queues/pause_me', 'back on the queue page');
  assert.equal(paused('pause_me'), 't', 'paused in the database');
  assert.match(await flash(), /paus/i);
  assert.equal(await page.locator('form[data-action="pause"]').count(), 0);
  assert.equal(await page.locator('form[data-action="resume"]').count(), 1);
  // The overview says it too.
  await visit(page, `${ADMIN()}/`);
  assert.match(await text(page.locator('tr[data-queue="pause_me"] td[data-field="paused"]')), /yes|paused/i);
  assert.match(await text(page.locator('tr[data-queue="emails"] td[data-field="paused"]')), /^no$/i);

  await visit(page, `${ADMIN()}/queues/pause_me`);
  resp = await submit(page, page.locator('form[data-action="resume"]'));
  assert.equal(resp.status(), 303);
  assert.equal(paused('pause_me'), 'f', 'resumed in the database');
  assert.match(await flash(), /resum/i);
  assert.equal(await page.locator('form[data-action="pause"]').count(), 1);
  // The flash is shown once.
  await page.reload();
  assert.equal(await page.locator('p.flash').count(), 0);
});

test('retry one dead task from its row: only that one is ready again', async () => {
  const [first, ...rest] = ids.rt_dead;
  assert.deepEqual(deadIn('retry_me'), ids.rt_dead);
  await visit(page, `${ADMIN()}/queues/retry_me`);
  assert.equal(await page.locator('section#dead form[data-action="retry"]').count(), 3, 'a retry form per dead row');
  const resp = await submit(page, page.locator(`section#dead tr[data-task-id="${first}"] form[data-action="retry"]`));
  assert.equal(resp.status(), 303);
  assert.equal(taskState(first), 'ready');
  assert.deepEqual(deadIn('retry_me'), rest, 'the others stay dead');
  assert.match(await flash(), /1/);
  assert.equal(await page.locator(`section#dead tr[data-task-id="${first}"]`).count(), 0);
});

test('retry all: a dismissed confirmation does nothing; an accepted one retries every dead task', async () => {
  await visit(page, `${ADMIN()}/queues/retry_me`);
  const before = deadIn('retry_me');
  assert.equal(before.length, 2);
  browser.events.dismissConfirm = true;
  const confirms = browser.events.confirms || 0;
  await page.locator('form[data-action="retry-dead-all"] button').click();
  await page.waitForTimeout(500);
  browser.events.dismissConfirm = false;
  assert.equal(browser.events.confirms, confirms + 1, 'the page asked first');
  assert.deepEqual(deadIn('retry_me'), before, 'dismissed: nothing retried');

  const resp = await submit(page, page.locator('form[data-action="retry-dead-all"]'));
  assert.equal(resp.status(), 303);
  assert.deepEqual(deadIn('retry_me'), []);
  for (const id of ids.rt_dead) assert.equal(taskState(id), 'ready');
  assert.match(await flash(), /2/);
});

test('cancel from the task page: the task is gone', async () => {
  assert.equal(taskState(ids.e_cancel), 'ready');
  await visit(page, `${ADMIN()}/tasks/${ids.e_cancel}`);
  const resp = await submit(page, page.locator('form[data-action="cancel"]'));
  assert.equal(resp.status(), 303);
  assert.equal(taskState(ids.e_cancel), null, 'deleted');
  assert.equal(sqlValue(`SELECT count(*) FROM aedb_queue.queue_find(task_id => ${ids.e_cancel})`), '0');
  assert.match(await flash(), /cancel/i);
  // The task page of a cancelled task is now 404.
  await visit(page, `${ADMIN()}/tasks/${ids.e_cancel}`, 404);
});

test('cancel from a scheduled row of the queue page', async () => {
  assert.equal(taskState(ids.e_sched_cancel), 'scheduled');
  await visit(page, `${ADMIN()}/queues/emails`);
  const resp = await submit(page, page.locator(`section#scheduled tr[data-task-id="${ids.e_sched_cancel}"] form[data-action="cancel"]`));
  assert.equal(resp.status(), 303);
  assert.equal(taskState(ids.e_sched_cancel), null);
  assert.equal(taskState(ids.e_sched), 'scheduled', 'the other scheduled task stays');
  await visit(page, `${ADMIN()}/queues/emails`);
  assert.equal(await page.locator(`section#scheduled tr[data-task-id="${ids.e_sched_cancel}"]`).count(), 0);
});

test('purge: a wrong confirmation is refused (400) and nothing is gone; the queue name purges that state only', async () => {
  const count = (state) => Number(sqlValue(`SELECT count(*) FROM aedb_queue.tasks WHERE queue = 'purge_me' AND state = '${state}'`));
  assert.equal(count('ready'), 3);
  assert.equal(count('dead'), 2);
  await visit(page, `${ADMIN()}/queues/purge_me`);
  let form = page.locator('form[data-action="purge"]');
  await form.locator('select[name="state"]').selectOption('ready');
  await form.locator('input[name="confirm"]').fill('purge_m');
  let resp = await submit(page, form);
  assert.equal(resp.status(), 400, 'refused');
  assert.equal(await page.locator('p.error[role="alert"]').count(), 1);
  assert.equal(count('ready'), 3, 'nothing purged');
  assert.equal(count('dead'), 2);

  await visit(page, `${ADMIN()}/queues/purge_me`);
  form = page.locator('form[data-action="purge"]');
  await form.locator('select[name="state"]').selectOption('ready');
  await form.locator('input[name="confirm"]').fill('purge_me');
  resp = await submit(page, form);
  assert.equal(resp.status(), 303);
  assert.equal(count('ready'), 0, 'the ready tasks are gone');
  assert.equal(count('dead'), 2, 'the dead ones stay');
  assert.match(await flash(), /3/);
});

test('an in-flight purge without force is refused by the extension, and nothing is gone', async () => {
  const inFlight = () => Number(sqlValue("SELECT count(*) FROM aedb_queue.tasks WHERE queue = 'emails' AND state = 'in_flight'"));
  assert.equal(inFlight(), 1);
  await visit(page, `${ADMIN()}/queues/emails`);
  const form = page.locator('form[data-action="purge"]');
  await form.locator('select[name="state"]').selectOption('in_flight');
  await form.locator('input[name="confirm"]').fill('emails');
  const resp = await submit(page, form);
  assert.equal(resp.status(), 400);
  assert.match(await text(page.locator('p.error[role="alert"]')), /22023/);
  assert.equal(inFlight(), 1);
});
