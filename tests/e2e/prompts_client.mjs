// Saved workflows as MCP prompts (docs/api.md, "Prompts"), through the TypeScript SDK v1
// client over the daemon's HTTP endpoint:
//
//     node prompts_client.mjs --http URL --project DIR --sdk V1_PACKAGE_DIR
//
// The client declares `roots` and answers `roots/list` with DIR, so the project's saved
// workflows are offered beside the user's and the bundled ones. The steps: the list holds
// author-workflow first, the project's `greet` with arguments from its input schema, and the
// bundled library; a bad integer argument is -32602 naming it; `greet`'s text carries a fenced
// JSON call which, sent as is to the `workflow` tool, is admitted and completes with the
// mock's answer; a bundled workflow's prompt names a script file that runs too. A run of 101
// agent calls asks for confirmation through an elicitation form: declined, it is refused
// naming maxAgents; accepted, it runs. A stateless
// 2026-07-28 `prompts/list` (raw JSON-RPC) offers no project workflows, since that era has no
// roots. Every step prints PASS or FAIL; the last line is `N passed, M failed`.

import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';

import { Report, StepFailed } from './report.mjs';

const DEADLINE_MS = 60_000;

const { values: options } = parseArgs({
    options: { http: { type: 'string' }, project: { type: 'string' }, sdk: { type: 'string' } }
});

async function connect(url, sdkDir, project) {
    const load = file => import(pathToFileURL(join(sdkDir, file)).href);
    const [{ Client }, { StreamableHTTPClientTransport }, types] = await Promise.all([
        load('dist/esm/client/index.js'),
        load('dist/esm/client/streamableHttp.js'),
        load('dist/esm/types.js')
    ]);
    const client = new Client({ name: 'prompts-e2e', version: '1.0.0' }, { capabilities: { roots: { listChanged: false }, elicitation: {} } });
    client.rootsAsked = 0;
    client.setRequestHandler(types.ListRootsRequestSchema, async () => {
        client.rootsAsked += 1;
        return { roots: [{ uri: pathToFileURL(project).href, name: 'project' }] };
    });
    // A run above the confirmation threshold asks through a form; the test sets the answer.
    client.elicitations = [];
    client.startAnswer = true;
    client.setRequestHandler(types.ElicitRequestSchema, async request => {
        client.elicitations.push(request.params);
        return client.startAnswer ? { action: 'accept', content: { start: true } } : { action: 'decline' };
    });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    return client;
}

/** The fenced JSON block of a prompt's text. */
function fencedCall(prompt) {
    const text = prompt.messages[0].content.text;
    const match = /```json\n([\s\S]*?)\n```/.exec(text);
    if (!match) throw new Error(`no fenced JSON in ${text}`);
    return JSON.parse(match[1]);
}

async function runToEnd(client, call) {
    const ack = await client.callTool({ name: 'workflow', arguments: call });
    if (ack.isError) throw new Error(`run refused: ${JSON.stringify(ack)}`);
    const runId = ack.structuredContent.runId;
    const started = Date.now();
    for (;;) {
        const status = await client.callTool({ name: 'workflow', arguments: { action: 'status', runId } });
        if (status.structuredContent?.status === 'completed') break;
        if (['failed', 'cancelled'].includes(status.structuredContent?.status) || Date.now() - started > DEADLINE_MS) {
            throw new Error(`run ${runId}: ${JSON.stringify(status.structuredContent)}`);
        }
        await new Promise(resolve => setTimeout(resolve, 100));
    }
    const result = await client.callTool({ name: 'workflow', arguments: { action: 'result', runId } });
    return result.structuredContent;
}

async function steps(report) {
    const client = await connect(options.http, options.sdk, options.project);
    const { prompts } = await client.listPrompts();
    const names = prompts.map(prompt => prompt.name);
    report.check('author-workflow comes first', names[0] === 'author-workflow', () => names.join(','));
    report.check('roots were asked for', client.rootsAsked >= 1, `${client.rootsAsked}`);
    const greet = prompts.find(prompt => prompt.name === 'greet');
    report.check('the project workflow is offered with its whenToUse', greet?.description?.includes('When to use: when greeting'), () => JSON.stringify(greet));
    const args = Object.fromEntries((greet?.arguments ?? []).map(arg => [arg.name, arg]));
    report.check('arguments come from the input schema',
        args.who?.required === true && args.times?.required === false && args.times?.description.includes('(JSON integer)') && args.tags?.description.includes('(JSON array)'),
        () => JSON.stringify(greet?.arguments));
    report.check('the bundled library is offered', ['audit', 'fix-tests', 'migrate', 'research', 'review-panel'].every(name => names.includes(name)), () => names.join(','));

    let refused;
    try {
        await client.getPrompt({ name: 'greet', arguments: { who: 'you', times: 'many' } });
    } catch (error) {
        refused = error;
    }
    report.check('a bad integer argument is refused naming it', refused?.code === -32602 && String(refused?.message).includes('times'), () => String(refused));

    const prompt = await client.getPrompt({ name: 'greet', arguments: { who: 'you', times: '2', tags: '["a"]' } });
    const call = fencedCall(prompt);
    report.check('the text names the project and the saved file', call.projectDir === options.project && call.scriptPath.endsWith('/.agentprism/workflows/greet.js') && call.args.times === 2, () => JSON.stringify(call));
    const result = await runToEnd(client, call);
    report.check('the call in the text runs the workflow', JSON.stringify(result).includes('ECHO: hello you x2'), () => JSON.stringify(result));

    const research = fencedCall(await client.getPrompt({ name: 'research', arguments: { model: 'mock', question: 'What is here?' } }));
    report.check('a bundled prompt names a script file', research.scriptPath.startsWith('/') && research.scriptPath.endsWith('/research.js'), () => JSON.stringify(research));
    const answered = await runToEnd(client, research);
    report.check('the bundled workflow runs from its prompt', JSON.stringify(answered).includes('What is here?'), () => JSON.stringify(answered).slice(0, 300));

    // 101 agent calls: above the default threshold of 100, so the run asks first.
    const many = `export const meta = { name: 'many', description: 'many calls', model: 'mock' };
return (await parallel(Array.from({ length: 101 }, (_, i) => () => agent('call ' + i)))).length;`;
    client.startAnswer = false;
    const declined = await client.callTool({ name: 'workflow', arguments: { action: 'run', projectDir: options.project, script: many } });
    report.check('a declined confirmation refuses the run', declined.isError === true && client.elicitations.length === 1 && declined.content[0].text.includes('maxAgents: 101'), () => JSON.stringify(declined).slice(0, 400));
    report.check('the form names the size', client.elicitations[0]?.message?.includes('101 agent calls') && client.elicitations[0]?.requestedSchema?.properties?.start?.type === 'boolean', () => JSON.stringify(client.elicitations[0]));
    client.startAnswer = true;
    const confirmed = await runToEnd(client, { action: 'run', projectDir: options.project, script: many });
    report.check('an accepted confirmation starts it', confirmed.chunk === '101' && client.elicitations.length === 2, () => JSON.stringify(confirmed).slice(0, 300));
    await client.close();

    const response = await fetch(options.http, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'prompts/list' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'prompts/list', params: { _meta: {
            'io.modelcontextprotocol/protocolVersion': '2026-07-28',
            'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' },
            'io.modelcontextprotocol/clientCapabilities': {}
        } } })
    });
    const body = await response.text();
    const modern = JSON.parse(body.startsWith('{') ? body : body.split('\n').find(line => line.startsWith('data: {')).slice(6));
    const modernNames = (modern.result?.prompts ?? []).map(prompt => prompt.name);
    report.check('the 2026-07-28 era lists without a project', modernNames.includes('research') && !modernNames.includes('greet'), () => body.slice(0, 400));
}

const report = new Report('prompts');
try {
    await steps(report);
} catch (error) {
    if (!(error instanceof StepFailed)) {
        report.fail('unexpected', error?.stack ?? String(error));
    }
}
console.log(`${report.passed} passed, ${report.failed} failed`);
process.exit(report.failed === 0 ? 0 : 1);
