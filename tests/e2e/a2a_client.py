"""Drives a folder served by `agentprism serve <dir> --http` as an A2A agent, with the official
A2A Python SDK (`a2a-sdk`).

    a2a_client.py --url BASE_URL --version 1.0|0.3 --wait-file PATH [--token TOKEN]

The folder is tests/fixtures/serve (docs/serve.md): `echo` (no agent), `approval` (a
checkpoint), `slow` (three agent steps, each carrying the `@mock` line given in
`input.step`) and `review`. `--version` picks the card's interface the client uses: 1.0 (the
SDK's own JSON-RPC transport: `SendMessage`, `GetTask`, `CancelTask`) or 0.3 (its compatibility
transport: `message/send`, `tasks/get`, `tasks/cancel`). `--wait-file` names a file that never
appears: a `slow` run waiting on it runs until it is canceled.

The steps, in order: the Agent Card fetched without the token (one skill per workflow, no
streaming, both interfaces, the bearer scheme when a token is set); an `echo` task polled to
completed and its artifact read (the result JSON); a `slow` task, submitted, then working,
canceled, and a second cancel refused; an `approval` task polled to input-required with the
checkpoint's prompt as its status message; an unknown skill and an unknown task refused.

Every step prints PASS or FAIL; the last line is `N passed, M failed` and the exit code is 0
only when nothing failed. Every poll has a deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError, InvalidParamsError, TaskNotCancelableError, TaskNotFoundError

# Long enough for a loaded two-core machine; a healthy poll ends in well under a second.
STEP_DEADLINE = 30.0
WORKFLOWS = ["approval", "echo", "review", "slow"]


class Report:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def check(self, what: str, ok: bool, detail: object = "") -> bool:
        if ok:
            self.passed += 1
            print(f"PASS {what}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL {what}: {detail}", flush=True)
        return ok


def message(skill: str, arguments: dict | None) -> SendMessageRequest:
    metadata: dict = {"skill": skill}
    if arguments is not None:
        metadata["input"] = arguments
    return SendMessageRequest(
        message=Message(
            message_id=str(uuid.uuid4()),
            role=Role.ROLE_USER,
            parts=[Part(text=f"run {skill}")],
            metadata=metadata,
        )
    )


async def send(client, skill: str, arguments: dict | None) -> Task:
    async for event in client.send_message(message(skill, arguments)):
        if event.HasField("task"):
            return event.task
        raise AssertionError(f"the answer to {skill} is not a task: {event}")
    raise AssertionError(f"no answer to {skill}")


async def poll(client, task_id: str, states: set[int]) -> Task:
    started = time.monotonic()
    while True:
        task = await client.get_task(GetTaskRequest(id=task_id))
        if task.status.state in states:
            return task
        if time.monotonic() - started > STEP_DEADLINE:
            raise AssertionError(f"task {task_id} never reached {states}; last: {task}")
        await asyncio.sleep(0.05)


def state_name(state: int) -> str:
    return TaskState.Name(state)


async def check_card(report: Report, url: str, token: str | None) -> AgentCard:
    # No Authorization header: the card is public.
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, url).get_agent_card()
    skills = sorted(skill.id for skill in card.skills)
    report.check("the card lists one skill per workflow", skills == WORKFLOWS, skills)
    report.check("the card offers no streaming", not card.capabilities.streaming, card.capabilities)
    versions = [(i.protocol_binding, i.protocol_version) for i in card.supported_interfaces]
    report.check(
        "the card offers JSON-RPC 1.0 first, then 0.3",
        versions == [("JSONRPC", "1.0"), ("JSONRPC", "0.3")],
        versions,
    )
    endpoint_ok = all(i.url == url.rstrip("/") + "/a2a" for i in card.supported_interfaces)
    report.check("every interface is the /a2a endpoint", endpoint_ok, card.supported_interfaces)
    if token is not None:
        scheme = card.security_schemes["bearer"].http_auth_security_scheme.scheme
        report.check("the card declares the bearer scheme", scheme.lower() == "bearer", scheme)
    return card


async def check_echo(report: Report, client) -> None:
    task = await send(client, "echo", {"text": "hello over a2a"})
    report.check(
        "echo starts as a task",
        task.id != "" and task.status.state in {TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_COMPLETED},
        task,
    )
    done = await poll(client, task.id, {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED})
    report.check("echo completes", done.status.state == TaskState.TASK_STATE_COMPLETED, done)
    text = done.artifacts[0].parts[0].text if done.artifacts and done.artifacts[0].parts else ""
    try:
        result = json.loads(text)
    except ValueError:
        result = None
    report.check("the artifact is the result JSON", result == {"echoed": "hello over a2a"}, text)


async def check_cancel(report: Report, client, wait_file: str) -> None:
    task = await send(client, "slow", {"step": f"@mock wait_file {wait_file}"})
    report.check("slow is submitted", task.status.state == TaskState.TASK_STATE_SUBMITTED, task)
    working = await poll(client, task.id, {TaskState.TASK_STATE_WORKING})
    report.check("slow is working", working.status.state == TaskState.TASK_STATE_WORKING, working)
    canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
    report.check("cancel answers canceled", canceled.status.state == TaskState.TASK_STATE_CANCELED, canceled)
    again = await client.get_task(GetTaskRequest(id=task.id))
    report.check("the task stays canceled", again.status.state == TaskState.TASK_STATE_CANCELED, again)
    try:
        await client.cancel_task(CancelTaskRequest(id=task.id))
        report.check("a second cancel is refused", False, "it was accepted")
    except TaskNotCancelableError as error:
        report.check("a second cancel is refused", "canceled" in str(error), error)


async def check_input_required(report: Report, client) -> None:
    task = await send(client, "approval", {"request": "deploy"})
    waiting = await poll(
        client,
        task.id,
        {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_COMPLETED},
    )
    report.check(
        "approval waits as input-required",
        waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED,
        state_name(waiting.status.state),
    )
    text = waiting.status.message.parts[0].text if waiting.status.message.parts else ""
    report.check("the status message is the checkpoint's prompt", 'Approve "deploy"?' in text, text)


async def check_refusals(report: Report, client) -> None:
    try:
        await send(client, "nonexistent", {})
        report.check("an unknown skill is refused", False, "it was accepted")
    except InvalidParamsError as error:
        report.check("an unknown skill is refused", "metadata.skill" in str(error), error)
    try:
        await client.get_task(GetTaskRequest(id="zzzzzzzz-zzzzzz"))
        report.check("an unknown task is not found", False, "it was found")
    except TaskNotFoundError as error:
        report.check("an unknown task is not found", True, error)


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--version", choices=["1.0", "0.3"], required=True)
    parser.add_argument("--wait-file", required=True)
    parser.add_argument("--token")
    args = parser.parse_args()
    report = Report()
    try:
        card = await check_card(report, args.url, args.token)
        # Keep only the interface of the version under test, so the SDK picks that transport.
        chosen = [i for i in card.supported_interfaces if i.protocol_version == args.version]
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(chosen)
        headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
        async with httpx.AsyncClient(headers=headers, timeout=STEP_DEADLINE) as http:
            config = ClientConfig(httpx_client=http, streaming=False, polling=True)
            client = ClientFactory(config).create(card)
            await check_echo(report, client)
            await check_cancel(report, client, args.wait_file)
            await check_input_required(report, client)
            await check_refusals(report, client)
    except (AssertionError, A2AError, A2AClientError, httpx.HTTPError) as error:
        report.check("the steps ran to the end", False, repr(error))
    print(f"{report.passed} passed, {report.failed} failed", flush=True)
    return 0 if report.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
