// Stand-ins for the server side's app-only tools (`workflow-events`, `workflow-notifications`,
// `workflow-runs`) and `workflow_monitor`, built from the `workflow` tool's status and the
// events resource, for as long as the daemon under test does not list them itself (the two
// halves of issue 16 land separately). driver.mjs prints which it used (`MODE real|fake`); the
// shapes are docs/monitor.md's.

export const FAKE_TOOLS = [
    { name: 'workflow_monitor', description: 'Open the run monitor', inputSchema: { type: 'object' },
      _meta: { ui: { resourceUri: 'ui://agentprism-workflow/run-monitor.html' } } },
    ...['workflow-events', 'workflow-runs', 'workflow-notifications'].map(name => ({
        name, description: 'app-only', inputSchema: { type: 'object' }, _meta: { ui: { visibility: ['app'] } }
    }))
];

const TERMINAL = ['completed', 'failed', 'aborted'];

export class FakeTools {
    constructor(client) {
        this.client = client;
        this.streams = new Map();
        this.claimed = new Set();
    }

    handles(name) {
        return FAKE_TOOLS.some(tool => tool.name === name);
    }

    async call(name, args) {
        const structured = await this[name.replace(/[-_](.)/g, (_, c) => c.toUpperCase())](args);
        return { content: [{ type: 'text', text: JSON.stringify(structured) }], structuredContent: structured };
    }

    async workflowMonitor({ runId }) {
        const status = await this.client.workflow({ action: 'status', runId });
        return { runId, status: status.status, workflowName: status.workflowName };
    }

    async workflowRuns() {
        return { runs: [] };
    }

    async workflowEvents({ runId, after = 0, limit = 200 }) {
        const status = await this.client.workflow({ action: 'status', runId });
        let stream = this.streams.get(runId);
        if (!stream) {
            const canonical = await this.read(`workflow://runs/${runId}/events`);
            stream = canonical.streamId;
            this.streams.set(runId, stream);
        }
        const events = await this.read(`workflow://runs/${runId}/events?after=${after}&limit=${limit}&streamId=${stream}`);
        return { status, events };
    }

    async read(uri) {
        const answer = await this.client.request('resources/read', { uri });
        return JSON.parse(answer.contents[0].text);
    }

    async workflowNotifications({ runId, claim }) {
        if (claim !== undefined) {
            const claimed = !this.claimed.has(claim);
            this.claimed.add(claim);
            return { runId, eventId: claim, claimed };
        }
        const status = await this.client.workflow({ action: 'status', runId });
        const notes = [];
        const add = (eventId, kind, content) =>
            notes.push({ eventId, kind, status: status.status, content, claimed: this.claimed.has(eventId) });
        const checkpoint = status.outcome && status.outcome.checkpointContext;
        if (status.status === 'paused' && checkpoint) {
            add(`${runId}/${status.generation}/checkpoint`, 'checkpoint',
                `Workflow run ${runId} waits at checkpoint ${checkpoint.callIndex}: ${checkpoint.prompt}`);
        }
        for (const permission of status.pendingPermissions || []) {
            add(`${runId}/permission/${permission.permissionId}`, 'permission',
                `Workflow run ${runId}: ${permission.label} asks for a permission.`);
        }
        if (TERMINAL.includes(status.status)) {
            add(`${runId}/${status.generation}/terminal`, 'terminal', `Workflow run ${runId} ${status.status}.`);
        }
        return { runId, notifications: notes };
    }
}
