// Drives the run monitor in headless Chromium against a real agentprism daemon.
//
//     node driver.mjs --mcp URL --project DIR --panel FILE --out DIR --mock-agent BINARY \
//         --playwright DIR --ext-apps DIR --esbuild DIR --chromium /usr/bin/chromium
//
// The three DIRs are package folders (playwright-core, @modelcontextprotocol/ext-apps, esbuild)
// that scripts/install-test-deps names in its manifest: an ES module finds no packages through
// NODE_PATH, so they are imported by absolute path.
//
// `--mcp` is the daemon's /mcp URL (the Rust test, tests/it/monitor_browser.rs, starts the
// daemon with its own HOME and state dir and the mock ACP agent). This script is the MCP host:
// it speaks MCP to the daemon (mcp.mjs), computes the model-facing tool list with the bridge's
// own visibility helper, reads the panel resource, and serves a host page (host-entry.mjs,
// bundled with esbuild at run time) that embeds the panel through the official MCP Apps
// `AppBridge` of @modelcontextprotocol/ext-apps. Tool calls the panel makes reach the daemon
// through `window.hostCallTool`, exposed from here. Then the same panel runs as the plain page
// the daemon serves at `GET /ui`, which speaks MCP to its own origin's /mcp.
//
// Every step prints PASS or FAIL (report.mjs); the last line is `N passed, M failed`, and the
// exit code is 0 only when nothing failed. Every wait has a deadline. Screenshots of the wide
// and the narrow layout are written to `--out`.

import { createServer } from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { pathToFileURL, fileURLToPath } from 'node:url';

import { Report, StepFailed } from '../report.mjs';
import { McpClient } from './mcp.mjs';

const STEP_DEADLINE_MS = 30_000;
const RESOURCE_URI = 'ui://agentprism-workflow/run-monitor.html';
const APP_ONLY = ['workflow-events', 'workflow-runs', 'workflow-notifications'];
const CHROMIUM_FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const here = fileURLToPath(new URL('.', import.meta.url));

// The watched run: a planner with a tool call, a checkpoint, then two builders in parallel, one
// asking for a permission and one that runs until the panel stops it; the result pages.
const MAIN_SCRIPT = `export const meta = { name: 'monitor-e2e', description: 'a run to watch', model: 'mock',
  phases: [{ title: 'plan' }, { title: 'build' }] };
phase('plan');
const plan = await agent('plan the work\\n@mock tool read_file plan.md\\n@mock reply PLAN-READY', { label: 'planner' });
const go = await checkpoint('Build the plan?');
phase('build');
const built = await parallel([
  () => agent('build part one\\n@mock permission', { label: 'builder-one' }),
  () => agent('build part two\\n@mock hang', { label: 'builder-two' }),
]);
return { plan, go, built, report: 'r'.repeat(20000) };
`;
const OTHER_SCRIPT = `export const meta = { name: 'monitor-other', description: 'a second run', model: 'mock' };
return await agent('other\\n@mock reply OTHER-DONE', { label: 'other-agent' });
`;
const HANGING_SCRIPT = `export const meta = { name: 'monitor-hanging', description: 'stopped whole', model: 'mock' };
return await agent('forever\\n@mock hang', { label: 'forever' });
`;
// Declares its own backend (the mock agent again), so it waits for a setup approval first.
const standaloneScript = mockAgent => `export const meta = { name: 'monitor-standalone', description: 'watched in a browser',
  model: 'scripted', backends: { scripted: { command: ${JSON.stringify(mockAgent)} } } };
phase('ask');
const ok = await checkpoint('Go on?');
return await agent('after\\n@mock reply STANDALONE-DONE', { label: 'after-checkpoint' });
`;

// Every string of this run is markup that runs script if the panel ever parses it as HTML:
// the workflow name, a phase, a label, a prompt, a tool title, agent output, a checkpoint
// question and the result. Each payload sets a flag on the page; the panel must show them as text.
const XSS = ['<img src=x onerror="window.__xss=1">', '"><script>window.__xss=2</script>', '<svg onload="window.__xss=3"></svg>'];
const HOSTILE_SCRIPT = `export const meta = { name: ${JSON.stringify('hostile ' + XSS[0])}, description: 'markup everywhere', model: 'mock',
  phases: [{ title: ${JSON.stringify(XSS[1])} }] };
phase(${JSON.stringify(XSS[1])});
const said = await agent(${JSON.stringify(XSS[0] + '\n@mock tool ' + XSS[2] + '\n@mock reply ' + XSS[1] + XSS[0])}, { label: ${JSON.stringify(XSS[2])} });
const go = await checkpoint(${JSON.stringify(XSS[1] + XSS[0])});
return { said, go, markup: ${JSON.stringify(XSS.join(''))} };
`;

const { values: opts } = parseArgs({ options: {
    mcp: { type: 'string' }, project: { type: 'string' }, panel: { type: 'string' }, out: { type: 'string' },
    playwright: { type: 'string' }, 'ext-apps': { type: 'string' }, esbuild: { type: 'string' },
    chromium: { type: 'string', default: '/usr/bin/chromium' }, 'mock-agent': { type: 'string' }
} });
for (const key of ['mcp', 'project', 'panel', 'out', 'playwright', 'ext-apps', 'esbuild', 'mock-agent']) {
    if (!opts[key]) { console.log(`FAIL driver arguments: --${key} is required`); process.exit(2); }
}
const load = (dir, file) => import(pathToFileURL(join(dir, file)).href);

async function until(what, check, deadline = STEP_DEADLINE_MS) {
    const started = Date.now();
    let last;
    for (;;) {
        last = await check();
        if (last) return last;
        if (Date.now() - started > deadline) throw new Error(`timed out waiting for ${what}`);
        await new Promise(resolve => setTimeout(resolve, 50));
    }
}

/** The host's side of the views' tool calls: each goes to the daemon, in the host's session. */
class Host {
    constructor(client) {
        this.client = client;
        this.held = null;
        // Every call a view made, in order, with the view's id.
        this.calls = [];
    }

    async callTool({ name, arguments: args = {} }, view) {
        this.calls.push({ view, name, args });
        if (this.held && this.held.matches(name, args)) {
            const hold = this.held;
            this.held = null;
            hold.reached({ view, seq: this.calls.length });
            await hold.released;
        }
        return this.client.callTool(name, args);
    }

    /** Holds the next matching call's reply until the returned release() is called. */
    hold(matches) {
        let reached, release;
        const reachedP = new Promise(resolve => { reached = resolve; });
        const released = new Promise(resolve => { release = resolve; });
        this.held = { matches, reached, released };
        return { reached: reachedP, release };
    }
}

async function bundleHost(esbuildDir, extAppsDir) {
    const esbuild = await load(esbuildDir, 'lib/main.js').then(m => m.default || m);
    const built = await esbuild.build({
        entryPoints: [join(here, 'host-entry.mjs')], bundle: true, write: false, format: 'iife',
        platform: 'browser', target: 'chrome120', logLevel: 'silent',
        nodePaths: [join(extAppsDir, '..', '..')]
    });
    return built.outputFiles[0].text;
}

/** The loopback server of the host page. */
function serve(hostScript) {
    const hostPage = `<!doctype html><html><head><meta charset="utf-8"><title>monitor test host</title><link rel="icon" href="data:,"></head>
<body style="margin:0"><script>${hostScript.replace(/<\/script/g, '<\\/script')}</script></body></html>`;
    const server = createServer(async (request, response) => {
        const chunks = [];
        for await (const chunk of request) chunks.push(chunk);
        try {
            if (request.url === '/host.html') {
                response.writeHead(200, { 'content-type': 'text/html' }).end(hostPage);
            } else {
                response.writeHead(404).end();
            }
        } catch (error) {
            response.writeHead(500).end(String(error));
        }
    });
    return new Promise(resolve => server.listen(0, '127.0.0.1', () => resolve(server)));
}

async function waitStatus(client, runId, want) {
    return until(`run ${runId} to be ${want}`, async () => {
        const status = await client.workflow({ action: 'status', runId });
        return status.status === want ? status : null;
    });
}

/** A reused iframe rebinds, and two views race for one message. */
async function rebinding(t) {
    const { page, view, log, host, client, main, other, monitorResult } = t;
    // A reused iframe: the first invocation's reply is held back, a second invocation binds the
    // view to another run, and the late reply of the first binding must change nothing.
    const held = host.hold((name, args) => name === 'workflow-events' && args.runId === other);
    await page.evaluate(([args, result]) => window.invokeMonitor(args, result), [{ runId: other }, await monitorResult(other)]);
    await held.reached;
    // Two views of one run race for the checkpoint's message: the first claim is held until the
    // other view has listed the notification as unclaimed too, so only the ledger's answer to
    // the claims can keep the message from going out twice.
    const claimHold = host.hold((name, args) => name === 'workflow-notifications' && args.claim !== undefined);
    await page.evaluate(([args, result]) => window.invokeMonitor(args, result), [{ runId: main }, await monitorResult(main)]);
    await until('the graph of the main run', async () => (await view.locator('[data-testid=agent]').count()) >= 1);
    held.release();
    await page.evaluate(([args, result]) => window.invokeMonitor(args, result, 'second'), [{ runId: main }, await monitorResult(main)]);
    const claimer = await Promise.race([claimHold.reached, new Promise((_, reject) => setTimeout(
        () => reject(new Error('timed out waiting for a view to claim the checkpoint message')), STEP_DEADLINE_MS))]);
    await until('the other view to list the notification', () => host.calls.slice(claimer.seq).some(call =>
        call.view !== claimer.view && call.name === 'workflow-notifications' && call.args.claim === undefined));
    await until('the other view to claim', () => host.calls.slice(claimer.seq).some(call =>
        call.view !== claimer.view && call.name === 'workflow-notifications' && call.args.claim !== undefined));
    claimHold.release();
    await until('the checkpoint panel', () => view.locator('[data-testid=checkpoint]').isVisible());
    const title = await view.locator('#title').textContent();
    const runShown = await view.locator('#run-id').textContent();
    const otherCalls = (await log()).toolCalls.filter(call => call.view === 'monitor' && call.arguments && call.arguments.runId === other).length;
    report.check('a second invocation rebinds the iframe and the late reply is discarded',
        title === 'monitor-e2e' && runShown === main && otherCalls === 1,
        () => `title ${title}, run ${runShown}, calls for the first run ${otherCalls}`);

}

/** The graph, the checkpoint question, the snapshot on selection, tool results. */
async function selection(t) {
    const { page, view, log, host, client, main, other, monitorResult } = t;
    const labels = await view.locator('[data-testid=agent] .label').allTextContents();
    const phases = await view.locator('[data-testid=phase] .phase-title').allTextContents();
    report.check('the graph renders the phase and its agent', labels.includes('planner') && phases.some(p => p.startsWith('plan')),
        () => `agents ${labels}, phases ${phases}`);
    const checkpointText = await view.locator('[data-testid=checkpoint] pre').textContent();
    report.check('the checkpoint shows its question', checkpointText.includes('Build the plan?'), checkpointText);

    await view.locator('[data-testid=agent][data-index="0"]').click();
    await until('the model context snapshot', async () => (await log()).modelContext.length > 0);
    const snapshot = (await log()).modelContext.at(-1);
    const snapshotBytes = Buffer.byteLength(JSON.stringify(snapshot));
    report.check('selection updates a bounded model context snapshot',
        snapshot.structuredContent.selected.callIndex === 0 && snapshot.structuredContent.runId === main
            && snapshot.structuredContent.resources.events === `workflow://runs/${main}/events` && snapshotBytes <= 8192
            && snapshot.content[0].text.length <= 4200,
        () => `${snapshotBytes} bytes: ${JSON.stringify(snapshot)}`);
    // The snapshot's bound, at its edge: 4096 bytes pass whole, 4097 are cut to 4096 and marked.
    const frame = await (await page.$('#monitor')).contentFrame();
    const edge = await frame.evaluate(() => {
        const bytes = text => new TextEncoder().encode(text).length;
        const whole = clip('é'.repeat(2048), 4096);
        const cut = clip('é'.repeat(2048) + 'x', 4096);
        return { whole: bytes(whole), wholeSame: whole === 'é'.repeat(2048), cut: bytes(cut.slice(0, -1)), marked: cut.endsWith('…') };
    });
    report.check('the model context bound holds at its edge',
        edge.whole === 4096 && edge.wholeSame && edge.cut === 4096 && edge.marked, () => JSON.stringify(edge));
    const tool = view.locator('[data-testid=tool-result]').first();
    await tool.locator('summary').click();
    report.check('tool results expand', (await tool.getAttribute('open')) !== null && (await tool.textContent()).includes('read_file'),
        () => tool.textContent());

    const note = await until('the checkpoint message', async () => (await log()).messages.find(m => /checkpoint/i.test(m.content[0].text)));
    report.ok('an automatic message for the checkpoint, claimed first', note.content[0].text);

}

/** Checkpoint, permission, one agent stopped, the result paged and downloaded. */
async function answers(t) {
    const { page, view, log, host, client, main, other, monitorResult } = t;
    await view.locator('[data-testid=checkpoint-yes]').click();
    await until('the permission request', () => view.locator('[data-testid=permission]').isVisible());
    report.ok('the checkpoint answered from the panel and the run continued');
    // The wide screenshot shows a live run: a permission waiting, the builders running.
    await view.locator('[data-testid=agent]', { hasText: 'builder-one' }).click();
    await page.locator('#monitor').screenshot({ path: join(opts.out, 'wide.png') });
    await view.locator('[data-testid=permission-option][data-option=allow]').click();
    await until('builder-one to finish', async () =>
        (await view.locator('[data-testid=agent][data-status=done] .label').allTextContents()).includes('builder-one'));
    report.ok('the permission answered with an advertised option');

    const builderTwo = view.locator('[data-testid=agent]', { hasText: 'builder-two' });
    await builderTwo.click();
    await view.locator('[data-testid=stop-agent]').click();
    await until('the run to complete', async () => (await view.locator('[data-testid=status]').textContent()).startsWith('completed'));
    const stopped = await builderTwo.getAttribute('data-status');
    report.check('one agent stopped from the panel, the run went on', stopped === 'cancelled', stopped);
    const summary = view.locator('[data-testid=run-summary]');
    const summaryLine = await until('the run summary in the header', async () => (await summary.isVisible()) && summary.textContent());
    report.check('the header shows what the ended run cost', /^\d+ calls? · [\d.]+[kM]? tok( · \$\d+\.\d\d)? · \d/.test(summaryLine), summaryLine);

    const exact = (await client.request('resources/read', { uri: `workflow://runs/${main}/result` })).contents[0].text;
    const bytes = Buffer.from(exact, 'utf8');
    await view.locator('[data-testid=result-load]').click();
    await until('the first result page', () => view.locator('[data-testid=result-chunk]').isVisible());
    const first = await view.locator('[data-testid=result-chunk]').textContent();
    await view.locator('[data-testid=result-next]').click();
    await until('the second result page', async () => (await view.locator('[data-testid=result-range]').textContent()).startsWith('bytes 8192'));
    const second = await view.locator('[data-testid=result-chunk]').textContent();
    report.check('the result pages', first === bytes.subarray(0, 8192).toString() && second === bytes.subarray(8192, 16384).toString(),
        () => `first ${first.slice(0, 60)}…, second ${second.slice(0, 60)}…`);
    await view.locator('[data-testid=result-download]').click();
    const download = await until('the download', async () => (await log()).downloads[0]);
    report.check('the exact result downloads', download.contents[0].resource.text === exact,
        () => `${download.contents[0].resource.text.length} of ${exact.length} characters`);
    const terminal = await until('the terminal message', async () => (await log()).messages.find(m => /completed/i.test(m.content[0].text)));
    report.ok('an automatic message for the terminal outcome', terminal.content[0].text);

}

/** Fullscreen, "Ask about this agent", the automatic messages, the narrow layout. */
async function layout(t) {
    const { page, view, log, host, client, main, other, monitorResult } = t;
    const { consoleErrors } = t;
    await view.locator('[data-testid=agent]', { hasText: 'builder-one' }).click();
    await view.locator('[data-testid=fullscreen]').click();
    await until('fullscreen', async () => (await view.locator('[data-testid=fullscreen]').textContent()) === 'Exit fullscreen');
    const keptLabel = await view.locator('[data-testid=inspect-label]').textContent();
    report.check('fullscreen keeps the run and the selection',
        (await log()).displayModes.includes('fullscreen') && keptLabel.startsWith('builder-one')
            && (await view.locator('#run-id').textContent()) === main, keptLabel);
    await view.locator('[data-testid=fullscreen]').click();
    await until('inline again', async () => (await view.locator('[data-testid=fullscreen]').textContent()) === 'Fullscreen');

    const messagesBefore = (await log()).messages.length;
    await view.locator('[data-testid=ask]').click();
    const asked = await until('the question', async () => (await log()).messages[messagesBefore]);
    report.check('"Ask about this agent" sends the selected agent', asked.content[0].text.includes('builder-one'), asked.content[0].text);
    const automatic = (await log()).messages.slice(0, messagesBefore).map(m => m.content[0].text);
    const claims = (await log()).toolCalls.filter(call => call.name === 'workflow-notifications' && call.arguments.claim !== undefined);
    report.check('automatic messages only for required input and terminal outcomes, once each across two views, each claimed first',
        automatic.length === new Set(automatic).size && automatic.every(t => /checkpoint|permission|completed/i.test(t))
            && claims.length >= automatic.length,
        () => JSON.stringify({ automatic, claims: claims.length }));

    await page.evaluate(() => window.resizeMonitor(420));
    await until('the narrow layout', async () => {
        const graph = await view.locator('#graph-box').boundingBox();
        const inspector = await view.locator('#inspector').boundingBox();
        return graph && inspector && inspector.y >= graph.y + graph.height;
    });
    await page.locator('#monitor').screenshot({ path: join(opts.out, 'narrow.png') });
    report.ok('the narrow layout puts the inspector below the graph');
    report.check('the view logged no errors', consoleErrors.length === 0, () => consoleErrors.join('\n'));

}

/** "Rerun from here" on a settled agent of a completed run: the panel resumes the run with
 *  that call to redo, and the redone call says why it ran live. */
async function rerunning(t) {
    const { page, view, log, client, other, monitorResult } = t;
    await waitStatus(client, other, 'completed');
    await page.evaluate(([args, result]) => window.invokeMonitor(args, result), [{ runId: other }, await monitorResult(other)]);
    await until('the completed other run', async () => (await view.locator('[data-testid=status]').textContent()).startsWith('completed'));
    await view.locator('[data-testid=agent]', { hasText: 'other-agent' }).click();
    await view.locator('[data-testid=rerun-agent]').click();
    // The panel's banner says how its resume went; an error there ends the wait with it.
    const answered = await until('the panel to resume the run', async () => {
        const text = await view.locator('[data-testid=banner]').textContent();
        return text.startsWith('rerun:') ? text : null;
    });
    report.check('the panel resumes the run to rerun the agent', answered === 'rerun: done.', answered);
    const redone = await until('the rerun to complete', async () => {
        const status = await client.workflow({ action: 'status', runId: other });
        return status.status === 'completed' && status.generation === 2 ? status : null;
    });
    const asked = (await log()).toolCalls.find(call => call.name === 'workflow' && call.arguments.action === 'resume'
        && call.arguments.runId === other);
    const call = redone.calls.find(c => c.label === 'other-agent');
    report.check('the panel reruns an agent of a completed run',
        asked && JSON.stringify(asked.arguments.rerun) === '[0]' && call && call.liveReason === 'rerun',
        () => JSON.stringify({ asked, call }));
    await until('the panel to say why it ran', async () =>
        (await view.locator('[data-testid=inspect-ran]').textContent()) === 'live: asked to rerun');
}

/** The same panel as a plain page, with its own MCP session. */
async function standalone(t) {
    const { page, view, log, host, client, main, other, monitorResult } = t;
    const { browser } = t;
    // The standalone page: same panel, its own MCP session with the same origin's /mcp.
    const standaloneAck = await client.workflow({ action: 'run', projectDir: opts.project, script: standaloneScript(opts['mock-agent']) });
    const standaloneRun = standaloneAck.runId;
    report.check('the standalone run waits for a setup approval', standaloneAck.setup && standaloneAck.setup.state === 'input-required',
        () => JSON.stringify(standaloneAck));
    const plain = await browser.newPage();
    const plainErrors = [];
    plain.on('pageerror', error => plainErrors.push(String(error)));
    const uiBase = new URL(opts.mcp).origin;
    await plain.goto(`${uiBase}/ui#run=${standaloneRun}`);
    report.check('the standalone page is standalone', await plain.evaluate(() => window.parent === window), 'embedded');
    await until('the standalone setup request', () => plain.locator('[data-testid=setup-approve]').isVisible());
    await plain.locator('[data-testid=setup-approve]').click();
    await until('the standalone checkpoint', () => plain.locator('[data-testid=checkpoint-yes]').isVisible());
    report.ok('the setup approved from the standalone page');
    await plain.locator('[data-testid=checkpoint-yes]').click();
    await until('the standalone run to complete', async () => (await plain.locator('[data-testid=status]').textContent()).startsWith('completed'));
    const plainLabels = await plain.locator('[data-testid=agent] .label').allTextContents();
    await plain.locator('[data-testid=result-load]').click();
    const plainChunk = await until('the standalone result', async () => {
        const chunk = plain.locator('[data-testid=result-chunk]');
        return (await chunk.isVisible()) && chunk.textContent();
    });
    report.check('the standalone page answers a checkpoint and shows the result',
        plainLabels.includes('after-checkpoint') && plainChunk === '"STANDALONE-DONE"',
        () => `agents ${plainLabels}, result ${plainChunk}`);
    await plain.goto(`${uiBase}/ui#run=${main}`);
    await until('the main run in the standalone page', async () => (await plain.locator('[data-testid=agent]').count()) === 3);
    report.ok('a new fragment rebinds the standalone page');
    const hanging = (await client.workflow({ action: 'run', projectDir: opts.project, script: HANGING_SCRIPT })).runId;
    await plain.goto(`${uiBase}/ui#run=${hanging}`);
    await until('the hanging agent', async () => (await plain.locator('[data-testid=agent][data-status=running]').count()) === 1);
    await plain.locator('[data-testid=stop-run]').click();
    await until('the stopped run', async () => (await plain.locator('[data-testid=status]').textContent()).startsWith('aborted'));
    report.ok('the whole run stopped from the standalone page');
    await hostile(t, plain, uiBase);
    report.check('the standalone page logged no errors', plainErrors.length === 0, () => plainErrors.join('\n'));
}

/** A run made of markup: shown as text, nothing of it runs, nothing of it becomes an element. */
async function hostile(t, plain, uiBase) {
    const { client } = t;
    const runId = (await client.workflow({ action: 'run', projectDir: opts.project, script: HOSTILE_SCRIPT })).runId;
    await plain.goto(`${uiBase}/ui#run=${runId}`);
    await until('the hostile checkpoint', () => plain.locator('[data-testid=checkpoint-yes]').isVisible());
    const agent = plain.locator('[data-testid=agent]').first();
    await agent.click();
    await until('the hostile agent inspected', () => plain.locator('[data-testid=inspect-prompt]').isVisible());
    const tool = plain.locator('[data-testid=tool-result]').first();
    if (await tool.count()) await tool.locator('summary').click();
    await plain.locator('[data-testid=checkpoint-yes]').click();
    await until('the hostile run to complete', async () => (await plain.locator('[data-testid=status]').textContent()).startsWith('completed'));
    await plain.locator('[data-testid=result-load]').click();
    await until('the hostile result', () => plain.locator('[data-testid=result-chunk]').isVisible());
    const seen = await plain.evaluate(() => ({
        flag: window.__xss === undefined ? null : window.__xss,
        elements: document.querySelectorAll('img, svg, script:not(:first-of-type), [onerror], [onload]').length,
        scripts: document.scripts.length,
        text: document.body.textContent,
    }));
    const shown = XSS.every(payload => seen.text.includes(payload)) && seen.text.includes('hostile ' + XSS[0]);
    report.check('markup from a run is shown as text and never runs',
        seen.flag === null && seen.elements === 0 && seen.scripts === 1 && shown,
        () => JSON.stringify({ flag: seen.flag, elements: seen.elements, scripts: seen.scripts, shown, text: seen.text.slice(0, 2000) }));
}

const report = new Report('monitor');
let browser, server, userDataDir;
try {
    const client = new McpClient(opts.mcp);
    await client.initialize();
    const listed = await client.listTools();
    const tools = listed;
    const host = new Host(client);
    // Without the ui capability a client sees neither the launcher nor the app-only tools.
    const plainClient = new McpClient(opts.mcp);
    await plainClient.initialize({});
    const plainNames = (await plainClient.listTools()).map(tool => tool.name);
    report.check('a client without the ui capability lists none of the monitor tools',
        plainNames.includes('workflow') && !plainNames.includes('workflow_monitor') && APP_ONLY.every(name => !plainNames.includes(name)),
        () => `listed: ${plainNames}`);

    const bridge = await load(opts['ext-apps'], 'dist/src/app-bridge.js');
    const modelTools = tools.filter(tool => !bridge.isToolVisibilityAppOnly(tool)).map(tool => tool.name);
    report.check('the model-facing tool list excludes the app-only tools',
        modelTools.includes('workflow') && modelTools.includes('workflow_monitor')
            && APP_ONLY.every(name => !modelTools.includes(name)),
        () => `model-facing: ${modelTools}; listed: ${tools.map(t => t.name)}`);
    const launcher = tools.find(tool => tool.name === 'workflow_monitor');
    report.check('only workflow_monitor opens the panel',
        bridge.getToolUiResourceUri(launcher) === RESOURCE_URI
            && tools.filter(tool => bridge.getToolUiResourceUri(tool)).length === 1,
        () => JSON.stringify(tools.map(t => [t.name, t._meta])));

    const resource = await client.request('resources/read', { uri: RESOURCE_URI });
    const html = resource.contents[0].text;
    report.check('the panel resource is the MCP App compiled from --panel',
        resource.contents[0].mimeType === 'text/html;profile=mcp-app' && html === readFileSync(opts.panel, 'utf8'),
        () => `${resource.contents[0].mimeType}, ${html.length} characters`);

    const main = (await client.workflow({ action: 'run', projectDir: opts.project, script: MAIN_SCRIPT })).runId;
    const other = (await client.workflow({ action: 'run', projectDir: opts.project, script: OTHER_SCRIPT })).runId;
    await waitStatus(client, other, 'completed');
    report.ok('two runs started', `${main}, ${other}`);

    const { chromium } = await load(opts.playwright, 'index.mjs');
    userDataDir = mkdtempSync(join(tmpdir(), 'monitor-chromium-'));
    browser = await chromium.launchPersistentContext(userDataDir, {
        executablePath: opts.chromium, headless: true, args: CHROMIUM_FLAGS, viewport: { width: 1000, height: 940 }
    });
    const hostScript = await bundleHost(opts.esbuild, opts['ext-apps']);
    server = await serve(hostScript);
    const origin = `http://127.0.0.1:${server.address().port}`;

    const page = browser.pages()[0] || await browser.newPage();
    const consoleErrors = [];
    page.on('console', message => { if (message.type() === 'error') consoleErrors.push(message.text()); });
    page.on('pageerror', error => consoleErrors.push(String(error)));
    await page.exposeFunction('hostCallTool', (params, view) => host.callTool(params, view));
    await page.goto(`${origin}/host.html`);
    await page.evaluate(source => window.mountMonitor(source), html);
    // A second view of the same run beside the first: automatic messages must still come once.
    await page.evaluate(source => window.mountMonitor(source, { id: 'second', width: 560 }), html);
    await until('the views to initialize', () => page.evaluate(() => window.hostLog.initialized.length === 2));
    report.ok('both views completed the ui/initialize handshake through AppBridge');
    const view = page.frameLocator('#monitor');
    const log = () => page.evaluate(() => JSON.parse(JSON.stringify(window.hostLog)));
    const monitorResult = async runId => host.callTool({ name: 'workflow_monitor', arguments: { runId } });

    const t = { page, view, log, host, client, main, other, monitorResult, browser, consoleErrors };
    for (const scenario of [rebinding, selection, answers, layout, rerunning, standalone]) await scenario(t);
} catch (error) {
    if (!(error instanceof StepFailed)) report.fail('unexpected error', error.stack || String(error));
} finally {
    if (browser) await browser.close().catch(() => {});
    if (server) server.close();
    if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
}
console.log(`${report.passed} passed, ${report.failed} failed`);
process.exit(report.failed === 0 && report.passed > 0 ? 0 : 1);
