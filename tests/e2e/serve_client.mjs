// Drives a folder of workflows served by `agentprism serve <dir>` with an official TypeScript
// MCP SDK client.
//
//     node serve_client.mjs --era legacy|modern --sdk PACKAGE_DIR --http URL --wait-file PATH
//     node serve_client.mjs --era legacy|modern --sdk PACKAGE_DIR --stdio AGENTPRISM_BINARY --folder DIR --wait-file PATH
//
// `--sdk` is the SDK's package folder, as the manifest of scripts/install-test-deps names it
// (an ES module finds no packages through NODE_PATH, so the SDK's files are imported by
// absolute path). With `@modelcontextprotocol/sdk` 1.x (v1) only the `legacy` era exists: the
// 2025-11-25 initialize handshake and its session. With `@modelcontextprotocol/client` 2.x
// (v2), `legacy` is its `versionNegotiation` mode `legacy` and `modern` pins the stateless
// 2026-07-28 era (per-request `_meta`, no session). Over stdio the SDK launches
// `agentprism serve DIR --stdio` itself with this process's environment (the caller sets HOME,
// AGENTPRISM_PERSISTENCE_ROOT and AGENTPRISM_BACKENDS with the mock agent as backend `mock`).
// `--wait-file` names a file that never appears: a `slow` run waiting on it runs until it is
// cancelled.
//
// The folder and the steps are those of serve_client.py: the tool list with the
// `_meta.mhl.run.tool` hint; synchronous `echo`, `review` (the companion file reached the agent)
// and `approval` (a tool error pointing at `mhl_run_start`); an async `slow` run started (with
// `resource_link`s over HTTP) and polled to `completed` through its steps; an async `echo` run
// and its logs; over HTTP the logs and result resources; the raw `run/status` and `run/logs`
// methods through the SDK's custom request, and over HTTP at their own paths
// (`POST /mcp/run/status`; a path naming another method is refused); an `approval` run answered
// through `mhl_run_resume`; a cancelled `slow` run; `mhl_run_list`.
//
// Every step prints PASS or FAIL; the last line is `N passed, M failed` and the exit code is 0
// only when nothing failed. Every wait has a deadline; polls wait on a state, with a short pause
// between them.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';

import { Report, StepFailed } from './report.mjs';

const MODERN_VERSION = '2026-07-28';
const LEGACY_VERSION = '2025-11-25';
// Long enough for a loaded two-core machine; a healthy step takes well under a second.
const STEP_DEADLINE_MS = 30_000;
const WORKFLOWS = ['approval', 'echo', 'review', 'slow'];
const RUN_TOOLS = ['mhl_run_cancel', 'mhl_run_list', 'mhl_run_logs', 'mhl_run_resume', 'mhl_run_start', 'mhl_run_status'];
const SLOW_STEPS = ['Gather', 'Analyze', 'Publish'];
// The companion file's text (tests/fixtures/serve/prompts/review.md).
const REVIEW_PROMPT = 'Review the topic below and answer in one line.';

/** Accepts any result document: v1 validates custom results with `safeParse`, v2 with Standard Schema. */
const ANY_DOCUMENT = {
    '~standard': { version: 1, vendor: 'serve-client', validate: value => ({ value }) },
    safeParse: value => ({ success: true, data: value })
};

/** The SDK's classes, imported from the package folder the manifest names. */
async function loadSdk(dir) {
    const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
    const load = file => import(pathToFileURL(join(dir, file)).href);
    if (manifest.name === '@modelcontextprotocol/sdk') {
        const [client, http, stdio] = await Promise.all([
            load('dist/esm/client/index.js'),
            load('dist/esm/client/streamableHttp.js'),
            load('dist/esm/client/stdio.js')
        ]);
        return {
            kind: 'v1',
            version: manifest.version,
            Client: client.Client,
            StreamableHTTPClientTransport: http.StreamableHTTPClientTransport,
            StdioClientTransport: stdio.StdioClientTransport
        };
    }
    const [client, stdio] = await Promise.all([load('dist/index.mjs'), load('dist/stdio.mjs')]);
    return {
        kind: 'v2',
        version: manifest.version,
        Client: client.Client,
        StreamableHTTPClientTransport: client.StreamableHTTPClientTransport,
        StdioClientTransport: stdio.StdioClientTransport
    };
}

const texts = result => (result.content ?? []).filter(block => block.type === 'text').map(block => block.text).join(' ');

function structured(result) {
    if (result.isError) {
        throw new StepFailed(`tool error: ${texts(result)}`);
    }
    if (typeof result.structuredContent !== 'object' || result.structuredContent === null) {
        throw new StepFailed(`no structuredContent in ${JSON.stringify(result)}`);
    }
    return result.structuredContent;
}

function resourceText(result) {
    const found = result.contents.filter(content => typeof content.text === 'string').map(content => content.text);
    if (found.length !== 1) {
        throw new StepFailed(`expected one text content, got ${JSON.stringify(result.contents)}`);
    }
    return found[0];
}

// The 2026-07-28 era tags every result with `resultType`, which v2 strips from what it hands over.
const withoutResultType = document => {
    const { resultType: _, ...rest } = document ?? {};
    return rest;
};
const short = document => JSON.stringify(document)?.slice(0, 2000);
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const pause = ms => new Promise(resolve => setTimeout(resolve, ms));

/** Resolves when `promise` does, or rejects with `StepFailed` past `ms`. */
function withDeadline(promise, ms, description) {
    let timer;
    const deadline = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new StepFailed(`timed out after ${ms / 1000} s: ${description}`)), ms);
    });
    return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

/** The client's view of the run API: the tools, the raw methods, the per-method path. */
class Runs {
    constructor({ client, sdk, options, transport }) {
        this.client = client;
        this.sdk = sdk;
        this.options = options;
        this.transport = transport;
        this.nextId = 1_000_000;
    }

    tool(name, args) {
        const options = { timeout: STEP_DEADLINE_MS };
        return this.sdk.kind === 'v1'
            ? this.client.callTool({ name, arguments: args }, undefined, options)
            : this.client.callTool({ name, arguments: args }, options);
    }

    async status(runId) {
        return structured(await this.tool('mhl_run_status', { runId }));
    }

    /** Polls `mhl_run_status` until the run is in state `wanted`; any other settled state fails. */
    async until(runId, wanted, seen) {
        const giveUp = performance.now() + STEP_DEADLINE_MS;
        for (;;) {
            const view = await this.status(runId);
            seen?.push(view);
            if (view.state === wanted) {
                return view;
            }
            if (view.state !== 'working') {
                throw new StepFailed(`run ${runId} is ${view.state}, waited for ${wanted}: ${short(view)}`);
            }
            if (performance.now() > giveUp) {
                throw new StepFailed(`timed out after ${STEP_DEADLINE_MS / 1000} s waiting for ${wanted}: ${short(view)}`);
            }
            await pause(50);
        }
    }

    /** A raw `run/*` request through the SDK (which stamps the era's `_meta` and headers). */
    method(method, params) {
        return this.client.request({ method, params }, ANY_DOCUMENT, { timeout: STEP_DEADLINE_MS });
    }

    /**
     * `POST /mcp/<path>` (by default the method's own path) by hand, as a policy gateway would
     * see it; the HTTP status and the JSON-RPC answer (undefined for a refusal).
     */
    async postToPath(method, params, path = method) {
        this.nextId += 1;
        const id = this.nextId;
        const headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' };
        const body = { jsonrpc: '2.0', id, method, params: { ...params } };
        if (this.options.era === 'modern') {
            body.params._meta = {
                'io.modelcontextprotocol/protocolVersion': MODERN_VERSION,
                'io.modelcontextprotocol/clientCapabilities': {},
                'io.modelcontextprotocol/clientInfo': { name: 'serve-client-raw', version: '1.0.0' }
            };
            headers['MCP-Protocol-Version'] = MODERN_VERSION;
            headers['Mcp-Method'] = method;
        } else {
            const sessionId = this.transport.sessionId;
            if (typeof sessionId !== 'string') {
                throw new StepFailed('the SDK transport has no Mcp-Session-Id');
            }
            headers['MCP-Protocol-Version'] = LEGACY_VERSION;
            headers['Mcp-Session-Id'] = sessionId;
        }
        const response = await fetch(`${this.options.http}/${path}`, {
            method: 'POST',
            headers,
            body: JSON.stringify(body),
            signal: AbortSignal.timeout(STEP_DEADLINE_MS)
        });
        const text = await response.text();
        if (response.status !== 200) {
            return { status: response.status, answer: undefined };
        }
        return { status: response.status, answer: answerOf(response.headers.get('content-type') ?? '', text, id) };
    }
}

/** The JSON-RPC answer to `id` in a plain JSON or an SSE response body. */
function answerOf(contentType, text, id) {
    if (contentType.startsWith('text/event-stream')) {
        for (const line of text.split(/\r?\n/)) {
            if (!line.startsWith('data:')) {
                continue;
            }
            try {
                const message = JSON.parse(line.slice(5));
                if (message?.id === id) {
                    return message;
                }
            } catch {
                // A data line of another event.
            }
        }
        throw new StepFailed(`no answer to ${id} in the SSE stream ${text.slice(0, 2000)}`);
    }
    try {
        return JSON.parse(text);
    } catch (error) {
        throw new StepFailed(`not JSON (${error}): ${contentType} ${text.slice(0, 2000)}`);
    }
}

async function checkTools(client, sdk, report) {
    const fresh = sdk.kind === 'v2' ? { cacheMode: 'bypass' } : undefined;
    const { tools } = await client.listTools(undefined, fresh);
    const names = tools.map(tool => tool.name).sort();
    report.check('tools/list names', same(names, [...WORKFLOWS, ...RUN_TOOLS].sort()), `tools ${short(names)}`);
    const hints = Object.fromEntries(tools.map(tool => [tool.name, tool._meta?.mhl?.run?.tool]));
    report.check(
        'tools/list _meta.mhl.run.tool',
        WORKFLOWS.every(name => hints[name] === 'mhl_run_start'),
        () => `hints ${short(hints)}`
    );
}

async function checkSyncCalls(runs, report) {
    const echo = await runs.tool('echo', { text: 'hello' });
    report.check(
        'sync echo',
        !echo.isError && same(echo.structuredContent, { result: { echoed: 'hello' } }),
        () => `echo answered ${short(echo)}`
    );
    const review = structured(await runs.tool('review', { topic: 'caching' }));
    const answer = review.result?.answer ?? '';
    report.check(
        'sync review reads the companion file',
        review.result?.topic === 'caching' && answer.includes(REVIEW_PROMPT) && answer.includes('caching'),
        () => `review answered ${short(review)}`
    );
    const approval = await runs.tool('approval', { request: 'deploy' });
    report.check(
        'sync approval is a tool error naming mhl_run_start',
        approval.isError === true && texts(approval).includes('mhl_run_start'),
        () => `approval answered ${short(approval)}`
    );
}

async function checkSlowRun(runs, report, http) {
    const started = await runs.tool('mhl_run_start', { name: 'slow', arguments: { step: runs.options.step } });
    const view = structured(started);
    const runId = view.runId;
    report.check(
        'mhl_run_start slow',
        typeof runId === 'string' && view.name === 'slow' && view.state === 'working',
        () => `start answered ${short(view)}`
    );
    const links = started.content.filter(block => block.type === 'resource_link').map(block => block.uri).sort();
    const wanted = http ? [`mhl://run/${runId}/logs`, `mhl://run/${runId}/result`].sort() : [];
    report.check('mhl_run_start resource_links', same(links, wanted), () => `links ${short(links)}, wanted ${short(wanted)}`);

    const seen = [view];
    const done = await runs.until(runId, 'completed', seen);
    report.check('slow completed', same(done.result, { steps: 3 }), () => `completed view ${short(done)}`);
    const placed = seen.filter(
        v =>
            v.state === 'working' &&
            SLOW_STEPS.includes(v.step) &&
            v.stepIndex === SLOW_STEPS.indexOf(v.step) + 1 &&
            v.stepTotal === 3 &&
            same(v.reached, SLOW_STEPS.slice(0, v.stepIndex))
    );
    report.check(
        'status showed step, stepIndex, stepTotal, reached while working',
        placed.length > 0,
        () => `views ${short(seen)}`
    );
    report.check(
        'completed view is at the last step',
        done.step === 'Publish' && done.stepIndex === 3 && same(done.reached, SLOW_STEPS),
        () => `completed view ${short(done)}`
    );
    const logs = structured(await runs.tool('mhl_run_logs', { runId }));
    report.check('mhl_run_logs slow', same(logs, { runId, lines: [], totalLines: 0 }), () => `logs ${short(logs)}`);
    return runId;
}

async function checkEchoRun(runs, report) {
    const { runId } = structured(await runs.tool('mhl_run_start', { name: 'echo', arguments: { text: 'hello' } }));
    const done = await runs.until(runId, 'completed');
    report.check('async echo completed', same(done.result, { echoed: 'hello' }), () => `view ${short(done)}`);
    const logs = structured(await runs.tool('mhl_run_logs', { runId }));
    report.check(
        'mhl_run_logs echo',
        same(logs, { runId, lines: ['echoing 5 characters'], totalLines: 1 }),
        () => `logs ${short(logs)}`
    );
    return runId;
}

async function checkResources(client, sdk, report, slowId, echoId) {
    const fresh = sdk.kind === 'v2' ? { cacheMode: 'bypass' } : undefined;
    const logs = resourceText(await client.readResource({ uri: `mhl://run/${echoId}/logs` }, fresh));
    report.check('read mhl://run/<id>/logs', logs === 'echoing 5 characters', () => `logs resource ${short(logs)}`);
    const result = JSON.parse(resourceText(await client.readResource({ uri: `mhl://run/${slowId}/result` }, fresh)));
    report.check('read mhl://run/<id>/result', same(result, { steps: 3 }), () => `result resource ${short(result)}`);
}

async function checkRawMethods(runs, report, slowId, echoId, http) {
    const raw = await runs.method('run/status', { runId: slowId });
    report.check(
        'raw run/status answers the bare status object',
        raw.runId === slowId && raw.state === 'completed' && same(raw.result, { steps: 3 }),
        () => `run/status answered ${short(raw)}`
    );
    const logs = withoutResultType(await runs.method('run/logs', { runId: echoId }));
    const echoLogs = { runId: echoId, lines: ['echoing 5 characters'], totalLines: 1 };
    report.check('raw run/logs', same(logs, echoLogs), () => `run/logs answered ${short(logs)}`);
    let refusal;
    try {
        refusal = { answered: await runs.method('run/status', { runId: 'no-such-run' }) };
    } catch (error) {
        refusal = { code: error.code, message: error.message };
    }
    report.check(
        'raw run/status of an unknown runId is refused',
        refusal.code === -32602 && String(refusal.message).includes('unknown runId'),
        () => `refusal ${short(refusal)}`
    );
    if (!http) {
        return;
    }
    const posted = await runs.postToPath('run/status', { runId: slowId });
    report.check(
        'POST /mcp/run/status',
        posted.status === 200 && same(withoutResultType(posted.answer?.result), withoutResultType(raw)),
        () => `HTTP ${posted.status}: ${short(posted.answer)}, wanted the result ${short(raw)}`
    );
    const postedLogs = await runs.postToPath('run/logs', { runId: echoId });
    report.check(
        'POST /mcp/run/logs',
        postedLogs.status === 200 && same(withoutResultType(postedLogs.answer?.result), echoLogs),
        () => `HTTP ${postedLogs.status}: ${short(postedLogs.answer)}`
    );
    const mismatched = await runs.postToPath('run/status', { runId: slowId }, 'run/cancel');
    report.check('POST /mcp/run/cancel naming run/status is refused', mismatched.status === 400, `HTTP ${mismatched.status}`);
}

async function checkCheckpoint(runs, report) {
    const { runId } = structured(await runs.tool('mhl_run_start', { name: 'approval', arguments: { request: 'deploy' } }));
    const waiting = await runs.until(runId, 'input_required');
    const index = waiting.checkpoint?.callIndex;
    report.check(
        'approval waits at its checkpoint',
        Number.isInteger(index) && waiting.resumable === true && waiting.step === 'Gate',
        () => `view ${short(waiting)}`
    );
    const resumed = structured(
        await runs.tool('mhl_run_resume', { runId, arguments: { checkpointReplies: { [String(index)]: true } } })
    );
    report.check('mhl_run_resume', resumed.runId === runId && resumed.generation === 2, () => short(resumed));
    const done = await runs.until(runId, 'completed');
    report.check(
        'approval completed approved',
        done.result?.approved === true && done.result?.summary === 'ready to act on: deploy',
        () => `view ${short(done)}`
    );
    return runId;
}

async function checkCancel(runs, report) {
    const step = `@mock wait_file ${runs.options['wait-file']}`;
    let view = structured(await runs.tool('mhl_run_start', { name: 'slow', arguments: { step } }));
    const runId = view.runId;
    const giveUp = performance.now() + STEP_DEADLINE_MS;
    // Cancel only once the first agent call is under way, so the cancel stops a live call.
    while (!(view.step === 'Gather' && (view.calls?.running ?? 0) >= 1)) {
        if (view.state !== 'working' || performance.now() > giveUp) {
            throw new StepFailed(`the waiting run never had a call under way: ${short(view)}`);
        }
        await pause(50);
        view = await runs.status(runId);
    }
    report.ok('waiting slow run has a call under way');
    const canceled = structured(await runs.tool('mhl_run_cancel', { runId }));
    report.check(
        'mhl_run_cancel',
        canceled.runId === runId && canceled.state === 'canceled' && canceled.resumable === true,
        () => `cancel answered ${short(canceled)}`
    );
    const after = await runs.status(runId);
    report.check('status after cancel', after.state === 'canceled', () => `view ${short(after)}`);
    return runId;
}

async function drive({ client, sdk, options, transport, seen, report }) {
    const expected = options.era === 'legacy' ? LEGACY_VERSION : MODERN_VERSION;
    const negotiated = sdk.kind === 'v1' ? seen.negotiated : client.getNegotiatedProtocolVersion();
    report.check('negotiated-version', negotiated === expected, `negotiated ${negotiated}, wanted ${expected}`);
    const http = Boolean(options.http);
    const runs = new Runs({ client, sdk, options, transport });
    await checkTools(client, sdk, report);
    await checkSyncCalls(runs, report);
    const slowId = await checkSlowRun(runs, report, http);
    const echoId = await checkEchoRun(runs, report);
    if (http) {
        await checkResources(client, sdk, report, slowId, echoId);
    }
    await checkRawMethods(runs, report, slowId, echoId, http);
    const approvalId = await checkCheckpoint(runs, report);
    const canceledId = await checkCancel(runs, report);

    const listed = structured(await runs.tool('mhl_run_list', {}));
    const pairs = (listed.runs ?? []).map(run => [run.runId, run.state]);
    const wanted = [
        [slowId, 'completed'],
        [echoId, 'completed'],
        [approvalId, 'completed'],
        [canceledId, 'canceled']
    ];
    report.check(
        "mhl_run_list shows this client's runs, oldest first",
        same(pairs, wanted),
        () => `listed ${short(pairs)}, wanted ${short(wanted)}`
    );
    const unknown = await runs.tool('mhl_run_status', { runId: 'no-such-run' });
    report.check(
        'mhl_run_status of an unknown runId',
        unknown.isError === true && texts(unknown) === 'unknown runId',
        () => `answered ${short(unknown)}`
    );
}

/** v1 has no getter for the negotiated version: it hands it to the transport, seen here. */
function observe(transport) {
    const seen = { negotiated: undefined };
    const setProtocolVersion = transport.setProtocolVersion?.bind(transport);
    transport.setProtocolVersion = version => {
        seen.negotiated = version;
        setProtocolVersion?.(version);
    };
    return seen;
}

async function main() {
    const { values: options } = parseArgs({
        options: {
            era: { type: 'string' },
            sdk: { type: 'string' },
            http: { type: 'string' },
            stdio: { type: 'string' },
            folder: { type: 'string' },
            'wait-file': { type: 'string' },
            step: { type: 'string', default: '@mock delay 300' }
        }
    });
    const usage =
        'usage: serve_client.mjs --era legacy|modern --sdk PACKAGE_DIR (--http URL | --stdio BINARY --folder DIR) --wait-file PATH [--step LINE]';
    if (
        !['legacy', 'modern'].includes(options.era) ||
        !options.sdk ||
        !options['wait-file'] ||
        Boolean(options.http) === Boolean(options.stdio) ||
        (options.stdio && !options.folder)
    ) {
        console.error(usage);
        return 2;
    }
    const sdk = await loadSdk(options.sdk);
    if (sdk.kind === 'v1' && options.era === 'modern') {
        console.error('@modelcontextprotocol/sdk 1.x speaks only the legacy era; pass the 2.x client for --era modern');
        return 2;
    }
    const report = new Report(`ts/${sdk.kind}@${sdk.version}/${options.era}/${options.http ? 'http' : 'stdio'}`);
    const transport = options.http
        ? new sdk.StreamableHTTPClientTransport(new URL(options.http))
        : new sdk.StdioClientTransport({
              command: options.stdio,
              args: ['serve', options.folder, '--stdio'],
              // The SDK passes only a small safe subset of the environment unless told otherwise;
              // the server needs its isolated HOME, state root and backends.
              env: { ...process.env },
              cwd: options.folder,
              stderr: 'inherit'
          });
    const seen = observe(transport);
    const clientInfo = { name: 'agentprism-serve-e2e', version: '1.0.0' };
    const client =
        sdk.kind === 'v1'
            ? new sdk.Client(clientInfo)
            : new sdk.Client(clientInfo, {
                  versionNegotiation: { mode: options.era === 'legacy' ? 'legacy' : { pin: MODERN_VERSION } },
                  cacheMode: 'bypass'
              });
    try {
        await withDeadline(
            (async () => {
                await client.connect(transport);
                report.ok('connect');
                try {
                    await drive({ client, sdk, options, transport, seen, report });
                } finally {
                    await client.close();
                    report.ok('close');
                }
            })(),
            8 * STEP_DEADLINE_MS,
            'the whole client'
        );
    } catch (error) {
        if (!(error instanceof StepFailed) || report.failed === 0) {
            report.fail(error instanceof StepFailed ? 'step' : 'unexpected', error?.stack ?? String(error));
        }
        await client.close().catch(() => {});
    }
    console.log(`${report.passed} passed, ${report.failed} failed`);
    return report.failed === 0 ? 0 : 1;
}

process.exit(await main());
