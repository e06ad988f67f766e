// Shared by the browser tests: the servers' URLs, the seeded ids, a browser
// (Debian's chromium, a fresh profile per test file), psql for checking what
// the database holds after an action.
import { chromium } from 'playwright-core';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';

function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run these tests with clients/cli/browser/run.sh`);
  return v;
}

export const ADMIN = () => env('AEDB_ADMIN_URL');
export const READER = () => env('AEDB_READER_URL');
export const TENANT = () => env('AEDB_TENANT_URL');
export const PLAIN = () => env('AEDB_PLAIN_URL');
// Servers with operators (--users): password logins; the proxy header trusted
// from 127.0.0.2 only (OPS) or from 127.0.0.1 (SSO); HTTPS with a self-signed
// certificate (TLS).
export const OPS = () => env('AEDB_OPS_URL');
export const SSO = () => env('AEDB_SSO_URL');
export const TLS = () => env('AEDB_TLS_URL');
export const seed = () => JSON.parse(readFileSync(env('AEDB_SEED'), 'utf8'));

// psql as postgres on the preloaded cluster (PGHOST, PGPORT, PGUSER, PGDATABASE
// come from run.sh): the rows, '|'-separated, as arrays of strings.
export function sql(query, { port } = {}) {
  const args = ['-X', '-At', '-v', 'ON_ERROR_STOP=1', '-c', query];
  const out = execFileSync('psql', args, {
    encoding: 'utf8',
    env: { ...process.env, ...(port ? { PGPORT: String(port) } : {}) },
  });
  return out.split('\n').filter((l) => l !== '').map((l) => l.split('|'));
}
export const sqlValue = (query, opts) => {
  const rows = sql(query, opts);
  return rows.length ? rows[0][0] : null;
};
// The task's state, or null when it is gone (the tables, read as superuser).
export function taskState(id) {
  return sqlValue(`SELECT state FROM aedb_queue.tasks WHERE task_id = ${Number(id)}`);
}
export function paused(queue) {
  return sqlValue(`SELECT paused FROM aedb_queue.queue_overview() WHERE queue = '${queue.replace(/'/g, "''")}'`);
}

export const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--disable-quic'];

// A browser context with a profile of its own, closed (and removed) by close().
// Every page opened in it records uncaught page errors and dialogs, which
// hostile text must never cause.
// `context` adds options of the browser context (extraHTTPHeaders, or
// ignoreHTTPSErrors for the self-signed certificate).
export async function openBrowser({ width = 1280, height = 900, context: more = {} } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'aedb-browser-'));
  const context = await chromium.launchPersistentContext(dir, {
    executablePath: process.env.AEDB_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width, height },
    ...more,
  });
  const events = { dialogs: [], pageErrors: [] };
  context.on('page', (page) => watch(page, events));
  for (const page of context.pages()) watch(page, events);
  return {
    context,
    events,
    async page() {
      const existing = context.pages().find((p) => p.url() === 'about:blank' && !p.__used);
      const page = existing || (await context.newPage());
      page.__used = true;
      return page;
    },
    async close() {
      await context.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
// The dashboard's own confirm() before a destructive action is accepted
// (or dismissed while events.dismissConfirm is set); any other dialog (an
// alert from injected script) is recorded and dismissed.
function watch(page, events) {
  page.on('dialog', (d) => {
    if (d.type() === 'confirm') {
      events.confirms = (events.confirms || 0) + 1;
      (events.dismissConfirm ? d.dismiss() : d.accept()).catch(() => {});
      return;
    }
    events.dialogs.push(`${d.type()}: ${d.message()}`);
    d.dismiss().catch(() => {});
  });
  page.on('pageerror', (e) => events.pageErrors.push(String(e)));
}

// GET a page; fails unless the status is `status` (200 by default).
export async function visit(page, url, status = 200) {
  const resp = await page.goto(url, { waitUntil: 'load' });
  assert.ok(resp, `no response for ${url}`);
  assert.equal(resp.status(), status, `${url}: status ${resp.status()}, wanted ${status}`);
  return resp;
}

// Submits a form by clicking its submit button; resolves with the POST's
// response (its status: 303 is followed by the browser, so the status seen is
// that of the POST itself) and waits for the page that follows to load.
export async function submit(page, form) {
  const button = form.locator('button[type=submit], input[type=submit], button:not([type])').first();
  return navigatingPost(page, () => button.click());
}

// Runs act (which posts a form) and resolves with the POST's response once
// the page it leads to has loaded.
export async function navigatingPost(page, act) {
  const [resp] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === 'POST'),
    page.waitForEvent('load'),
    act(),
  ]);
  return resp;
}

// What the element shows (innerText: table cells apart), whitespace folded.
export const text = async (locator) => ((await locator.innerText()) ?? '').replace(/\s+/g, ' ').trim();
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls fn until it returns true (the sampler fills the history every second).
export async function until(fn, { timeout = 15000, every = 250, what = 'condition' } = {}) {
  const end = Date.now() + timeout;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(every);
  }
}
