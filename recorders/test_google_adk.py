"""The Google ADK recorder against the real framework, offline, with a scripted ``BaseLlm``."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import signal
from collections.abc import AsyncGenerator, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    SECRET,
    check_aborted,
    check_both_versions,
    check_cancelled_as_the_program_ends,
    check_cancelled_while_opening,
    check_converted_once,
    check_each_message_once,
    check_example,
    check_file,
    check_interrupted_while_opening,
    check_nested,
    check_off_the_loop,
    check_redacted,
    events,
    messages,
    need,
    run_example,
    scrub,
    transcript,
)

need("google.adk")

from google.adk.agents import BaseAgent, LlmAgent, LoopAgent, ParallelAgent, RunConfig, SequentialAgent
from google.adk.apps import App
from google.adk.events.event import Event
from google.adk.models import FallbackModel
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.plugins.reflect_retry_tool_plugin import ReflectAndRetryToolPlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.agent_tool import AgentTool
from google.adk.workflow import START, JoinNode, NodeTimeoutError, Workflow
from google.genai import types
from google.genai.errors import ClientError
from session_google_adk import SessionRecorder, recording, to_json

import session

Script = Callable[[LlmRequest], list[LlmResponse]]


class Scripted(BaseLlm):
    """A model whose replies *script* gives for each request (several: a streamed reply's
    chunks, the whole reply last)."""

    model: str = "scripted"
    script: Any = None

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        for response in self.script(llm_request):
            yield response


def reply(*parts: types.Part, given: int, made: int, partial: bool | None = None) -> LlmResponse:
    usage = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=given, candidates_token_count=made, total_token_count=given + made
    )
    content = types.Content(role="model", parts=list(parts))
    return LlmResponse(content=content, usage_metadata=usage, partial=partial)


def call(call_id: str, name: str, **args: Any) -> types.Part:
    return types.Part(function_call=types.FunctionCall(id=call_id, name=name, args=args))


def answers(request: LlmRequest) -> list[types.FunctionResponse]:
    return [p.function_response for c in request.contents for p in c.parts or [] if p.function_response]


def two_tools_then_answer(request: LlmRequest) -> list[LlmResponse]:
    """First call: two tool calls at once; then an answer naming what the tools returned."""
    returned = answers(request)
    if not returned:
        return [
            reply(call("call-add", "add", a=2, b=3), call("call-lookup", "lookup", key="x"), given=11, made=7)
        ]
    text = "; ".join(f"{r.name}={(r.response or {}).get('result')}" for r in returned)
    return [reply(types.Part(text=f"done: {text}"), given=23, made=5)]


def add(a: int, b: int) -> int:
    return a + b


def lookup(key: str) -> str:
    return f"entry {key}"


def broken_lookup(key: str) -> str:
    raise KeyError(key)


async def run(
    recorder: SessionRecorder,
    agent: BaseAgent | Workflow,
    prompt: str,
    *,
    service: InMemorySessionService | None = None,
    history: list[Event] = (),  # type: ignore[assignment]
    config: RunConfig | None = None,
    plugins: list[BasePlugin] = (),  # type: ignore[assignment]
) -> list[Event]:
    """Run *agent* once on *prompt* with the recorder as its runner's first plugin (then
    *plugins*), in a new session that starts with *history*; the events it gave."""
    service = service or InMemorySessionService()
    app = App(name="app", root_agent=agent, plugins=[recorder, *plugins])
    runner = Runner(app=app, session_service=service)
    chat = await service.create_session(app_name="app", user_id="u")
    for event in history:
        await service.append_event(chat, event)
    message = types.Content(role="user", parts=[types.Part(text=prompt)])
    return [
        event
        async for event in runner.run_async(
            user_id="u", session_id=chat.id, new_message=message, run_config=config
        )
    ]


def test_parallel_tools_and_usage(
    tmp_path: Path, sent_messages: dict[str, list[list[session.Message]]]
) -> None:
    path = tmp_path / "chat.jsonl"
    agent = LlmAgent(
        name="root",
        model=Scripted(script=two_tools_then_answer),
        instruction="Be brief.",
        tools=[add, lookup],
    )

    async def main() -> list[Event]:
        async with recording(path) as recorder:
            return await run(recorder, agent, "add 2 and 3, and look up x")

    given = asyncio.run(main())
    assert (
        given[-1].content
        and given[-1].content.parts
        and given[-1].content.parts[0].text == "done: add=5; lookup=entry x"
    )
    summary = check_file(path)
    assert summary.usage == {"input": 34, "output": 12, "cache_read": 0, "cache_write": 0, "total_tokens": 46}
    assert summary.runs[0].end_reason == "stop"
    ends = events(path, "model_exec_end")
    assert [(e.execution.id, e.execution.attempt, bool(e.error)) for e in ends if e.execution] == [
        ("model-1", 1, False),
        ("model-2", 1, False),
    ]
    [first, _] = events(path, "model_request")
    assert first.request is not None and {tool["name"] for tool in first.request["tools"]} == {
        "add",
        "lookup",
    }
    assert first.request["config"]["extra"]["model"] == "scripted"
    system = first.request["messages"][0]["value"]
    assert system["role"] == "system" and "Be brief." in system["content"][0]["text"], system
    tool_ends = {e.tool_id: e for e in events(path, "tool_exec_end")}
    assert tool_ends["call-add"].result == 5 and not tool_ends["call-add"].is_error
    assert tool_ends["call-lookup"].result == "entry x"
    assert [e.args for e in events(path, "tool_invoke_start")] == [{"a": 2, "b": 3}, {"key": "x"}]
    assert [(m.role, m.metadata) for m in messages(path)] == [
        ("user", None),
        ("assistant", None),
        ("tool", {"tool_call_id": "call-add"}),
        ("tool", {"tool_call_id": "call-lookup"}),
        ("assistant", None),
    ]
    text = transcript(path)
    assert "user: add 2 and 3, and look up x" in text and "assistant: done: add=5" in text
    # the system instruction, the prompt, the tool calls and their two results: the second
    # request sends the first two again
    assert check_each_message_once(path)["messages"] == 5
    check_converted_once(sent_messages)


CARD = "4111 1111 1111 1111"


def test_a_reply_edited_twice_is_recorded_as_edited(tmp_path: Path) -> None:
    """An agent's ``after_model_callback`` scrubs a card number from the model's reply,
    replacing its parts twice: the second list is put where the first was, as CPython's
    free list does on its own (the test makes it so).  The conversation then holds the
    scrubbed reply: so do the committed message and the next request, never the reply as
    the recorder first converted it."""
    path = tmp_path / "chat.jsonl"
    kept: list[Any] = []  # each list made where the first was not: alive, so not reused

    def scrubbed(callback_context: Any, llm_response: LlmResponse) -> None:
        content = llm_response.content
        if content is None or not any(CARD in (part.text or "") for part in content.parts or []):
            return
        calls = [part for part in content.parts or [] if part.function_call]
        first = id(content.parts)
        content.parts = [types.Part(text="[scrubbing]"), *calls]  # the first list is freed
        for _ in range(1000):
            content.parts = [types.Part(text="[REDACTED]"), *calls]
            if id(content.parts) == first:
                break
            kept.append(content.parts)

    def script(request: LlmRequest) -> list[LlmResponse]:
        if not answers(request):
            card = types.Part(text=f"your card is {CARD}")
            return [reply(card, call("call-1", "add", a=1, b=2), given=4, made=2)]
        return [reply(types.Part(text="done"), given=6, made=1)]

    agent = LlmAgent(name="root", model=Scripted(script=script), tools=[add], after_model_callback=scrubbed)

    async def main() -> None:
        async with recording(path) as recorder:
            await run(recorder, agent, "pay")

    asyncio.run(main())
    check_file(path)
    scrubbed_text = {"type": "text", "text": "[REDACTED]"}
    [committed, _] = [m.content[0] for m in messages(path) if m.role == "assistant"]
    assert committed == scrubbed_text
    [_, second] = events(path, "model_request")
    assert second.request is not None
    sent = [m["value"]["content"][0] for m in second.request["messages"] if m["value"]["role"] == "assistant"]
    assert sent == [scrubbed_text]


def test_a_failing_tool_is_a_failed_call_and_the_run_an_error(tmp_path: Path) -> None:
    """In ADK a tool that raises ends the whole run: its call is an error, and so is the run."""
    path = tmp_path / "chat.jsonl"
    agent = LlmAgent(name="root", model=Scripted(script=two_tools_then_answer), tools=[add, broken_lookup])
    agent.model.script = lambda request: [  # type: ignore[union-attr]
        reply(
            call("call-add", "add", a=2, b=3), call("call-lookup", "broken_lookup", key="x"), given=11, made=7
        )
    ]

    async def main() -> None:
        async with recording(path) as recorder:
            await run(recorder, agent, "add 2 and 3, and look up x")

    with pytest.raises(KeyError):
        asyncio.run(main())
    summary = check_file(path)
    [end] = [e for e in events(path, "tool_exec_end") if e.tool_id == "call-lookup"]
    assert end.is_error and end.error is not None and end.error["type"] == "KeyError"
    run_ = summary.runs[0]
    assert run_.end_reason == "error" and run_.error is not None
    assert summary.counts["turn_end"] == 1
    [agent_end] = events(path, "agent_end")
    assert agent_end.summary is not None and agent_end.summary.tool_errors == 1


def test_a_model_error_ends_the_run_in_an_error(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    def failing(request: LlmRequest) -> list[LlmResponse]:
        raise ConnectionError("model unreachable")

    agent = LlmAgent(name="root", model=Scripted(script=failing))

    async def main() -> None:
        async with recording(path) as recorder:
            await run(recorder, agent, "hi")

    with pytest.raises(ConnectionError):
        asyncio.run(main())
    summary = check_file(path)
    assert summary.runs[0].end_reason == "error"
    assert summary.runs[0].error == {"message": "model unreachable", "type": "ConnectionError"}
    [end] = events(path, "model_exec_end")
    assert end.error == {"message": "model unreachable", "type": "ConnectionError"}


def test_a_reply_that_is_an_error_is_a_failed_attempt_and_ends_the_run(tmp_path: Path) -> None:
    """A reply ADK makes an error (a candidate blocked for safety, as ``LlmResponse.create``
    gives it: no content, ``error_code``): the attempt failed, with what it used, and the run
    ends in that error, never as a successful call with an answer."""
    path = tmp_path / "chat.jsonl"
    usage = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=9, candidates_token_count=0, total_token_count=9
    )
    blocked = types.Candidate(finish_reason=types.FinishReason.SAFETY, finish_message="blocked: unsafe")
    response = LlmResponse.create(types.GenerateContentResponse(candidates=[blocked], usage_metadata=usage))
    assert response.error_code  # what ADK makes of it
    agent = LlmAgent(name="root", model=Scripted(script=lambda request: [response]))

    async def main() -> None:
        async with recording(path) as recorder:
            await run(recorder, agent, "hi")

    asyncio.run(main())
    summary = check_file(path)
    failure = {"type": "SAFETY", "message": "blocked: unsafe"}
    assert (summary.runs[0].end_reason, summary.runs[0].error) == ("error", failure)
    [end] = events(path, "model_exec_end")
    assert end.message is None and end.error == failure
    answered = end.partial_message["value"]  # what it answered: nothing, with its usage
    assert (answered["content"], answered["stop_reason"], answered["usage"]["input"]) == ([], "error", 9)


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Blob:
    data: bytes
    when: datetime  # naive, as some libraries hand them over


def test_stray_values_are_kept_and_the_session_lives_on(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    def report() -> dict[str, Any]:
        return {
            "color": Color.RED,
            "blob": Blob(b"\x00\xff", datetime(2026, 1, 2, 3, 4, 5)),
            "ratio": float("nan"),
        }

    def script(request: LlmRequest) -> list[LlmResponse]:
        if not answers(request):
            return [reply(call("call-1", "report"), given=2, made=1)]
        return [reply(types.Part(text="ok"), given=3, made=1)]

    agent = LlmAgent(name="root", model=Scripted(script=script), tools=[report])

    async def main() -> None:
        async with recording(path) as recorder:
            await run(recorder, agent, "report")

    asyncio.run(main())
    check_file(path)
    [end] = events(path, "tool_exec_end")
    assert end.result == {
        "color": "red",
        "blob": {"data": "AP8=", "when": "2026-01-02T03:04:05"},
        "ratio": "NaN",
    }


class Opaque:
    """A value no JSON encoder knows."""

    def __repr__(self) -> str:
        return "<opaque>"


def test_settings_that_do_not_serialize_do_not_fail_the_run(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    settings = types.GenerateContentConfig(
        temperature=0.5, max_output_tokens=64, http_options=types.HttpOptions(extra_body={"opaque": Opaque()})
    )
    agent = LlmAgent(
        name="root",
        model=Scripted(script=lambda request: [reply(types.Part(text="ok"), given=2, made=1)]),
        generate_content_config=settings,
    )

    async def main() -> list[Event]:
        async with recording(path) as recorder:
            return await run(recorder, agent, "hi")

    assert [e.content.parts[0].text for e in asyncio.run(main()) if e.content and e.content.parts] == ["ok"]
    check_file(path)
    [request] = events(path, "model_request")
    assert request.request is not None
    extra = request.request["config"]["extra"]
    assert extra["temperature"] == 0.5 and extra["httpOptions"]["extraBody"] == {
        "opaque": {"type": "test_google_adk.Opaque", "repr": "<opaque>"}
    }
    assert "systemInstruction" not in extra  # the request's first message
    assert request.request["config"]["max_tokens"] == 64 and "maxOutputTokens" not in extra


def test_resume_from_the_checkpoint_in_a_reopened_session(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    seen: list[LlmRequest] = []

    def script(request: LlmRequest) -> list[LlmResponse]:
        seen.append(request)
        return [reply(types.Part(text=f"answer {len(seen)}"), given=3, made=2)]

    agent = LlmAgent(name="root", model=Scripted(script=script))

    async def turn(prompt: str) -> None:
        async with recording(path, checkpoint=True) as recorder:
            await run(recorder, agent, prompt, history=recorder.history())

    asyncio.run(turn("first"))
    asyncio.run(turn("second"))  # a new session service: the conversation comes from the file
    assert [(c.role, (c.parts or [])[0].text) for c in seen[1].contents] == [
        ("user", "first"),
        ("model", "answer 1"),
        ("user", "second"),
    ]
    summary = check_file(path)
    assert len(summary.runs) == 2 and summary.checkpoints == 2
    assert summary.usage["total_tokens"] == 10
    ids = [e.execution.id for e in events(path, "model_exec_start") if e.execution]
    assert ids == ["model-1", "model-2"]  # the resumed run goes on counting turns
    assert [m.role for m in messages(path)] == ["user", "assistant", "user", "assistant"]
    # the resumed run's request refers to the messages the first run wrote
    assert check_each_message_once(path)["messages"] == 4


def test_a_streamed_run(tmp_path: Path, every_event: dict[str, list[session.Event]]) -> None:
    path = tmp_path / "chat.jsonl"

    def script(request: LlmRequest) -> list[LlmResponse]:
        if not answers(request):
            return [reply(call("call-1", "add", a=1, b=2), given=4, made=2)]
        chunks = [
            reply(types.Part(text=text), given=0, made=0, partial=True) for text in ("the answer ", "is 3")
        ]
        return [*chunks, reply(types.Part(text="the answer is 3"), given=6, made=3)]

    agent = LlmAgent(name="root", model=Scripted(script=script), tools=[add])

    async def main() -> list[Event]:
        async with recording(path) as recorder:
            return await run(
                recorder, agent, "add 1 and 2", config=RunConfig.model_validate({"streaming_mode": "sse"})
            )

    given = asyncio.run(main())
    assert sum(bool(e.partial) for e in given) == 2
    summary = check_file(path)
    assert summary.counts["model_exec_end"] == 2 and summary.usage["total_tokens"] == 15
    assert summary.runs[0].end_reason == "stop"
    assert [m.content for m in messages(path) if m.role == "assistant"][-1] == [
        {"type": "text", "text": "the answer is 3"}
    ]
    check_both_versions(every_event, tmp_path)


def test_a_stream_closed_early_is_aborted(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    agent = LlmAgent(name="root", model=Scripted(script=two_tools_then_answer), tools=[add, lookup])

    async def main() -> None:
        async with recording(path) as recorder:
            service = InMemorySessionService()
            runner = Runner(
                app=App(name="app", root_agent=agent, plugins=[recorder]), session_service=service
            )
            chat = await service.create_session(app_name="app", user_id="u")
            message = types.Content(role="user", parts=[types.Part(text="add 2 and 3")])
            stream = runner.run_async(user_id="u", session_id=chat.id, new_message=message)
            first = await stream.__anext__()  # the tool calls: the rest is never read
            assert first.get_function_calls()
            await stream.aclose()

    asyncio.run(main())
    check_aborted(path)
    assert [e.execution.id for e in events(path, "model_exec_end") if e.execution] == ["model-1"]


@pytest.mark.parametrize("stop", ["cancel", "ctrl-c"])
def test_a_cancelled_or_interrupted_run_ends_aborted(tmp_path: Path, stop: str) -> None:
    """ADK calls no plugin callback when a run is cancelled (a task cancelled, or Ctrl-C,
    which ``asyncio.run`` turns into a cancellation): the run ends ``aborted`` when its
    ``recording`` block is left, the tool call under way failed."""
    path = tmp_path / "chat.jsonl"
    started = asyncio.Event()

    async def slow(key: str) -> str:
        started.set()
        if stop == "ctrl-c":
            signal.raise_signal(signal.SIGINT)
        await asyncio.sleep(60)
        return key

    agent = LlmAgent(
        name="root",
        model=Scripted(script=lambda request: [reply(call("call-1", "slow", key="x"), given=1, made=1)]),
        tools=[slow],
    )

    async def main() -> None:
        async with recording(path) as recorder:
            if stop == "ctrl-c":
                await run(recorder, agent, "x")
            task = asyncio.ensure_future(run(recorder, agent, "x"))
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    if stop == "ctrl-c":
        # Python's own handler, which asyncio.run turns into a cancellation, even where the
        # tests were started with SIGINT ignored (a background job of a shell without job control)
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            with pytest.raises(KeyboardInterrupt):
                asyncio.run(main())
        finally:
            signal.signal(signal.SIGINT, previous)
    else:
        asyncio.run(main())
    check_aborted(path)
    [end] = events(path, "tool_exec_end")
    assert end.is_error and (end.error or {}).get("type") in ("CancelledError", "KeyboardInterrupt"), end
    assert session.summarize(path).counts["turn_end"] == 1


def test_a_redactor_removes_a_secret_from_tool_arguments_and_results(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    def login(token: str) -> str:
        return f"logged in with {token}"

    def script(request: LlmRequest) -> list[LlmResponse]:
        if not answers(request):
            return [reply(call("call-1", "login", token=SECRET), given=2, made=1)]
        return [reply(types.Part(text="in"), given=3, made=1)]

    agent = LlmAgent(name="root", model=Scripted(script=script), tools=[login])

    async def main() -> None:
        async with recording(path, redact=scrub) as recorder:
            await run(recorder, agent, "log in")

    asyncio.run(main())
    check_redacted(path)


def rate_limited(request: LlmRequest) -> list[LlmResponse]:
    """Fail as a rate-limited Gemini does (HTTP 429)."""
    raise ClientError(429, {"error": {"code": 429, "message": "rate limit", "status": "RESOURCE_EXHAUSTED"}})


def helper_agent(model: BaseLlm | None = None) -> LlmAgent:
    """A sub-agent that looks a key up with its tool, then answers; its *model* in front of
    the scripted one (a ``FallbackModel`` falls back to it)."""

    def script(request: LlmRequest) -> list[LlmResponse]:
        if not answers(request):
            return [reply(call("call-l", "lookup", key="x"), given=10, made=3)]
        return [reply(types.Part(text="42"), given=12, made=1)]

    scripted = Scripted(model="backup", script=script)
    given = scripted if model is None else FallbackModel(models=[model, scripted])
    return LlmAgent(name="helper", description="answers questions", model=given, tools=[lookup])


# AgentTool gives its own runner the parent's plugins through the argument ADK deprecates
@pytest.mark.filterwarnings("ignore:The `plugins` argument is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings(r"ignore:\[EXPERIMENTAL\] feature FALLBACK_MODEL:UserWarning")
def test_a_sub_agent_is_nested_in_its_tool_call(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    def script(request: LlmRequest) -> list[LlmResponse]:
        if not answers(request):
            return [reply(call("call-ask", "helper", request="what is it?"), given=5, made=2)]
        return [reply(types.Part(text="it is 42"), given=8, made=2)]

    helper = helper_agent(Scripted(model="primary", script=rate_limited))  # it falls back each call
    agent = LlmAgent(name="root", model=Scripted(script=script), tools=[AgentTool(helper)])

    async def main() -> None:
        async with recording(path) as recorder:
            await run(recorder, agent, "ask the helper")

    asyncio.run(main())
    check_file(path)
    check_nested(path, "call-ask", 13 + 13, tools=("call-l",))
    [tool] = [e.execution for e in events(path, "tool_exec_start") if e.tool_id == "call-ask"]
    assert tool is not None
    starts = [(e.execution.id, e.execution.attempt) for e in events(path, "model_exec_start") if e.execution]
    nested = f"{tool.id}/model-"
    assert starts == [
        ("model-1", 1),
        (nested + "1", 1),
        (nested + "1", 2),
        (nested + "2", 1),
        (nested + "2", 2),
        ("model-2", 1),
    ]
    ends = {e.tool_id: e for e in events(path, "tool_exec_end")}
    assert ends["call-ask"].result == "42" and not ends["call-ask"].is_error
    assert ends["call-l"].result == "entry x"


@pytest.mark.filterwarnings("ignore:The `plugins` argument is deprecated:DeprecationWarning")
def test_a_sub_agent_of_a_sub_agent_is_nested_two_levels_down(tmp_path: Path) -> None:
    """The root's agent tool runs a sub-agent whose own agent tool runs another: the inner
    agent's call is nested in the sub-agent's tool call, not beside the sub-agent's calls."""
    path = tmp_path / "chat.jsonl"

    def asking(call_id: str, name: str, text: str) -> Script:
        def script(request: LlmRequest) -> list[LlmResponse]:
            if not answers(request):
                return [reply(call(call_id, name, request="what is it?"), given=5, made=2)]
            return [reply(types.Part(text=text), given=8, made=2)]

        return script

    inner = LlmAgent(
        name="inner",
        description="knows",
        model=Scripted(script=lambda request: [reply(types.Part(text="42"), given=20, made=1)]),
    )
    middle = LlmAgent(
        name="middle",
        description="asks the inner agent",
        model=Scripted(script=asking("call-in", "inner", "it is 42")),
        tools=[AgentTool(inner)],
    )
    agent = LlmAgent(
        name="root", model=Scripted(script=asking("call-mid", "middle", "done")), tools=[AgentTool(middle)]
    )

    async def main() -> None:
        async with recording(path) as recorder:
            await run(recorder, agent, "ask")

    asyncio.run(main())
    summary = check_file(path)
    assert summary.usage["total_tokens"] == 7 + (7 + 10) + 21 + 10
    check_nested(path, "call-mid", 7 + 10, tools=("call-in",))
    check_nested(path, "call-in", 21)
    [down] = [e.execution for e in events(path, "tool_exec_start") if e.tool_id == "call-in"]
    assert down is not None and down.parent_id.endswith("call-mid/model-1"), down
    starts = [e.execution.id for e in events(path, "model_exec_start") if e.execution]
    mid = down.parent_id.rsplit("/", 1)[0]
    assert starts == ["model-1", mid + "/model-1", down.id + "/model-1", mid + "/model-2", "model-2"]
    ends = {e.tool_id: e for e in events(path, "tool_exec_end")}
    assert (ends["call-in"].result, ends["call-mid"].result) == ("42", "it is 42")


def test_an_agent_transferred_to_takes_the_next_turns(tmp_path: Path) -> None:
    """A multi-agent tree: the root transfers the conversation to its sub-agent, whose model
    and tool calls are the run's next turns (one invocation)."""
    path = tmp_path / "chat.jsonl"

    def script(request: LlmRequest) -> list[LlmResponse]:
        return [reply(call("call-t", "transfer_to_agent", agent_name="helper"), given=4, made=1)]

    agent = LlmAgent(name="root", model=Scripted(script=script), sub_agents=[helper_agent()])

    async def main() -> None:
        async with recording(path) as recorder:
            await run(recorder, agent, "ask the helper")

    asyncio.run(main())
    summary = check_file(path)
    assert summary.usage["total_tokens"] == 5 + 13 + 13
    assert [e.execution.id for e in events(path, "model_exec_end") if e.execution] == [
        "model-1",
        "model-2",
        "model-3",
    ]
    assert [(e.tool_id, e.tool) for e in events(path, "tool_exec_start")] == [
        ("call-t", "transfer_to_agent"),
        ("call-l", "lookup"),
    ]
    assert summary.runs[0].end_reason == "stop"


@pytest.mark.filterwarnings(r"ignore:\[EXPERIMENTAL\] feature FALLBACK_MODEL:UserWarning")
def test_a_fallback_model_falling_back_is_a_retry(tmp_path: Path) -> None:
    """ADK's ``FallbackModel`` tries its next model when one fails with a retriable status:
    each model tried is an attempt of the one call, after a ``retry`` event naming the
    failure."""
    path = tmp_path / "chat.jsonl"
    backup = Scripted(model="backup", script=two_tools_then_answer)
    model = FallbackModel(models=[Scripted(model="primary", script=rate_limited), backup])
    agent = LlmAgent(name="root", model=model, tools=[add, lookup])

    async def main() -> None:
        async with recording(path) as recorder:
            await run(recorder, agent, "add 2 and 3, and look up x")

    asyncio.run(main())
    summary = check_file(path)
    assert summary.usage["total_tokens"] == 18 + 28
    ends = [
        (e.execution.id, e.execution.attempt, e.error) for e in events(path, "model_exec_end") if e.execution
    ]
    failed = {"message": "model primary failed with status 429"}
    assert ends == [
        ("model-1", 1, failed),
        ("model-1", 2, None),
        ("model-2", 1, failed),
        ("model-2", 2, None),
    ]
    assert [e.retry.error for e in events(path, "retry") if e.retry] == [failed] * 2


def test_one_recorder_records_one_run(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    agent = LlmAgent(
        name="root", model=Scripted(script=lambda r: [reply(types.Part(text="hi"), given=1, made=1)])
    )

    async def main() -> None:
        async with recording(path) as recorder:
            await run(recorder, agent, "one")
            await run(recorder, agent, "two")

    with pytest.raises(RuntimeError, match="records one run"):
        asyncio.run(main())
    assert check_file(path).runs[0].end_reason == "stop"


def test_the_example_script_runs_as_written(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    assert run_example("google_adk_example.py", path) == ["It is sunny in Paris."] * 2
    check_example(path, 4, ["weather", "weather"])


def reading(result: str) -> LlmAgent:
    """An agent that reads once (the tool returns *result*), then answers."""

    def read(key: str) -> str:
        """Read a key."""
        return result

    def script(request: LlmRequest) -> list[LlmResponse]:
        if not answers(request):
            return [reply(call("call-1", "read", key="x"), given=5, made=2)]
        return [reply(types.Part(text="ok"), given=8, made=2)]

    return LlmAgent(name="root", model=Scripted(script=script), tools=[read])


def test_the_event_loop_neither_writes_nor_syncs(
    tmp_path: Path, file_calls: list[tuple[str, int, bool]]
) -> None:
    path = tmp_path / "chat.jsonl"

    async def main() -> None:
        async with recording(path, checkpoint=True) as recorder:
            await run(recorder, reading("entry x"), "read x")

    asyncio.run(main())
    check_off_the_loop(file_calls, path)
    assert len(events(path, "tool_exec_end")) == 1
    check_file(path)


def test_a_record_that_cannot_be_written_fails_the_run(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    async def main() -> None:
        async with recording(path, max_line_bytes=4096) as recorder:
            await run(recorder, reading("x" * 5000), "read x")

    with pytest.raises(session.RecordingError, match="longer than max_line_bytes"):
        asyncio.run(main())
    assert len(events(path, "tool_exec_start")) == 1  # what came before is there, readable


def test_a_string_converts_to_itself() -> None:
    text = "a line of a file\n" * 100_000 + "\ud800"  # a lone surrogate: the writer escapes it
    assert to_json(text) is text  # no pass over it, no copy
    assert to_json({"text": "\ud800"}) == {"type": "builtins.dict", "repr": "{'text': '\\ud800'}"}


def test_a_recording_cancelled_while_its_file_opens_leaves_it_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_cancelled_while_opening(recording, tmp_path / "chat.jsonl", monkeypatch)


def test_a_recording_interrupted_as_its_file_starts_opening_leaves_it_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_interrupted_while_opening(recording, tmp_path / "chat.jsonl", monkeypatch)


def test_a_recording_cancelled_as_the_program_ends_leaves_its_file_closed(tmp_path: Path) -> None:
    check_cancelled_as_the_program_ends("session_google_adk", tmp_path / "chat.jsonl")


class Together:
    """Where *parties* coroutines wait until all of them have come (``asyncio.Barrier``,
    which Python 3.10 lacks): so that they are under way at once."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.come = 0
        self.all_here = asyncio.Event()

    async def meet(self) -> None:
        self.come += 1
        if self.come == self.parties:
            self.all_here.set()
        await self.all_here.wait()


def branch_agent(name: str, meetings: list[Together] = ()) -> LlmAgent:  # type: ignore[assignment]
    """A branch's agent: its model asks for its own tool (call id ``call-<name>``), then
    answers ``<name> done``.  Given *meetings* (three, which another branch's agent shares),
    its first model call, its tool call and its second model call each wait at theirs until
    the other branch's is under way too."""

    async def tool(key: str) -> str:
        if meetings:
            await meetings[1].meet()
        return f"{name} {key}"

    tool.__name__ = f"tool_{name}"

    class Meeting(Scripted):
        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            if meetings:
                await meetings[2 if answers(llm_request) else 0].meet()
            async for response in super().generate_content_async(llm_request, stream):
                yield response

    def script(request: LlmRequest) -> list[LlmResponse]:
        if not answers(request):
            return [reply(call(f"call-{name}", f"tool_{name}", key="x"), given=3, made=1)]
        return [reply(types.Part(text=f"{name} done"), given=5, made=1)]

    return LlmAgent(name=name, model=Meeting(script=script), tools=[tool])


def check_branches(path: Path, names: tuple[str, ...]) -> None:
    """Each branch's agent (of *names*, ``branch_agent``'s) made its two model calls and its
    tool call, recorded apart from the other branch's: its tool call in the model call that
    asked for it, its committed messages (its model's replies, its tool's result) each in
    the call that made it, and every call started once and ended once."""
    summary = check_file(path)
    assert summary.usage["total_tokens"] == 10 * len(names)
    ends = {e.execution.id: e for e in events(path, "model_exec_end") if e.execution}
    starts = [e.execution.id for e in events(path, "model_exec_start") if e.execution]
    assert sorted(starts) == sorted(ends) and len(starts) == 2 * len(names)
    said = {
        (block.get("text") or block.get("tool_call", {}).get("id")): call_id
        for call_id, end in ends.items()
        for block in (end.message or {}).get("value", {}).get("content", [])
    }
    tools = {e.tool_id: e.execution for e in events(path, "tool_exec_start")}
    for name in names:
        tool = tools[f"call-{name}"]
        assert tool is not None and tool.parent_id == said[f"call-{name}"], (tool, said)
        assert said[f"{name} done"] != tool.parent_id
    for end in events(path, "message_end"):
        message = session.JSONCodec().decode(end.message)
        if message.role == "assistant":
            block = message.content[0]
            assert end.execution is not None, end
            assert said[block.get("text") or block["tool_call"]["id"]] == end.execution.id, end
        elif message.role == "tool":
            assert end.execution == tools[message.metadata["tool_call_id"]], end


@pytest.mark.filterwarnings("ignore:ParallelAgent is deprecated:DeprecationWarning")
@pytest.mark.parametrize("runs", ["ParallelAgent", "Workflow"])
def test_branches_run_at_once_are_recorded_apart(tmp_path: Path, runs: str) -> None:
    """Two agents run at once, a ``ParallelAgent``'s branches or the nodes of a workflow
    graph that both follow its start (and meet in a join), in one invocation: each one's
    model calls and tool call, under way at once with the other's, are recorded as its own."""
    path = tmp_path / "chat.jsonl"
    meetings = [Together(2) for _ in range(3)]
    one, other = branch_agent("a", meetings), branch_agent("b", meetings)
    agent: BaseAgent | Workflow = ParallelAgent(name="both", sub_agents=[one, other])
    if runs == "Workflow":
        join = JoinNode(name="join")
        agent = Workflow(name="both", edges=[(START, one), (START, other), (one, join), (other, join)])

    async def main() -> None:
        async with recording(path) as recorder:
            await run(recorder, agent, "go")

    asyncio.run(main())
    check_branches(path, ("a", "b"))
    assert check_file(path).runs[0].end_reason == "stop"


@pytest.mark.filterwarnings("ignore:(LoopAgent|SequentialAgent) is deprecated:DeprecationWarning")
def test_sequential_and_loop_agents_are_recorded_call_by_call(tmp_path: Path) -> None:
    """A ``SequentialAgent`` of two agents, the second a ``LoopAgent`` running one twice
    (the second time it answers at once, its tool's result in the conversation): each model
    call and tool call in turn, in the call that made it."""
    path = tmp_path / "chat.jsonl"
    agent = SequentialAgent(
        name="steps",
        sub_agents=[
            branch_agent("a"),
            LoopAgent(name="again", sub_agents=[branch_agent("b")], max_iterations=2),
        ],
    )

    async def main() -> None:
        async with recording(path) as recorder:
            await run(recorder, agent, "go")

    asyncio.run(main())
    ids = [e.execution.id for e in events(path, "model_exec_start") if e.execution]
    assert ids == [f"model-{n}" for n in range(1, 6)]
    tools = {e.tool_id: e.execution.parent_id for e in events(path, "tool_exec_start") if e.execution}
    assert tools == {"call-a": "model-1", "call-b": "model-3"}
    assert check_file(path).runs[0].end_reason == "stop"


def test_a_before_model_callback_answering_is_no_model_call(tmp_path: Path) -> None:
    """An agent's ``before_model_callback`` that answers itself: the model is not called, so
    the file holds no model call, and the answer as a message the callback made."""
    path = tmp_path / "chat.jsonl"

    def canned(callback_context: Any, llm_request: LlmRequest) -> LlmResponse:
        return LlmResponse(content=types.Content(role="model", parts=[types.Part(text="from the cache")]))

    agent = LlmAgent(name="root", model=Scripted(script=two_tools_then_answer), before_model_callback=canned)

    async def main() -> None:
        async with recording(path) as recorder:
            await run(recorder, agent, "hi")

    asyncio.run(main())
    summary = check_file(path)
    assert "model_exec_start" not in summary.counts and "model_request" not in summary.counts
    assert summary.runs[0].end_reason == "stop"
    [answer] = [m for m in messages(path) if m.role == "assistant"]
    assert answer.content == [{"type": "text", "text": "from the cache"}]
    assert answer.metadata == {"source": "before_model_callback"}
    assert [e.execution for e in events(path, "message_end")] == [None, None]


def test_a_model_error_rescued_by_a_callback_ends_the_call_once(tmp_path: Path) -> None:
    """An ``on_model_error_callback`` that answers for the failed model: the attempt ends
    once, in its error; the run goes on with the callback's answer, a message it made."""
    path = tmp_path / "chat.jsonl"

    def failing(request: LlmRequest) -> list[LlmResponse]:
        raise ConnectionError("model unreachable")

    def rescue(callback_context: Any, llm_request: LlmRequest, error: Exception) -> LlmResponse:
        return LlmResponse(content=types.Content(role="model", parts=[types.Part(text="try again later")]))

    agent = LlmAgent(name="root", model=Scripted(script=failing), on_model_error_callback=rescue)

    async def main() -> None:
        async with recording(path) as recorder:
            await run(recorder, agent, "hi")

    asyncio.run(main())
    summary = check_file(path)
    [end] = events(path, "model_exec_end")
    assert end.error == {"type": "ConnectionError", "message": "model unreachable"}
    [answer] = [m for m in messages(path) if m.role == "assistant"]
    assert answer.content == [{"type": "text", "text": "try again later"}]
    assert answer.metadata == {"source": "on_model_error_callback"}
    assert summary.runs[0].end_reason == "stop"


@pytest.mark.parametrize("rescuer", ["on_tool_error_callback", "ReflectAndRetryToolPlugin"])
def test_a_tool_error_rescued_ends_the_call_once(tmp_path: Path, rescuer: str) -> None:
    """A tool that raises, answered for by the agent's ``on_tool_error_callback`` or by ADK's
    ``ReflectAndRetryToolPlugin``: the tool call ends once, in its error, and the model is
    told the rescuer's answer, a tool result that says the call failed and who answered."""
    path = tmp_path / "chat.jsonl"

    def rescue(tool: Any, args: dict[str, Any], tool_context: Any, error: Exception) -> dict[str, Any]:
        return {"result": "no entry"}

    def script(request: LlmRequest) -> list[LlmResponse]:
        if not answers(request):
            return [reply(call("call-1", "broken_lookup", key="x"), given=2, made=1)]
        return [reply(types.Part(text="none found"), given=3, made=1)]

    by_callback = rescuer == "on_tool_error_callback"
    plugins: list[BasePlugin] = [] if by_callback else [ReflectAndRetryToolPlugin(max_retries=1)]
    agent = LlmAgent(
        name="root",
        model=Scripted(script=script),
        tools=[broken_lookup],
        on_tool_error_callback=rescue if by_callback else None,
    )

    async def main() -> None:
        async with recording(path) as recorder:
            await run(recorder, agent, "look up x", plugins=plugins)

    asyncio.run(main())
    summary = check_file(path)
    [end] = events(path, "tool_exec_end")
    assert end.is_error and end.error is not None and end.error["type"] == "KeyError", end
    [result] = [m for m in messages(path) if m.role == "tool"]
    assert result.metadata == {"tool_call_id": "call-1", "is_error": True, "source": "on_tool_error_callback"}
    assert summary.runs[0].end_reason == "stop"
    [agent_end] = events(path, "agent_end")
    assert agent_end.summary is not None and agent_end.summary.tool_errors == 1


def test_a_stream_stopped_mid_reply_ends_its_model_call_aborted(tmp_path: Path) -> None:
    """The consumer of a streamed run stops reading after the first chunk of a reply, while
    the model is still answering: the run ends aborted, and so does the model call."""
    path = tmp_path / "chat.jsonl"

    class Slow(Scripted):
        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            yield reply(types.Part(text="the "), given=0, made=0, partial=True)
            await asyncio.sleep(60)  # the rest never comes: the run is closed first
            yield reply(types.Part(text="the answer"), given=6, made=3)

    agent = LlmAgent(name="root", model=Slow())

    async def main() -> None:
        async with recording(path) as recorder:
            service = InMemorySessionService()
            runner = Runner(
                app=App(name="app", root_agent=agent, plugins=[recorder]), session_service=service
            )
            chat = await service.create_session(app_name="app", user_id="u")
            message = types.Content(role="user", parts=[types.Part(text="hi")])
            config = RunConfig.model_validate({"streaming_mode": "sse"})
            stream = runner.run_async(user_id="u", session_id=chat.id, new_message=message, run_config=config)
            first = await stream.__anext__()
            assert first.partial
            await stream.aclose()

    asyncio.run(main())
    check_aborted(path)
    [end] = events(path, "model_exec_end")
    assert end.error is not None and end.error["type"] == "CancelledError", end


def test_a_tool_cancelled_by_its_failing_sibling_ends(tmp_path: Path) -> None:
    """Two tool calls at once, one raising while the other still runs: ADK cancels the other
    (2.11 tells no plugin of it); both calls end, the cancelled one aborted."""
    path = tmp_path / "chat.jsonl"

    async def slow(key: str) -> str:
        await asyncio.sleep(60)
        return key

    def script(request: LlmRequest) -> list[LlmResponse]:
        return [
            reply(
                call("call-slow", "slow", key="x"),
                call("call-bad", "broken_lookup", key="x"),
                given=2,
                made=1,
            )
        ]

    agent = LlmAgent(name="root", model=Scripted(script=script), tools=[slow, broken_lookup])

    async def main() -> None:
        async with recording(path) as recorder:
            await run(recorder, agent, "x")

    with pytest.raises(KeyError):
        asyncio.run(main())
    check_file(path)
    ends = {e.tool_id: (e.error or {}).get("type") for e in events(path, "tool_exec_end")}
    assert ends == {"call-bad": "KeyError", "call-slow": "CancelledError"}


def test_a_tool_under_way_when_its_agent_times_out_ends(tmp_path: Path) -> None:
    """An agent given ``timeout=`` runs out of time while its tool runs: ADK cancels the
    tool (2.11 tells no plugin of it) and ends the run in the timeout; the tool call ends,
    aborted, and the run in that error."""
    path = tmp_path / "chat.jsonl"
    started = asyncio.Event()

    async def slow(key: str) -> str:
        started.set()
        await asyncio.sleep(60)
        return key

    agent = LlmAgent(
        name="root",
        model=Scripted(script=lambda request: [reply(call("call-slow", "slow", key="x"), given=2, made=1)]),
        tools=[slow],
        timeout=0.5,
    )

    async def main() -> None:
        async with recording(path) as recorder:
            await run(recorder, agent, "x")

    with pytest.raises(NodeTimeoutError):
        asyncio.run(main())
    summary = check_file(path)
    assert summary.runs[0].end_reason == "error"
    [end] = events(path, "tool_exec_end")
    assert end.is_error and (end.error or {}).get("type") == "CancelledError", end
