"""Drives one whole workflow through agentprism with the official Python MCP SDK (`mcp` 2.x).

    python_client.py --era legacy|modern|auto --http URL
    python_client.py --era legacy|modern|auto --stdio AGENTPRISM_BINARY

`legacy` connects with the 2025-11-25 initialize handshake (`mode="legacy"`); `modern` pins the
stateless 2026-07-28 era (`mode="2026-07-28"`, per-request `_meta`, no session); `auto` is the
SDK's default, which probes `server/discover` first and must settle on 2026-07-28 here. Over stdio the
SDK launches `agentprism serve --stdio` itself, with this process's environment (the caller
sets HOME, AGENTPRISM_PERSISTENCE_ROOT and AGENTPRISM_BACKENDS).

The workflow has two agent calls on the `mock` backend; the second asks for a permission, which
holds the run until this client answers it. That gate makes the resource notification
deterministic: the client subscribes to the run's events resource (legacy `resources/subscribe`,
modern `subscriptions/listen`) while the run is held, then answers, and the appends that follow
must reach it as `notifications/resources/updated`.

Two clients (`--clients`) drive at once, twice: first with the same script (so the same
arguments, and JSON-RPC ids that start at the same number in each client: a server that took
one client's `run` for a retry of the other's would hand both one run), then with a script per
client. Over stdio each client launches its own server over the same run store.

Every step prints PASS or FAIL; the last line is `N passed, M failed` and the exit code is 0
only when nothing failed. Every wait has a deadline.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from contextlib import AsyncExitStack
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPDeprecationWarning
from report import Report, StepFailed

# The legacy era's resources/subscribe is deprecated in the SDK, and exercising it is the point.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

MODERN_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"
# Long enough for a loaded two-core machine; a healthy step takes milliseconds.
STEP_DEADLINE = 30.0

# `{tag}` makes the script unique per client, or the same for every client.
SCRIPT = """export const meta = {{ name: 'sdk-e2e', description: 'two calls driven by an SDK client', model: 'mock' }};
const first = await agent('first call\\n@mock reply FIRST-{tag}');
const second = await agent('second call\\n@mock permission');
return {{ first, second }};
"""



def structured(result: types.CallToolResult) -> dict[str, Any]:
    if result.is_error:
        text = " ".join(block.text for block in result.content if isinstance(block, types.TextContent))
        raise StepFailed(f"tool error: {text}")
    if not isinstance(result.structured_content, dict):
        raise StepFailed(f"no structuredContent in {result!r}")
    return result.structured_content


def resource_text(result: types.ReadResourceResult) -> str:
    texts = [c.text for c in result.contents if isinstance(c, types.TextResourceContents)]
    if len(texts) != 1:
        raise StepFailed(f"expected one text content, got {result.contents!r}")
    return texts[0]


async def wait_for(description: str, probe, deadline: float = STEP_DEADLINE):
    """Calls `probe` until it returns something truthy, or fails after `deadline` seconds."""
    give_up = time.monotonic() + deadline
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > give_up:
            raise StepFailed(f"timed out after {deadline:.0f} s waiting for {description}")
        await anyio.sleep(0.05)


class Updates:
    """Collects `notifications/resources/updated` URIs, from either era's delivery path."""

    def __init__(self) -> None:
        self.uris: list[str] = []
        self.arrived = anyio.Event()

    def saw(self, uri: str) -> None:
        self.uris.append(uri)
        self.arrived.set()

    async def legacy_handler(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.saw(str(message.params.uri))


async def drive(client: Client, era: str, updates: Updates, report: Report, project: str, tag: str) -> str:
    expected_version = LEGACY_VERSION if era == "legacy" else MODERN_VERSION
    report.check(
        "negotiated-version",
        client.protocol_version == expected_version,
        f"negotiated {client.protocol_version!r}, wanted {expected_version!r}",
    )

    tools = await client.list_tools()
    names = [tool.name for tool in tools.tools]
    report.check("tools/list", "workflow" in names, f"no workflow tool in {names}")

    script = SCRIPT.format(tag=tag)
    ack = structured(await client.call_tool("workflow", {"action": "run", "projectDir": project, "script": script}))
    run_id = ack.get("runId")
    events_uri = ack.get("eventsUri")
    report.check(
        "run",
        ack.get("accepted") is True and isinstance(run_id, str) and events_uri == f"workflow://runs/{run_id}/events",
        f"unexpected acknowledgement {json.dumps(ack)}",
    )

    async with AsyncExitStack() as stack:
        if era != "legacy":
            subscription = await stack.enter_async_context(client.listen(resource_subscriptions=[events_uri]))
            honored = list(subscription.honored.resource_subscriptions or [])
            report.check("subscriptions/listen", events_uri in honored, f"honored filter {honored}")

            async def pump() -> None:
                async for event in subscription:
                    uri = getattr(event, "uri", None)
                    if uri is not None:
                        updates.saw(str(uri))

            group = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(group.cancel_scope.cancel)
            group.start_soon(pump)
        else:
            await client.session.subscribe_resource(events_uri)
            report.ok("resources/subscribe")

        async def pending_permission():
            status = structured(await client.call_tool("workflow", {"action": "status", "runId": run_id}))
            pending = status.get("pendingPermissions") or []
            if status.get("status") not in ("running", "pending"):
                raise StepFailed(f"run ended before asking for permission: {json.dumps(status)[:2000]}")
            return pending[0] if pending else None

        pending = await wait_for("the permission request in status", pending_permission)
        report.ok("status shows the permission request", pending["permissionId"])
        option = pending["options"][0]["optionId"]
        answer = structured(
            await client.call_tool(
                "workflow",
                {
                    "action": "permissions-response",
                    "runId": run_id,
                    "permissionId": pending["permissionId"],
                    "response": {"outcome": {"outcome": "selected", "optionId": option}},
                },
            )
        )
        report.check("permissions-response", answer.get("accepted") is True, json.dumps(answer))

        with anyio.move_on_after(STEP_DEADLINE):
            await updates.arrived.wait()
        report.check(
            "notifications/resources/updated",
            events_uri in updates.uris,
            f"no update for {events_uri} within {STEP_DEADLINE:.0f} s (got {updates.uris})",
        )

        async def completed():
            status = structured(await client.call_tool("workflow", {"action": "status", "runId": run_id}))
            state = status.get("status")
            if state in ("failed", "aborted", "paused"):
                raise StepFailed(f"run ended {state}: {json.dumps(status)[:2000]}")
            return status if state == "completed" else None

        status = await wait_for("status completed", completed)
        report.ok("status completed")

        if era == "legacy":
            await client.session.unsubscribe_resource(events_uri)
            report.ok("resources/unsubscribe")

    events = json.loads(resource_text(await client.read_resource(events_uri)))
    types_seen = [entry.get("event", {}).get("type") for entry in events.get("events", [])]
    report.check(
        "read events resource",
        events.get("runId") == run_id and events.get("status") == "completed" and len(types_seen) > 0,
        f"events document {json.dumps(events)[:2000]}",
    )

    expected = {"first": f"FIRST-{tag}", "second": "PERMISSION: allow"}
    page = structured(await client.call_tool("workflow", {"action": "result", "runId": run_id}))
    chunk = page.get("chunk")
    report.check(
        "result via the tool",
        page.get("hasMore") is False and chunk is not None and json.loads(chunk) == expected,
        f"result page {json.dumps(page)}",
    )
    result_uri = page.get("resultUri") or status.get("resultUri")
    report.check(
        "result uri",
        result_uri == f"workflow://runs/{run_id}/result",
        f"resultUri {result_uri!r}",
    )
    resource = json.loads(resource_text(await client.read_resource(result_uri)))
    report.check("read result resource", resource == expected, f"result resource {resource!r}")
    return run_id


async def one_client(options: argparse.Namespace, label: str, tag: str, report: Report) -> str | None:
    """Connects one client, drives the workflow, closes; returns the run id (None on failure)."""
    updates = Updates()
    if options.http:
        server: Any = options.http
    else:
        # The SDK passes only a small safe subset of the environment unless told otherwise;
        # the server needs its isolated HOME, state root and backends.
        server = StdioServerParameters(
            command=options.stdio,
            args=["serve", "--stdio"],
            env=dict(os.environ),
            cwd=options.project,
        )
    client = Client(
        server,
        mode={"legacy": "legacy", "modern": MODERN_VERSION, "auto": "auto"}[options.era],
        message_handler=updates.legacy_handler,
        read_timeout_seconds=STEP_DEADLINE,
        # A cached tools/list or resources/read would hide what the server answers now.
        cache=None,
    )
    run_id = None
    try:
        with anyio.fail_after(4 * STEP_DEADLINE):
            async with client:
                report.ok("connect")
                run_id = await drive(client, options.era, updates, report, options.project, tag)
            report.ok("close")
    except BaseException as error:  # noqa: BLE001 - every failure must end in the summary line
        # Task groups wrap what their tasks raise; report the innermost causes.
        causes = list(error.exceptions) if isinstance(error, BaseExceptionGroup) else [error]
        for cause in causes:
            if isinstance(cause, StepFailed):
                if report.failed == 0:
                    report.fail("step", str(cause))
            else:
                report.fail("unexpected", f"{type(cause).__name__}: {cause!r}")
        return None
    return run_id


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--era", choices=["legacy", "modern", "auto"], required=True)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--http", metavar="URL")
    target.add_argument("--stdio", metavar="AGENTPRISM_BINARY")
    parser.add_argument("--project", default=os.getcwd(), help="the projectDir runs are started in")
    parser.add_argument("--clients", type=int, default=2, help="clients driving at once")
    options = parser.parse_args()

    transport = "http" if options.http else "stdio"
    reports: list[Report] = []
    # Round one: every client runs the same script (same arguments, and each client's
    # JSON-RPC ids start at the same number), so a server that took one client's request for
    # a retry of another's would hand both the same run. Round two: a script per client.
    for round_name in ("identical", "unique"):
        run_ids: dict[str, str | None] = {}

        async def client_task(index: int) -> None:
            label = f"{round_name}-{index}"
            report = Report(f"python/{options.era}/{transport}/{label}")
            reports.append(report)
            tag = "same" if round_name == "identical" else f"client{index}"
            run_ids[label] = await one_client(options, label, tag, report)

        async with anyio.create_task_group() as group:
            for index in range(options.clients):
                group.start_soon(client_task, index)
        round_report = Report(f"python/{options.era}/{transport}/{round_name}")
        reports.append(round_report)
        started = [run_id for run_id in run_ids.values() if run_id is not None]
        if len(started) == options.clients:
            distinct = len(set(started)) == len(started)
            if distinct:
                round_report.ok("every client got its own run", ", ".join(started))
            else:
                round_report.fail("every client got its own run", f"run ids {started}")
    passed = sum(report.passed for report in reports)
    failed = sum(report.failed for report in reports)
    print(f"{passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
