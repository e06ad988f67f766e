// Every server answers /healthz once the database does.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ADMIN, READER, TENANT, PLAIN } from './lib.mjs';

test('GET /healthz answers ok on every server', async () => {
  for (const base of [ADMIN(), READER(), TENANT(), PLAIN()]) {
    const r = await fetch(`${base}/healthz`);
    assert.equal(r.status, 200, base);
    assert.match(await r.text(), /ok/);
  }
});
