// GET /: every queue the role may read, with its figures (as the database
// has them), estimates marked, sparklines, and links to the queue pages.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ADMIN, PLAIN, openBrowser, visit, sql, text, until } from './lib.mjs';

const COUNTS = ['ready', 'in_flight', 'scheduled', 'waiting', 'blocked', 'dead', 'expired_leases'];
const FIELDS = ['paused', ...COUNTS, 'oldest_ready_age', 'throughput', 'failure_rate'];
let browser, page;
before(async () => { browser = await openBrowser(); page = await browser.page(); });
after(async () => { await browser?.close(); });

const number = (s) => Number(s.replace(/[~,\s]/g, ''));

test('every page has the title prefix, the nav link home and the search form', async () => {
  await visit(page, `${ADMIN()}/`);
  assert.match(await page.title(), /^aedb_queue/);
  assert.ok(await page.locator('nav a[href="/"]').count() >= 1, 'nav link to /');
  const form = page.locator('nav form#search[action="/search"][method="get"]');
  assert.equal(await form.count(), 1, 'search form in the nav');
  assert.equal(await form.locator('input[name="q"]').count(), 1);
});

test('the overview lists every queue with the figures the database has', async () => {
  await visit(page, `${ADMIN()}/`);
  const rows = sql(`SELECT queue, ${COUNTS.join(', ')}, array_to_string(estimated, ',') FROM aedb_queue.queue_overview() ORDER BY queue`);
  const shown = await page.locator('table#queues tr[data-queue]').evaluateAll((trs) => trs.map((tr) => tr.dataset.queue));
  assert.deepEqual([...shown].sort(), rows.map((r) => r[0]).sort(), 'one row per queue');
  for (const [queue, ...rest] of rows) {
    const estimated = rest.pop().split(',').filter(Boolean);
    const tr = page.locator('table#queues tr[data-queue]').filter({ has: page.locator(`a[href="/queues/${encodeURIComponent(queue)}"]`) });
    assert.equal(await tr.count(), 1, `row of ${queue}`);
    for (const f of FIELDS) {
      assert.equal(await tr.locator(`td[data-field="${f}"]`).count(), 1, `${queue}: cell ${f}`);
    }
    for (const [i, f] of COUNTS.entries()) {
      const cell = tr.locator(`td[data-field="${f}"]`);
      const shownText = await text(cell);
      if (estimated.includes(f)) {
        const est = cell.locator('span.estimate[title="estimate"]');
        assert.equal(await est.count(), 1, `${queue}.${f} is an estimate, marked as such`);
        assert.match(await text(est), /^~\d/);
        assert.ok(number(shownText) >= 1000, `${queue}.${f}: an estimate is never below the limit`);
      } else {
        assert.equal(await cell.locator('span.estimate').count(), 0, `${queue}.${f} is exact`);
        assert.equal(number(shownText), Number(rest[i]), `${queue}.${f}: page ${shownText}, database ${rest[i]}`);
      }
    }
  }
});

test('estimates are marked and explained: bulk has more ready tasks than the exact limit', async () => {
  await visit(page, `${ADMIN()}/`);
  const cell = page.locator('tr[data-queue="bulk"] td[data-field="ready"] span.estimate[title="estimate"]');
  assert.equal(await cell.count(), 1);
  assert.match(await text(cell), /^~\d+/);
  const legend = page.locator('p#estimates-legend');
  assert.equal(await legend.count(), 1);
  assert.match(await text(legend), /estimate/i);
});

test('per-queue figures: paused, oldest ready age, throughput from the counters, failure rate', async () => {
  await visit(page, `${ADMIN()}/`);
  const emails = page.locator('tr[data-queue="emails"]');
  assert.match(await text(emails.locator('td[data-field="paused"]')), /^no$/i);
  assert.match(await text(emails.locator('td[data-field="oldest_ready_age"]')), /\d/);
  const tp = await text(emails.locator('td[data-field="throughput"]'));
  assert.notEqual(tp, 'n/a', 'counters are available on the preloaded cluster');
  assert.match(tp, /\d/);
  assert.equal(await page.locator('#counters-unavailable').count(), 0);
  // A queue with nothing ready has no oldest ready age.
  assert.doesNotMatch(await text(page.locator('tr[data-queue="retry_me"] td[data-field="oldest_ready_age"]')), /\d/);
});

test('every row has a ready and a completed sparkline, drawn from the sampled history', async () => {
  await visit(page, `${ADMIN()}/`);
  const n = await page.locator('table#queues tr[data-queue]').count();
  assert.equal(await page.locator('table#queues tr[data-queue] svg.sparkline[data-series="ready"]').count(), n);
  assert.equal(await page.locator('table#queues tr[data-queue] svg.sparkline[data-series="completed"]').count(), n);
  // The sampler runs every second: after a few, the line has several points.
  await until(async () => {
    await page.reload();
    const pts = await page.locator('tr[data-queue="emails"] svg.sparkline[data-series="ready"] polyline').first().getAttribute('points').catch(() => null);
    return pts && pts.trim().split(/\s+/).length >= 3;
  }, { what: 'a ready sparkline with 3 points' });
  const box = await page.locator('tr[data-queue="emails"] svg.sparkline[data-series="ready"]').boundingBox();
  assert.ok(box && box.width > 20 && box.height > 5, 'the sparkline is visible');
});

test('a queue name links to its page', async () => {
  await visit(page, `${ADMIN()}/`);
  await Promise.all([
    page.waitForURL(/\/queues\/emails$/),
    page.locator('tr[data-queue="emails"] a[href="/queues/emails"]').click(),
  ]);
  assert.equal(await text(page.locator('h1')), 'emails');
});

test('without the preload the counters are unavailable: said on the page, throughput n/a', async () => {
  await visit(page, `${PLAIN()}/`);
  assert.equal(await page.locator('p#counters-unavailable').count(), 1);
  const tr = page.locator('tr[data-queue="plain"]');
  assert.equal(await tr.count(), 1);
  assert.equal(await text(tr.locator('td[data-field="throughput"]')), 'n/a');
  assert.equal(number(await text(tr.locator('td[data-field="ready"]'))), 1);
});
