// The test host's browser side: embeds the run monitor in a sandboxed iframe through the official
// MCP Apps host bridge (`AppBridge` and `PostMessageTransport` of @modelcontextprotocol/ext-apps,
// bundled for the browser by driver.mjs with esbuild). Tool calls the view makes go to
// `window.hostCallTool`, which the driver exposes from Node (the host is the MCP client; the view
// never talks to the server itself). Everything else the view asks of the host is recorded in
// `window.hostLog` for the driver to check.
import { AppBridge, PostMessageTransport } from '@modelcontextprotocol/ext-apps/app-bridge';

const log = { modelContext: [], messages: [], displayModes: [], toolCalls: [], downloads: [], initialized: 0 };
window.hostLog = log;
let bridge = null;
let context = null;

/** Mounts the view (its HTML as the host read it from the resource) and connects the bridge. */
window.mountMonitor = async (html, { width = 960 } = {}) => {
    const frame = document.createElement('iframe');
    frame.id = 'monitor';
    frame.setAttribute('sandbox', 'allow-scripts');
    frame.style.cssText = `width:${width}px;height:900px;border:1px solid #ccc`;
    document.body.append(frame);
    context = {
        theme: 'light', displayMode: 'inline', availableDisplayModes: ['inline', 'fullscreen'],
        containerDimensions: { width, maxHeight: 900 }, platform: 'web'
    };
    bridge = new AppBridge(
        null,
        { name: 'agentprism-test-host', version: '1.0.0' },
        { serverTools: {}, updateModelContext: { text: {} }, message: { text: {} }, downloadFile: {}, openLinks: {} },
        { hostContext: context }
    );
    bridge.oncalltool = async params => {
        log.toolCalls.push({ name: params.name, arguments: params.arguments });
        return window.hostCallTool(params);
    };
    bridge.onupdatemodelcontext = async params => { log.modelContext.push(params); return {}; };
    bridge.onmessage = async params => { log.messages.push(params); return {}; };
    bridge.ondownloadfile = async params => { log.downloads.push(params); return {}; };
    bridge.onrequestdisplaymode = async ({ mode }) => {
        log.displayModes.push(mode);
        frame.style.width = mode === 'fullscreen' ? '100vw' : `${width}px`;
        context = { ...context, displayMode: mode };
        bridge.setHostContext(context);
        return { mode };
    };
    bridge.oninitialized = () => { log.initialized += 1; };
    // Connected before the view loads: its ui/initialize is the first thing its script sends.
    await bridge.connect(new PostMessageTransport(frame.contentWindow, frame.contentWindow));
    const loaded = new Promise(resolve => frame.addEventListener('load', resolve, { once: true }));
    frame.srcdoc = html;
    await loaded;
};

/** One monitor invocation: what a host sends a view when the model calls `workflow_monitor`. */
window.invokeMonitor = async (args, result) => {
    await bridge.sendToolInput({ arguments: args });
    if (result) await bridge.sendToolResult(result);
};

/** Resizes the container, as a host does when its layout changes. */
window.resizeMonitor = width => {
    const frame = document.getElementById('monitor');
    frame.style.width = `${width}px`;
    context = { ...context, containerDimensions: { width, maxHeight: 900 } };
    bridge.setHostContext(context);
};
