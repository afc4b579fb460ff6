// Runs agentprism's `workflow` tool as MCP tasks (docs/tasks.md), in one era per invocation.
//
//     node tasks_client.mjs --era 2026 --http URL --project DIR
//     node tasks_client.mjs --era 2025 --http URL --project DIR --sdk V1_PACKAGE_DIR
//     node tasks_client.mjs --era 2026|2025 --http URL --get TASK_ID [--sdk V1_PACKAGE_DIR]
//     node tasks_client.mjs --era 2026|2025 --http URL --serve [--sdk V1_PACKAGE_DIR]
//
// `--serve` talks to `agentprism serve <dir>` over tests/fixtures/serve instead: the
// `approval` workflow's tool runs as a task, and its checkpoint is answered through it.
//
// 2026-07-28 speaks the io.modelcontextprotocol/tasks extension (SEP-2663) as raw JSON-RPC over
// fetch: no published client implements it yet (there is no @modelcontextprotocol/ext-tasks on
// the registry), and raw requests show exactly what goes over the wire. 2025-11-25 uses the
// TypeScript SDK v1's experimental task client (`client.experimental.tasks`), declaring the
// `tasks` client capability.
//
// The steps: the tool is listed with execution.taskSupport; a run becomes a task whose id is
// the runId; the task reaches input_required at the script's checkpoint, which is answered
// through the task (2026: tasks/update, where a second, different answer to the same key is
// ignored, so the result shows the first; 2025: the elicitation request the server sends
// during tasks/result); the task completes with the run's exact result; a second run
// is cancelled through the task and reads cancelled; an unknown task id is -32602; and in 2025
// a ttl at the limit is accepted and one past it refused. Each completed task's id is printed
// as `TASK <id> <status>` for the Rust test, which restarts the server and reads it again with
// `--get`. Every step prints PASS or FAIL; the last line is `N passed, M failed`.

import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';

import { Report, StepFailed } from './report.mjs';

const TASKS = 'io.modelcontextprotocol/tasks';
const MODERN = '2026-07-28';
const DEADLINE_MS = 60_000;
const MAX_TTL_MS = 7 * 24 * 60 * 60 * 1000;

const { values: options } = parseArgs({
    options: {
        era: { type: 'string' },
        http: { type: 'string' },
        project: { type: 'string' },
        sdk: { type: 'string' },
        get: { type: 'string' },
        serve: { type: 'boolean' }
    }
});

const checkpointScript = `export const meta = { name: 'tasks-e2e', description: 'a call, a checkpoint, a result', model: 'mock' };
const first = await agent('first call\\n@mock reply FIRST');
const ok = await checkpoint('ship it?');
return { first, ok };
`;

const plainScript = `export const meta = { name: 'tasks-plain', description: 'one call', model: 'mock' };
return { only: await agent('only call\\n@mock reply ONLY') };
`;

async function until(description, probe) {
    const started = Date.now();
    for (;;) {
        const value = await probe();
        if (value) {
            return value;
        }
        if (Date.now() - started > DEADLINE_MS) {
            throw new StepFailed(`timed out waiting for ${description}`);
        }
        await new Promise(resolve => setTimeout(resolve, 100));
    }
}

/** A stateless 2026-07-28 client: every request carries its own version and capabilities. */
function modernClient(url) {
    let id = 0;
    return async function request(method, params = {}, withTasks = true) {
        id += 1;
        const capabilities = withTasks ? { extensions: { [TASKS]: {} } } : {};
        const body = {
            jsonrpc: '2.0',
            id,
            method,
            params: {
                ...params,
                _meta: {
                    'io.modelcontextprotocol/protocolVersion': MODERN,
                    'io.modelcontextprotocol/clientCapabilities': capabilities,
                    'io.modelcontextprotocol/clientInfo': { name: 'tasks-e2e', version: '1.0.0' }
                }
            }
        };
        const headers = {
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
            'mcp-protocol-version': MODERN,
            'mcp-method': method
        };
        const name = method === 'tools/call' ? params.name : method.startsWith('tasks/') ? params.taskId : undefined;
        if (typeof name === 'string') {
            headers['mcp-name'] = name;
        }
        const response = await fetch(url, { method: 'POST', headers, body: JSON.stringify(body) });
        const text = await response.text();
        const line = text.split('\n').filter(l => l.startsWith('data:')).map(l => l.slice(5)).pop();
        const message = JSON.parse(line ?? text);
        if (message.error) {
            const error = new Error(message.error.message);
            error.code = message.error.code;
            throw error;
        }
        return message.result;
    };
}

async function modernSteps(report, url, project) {
    const request = modernClient(url);
    const tools = await request('tools/list');
    const workflow = tools.tools.find(tool => tool.name === 'workflow');
    report.check('tools/list taskSupport', workflow?.execution?.taskSupport === 'optional', () => JSON.stringify(workflow?.execution));
    const plain = await request('tools/list', {}, false);
    report.check('no execution field without the extension', !('execution' in plain.tools.find(t => t.name === 'workflow')), 'listed');
    const discover = await request('server/discover');
    report.check('discover declares the extension', discover.capabilities?.extensions?.[TASKS] !== undefined, JSON.stringify(discover.capabilities));

    const created = await request('tools/call', { name: 'workflow', arguments: { action: 'run', projectDir: project, script: checkpointScript } });
    report.check('run is a task', created.resultType === 'task' && typeof created.taskId === 'string', () => JSON.stringify(created));
    const taskId = created.taskId;
    report.check('task id is the runId', /^[a-z0-9]+-[a-z0-9]+$/.test(taskId) && created.ttlMs === null, () => JSON.stringify(created));
    const waiting = await until('input_required', async () => {
        const task = await request('tasks/get', { taskId });
        return task.status === 'input_required' && task.inputRequests ? task : undefined;
    });
    const keys = Object.keys(waiting.inputRequests);
    report.check('checkpoint as an elicitation form', keys.length === 1 && keys[0].startsWith('checkpoint-') && waiting.inputRequests[keys[0]].method === 'elicitation/create', () => JSON.stringify(waiting));
    const ack = await request('tasks/update', { taskId, inputResponses: { [keys[0]]: { action: 'accept', content: { answer: true } } } });
    report.check('tasks/update ack', ack.resultType === 'complete' && !('taskId' in ack), () => JSON.stringify(ack));
    const second = await request('tasks/update', { taskId, inputResponses: { [keys[0]]: { action: 'accept', content: { answer: false } } } });
    report.check('second answer ignored', second.resultType === 'complete', () => JSON.stringify(second));
    const done = await until('completed', async () => {
        const task = await request('tasks/get', { taskId });
        return ['completed', 'failed', 'cancelled'].includes(task.status) ? task : undefined;
    });
    const result = done.result?.structuredContent?.result;
    report.check('completed with the run result', done.status === 'completed' && result?.ok === true && typeof result?.first === 'string', () => JSON.stringify(done));
    console.log(`TASK ${taskId} completed`);

    const other = await request('tools/call', { name: 'workflow', arguments: { action: 'run', projectDir: project, script: checkpointScript } });
    await until('second run waits', async () => (await request('tasks/get', { taskId: other.taskId })).status === 'input_required');
    const cancelAck = await request('tasks/cancel', { taskId: other.taskId });
    report.check('tasks/cancel ack', cancelAck.resultType === 'complete', () => JSON.stringify(cancelAck));
    const cancelled = await request('tasks/get', { taskId: other.taskId });
    report.check('cancelled', cancelled.status === 'cancelled', () => JSON.stringify(cancelled));
    console.log(`TASK ${other.taskId} cancelled`);

    try {
        await request('tasks/get', { taskId: 'nosuch-run' });
        report.fail('unknown task id', 'answered');
    } catch (error) {
        report.check('unknown task id', error.code === -32602, `code ${error.code}`);
    }
    try {
        await request('tasks/get', { taskId }, false);
        report.fail('tasks/get without the extension', 'answered');
    } catch (error) {
        report.check('tasks/get without the extension', error.code === -32021, `code ${error.code}`);
    }
    const status = await request('tools/call', { name: 'workflow', arguments: { action: 'status', runId: taskId } });
    report.check('other actions answer at once', status.resultType === 'complete' && status.structuredContent?.runId === taskId, () => JSON.stringify(status).slice(0, 300));
}

async function legacyClient(url, sdkDir) {
    const load = file => import(pathToFileURL(join(sdkDir, file)).href);
    const [{ Client }, { StreamableHTTPClientTransport }, types] = await Promise.all([
        load('dist/esm/client/index.js'),
        load('dist/esm/client/streamableHttp.js'),
        load('dist/esm/types.js')
    ]);
    const client = new Client({ name: 'tasks-e2e', version: '1.0.0' }, { capabilities: { tasks: {}, elicitation: {} } });
    // The checkpoint's form arrives during tasks/result; every one is approved.
    client.elicitations = [];
    client.setRequestHandler(types.ElicitRequestSchema, async request => {
        client.elicitations.push(request.params);
        return { action: 'accept', content: { answer: true } };
    });
    // notifications/tasks/status this session receives, in order.
    client.statuses = [];
    client.setNotificationHandler(types.TaskStatusNotificationSchema, notification => {
        client.statuses.push(notification.params);
    });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    return client;
}

/** Drains a callToolStream, returning the created task and the final message. */
async function stream(client, args, task) {
    let created;
    let last;
    for await (const message of client.experimental.tasks.callToolStream({ name: 'workflow', arguments: args }, undefined, { task, timeout: DEADLINE_MS })) {
        if (message.type === 'taskCreated') {
            created = message.task;
        }
        last = message;
    }
    return { created, last };
}

/** The statuses `client` was told of for `taskId`, in order. */
function statusesOf(client, taskId) {
    return client.statuses.filter(task => task.taskId === taskId).map(task => task.status);
}

async function legacySteps(report, url, project, sdkDir) {
    const client = await legacyClient(url, sdkDir);
    // Another session of its own, running a task of its own: neither hears of the other's.
    const other = await legacyClient(url, sdkDir);
    report.check('capabilities.tasks', client.getServerCapabilities()?.tasks?.requests?.tools?.call !== undefined, () => JSON.stringify(client.getServerCapabilities()));
    const tools = await client.listTools();
    const workflow = tools.tools.find(tool => tool.name === 'workflow');
    report.check('tools/list taskSupport', workflow?.execution?.taskSupport === 'optional', () => JSON.stringify(workflow));

    const { created, last } = await stream(client, { action: 'run', projectDir: project, script: plainScript }, { ttl: MAX_TTL_MS });
    report.check('run is a task at the ttl limit', /^[a-z0-9]+-[a-z0-9]+$/.test(created?.taskId ?? '') && created.ttl === null, () => JSON.stringify(created));
    report.check('result through tasks/result', last.type === 'result' && last.result.structuredContent?.result?.only === 'ONLY', () => JSON.stringify(last));
    const read = await client.experimental.tasks.getTask(created.taskId);
    report.check('tasks/get completed', read.status === 'completed', () => JSON.stringify(read));
    console.log(`TASK ${created.taskId} completed`);

    const answered = await stream(client, { action: 'run', projectDir: project, script: checkpointScript }, {});
    const asked = client.elicitations[0];
    report.check('checkpoint asked during tasks/result', asked?._meta?.['io.modelcontextprotocol/related-task']?.taskId === answered.created?.taskId && asked.mode === 'form', () => JSON.stringify(client.elicitations));
    report.check('checkpoint answered through the task', answered.last.type === 'result' && answered.last.result.structuredContent?.result?.ok === true, () => JSON.stringify(answered.last));
    const answeredId = answered.created?.taskId;
    await until('the completed notification', async () => statusesOf(client, answeredId).at(-1) === 'completed').catch(() => {});
    const told = statusesOf(client, answeredId);
    report.check(
        'status notifications: input_required, then completed, once per change',
        told.includes('input_required') && told.indexOf('input_required') < told.indexOf('completed') && told.at(-1) === 'completed' && told.every((status, i) => i === 0 || status !== told[i - 1]) && told.filter(status => status === 'completed').length === 1,
        () => JSON.stringify(client.statuses)
    );
    const notified = client.statuses.find(task => task.taskId === answeredId);
    report.check('a status notification is the Task', notified && typeof notified.createdAt === 'string' && typeof notified.lastUpdatedAt === 'string' && 'ttl' in notified && typeof notified.pollInterval === 'number', () => JSON.stringify(notified));
    const theirs = await stream(other, { action: 'run', projectDir: project, script: checkpointScript }, {});
    report.check('the other session ran its own task', theirs.last.type === 'result' && theirs.last.result.structuredContent?.result?.ok === true, () => JSON.stringify(theirs.last));
    await until('the other session\'s completed notification', async () => statusesOf(other, theirs.created?.taskId).at(-1) === 'completed').catch(() => {});
    report.check('the other session is told of its own task', statusesOf(other, theirs.created?.taskId).includes('input_required') && statusesOf(other, theirs.created?.taskId).at(-1) === 'completed', () => JSON.stringify(other.statuses));
    report.check('no session is told of another\'s task', client.statuses.every(task => task.taskId !== theirs.created?.taskId) && other.statuses.every(task => task.taskId === theirs.created?.taskId), () => JSON.stringify({ mine: client.statuses, theirs: other.statuses }));
    await other.close();

    const refused = await (async () => {
        for await (const message of client.experimental.tasks.callToolStream({ name: 'workflow', arguments: { action: 'run', projectDir: project, script: plainScript } }, undefined, { task: { ttl: MAX_TTL_MS + 1 } })) {
            if (message.type === 'error') {
                return message.error;
            }
        }
        return undefined;
    })();
    report.check('ttl past the limit refused', refused?.code === -32602 && /ttl/.test(refused.message), () => String(refused));

    const waitingRun = await client.request(
        { method: 'tools/call', params: { name: 'workflow', arguments: { action: 'run', projectDir: project, script: checkpointScript }, task: {} } },
        (await import(pathToFileURL(join(sdkDir, 'dist/esm/types.js')).href)).CreateTaskResultSchema
    );
    const taskId = waitingRun.task.taskId;
    await until('input_required', async () => (await client.experimental.tasks.getTask(taskId)).status === 'input_required');
    const cancelled = await client.experimental.tasks.cancelTask(taskId);
    report.check('tasks/cancel', cancelled.status === 'cancelled', () => JSON.stringify(cancelled));
    await until('the cancelled notification', async () => statusesOf(client, taskId).at(-1) === 'cancelled').catch(() => {});
    report.check('status notifications: input_required, then cancelled', statusesOf(client, taskId).join(' ').endsWith('input_required cancelled'), () => JSON.stringify(client.statuses));
    console.log(`TASK ${taskId} cancelled`);
    const listed = await client.experimental.tasks.listTasks();
    report.check('tasks/list', listed.tasks.some(task => task.taskId === taskId), () => JSON.stringify(listed));
    try {
        await client.experimental.tasks.getTask('nosuch-run');
        report.fail('unknown task id', 'answered');
    } catch (error) {
        report.check('unknown task id', error.code === -32602, `code ${error.code}`);
    }
    await client.close();
}

async function getOnly(report, era, url, taskId, sdkDir) {
    if (era === '2026') {
        const task = await modernClient(url)('tasks/get', { taskId });
        console.log(`TASK ${taskId} ${task.status}`);
        report.ok('tasks/get', task.status);
    } else {
        const client = await legacyClient(url, sdkDir);
        const task = await client.experimental.tasks.getTask(taskId);
        console.log(`TASK ${taskId} ${task.status}`);
        report.ok('tasks/get', task.status);
        await client.close();
    }
}

async function serveSteps(report, era, url, sdkDir) {
    const args = { request: 'ship' };
    if (era === '2026') {
        const request = modernClient(url);
        const tools = await request('tools/list');
        const tool = tools.tools.find(t => t.name.includes('approval'));
        report.check('serve: the workflow tool supports tasks', tool?.execution?.taskSupport === 'optional', () => JSON.stringify(tools.tools.map(t => [t.name, t.execution])));
        const created = await request('tools/call', { name: tool.name, arguments: args });
        report.check('serve: the call is a task', created.resultType === 'task', () => JSON.stringify(created));
        const waiting = await until('input_required', async () => {
            const task = await request('tasks/get', { taskId: created.taskId });
            return task.status === 'input_required' && task.inputRequests ? task : undefined;
        });
        const [key] = Object.keys(waiting.inputRequests);
        await request('tasks/update', { taskId: created.taskId, inputResponses: { [key]: { action: 'accept', content: { answer: true } } } });
        const done = await until('completed', async () => {
            const task = await request('tasks/get', { taskId: created.taskId });
            return ['completed', 'failed', 'cancelled'].includes(task.status) ? task : undefined;
        });
        report.check('serve: approved through the task', done.status === 'completed' && done.result?.structuredContent?.result?.approved === true, () => JSON.stringify(done));
        return;
    }
    const client = await legacyClient(url, sdkDir);
    const tools = await client.listTools();
    const tool = tools.tools.find(t => t.name.includes('approval'));
    report.check('serve: the workflow tool supports tasks', tool?.execution?.taskSupport === 'optional', () => JSON.stringify(tool));
    let last;
    for await (const message of client.experimental.tasks.callToolStream({ name: tool.name, arguments: args }, undefined, { task: {}, timeout: DEADLINE_MS })) {
        last = message;
    }
    report.check('serve: approved through tasks/result', last?.type === 'result' && last.result.structuredContent?.result?.approved === true && client.elicitations.length === 1, () => JSON.stringify(last));
    await client.close();
}

const report = new Report(`tasks-${options.era}`);
try {
    if (options.serve) {
        await serveSteps(report, options.era, options.http, options.sdk);
    } else if (options.get) {
        await getOnly(report, options.era, options.http, options.get, options.sdk);
    } else if (options.era === '2026') {
        await modernSteps(report, options.http, options.project);
    } else {
        await legacySteps(report, options.http, options.project, options.sdk);
    }
} catch (error) {
    if (!(error instanceof StepFailed)) {
        report.fail('unexpected', error?.stack ?? String(error));
    }
}
console.log(`${report.passed} passed, ${report.failed} failed`);
process.exit(report.failed === 0 ? 0 : 1);
