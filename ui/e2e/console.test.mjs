// The console's browser test: Debian's chromium driven by playwright-core
// against a real sless server that e2e/console_test.go started. It signs in,
// deploys through the REST API, watches the phase turn Ready, invokes from
// the console, finds the invocation and its logs, disables a trigger and
// sees /fn answer 404, and signs in with a tenant's token that sees only its
// namespace. With SCREENSHOTS set it saves the main pages there.
//
// Environment: SLESS_URL, SLESS_TOKEN (admin), TENANT_TOKEN (namespace
// TENANT_NS), HELLO_ZIP and FAIL_ZIP (paths of zips), PLAYWRIGHT_CORE (the
// package's directory), CHROMIUM, USER_DATA_DIR, SCREENSHOTS (optional).

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const base = env('SLESS_URL');
const admin = env('SLESS_TOKEN');
const { chromium } = await import(pathToFileURL(join(env('PLAYWRIGHT_CORE'), 'index.mjs')).href);

const step = (what) => console.log(`step: ${what}`);

// api calls the REST API from the test, as a user with curl would.
async function api(method, path, { body, token = admin, contentType } = {}) {
  const headers = { Authorization: `Bearer ${token}` };
  if (contentType) headers['Content-Type'] = contentType;
  else if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(base + path, { method, headers, body: typeof body === 'object' && !(body instanceof Buffer) ? JSON.stringify(body) : body });
  const text = await resp.text();
  if (!resp.ok) throw new Error(`${method} ${path}: ${resp.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

const context = await chromium.launchPersistentContext(env('USER_DATA_DIR'), {
  executablePath: env('CHROMIUM'),
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
  viewport: { width: 1280, height: 860 },
});
const errors = [];
const page = context.pages()[0] || await context.newPage();
page.setDefaultTimeout(30000);
page.on('pageerror', (err) => errors.push(`page error: ${err.message}`));
// The browser logs every answer of 4xx as an error; the API's refusals are
// part of the test, so only other errors count.
page.on('console', (msg) => {
  if (msg.type() === 'error' && !msg.text().startsWith('Failed to load resource')) errors.push(`console error: ${msg.text()}`);
});
// Nothing but the server itself is ever asked for.
page.on('request', (req) => {
  if (!req.url().startsWith(base)) errors.push(`request to another origin: ${req.url()}`);
  if (req.url().includes(admin)) errors.push(`the token in a URL: ${req.url()}`);
});

// The console follows the OpenAPI document: every API call it makes is an
// operation of /v1/openapi.json.
const documented = [];
for (const [path, item] of Object.entries((await (await fetch(base + '/v1/openapi.json')).json()).paths)) {
  const re = new RegExp('^' + path.replace(/\{[^}]+\}/g, '[^/]+') + '$');
  for (const method of Object.keys(item)) documented.push([method.toUpperCase(), re]);
}
const called = new Set();
page.on('request', (req) => {
  const url = new URL(req.url());
  if (!url.pathname.startsWith('/v1/') && !url.pathname.startsWith('/fn/')) return;
  const call = `${req.method()} ${url.pathname}`;
  called.add(call);
  if (!documented.some(([m, re]) => m === req.method() && re.test(url.pathname))) {
    errors.push(`the console called ${call}, which the OpenAPI document does not have`);
  }
});

const shots = process.env.SCREENSHOTS;
async function shot(name) {
  if (!shots) return;
  await page.waitForTimeout(300); // let the last answers draw
  await page.screenshot({ path: join(shots, `console-${name}.png`), fullPage: true });
}

// waitText waits until the locator's text matches re.
async function waitText(locator, re, timeout = 60000) {
  const deadline = Date.now() + timeout;
  let last = '';
  while (Date.now() < deadline) {
    try { last = await locator.innerText({ timeout: 1000 }); } catch { last = '(not there)'; }
    if (re.test(last)) return last;
    await page.waitForTimeout(100);
  }
  throw new Error(`waited ${timeout} ms for ${re} in ${locator}; last text: ${last}`);
}

async function signIn(token) {
  await page.goto(base + '/ui/');
  await page.waitForURL(/#\/signin$/);
  await page.fill('#signin input[name=token]', token);
  await page.click('#signin button[type=submit]');
}

try {
  step('a wrong token is refused with the API\'s message');
  await signIn('not-a-token-at-all');
  await waitText(page.locator('#signin-error'), /invalid API token/);
  await shot('signin');

  step('sign in with the admin token');
  await signIn(admin);
  await page.waitForURL(/#\/ns\/default$/);
  await waitText(page.locator('#whoami'), /admin token/);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('sless.token')), admin);
  assert.ok(!page.url().includes(admin), 'the token is not in the URL');

  step('deploy through the API and watch the phase turn Ready');
  await api('POST', '/v1/namespaces/default/functions', { body: { name: 'hello', runtime: 'python3.11' } });
  await api('POST', '/v1/namespaces/default/triggers', { body: { name: 'hello', function: 'hello', type: 'http' } });
  await page.goto(base + '/ui/#/ns/default/fn/hello');
  await waitText(page.locator('main h1'), /hello\s+Pending/);
  await api('POST', '/v1/namespaces/default/functions/hello/upload', { body: readFileSync(env('HELLO_ZIP')), contentType: 'application/zip' });
  await waitText(page.locator('main h1'), /hello\s+Ready/);
  await waitText(page.locator('#status'), /BuildSucceeded\s+True/);

  step('invoke from the console');
  await page.fill('#invoke textarea', '{"name": "browser"}');
  await page.click('#invoke button[type=submit]');
  await waitText(page.locator('#invoke-body'), /Hello, browser!/);
  await waitText(page.locator('#invoke-result'), /Status\s+200/);
  const id = (await page.locator('#invocation-id').innerText()).trim();
  assert.match(id, /^[0-9a-f-]{36}$/);
  await page.locator('#invoke-result .phases-box').waitFor();

  step('the invocation is in the list, newest first, and filters work');
  await page.locator(`#invocation-list tr[data-invocation="${id}"]`).waitFor();
  await page.selectOption('#invocation-filters select[name=status]', 'error');
  await waitText(page.locator('#invocations'), /No invocations match/);
  await page.selectOption('#invocation-filters select[name=status]', 'success');
  await page.selectOption('#invocation-filters select[name=trigger_kind]', 'cli');
  await page.locator(`#invocation-list tr[data-invocation="${id}"]`).waitFor();
  await page.selectOption('#invocation-filters select[name=trigger_kind]', 'http');
  await waitText(page.locator('#invocations'), /No invocations match/);
  await page.selectOption('#invocation-filters select[name=trigger_kind]', '');

  step('follow the logs while /fn is called');
  await page.click('#follow-logs');
  await waitText(page.locator('#logs-output'), /hello from browser/);
  const fn = await fetch(base + '/fn/default/hello', { method: 'POST', body: '{"name": "follower"}' });
  assert.equal(fn.status, 200);
  await waitText(page.locator('#logs-output'), /hello from follower/);
  await shot('function');

  step('the invocation\'s page: summary, phases and logs');
  await page.goto(`${base}/ui/#/ns/default/inv/${id}`);
  await waitText(page.locator('#summary'), /cli/);
  await waitText(page.locator('#invocation-logs'), /hello from browser/);
  await waitText(page.locator('#timing .legend'), /cold start/);
  assert.ok(await page.locator('#timing .phases .seg.handler').count() === 1, 'the handler has a segment of the bar');

  step('a failing function: its error and traceback');
  await page.goto(base + '/ui/#/ns/default');
  await page.click('#new-function summary');
  await page.fill('#create input[name=name]', 'broken');
  await page.selectOption('#create select[name=runtime]', 'python3.11');
  await page.setInputFiles('#create input[name=code]', env('FAIL_ZIP'));
  await page.click('#create button[type=submit]');
  await page.waitForURL(/#\/ns\/default\/fn\/broken$/);
  await waitText(page.locator('main h1'), /broken\s+Ready/);
  await page.fill('#invoke textarea', '{"order": 42}');
  await page.click('#invoke button[type=submit]');
  await waitText(page.locator('#invoke-result'), /Status\s+500/);
  await waitText(page.locator('#last-error'), /Last failed call .*500.*ValueError: order 42 is not in stock/);
  await page.click('#invoke-result a');
  await waitText(page.locator('#invocation-error'), /ValueError: order 42 is not in stock/);
  await waitText(page.locator('#invocation-logs'), /Traceback/);
  await shot('invocation');

  step('the functions list has the last hour\'s figures from the server');
  await page.goto(base + '/ui/#/ns/default');
  await waitText(page.locator('#functions tr[data-function="hello"] [data-stat=invocations]'), /^[2-9]$/);
  await waitText(page.locator('#functions tr[data-function="broken"] [data-stat=errors]'), /^1 \(100%\)$/);
  await waitText(page.locator('#functions tr[data-function="hello"]'), /Ready/);
  await shot('functions');

  step('invocations are paged, newest first');
  for (let i = 0; i < 21; i++) {
    const r = await fetch(base + '/fn/default/hello', { method: 'POST', body: `{"name": "page ${i}"}` });
    assert.equal(r.status, 200);
  }
  await page.goto(base + '/ui/#/ns/default/fn/hello');
  await page.locator('#invocations button', { hasText: 'Older' }).waitFor();
  const rows = page.locator('#invocation-list tbody tr');
  assert.equal(await rows.count(), 20);
  const first = await rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.invocation));
  assert.deepEqual(first, [...first].sort().reverse(), 'newest first');
  await page.click('#invocations button:has-text("Older")');
  await page.locator('#invocations button', { hasText: 'Newer' }).waitFor();
  const second = await rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.invocation));
  assert.ok(second.length >= 3 && second.every((id) => id < first[first.length - 1]), `the second page is older: ${second}`);

  step('a job runs, and runs again from its row');
  await api('POST', '/v1/namespaces/default/jobs', { body: { name: 'once', function: 'hello', payload: { name: 'job' }, run_id: 1 } });
  await waitText(page.locator('#jobs tbody tr'), /once\s+1\s+Succeeded\s+200/);
  await page.click('#jobs tbody tr button');
  await waitText(page.locator('#jobs tbody tr'), /once\s+2\s+Succeeded\s+200/);

  step('disable the trigger in place: /fn answers 404');
  await page.goto(base + '/ui/#/ns/default/fn/hello');
  await page.click('#triggers tr[data-trigger="hello"] button.toggle');
  await waitText(page.locator('#triggers tr[data-trigger="hello"] button.toggle'), /Enable/);
  let code = 0;
  for (let i = 0; i < 100 && code !== 404; i++) {
    code = (await fetch(base + '/fn/default/hello', { method: 'POST', body: '{}' })).status;
    if (code !== 404) await page.waitForTimeout(100);
  }
  assert.equal(code, 404, '/fn after the trigger was disabled');
  const trigger = await api('GET', '/v1/namespaces/default/triggers/hello');
  assert.equal(trigger.enabled, false);

  step('an API error shows the API\'s message');
  await page.goto(base + '/ui/#/ns/default/fn/missing');
  await waitText(page.locator('main'), /function "missing" not found in namespace "default"/);

  step('a tenant\'s token sees only its namespace');
  const tenantNS = env('TENANT_NS');
  await page.click('#signout');
  await page.waitForURL(/#\/signin$/);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('sless.token')), null, 'signing out forgets the token');
  await signIn(env('TENANT_TOKEN'));
  await page.waitForURL(new RegExp(`#/ns/${tenantNS}$`));
  await waitText(page.locator('#nav'), new RegExp(`namespace\\s+${tenantNS}`));
  await page.locator(`#functions tr[data-function="${env('TENANT_FUNCTION')}"]`).waitFor();
  assert.equal(await page.locator('#functions tr[data-function="hello"]').count(), 0);
  await page.goto(base + '/ui/#/ns/default');
  await waitText(page.locator('main .error'), /namespace "default"/);
  await page.goto(base + '/ui/#/ns/default/fn/hello');
  await waitText(page.locator('main .error'), /namespace "default"/);

  assert.deepEqual(errors, []);
  console.log(`console test: all steps passed; the console made ${called.size} different API calls, all documented`);
} catch (err) {
  console.error(`console test failed: ${err.stack || err}`);
  if (errors.length) console.error(errors.join('\n'));
  try { console.error(`page ${page.url()}:\n${await page.locator('main').innerText({ timeout: 2000 })}`); } catch { /* no page */ }
  process.exitCode = 1;
} finally {
  await context.close();
}
