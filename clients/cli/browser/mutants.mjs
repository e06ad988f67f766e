// Checks that the browser tests can fail: each mutant puts a proxy in front
// of the four servers that breaks one thing the way a server bug would (an
// unescaped text, a skipped Origin check, an action that does nothing, a
// wrong figure, an admin form shown to the read-only role, ...), re-seeds the
// database, runs the test files that should notice, and counts the mutant
// killed only if they fail. Mutant "none" (the proxy changes nothing) must
// pass: the proxy itself is sound. run.sh runs it with AEDB_BROWSER_MUTANTS=1.
//   node mutants.mjs [NAME ...]     (environment as run.sh sets it, plus AEDB_RESEED=command)
import http from 'node:http';
import { spawn, execSync } from 'node:child_process';
import { writeFileSync, readFileSync } from 'node:fs';
const SEED = () => JSON.parse(readFileSync(process.env.AEDB_SEED, 'utf8'));
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const fieldValue = (field, to) => (b) => b.replace(new RegExp(`(data-field="${field}"[^>]*>)(\\d+)<`), (_, a) => `${a}${to}<`);
export const MUTANTS = {
  none: { files: process.env.AEDB_MUTANT_FILES ? process.env.AEDB_MUTANT_FILES.split(',') : ['10-health', '20-overview', '30-queue', '40-task', '45-workflow', '50-search', '60-actions', '70-csrf', '80-roles', '90-hostile'], expect: 'pass' },
  'healthz-down': { files: ['10-health'], res: (r) => (r.path === '/healthz' ? { ...r, status: 503 } : r) },
  'metrics-figure-wrong': { files: ['15-metrics'], res: (r) => (r.path === '/metrics' ? { ...r, body: r.body.replace(/(aedb_queue_tasks\{queue="emails",state="ready"\} )(\d+)/, (_, a, n) => a + (Number(n) + 1)) } : r) },
  'screenshot-page-500': { files: ['00-screenshots'], env: { AEDB_SCREENSHOTS: '/tmp/aedb-mutant-shots' }, res: (r) => (r.path.startsWith('/queues/') ? { ...r, status: 500 } : r) },
  'overview-figure-off-by-one': { files: ['20-overview'], res: (r) => (r.path === '/' ? { ...r, body: r.body.replace(/(<tr data-queue="emails".*?data-field="dead">)(\d+)</s, (_, a, n) => `${a}${Number(n) + 1}<`) } : r) },
  'overview-no-estimate-mark': { files: ['20-overview'], res: (r) => (r.path === '/' ? { ...r, body: r.body.replace(/<span class="estimate" title="estimate">~(\d+)<\/span>/g, '$1') } : r) },
  'overview-no-sparklines': { files: ['20-overview'], res: (r) => (r.path === '/' ? { ...r, body: r.body.replace(/<polyline[^>]*><\/polyline>/g, '') } : r) },
  'queue-404-is-200': { files: ['30-queue', '40-task'], res: (r) => (r.status === 404 ? { ...r, status: 200 } : r) },
  'queue-no-errors-shown': { files: ['30-queue', '40-task'], res: (r) => ({ ...r, body: r.body.replace(/SMTP 550 5\.1\.1 mailbox unavailable/g, 'failed') }) },
  'queue-owner-dropped': { files: ['30-queue'], res: (r) => ({ ...r, body: r.body.replace(/worker-7/g, '') }) },
  'task-field-wrong': { files: ['40-task'], res: (r) => (r.path.startsWith('/tasks/') ? { ...r, body: fieldValue('fencing_token', 99)(r.body) } : r) },
  'task-payload-cut': { files: ['40-task'], res: (r) => (r.path.startsWith('/tasks/') ? { ...r, body: r.body.replace(/(<pre id="payload">)[^<]*/, '$1{}') } : r) },
  'search-wrong-redirect': { files: ['50-search'], res: (r) => (r.path.startsWith('/search') && r.status === 303 ? { ...r, headers: { ...r.headers, location: '/tasks/1' } } : r) },
  'search-no-results-missing': { files: ['50-search'], res: (r) => ({ ...r, body: r.body.replace(/id="no-results"/g, 'id="nothing"') }) },
  'actions-do-nothing': { files: ['60-actions'], req: (q) => (q.method === 'POST' ? { fake: { status: 303, headers: { location: q.headers.referer ? new URL(q.headers.referer).pathname : '/' }, body: '' } } : q) },
  'purge-ignores-confirm': { files: ['60-actions'], req: (q) => (q.method === 'POST' && q.path.endsWith('/purge') ? { ...q, body: q.body.replace(/confirm=[^&]*/, `confirm=${encodeURIComponent(decodeURIComponent(q.path.split('/')[2]))}`) } : q) },
  'csrf-origin-not-checked': { files: ['70-csrf'], req: (q) => (q.method === 'POST' ? { ...q, headers: { ...q.headers, origin: `http://${q.headers.host}` } } : q) },
  'csrf-token-not-checked': { files: ['70-csrf'], req: (q) => (q.method === 'POST' ? { ...q, headers: { ...q.headers, origin: `http://${q.headers.host}` }, body: q.body.replace(/csrf=[^&]*/, '') + `&csrf=${TOKENS.get(q.headers.host) || ''}` } : q) },
  'reader-sees-forms': { files: ['80-roles'], only: 'READER', res: (r) => ({ ...r, body: r.body.replace('</main>', '<form method="post" action="/queues/emails/pause" data-action="pause"><button>Pause</button></form></main>') }) },
  'tenant-sees-all-queues': { files: ['80-roles'], only: 'TENANT', res: (r) => (r.path === '/' ? { ...r, body: r.body.replace('</tbody>', '<tr data-queue="reports"><th><a href="/queues/reports">reports</a></th></tr></tbody>') } : r) },
  'metrics-leak-to-tenant': { files: ['15-metrics'], only: 'TENANT', res: (r) => (r.path === '/metrics' ? { ...r, body: r.body + 'aedb_queue_tasks{queue="reports",state="ready"} 1\n' } : r) },
  'metrics-counters-up-without-preload': { files: ['15-metrics'], only: 'PLAIN', res: (r) => (r.path === '/metrics' ? { ...r, body: r.body.replace(/^aedb_queue_counters_up 0$/m, 'aedb_queue_counters_up 1') } : r) },
  'metrics-max-queues-ignored': { files: ['15-metrics'], wrapBinary: true },
  'no-search-form': { files: ['20-overview'], res: (r) => ({ ...r, body: r.body.replace('id="search"', 'id="find"') }) },
  'overview-paused-wrong': { files: ['20-overview'], res: (r) => (r.path === '/' ? { ...r, body: r.body.replace(/(<tr data-queue="emails".*?data-field="paused">)(.*?)<\/td>/s, '$1yes</td>') } : r) },
  'overview-link-wrong': { files: ['20-overview'], res: (r) => (r.path === '/' ? { ...r, body: r.body.replace(/(<tr data-queue="emails"><th[^>]*><a href=")\/queues\/emails"/, '$1/queues/emails2"') } : r) },
  'queue-chart-line-missing': { files: ['30-queue'], res: (r) => ({ ...r, body: r.body.replace(/<g data-series="in_flight">.*?<\/g>/s, '') }) },
  'queue-schedule-zone-wrong': { files: ['30-queue'], res: (r) => ({ ...r, body: r.body.replace(/Europe\/Berlin/g, 'UTC') }) },
  'queue-task-links-wrong': { files: ['30-queue'], res: (r) => (r.path.startsWith('/queues/') ? { ...r, body: r.body.replace(/href="\/tasks\/(\d+)"/g, 'href="/tasks/1"') } : r) },
  'task-state-wrong': { files: ['40-task'], res: (r) => ({ ...r, body: r.body.replace('data-field="state">scheduled<', 'data-field="state">ready<') }) },
  'task-result-missing': { files: ['40-task'], res: (r) => ({ ...r, body: r.body.replace(/message_id/g, 'id') }) },
  'task-parent-unlinked': { files: ['40-task'], res: (r) => ({ ...r, body: r.body.replace(/(<section id="dependencies".*?)<a href="\/tasks\/\d+">/s, '$1<a>') }) },
  'task-error-history-last-only': { files: ['40-task'], res: (r) => (r.path.startsWith('/tasks/') ? { ...r, body: r.body.replace(/<tr data-attempt="1">.*?<\/tr>/s, '') } : r) },
  'task-children-missing': { files: ['40-task'], res: (r) => (r.path === `/tasks/${SEED().p_child}` ? { ...r, body: r.body.replace(new RegExp(`<a href="/tasks/${SEED().p_grandchild}">`, 'g'), '<a>') } : r) },
  'search-several-shows-one': { files: ['50-search'], res: (r) => (r.path === '/search' ? { ...r, body: r.body.replace(/(<table id="results">.*?<\/tr>.*?)<tr data-task-id.*?<\/tr>/s, '$1') } : r) },
  'reader-action-not-refused': { files: ['80-roles'], only: 'READER', req: (q) => (q.method === 'POST' ? { fake: { status: 303, headers: { location: '/' }, body: '' } } : q) },
  'tenant-action-does-nothing': { files: ['80-roles'], only: 'TENANT', req: (q) => (q.method === 'POST' ? { fake: { status: 303, headers: { location: '/' }, body: '' } } : q) },
  'hostile-queue-name-as-html': { files: ['90-hostile'], res: (r) => ({ ...r, body: r.body.replace(/>&lt;img src=x onerror=window\.__xss=7&gt;</g, '><img src=x onerror=window.__xss=7><') }) },
  'hostile-unescaped': { files: ['90-hostile'], res: (r) => ({ ...r, body: r.body.replace(/&lt;script&gt;window\.__xss=1&lt;\/script&gt;/g, '<script>window.__xss=1</script>') }) },
  'hostile-owner-as-html': { files: ['90-hostile'], res: (r) => ({ ...r, body: r.body.replace(/&lt;img src=x onerror=window\.__xss=5&gt;/g, '<img src=x onerror=window.__xss=5>') }) },
};
const TOKENS = new Map();   // host -> the upstream's csrf token (read from its pages)

function proxy(upstream, mutant, name) {
  const up = new URL(upstream);
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      let q = { method: req.method, path: req.url, headers: { ...req.headers }, body: Buffer.concat(chunks).toString() };
      if (mutant.req && (!mutant.only || mutant.only === name)) q = mutant.req(q);
      if (q.fake) {
        res.writeHead(q.fake.status, q.fake.headers);
        return res.end(q.fake.body);
      }
      const headers = { ...q.headers, 'accept-encoding': 'identity' };
      if (q.body.length || q.method === 'POST') headers['content-length'] = Buffer.byteLength(q.body);
      const u = http.request({ host: up.hostname, port: up.port, method: q.method, path: q.path, headers }, (ur) => {
        const body = [];
        ur.on('data', (c) => body.push(c));
        ur.on('end', () => {
          let r = { path: q.path.split('?')[0], status: ur.statusCode, headers: { ...ur.headers }, body: Buffer.concat(body).toString() };
          const tok = r.body.match(/name="csrf-token" content="([0-9a-f]+)"/);
          if (tok) TOKENS.set(q.headers.host, tok[1]);
          if (mutant.res && (!mutant.only || mutant.only === name)) r = mutant.res(r);
          delete r.headers['content-length'];
          delete r.headers['transfer-encoding'];
          res.writeHead(r.status, r.headers);
          res.end(r.body);
        });
      });
      u.on('error', (e) => { res.writeHead(502); res.end(String(e)); });
      u.end(q.body);
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, url: `http://127.0.0.1:${server.address().port}` })));
}

const names = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(MUTANTS);
const SERVERS = ['ADMIN', 'READER', 'TENANT', 'PLAIN'];
let survived = 0;
for (const name of names) {
  const mutant = MUTANTS[name];
  if (!mutant) throw new Error(`no mutant ${name}`);
  if (process.env.AEDB_RESEED) execSync(process.env.AEDB_RESEED, { stdio: ['ignore', 'ignore', 'inherit'] });
  TOKENS.clear();
  const proxies = {};
  for (const s of SERVERS) proxies[s] = await proxy(process.env[`AEDB_${s}_URL`], mutant, s);
  const env = { ...process.env, ...(mutant.env || {}) };
  if (mutant.wrapBinary) {
    // A server that ignores --max-queues: the binary, called without it.
    const wrapper = join(tmpdir(), 'aedb-mutant-serve.sh');
    writeFileSync(wrapper, `#!/bin/bash\nargs=()\nwhile (($#)); do if [ "$1" = --max-queues ]; then shift 2; else args+=("$1"); shift; fi; done\nexec ${process.env.AEDB_QUEUE_BIN} "\${args[@]}"\n`, { mode: 0o755 });
    env.AEDB_QUEUE_BIN = wrapper;
  }
  for (const s of SERVERS) env[`AEDB_${s}_URL`] = proxies[s].url;
  const files = mutant.files.map((f) => `tests/${f}.test.mjs`);
  // Not spawnSync: the proxies live in this process and must go on serving.
  const run = await new Promise((resolve) => {
    const child = spawn('node', ['--test', '--test-concurrency=1', ...files], { env });
    let stdout = '', stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => child.kill(), 300000);
    child.on('close', (status) => { clearTimeout(timer); resolve({ status, stdout, stderr }); });
  });
  const out = `${run.stdout}\n${run.stderr}`;
  const failed = Number((out.match(/^# fail (\d+)/m) || [])[1] ?? 'NaN');
  const pass = run.status === 0;
  const ok = mutant.expect === 'pass' ? pass : !pass;
  if (!ok) survived++;
  const failedNames = [...out.matchAll(/^not ok \d+ - (.+)$/gm)].map((m) => m[1]);
  console.log(`${ok ? 'ok' : 'NOT OK'} mutant ${name}: ${mutant.expect === 'pass' ? 'control, ' : ''}${pass ? 'tests passed' : `tests failed${Number.isNaN(failed) ? '' : ` (${failed})`}`}` +
    (pass ? '' : `: ${failedNames.slice(0, 4).join('; ')}`));
  if (!ok && process.env.AEDB_MUTANTS_VERBOSE) console.log(out);
  for (const s of SERVERS) proxies[s].server.close();
}
console.log(survived ? `${survived} mutant(s) not killed` : `all ${names.length} mutants as expected`);
process.exit(survived ? 1 : 0);
