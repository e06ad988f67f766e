// The dashboard knows its operators: alice (role ops_a, confined to
// tenant_a.*) and bob (ops_b, tenant_b.*) log in to one server whose
// connection role (dash_gateway) may become either. Each sees only its own
// tenant's queues and cannot act on the other's, by page or by a request
// forged with its own valid session and token; a logged-out browser sees
// nothing; the session cookie is HttpOnly, SameSite=Strict, and Secure over
// HTTPS; the proxy's user header counts only from the trusted address.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { OPS, SSO, TLS, openBrowser, visit, seed, sql, paused, taskState, text, navigatingPost } from './lib.mjs';

let ids;
const opened = [];
before(() => { ids = seed(); });
after(async () => { for (const b of opened) await b.close(); });

async function browserFor(options) {
  const b = await openBrowser(options);
  opened.push(b);
  return { b, page: await b.page() };
}

// Fills the login form and submits it; resolves with the POST's response.
async function logIn(page, base, name, password) {
  await visit(page, `${base}/login`);
  await page.fill('form#login input[name="name"]', name);
  await page.fill('form#login input[name="password"]', password);
  return navigatingPost(page, () => page.click('form#login button[type="submit"]'));
}

const shownQueues = (page) => page.locator('table#queues tr[data-queue]').evaluateAll((trs) => trs.map((t) => t.dataset.queue));
const sessionCookie = async (b) => (await b.context.cookies()).find((c) => c.name === 'aedb_queue_session');

// A POST built in the operator's own page (same origin, their session and
// token), as an operator crafting a request by hand would; its status.
const forge = (page, action) => page.evaluate(async (action) => {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const r = await fetch(action, { method: 'POST', body: new URLSearchParams({ csrf }), redirect: 'manual' });
  return r.status;
}, action);

test('a logged-out browser sees nothing: every page goes to the login form, a post is refused', async () => {
  const { b, page } = await browserFor();
  for (const path of ['/', '/queues/tenant_a.jobs', `/tasks/${ids.ta_ready}`, `/search?q=${ids.ta_ready}`, '/nosuch']) {
    await visit(page, `${OPS()}${path}`);
    assert.equal(new URL(page.url()).pathname, '/login', path);
    assert.equal(await page.locator('form#login').count(), 1, path);
    assert.equal(await page.locator('table#queues, dl#task').count(), 0, path);
    assert.ok(!(await page.content()).includes('tenant_a.jobs'), path);
  }
  // /metrics asks for credentials (Basic, for scrapers) instead.
  const metrics = await b.context.request.get(`${OPS()}/metrics`, { maxRedirects: 0 });
  assert.equal(metrics.status(), 401);
  assert.doesNotMatch(await metrics.text(), /tenant_a/);
  // A post from the login page itself (same origin), without a session.
  const status = await page.evaluate(async () => (await fetch('/queues/tenant_b.jobs/pause', {
    method: 'POST', body: new URLSearchParams({ csrf: 'x' }), redirect: 'manual' })).status);
  assert.equal(status, 403);
  assert.equal(paused('tenant_b.jobs'), 'f');
  assert.equal(await sessionCookie(b), undefined);
});

test('a wrong password and an unknown name are refused alike, without a session', async () => {
  const { b, page } = await browserFor();
  for (const [name, pw] of [['alice', 'bob-pw'], ['mallory', 'alice-pw'], ['sso_a', 'x']]) {
    const resp = await logIn(page, OPS(), name, pw);
    assert.equal(resp.status(), 401, name);
    assert.equal(await text(page.locator('p.error[role="alert"]')), 'Wrong name or password.', name);
    assert.equal(await sessionCookie(b), undefined, name);
  }
});

test('each operator sees only its own tenant: overview, queue, task, search, /metrics', async () => {
  const alice = await browserFor();
  const resp = await logIn(alice.page, OPS(), 'alice', 'alice-pw');
  assert.equal(resp.status(), 303);
  assert.equal(new URL(alice.page.url()).pathname, '/');
  assert.deepEqual(await shownQueues(alice.page), ['tenant_a.jobs']);
  assert.equal(await text(alice.page.locator('#operator')), 'alice');
  const cookie = await sessionCookie(alice.b);
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, 'Strict');
  assert.equal(cookie.secure, false, 'plain HTTP');
  assert.equal(await alice.page.evaluate(() => document.cookie.includes('aedb_queue_session')), false, 'not readable by script');

  const bob = await browserFor();
  await logIn(bob.page, OPS(), 'bob', 'bob-pw');
  assert.deepEqual(await shownQueues(bob.page), ['tenant_b.jobs']);

  await visit(alice.page, `${OPS()}/queues/tenant_b.jobs`, 404);
  await visit(alice.page, `${OPS()}/tasks/${ids.tb_ready}`, 404);
  await visit(alice.page, `${OPS()}/search?q=${ids.tb_ready}`);
  assert.equal(await alice.page.locator('#no-results').count(), 1);
  await visit(alice.page, `${OPS()}/queues/tenant_a.jobs`);
  assert.equal(await alice.page.locator('form[data-action="pause"], form[data-action="resume"]').count(), 1, 'alice administers her queue');
  await visit(bob.page, `${OPS()}/tasks/${ids.tb_ready}`);
  await visit(bob.page, `${OPS()}/tasks/${ids.ta_ready}`, 404);

  await visit(alice.page, `${OPS()}/metrics`);
  const m = await alice.page.locator('body').innerText();
  assert.match(m, /queue="tenant_a\.jobs"/);
  assert.doesNotMatch(m, /tenant_b|emails|reports/);
});

test("an operator's forged posts against the other tenant are refused by the database, nothing changes", async () => {
  const { page } = await browserFor();
  await logIn(page, OPS(), 'alice', 'alice-pw');
  const ready = sql("SELECT count(*) FROM aedb_queue.tasks WHERE queue = 'tenant_b.jobs' AND state = 'ready'")[0][0];
  assert.equal(await forge(page, '/queues/tenant_b.jobs/pause'), 403);
  assert.equal(await forge(page, '/queues/tenant_b.jobs/retry-dead'), 403);
  assert.equal(await forge(page, `/tasks/${ids.tb_ready}/cancel`), 404, 'not a task she may read');
  assert.equal(paused('tenant_b.jobs'), 'f');
  assert.equal(taskState(ids.tb_ready), 'ready');
  assert.equal(sql("SELECT count(*) FROM aedb_queue.tasks WHERE queue = 'tenant_b.jobs' AND state = 'ready'")[0][0], ready);
  // The refusal is the database's (42501), shown on the page.
  await page.goto(`${OPS()}/queues/tenant_a.jobs`);
  const body = await page.evaluate(async () => {
    const csrf = document.querySelector('meta[name="csrf-token"]').content;
    return (await fetch('/queues/tenant_b.jobs/pause', { method: 'POST', body: new URLSearchParams({ csrf }) })).text();
  });
  assert.match(body, /42501/);
});

test('logging out ends the session', async () => {
  const { b, page } = await browserFor();
  await logIn(page, OPS(), 'bob', 'bob-pw');
  const resp = await navigatingPost(page, () => page.click('form#logout button[type="submit"]'));
  assert.equal(resp.status(), 303);
  assert.equal(new URL(page.url()).pathname, '/login');
  assert.equal(await sessionCookie(b), undefined);
  await visit(page, `${OPS()}/`);
  assert.equal(new URL(page.url()).pathname, '/login');
});

test('over HTTPS the session cookie is Secure too', async () => {
  assert.ok(TLS().startsWith('https://'), TLS());
  const { b, page } = await browserFor({ context: { ignoreHTTPSErrors: true } });
  const resp = await logIn(page, TLS(), 'alice', 'alice-pw');
  assert.equal(resp.status(), 303);
  assert.deepEqual(await shownQueues(page), ['tenant_a.jobs']);
  const cookie = await sessionCookie(b);
  assert.equal(cookie.secure, true);
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, 'Strict');
});

test("the proxy's user header is honoured only from the trusted address", async () => {
  const { page } = await browserFor({ context: { extraHTTPHeaders: { 'X-Forwarded-User': 'sso_a' } } });
  // SSO trusts 127.0.0.1, where this browser comes from: no login needed.
  await visit(page, `${SSO()}/`);
  assert.equal(new URL(page.url()).pathname, '/');
  assert.deepEqual(await shownQueues(page), ['tenant_a.jobs']);
  assert.equal(await text(page.locator('#operator')), 'sso_a');
  // OPS trusts only 127.0.0.2: the same header is ignored.
  await visit(page, `${OPS()}/`);
  assert.equal(new URL(page.url()).pathname, '/login');
  assert.equal(await page.locator('table#queues').count(), 0);
});
