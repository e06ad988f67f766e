// What each role sees and may do: the worker role (read-only here) sees no
// action form anywhere and is refused by the database if it posts anyway;
// the confined tenant admin sees only its queues and acts only on those it
// administers.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { READER, TENANT, openBrowser, visit, submit, navigatingPost, seed, sql, paused, taskState, text } from './lib.mjs';

let browser, page, ids;
before(async () => { browser = await openBrowser(); page = await browser.page(); ids = seed(); });
after(async () => { await browser?.close(); });

const actionForms = () => page.locator('form[data-action], form[method="post" i]').count();

// Posts a form built in a page of the server itself (same origin, with the
// token the page carries), as a user who crafts the request by hand would.
async function postByHand(action, fields = {}) {
  return navigatingPost(page, () => page.evaluate(([action, fields]) => {
      const token = document.querySelector('meta[name="csrf-token"]')?.content
        || document.querySelector('input[name="csrf"]')?.value || '';
      const f = document.createElement('form');
      f.method = 'post';
      f.action = action;
      for (const [k, v] of Object.entries({ csrf: token, ...fields })) {
        const i = document.createElement('input');
        i.type = 'hidden'; i.name = k; i.value = v;
        f.appendChild(i);
      }
      document.body.appendChild(f);
      f.submit();
    }, [action, fields]));
}

test('the read-only role sees every queue and no action form on any page', async () => {
  await visit(page, `${READER()}/`);
  const shown = await page.locator('table#queues tr[data-queue]').count();
  assert.equal(shown, Number(sql('SELECT count(*) FROM aedb_queue.queue_overview()')[0][0]), 'every queue');
  assert.equal(await actionForms(), 0, 'overview');
  for (const q of ['emails', 'reports', 'retry_me', 'purge_me', 'pause_me', 'sync', 'hostile']) {
    await visit(page, `${READER()}/queues/${q}`);
    assert.ok(await page.locator('section#dead, section#in-flight, section#scheduled').count() >= 1, `${q}: sections shown`);
    assert.equal(await actionForms(), 0, `queue ${q}`);
  }
  for (const id of [ids.e_dead, ids.e_run, ids.e_sched, ids.e_ready, ids.r_dead[0]]) {
    await visit(page, `${READER()}/tasks/${id}`);
    assert.equal(await page.locator('dl#task').count(), 1);
    assert.equal(await actionForms(), 0, `task ${id}`);
  }
  // The search form (GET) is still there.
  assert.equal(await page.locator('form#search[method="get"]').count(), 1);
});

test('the read-only role posting by hand is refused by the database (403, 42501), nothing done', async () => {
  await visit(page, `${READER()}/queues/pause_me`);
  let resp = await postByHand('/queues/pause_me/pause');
  assert.equal(resp.status(), 403);
  assert.match(await text(page.locator('p.error[role="alert"]')), /42501/);
  assert.equal(paused('pause_me'), 'f');

  await visit(page, `${READER()}/queues/reports`);
  const dead = Number(sql("SELECT count(*) FROM aedb_queue.tasks WHERE queue = 'reports' AND state = 'dead'")[0][0]);
  resp = await postByHand('/queues/reports/retry-dead');
  assert.equal(resp.status(), 403);
  assert.equal(Number(sql("SELECT count(*) FROM aedb_queue.tasks WHERE queue = 'reports' AND state = 'dead'")[0][0]), dead);

  await visit(page, `${READER()}/tasks/${ids.e_ready}`);
  resp = await postByHand(`/tasks/${ids.e_ready}/cancel`);
  assert.equal(resp.status(), 403);
  assert.equal(taskState(ids.e_ready), 'ready');
});

test('the confined tenant sees only its queues: tenant_a.* (admin) and emails (worker)', async () => {
  await visit(page, `${TENANT()}/`);
  const shown = await page.locator('table#queues tr[data-queue]').evaluateAll((trs) => trs.map((t) => t.dataset.queue));
  assert.deepEqual(shown.sort(), ['emails', 'tenant_a.jobs']);
  await visit(page, `${TENANT()}/queues/tenant_a.jobs`);
  for (const a of ['pause', 'retry-dead-all', 'purge']) {
    assert.equal(await page.locator(`form[data-action="${a}"]`).count(), 1, `tenant_a.jobs offers ${a}`);
  }
  await visit(page, `${TENANT()}/queues/emails`);
  assert.equal(await actionForms(), 0, 'emails: worker only, no action');
});

test('the tenant acts on its own queue, and is refused on the queue it only works', async () => {
  await visit(page, `${TENANT()}/queues/tenant_a.jobs`);
  const resp = await submit(page, page.locator(`section#dead tr[data-task-id="${ids.ta_dead}"] form[data-action="retry"]`));
  assert.equal(resp.status(), 303);
  assert.equal(taskState(ids.ta_dead), 'ready');

  await visit(page, `${TENANT()}/queues/emails`);
  const refused = await postByHand('/queues/emails/pause');
  assert.equal(refused.status(), 403);
  assert.match(await text(page.locator('p.error[role="alert"]')), /42501/);
  assert.equal(paused('emails'), 'f');

  await visit(page, `${TENANT()}/queues/tenant_a.jobs`);
  const hidden = await postByHand('/queues/tenant_b.jobs/pause');
  assert.ok([403, 404].includes(hidden.status()), `tenant_b.jobs: ${hidden.status()}`);
  assert.equal(paused('tenant_b.jobs'), 'f');
});
