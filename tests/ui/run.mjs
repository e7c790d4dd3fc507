// Drives the web UI in Debian's headless Chromium (playwright-core: no browser download), for
// tests/test_ui.py. Usage: node run.mjs CONFIG_JSON. Prints one line per step and exits non-zero
// with the reason on the first failed check.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const config = JSON.parse(process.argv[2]);
const { base, chromium: executablePath, alice, bob, project, memory, proposal, bobMemory, versioned, editable, screenshots } = config;
const TIMEOUT = 15000;

class CheckFailed extends Error {}
function check(condition, message) {
  if (!condition) throw new CheckFailed(message);
}
function step(name) {
  console.log(`step: ${name}`);
}

async function call(token, path, projectHeader) {
  const headers = { Authorization: `Bearer ${token}` };
  if (projectHeader) headers['X-Hypermnesia-Project'] = projectHeader;
  const response = await fetch(base + path, { headers });
  return { status: response.status, body: await response.json() };
}

async function api(token, path, projectHeader) {
  const { status, body } = await call(token, path, projectHeader);
  check(status === 200, `${path} answered ${status}: ${JSON.stringify(body)}`);
  return body;
}

// Waits for the memory page's status line to say `text` (an .ok line, or .error with error=true).
async function actionResult(page, text, error = false) {
  const line = await page.waitForSelector(`.action-status ${error ? '.error' : '.ok'}`, { timeout: TIMEOUT });
  const said = await line.textContent();
  check(said.includes(text), `the memory page says "${said}", not "${text}"`);
  return said;
}

async function signIn(page, token, projectName) {
  await page.goto(`${base}/ui/`);
  await page.waitForSelector('input[name=token]', { timeout: TIMEOUT });
  await page.fill('input[name=token]', token);
  await page.fill('input[name=project]', projectName || '');
  // Enter submits (keyboard use), and the token never reaches the URL.
  await page.press('input[name=project]', 'Enter');
  await page.waitForSelector('nav a[aria-current=page]', { timeout: TIMEOUT });
  check(!page.url().includes(token), `the token is in the URL: ${page.url()}`);
  const stored = await page.evaluate(() => sessionStorage.getItem('hm.token'));
  check(stored === token, 'the token is not kept in sessionStorage');
}

async function search(page, query) {
  await page.goto(`${base}/ui/#/search`);
  await page.waitForSelector('input[name=q]', { timeout: TIMEOUT });
  await page.fill('input[name=q]', query);
  await page.press('input[name=q]', 'Enter');
  await page.waitForFunction(() => /\d+ results?/.test(document.querySelector('.results')?.textContent || '')
    || document.querySelector('.results .error'), null, { timeout: TIMEOUT });
  const error = await page.$('.results .error');
  check(!error, `search failed: ${error && await error.textContent()}`);
  return page.$$eval('li.hit', (els) => els.map((el) => el.dataset.id));
}

async function browse(page) {
  await page.goto(`${base}/ui/#/browse`);
  await page.waitForSelector('table.grid, .error', { timeout: TIMEOUT });
  const error = await page.$('.error');
  check(!error, `browse failed: ${error && await error.textContent()}`);
  return page.$$eval('table.grid tbody tr', (rows) => rows.map((r) => r.dataset.id));
}

// Opens the map with these kinds (all when null) and waits until it has drawn.
async function openMap(page, kinds) {
  const query = kinds ? `?kinds=${kinds.join(',')}` : '';
  await page.goto(`${base}/ui/#/map${query}`);
  await page.waitForSelector('.stage[data-ready="1"]', { timeout: 30000 });
  const state = await page.evaluate(() => window.__hmMap);
  check(state && !state.error, `the map failed: ${state && state.error}`);
  const attr = Number(await page.getAttribute('.stage', 'data-node-count'));
  check(attr === state.nodes, `data-node-count ${attr} != window.__hmMap.nodes ${state.nodes}`);
  return state;
}

// The screenshot is decoded in a blank page: not blank means more than one colour.
async function distinctColours(context, png) {
  const blank = await context.newPage();
  try {
    return await blank.evaluate(async (dataUrl) => {
      const img = new Image();
      img.src = dataUrl;
      await img.decode();
      const canvas = document.createElement('canvas');
      canvas.width = img.width;
      canvas.height = img.height;
      const ctx = canvas.getContext('2d');
      ctx.drawImage(img, 0, 0);
      const data = ctx.getImageData(0, 0, img.width, img.height).data;
      const seen = new Set();
      for (let i = 0; i < data.length && seen.size < 50; i += 4) seen.add((data[i] << 16) | (data[i + 1] << 8) | data[i + 2]);
      return seen.size;
    }, `data:image/png;base64,${png.toString('base64')}`);
  } finally {
    await blank.close();
  }
}

const profile = mkdtempSync(join(tmpdir(), 'hm-ui-chromium-'));
let context;
let failed = false;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    viewport: { width: 1366, height: 820 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--use-angle=swiftshader', '--enable-unsafe-swiftshader',
      '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  // The network is unplugged: any request not to the gateway is aborted (and reported below), so
  // a page that needed a CDN would not render.
  const gateway = new URL(base).origin;
  const blocked = [];
  await context.route('**/*', (route) => {
    const url = route.request().url();
    if (new URL(url).origin === gateway) return route.continue();
    blocked.push(url);
    return route.abort('internetdisconnected');
  });
  const page = await context.newPage();
  const pageErrors = [];
  page.on('pageerror', (err) => pageErrors.push(err.message));
  // Nothing may be fetched from anywhere but the gateway.
  const foreign = [];
  page.on('request', (req) => { if (!req.url().startsWith(base) && !req.url().startsWith('data:')) foreign.push(req.url()); });

  step('the sign-in page offers no Sign out');
  await page.goto(`${base}/ui/`);
  await page.waitForSelector('input[name=token]', { timeout: TIMEOUT });
  check(!(await page.isVisible('#signout')), 'the sign-in page shows the Sign out button');
  check(!(await page.innerText('body')).includes('Sign out'), 'the sign-in page shows "Sign out"');

  step('/docs renders every operation offline (Swagger UI from the gateway, no CDN)');
  {
    const spec = await (await fetch(`${base}/openapi.json`)).json();
    const operations = Object.values(spec.paths).reduce((n, methods) => n + Object.keys(methods).length, 0);
    const docs = await context.newPage();
    docs.on('pageerror', (err) => pageErrors.push(`/docs: ${err.message}`));
    await docs.goto(`${base}/docs`);
    await docs.waitForSelector('.swagger-ui .opblock', { timeout: 30000 });
    const shown = await docs.$$eval('.swagger-ui .opblock', (els) => els.length);
    check(shown === operations, `Swagger UI shows ${shown} operations, the document has ${operations}`);
    const title = await docs.textContent('.swagger-ui .info .title');
    check(title.includes(spec.info.title), `Swagger UI's title is ${title}`);
    check(await docs.$('.opblock-summary-path[data-path="/memories/{memory_id}/archive"]'), 'Swagger UI lacks the archive route');
    await docs.goto(`${base}/redoc`);
    await docs.waitForSelector('[data-section-id^="operation/"]', { state: 'attached', timeout: 30000 });
    // The menu and the content both carry an operation's section id.
    const redocShown = await docs.$$eval('[data-section-id^="operation/"]',
      (els) => new Set(els.map((el) => el.getAttribute('data-section-id'))).size);
    check(redocShown === operations, `ReDoc shows ${redocShown} operations, the document has ${operations}`);
    await docs.close();
  }

  step('sign in as alice');
  await signIn(page, alice, project);

  step('a wrong token is refused with the API message');
  {
    const other = await context.newPage();
    await other.goto(`${base}/ui/`);
    await other.evaluate(() => sessionStorage.clear());
    await other.reload();
    await other.fill('input[name=token]', 'not-a-token');
    await other.press('input[name=token]', 'Enter');
    const error = await other.waitForSelector('.error', { timeout: TIMEOUT });
    const text = await error.textContent();
    check(text.length > 0 && !/Traceback|File "|\.py\b/.test(text), `sign-in error leaks internals: ${text}`);
    await other.close();
  }

  step('find the saved memory on the search page');
  const hits = await search(page, memory.query);
  check(hits.includes(memory.id), `search did not find ${memory.id}: ${hits}`);
  const first = await page.$(`li.hit[data-id="${memory.id}"]`);
  const signals = await first.$eval('dl.signals', (el) => el.textContent);
  check(/score/.test(signals) && /similarity/.test(signals), `no score/similarity shown: ${signals}`);
  if (screenshots) {
    check((await search(page, 'import problems')).length > 1, 'the screenshot query found too little');
    await page.screenshot({ path: join(screenshots, 'ui-search.png') });
    await search(page, memory.query);
  }

  step('open its page');
  await page.click(`li.hit[data-id="${memory.id}"] .hit-head a`);
  await page.waitForSelector(`article.memory[data-id="${memory.id}"]`, { timeout: TIMEOUT });
  const content = await page.textContent('article.memory .content');
  check(content.includes(memory.content), `the memory page shows ${content}`);
  for (const title of ['Lineage', 'Versions', 'Evidence', 'Raw log']) {
    check(await page.$(`section.panel h2:text-is("${title}")`), `the memory page has no ${title} section`);
  }

  step('a memory updated in place lists every version and every raw-log record');
  await page.goto(`${base}/ui/#/memory/${versioned.id}`);
  await page.waitForSelector(`article.memory[data-id="${versioned.id}"]`, { timeout: TIMEOUT });
  await page.waitForSelector('table.versions tbody tr', { timeout: TIMEOUT });
  await page.waitForSelector('table.records tbody tr', { timeout: TIMEOUT });
  const shown = await page.$$eval('table.versions tbody tr', (rows) => rows.map((r) => ({
    version: Number(r.dataset.version),
    seq: Number(r.dataset.seq),
    text: r.dataset.text,
    content: r.querySelector('td.content').textContent,
    author: r.children[2].textContent,
  })));
  check(JSON.stringify(shown.map((v) => v.content)) === JSON.stringify(versioned.contents),
    `the versions shown are ${JSON.stringify(shown)}, not ${JSON.stringify(versioned.contents)}`);
  check(shown.every((v, i) => v.version === i + 1 && v.text === 'present' && v.author === versioned.author),
    `the versions are not numbered, present and by ${versioned.author}: ${JSON.stringify(shown)}`);
  const recordSeqs = await page.$$eval('table.records tbody tr', (rows) => rows.map((r) => Number(r.dataset.seq)));
  check(JSON.stringify(recordSeqs) === JSON.stringify(versioned.records),
    `the page lists records ${recordSeqs}, hypermnesia why lists ${versioned.records}`);
  check(JSON.stringify(shown.map((v) => v.seq)) === JSON.stringify(versioned.records),
    `the versions' records ${shown.map((v) => v.seq)} are not the raw log's ${versioned.records}`);

  step('edit a memory on its page: content, description, tags, importance');
  {
    const path = `/memories/${editable.id}`;
    await page.goto(`${base}/ui/#/memory/${editable.id}`);
    await page.waitForSelector(`article.memory[data-id="${editable.id}"]`, { timeout: TIMEOUT });
    check(await page.inputValue('.changes textarea[name=content]') === editable.content, 'the edit form does not hold the content');
    await page.fill('.changes textarea[name=content]', editable.edited.content);
    await page.fill('.changes input[name=description]', editable.edited.description);
    await page.fill('.changes input[name=tags]', editable.edited.tags.join(', '));
    await page.fill('.changes input[name=importance]', String(editable.edited.importance));
    await page.click('.changes button[type=submit]');
    await actionResult(page, 'Saved: changed content, description, tags, importance');
    check((await page.textContent('article.memory .content')).includes(editable.edited.content), 'the page does not show the new content');
    const now = await api(alice, path, project);
    check(now.content === editable.edited.content && now.description === editable.edited.description
      && JSON.stringify(now.tags) === JSON.stringify(editable.edited.tags) && now.importance === editable.edited.importance,
    `the API holds ${JSON.stringify(now)} after the edit`);
    const rows = await page.$$eval('table.versions tbody tr td.content', (tds) => tds.map((td) => td.textContent));
    check(JSON.stringify(rows) === JSON.stringify([editable.content, editable.edited.content]),
      `the versions after the edit are ${JSON.stringify(rows)}`);

    step('an edit the API refuses shows its message and changes nothing');
    // A tag over the service's 100 characters: the browser has no rule for it, the API refuses it.
    await page.fill('.changes input[name=tags]', `garden, ${'x'.repeat(101)}`);
    await page.click('.changes button[type=submit]');
    const refused = await actionResult(page, 'tags are 1-100 printable characters', true);
    check(!/Traceback|File "/.test(refused), `the refusal leaks internals: ${refused}`);
    check(JSON.stringify((await api(alice, path, project)).tags) === JSON.stringify(editable.edited.tags), 'a refused edit changed the tags');

    step('archive it, find it still on its page, restore it');
    await page.click('.changes button.archive');
    await actionResult(page, 'Archived');
    check(await page.getAttribute('article.memory', 'data-archived') === '1', 'the page does not show the memory archived');
    check((await call(alice, path, project)).status === 404, 'an archived memory still answers GET');
    const listed = await api(alice, '/memories?include_archived=true&limit=200', project);
    check(listed.memories.some((m) => m.id === editable.id && m.archived_at), 'the archived memory is not listed as archived');
    await page.reload();
    await page.waitForSelector(`article.memory[data-id="${editable.id}"][data-archived="1"]`, { timeout: TIMEOUT });
    await page.click('.changes button.restore');
    await actionResult(page, 'Restored');
    check(await page.getAttribute('article.memory', 'data-archived') === '0', 'the page does not show the memory restored');
    check((await api(alice, path, project)).archived_at === null, 'the restored memory is still archived in the API');

    step('delete it, after a confirmation');
    await page.click('.changes button.delete');
    check(await page.isVisible('.changes .confirm'), 'Delete asks for no confirmation');
    await page.click('.changes .confirm button.cancel');
    check(!(await page.isVisible('.changes .confirm')), 'Cancel does not close the confirmation');
    check((await call(alice, path, project)).status === 200, 'cancelling the delete deleted the memory');
    await page.click('.changes button.delete');
    await page.click('.changes .confirm button.confirm-delete');
    await actionResult(page, `Deleted ${editable.id}`);
    check((await call(alice, path, project)).status === 404, 'the deleted memory still answers GET');
    check((await call(alice, `${path}/lineage`, project)).status === 404, 'the deleted memory still has a lineage');
  }

  step('a bad id shows the API message, not a stack trace');
  await page.goto(`${base}/ui/#/memory/not-a-uuid`);
  const bad = await (await page.waitForSelector('.error', { timeout: TIMEOUT })).textContent();
  check(/not a memory id/.test(bad) && !/Traceback|File "/.test(bad), `bad id message: ${bad}`);

  step('approve the proposal');
  await page.goto(`${base}/ui/#/proposals`);
  const card = `li.proposal[data-id="${proposal}"]`;
  await page.waitForSelector(card, { timeout: TIMEOUT });
  await page.click(`${card} button.primary`);
  await page.waitForSelector(`${card} .ok`, { timeout: TIMEOUT });
  const approved = await api(alice, `/proposals?status=approved`, project);
  check(approved.proposals.some((p) => p.id === proposal), 'the proposal is not approved in the API');

  step('browse lists the memory');
  check((await browse(page)).includes(memory.id), 'browse does not list the saved memory');

  step('the map draws as many nodes as the API answers');
  for (const kinds of [null, ['semantic']]) {
    const state = await openMap(page, kinds);
    const query = kinds ? `&kinds=${kinds.join('&kinds=')}` : '';
    const graph = await api(alice, `/viz/graph?limit=2000${query}`, project);
    check(graph.nodes.length > 0, `the API's graph is empty for ${kinds}`);
    check(state.nodes === graph.nodes.length, `the map drew ${state.nodes} nodes, the API answered ${graph.nodes.length} (kinds ${kinds})`);
    check(state.ids.length === graph.nodes.length && graph.nodes.every((n) => state.ids.includes(n.id)), 'the map drew other nodes than the API answered');
    if (!kinds) check(state.ids.includes(memory.id), 'the saved memory is not on the map');
  }
  await openMap(page, null);
  step('hovering a node shows its label; clicking opens its memory');
  const [x, y] = await page.evaluate((id) => window.__hmMap.at(id), memory.id);
  await page.mouse.move(x, y);
  await page.waitForSelector('.tooltip:not([hidden])', { timeout: TIMEOUT });
  const label = await page.textContent('.tooltip');
  check(label.includes(memory.description), `the tooltip says ${label}`);
  const png = await page.locator('.stage').screenshot();
  const colours = await distinctColours(context, png);
  check(colours > 2, `the map screenshot is blank (${colours} colours)`);
  if (screenshots) await page.screenshot({ path: join(screenshots, 'ui-map.png') });

  step('the time scrubber replays memories appearing');
  const all = (await page.evaluate(() => window.__hmMap)).nodes;
  await page.fill('input[name=time]', '0');
  const early = await page.evaluate(() => window.__hmMap.nodes);
  check(early < all, `at the scrubber's start ${early} of ${all} nodes are drawn`);
  await page.fill('input[name=time]', '1000');
  check(await page.evaluate(() => window.__hmMap.nodes) === all, 'the scrubber\'s end does not draw every node');
  await page.mouse.click(x, y);
  await page.waitForSelector(`article.memory[data-id="${memory.id}"]`, { timeout: TIMEOUT });

  step('the health page plots the search log');
  await page.goto(`${base}/ui/#/health`);
  await page.waitForSelector('figure.plot svg rect.bar', { state: 'attached', timeout: TIMEOUT });

  step('bob never sees alice\'s memories');
  await page.click('#signout');
  await signIn(page, bob, 'bobs');
  const bobHits = await search(page, memory.query);
  check(!bobHits.includes(memory.id), 'bob finds alice\'s memory on the search page');
  const bobOwn = await search(page, bobMemory.query);
  check(bobOwn.includes(bobMemory.id), 'bob does not find his own memory (the search page is not working for him)');
  const bobRows = await browse(page);
  check(!bobRows.includes(memory.id) && bobRows.includes(bobMemory.id), `bob's browse: ${bobRows}`);
  const bobMap = await openMap(page, null);
  const bobGraph = await api(bob, '/viz/graph?limit=2000', 'bobs');
  check(bobMap.nodes === bobGraph.nodes.length, `bob's map drew ${bobMap.nodes}, the API answered ${bobGraph.nodes.length}`);
  check(!bobMap.ids.includes(memory.id) && bobMap.ids.includes(bobMemory.id), 'bob\'s map shows alice\'s memory or not his own');
  await page.goto(`${base}/ui/#/memory/${memory.id}`);
  const hidden = await (await page.waitForSelector('.error', { timeout: TIMEOUT })).textContent();
  check(!hidden.includes(memory.content), 'bob sees alice\'s memory page');

  check(pageErrors.length === 0, `uncaught errors in the page: ${pageErrors.join('; ')}`);
  check(foreign.length === 0, `the UI fetched from elsewhere: ${foreign.join(', ')}`);
  check(blocked.length === 0, `pages asked for addresses other than the gateway: ${blocked.join(', ')}`);
  console.log('ok');
} catch (err) {
  failed = true;
  console.error(err instanceof CheckFailed ? `FAILED: ${err.message}` : `ERROR: ${err.stack || err}`);
} finally {
  if (context) await context.close();
  rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
