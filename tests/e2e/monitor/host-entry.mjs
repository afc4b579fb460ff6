// The test host's browser side: embeds run monitor views in sandboxed iframes through the
// official MCP Apps host bridge (`AppBridge` and `PostMessageTransport` of
// @modelcontextprotocol/ext-apps, bundled for the browser by driver.mjs with esbuild), one bridge
// per view, as a host that keeps several panels does. Tool calls a view makes go to
// `window.hostCallTool`, which the driver exposes from Node (the host is the MCP client; a view
// never talks to the server itself). Everything else a view asks of the host is recorded in
// `window.hostLog`, tagged with the view's id, for the driver to check.
import { AppBridge, PostMessageTransport } from '@modelcontextprotocol/ext-apps/app-bridge';

const log = { modelContext: [], messages: [], displayModes: [], toolCalls: [], downloads: [], initialized: [] };
window.hostLog = log;
const views = new Map();

/** Mounts a view (its HTML as the host read it from the resource) and connects its bridge. */
window.mountMonitor = async (html, { id = 'monitor', width = 960 } = {}) => {
    const frame = document.createElement('iframe');
    frame.id = id;
    frame.setAttribute('sandbox', 'allow-scripts');
    frame.style.cssText = `width:${width}px;height:900px;border:1px solid #ccc;display:block`;
    document.body.append(frame);
    const view = { frame, width, context: {
        theme: 'light', displayMode: 'inline', availableDisplayModes: ['inline', 'fullscreen'],
        containerDimensions: { width, maxHeight: 900 }, platform: 'web'
    } };
    const bridge = new AppBridge(
        null,
        { name: 'agentprism-test-host', version: '1.0.0' },
        { serverTools: {}, updateModelContext: { text: {} }, message: { text: {} }, downloadFile: {}, openLinks: {} },
        { hostContext: view.context }
    );
    view.bridge = bridge;
    views.set(id, view);
    bridge.oncalltool = async params => {
        log.toolCalls.push({ view: id, name: params.name, arguments: params.arguments });
        return window.hostCallTool(params, id);
    };
    bridge.onupdatemodelcontext = async params => { log.modelContext.push({ view: id, ...params }); return {}; };
    bridge.onmessage = async params => { log.messages.push({ view: id, ...params }); return {}; };
    bridge.ondownloadfile = async params => { log.downloads.push({ view: id, ...params }); return {}; };
    bridge.onrequestdisplaymode = async ({ mode }) => {
        log.displayModes.push(mode);
        frame.style.width = mode === 'fullscreen' ? '100vw' : `${view.width}px`;
        view.context = { ...view.context, displayMode: mode };
        bridge.setHostContext(view.context);
        return { mode };
    };
    bridge.oninitialized = () => { log.initialized.push(id); };
    // Connected before the view loads: its ui/initialize is the first thing its script sends.
    await bridge.connect(new PostMessageTransport(frame.contentWindow, frame.contentWindow));
    const loaded = new Promise(resolve => frame.addEventListener('load', resolve, { once: true }));
    frame.srcdoc = html;
    await loaded;
};

/** One monitor invocation: what a host sends a view when the model calls `workflow_monitor`. */
window.invokeMonitor = async (args, result, id = 'monitor') => {
    const { bridge } = views.get(id);
    await bridge.sendToolInput({ arguments: args });
    if (result) await bridge.sendToolResult(result);
};

/** Resizes a view's container, as a host does when its layout changes. */
window.resizeMonitor = (width, id = 'monitor') => {
    const view = views.get(id);
    view.width = width;
    view.frame.style.width = `${width}px`;
    view.context = { ...view.context, containerDimensions: { width, maxHeight: 900 } };
    view.bridge.setHostContext(view.context);
};
