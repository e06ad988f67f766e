// The nav's search form: a task id, an idempotency key with one, several or
// no tasks.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ADMIN, TENANT, openBrowser, visit, seed, sql, text } from './lib.mjs';

let browser, page, ids;
before(async () => { browser = await openBrowser(); page = await browser.page(); ids = seed(); });
after(async () => { await browser?.close(); });

// Types q into the nav's search form on `base`'s overview and submits it.
async function search(base, q) {
  await visit(page, `${base}/`);
  await page.locator('form#search input[name="q"]').fill(q);
  await Promise.all([page.waitForEvent('load'), page.locator('form#search input[name="q"]').press('Enter')]);
  return new URL(page.url());
}

test('a task id goes straight to the task page (303)', async () => {
  const r = await fetch(`${ADMIN()}/search?q=${ids.e_dead}`, { redirect: 'manual' });
  assert.equal(r.status, 303);
  assert.equal(new URL(r.headers.get('location'), ADMIN()).pathname, `/tasks/${ids.e_dead}`);
  const url = await search(ADMIN(), String(ids.e_dead));
  assert.equal(url.pathname, `/tasks/${ids.e_dead}`);
  assert.equal(await text(page.locator('dl#task dd[data-field="id"]')), String(ids.e_dead));
});

test('an idempotency key of one task goes to that task', async () => {
  const url = await search(ADMIN(), 'receipt-1');
  assert.equal(url.pathname, `/tasks/${ids.e_ready}`);
  assert.equal(await text(page.locator('dl#task dd[data-field="idempotency_key"]')), 'receipt-1');
});

test('an idempotency key of several tasks lists them', async () => {
  const url = await search(ADMIN(), 'dup-key');
  assert.equal(url.pathname, '/search');
  const db = sql("SELECT task_id FROM aedb_queue.queue_find(idempotency_key => 'dup-key')").map((r) => Number(r[0]));
  assert.equal(db.length, 2);
  const shown = await page.locator('table#results tr[data-task-id]').evaluateAll((trs) => trs.map((t) => Number(t.dataset.taskId)));
  assert.deepEqual(shown.sort((a, b) => a - b), db.sort((a, b) => a - b));
  assert.deepEqual(shown.sort((a, b) => a - b), [ids.e_dup, ids.r_dup].sort((a, b) => a - b));
  // Each result links to its task.
  await Promise.all([page.waitForURL(new RegExp(`/tasks/${ids.r_dup}$`)), page.locator(`table#results a[href="/tasks/${ids.r_dup}"]`).click()]);
  assert.equal(await text(page.locator('dl#task dd[data-field="queue"]')), 'reports');
});

test('nothing found: says so, for a key and for an id', async () => {
  for (const q of ['no-such-key', '999999999']) {
    const url = await search(ADMIN(), q);
    assert.equal(url.pathname, '/search', q);
    assert.equal(await page.locator('p#no-results').count(), 1, q);
    assert.equal(await page.locator('table#results').count(), 0, q);
  }
});

test('search finds only what the role may read', async () => {
  // dup-key is in emails (the tenant may read it) and reports (it may not): one result.
  const url = await search(TENANT(), 'dup-key');
  assert.equal(url.pathname, `/tasks/${ids.e_dup}`);
  const none = await search(TENANT(), String(ids.tb_ready));
  assert.equal(none.pathname, '/search');
  assert.equal(await page.locator('p#no-results').count(), 1);
});
