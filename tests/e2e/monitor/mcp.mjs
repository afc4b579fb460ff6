// A minimal MCP Streamable HTTP client for the monitor tests: the 2025-11-25 session era
// (initialize, notifications/initialized, then requests with the session header), declaring the
// MCP Apps ui extension as a ui-capable host does. JSON or SSE answers are both read.

export const UI_CAPABILITIES = {
    extensions: { 'io.modelcontextprotocol/ui': { mimeTypes: ['text/html;profile=mcp-app'] } }
};

export class McpClient {
    constructor(url) {
        this.url = url;
        this.session = null;
        this.nextId = 1;
    }

    async post(message) {
        const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
        if (this.session) {
            headers['mcp-session-id'] = this.session;
            headers['mcp-protocol-version'] = '2025-11-25';
        }
        const reply = await fetch(this.url, { method: 'POST', headers, body: JSON.stringify(message) });
        const session = reply.headers.get('mcp-session-id');
        if (session) this.session = session;
        const body = await reply.text();
        if (!('id' in message)) return null;
        if (!reply.ok) throw new Error(`${message.method}: HTTP ${reply.status}: ${body}`);
        const type = reply.headers.get('content-type') || '';
        const messages = type.startsWith('text/event-stream')
            ? body.split('\n').filter(l => l.startsWith('data:')).map(l => JSON.parse(l.slice(5)))
            : [JSON.parse(body)];
        const answer = messages.find(m => m.id === message.id);
        if (!answer) throw new Error(`${message.method}: no answer in ${body}`);
        if (answer.error) throw new Error(`${message.method}: ${JSON.stringify(answer.error)}`);
        return answer.result;
    }

    request(method, params) {
        return this.post({ jsonrpc: '2.0', id: this.nextId++, method, params });
    }

    async initialize(capabilities = UI_CAPABILITIES) {
        const result = await this.request('initialize', {
            protocolVersion: '2025-11-25', capabilities, clientInfo: { name: 'monitor-test-host', version: '1' }
        });
        await this.post({ jsonrpc: '2.0', method: 'notifications/initialized' });
        return result;
    }

    async listTools() {
        const tools = [];
        let cursor;
        do {
            const page = await this.request('tools/list', cursor ? { cursor } : {});
            tools.push(...page.tools);
            cursor = page.nextCursor;
        } while (cursor);
        return tools;
    }

    callTool(name, args) {
        return this.request('tools/call', { name, arguments: args });
    }

    /** Calls the `workflow` tool and returns its structured content, failing on a tool error. */
    async workflow(args) {
        const result = await this.callTool('workflow', args);
        if (result.isError) throw new Error(`workflow ${args.action}: ${JSON.stringify(result.content)}`);
        return result.structuredContent;
    }
}
