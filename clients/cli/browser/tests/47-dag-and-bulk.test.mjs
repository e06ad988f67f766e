// The task page's dependency graph (server-rendered SVG, coloured by state,
// each box a link, hostile names as text) and the queue page's task list:
// filters (state, time, payload field), keyset paging, and the bulk retry
// and cancel of selected tasks, for the admin only, within its own queue.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ADMIN, READER, TENANT, openBrowser, visit, submit, navigatingPost, seed, sql, sqlValue, taskState, text } from './lib.mjs';

let browser, page, ids;
before(async () => { browser = await openBrowser(); page = await browser.page(); ids = seed(); });
after(async () => { await browser?.close(); });

const flash = () => text(page.locator('p.flash[role="status"]'));
const listed = () => page.locator('table#tasks tbody tr[data-task-id]')
  .evaluateAll((trs) => trs.map((t) => Number(t.dataset.taskId)));
const stateIn = (q, state) => sql(`SELECT task_id FROM aedb_queue.tasks WHERE queue = '${q}' AND state = '${state}' ORDER BY task_id`)
  .map((r) => Number(r[0]));

// A form built in a page of the server itself (same origin, its token), with
// repeated `id` fields, as a user who crafts the request by hand would.
async function postByHand(action, fields, idList) {
  return navigatingPost(page, () => page.evaluate(([action, fields, idList]) => {
    const token = document.querySelector('meta[name="csrf-token"]')?.content || '';
    const f = document.createElement('form');
    f.method = 'post';
    f.action = action;
    const add = (k, v) => {
      const i = document.createElement('input');
      i.type = 'hidden'; i.name = k; i.value = v;
      f.appendChild(i);
    };
    for (const [k, v] of Object.entries({ csrf: token, ...fields })) add(k, v);
    for (const id of idList) add('id', String(id));
    document.body.appendChild(f);
    f.submit();
  }, [action, fields, idList]));
}

test('the graph draws the whole DAG around a task, coloured by state, with arrows and a legend', async () => {
  await visit(page, `${ADMIN()}/tasks/${ids.d_d}`);
  const svg = page.locator('section#graph svg#dag');
  assert.equal(await svg.count(), 1, 'a graph');
  const nodes = await svg.locator('a[data-task-id]').evaluateAll((as) =>
    Object.fromEntries(as.map((a) => [a.dataset.taskId, a.dataset.state])));
  assert.deepEqual(nodes, {
    [ids.d_a]: 'completed', [ids.d_b]: 'completed', [ids.d_c]: 'ready', [ids.d_f]: 'dead',
    [ids.d_d]: 'waiting', [ids.d_e]: 'waiting',
  }, 'parents, children and siblings, transitively, each in its state');
  // Coloured by state: the box's outline.
  const colour = (id) => svg.locator(`a[data-task-id="${id}"] rect`).first().getAttribute('stroke');
  assert.equal(await colour(ids.d_a), await colour(ids.d_b), 'completed alike');
  assert.notEqual(await colour(ids.d_a), await colour(ids.d_f), 'completed and dead differ');
  assert.notEqual(await colour(ids.d_c), await colour(ids.d_d), 'ready and waiting differ');
  assert.equal(await svg.locator(`a[data-task-id="${ids.d_d}"][data-current]`).count(), 1, 'this task outlined');
  const edges = await svg.locator('line.edge').evaluateAll((ls) => ls.map((l) => `${l.dataset.parent}>${l.dataset.child}`).sort());
  assert.deepEqual(edges, [`${ids.d_a}>${ids.d_b}`, `${ids.d_a}>${ids.d_c}`, `${ids.d_a}>${ids.d_f}`,
    `${ids.d_b}>${ids.d_d}`, `${ids.d_c}>${ids.d_d}`, `${ids.d_d}>${ids.d_e}`].sort());
  const legend = await svg.locator('g.legend').textContent();
  for (const s of ['waiting', 'ready', 'completed', 'dead']) assert.match(legend, new RegExp(s));
  // Parents left of children.
  const x = async (id) => Number(await svg.locator(`a[data-task-id="${id}"] rect`).first().getAttribute('x'));
  assert.ok(await x(ids.d_a) < await x(ids.d_b) && await x(ids.d_b) < await x(ids.d_d) && await x(ids.d_d) < await x(ids.d_e));
  assert.match(await text(page.locator('#graph-kept')), /keep_completed/);
});

test('a box of the graph leads to its task; the completed root still shows its graph', async () => {
  await visit(page, `${ADMIN()}/tasks/${ids.d_d}`);
  await Promise.all([page.waitForEvent('load'), page.locator(`svg#dag a[data-task-id="${ids.d_a}"]`).click()]);
  assert.equal(new URL(page.url()).pathname, `/tasks/${ids.d_a}`);
  assert.match(await text(page.locator('dd[data-field="state"]')), /completed/);
  assert.equal(await page.locator('svg#dag a[data-task-id]').count(), 6, 'the same DAG from its completed root');
});

test('hostile queue names in the graph are text; nothing runs', async () => {
  await visit(page, `${ADMIN()}/tasks/${ids.d_e}`);
  const node = page.locator(`svg#dag a[data-task-id="${ids.d_e}"]`);
  assert.match(await node.locator('title').textContent(), /<img src=x onerror=window.__xss=11>/);
  assert.equal(await page.locator('svg#dag img, section#graph img').count(), 0);
  assert.equal(await page.evaluate(() => window.__xss), undefined);
  assert.deepEqual(browser.events.dialogs, []);
  assert.deepEqual(browser.events.pageErrors, []);
});

test('a finished DAG of a queue that keeps nothing still draws, every task completed', async () => {
  await visit(page, `${ADMIN()}/tasks/${ids.g_h}`);
  assert.match(await text(page.locator('dd[data-field="state"]')), /completed/);
  const nodes = await page.locator('section#graph svg#dag a[data-task-id]').evaluateAll((as) =>
    Object.fromEntries(as.map((a) => [a.dataset.taskId, a.dataset.state])));
  assert.deepEqual(nodes, { [ids.g_g]: 'completed', [ids.g_h]: 'completed' }, 'the whole finished DAG');
  assert.match(await text(page.locator('#graph-kept')), /keep_workflows/);
  await visit(page, `${ADMIN()}/tasks/${ids.g_g}`);
  assert.equal(await page.locator('svg#dag a[data-task-id]').count(), 2, 'from its root too');
});

test('a finished plain task of a queue that keeps nothing answers 404 saying how to keep it', async () => {
  await visit(page, `${ADMIN()}/tasks/${ids.g_plain}`, 404);
  assert.match(await text(page.locator('p.error[role="alert"]')), /keep_completed/);
  assert.match(await text(page.locator('p.error[role="alert"]')), /keep_workflows/);
});

test('a workflow task shows its steps in order on a timeline', async () => {
  const db = sql(`SELECT step FROM aedb_queue.queue_steps('workflows', ${ids.w_sleep})`).map((r) => r[0]);
  assert.ok(db.length >= 2, `steps: ${db}`);
  await visit(page, `${ADMIN()}/tasks/${ids.w_sleep}`);
  const steps = await page.locator('svg#step-timeline g[data-step]').evaluateAll((gs) => gs.map((g) => g.dataset.step));
  assert.deepEqual(steps, db);
  assert.equal(await page.locator(`svg#step-timeline g[data-state="${taskState(ids.w_sleep)}"]`).count(), 1);
});

test('filters narrow the list: state, payload field = value, time', async () => {
  await visit(page, `${ADMIN()}/queues/listing?state=dead`);
  assert.deepEqual(await listed(), stateIn('listing', 'dead'));
  assert.equal((await listed()).length, 6);

  // The form: ready tasks of customer acme.
  await visit(page, `${ADMIN()}/queues/listing`);
  const form = page.locator('form#list-filter');
  await form.locator('select[name="state"]').selectOption('ready');
  await form.locator('input[name="field"]').fill('customer');
  await form.locator('input[name="value"]').fill('acme');
  await Promise.all([page.waitForEvent('load'), form.locator('button[type="submit"]').click()]);
  const want = sql(`SELECT t.task_id FROM aedb_queue.queue_list('listing', 'ready', 1000) t
                    WHERE t.payload->>'customer' = 'acme' ORDER BY t.task_id`).map((r) => Number(r[0]));
  assert.equal(want.length, 40);
  assert.deepEqual(await listed(), want, 'exactly the acme tasks');
  for (const p of await page.locator('table#tasks tbody td:last-child').allInnerTexts()) assert.match(p, /"acme"/);
  // The field and value are bound: a quote in them matches nothing, breaks nothing.
  await visit(page, `${ADMIN()}/queues/listing?field=${encodeURIComponent("customer' OR '1'='1")}&value=acme`);
  assert.equal(await page.locator('#list-empty').count(), 1);
  // Time: nothing was created after 2099; everything before it.
  await visit(page, `${ADMIN()}/queues/listing?state=dead&created_after=2099-01-01T00:00`);
  assert.equal(await page.locator('#list-empty').count(), 1);
  await visit(page, `${ADMIN()}/queues/listing?state=dead&created_before=2099-01-01T00:00&updated_after=2000-01-01T00:00`);
  assert.equal((await listed()).length, 6);
  // Text that is no time: 400, said so.
  await visit(page, `${ADMIN()}/queues/listing?created_after=soon`, 400);
});

test('paging walks every task once, forward and back, keeping the filters', async () => {
  const all = sql(`SELECT task_id FROM aedb_queue.queue_list('listing', NULL, 1000) ORDER BY task_id`).map((r) => Number(r[0]));
  assert.equal(all.length, 126);
  await visit(page, `${ADMIN()}/queues/listing`);
  const seen = [];
  const pages = [];
  for (;;) {
    const got = await listed();
    assert.ok(got.length <= 50);
    pages.push(got);
    seen.push(...got);
    const next = page.locator('p.pager a[rel="next"]');
    if (!(await next.count())) break;
    await Promise.all([page.waitForEvent('load'), next.click()]);
  }
  assert.deepEqual(seen, all, 'every task once, in order');
  assert.equal(pages.length, 3);
  // Back from the last page: the pages again, in reverse.
  for (let i = pages.length - 2; i >= 0; i--) {
    await Promise.all([page.waitForEvent('load'), page.locator('p.pager a[rel="prev"]').click()]);
    assert.deepEqual(await listed(), pages[i], `page ${i + 1} again`);
  }
  assert.equal(await page.locator('p.pager a[rel="prev"]').count(), 0, 'no page before the first');
  // Filters are kept by the links.
  await visit(page, `${ADMIN()}/queues/listing?field=customer&value=globex`);
  assert.equal((await listed()).length, 40);
  assert.equal(await page.locator('p.pager a').count(), 0, '40 globex tasks: one page');
  await visit(page, `${ADMIN()}/queues/listing?state=ready`);
  const next = await page.locator('p.pager a[rel="next"]').getAttribute('href');
  assert.match(next, /state=ready/);
  assert.match(next, /after=\d+/);
});

test('the filters look at every task: one far past the first 5,000 is found, and the last page reached', async () => {
  // 6,000 tasks in one statement, in a queue of their own (emptied after).
  sql(`SELECT count(*) FROM aedb_queue.queue_enqueue_batch('listing.deep',
         ARRAY(SELECT jsonb_build_object('n', g, 'customer', 'deep') FROM generate_series(1, 6000) g))`);
  try {
    const ids = sql(`SELECT task_id FROM aedb_queue.task WHERE queue = 'listing.deep' ORDER BY task_id`).map((r) => Number(r[0]));
    assert.equal(ids.length, 6000);
    await visit(page, `${ADMIN()}/queues/listing.deep?field=n&value=5999`);
    assert.deepEqual(await listed(), [ids[5998]], 'the 5,999th task, by a payload field');
    for (const p of await page.locator('table#tasks tbody td:last-child').allInnerTexts()) assert.match(p, /"n":\s*5999\b/);
    // A value that reads as JSON is that value: the string "5999" is no task's n.
    await visit(page, `${ADMIN()}/queues/listing.deep?field=n&value=${encodeURIComponent('"5999"')}`);
    assert.equal(await page.locator('#list-empty').count(), 1);
    // The page before the end of the queue: its last 50 tasks, and a way back.
    await visit(page, `${ADMIN()}/queues/listing.deep?field=customer&value=deep&before=${ids[5999] + 1}`);
    assert.deepEqual(await listed(), ids.slice(5950));
    assert.equal(await page.locator('p.pager a[rel="prev"]').count(), 1);
    const prev = await page.locator('p.pager a[rel="prev"]').getAttribute('href');
    assert.match(prev, new RegExp(`before=${ids[5950]}`));
    assert.match(prev, /field=customer/);
  } finally {
    assert.equal(sqlValue(`SELECT aedb_queue.queue_purge('listing.deep', 'ready')`), '6000');
  }
});

test('bulk retry and cancel act on the selected tasks only', async () => {
  const dead = stateIn('listing', 'dead');
  await visit(page, `${ADMIN()}/queues/listing?state=dead`);
  const [r1, r2] = dead;
  for (const id of [r1, r2]) await page.locator(`table#tasks tr[data-task-id="${id}"] input[name="id"]`).check();
  const confirms = browser.events.confirms || 0;
  let resp = await navigatingPost(page, () => page.locator('button[data-action="bulk-retry"]').click());
  assert.equal(resp.status(), 303);
  assert.equal(browser.events.confirms, confirms + 1, 'asked first');
  assert.match(await flash(), /Retried 2 of 2/);
  assert.equal(taskState(r1), 'ready');
  assert.equal(taskState(r2), 'ready');
  assert.deepEqual(stateIn('listing', 'dead'), dead.slice(2), 'the others stay dead');
  assert.match(new URL(page.url()).search, /state=dead/, 'back to the filtered list');

  // Select all on the page (acme, ready), then unselect one: cancel the rest.
  await visit(page, `${ADMIN()}/queues/listing?state=ready&field=customer&value=initech`);
  const shown = await listed();
  await page.locator('input[data-select-all]').check();
  assert.equal(await page.locator('table#tasks input[name="id"]:checked').count(), shown.length);
  const keep = shown[0];
  await page.locator(`table#tasks tr[data-task-id="${keep}"] input[name="id"]`).uncheck();
  const others = sql(`SELECT count(*) FROM aedb_queue.tasks WHERE queue = 'listing'`)[0][0];
  resp = await navigatingPost(page, () => page.locator('button[data-action="bulk-cancel"]').click());
  assert.equal(resp.status(), 303);
  assert.match(await flash(), new RegExp(`Cancelled ${shown.length - 1} of ${shown.length - 1}`));
  for (const id of shown.slice(1)) assert.equal(taskState(id), null, `task ${id} cancelled`);
  assert.equal(taskState(keep), 'ready', 'the unselected one stays');
  assert.equal(Number(sql(`SELECT count(*) FROM aedb_queue.tasks WHERE queue = 'listing'`)[0][0]), Number(others) - (shown.length - 1));

  // A dismissed confirmation does nothing.
  await visit(page, `${ADMIN()}/queues/listing?state=dead`);
  const stillDead = await listed();
  await page.locator('input[data-select-all]').check();
  browser.events.dismissConfirm = true;
  await page.locator('button[data-action="bulk-cancel"]').click();
  await page.waitForTimeout(300);
  browser.events.dismissConfirm = false;
  assert.deepEqual(stateIn('listing', 'dead'), stillDead);
});

test('more than 500 ids in one post are refused, nothing done', async () => {
  await visit(page, `${ADMIN()}/queues/listing`);
  const dead = stateIn('listing', 'dead');
  const many = [...dead, ...Array.from({ length: 501 }, (_, i) => 9_000_000 + i)];
  const resp = await postByHand('/queues/listing/bulk', { action: 'retry' }, many);
  assert.equal(resp.status(), 400);
  assert.match(await text(page.locator('p.error[role="alert"]')), /at most 500/);
  assert.deepEqual(stateIn('listing', 'dead'), dead);
});

test('a bulk post without the CSRF token or from another origin is refused, nothing done', async () => {
  await visit(page, `${ADMIN()}/queues/listing?state=dead`);
  const dead = stateIn('listing', 'dead');
  assert.ok(dead.length > 0);
  const token = await page.locator('meta[name="csrf-token"]').getAttribute('content');
  const resp = await postByHand('/queues/listing/bulk', { action: 'cancel', csrf: '' }, dead);
  assert.equal(resp.status(), 403);
  assert.match(await text(page.locator('p.error[role="alert"]')), /CSRF/);
  assert.deepEqual(stateIn('listing', 'dead'), dead);
  // The right token, but an Origin that is not this server's.
  const r = await page.request.post(`${ADMIN()}/queues/listing/bulk`, {
    headers: { Origin: 'http://evil.example', 'Content-Type': 'application/x-www-form-urlencoded' },
    data: `csrf=${token}&action=cancel&${dead.map((i) => `id=${i}`).join('&')}`,
    maxRedirects: 0,
  });
  assert.equal(r.status(), 403);
  assert.deepEqual(stateIn('listing', 'dead'), dead);
});

test('a worker-only operator sees no bulk action, and a forged bulk post is refused, nothing done', async () => {
  await visit(page, `${READER()}/queues/listing?state=dead`);
  assert.ok((await listed()).length > 0, 'the list is shown');
  assert.equal(await page.locator('form#bulk, button[data-action^="bulk"], input[name="id"], input[data-select-all]').count(), 0);
  const dead = stateIn('listing', 'dead');
  const ready = stateIn('listing', 'ready').slice(0, 3);
  let resp = await postByHand('/queues/listing/bulk', { action: 'retry' }, dead);
  assert.equal(resp.status(), 403);
  assert.match(await text(page.locator('p.error[role="alert"]')), /42501/);
  resp = await postByHand('/queues/listing/bulk', { action: 'cancel' }, ready);
  assert.equal(resp.status(), 403);
  assert.deepEqual(stateIn('listing', 'dead'), dead);
  for (const id of ready) assert.equal(taskState(id), 'ready');
  // Without the token: refused before anything.
  resp = await navigatingPost(page, () => page.evaluate((ids) => {
    const f = document.createElement('form');
    f.method = 'post'; f.action = '/queues/listing/bulk';
    for (const [k, v] of [['action', 'cancel'], ...ids.map((i) => ['id', String(i)])]) {
      const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i);
    }
    document.body.appendChild(f); f.submit();
  }, ready));
  assert.equal(resp.status(), 403);
  for (const id of ready) assert.equal(taskState(id), 'ready');
});

test("a tenant operator cannot act on another tenant's tasks by posting their ids", async () => {
  await visit(page, `${TENANT()}/queues/tenant_a.jobs`);
  assert.equal(await page.locator('form#bulk').count(), 1, 'its own queue offers the bulk actions');
  // Another tenant's queue: refused.
  let resp = await postByHand('/queues/tenant_b.jobs/bulk', { action: 'cancel' }, [ids.tb_ready]);
  assert.ok([403, 404].includes(resp.status()), `tenant_b.jobs: ${resp.status()}`);
  assert.equal(taskState(ids.tb_ready), 'ready');
  // Another tenant's id through its own queue: not a task of that queue.
  await visit(page, `${TENANT()}/queues/tenant_a.jobs`);
  resp = await postByHand('/queues/tenant_a.jobs/bulk', { action: 'cancel' }, [ids.tb_ready]);
  assert.equal(resp.status(), 303);
  assert.match(await flash(), /Cancelled 0 of 1/);
  assert.equal(taskState(ids.tb_ready), 'ready');
  resp = await postByHand('/queues/tenant_a.jobs/bulk', { action: 'retry' }, [ids.tb_ready]);
  assert.equal(resp.status(), 303);
  assert.equal(taskState(ids.tb_ready), 'ready');
  // Nor a queue it only works (emails).
  await visit(page, `${TENANT()}/queues/emails`);
  assert.equal(await page.locator('form#bulk').count(), 0);
  resp = await postByHand('/queues/emails/bulk', { action: 'cancel' }, [ids.e_ready]);
  assert.equal(resp.status(), 403);
  assert.equal(taskState(ids.e_ready), 'ready');
});
