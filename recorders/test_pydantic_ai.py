"""The pydantic-ai recorder against the real framework, offline, with its FunctionModel."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import enum
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    SECRET,
    as_read,
    check_aborted,
    check_both_versions,
    check_cancelled_as_the_program_ends,
    check_cancelled_while_opening,
    check_conversation,
    check_converted_once,
    check_each_message_once,
    check_example,
    check_file,
    check_gap,
    check_interrupted_while_opening,
    check_nested,
    check_off_the_loop,
    check_redacted,
    check_tool_failures,
    events,
    messages,
    need,
    run_example,
    scrub,
)

need("pydantic_ai")

from pydantic_ai import Agent, ModelRetry, RunContext, ToolFailed
from pydantic_ai.capabilities import AbstractCapability, ModelFallback, ProcessHistory
from pydantic_ai.exceptions import ModelRateLimitError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage
from session_pydantic_ai import _Writer, recording, to_json, to_messages

import session


def rate_limited(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    raise ModelRateLimitError("primary", "429: rate limit reached", retry_after=0.0)


def two_tools_then_answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """First call: two tool calls at once; then an answer naming what the tools returned."""
    returns = [
        p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)
    ]
    if not returns:
        calls = [
            ToolCallPart("add", {"a": 2, "b": 3}, "call-add"),
            ToolCallPart("lookup", '{"key": "x"}', "call-lookup"),
        ]
        return ModelResponse(calls, usage=RequestUsage(input_tokens=11, output_tokens=7))
    text = "; ".join(f"{p.tool_name}={p.model_response_str()}" for p in returns)
    return ModelResponse([TextPart(f"done: {text}")], usage=RequestUsage(input_tokens=23, output_tokens=5))


def make_agent(failure: Exception) -> Agent[None, str]:
    """An agent whose ``lookup`` tool raises *failure*."""
    agent = Agent(
        FunctionModel(rate_limited, model_name="primary"),
        capabilities=[ModelFallback(FunctionModel(two_tools_then_answer, model_name="backup"))],
    )

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    @agent.tool_plain
    def lookup(key: str) -> str:
        raise failure

    return agent


def test_retry_parallel_tools_and_usage(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    async def main() -> str:
        async with recording(path) as recorder:
            result = await make_agent(ToolFailed("no entry 'x'")).run(
                "add 2 and 3, and look up x", capabilities=[recorder]
            )
        return result.output

    output = asyncio.run(main())
    assert output.startswith("done: add=5; lookup=")

    summary = check_file(path)
    # two successful attempts (the tool calls, the answer); the rate-limited one has no usage
    assert summary.usage == {"input": 34, "output": 12, "cache_read": 0, "cache_write": 0, "total_tokens": 46}
    assert summary.runs[0].end_reason == "stop"
    ends = events(path, "model_exec_end")
    assert [(e.execution.id, e.execution.attempt, bool(e.error)) for e in ends if e.execution] == [
        ("model-1", 1, True),
        ("model-1", 2, False),
        ("model-2", 1, True),  # every step starts at the primary again
        ("model-2", 2, False),
    ]
    assert ends[0].error is not None and ends[0].error["type"] == "ModelRateLimitError"
    assert [e.retry.error for e in events(path, "retry") if e.retry] == [ends[0].error, ends[2].error]
    requests = events(path, "model_request")
    assert requests[1].request is not None and requests[1].request["config"]["extra"]["model"] == "backup"
    assert requests[0].request is not None
    assert {tool["name"] for tool in requests[0].request["tools"]} == {"add", "lookup"}

    tool_ends = {e.tool_id: e for e in events(path, "tool_exec_end")}
    assert tool_ends["call-add"].result == 5 and not tool_ends["call-add"].is_error
    assert tool_ends["call-lookup"].is_error
    assert tool_ends["call-lookup"].error == {"message": "no entry 'x'", "type": "ToolFailedError"}
    assert [e.args for e in events(path, "tool_invoke_start")] == [{"a": 2, "b": 3}, {"key": "x"}]

    check_conversation(path, "done: add=5")


def test_a_streamed_run(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        if len(messages) == 1:
            yield {0: DeltaToolCall(name="add", json_args='{"a": 1, "b": 2}', tool_call_id="call-1")}
        else:
            yield "the answer "
            yield "is 3"

    agent = Agent(FunctionModel(stream_function=stream))

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    async def main() -> str:
        async with recording(path) as recorder, agent.run_stream(
            "add 1 and 2", capabilities=[recorder]
        ) as result:
            return await result.get_output()

    assert asyncio.run(main()) == "the answer is 3"
    summary = check_file(path)
    assert summary.counts["model_exec_end"] == 2
    assert summary.runs[0].end_reason == "stop"
    assert [m.content for m in messages(path) if m.role == "assistant"][-1] == [
        {"type": "text", "text": "the answer is 3"}
    ]


def test_agent_ending_in_an_error(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    agent = make_agent(KeyError("x"))

    async def main() -> None:
        async with recording(path) as recorder:
            await agent.run("look it up", capabilities=[recorder])

    with pytest.raises(KeyError):
        asyncio.run(main())
    summary = check_file(path)
    run = summary.runs[0]
    assert run.end_reason == "error" and run.error == {"message": "'x'", "type": "KeyError"}
    assert summary.counts["turn_end"] == 1


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Blob:
    data: bytes
    when: datetime  # naive, as some libraries hand them over


@dataclasses.dataclass
class Report:
    color: Color
    blob: Blob
    ratio: float


def test_stray_values_are_kept_and_the_session_lives_on(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    def call_report(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse([ToolCallPart("report", {}, "call-1")])
        return ModelResponse([TextPart("ok")])

    agent = Agent(FunctionModel(call_report))

    @agent.tool_plain
    def report() -> Report:
        return Report(
            color=Color.RED, blob=Blob(b"\x00\xff", datetime(2026, 1, 2, 3, 4, 5)), ratio=float("nan")
        )

    async def main() -> None:
        async with recording(path) as recorder:
            await agent.run("report", capabilities=[recorder])

    asyncio.run(main())
    check_file(path)
    [end] = events(path, "tool_exec_end")
    assert end.result == {
        "color": "red",
        "blob": {"data": "AP8=", "when": "2026-01-02T03:04:05"},
        "ratio": "NaN",
    }


def test_an_integer_too_long_for_a_reader_is_kept_as_its_digits_and_the_run_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    huge = 10**5000  # pydantic writes it; int() reads 4300 digits at most, and so do readers

    def call_count(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse([ToolCallPart("count", {}, "call-1")])
        return ModelResponse([TextPart("ok")])

    agent = Agent(FunctionModel(call_count))

    @agent.tool_plain
    def count() -> dict[str, int]:
        return {"huge": huge, "small": 7}

    async def main() -> str:
        async with recording(path) as recorder:
            return (await agent.run("count", capabilities=[recorder])).output

    assert asyncio.run(main()) == "ok"
    check_file(path)
    [end] = events(path, "tool_exec_end")
    assert end.result == {"huge": "1" + "0" * 5000, "small": 7}


def test_resume_from_the_checkpoint_in_a_reopened_session(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    seen: list[list[ModelMessage]] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        return ModelResponse(
            [TextPart(f"answer {len(seen)}")], usage=RequestUsage(input_tokens=3, output_tokens=2)
        )

    agent = Agent(FunctionModel(answer))

    async def turn(prompt: str) -> str:
        async with recording(path, checkpoint=True) as recorder:
            result = await agent.run(prompt, message_history=recorder.history(), capabilities=[recorder])
        return result.output

    assert asyncio.run(turn("first")) == "answer 1"
    assert asyncio.run(turn("second")) == "answer 2"

    assert [type(m).__name__ for m in seen[1]] == ["ModelRequest", "ModelResponse", "ModelRequest"]
    summary = check_file(path)
    assert len(summary.runs) == 2 and summary.checkpoints == 2
    assert summary.usage["total_tokens"] == 10
    ids = [e.execution.id for e in events(path, "model_exec_start") if e.execution]
    assert ids == ["model-1", "model-2"]  # the resumed run goes on counting turns
    assert [m.role for m in messages(path)] == ["user", "assistant", "user", "assistant"]


def test_each_message_is_written_once(
    tmp_path: Path,
    sent_messages: dict[str, list[list[session.Message]]],
    every_event: dict[str, list[session.Event]],
) -> None:
    """Seven model calls over two runs, the second resuming the first's conversation: each
    message is written once, and every request reads back as the messages the model got."""
    path = tmp_path / "chat.jsonl"
    plan: list[list[ModelResponsePart]] = [
        [ToolCallPart("read", {"page": 1}, "call-1"), ToolCallPart("read", {"page": 2}, "call-2")],
        [ToolCallPart("read", '{"page": 3}', "call-3")],
        [ToolCallPart("read", {"page": 4}, "call-4")],
        [TextPart("read 4 pages")],
        [ToolCallPart("read", {"page": 5}, "call-5")],
        [ToolCallPart("read", {"page": 6}, "call-6")],
        [TextPart("read 6 pages")],
    ]
    sent: list[list[Any]] = []  # what each model call got, as the file would hold it

    def read_on(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(as_sent(messages))
        return ModelResponse(plan[len(sent) - 1], usage=RequestUsage(input_tokens=10, output_tokens=2))

    agent = Agent(FunctionModel(read_on), system_prompt="Read what you are asked to.")

    @agent.tool_plain
    def read(page: int) -> str:
        return f"page {page}: " + "lorem ipsum " * 300

    async def turn(prompt: str) -> str:
        async with recording(path, checkpoint=True) as recorder:
            result = await agent.run(prompt, message_history=recorder.history(), capabilities=[recorder])
        return result.output

    assert asyncio.run(turn("read pages 1 to 4")) == "read 4 pages"
    assert asyncio.run(turn("and pages 5 and 6")) == "read 6 pages"

    figures = check_each_message_once(path)
    # system, prompt, 3 x (calls, results), answer; prompt, 2 x (call, result)
    assert (figures["requests"], figures["messages"]) == (7, 15)
    assert figures["request_bytes"] * 3 < figures["whole_bytes"], figures  # 3.1 to 3.4 times less
    assert [e.request["messages"] if e.request else None for e in events(path, "model_request")] == sent
    written = Counter(r.run_id for r in session.iter_records(path) if r.type == "message")
    assert list(written.values()) == [9, 6]  # the resumed run wrote its new messages only
    assert [len(requests) for requests in sent_messages.values()] == [4, 3]
    check_converted_once(sent_messages)
    check_both_versions(every_event, tmp_path)


def as_sent(messages: list[ModelMessage]) -> list[Any]:
    """*messages* converted anew, as a file would hold them."""
    return [as_read(m) for message in messages for m in to_messages(message)]


@dataclasses.dataclass
class Remind(AbstractCapability[Any]):
    """A capability that adds a part to each request after the recorder's hook saw it."""

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        last = request_context.messages[-1]
        assert isinstance(last, ModelRequest)
        last.parts = [*last.parts, UserPromptPart(f"reminder {len(request_context.messages)}")]
        return request_context


def test_a_part_added_after_the_recorders_hook_is_sent(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    sent: list[list[Any]] = []

    def add_twice(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(as_sent(messages))
        if len(sent) < 3:
            return ModelResponse([ToolCallPart("add", {"a": len(sent), "b": 1}, f"call-{len(sent)}")])
        return ModelResponse([TextPart("done")])

    agent = Agent(FunctionModel(add_twice))

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    async def main() -> None:
        async with recording(path) as recorder:
            await agent.run("add", capabilities=[recorder, Remind()])

    asyncio.run(main())
    requests = [e.request["messages"] if e.request else None for e in events(path, "model_request")]
    assert [len(request or []) for request in requests] == [2, 5, 8]  # a reminder in each
    assert requests == sent
    check_each_message_once(path)


def test_a_field_replaced_twice_is_sent_as_it_is_now(tmp_path: Path) -> None:
    """The host tidies the prompt before each request and, once the payment went through,
    scrubs the card number from it: before the second request, its content is replaced
    twice, and the second list is made where CPython's free list puts it, at the address of
    the first request's (freed by the first replacement), so a part recognised by the
    addresses of its fields' values would be recorded as it was."""
    path = tmp_path / "chat.jsonl"
    sent: list[list[Any]] = []

    def pay_then_answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(as_sent(messages))
        if len(sent) == 1:
            return ModelResponse([ToolCallPart("pay", {"amount": 12}, "call-1")])
        return ModelResponse([TextPart("paid")])

    async def tidy(messages: list[ModelMessage]) -> list[ModelMessage]:
        prompt = messages[0].parts[0]
        assert isinstance(prompt, UserPromptPart) and isinstance(prompt.content, list)
        prompt.content = [str(item).strip() for item in prompt.content]
        if len(sent) == 1:  # paid: the card number is no longer needed
            prompt.content = [
                str(item).replace("4111 1111 1111 1111", "[REDACTED]") for item in prompt.content
            ]
        return messages

    agent = Agent(FunctionModel(pay_then_answer), capabilities=[ProcessHistory(tidy)])

    @agent.tool_plain
    def pay(amount: int) -> str:
        return f"paid {amount}"

    async def main() -> None:
        async with recording(path) as recorder:
            await agent.run(["pay 12 with my card 4111 1111 1111 1111 "], capabilities=[recorder])

    asyncio.run(main())
    assert sent[1][0]["value"]["content"] == [{"type": "text", "text": "pay 12 with my card [REDACTED]"}]
    assert [e.request["messages"] if e.request else None for e in events(path, "model_request")] == sent


def test_a_reply_sent_back_stamped_anew_is_the_one_recorded(tmp_path: Path) -> None:
    """A history processor that rebuilds each reply before every request (its parts, usage
    and model name, as one trimming what it sends does) sends back a new response stamped
    now each time: the file holds each reply once, as first recorded (version 2 refers to
    its record)."""
    path = tmp_path / "chat.jsonl"
    sent: list[list[Any]] = []

    def add_twice(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(as_sent(messages))
        if len(sent) < 3:
            return ModelResponse([ToolCallPart("add", {"a": len(sent), "b": 1}, f"call-{len(sent)}")])
        return ModelResponse([TextPart("done")])

    async def rebuild(messages: list[ModelMessage]) -> list[ModelMessage]:
        await asyncio.sleep(0.01)  # the copy's time is not the reply's
        return [
            ModelResponse(m.parts, usage=m.usage, model_name=m.model_name)
            if isinstance(m, ModelResponse)
            else m
            for m in messages
        ]

    agent = Agent(FunctionModel(add_twice), capabilities=[ProcessHistory(rebuild)])

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    async def main() -> None:
        async with recording(path) as recorder:
            await agent.run("add", capabilities=[recorder])

    asyncio.run(main())
    # the prompt, the first reply and its tool's result, the second and its tool's result
    assert check_each_message_once(path)["messages"] == 5
    replies = [
        e.message
        for e in events(path, "message_end")
        if e.message and e.message["value"]["role"] == "assistant"
    ]
    last = events(path, "model_request")[-1].request
    assert last is not None and [last["messages"][1], last["messages"][3]] == replies[:2]


def test_one_recorder_records_one_run(tmp_path: Path) -> None:
    agent = Agent(FunctionModel(lambda messages, info: ModelResponse([TextPart("hi")])))

    async def main() -> list[Any]:
        async with recording(tmp_path / "a.jsonl") as a, recording(tmp_path / "b.jsonl") as b:
            results = await asyncio.gather(agent.run("1", capabilities=[a]), agent.run("2", capabilities=[b]))
            with pytest.raises(RuntimeError, match="records one run"):
                await agent.run("3", capabilities=[a])
        return [r.output for r in results]

    assert asyncio.run(main()) == ["hi", "hi"]
    for name in ("a.jsonl", "b.jsonl"):
        assert check_file(tmp_path / name).counts["agent_end"] == 1


def test_the_model_argument_text_is_kept_or_marked_invalid(tmp_path: Path) -> None:
    parts = [
        ToolCallPart("add", '{"a": 1.50, "b": 2}', "call-1"),
        ToolCallPart("add", '{"a": NaN}', "call-2"),
        ToolCallPart("add", '{"a": ', "call-3"),
    ]
    [message] = to_messages(ModelResponse(parts))
    path = tmp_path / "chat.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        run.record(session.Event("message_end", message=message))
    assert '"args":{"a":1.50,"b":2}' in path.read_text()  # the number as the model wrote it
    [recorded] = messages(path)
    calls = [block["tool_call"] for block in recorded.content]
    assert [call.get("args_invalid", False) for call in calls] == [False, True, True]
    assert [call.get("args_raw_text") for call in calls[1:]] == ['{"a": NaN}', '{"a": ']


def test_every_way_a_tool_fails_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    def fail_every_way(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) > 1:
            return ModelResponse([TextPart("all failed")])
        calls = [
            ToolCallPart("lookup", {"key": "x"}, "call-raise"),
            ToolCallPart("retry", {}, "call-retry"),
            ToolCallPart("slow", {}, "call-timeout"),
            ToolCallPart("add", {"a": "two", "b": 3}, "call-args"),
            ToolCallPart("add", '{"a": ', "call-json"),
        ]
        return ModelResponse(calls, usage=RequestUsage(input_tokens=5, output_tokens=1))

    agent = Agent(FunctionModel(fail_every_way))

    @agent.tool_plain
    def lookup(key: str) -> str:
        raise ToolFailed(f"no entry {key!r}")

    @agent.tool_plain
    def retry() -> str:
        raise ModelRetry("try again")

    @agent.tool_plain(timeout=0.05)
    async def slow() -> str:
        await asyncio.sleep(5)
        return "late"

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    async def main() -> str:
        async with recording(path) as recorder:
            result = await agent.run("fail every way", capabilities=[recorder])
        return result.output

    assert asyncio.run(main()) == "all failed"
    check_tool_failures(
        path,
        {
            "call-raise": "ToolFailedError",
            "call-retry": "ToolRetryError",
            "call-timeout": "ToolRetryError",
            "call-args": "ValidationError",
            "call-json": "ValidationError",
        },
    )


def test_a_cancelled_tool_is_an_error_and_the_run_aborted(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    def call_it(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse([ToolCallPart("give_up", {}, "call-cancel")])

    agent = Agent(FunctionModel(call_it))

    @agent.tool_plain
    async def give_up() -> str:
        raise asyncio.CancelledError

    async def main() -> None:
        async with recording(path) as recorder:
            await agent.run("give up", capabilities=[recorder])

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())
    check_aborted(path)
    check_tool_failures(path, {"call-cancel": "CancelledError"})


def test_a_stream_closed_early_is_aborted(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield "one "
        yield "two "
        yield "three"

    agent = Agent(FunctionModel(stream_function=stream))

    async def main() -> None:
        async with recording(path) as recorder, agent.run_stream("count", capabilities=[recorder]) as result:
            async for _ in result.stream_text(delta=True):
                break

    asyncio.run(main())
    check_aborted(path)


def test_settings_that_do_not_serialize_do_not_fail_the_run(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    class Opaque:
        def __repr__(self) -> str:
            return "Opaque()"

    settings = ModelSettings(extra_body={"handle": Opaque()})
    settings["max_tokens"] = "many"  # type: ignore[typeddict-item]
    agent = Agent(FunctionModel(lambda messages, info: ModelResponse([TextPart("hi")])))

    async def main() -> str:
        async with recording(path) as recorder:
            result = await agent.run("hi", model_settings=settings, capabilities=[recorder])
        return result.output

    assert asyncio.run(main()) == "hi"
    check_file(path)
    [request] = [e.request for e in events(path, "model_request")]
    assert request is not None
    assert request["config"]["extra"]["extra_body"]["handle"]["repr"] == "Opaque()"


def test_a_redactor_removes_a_secret_from_tool_arguments_and_results(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    def log_in(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse([ToolCallPart("login", {"token": SECRET}, "call-1")])
        return ModelResponse([TextPart("in")])

    agent = Agent(FunctionModel(log_in))

    @agent.tool_plain
    def login(token: str) -> str:
        return f"logged in with {token}"

    async def main() -> None:
        async with recording(path, redact=scrub) as recorder:
            await agent.run("log in", capabilities=[recorder])

    asyncio.run(main())
    check_redacted(path)


def delegating(
    delegate: Agent[None, str], given: list[AbstractCapability[Any]], call_id: str = "call-r"
) -> Agent[None, str]:
    """An agent whose ``research`` tool runs *delegate* (sharing the run's usage) with the
    capabilities *given*; the model calls the tool (the call *call_id*), then answers with
    its result."""

    def lead(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [
            p
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        if not returns:
            call = ToolCallPart("research", {"question": "why"}, call_id)
            return ModelResponse([call], usage=RequestUsage(input_tokens=5, output_tokens=1))
        text = f"lead: {returns[0].content}"
        return ModelResponse([TextPart(text)], usage=RequestUsage(input_tokens=7, output_tokens=2))

    agent = Agent(FunctionModel(lead, model_name="lead"))

    @agent.tool
    async def research(ctx: RunContext[Any], question: str) -> str:
        result = await delegate.run(question, usage=ctx.usage, capabilities=list(given))
        return result.output

    return agent


def answering(text: str, tokens: int) -> Agent[None, str]:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse([TextPart(text)], usage=RequestUsage(input_tokens=tokens, output_tokens=2))

    return Agent(FunctionModel(answer, model_name="delegate"))


def researching() -> Agent[None, str]:
    """A delegate whose first request is rate limited (its fallback model answers), whose
    answer calls its own tools (``search``, and ``fetch``, which fails), then answers."""

    def research(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            calls = [ToolCallPart("search", {"q": "why"}, "call-s"), ToolCallPart("fetch", {}, "call-f")]
            return ModelResponse(calls, usage=RequestUsage(input_tokens=10, output_tokens=2))
        return ModelResponse([TextPart("found it")], usage=RequestUsage(input_tokens=15, output_tokens=3))

    delegate = Agent(
        FunctionModel(rate_limited, model_name="primary"),
        capabilities=[ModelFallback(FunctionModel(research, model_name="backup"))],
    )

    @delegate.tool_plain
    def search(q: str) -> str:
        return f"results for {q}"

    @delegate.tool_plain
    def fetch() -> str:
        raise ToolFailed("offline")

    return delegate


def test_a_delegate_agent_is_nested_in_its_tool_call(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    given: list[AbstractCapability[Any]] = []

    async def main() -> str:
        async with recording(path) as recorder:
            given.append(recorder)  # the tool hands the delegate the recorder
            result = await delegating(researching(), given).run("why?", capabilities=[recorder])
        return result.output

    assert asyncio.run(main()) == "lead: found it"
    summary = check_file(path)
    assert summary.usage["total_tokens"] == 6 + 12 + 18 + 9  # the delegate's calls counted
    [tool] = [e.execution for e in events(path, "tool_exec_start") if e.tool_id == "call-r"]
    assert tool is not None
    starts = [(e.execution.id, e.execution.attempt) for e in events(path, "model_exec_start") if e.execution]
    nested = f"{tool.id}/model-"
    assert starts == [
        ("model-1", 1),
        (nested + "1", 1),
        (nested + "1", 2),  # the rate-limited request's fallback: its second attempt
        (nested + "2", 1),
        (nested + "2", 2),
        ("model-2", 1),
    ]
    check_nested(path, "call-r", 12 + 18, tools=("call-s", "call-f"))
    ends = {e.tool_id: e for e in events(path, "tool_exec_end")}
    assert (ends["call-s"].result, ends["call-f"].is_error) == ("results for why", True)
    assert summary.runs[0].end_reason == "stop"


def test_a_delegate_of_a_delegate_is_nested_two_levels_down(tmp_path: Path) -> None:
    """The lead's tool runs a delegate whose own tool runs another: the inner delegate's
    call is nested in the middle one's tool call, not beside the middle one's calls."""
    path = tmp_path / "chat.jsonl"
    given: list[AbstractCapability[Any]] = []

    async def main() -> str:
        async with recording(path) as recorder:
            given.append(recorder)
            middle = delegating(answering("deep", 20), given, call_id="call-d")
            result = await delegating(middle, given).run("why?", capabilities=[recorder])
        return result.output

    assert asyncio.run(main()) == "lead: lead: deep"
    summary = check_file(path)
    assert summary.usage["total_tokens"] == (6 + 9) * 2 + 22
    check_nested(path, "call-r", 6 + 9, tools=("call-d",))
    check_nested(path, "call-d", 22)
    [dig] = [e.execution for e in events(path, "tool_exec_start") if e.tool_id == "call-d"]
    assert dig is not None and dig.parent_id == dig.id.rsplit("/", 1)[0] + "/model-1", dig
    starts = [e.execution.id for e in events(path, "model_exec_start") if e.execution]
    assert starts == [
        "model-1",
        "tool-1-call-r/model-1",
        dig.id + "/model-1",
        "tool-1-call-r/model-2",
        "model-2",
    ]
    assert summary.runs[0].end_reason == "stop"


def searching(topic: str) -> Agent[None, str]:
    """A delegate that searches *topic* (the tool call ``search-<topic>``), then answers
    with what it found; each request lets the event loop run others before it answers."""

    async def research(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(0.01)
        if len(messages) == 1:
            call = ToolCallPart("search", {"q": topic}, f"search-{topic}")
            return ModelResponse([call], usage=RequestUsage(input_tokens=10, output_tokens=2))
        text = f"found {topic}"
        return ModelResponse([TextPart(text)], usage=RequestUsage(input_tokens=15, output_tokens=3))

    delegate = Agent(FunctionModel(research, model_name="delegate"))

    @delegate.tool_plain
    async def search(q: str) -> str:
        await asyncio.sleep(0.01)
        return f"results for {q}"

    return delegate


def researching_both(given: dict[str, list[AbstractCapability[Any]]]) -> Agent[None, str]:
    """A lead that calls its ``research`` tool twice at once (the calls ``call-a`` and
    ``call-b``), each running ``searching(topic)`` with the capabilities *given* for its
    topic, then answers with both results."""

    def lead(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [
            p
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        if not returns:
            calls = [ToolCallPart("research", {"topic": topic}, f"call-{topic}") for topic in ("a", "b")]
            return ModelResponse(calls, usage=RequestUsage(input_tokens=5, output_tokens=1))
        return ModelResponse([TextPart("; ".join(str(p.content) for p in returns))])

    agent = Agent(FunctionModel(lead, model_name="lead"))

    @agent.tool
    async def research(ctx: RunContext[Any], topic: str) -> str:
        result = await searching(topic).run(topic, usage=ctx.usage, capabilities=list(given[topic]))
        return result.output

    return agent


def test_two_delegates_at_once_are_each_nested_in_their_call(tmp_path: Path) -> None:
    """The lead calls its tool twice at once, each call running a delegate given the
    recorder, their requests interleaved: each delegate's calls are nested in its own tool
    call, and neither call reports the other's requests as unrecorded."""
    path = tmp_path / "chat.jsonl"
    given: dict[str, list[AbstractCapability[Any]]] = {}

    async def main() -> str:
        async with recording(path) as recorder:
            given.update(a=[recorder], b=[recorder])
            return (await researching_both(given).run("research a and b", capabilities=[recorder])).output

    assert asyncio.run(main()) == "found a; found b"
    for topic in ("a", "b"):
        check_nested(path, f"call-{topic}", 12 + 18, tools=(f"search-{topic}",))
        [call] = [e.execution for e in events(path, "tool_exec_start") if e.tool_id == f"call-{topic}"]
        assert call is not None and call.parent_id == "model-1"
        ends = [e for e in events(path, "model_exec_end") if e.execution and e.execution.parent_id == call.id]
        texts = [b["text"] for e in ends for b in e.message["value"]["content"] if b["type"] == "text"]
        assert [e.execution.id for e in ends if e.execution] == [f"{call.id}/model-1", f"{call.id}/model-2"]
        assert texts == [f"found {topic}"]
        [search] = [e for e in events(path, "tool_exec_end") if e.tool_id == f"search-{topic}"]
        assert search.result == f"results for {topic}"
    starts = [e.execution.id for e in events(path, "model_exec_start") if e.execution]
    assert starts[1:3] == ["tool-1-call-a/model-1", "tool-1-call-b/model-1"]  # they did interleave


def test_a_delegate_without_the_recorder_beside_one_with_it_is_said_once(tmp_path: Path) -> None:
    """Of two delegates run at once, the one not given the recorder made two requests no
    recorder saw: said once, in a gap, the other's recorded requests not counted in it."""
    path = tmp_path / "chat.jsonl"
    given: dict[str, list[AbstractCapability[Any]]] = {"a": []}

    async def main() -> str:
        async with recording(path) as recorder:
            given["b"] = [recorder]
            return (await researching_both(given).run("research a and b", capabilities=[recorder])).output

    with pytest.warns(RuntimeWarning, match="model request.*did not see"):
        assert asyncio.run(main()) == "found a; found b"
    [call_a] = [
        e.execution.id for e in events(path, "tool_exec_start") if e.execution and e.tool_id == "call-a"
    ]
    said = [
        (e.execution.id if e.execution else "", e.details["unrecorded"])
        for e in events(path, "recording_gap")
    ]
    assert sum(int(why.split()[0]) for _, why in said) == 2, said  # each request said once
    assert all(where == call_a or call_a in why for where, why in said), said  # in call-a, or naming it
    nested = [e.execution.id for e in events(path, "model_exec_end") if e.execution and e.execution.parent_id]
    assert nested == ["tool-1-call-b/model-1", "tool-1-call-b/model-2"]


def test_a_delegate_run_without_the_recorder_is_a_loud_gap(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    async def main() -> str:
        async with recording(path) as recorder:
            result = await delegating(answering("found it", 20), []).run("why?", capabilities=[recorder])
        return result.output

    with pytest.warns(RuntimeWarning, match="1 model request.*did not see.*the tool 'research' ran"):
        assert asyncio.run(main()) == "lead: found it"
    check_gap(path, "call-r")


def test_the_example_script_runs_as_written(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    assert run_example("pydantic_ai_example.py", path) == ['{"weather":"sunny in a"}'] * 2
    check_example(path, 3, ["weather"])  # TestModel calls the tool, then answers; resumed, it answers at once


def reading(result: str) -> Agent[None, str]:
    """An agent that adds and looks up (``lookup`` returns *result*), then answers."""
    agent = Agent(FunctionModel(two_tools_then_answer))

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    @agent.tool_plain
    def lookup(key: str) -> str:
        return result

    return agent


def test_the_event_loop_neither_writes_nor_syncs(
    tmp_path: Path, file_calls: list[tuple[str, int, bool]]
) -> None:
    path = tmp_path / "chat.jsonl"

    async def main() -> None:
        async with recording(path, checkpoint=True) as recorder:
            await reading("entry x").run("add 2 and 3, and look up x", capabilities=[recorder])

    asyncio.run(main())
    check_off_the_loop(file_calls, path)
    assert len(events(path, "tool_exec_end")) == 2
    check_file(path)


def test_a_record_that_cannot_be_written_fails_the_run(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    async def main() -> None:
        async with recording(path, max_line_bytes=4096) as recorder:
            await reading("x" * 5000).run("add 2 and 3, and look up x", capabilities=[recorder])

    with pytest.raises(session.RecordingError, match="longer than max_line_bytes"):
        asyncio.run(main())
    assert len(events(path, "tool_exec_start")) == 2  # what came before is there, readable


def test_a_run_cancelled_while_a_hook_waits_for_the_writer_is_aborted_whole(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    busy, release = threading.Event(), threading.Event()

    def redact(data: dict[str, Any]) -> dict[str, Any]:
        if "result" in data and not busy.is_set():  # a tool's end, which its hook waits for
            busy.set()
            release.wait(10)
        return data

    async def main() -> None:
        async with recording(path, redact=redact) as recorder:
            run = asyncio.ensure_future(
                reading("entry x").run("add 2 and 3, and look up x", capabilities=[recorder])
            )
            await asyncio.to_thread(busy.wait, 10)
            run.cancel()
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await run

    asyncio.run(main())
    check_aborted(path)
    assert events(path, "tool_exec_end")[0].result is not None  # the one written as the run was cancelled


def test_a_string_converts_to_itself() -> None:
    text = "a line of a file\n" * 100_000 + "\ud800"  # a lone surrogate: the writer escapes it
    assert to_json(text) is text  # no pass over it, no copy
    assert to_json({"text": "\ud800"}) == {"type": "builtins.dict", "repr": "{'text': '\\ud800'}"}


def test_a_tool_changing_its_arguments_in_place_leaves_them_as_given(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    slow, changed = threading.Event(), threading.Event()

    def redact(data: dict[str, Any]) -> dict[str, Any]:
        if data.get("tool") == "sort" and not slow.is_set():  # a slow writer as the tool starts
            slow.set()
            changed.wait(2)
        return data

    def sort_then_answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse([ToolCallPart("sort", {"items": [3, 1, 2]}, "call-sort")])
        return ModelResponse([TextPart("sorted")])

    agent = Agent(FunctionModel(sort_then_answer))

    @agent.tool_plain
    async def sort(items: list[int]) -> int:
        items.sort()  # the tool's own list, as it may
        items.append(4)
        changed.set()
        return len(items)

    async def main() -> None:
        async with recording(path, redact=redact) as recorder:
            await agent.run("sort 3 1 2", capabilities=[recorder])

    asyncio.run(main())
    check_file(path)
    assert [e.args for e in events(path, "tool_invoke_start")] == [{"items": [3, 1, 2]}]


def test_a_run_cancelled_again_while_its_recording_ends_still_ends_aborted(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    busy, release = threading.Event(), threading.Event()

    class Slow:  # a result its writer takes long to convert
        def __repr__(self) -> str:
            if threading.current_thread() is not threading.main_thread() and not busy.is_set():
                busy.set()
                release.wait(10)
            return "Slow()"

    def call_then_answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse([ToolCallPart("slow", {}, "call-slow")])
        return ModelResponse([TextPart("done")])

    agent = Agent(FunctionModel(call_then_answer))

    @agent.tool_plain
    def slow() -> Any:
        return Slow()

    async def record() -> None:
        async with recording(path) as recorder:
            await agent.run("go", capabilities=[recorder])

    async def main() -> None:
        run = asyncio.ensure_future(record())
        await asyncio.to_thread(busy.wait, 10)
        while not run.done():  # cancelled, and cancelled again as it ends (Ctrl-C pressed twice)
            run.cancel()
            await asyncio.sleep(0)
        for _ in range(100):  # the file may be closed (it must not be) while its writer is busy
            if b'"run_close"' in path.read_bytes():
                break
            await asyncio.sleep(0.01)
        release.set()

    asyncio.run(main())
    check_aborted(path)
    [end] = events(path, "tool_exec_end")
    assert isinstance(end.result, dict) and end.result["repr"] == "Slow()"  # written, before the close


def test_a_hook_waiting_for_the_writer_gets_a_failure_that_came_before(tmp_path: Path) -> None:
    """A hand-over that failed before the hook waits (the writer was quick) is raised by the
    wait, not left for a later hook: the model call is not made on a failed recording."""
    with session.create(tmp_path / "chat.jsonl") as opened:
        run = opened.begin_run()
        run.close()  # a closed run refuses every record
        writer = _Writer(run, threaded=True)
        writer.record("turn_start", {"turn_index": 1})
        deadline = time.monotonic() + 10
        while writer._failure is None and time.monotonic() < deadline:  # failed, and noted
            time.sleep(0.001)
        with pytest.raises(ValueError, match="is closed"):
            asyncio.run(writer.flush())
        with pytest.raises(ValueError, match="is closed"):
            writer.close()


def test_a_failure_raised_at_every_hook_keeps_its_traceback_as_it_was(tmp_path: Path) -> None:
    """Each raise of one exception object adds the raiser's frames to its traceback: raised
    again by every later hook (a framework that logs a hook's error and goes on), it would
    grow without end."""
    with session.create(tmp_path / "chat.jsonl") as opened:
        run = opened.begin_run()
        run.close()
        writer = _Writer(run, threaded=True)
        writer.record("turn_start", {"turn_index": 1})
        with pytest.raises(ValueError, match="is closed"):
            asyncio.run(writer.flush())
        lengths = []
        for _ in range(3):
            with pytest.raises(ValueError, match="is closed") as raised:
                writer.record("turn_end", {"turn_index": 1})
            lengths.append(len(traceback.extract_tb(raised.value.__traceback__)))
        assert lengths[0] == lengths[1] == lengths[2]
        with pytest.raises(ValueError, match="is closed"):
            writer.close()


def test_a_failure_raised_while_it_is_noted_keeps_its_traceback_as_it_was(tmp_path: Path) -> None:
    """The writer thread notes a failure while a hook raises it: at no point of the noting
    may the hook see the failure without the traceback it had when it failed (raised with
    none, it would keep the hook's frames, and the noting take them as where it failed)."""
    with session.create(tmp_path / "chat.jsonl") as opened:
        run = opened.begin_run()
        run.close()
        writer = _Writer(run, threaded=True)
        failed: concurrent.futures.Future[None] = concurrent.futures.Future()
        try:
            run.record(session.Event("turn_start", turn_index=1))
        except ValueError as exc:
            failed.set_exception(exc)
            where = traceback.extract_tb(exc.__traceback__)[-1].name
        paused, go_on = threading.Event(), threading.Event()

        def pausing(frame: Any, event: str, arg: Any) -> Any:
            if frame.f_code is _Writer._note.__code__ and event == "line":
                paused.set()
                go_on.wait()
                go_on.clear()
            return pausing

        noted: list[bool] = []

        def note() -> None:
            sys.settrace(pausing)
            writer._note(failed)
            sys.settrace(None)
            noted.append(True)
            paused.set()

        noting = threading.Thread(target=note)
        noting.start()
        while paused.wait() and not noted:  # at each line of the noting, a hook raises what it sees
            paused.clear()
            with contextlib.suppress(ValueError):
                writer._raise_failure()
            go_on.set()
        noting.join()
        with pytest.raises(ValueError, match="is closed") as raised:
            writer._raise_failure()
        assert traceback.extract_tb(raised.value.__traceback__)[-1].name == where
        writer._thread.shutdown()  # type: ignore[union-attr]


def test_a_recording_cancelled_while_its_file_opens_leaves_it_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_cancelled_while_opening(recording, tmp_path / "chat.jsonl", monkeypatch)


def test_a_recording_interrupted_as_its_file_starts_opening_leaves_it_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_interrupted_while_opening(recording, tmp_path / "chat.jsonl", monkeypatch)


def test_a_recording_cancelled_as_the_program_ends_leaves_its_file_closed(tmp_path: Path) -> None:
    check_cancelled_as_the_program_ends("session_pydantic_ai", tmp_path / "chat.jsonl")
