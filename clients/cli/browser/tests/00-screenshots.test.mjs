// With AEDB_SCREENSHOTS=DIR: full-page PNGs, 1280 wide, of the overview, a
// queue page and a task page (docs/dashboard/ has them). Runs first, before
// the actions change anything; run.sh makes some traffic before it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { ADMIN, openBrowser, visit, seed } from './lib.mjs';

const dir = process.env.AEDB_SCREENSHOTS;

test('screenshots of the overview, a queue page and a task page', { skip: !dir && 'AEDB_SCREENSHOTS not set' }, async () => {
  const ids = seed();
  const browser = await openBrowser({ width: 1280, height: 800 });
  try {
    const page = await browser.page();
    for (const [name, path] of [['overview', '/'], ['queue', '/queues/emails'], ['task', `/tasks/${ids.e_dead}`]]) {
      await visit(page, `${ADMIN()}${path}`);
      const file = join(dir, `${name}.png`);
      await page.screenshot({ path: file, fullPage: true });
      assert.ok(statSync(file).size > 10000, `${file} has a picture`);
    }
  } finally {
    await browser.close();
  }
});
