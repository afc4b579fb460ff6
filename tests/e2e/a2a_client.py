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
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
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
    report.check(
        "the card offers streaming and push notifications",
        card.capabilities.streaming and card.capabilities.push_notifications,
        card.capabilities,
    )
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
    # A message continuing the task answers its checkpoint, and the run goes on.
    reply = SendMessageRequest(
        message=Message(
            message_id=str(uuid.uuid4()),
            role=Role.ROLE_USER,
            task_id=task.id,
            parts=[Part(text="yes")],
        )
    )
    async for event in client.send_message(reply):
        report.check("the answer continues the task", event.task.id == task.id, event)
        break
    done = await poll(client, task.id, {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED})
    text = done.artifacts[0].parts[0].text if done.artifacts and done.artifacts[0].parts else ""
    report.check(
        "the answered task completes with the answer",
        done.status.state == TaskState.TASK_STATE_COMPLETED and json.loads(text or "null") == {
            "summary": "ready to act on: deploy",
            "approved": True,
        },
        done,
    )


def event_state(event) -> int | None:
    if event.HasField("task"):
        return event.task.status.state
    if event.HasField("status_update"):
        return event.status_update.status.state
    return None


async def collect(report: Report, what: str, events, release: str) -> tuple[list[int], list[str]]:
    """The states and artifact texts of a stream, creating `release` once it says working."""
    states: list[int] = []
    artifacts: list[str] = []
    started = time.monotonic()
    async for event in events:
        state = event_state(event)
        if state is not None:
            states.append(state)
            if state == TaskState.TASK_STATE_WORKING:
                open(release, "w").close()
        if event.HasField("artifact_update"):
            artifacts.extend(part.text for part in event.artifact_update.artifact.parts)
        if time.monotonic() - started > STEP_DEADLINE:
            report.check(f"{what} ends", False, states)
            break
    return states, artifacts


async def check_stream(report: Report, client, gate: str) -> None:
    events = client.send_message(message("slow", {"step": f"@mock wait_file {gate}"}))
    states, artifacts = await collect(report, "the stream", events, gate)
    report.check(
        "the stream starts submitted, goes working and ends completed",
        len(states) >= 3
        and states[0] == TaskState.TASK_STATE_SUBMITTED
        and TaskState.TASK_STATE_WORKING in states
        and states[-1] == TaskState.TASK_STATE_COMPLETED,
        [state_name(state) for state in states],
    )
    report.check("the stream carries the result artifact", artifacts == ['{"steps":3}'], artifacts)


async def check_subscribe(report: Report, poller, streamer, gate: str) -> None:
    task = await send(poller, "slow", {"step": f"@mock wait_file {gate}"})
    await poll(poller, task.id, {TaskState.TASK_STATE_WORKING})
    events = streamer.subscribe(SubscribeToTaskRequest(id=task.id))
    states, artifacts = await collect(report, "the subscription", events, gate)
    report.check(
        "a subscription follows the task to completed",
        states[:1] == [TaskState.TASK_STATE_WORKING] and states[-1] == TaskState.TASK_STATE_COMPLETED,
        [state_name(state) for state in states],
    )
    report.check("the subscription carries the result artifact", artifacts == ['{"steps":3}'], artifacts)


async def check_push(report: Report, client, push_url: str, gate: str) -> None:
    """Registers a webhook for a gated task and lets it finish; the test reads the receiver."""
    task = await send(client, "slow", {"step": f"@mock wait_file {gate}"})
    try:
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task.id, url="http://203.0.113.9/elsewhere")
        )
        report.check("a webhook outside the allowed prefixes is refused", False, "it was accepted")
    except InvalidParamsError as error:
        report.check("a webhook outside the allowed prefixes is refused", "allowed" in str(error), error)
    config = await client.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=task.id, id="hook-1", url=push_url, token="push-token-1")
    )
    report.check("the webhook is registered", config.id == "hook-1" and config.url == push_url, config)
    spare = await client.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=task.id, id="spare", url=push_url + "-spare")
    )
    got = await client.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=task.id, id="hook-1")
    )
    report.check("the webhook reads back", got.url == push_url and got.token == "push-token-1", got)
    await client.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=task.id, id=spare.id)
    )
    listed = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    report.check("a deleted webhook is gone", [c.id for c in listed.configs] == ["hook-1"], listed)
    await poll(client, task.id, {TaskState.TASK_STATE_WORKING})
    open(gate, "w").close()
    done = await poll(client, task.id, {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED})
    report.check("the pushed task completes", done.status.state == TaskState.TASK_STATE_COMPLETED, done)
    print(f"PUSHED {task.id}", flush=True)


async def check_list(report: Report, client) -> None:
    listed = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED))
    report.check(
        "the completed tasks are listed",
        len(listed.tasks) >= 3
        and all(task.status.state == TaskState.TASK_STATE_COMPLETED for task in listed.tasks)
        and listed.total_size == len(listed.tasks),
        listed,
    )
    page = await client.list_tasks(ListTasksRequest(page_size=1))
    report.check("a page holds its size and says what follows", len(page.tasks) == 1 and page.next_page_token != "", page)


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
    parser.add_argument("--gates", required=True, help="a folder for the gate files streams release")
    parser.add_argument("--push-url", required=True, help="an allowed webhook the test receives")
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
            streamer = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
            await check_stream(report, streamer, f"{args.gates}/stream")
            await check_subscribe(report, client, streamer, f"{args.gates}/subscribe")
            await check_push(report, client, args.push_url, f"{args.gates}/push")
            if args.version == "1.0":
                await check_list(report, client)
    except (AssertionError, A2AError, A2AClientError, httpx.HTTPError) as error:
        report.check("the steps ran to the end", False, repr(error))
    print(f"{report.passed} passed, {report.failed} failed", flush=True)
    return 0 if report.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
