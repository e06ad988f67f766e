// CSRF: a form posted from a page of another origin (served here on a second
// loopback port) is refused with 403 and nothing is done, with or without
// the right token; a post without the token is refused too.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { ADMIN, openBrowser, visit, submit, seed, paused, taskState, text } from './lib.mjs';

let browser, page, ids, evil, evilUrl, token;
const pages = new Map();   // path -> HTML the other origin serves

before(async () => {
  ids = seed();
  browser = await openBrowser();
  page = await browser.page();
  evil = createServer((req, res) => {
    const html = pages.get(req.url);
    res.writeHead(html ? 200 : 404, { 'content-type': 'text/html' });
    res.end(html || 'not found');
  });
  await new Promise((r) => evil.listen(0, '127.0.0.1', r));
  evilUrl = `http://127.0.0.1:${evil.address().port}`;
  // The real token, as a page of the dashboard carries it in its forms.
  await visit(page, `${ADMIN()}/queues/csrf_target`);
  token = await page.locator('form[data-action="pause"] input[name="csrf"]').inputValue();
  assert.match(token, /^[0-9a-f]{16,}$/i);
});
after(async () => {
  await browser?.close();
  await new Promise((r) => (evil ? evil.close(r) : r()));
});

// A page of the other origin whose form posts `fields` to `action` on the dashboard.
function formPage(path, action, fields, auto = true) {
  const inputs = Object.entries(fields).map(([k, v]) => `<input type="hidden" name="${k}" value="${v}">`).join('');
  pages.set(path, `<!doctype html><title>elsewhere</title><form id="f" method="post" action="${action}">${inputs}<button>go</button></form>` +
    (auto ? '<script>document.getElementById("f").submit()</script>' : ''));
  return `${evilUrl}${path}`;
}
async function postFromElsewhere(path, action, fields) {
  const [resp] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === 'POST' && r.url().startsWith(ADMIN())),
    page.waitForURL((u) => u.href.startsWith(ADMIN()), { waitUntil: 'load' }),
    page.goto(formPage(path, action, fields)),
  ]);
  return resp;
}

test('a form on another origin with the right token is refused: 403, queue not paused', async () => {
  assert.equal(paused('csrf_target'), 'f');
  const resp = await postFromElsewhere('/pause', `${ADMIN()}/queues/csrf_target/pause`, { csrf: token });
  assert.equal(resp.request().headers().origin, evilUrl, 'the browser sent the other origin');
  assert.equal(resp.status(), 403);
  assert.equal(paused('csrf_target'), 'f', 'not paused');
});

test('a form on another origin without the token is refused, for every action', async () => {
  const q = `${ADMIN()}/queues/csrf_target`;
  for (const [path, action, fields] of [
    ['/pause2', `${q}/pause`, {}],
    ['/purge', `${q}/purge`, { state: 'ready', confirm: 'csrf_target' }],
    ['/retry', `${q}/retry-dead`, {}],
    ['/cancel', `${ADMIN()}/tasks/${ids.c_task}/cancel`, {}],
  ]) {
    const resp = await postFromElsewhere(path, action, fields);
    assert.equal(resp.status(), 403, action);
  }
  assert.equal(paused('csrf_target'), 'f');
  assert.equal(taskState(ids.c_task), 'ready', 'neither purged nor cancelled');
});

test('a cross-origin fetch (no-cors) with the token is refused too', async () => {
  pages.set('/fetch', '<!doctype html><title>elsewhere</title>');
  await page.goto(`${evilUrl}/fetch`);
  const [resp] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === 'POST' && r.url().startsWith(ADMIN())),
    page.evaluate(([url, tok]) => fetch(url, {
      method: 'POST', mode: 'no-cors', credentials: 'include',
      headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `csrf=${tok}&state=ready&confirm=csrf_target`,
    }).catch(() => null), [`${ADMIN()}/queues/csrf_target/purge`, token]),
  ]);
  assert.equal(resp.status(), 403);
  assert.equal(taskState(ids.c_task), 'ready');
});

test('on the dashboard itself, a wrong or missing token is refused', async () => {
  await visit(page, `${ADMIN()}/queues/csrf_target`);
  for (const value of ['0'.repeat(token.length), '']) {
    await page.evaluate((v) => { document.querySelector('form[data-action="pause"] input[name="csrf"]').value = v; }, value);
    const resp = await submit(page, page.locator('form[data-action="pause"]'));
    assert.equal(resp.status(), 403, `token ${JSON.stringify(value)}`);
    assert.match(await page.title(), /^aedb_queue/);
    assert.equal(paused('csrf_target'), 'f');
    await visit(page, `${ADMIN()}/queues/csrf_target`);
  }
});

test('control: the same form with the right token from the dashboard works', async () => {
  await visit(page, `${ADMIN()}/queues/csrf_target`);
  const resp = await submit(page, page.locator('form[data-action="pause"]'));
  assert.equal(resp.status(), 303);
  assert.equal(paused('csrf_target'), 't');
  assert.match(await text(page.locator('p.flash')), /paus/i);
  // Leave it as it was.
  const r2 = await submit(page, page.locator('form[data-action="resume"]'));
  assert.equal(r2.status(), 303);
  assert.equal(paused('csrf_target'), 'f');
});
