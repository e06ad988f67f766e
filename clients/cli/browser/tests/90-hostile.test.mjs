// Markup in a payload, an error, an owner, an idempotency key, a queue name
// and a search query renders as text: no script runs (window.__xss stays
// unset, no dialog), no element is made of it, and the literal text shows.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ADMIN, openBrowser, visit, seed, text } from './lib.mjs';

const QUEUE = '<img src=x onerror=window.__xss=7>';
let browser, page, ids;
before(async () => { browser = await openBrowser(); page = await browser.page(); ids = seed(); });
after(async () => { await browser?.close(); });

async function assertInert(where) {
  await page.waitForTimeout(300);   // an injected <img src=x> would have failed to load by now
  assert.equal(await page.evaluate(() => typeof window.__xss), 'undefined', `${where}: a script ran`);
  assert.equal(await page.locator('img[src="x"]').count(), 0, `${where}: an <img> was made of the text`);
  assert.equal(await page.locator('script').evaluateAll((ss) => ss.filter((s) => s.text.includes('__xss')).length), 0,
    `${where}: a <script> was made of the text`);
  assert.deepEqual(browser.events.dialogs, [], `${where}: a dialog opened`);
}

test('the overview shows a hostile queue name as text, and its link leads to its page', async () => {
  await visit(page, `${ADMIN()}/`);
  await assertInert('overview');
  const link = page.locator('table#queues tr[data-queue] a', { hasText: QUEUE });
  assert.equal(await link.count(), 1);
  assert.equal(await text(link), QUEUE);
  await Promise.all([page.waitForEvent('load'), link.click()]);
  assert.equal(await text(page.locator('h1')), QUEUE);
  await assertInert('the hostile queue page');
});

test('a payload with markup shows literally on the task page', async () => {
  await visit(page, `${ADMIN()}/tasks/${ids.h_ready}`);
  await assertInert('task page');
  const payload = await page.locator('pre#payload').innerText();
  assert.ok(payload.includes('<script>window.__xss=1</script>'), payload);
  assert.deepEqual(JSON.parse(payload), { html: '<script>window.__xss=1</script>', img: '<img src=x onerror="window.__xss=2">' });
  assert.equal(await text(page.locator('dl#task dd[data-field="idempotency_key"]')), '"><script>window.__xss=6</script>');
});

test('an error text with markup shows literally, on the task page and in the dead section', async () => {
  const error = '<script>window.__xss=3</script><img src=x onerror="window.__xss=4"> & done';
  await visit(page, `${ADMIN()}/tasks/${ids.h_dead}`);
  await assertInert('dead task page');
  assert.ok((await page.locator('section#errors').innerText()).includes(error));
  await visit(page, `${ADMIN()}/queues/hostile`);
  await assertInert('hostile queue page');
  assert.ok((await page.locator(`section#dead tr[data-task-id="${ids.h_dead}"]`).innerText()).includes(error));
});

test('an owner with markup shows literally in the in-flight section and the task page', async () => {
  const owner = '<img src=x onerror=window.__xss=5>';
  await visit(page, `${ADMIN()}/queues/hostile`);
  assert.ok((await page.locator(`section#in-flight tr[data-task-id="${ids.h_run}"]`).innerText()).includes(owner));
  await visit(page, `${ADMIN()}/tasks/${ids.h_run}`);
  await assertInert('in-flight task page');
  assert.equal(await text(page.locator('dl#task dd[data-field="owner"]')), owner);
});

test('a search for markup: the hostile key finds its task, a query that finds nothing stays inert', async () => {
  await visit(page, `${ADMIN()}/`);
  await page.locator('form#search input[name="q"]').fill('"><script>window.__xss=6</script>');
  await Promise.all([page.waitForEvent('load'), page.locator('form#search input[name="q"]').press('Enter')]);
  assert.equal(new URL(page.url()).pathname, `/tasks/${ids.h_ready}`);
  await assertInert('search result');
  await visit(page, `${ADMIN()}/search?q=${encodeURIComponent('<img src=x onerror=window.__xss=8>')}`);
  await assertInert('search without results');
  assert.equal(await page.locator('p#no-results').count(), 1);
});
