// Durable workflows on the task page: the "Steps" table (name, recorded at,
// attempt, result) as queue_steps has it, what a parked task waits for (a
// sleep's wake time, an event key and its deadline), "Retry from this step"
// (drops that step and the later ones, the task is due at once) offered to
// the queue's admins only and refused by the database for the others, and
// markup in a step's name and result shown as text.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ADMIN, READER, openBrowser, visit, submit, navigatingPost, seed, sql, taskState, text } from './lib.mjs';

let browser, page, ids;
before(async () => { browser = await openBrowser(); page = await browser.page(); ids = seed(); });
after(async () => { await browser?.close(); });

const Q = 'workflows';
// queue_steps as the database has them: [step, attempt, result as JSON text].
const dbSteps = (id) => sql(`SELECT step, attempt, result::text FROM aedb_queue.queue_steps('${Q}', ${Number(id)})`);
const stepNames = (id) => dbSteps(id).map((r) => r[0]);
const rows = () => page.locator('section#steps table#step-list tbody tr[data-step]');
const retryForms = () => page.locator('form[data-action="retry-from-step"]');
const field = (f) => text(page.locator(`dl#task dd[data-field="${f}"]`));
const flash = () => text(page.locator('p.flash[role="status"]'));

// Posts a form built in a page of the server itself (same origin), with the
// page's token unless `csrf` is given: a hand-made request.
async function postByHand(action, fields = {}) {
  return navigatingPost(page, () => page.evaluate(([action, fields]) => {
    const token = document.querySelector('meta[name="csrf-token"]')?.content || '';
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

async function assertInert(where) {
  await page.waitForTimeout(300);   // an injected <img src=x> would have failed to load by now
  assert.equal(await page.evaluate(() => typeof window.__xss), 'undefined', `${where}: a script ran`);
  assert.equal(await page.locator('img[src="x"]').count(), 0, `${where}: an <img> was made of the text`);
  assert.equal(await page.locator('script').evaluateAll((ss) => ss.filter((s) => s.text.includes('__xss')).length), 0,
    `${where}: a <script> was made of the text`);
  assert.deepEqual(browser.events.dialogs, [], `${where}: a dialog opened`);
}

test('a workflow parked on a sleep: its steps as queue_steps has them, and "sleeps until" its due time', async () => {
  const db = dbSteps(ids.w_sleep);
  assert.deepEqual(db.map((r) => r[0]), ['charge', 'cool-off'], 'the seeded steps');
  await visit(page, `${ADMIN()}/tasks/${ids.w_sleep}`);
  assert.equal(await field('state'), 'scheduled');
  assert.equal(await text(page.locator('section#steps h2')), 'Steps');
  assert.equal(await rows().count(), db.length, 'a row per step');
  for (const [i, [step, attempt, result]] of db.entries()) {
    const cells = rows().nth(i).locator('td');
    assert.equal(await rows().nth(i).getAttribute('data-step'), step);
    assert.equal(await text(cells.nth(0)), step, 'name');
    assert.match(await text(cells.nth(1)), /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}/, 'recorded at');
    assert.equal(await text(cells.nth(2)), attempt, 'attempt');
    assert.deepEqual(JSON.parse(await cells.nth(3).innerText()), JSON.parse(result), 'result');
  }
  const parked = page.locator('section#steps p#parked');
  assert.equal(await parked.getAttribute('data-kind'), 'sleep');
  const due = await field('due_at');
  assert.ok(Date.parse(due) > Date.now() + 23 * 3600 * 1000, `parked about a day: ${due}`);
  const said = await text(parked);
  assert.ok(said.startsWith(`Parked: sleeps until ${due}`), said);
  assert.match(said, /\(step cool-off\)/);
});

test('a workflow waiting for an event: the key and the deadline, as queue_waits has them', async () => {
  const [[step, key, deadline]] = sql(`SELECT step, key, to_json(deadline) #>> '{}' FROM aedb_queue.queue_waits('${Q}', ${ids.w_event})`);
  assert.equal(key, 'order-43/packed');
  await visit(page, `${ADMIN()}/tasks/${ids.w_event}`);
  const parked = page.locator('section#steps p#parked');
  assert.equal(await parked.getAttribute('data-kind'), 'event');
  assert.equal(await text(parked.locator('code.event-key')), key);
  assert.equal(await text(parked.locator('time')), deadline);
  assert.equal(await text(parked.locator('code.step-name')), step);
  assert.equal(await rows().count(), 1, 'the wait is not a step until it ends');
  assert.equal(await text(rows().first().locator('td').first()), 'charge');
});

test('a task that is no workflow has no Steps section', async () => {
  await visit(page, `${ADMIN()}/tasks/${ids.e_ready}`);
  assert.equal(await page.locator('section#steps').count(), 0);
});

test('retry from a step: that step and the later ones are dropped, the task is ready', async () => {
  assert.deepEqual(stepNames(ids.w_retry), ['charge', 'reserve', 'label', 'cool-off']);
  assert.equal(taskState(ids.w_retry), 'scheduled');
  await visit(page, `${ADMIN()}/tasks/${ids.w_retry}`);
  assert.equal(await retryForms().count(), 4, 'one per step, for an admin');
  const form = rows().filter({ has: page.locator('td', { hasText: /^reserve$/ }) }).locator('form[data-action="retry-from-step"]');
  assert.equal(await form.count(), 1);
  assert.equal(await text(form.locator('button')), 'Retry from this step');
  const before = browser.events.confirms || 0;
  const resp = await submit(page, form);
  assert.equal(resp.status(), 303);
  assert.equal(browser.events.confirms, before + 1, 'asked first');
  assert.equal(new URL(page.url()).pathname, `/tasks/${ids.w_retry}`, 'back to the task');
  assert.match(await flash(), /runs again from step "reserve": dropped "reserve", "label", "cool-off"/);
  assert.deepEqual(stepNames(ids.w_retry), ['charge'], 'dropped in the database');
  assert.equal(taskState(ids.w_retry), 'ready');
  assert.equal(await field('state'), 'ready');
  assert.equal(await rows().count(), 1);
  assert.equal(await page.locator('section#steps p#parked').count(), 0, 'no longer parked');
});

test('a finished workflow of a queue that keeps nothing: its page, result and steps stay, no retry offered', async () => {
  const db = dbSteps(ids.w_done);
  assert.deepEqual(db.map((r) => r[0]), ['charge', 'ship'], 'kept with its steps');
  await visit(page, `${ADMIN()}/tasks/${ids.w_done}`);
  assert.equal(await field('state'), 'completed');
  assert.match(await text(page.locator('pre#result')), /"shipped": true/);
  assert.equal(await rows().count(), 2, 'a row per step');
  for (const [i, [step]] of db.entries()) assert.equal(await rows().nth(i).getAttribute('data-step'), step);
  assert.equal(await retryForms().count(), 0, 'a completed task is not run again from a step');
});

test('a task in flight: steps shown, no retry offered, and a post is refused (409, 55000)', async () => {
  await visit(page, `${ADMIN()}/tasks/${ids.w_run}`);
  assert.equal(await field('state'), 'in_flight');
  assert.equal(await rows().count(), 1);
  assert.equal(await retryForms().count(), 0);
  const resp = await postByHand(`/tasks/${ids.w_run}/retry-from-step`, { step: 'charge' });
  assert.equal(resp.status(), 409);
  assert.match(await text(page.locator('p.error[role="alert"]')), /55000/);
  assert.deepEqual(stepNames(ids.w_run), ['charge']);
  assert.equal(taskState(ids.w_run), 'in_flight');
});

test('a post without the CSRF token is refused (403), nothing dropped', async () => {
  await visit(page, `${ADMIN()}/tasks/${ids.w_event}`);
  const resp = await postByHand(`/tasks/${ids.w_event}/retry-from-step`, { step: 'charge', csrf: '' });
  assert.equal(resp.status(), 403);
  assert.deepEqual(stepNames(ids.w_event), ['charge']);
});

test('a worker-only operator sees the steps and the wait, no retry button, and a forged post is refused (403, 42501)', async () => {
  await visit(page, `${READER()}/tasks/${ids.w_event}`);
  assert.equal(await rows().count(), 1, 'steps shown to a reader');
  assert.equal(await page.locator('section#steps p#parked[data-kind="event"]').count(), 1);
  assert.equal(await retryForms().count(), 0);
  assert.equal(await page.locator('form[method="post" i]').count(), 0, 'no action form at all');
  const resp = await postByHand(`/tasks/${ids.w_event}/retry-from-step`, { step: 'charge' });
  assert.equal(resp.status(), 403);
  assert.match(await text(page.locator('p.error[role="alert"]')), /42501/);
  assert.deepEqual(stepNames(ids.w_event), ['charge'], 'nothing dropped');
  assert.equal(taskState(ids.w_event), 'scheduled', 'still parked');
});

test('markup in a step name and result shows as text, and retrying from that step works', async () => {
  const name = '<script>window.__xss=9</script>';
  const img = '<img src=x onerror=window.__xss=10>';
  await visit(page, `${ADMIN()}/tasks/${ids.w_hostile}`);
  await assertInert('workflow task page');
  const row = rows().first();
  assert.equal(await row.getAttribute('data-step'), name);
  assert.equal(await text(row.locator('td').first()), name);
  assert.ok((await row.locator('td').nth(3).innerText()).includes(img), 'the result, literally');
  assert.equal(await row.locator('form input[name="step"]').inputValue(), name);
  const resp = await submit(page, row.locator('form[data-action="retry-from-step"]'));
  assert.equal(resp.status(), 303);
  await assertInert('after the retry');
  assert.ok((await flash()).includes(`from step "${name}"`), await flash());
  assert.deepEqual(stepNames(ids.w_hostile), []);
  assert.equal(taskState(ids.w_hostile), 'ready');
});
