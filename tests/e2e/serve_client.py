"""Drives a folder of workflows served by `agentprism serve <dir>` with the official Python MCP SDK.

    serve_client.py --era legacy|modern --http URL --wait-file PATH
    serve_client.py --era legacy|modern --stdio AGENTPRISM_BINARY --folder DIR --wait-file PATH

The folder is tests/fixtures/serve (docs/serve.md): `echo` (no agent), `review` (a companion
file and one agent call), `approval` (a checkpoint) and `slow` (three agent steps, each
carrying the `@mock` line given in `arguments.step`). `legacy` connects with the 2025-11-25
initialize handshake and its session; `modern` pins the stateless 2026-07-28 era (per-request
`_meta`, no session). Over stdio the SDK launches `agentprism serve DIR --stdio` itself with
this process's environment (the caller sets HOME, AGENTPRISM_PERSISTENCE_ROOT and
AGENTPRISM_BACKENDS with the mock agent as backend `mock`). `--wait-file` names a file that
never appears: a `slow` run waiting on it runs until it is cancelled.

The steps, in order: the tool list (four workflows with the `_meta.mhl.run.tool` hint, six
`mhl_run_*` tools); synchronous calls of `echo` and `review` (whose answer shows the companion
file reached the agent) and of `approval` (a tool error pointing at `mhl_run_start`); an
async `slow` run started (with `resource_link`s over HTTP) and polled to `completed` through
its steps; an async `echo` run and its logs; over HTTP the logs and result resources; the raw
`run/status` and `run/logs` methods through the SDK's custom request, and over HTTP at their
own paths (`POST /mcp/run/status`; a path naming another method is refused); an `approval` run answered through `mhl_run_resume`; a cancelled
`slow` run; `mhl_run_list`.

Every step prints PASS or FAIL; the last line is `N passed, M failed` and the exit code is 0
only when nothing failed. Every wait has a deadline; polls wait on a state, with a short
pause between them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter
from report import Report, StepFailed

MODERN_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"
# Long enough for a loaded two-core machine; a healthy step takes well under a second.
STEP_DEADLINE = 30.0
WORKFLOWS = ["approval", "echo", "review", "slow"]
RUN_TOOLS = ["mhl_run_cancel", "mhl_run_list", "mhl_run_logs", "mhl_run_resume", "mhl_run_start", "mhl_run_status"]
SLOW_STEPS = ["Gather", "Analyze", "Publish"]
# The companion file's text (tests/fixtures/serve/prompts/review.md).
REVIEW_PROMPT = "Review the topic below and answer in one line."
ANY_DOCUMENT = TypeAdapter(dict[str, Any])



def texts(result: types.CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, types.TextContent))


def structured(result: types.CallToolResult) -> dict[str, Any]:
    if result.is_error:
        raise StepFailed(f"tool error: {texts(result)}")
    if not isinstance(result.structured_content, dict):
        raise StepFailed(f"no structuredContent in {result!r}")
    return result.structured_content


def resource_text(result: types.ReadResourceResult) -> str:
    found = [c.text for c in result.contents if isinstance(c, types.TextResourceContents)]
    if len(found) != 1:
        raise StepFailed(f"expected one text content, got {result.contents!r}")
    return found[0]


def without_result_type(document: Any) -> Any:
    """The 2026-07-28 era tags every result with `resultType`; an SDK may keep or strip it."""
    if not isinstance(document, dict):
        return document
    return {key: value for key, value in document.items() if key != "resultType"}


def short(document: Any) -> str:
    return json.dumps(document)[:2000]


class Runs:
    """The client's view of the run API: the tools, the raw methods, the per-method path."""

    def __init__(self, client: Client, options: argparse.Namespace, session: dict[str, str]) -> None:
        self.client = client
        self.options = options
        # The legacy session's Mcp-Session-Id, captured from the SDK's HTTP responses.
        self.session = session
        self.next_id = 1_000_000

    async def tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return await self.client.call_tool(name, arguments)

    async def status(self, run_id: str) -> dict[str, Any]:
        return structured(await self.tool("mhl_run_status", {"runId": run_id}))

    async def until(self, run_id: str, wanted: str, seen: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Polls `mhl_run_status` until the run is in state `wanted`; any other settled state fails."""
        give_up = time.monotonic() + STEP_DEADLINE
        while True:
            view = await self.status(run_id)
            if seen is not None:
                seen.append(view)
            state = view.get("state")
            if state == wanted:
                return view
            if state != "working":
                raise StepFailed(f"run {run_id} is {state}, waited for {wanted}: {short(view)}")
            if time.monotonic() > give_up:
                raise StepFailed(f"timed out after {STEP_DEADLINE:.0f} s waiting for {wanted}: {short(view)}")
            await anyio.sleep(0.05)

    async def method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A raw `run/*` request through the SDK's session (stamped with the era's `_meta`)."""
        request = types.Request[dict[str, Any], str](method=method, params=params)
        return await self.client.session.send_request(request, ANY_DOCUMENT)

    async def post_to_path(
        self, method: str, params: dict[str, Any], path: str | None = None
    ) -> tuple[int, dict[str, Any] | None]:
        """`POST /mcp/<path>` (by default the method's own path) by hand, as a policy gateway
        would see it; the HTTP status and the JSON-RPC answer (None for a non-JSON refusal)."""
        self.next_id += 1
        request_id = self.next_id
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        params = dict(params)
        if self.options.era == "modern":
            params["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "serve-client-raw", "version": "1.0.0"},
            }
            headers["MCP-Protocol-Version"] = MODERN_VERSION
            headers["Mcp-Method"] = method
        else:
            if "id" not in self.session:
                raise StepFailed("the SDK's responses carried no Mcp-Session-Id")
            headers["MCP-Protocol-Version"] = LEGACY_VERSION
            headers["Mcp-Session-Id"] = self.session["id"]
        body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()
        url = f"{self.options.http}/{path or method}"

        def send() -> tuple[int, str, str]:
            # No proxy: the server is on loopback.
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            request = urllib.request.Request(url, data=body, headers=headers, method="POST")
            try:
                with opener.open(request, timeout=STEP_DEADLINE) as response:
                    return response.status, response.headers.get("Content-Type", ""), response.read().decode()
            except urllib.error.HTTPError as error:
                return error.code, error.headers.get("Content-Type", ""), error.read().decode()

        status, content_type, text = await anyio.to_thread.run_sync(send)
        if status != 200:
            return status, None
        return status, answer_of(content_type, text, request_id)


def answer_of(content_type: str, text: str, request_id: int) -> dict[str, Any]:
    """The JSON-RPC answer to `request_id` in a plain JSON or an SSE response body."""
    if content_type.startswith("text/event-stream"):
        for line in text.splitlines():
            if line.startswith("data:"):
                try:
                    message = json.loads(line[5:])
                except json.JSONDecodeError:
                    continue
                if isinstance(message, dict) and message.get("id") == request_id:
                    return message
        raise StepFailed(f"no answer to {request_id} in the SSE stream {text[:2000]!r}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise StepFailed(f"not JSON ({error}): {content_type} {text[:2000]!r}") from error


async def check_tools(client: Client, report: Report) -> None:
    tools = (await client.list_tools()).tools
    names = sorted(tool.name for tool in tools)
    report.check("tools/list names", names == sorted(WORKFLOWS + RUN_TOOLS), f"tools {names}")
    hints = {tool.name: ((tool.meta or {}).get("mhl") or {}).get("run", {}).get("tool") for tool in tools}
    report.check(
        "tools/list _meta.mhl.run.tool",
        all(hints[name] == "mhl_run_start" for name in WORKFLOWS),
        f"hints {hints}",
    )


async def check_sync_calls(runs: Runs, report: Report) -> None:
    echo = await runs.tool("echo", {"text": "hello"})
    report.check(
        "sync echo",
        not echo.is_error and echo.structured_content == {"result": {"echoed": "hello"}},
        f"echo answered {echo!r}",
    )
    review = structured(await runs.tool("review", {"topic": "caching"}))
    answer = (review.get("result") or {}).get("answer", "")
    report.check(
        "sync review reads the companion file",
        review.get("result", {}).get("topic") == "caching" and REVIEW_PROMPT in answer and "caching" in answer,
        f"review answered {short(review)}",
    )
    approval = await runs.tool("approval", {"request": "deploy"})
    report.check(
        "sync approval is a tool error naming mhl_run_start",
        approval.is_error is True and "mhl_run_start" in texts(approval),
        f"approval answered {approval!r}",
    )


async def check_slow_run(runs: Runs, report: Report, http: bool) -> str:
    started = await runs.tool("mhl_run_start", {"name": "slow", "arguments": {"step": runs.options.step}})
    view = structured(started)
    run_id = view.get("runId")
    report.check(
        "mhl_run_start slow",
        isinstance(run_id, str) and view.get("name") == "slow" and view.get("state") == "working",
        f"start answered {short(view)}",
    )
    links = sorted(str(block.uri) for block in started.content if isinstance(block, types.ResourceLink))
    wanted = sorted([f"mhl://run/{run_id}/logs", f"mhl://run/{run_id}/result"]) if http else []
    report.check("mhl_run_start resource_links", links == wanted, f"links {links}, wanted {wanted}")

    seen: list[dict[str, Any]] = [view]
    done = await runs.until(run_id, "completed", seen)
    report.check("slow completed", done.get("result") == {"steps": 3}, f"completed view {short(done)}")
    placed = [
        v
        for v in seen
        if v.get("state") == "working"
        and v.get("step") in SLOW_STEPS
        and v.get("stepIndex") == SLOW_STEPS.index(v["step"]) + 1
        and v.get("stepTotal") == 3
        and v.get("reached") == SLOW_STEPS[: v["stepIndex"]]
    ]
    report.check(
        "status showed step, stepIndex, stepTotal, reached while working",
        len(placed) > 0,
        f"views {short(seen)}",
    )
    report.check(
        "completed view is at the last step",
        done.get("step") == "Publish" and done.get("stepIndex") == 3 and done.get("reached") == SLOW_STEPS,
        f"completed view {short(done)}",
    )
    logs = structured(await runs.tool("mhl_run_logs", {"runId": run_id}))
    report.check(
        "mhl_run_logs slow",
        logs == {"runId": run_id, "lines": [], "totalLines": 0},
        f"logs {short(logs)}",
    )
    return run_id


async def check_echo_run(runs: Runs, report: Report) -> str:
    view = structured(await runs.tool("mhl_run_start", {"name": "echo", "arguments": {"text": "hello"}}))
    run_id = view["runId"]
    done = await runs.until(run_id, "completed")
    report.check("async echo completed", done.get("result") == {"echoed": "hello"}, f"view {short(done)}")
    logs = structured(await runs.tool("mhl_run_logs", {"runId": run_id}))
    report.check(
        "mhl_run_logs echo",
        logs == {"runId": run_id, "lines": ["echoing 5 characters"], "totalLines": 1},
        f"logs {short(logs)}",
    )
    return run_id


async def check_resources(client: Client, report: Report, slow_id: str, echo_id: str) -> None:
    logs = resource_text(await client.read_resource(f"mhl://run/{echo_id}/logs"))
    report.check("read mhl://run/<id>/logs", logs == "echoing 5 characters", f"logs resource {logs!r}")
    result = json.loads(resource_text(await client.read_resource(f"mhl://run/{slow_id}/result")))
    report.check("read mhl://run/<id>/result", result == {"steps": 3}, f"result resource {result!r}")


async def check_raw_methods(runs: Runs, report: Report, slow_id: str, echo_id: str, http: bool) -> None:
    raw = await runs.method("run/status", {"runId": slow_id})
    report.check(
        "raw run/status answers the bare status object",
        raw.get("runId") == slow_id and raw.get("state") == "completed" and raw.get("result") == {"steps": 3},
        f"run/status answered {short(raw)}",
    )
    logs = without_result_type(await runs.method("run/logs", {"runId": echo_id}))
    echo_logs = {"runId": echo_id, "lines": ["echoing 5 characters"], "totalLines": 1}
    report.check("raw run/logs", logs == echo_logs, f"run/logs answered {short(logs)}")
    try:
        unknown = await runs.method("run/status", {"runId": "no-such-run"})
        report.check("raw run/status of an unknown runId is refused", False, f"answered {short(unknown)}")
    except MCPError as error:
        report.check(
            "raw run/status of an unknown runId is refused",
            error.code == -32602 and error.error.message == "unknown runId",
            f"error {error.code} {error.error.message!r}",
        )
    if not http:
        return
    status, answer = await runs.post_to_path("run/status", {"runId": slow_id})
    report.check(
        "POST /mcp/run/status",
        status == 200 and answer is not None and without_result_type(answer.get("result")) == without_result_type(raw),
        f"HTTP {status}: {short(answer)}, wanted the result {short(raw)}",
    )
    status, answer = await runs.post_to_path("run/logs", {"runId": echo_id})
    report.check(
        "POST /mcp/run/logs",
        status == 200 and answer is not None and without_result_type(answer.get("result")) == echo_logs,
        f"HTTP {status}: {short(answer)}",
    )
    status, _ = await runs.post_to_path("run/status", {"runId": slow_id}, path="run/cancel")
    report.check("POST /mcp/run/cancel naming run/status is refused", status == 400, f"HTTP {status}")


async def check_checkpoint(runs: Runs, report: Report) -> str:
    view = structured(await runs.tool("mhl_run_start", {"name": "approval", "arguments": {"request": "deploy"}}))
    run_id = view["runId"]
    waiting = await runs.until(run_id, "input_required")
    index = (waiting.get("checkpoint") or {}).get("callIndex")
    report.check(
        "approval waits at its checkpoint",
        isinstance(index, int) and waiting.get("resumable") is True and waiting.get("step") == "Gate",
        f"view {short(waiting)}",
    )
    resumed = structured(
        await runs.tool("mhl_run_resume", {"runId": run_id, "arguments": {"checkpointReplies": {str(index): True}}})
    )
    report.check("mhl_run_resume", resumed.get("runId") == run_id and resumed.get("generation") == 2, short(resumed))
    done = await runs.until(run_id, "completed")
    result = done.get("result") or {}
    report.check(
        "approval completed approved",
        result.get("approved") is True and result.get("summary") == "ready to act on: deploy",
        f"view {short(done)}",
    )
    return run_id


async def check_cancel(runs: Runs, report: Report) -> str:
    step = f"@mock wait_file {runs.options.wait_file}"
    view = structured(await runs.tool("mhl_run_start", {"name": "slow", "arguments": {"step": step}}))
    run_id = view["runId"]
    give_up = time.monotonic() + STEP_DEADLINE
    # Cancel only once the first agent call is under way, so the cancel stops a live call.
    while not (view.get("step") == "Gather" and (view.get("calls") or {}).get("running", 0) >= 1):
        if view.get("state") != "working" or time.monotonic() > give_up:
            raise StepFailed(f"the waiting run never had a call under way: {short(view)}")
        await anyio.sleep(0.05)
        view = await runs.status(run_id)
    report.ok("waiting slow run has a call under way")
    canceled = structured(await runs.tool("mhl_run_cancel", {"runId": run_id}))
    report.check(
        "mhl_run_cancel",
        canceled.get("runId") == run_id and canceled.get("state") == "canceled" and canceled.get("resumable") is True,
        f"cancel answered {short(canceled)}",
    )
    after = await runs.status(run_id)
    report.check("status after cancel", after.get("state") == "canceled", f"view {short(after)}")
    return run_id


async def drive(client: Client, options: argparse.Namespace, report: Report, session: dict[str, str]) -> None:
    expected_version = LEGACY_VERSION if options.era == "legacy" else MODERN_VERSION
    report.check(
        "negotiated-version",
        client.protocol_version == expected_version,
        f"negotiated {client.protocol_version!r}, wanted {expected_version!r}",
    )
    http = options.http is not None
    runs = Runs(client, options, session)
    await check_tools(client, report)
    await check_sync_calls(runs, report)
    slow_id = await check_slow_run(runs, report, http)
    echo_id = await check_echo_run(runs, report)
    if http:
        await check_resources(client, report, slow_id, echo_id)
    await check_raw_methods(runs, report, slow_id, echo_id, http)
    approval_id = await check_checkpoint(runs, report)
    canceled_id = await check_cancel(runs, report)

    listed = structured(await runs.tool("mhl_run_list", {}))
    pairs = [(run.get("runId"), run.get("state")) for run in listed.get("runs", [])]
    wanted = [(slow_id, "completed"), (echo_id, "completed"), (approval_id, "completed"), (canceled_id, "canceled")]
    report.check("mhl_run_list shows this client's runs, oldest first", pairs == wanted, f"listed {pairs}, wanted {wanted}")
    unknown = await runs.tool("mhl_run_status", {"runId": "no-such-run"})
    report.check(
        "mhl_run_status of an unknown runId",
        unknown.is_error is True and texts(unknown) == "unknown runId",
        f"answered {unknown!r}",
    )


async def connect_and_drive(options: argparse.Namespace, report: Report) -> None:
    mode = "legacy" if options.era == "legacy" else MODERN_VERSION
    session: dict[str, str] = {}
    async with create_mcp_http_client() as http_client:
        if options.http:

            async def capture(response: httpx2.Response) -> None:
                if (value := response.headers.get("mcp-session-id")) is not None:
                    session["id"] = value

            http_client.event_hooks = {"request": [], "response": [capture]}
            server: Any = streamable_http_client(options.http, http_client=http_client)
        else:
            # The SDK passes only a small safe subset of the environment unless told otherwise;
            # the server needs its isolated HOME, state root and backends.
            server = StdioServerParameters(
                command=options.stdio,
                args=["serve", options.folder, "--stdio"],
                env=dict(os.environ),
                cwd=options.folder,
            )
        # A cached tools/list or resources/read would hide what the server answers now.
        client = Client(server, mode=mode, read_timeout_seconds=STEP_DEADLINE, cache=None)
        async with client:
            report.ok("connect")
            await drive(client, options, report, session)
        report.ok("close")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--era", choices=["legacy", "modern"], required=True)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--http", metavar="URL")
    target.add_argument("--stdio", metavar="AGENTPRISM_BINARY")
    parser.add_argument("--folder", help="the served folder (for --stdio)")
    parser.add_argument("--wait-file", required=True, help="a path that never appears")
    parser.add_argument("--step", default="@mock delay 300", help="the @mock line of each slow step")
    options = parser.parse_args()
    if options.stdio and not options.folder:
        parser.error("--stdio needs --folder")

    report = Report(f"python/{options.era}/{'http' if options.http else 'stdio'}")
    try:
        with anyio.fail_after(8 * STEP_DEADLINE):
            await connect_and_drive(options, report)
    except BaseException as error:  # noqa: BLE001 - every failure must end in the summary line
        # Task groups wrap what their tasks raise; report the innermost causes.
        causes = list(error.exceptions) if isinstance(error, BaseExceptionGroup) else [error]
        for cause in causes:
            if isinstance(cause, StepFailed):
                if report.failed == 0:
                    report.fail("step", str(cause))
            else:
                report.fail("unexpected", f"{type(cause).__name__}: {cause!r}")
    print(f"{report.passed} passed, {report.failed} failed", flush=True)
    return 0 if report.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
