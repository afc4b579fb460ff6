// Drives one whole workflow through agentprism with an official TypeScript MCP SDK client.
//
//     node ts_client.mjs --mode v1|v2-legacy|v2-auto|v2-pinned --sdk PACKAGE_DIR --http URL
//     node ts_client.mjs --mode v1|v2-legacy|v2-auto|v2-pinned --sdk PACKAGE_DIR --stdio AGENTPRISM_BINARY
//
// `v1` is `@modelcontextprotocol/sdk` 1.x, which knows only the 2025-11-25 initialize handshake
// and its session. The others are `@modelcontextprotocol/client` 2.x in its three
// `versionNegotiation` modes: `legacy` (its default, the plain 2025-11-25 handshake), `auto`
// (probes `server/discover` and must settle on 2026-07-28 here) and `{ pin: '2026-07-28' }`
// (stateless, per-request `_meta`, no session). `--sdk` is the SDK's package folder, which the
// manifest of scripts/install-test-deps names: an ES module finds no packages through
// NODE_PATH, so this script imports the SDK's files by absolute path. Over stdio the SDK launches
// `agentprism serve --stdio` itself, with this process's environment (the caller sets HOME,
// AGENTPRISM_PERSISTENCE_ROOT and AGENTPRISM_BACKENDS).
//
// The steps are those of python_client.py: list tools, run a two-call workflow on the `mock`
// backend whose second call asks for a permission, subscribe to the run's events resource while
// that permission holds the run (legacy `resources/subscribe`, modern `subscriptions/listen`),
// answer it, wait for `notifications/resources/updated`, watch `status` until completed, and
// read the result through the tool and the result resource.
//
// Two clients (`--clients`) drive at once, twice: first with the same script (the same
// arguments, and JSON-RPC ids that start at the same number in each client: a server that took
// one client's `run` for a retry of the other's would hand both one run), then with a script per
// client. Over stdio each client launches its own server over the same run store.
//
// Every step prints PASS or FAIL. Each client that got through prints one line
// `RUN {"round","client","runId","runRequestId","result"}` for the test to check on its own;
// the last line is `N passed, M failed`, and the exit code is 0 only when nothing failed. Every
// wait has a deadline.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';

import { Report, StepFailed } from './report.mjs';

const MODERN_VERSION = '2026-07-28';
const LEGACY_VERSION = '2025-11-25';
// Long enough for a loaded two-core machine; a healthy step takes milliseconds.
const STEP_DEADLINE_MS = 30_000;
// The `_meta` prefix agentprism reads (docs/api.md, "Exact retries"): a client that put its own
// key there by accident would turn unrelated runs into retries of each other.
const AGENTPRISM_META_PREFIX = 'agentprism/';

const MODES = {
    v1: { sdk: 'v1', expectedVersion: LEGACY_VERSION },
    'v2-legacy': { sdk: 'v2', negotiation: 'legacy', expectedVersion: LEGACY_VERSION },
    'v2-auto': { sdk: 'v2', negotiation: 'auto', expectedVersion: MODERN_VERSION },
    'v2-pinned': { sdk: 'v2', negotiation: { pin: MODERN_VERSION }, expectedVersion: MODERN_VERSION }
};

// `tag` makes the script unique per client, or the same for every client.
const script = tag => `export const meta = { name: 'sdk-e2e', description: 'two calls driven by an SDK client', model: 'mock' };
const first = await agent('first call\\n@mock reply FIRST-${tag}');
const second = await agent('second call\\n@mock permission');
return { first, second };
`;

/** The SDK's classes, imported from the package folder the manifest names. */
async function loadSdk(kind, dir) {
    const version = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).version;
    const load = file => import(pathToFileURL(join(dir, file)).href);
    if (kind === 'v1') {
        const [client, http, stdio, types] = await Promise.all([
            load('dist/esm/client/index.js'),
            load('dist/esm/client/streamableHttp.js'),
            load('dist/esm/client/stdio.js'),
            load('dist/esm/types.js')
        ]);
        return {
            version,
            Client: client.Client,
            StreamableHTTPClientTransport: http.StreamableHTTPClientTransport,
            StdioClientTransport: stdio.StdioClientTransport,
            // v1 registers notification handlers by zod schema.
            updatedNotification: types.ResourceUpdatedNotificationSchema
        };
    }
    const [client, stdio] = await Promise.all([load('dist/index.mjs'), load('dist/stdio.mjs')]);
    return {
        version,
        Client: client.Client,
        StreamableHTTPClientTransport: client.StreamableHTTPClientTransport,
        StdioClientTransport: stdio.StdioClientTransport,
        // v2 registers them by method name.
        updatedNotification: 'notifications/resources/updated'
    };
}

function structured(result) {
    if (result.isError) {
        const text = (result.content ?? []).filter(block => block.type === 'text').map(block => block.text);
        throw new StepFailed(`tool error: ${text.join(' ')}`);
    }
    if (typeof result.structuredContent !== 'object' || result.structuredContent === null) {
        throw new StepFailed(`no structuredContent in ${JSON.stringify(result)}`);
    }
    return result.structuredContent;
}

function resourceText(result) {
    const texts = result.contents.filter(content => typeof content.text === 'string').map(content => content.text);
    if (texts.length !== 1) {
        throw new StepFailed(`expected one text content, got ${JSON.stringify(result.contents)}`);
    }
    return texts[0];
}

const pause = ms => new Promise(resolve => setTimeout(resolve, ms));

/** Calls `probe` until it returns something truthy, or fails after the step deadline. */
async function waitFor(description, probe) {
    const giveUp = performance.now() + STEP_DEADLINE_MS;
    for (;;) {
        const value = await probe();
        if (value) {
            return value;
        }
        if (performance.now() > giveUp) {
            throw new StepFailed(`timed out after ${STEP_DEADLINE_MS / 1000} s waiting for ${description}`);
        }
        await pause(50);
    }
}

/** Resolves when `promise` does, or rejects with `StepFailed` past `ms`. */
function withDeadline(promise, ms, description) {
    let timer;
    const deadline = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new StepFailed(`timed out after ${ms / 1000} s: ${description}`)), ms);
    });
    return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

/** `notifications/resources/updated` URIs, whichever era delivered them. */
class Updates {
    constructor() {
        this.uris = [];
        this.waiters = [];
    }

    saw(uri) {
        this.uris.push(uri);
        for (const wake of this.waiters.splice(0)) {
            wake();
        }
    }

    async waitFor(uri) {
        const giveUp = performance.now() + STEP_DEADLINE_MS;
        while (!this.uris.includes(uri)) {
            const left = giveUp - performance.now();
            if (left <= 0) {
                return false;
            }
            await new Promise(resolve => {
                const timer = setTimeout(resolve, left);
                this.waiters.push(() => {
                    clearTimeout(timer);
                    resolve();
                });
            });
        }
        return true;
    }
}

/**
 * Wraps the transport so this script sees what the SDK itself sends and which version it
 * negotiated (v1 has no getter for it; it hands the version to the transport).
 */
function observe(transport) {
    const seen = { sent: [], negotiated: undefined };
    const send = transport.send.bind(transport);
    transport.send = (message, options) => {
        seen.sent.push(message);
        return send(message, options);
    };
    const setProtocolVersion = transport.setProtocolVersion?.bind(transport);
    transport.setProtocolVersion = version => {
        seen.negotiated = version;
        setProtocolVersion?.(version);
    };
    return seen;
}

async function drive({ client, sdk, mode, seen, updates, report, project, tag }) {
    const negotiated = mode.sdk === 'v1' ? seen.negotiated : client.getNegotiatedProtocolVersion();
    report.check(
        'negotiated-version',
        negotiated === mode.expectedVersion,
        `negotiated ${negotiated}, wanted ${mode.expectedVersion}`
    );
    const modern = negotiated === MODERN_VERSION;
    // v2 caches list and read results by the server's ttlMs; a cached answer would hide what
    // the server says now.
    const fresh = mode.sdk === 'v2' ? { cacheMode: 'bypass' } : undefined;
    const callTool = async args =>
        structured(
            mode.sdk === 'v1'
                ? await client.callTool({ name: 'workflow', arguments: args }, undefined, { timeout: STEP_DEADLINE_MS })
                : await client.callTool({ name: 'workflow', arguments: args }, { timeout: STEP_DEADLINE_MS })
        );

    const tools = await client.listTools(undefined, fresh);
    const names = tools.tools.map(tool => tool.name);
    report.check('tools/list', names.includes('workflow'), `no workflow tool in ${JSON.stringify(names)}`);

    const runArguments = { action: 'run', projectDir: project, script: script(tag) };
    const ack = await callTool(runArguments);
    const runId = ack.runId;
    const eventsUri = ack.eventsUri;
    report.check(
        'run',
        ack.accepted === true && typeof runId === 'string' && eventsUri === `workflow://runs/${runId}/events`,
        () => `unexpected acknowledgement ${JSON.stringify(ack)}`
    );
    const runRequest = seen.sent.find(
        message => message.method === 'tools/call' && message.params?.arguments?.action === 'run'
    );
    const metaKeys = Object.keys(runRequest?.params?._meta ?? {});
    const step = 'run request carries no agentprism/ _meta key';
    if (runRequest === undefined || metaKeys.some(key => key.startsWith(AGENTPRISM_META_PREFIX))) {
        report.fail(step, `run request ${JSON.stringify(runRequest)}`);
        throw new StepFailed(step);
    }
    report.ok(step, `id ${JSON.stringify(runRequest.id)}, _meta keys ${JSON.stringify(metaKeys)}`);

    let subscription;
    try {
        if (modern) {
            subscription = await client.listen({ resourceSubscriptions: [eventsUri] }, { timeout: STEP_DEADLINE_MS });
            const honored = subscription.honoredFilter.resourceSubscriptions ?? [];
            report.check('subscriptions/listen', honored.includes(eventsUri), `honored filter ${JSON.stringify(honored)}`);
        } else {
            await client.subscribeResource({ uri: eventsUri });
            report.ok('resources/subscribe');
        }

        const pending = await waitFor('the permission request in status', async () => {
            const status = await callTool({ action: 'status', runId });
            if (status.status !== 'running' && status.status !== 'pending') {
                throw new StepFailed(`run ended before asking for permission: ${JSON.stringify(status).slice(0, 2000)}`);
            }
            return (status.pendingPermissions ?? [])[0];
        });
        report.ok('status shows the permission request', pending.permissionId);
        const answer = await callTool({
            action: 'permissions-response',
            runId,
            permissionId: pending.permissionId,
            response: { outcome: { outcome: 'selected', optionId: pending.options[0].optionId } }
        });
        report.check('permissions-response', answer.accepted === true, JSON.stringify(answer));

        report.check(
            'notifications/resources/updated',
            await updates.waitFor(eventsUri),
            `no update for ${eventsUri} within ${STEP_DEADLINE_MS / 1000} s (got ${JSON.stringify(updates.uris)})`
        );

        const status = await waitFor('status completed', async () => {
            const status = await callTool({ action: 'status', runId });
            if (['failed', 'aborted', 'paused'].includes(status.status)) {
                throw new StepFailed(`run ended ${status.status}: ${JSON.stringify(status).slice(0, 2000)}`);
            }
            return status.status === 'completed' ? status : undefined;
        });
        report.ok('status completed');

        if (!modern) {
            await client.unsubscribeResource({ uri: eventsUri });
            report.ok('resources/unsubscribe');
        }

        const events = JSON.parse(resourceText(await client.readResource({ uri: eventsUri }, fresh)));
        const eventTypes = (events.events ?? []).map(entry => entry.event?.type);
        report.check(
            'read events resource',
            events.runId === runId && events.status === 'completed' && eventTypes.length > 0,
            () => `events document ${JSON.stringify(events).slice(0, 2000)}`
        );

        const expected = { first: `FIRST-${tag}`, second: 'PERMISSION: allow' };
        const page = await callTool({ action: 'result', runId });
        const result = typeof page.chunk === 'string' ? JSON.parse(page.chunk) : undefined;
        report.check(
            'result via the tool',
            page.hasMore === false && JSON.stringify(result) === JSON.stringify(expected),
            () => `result page ${JSON.stringify(page)}`
        );
        const resultUri = page.resultUri ?? status.resultUri;
        report.check('result uri', resultUri === `workflow://runs/${runId}/result`, `resultUri ${resultUri}`);
        const resource = JSON.parse(resourceText(await client.readResource({ uri: resultUri }, fresh)));
        report.check(
            'read result resource',
            JSON.stringify(resource) === JSON.stringify(expected),
            () => `result resource ${JSON.stringify(resource)}`
        );
        return { runId, runRequestId: runRequest.id, result: resource };
    } finally {
        await subscription?.close();
    }
}

/** Connects one client, drives the workflow, closes; returns what it saw (undefined on failure). */
async function oneClient({ options, sdk, mode, tag, report }) {
    const updates = new Updates();
    const transport = options.http
        ? new sdk.StreamableHTTPClientTransport(new URL(options.http))
        : new sdk.StdioClientTransport({
              command: options.stdio,
              args: ['serve', '--stdio'],
              // The SDK passes only a small safe subset of the environment unless told otherwise;
              // the server needs its isolated HOME, state root and backends.
              env: { ...process.env },
              cwd: options.project,
              stderr: 'inherit'
          });
    const seen = observe(transport);
    const clientInfo = { name: 'agentprism-ts-e2e', version: '1.0.0' };
    const client =
        mode.sdk === 'v1'
            ? new sdk.Client(clientInfo)
            : new sdk.Client(clientInfo, { versionNegotiation: { mode: mode.negotiation }, cacheMode: 'bypass' });
    client.setNotificationHandler(sdk.updatedNotification, notification => updates.saw(notification.params.uri));
    try {
        const outcome = await withDeadline(
            (async () => {
                await client.connect(transport);
                report.ok('connect');
                try {
                    return await drive({ client, sdk, mode, seen, updates, report, project: options.project, tag });
                } finally {
                    await client.close();
                    report.ok('close');
                }
            })(),
            4 * STEP_DEADLINE_MS,
            'the whole client'
        );
        return outcome;
    } catch (error) {
        if (!(error instanceof StepFailed) || report.failed === 0) {
            report.fail(error instanceof StepFailed ? 'step' : 'unexpected', error?.stack ?? String(error));
        }
        await client.close().catch(() => {});
        return undefined;
    }
}

async function main() {
    const { values: options } = parseArgs({
        options: {
            mode: { type: 'string' },
            sdk: { type: 'string' },
            http: { type: 'string' },
            stdio: { type: 'string' },
            project: { type: 'string', default: process.cwd() },
            clients: { type: 'string', default: '2' }
        }
    });
    const mode = MODES[options.mode];
    if (!mode || !options.sdk || Boolean(options.http) === Boolean(options.stdio)) {
        console.error(
            'usage: ts_client.mjs --mode v1|v2-legacy|v2-auto|v2-pinned --sdk PACKAGE_DIR (--http URL | --stdio BINARY) [--project DIR] [--clients N]'
        );
        return 2;
    }
    const sdk = await loadSdk(mode.sdk, options.sdk);
    const clients = Number(options.clients);
    const transport = options.http ? 'http' : 'stdio';
    const prefix = `ts/${options.mode}@${sdk.version}/${transport}`;
    const reports = [];
    // Round one: every client runs the same script (same arguments, and each client's
    // JSON-RPC ids start at the same number), so a server that took one client's request for
    // a retry of another's would hand both the same run. Round two: a script per client.
    for (const round of ['identical', 'unique']) {
        const outcomes = await Promise.all(
            Array.from({ length: clients }, (_, index) => {
                const report = new Report(`${prefix}/${round}-${index}`);
                reports.push(report);
                const tag = round === 'identical' ? 'same' : `client${index}`;
                return oneClient({ options, sdk, mode, tag, report }).then(outcome => {
                    if (outcome) {
                        console.log(`RUN ${JSON.stringify({ round, client: index, ...outcome })}`);
                    }
                    return outcome;
                });
            })
        );
        const roundReport = new Report(`${prefix}/${round}`);
        reports.push(roundReport);
        const started = outcomes.filter(Boolean).map(outcome => outcome.runId);
        if (started.length === clients) {
            if (new Set(started).size === started.length) {
                roundReport.ok('every client got its own run', started.join(', '));
            } else {
                roundReport.fail('every client got its own run', `run ids ${started.join(', ')}`);
            }
        }
    }
    const passed = reports.reduce((sum, report) => sum + report.passed, 0);
    const failed = reports.reduce((sum, report) => sum + report.failed, 0);
    console.log(`${passed} passed, ${failed} failed`);
    return failed === 0 ? 0 : 1;
}

process.exit(await main());
