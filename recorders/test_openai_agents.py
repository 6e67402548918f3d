"""The OpenAI Agents SDK recorder against the real SDK, offline, with its ScriptedModel."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import json
from collections import Counter
from collections.abc import AsyncGenerator
from datetime import datetime
from pathlib import Path
from typing import Any, cast

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
    unstamped,
)

need("agents")

import httpx2
import openai
from agents import (
    Agent,
    Model,
    ModelProvider,
    ModelSettings,
    RunConfig,
    RunContextWrapper,
    Runner,
    Tool,
    Usage,
    function_tool,
    handoff,
    retry_policies,
    set_tracing_disabled,
)
from agents.agent import AgentToolStreamEvent
from agents.retry import ModelRetryAdvice, ModelRetrySettings
from agents.run_config import CallModelData, ModelInputData
from agents.testing.model import ModelCall, ModelStep, ScriptedModel
from openai.types.responses import (
    EasyInputMessageParam,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputRefusal,
    ResponseOutputText,
)
from session_openai_agents import recording, to_json, to_messages

import session

set_tracing_disabled(True)  # offline: nothing to export traces to


def rate_limited() -> ModelStep:
    response = httpx2.Response(429, request=httpx2.Request("POST", "https://api.invalid/v1/responses"))
    error = openai.RateLimitError("429: rate limit reached", response=response, body=None)
    return ModelStep.raise_error(error, retry_advice=ModelRetryAdvice(suggested=True, retry_after=0.0))


def call(call_id: str, name: str, arguments: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call",
        call_id=call_id,
        name=name,
        arguments=arguments,
        id=f"fc-{call_id}",
        status="completed",
    )


def answer(text: str, tokens: int = 3) -> ModelStep:
    content: list[ResponseOutputText | ResponseOutputRefusal] = [
        ResponseOutputText(type="output_text", text=text, annotations=[])
    ]
    message = ResponseOutputMessage(
        id="msg", type="message", role="assistant", status="completed", content=content
    )
    return ModelStep(
        output=[message],
        usage=Usage(requests=1, input_tokens=tokens, output_tokens=2, total_tokens=tokens + 2),
    )


@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@function_tool
def lookup(key: str) -> str:
    """Look a key up."""
    raise KeyError(key)


USAGE = Usage(requests=1, input_tokens=5, output_tokens=1, total_tokens=6)
RETRY = ModelSettings(retry=ModelRetrySettings(max_retries=2, policy=retry_policies.provider_suggested()))


def check_calls(path: Path) -> None:
    """Every model call attempt and tool call of the file ends once, after its start."""
    started: set[tuple[Any, ...]] = set()
    ended: set[tuple[Any, ...]] = set()
    for r in session.iter_records(path):
        execution = r.data.get("execution") or {}
        key = (r.run_id, execution.get("id"), execution.get("attempt"))
        if r.type in ("model_exec_start", "tool_exec_start"):
            assert key not in started, r
            started.add(key)
        elif r.type in ("model_exec_end", "tool_exec_end"):
            assert key in started and key not in ended, r
            ended.add(key)
    assert started == ended


def said(message: dict[str, Any]) -> str:
    """A message as read back, as ``role: text`` (a tool call as ``call NAME``)."""
    value = message["value"]
    parts = [
        block["text"] if block["type"] == "text" else f"call {block['tool_call']['name']}"
        for block in value["content"]
    ]
    return f"{value['role']}: {' '.join(parts)}"


def plain(message: Any) -> Any:
    """A message as read back, without its timestamp and usage."""
    value = unstamped(message)
    return {**value, "value": {k: v for k, v in value["value"].items() if k != "usage"}}


def check_each_message_recorded_once(path: Path) -> None:
    """The messages a file holds (committed, replies of model calls, and those requests sent)
    of a conversation in which no two messages say the same: none of them differs from
    another only in its time or usage.  A reply is one message wherever it is recorded (its
    model call's end, its ``message_end``) and sent back, in this run and in the next run of
    the conversation."""
    records = list(session.iter_records(path))
    held = [r.data["message"] for r in records if "message" in r.data and r.type != "message"]
    held += [m for r in records if r.type == "model_request" for m in r.data["request"]["messages"]]
    stamped = {json.dumps(m, sort_keys=True) for m in held}
    assert len(stamped) == len({json.dumps(plain(m), sort_keys=True) for m in held}), held


def test_retry_parallel_tools_and_usage(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    model = ScriptedModel(
        [
            rate_limited(),
            ModelStep(
                output=[
                    call("call-add", "add", '{"a": 2, "b": 3}'),
                    call("call-lookup", "lookup", '{"key": "x"}'),
                ],
                usage=Usage(requests=1, input_tokens=11, output_tokens=7, total_tokens=18),
            ),
            answer("done", tokens=23),
        ]
    )
    agent = Agent(
        name="calc", instructions="Be brief.", model=model, tools=[add, lookup], model_settings=RETRY
    )

    async def main() -> Any:
        async with recording(path) as recorder:
            result = await recorder.run(agent, "add 2 and 3, and look up x")
        return result.final_output

    assert asyncio.run(main()) == "done"
    model.assert_complete()

    summary = check_file(path)
    check_calls(path)
    assert summary.usage == {"input": 34, "output": 9, "cache_read": 0, "cache_write": 0, "total_tokens": 43}
    assert summary.runs[0].end_reason == "stop"
    ends = events(path, "model_exec_end")
    assert [(e.execution.id, e.execution.attempt, bool(e.error)) for e in ends if e.execution] == [
        ("model-1", 1, True),
        ("model-1", 2, False),
        ("model-2", 1, False),
    ]
    assert ends[0].error == {"message": "429: rate limit reached", "type": "RateLimitError"}
    assert [e.retry.error for e in events(path, "retry") if e.retry] == [ends[0].error]
    request = events(path, "model_request")[0].request
    assert request is not None
    assert {tool["name"] for tool in request["tools"]} == {"add", "lookup"}
    assert request["config"]["extra"]["settings"]["retry"]["max_retries"] == 2

    tool_ends = {e.tool_id: e for e in events(path, "tool_exec_end")}
    assert tool_ends["call-add"].result == 5
    assert not tool_ends["call-add"].is_error
    assert tool_ends["call-lookup"].is_error
    assert tool_ends["call-lookup"].error == {"message": "'x'", "type": "KeyError"}
    assert [e.args for e in events(path, "tool_exec_start")] == [{"a": 2, "b": 3}, {"key": "x"}]

    check_conversation(path, "done")


def test_agent_ending_in_an_error(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    @function_tool(failure_error_function=None)
    def fetch(key: str) -> str:
        """Fetch a key; errors end the run."""
        raise KeyError(key)

    model = ScriptedModel([ModelStep(output=[call("call-1", "fetch", '{"key": "x"}')], usage=USAGE)])
    agent = Agent(name="fetcher", model=model, tools=[fetch])

    async def main() -> None:
        async with recording(path) as recorder:
            await recorder.run(agent, "fetch x")

    with pytest.raises(Exception, match="x"):
        asyncio.run(main())
    summary = check_file(path)
    run = summary.runs[0]
    assert run.end_reason == "error"
    assert run.error is not None
    [end] = events(path, "tool_exec_end")
    assert end.is_error
    assert end.tool == "fetch"
    assert end.error == run.error


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Report:
    color: Color
    data: bytes
    when: datetime  # naive, as some libraries hand them over
    ratio: float


def test_stray_values_are_kept_and_the_session_lives_on(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    @function_tool
    def report() -> Any:
        """A report."""
        return Report(Color.RED, b"\x00\xff", datetime(2026, 1, 2, 3, 4, 5), float("nan"))

    model = ScriptedModel([ModelStep(output=[call("call-1", "report", "{}")], usage=USAGE), answer("ok")])
    agent = Agent(name="reporter", model=model, tools=[report])

    async def main() -> None:
        async with recording(path) as recorder:
            await recorder.run(agent, "report")

    asyncio.run(main())
    check_file(path)
    [end] = events(path, "tool_exec_end")
    assert end.result == {"color": "red", "data": "AP8=", "when": "2026-01-02T03:04:05", "ratio": "NaN"}


def test_resume_from_the_checkpoint_in_a_reopened_session(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    seen: list[Any] = []

    def respond(call: ModelCall) -> ModelStep:
        seen.append(call.input)
        return answer(f"answer {len(seen)}")

    model = ScriptedModel([ModelStep.respond(respond), ModelStep.respond(respond)])
    agent = Agent(name="chat", model=model)

    async def turn(prompt: str) -> Any:
        async with recording(path, checkpoint=True) as recorder:
            result = await recorder.run(agent, [*recorder.history(), {"role": "user", "content": prompt}])
        return result.final_output

    assert asyncio.run(turn("first")) == "answer 1"
    assert asyncio.run(turn("second")) == "answer 2"

    assert [item.get("role") for item in seen[1]] == ["user", "assistant", "user"]
    summary = check_file(path)
    assert len(summary.runs) == 2
    assert summary.checkpoints == 2
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
    message is written once, with the time it was first seen, and every request reads back as
    the messages the model got."""
    path = tmp_path / "chat.jsonl"
    calls: list[ModelCall] = []

    def remember(step: ModelStep) -> ModelStep:
        def respond(call: ModelCall) -> ModelStep:
            calls.append(call)
            return step

        return ModelStep.respond(respond)

    def read_calls(*pages: int) -> ModelStep:
        output = [call(f"call-{n}", "read", f'{{"page": {n}}}') for n in pages]
        return remember(ModelStep(output=output, usage=USAGE))

    @function_tool
    def read(page: int) -> str:
        """Read a page."""
        return f"page {page}: " + "lorem ipsum " * 300

    model = ScriptedModel(
        [
            *(read_calls(1, 2), read_calls(3), read_calls(4), remember(answer("read 4 pages"))),
            *(read_calls(5), read_calls(6), remember(answer("read 6 pages"))),
        ]
    )
    agent = Agent(name="reader", instructions="Read what you are asked to.", model=model, tools=[read])

    async def turn(prompt: str) -> Any:
        async with recording(path, checkpoint=True) as recorder:
            result = await recorder.run(agent, [*recorder.history(), {"role": "user", "content": prompt}])
        return result.final_output

    assert asyncio.run(turn("read pages 1 to 4")) == "read 4 pages"
    assert asyncio.run(turn("and pages 5 and 6")) == "read 6 pages"
    model.assert_complete()

    figures = check_each_message_once(path)
    # system, prompt, 3 x (calls, results), answer; prompt, 2 x (call, result)
    assert (figures["requests"], figures["messages"]) == (7, 15)
    assert figures["request_bytes"] * 3 < figures["whole_bytes"], figures  # 3.1 to 3.4 times less
    requests = [e.request["messages"] if e.request else [] for e in events(path, "model_request")]
    expected = [
        [session.Message("system", [session.text_block(str(c.system_instructions))]), *to_messages(c.input)]
        for c in calls
    ]
    assert [[plain(m) for m in request] for request in requests] == [
        [plain(as_read(m)) for m in request] for request in expected
    ]
    check_each_message_recorded_once(path)
    for request in requests:  # each message has the time it was first seen
        times = [m["value"]["timestamp"] for m in request]
        assert times == sorted(times)
    written = Counter(r.run_id for r in session.iter_records(path) if r.type == "message")
    assert list(written.values()) == [9, 6]  # the resumed run wrote its new messages only
    assert [len(requests) for requests in sent_messages.values()] == [4, 3]
    check_converted_once(sent_messages)
    check_both_versions(every_event, tmp_path)


def test_a_message_edited_twice_between_calls_is_recorded_as_sent(tmp_path: Path) -> None:
    """A host's input filter keeps one note and edits it before each model call, replacing
    its content twice before the second (CPython may give the last value the address of
    the first, freed): each request holds the note as its call sent it, never an earlier
    content (messages are known by their content, not by the ids of their values)."""
    path = tmp_path / "chat.jsonl"
    card = "card " + " ".join(["4111"] * 4)
    note: EasyInputMessageParam = {"role": "user", "content": card}
    edits = iter([[card], ["draft " + card[:9], "[REDACTED]"]])
    got: list[Any] = []

    def keep_note(data: CallModelData[Any]) -> ModelInputData:
        for text in next(edits):
            note["content"] = text
        return ModelInputData([*data.model_data.input, note], data.model_data.instructions)

    def respond(step: ModelStep) -> ModelStep:
        def remember(call: ModelCall) -> ModelStep:
            got.append(json.loads(json.dumps(call.input[-1])))
            return step

        return ModelStep.respond(remember)

    steps = [
        respond(ModelStep(output=[call("call-1", "add", '{"a": 1, "b": 2}')], usage=USAGE)),
        respond(answer("3")),
    ]
    agent = Agent(name="adder", model=ScriptedModel(steps), tools=[add])

    async def main() -> None:
        async with recording(path) as recorder:
            await recorder.run(agent, "add 1 and 2", run_config=RunConfig(call_model_input_filter=keep_note))

    asyncio.run(main())
    sent = [e.request["messages"][-1] for e in events(path, "model_request") if e.request]
    assert (
        [said(m) for m in sent]
        == [f"user: {card}", "user: [REDACTED]"]
        == [f"user: {g['content']}" for g in got]
    )
    assert card not in json.dumps(sent[1])


def test_one_recorder_records_one_run(tmp_path: Path) -> None:
    model = ScriptedModel([answer("hi"), answer("hi")])
    agent = Agent(name="chat", model=model)

    async def main() -> list[Any]:
        async with recording(tmp_path / "a.jsonl") as a, recording(tmp_path / "b.jsonl") as b:
            results = await asyncio.gather(a.run(agent, "1"), b.run(agent, "2"))
            with pytest.raises(RuntimeError, match="records one run"):
                await a.run(agent, "3", run_config=RunConfig())
        return [r.final_output for r in results]

    assert asyncio.run(main()) == ["hi", "hi"]
    for name in ("a.jsonl", "b.jsonl"):
        assert check_file(tmp_path / name).counts["agent_end"] == 1


def test_every_way_a_tool_fails_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    def apologise(context: RunContextWrapper[Any], error: Exception) -> str:
        return "sorry, no"

    @function_tool(failure_error_function=apologise)
    def polite(key: str) -> str:
        """Look a key up, politely."""
        raise KeyError(key)

    @function_tool(timeout=0.05)
    async def slow() -> str:
        """Take too long."""
        await asyncio.sleep(5)
        return "late"

    @function_tool
    async def give_up() -> str:
        """Be cancelled."""
        raise asyncio.CancelledError

    model = ScriptedModel(
        [
            ModelStep(
                output=[
                    call("call-raise", "lookup", '{"key": "x"}'),
                    call("call-custom", "polite", '{"key": "x"}'),
                    call("call-timeout", "slow", "{}"),
                    call("call-args", "add", '{"a": "two", "b": 3}'),
                    call("call-json", "add", '{"a": '),
                    call("call-cancel", "give_up", "{}"),
                ],
                usage=USAGE,
            ),
            answer("all failed"),
        ]
    )
    agent = Agent(name="failing", model=model, tools=[add, lookup, polite, slow, give_up])

    async def main() -> Any:
        async with recording(path) as recorder:
            result = await recorder.run(agent, "fail every way")
        return result.final_output

    assert asyncio.run(main()) == "all failed"
    check_calls(path)
    check_tool_failures(
        path,
        {
            "call-raise": "KeyError",
            "call-custom": "KeyError",
            "call-timeout": "ToolTimeoutError",
            "call-args": "ModelBehaviorError",
            "call-json": "ModelBehaviorError",
            "call-cancel": "CancelledError",
        },
    )
    [end] = events(path, "agent_end")
    assert end.summary is not None and end.summary.tool_errors == 6


def test_settings_that_do_not_serialize_do_not_fail_the_run(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    class Opaque:
        def __repr__(self) -> str:
            return "Opaque()"

    settings = ModelSettings(extra_body={"handle": Opaque()}, extra_args={"client": Opaque()})
    agent = Agent(name="chat", model=ScriptedModel([answer("hi")]), model_settings=settings)

    async def main() -> Any:
        async with recording(path) as recorder:
            result = await recorder.run(agent, "hi")
        return result.final_output

    assert asyncio.run(main()) == "hi"
    check_file(path)
    [request] = [e.request for e in events(path, "model_request")]
    assert request is not None
    kept = request["config"]["extra"]["settings"]
    assert kept["extra_body"]["handle"]["repr"] == "Opaque()"
    assert kept["extra_args"]["client"]["repr"] == "Opaque()"


def test_a_redactor_removes_a_secret_from_tool_arguments_and_results(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    @function_tool
    def login(token: str) -> str:
        """Log in with a token."""
        return f"logged in with {token}"

    model = ScriptedModel(
        [
            ModelStep(output=[call("call-1", "login", f'{{"token": "{SECRET}"}}')], usage=USAGE),
            answer("in"),
        ]
    )
    agent = Agent(name="login", model=model, tools=[login])

    async def main() -> None:
        async with recording(path, redact=scrub) as recorder:
            await recorder.run(agent, "log in")

    asyncio.run(main())
    check_redacted(path)


def scenario() -> Agent[Any]:
    """A retried call, parallel tools with one failing, then the answer."""
    model = ScriptedModel(
        [
            rate_limited(),
            ModelStep(
                output=[
                    call("call-add", "add", '{"a": 2, "b": 3}'),
                    call("call-lookup", "lookup", '{"key": "x"}'),
                ],
                usage=Usage(requests=1, input_tokens=11, output_tokens=7, total_tokens=18),
            ),
            answer("done", tokens=23),
        ]
    )
    return Agent(name="calc", model=model, tools=[add, lookup], model_settings=RETRY)


def shape(path: Path) -> list[tuple[str, str, int, Any]]:
    """What the file records, times and ids of records aside: each record's type, execution,
    attempt, and the message, request or summary it holds, unstamped."""
    out = []
    for record in session.iter_records(path):
        data = record.data
        execution = data.get("execution") or {}
        held = data.get("message") or data.get("request") or data.get("summary")
        out.append((record.type, execution.get("id", ""), execution.get("attempt", 0), timeless(held)))
    return out


def timeless(value: Any) -> Any:
    """*value* without the timestamps of the messages in it."""
    if isinstance(value, dict):
        return {key: timeless(item) for key, item in value.items() if key != "timestamp"}
    if isinstance(value, list):
        return [timeless(item) for item in value]
    return value


def test_a_reply_is_one_message_wherever_it_is_recorded_or_sent(tmp_path: Path) -> None:
    """A retried call, parallel tool calls and the answer, run and streamed: the model's
    replies are recorded at their call's end and committed (``message_end``), and the first
    is sent back to the model; each is one message, its time and usage the same in all
    three places, and a version-2 file writes it once."""

    async def main(path: Path, streamed: bool) -> None:
        async with recording(path) as recorder:
            if not streamed:
                await recorder.run(scenario(), "add 2 and 3, and look up x")
                return
            result = recorder.run_streamed(scenario(), "add 2 and 3, and look up x")
            async for _ in result.stream_events():
                pass

    for name, streamed in (("run.jsonl", False), ("streamed.jsonl", True)):
        asyncio.run(main(tmp_path / name, streamed))
        check_calls(tmp_path / name)
        check_each_message_recorded_once(tmp_path / name)
        check_each_message_once(tmp_path / name)
        [calls, _] = [e.message for e in events(tmp_path / name, "model_exec_end") if e.message]
        [*_, sent] = [e.request["messages"] for e in events(tmp_path / name, "model_request") if e.request]
        assert calls in sent and calls["value"]["usage"]["total_tokens"] == 18


def test_a_streamed_run_records_what_a_run_records(tmp_path: Path) -> None:
    async def main(path: Path, streamed: bool) -> Any:
        async with recording(path) as recorder:
            if not streamed:
                return (await recorder.run(scenario(), "add 2 and 3, and look up x")).final_output
            result = recorder.run_streamed(scenario(), "add 2 and 3, and look up x")
            kinds = Counter([event.type async for event in result.stream_events()])
            assert kinds["raw_response_event"] > 0, kinds  # it did stream
            return result.final_output

    assert asyncio.run(main(tmp_path / "run.jsonl", streamed=False)) == "done"
    assert asyncio.run(main(tmp_path / "streamed.jsonl", streamed=True)) == "done"
    summary = check_file(tmp_path / "streamed.jsonl")
    assert summary.usage["total_tokens"] == 43
    assert summary.runs[0].end_reason == "stop"
    assert settled(shape(tmp_path / "streamed.jsonl")) == settled(shape(tmp_path / "run.jsonl"))
    check_conversation(tmp_path / "streamed.jsonl", "done")


def settled(rows: list[Any]) -> tuple[list[Any], list[Any]]:
    """*rows* of ``shape`` but the tool calls', in order, and the tool calls' sorted: tools
    called at once end in either order."""
    tools = [row for row in rows if row[0].startswith("tool_exec")]
    return [row for row in rows if row not in tools], sorted(tools, key=lambda row: row[:3])


def test_a_streamed_run_that_fails_or_is_closed_early_is_recorded_so(tmp_path: Path) -> None:
    @function_tool(failure_error_function=None)
    def fetch(key: str) -> str:
        """Fetch a key; errors end the run."""
        raise KeyError(key)

    async def failing(path: Path) -> None:
        model = ScriptedModel([ModelStep(output=[call("call-1", "fetch", '{"key": "x"}')], usage=USAGE)])
        async with recording(path) as recorder:
            result = recorder.run_streamed(Agent(name="fetcher", model=model, tools=[fetch]), "fetch x")
            async for _ in result.stream_events():
                pass

    async def closed_early(path: Path) -> None:
        async with recording(path) as recorder:
            result = recorder.run_streamed(scenario(), "add 2 and 3, and look up x")
            async with contextlib.aclosing(cast(AsyncGenerator[Any, None], result.stream_events())) as stream:
                async for _ in stream:
                    break

    with pytest.raises(Exception, match="x") as raised:
        asyncio.run(failing(tmp_path / "failed.jsonl"))
    run = check_file(tmp_path / "failed.jsonl").runs[0]
    assert (run.end_reason, run.error) == (
        "error",
        {"message": str(raised.value), "type": raised.type.__name__},
    )
    assert [
        e.execution.attempt for e in events(tmp_path / "failed.jsonl", "model_exec_end") if e.execution
    ] == [1]

    asyncio.run(closed_early(tmp_path / "closed.jsonl"))
    check_aborted(tmp_path / "closed.jsonl")
    check_calls(tmp_path / "failed.jsonl")
    check_calls(tmp_path / "closed.jsonl")


@dataclasses.dataclass
class Provider(ModelProvider):
    """Models by name, as a host's provider gives them."""

    models: dict[str, Model]

    def get_model(self, model_name: str | None) -> Model:
        return self.models[str(model_name)]


@function_tool
def search(q: str) -> str:
    """Search for something."""
    return f"results for {q}"


@function_tool
def fetch() -> str:
    """Fetch a page."""
    raise ConnectionError("offline")


@function_tool(timeout=0.05)
async def slow() -> str:
    """Take too long."""
    await asyncio.sleep(5)
    return "late"


def researcher_model() -> ScriptedModel:
    """A sub-agent's model: rate limited once (the runner retries it), then asks for
    ``search``, ``fetch`` (which fails) and ``slow`` (which times out), then answers."""
    calls = [
        call("call-s", "search", '{"q": "why"}'),
        call("call-f", "fetch", "{}"),
        call("call-t", "slow", "{}"),
    ]
    step = ModelStep(output=calls, usage=Usage(requests=1, input_tokens=10, output_tokens=2, total_tokens=12))
    return ScriptedModel([rate_limited(), step, answer("found it", tokens=20)])


def lead_model() -> ScriptedModel:
    return ScriptedModel(
        [ModelStep(output=[call("call-r", "research", '{"input": "why"}')], usage=USAGE), answer("done")]
    )


def test_an_agent_run_as_a_tool_is_nested_in_its_tool_call(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    researcher = Agent(name="researcher", model="sub", tools=[search, fetch, slow], model_settings=RETRY)

    async def main() -> Any:
        async with recording(path) as recorder:
            research = researcher.as_tool(
                tool_name="research", tool_description="Research a question.", hooks=recorder
            )
            config = RunConfig(model_provider=Provider({"sub": researcher_model()}))
            agent = Agent(name="lead", model=lead_model(), tools=[research])
            return (await recorder.run(agent, "find out", run_config=config)).final_output

    assert asyncio.run(main()) == "done"
    summary = check_file(path)
    assert summary.usage["total_tokens"] == 6 + 12 + 22 + 5  # the sub-agent's calls counted
    [tool] = [e.execution for e in events(path, "tool_exec_start") if e.tool_id == "call-r"]
    assert tool is not None
    starts = [(e.execution.id, e.execution.attempt) for e in events(path, "model_exec_start") if e.execution]
    nested = f"{tool.id}/model-"
    assert starts == [("model-1", 1), (nested + "1", 1), (nested + "1", 2), (nested + "2", 1), ("model-2", 1)]
    check_nested(path, "call-r", 12 + 22, tools=("call-s", "call-f", "call-t"))
    check_calls(path)
    ends = {e.tool_id: e for e in events(path, "tool_exec_end")}
    assert ends["call-s"].result == "results for why"
    assert ends["call-f"].error == {"message": "offline", "type": "ConnectionError"}
    assert (ends["call-t"].error or {}).get("type") == "ToolTimeoutError", ends["call-t"]
    assert summary.counts["turn_start"] == 2  # the sub-agent's calls are no turns of the run


def test_an_agent_tool_of_an_agent_run_as_a_tool_is_nested_two_levels_down(tmp_path: Path) -> None:
    """The researcher runs as the lead's tool, and the fetcher as the researcher's: the
    fetcher's calls are nested in the researcher's tool call, not beside the researcher's."""
    path = tmp_path / "chat.jsonl"
    fetcher = Agent(name="fetcher", model="inner", tools=[search])
    fetcher_model = ScriptedModel(
        [ModelStep(output=[call("call-q", "search", '{"q": "deep"}')], usage=USAGE), answer("deep", tokens=7)]
    )
    researcher_model = ScriptedModel(
        [ModelStep(output=[call("call-d", "dig", '{"input": "x"}')], usage=USAGE), answer("found", tokens=9)]
    )

    async def main() -> Any:
        async with recording(path) as recorder:
            dig = fetcher.as_tool(tool_name="dig", tool_description="Dig.", hooks=recorder)
            researcher = Agent(name="researcher", model="sub", tools=[dig])
            research = researcher.as_tool(tool_name="research", tool_description="Research.", hooks=recorder)
            config = RunConfig(model_provider=Provider({"sub": researcher_model, "inner": fetcher_model}))
            agent = Agent(name="lead", model=lead_model(), tools=[research])
            return (await recorder.run(agent, "find out", run_config=config)).final_output

    assert asyncio.run(main()) == "done"
    summary = check_file(path)
    assert summary.usage["total_tokens"] == 6 + (6 + 11) + (6 + 9) + 5
    check_nested(path, "call-r", 6 + 11, tools=("call-d",))
    check_nested(path, "call-d", 6 + 9, tools=("call-q",))
    check_calls(path)
    [dig] = [e.execution for e in events(path, "tool_exec_start") if e.tool_id == "call-d"]
    assert dig is not None and dig.parent_id.startswith("tool-1-call-r/model-")
    nested = [
        e.execution.id for e in events(path, "model_exec_start") if e.execution and "/" in e.execution.id
    ]
    assert nested == [
        "tool-1-call-r/model-1",
        f"{dig.id}/model-1",
        f"{dig.id}/model-2",
        "tool-1-call-r/model-2",
    ]


def test_an_agent_tool_whose_run_is_not_given_the_recorder_is_a_loud_gap(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    researcher = Agent(name="researcher", model="sub", tools=[search, fetch, slow], model_settings=RETRY)
    research = researcher.as_tool(tool_name="research", tool_description="Research a question.")

    async def main() -> Any:
        async with recording(path) as recorder:
            config = RunConfig(model_provider=Provider({"sub": researcher_model()}))
            agent = Agent(name="lead", model=lead_model(), tools=[research])
            return (await recorder.run(agent, "find out", run_config=config)).final_output

    unseen = "'researcher', whose model asked for 3 tool call.*hooks=recorder"
    with pytest.warns(RuntimeWarning, match=unseen):
        assert asyncio.run(main()) == "done"
    check_gap(path, "call-r")


@pytest.mark.parametrize("given", ["agent", "handoff()"])
def test_a_handoff_to_an_agent_with_its_own_model_is_recorded(tmp_path: Path, given: str) -> None:
    path = tmp_path / "chat.jsonl"
    helper = Agent(name="helper", model=ScriptedModel([answer("helped", tokens=20)]))
    model = ScriptedModel([ModelStep(output=[call("call-h", "transfer_to_helper", "{}")], usage=USAGE)])
    agent = Agent(name="lead", model=model, handoffs=[helper if given == "agent" else handoff(helper)])

    async def main() -> Any:
        async with recording(path) as recorder:
            return (await recorder.run(agent, "help")).final_output

    assert asyncio.run(main()) == "helped"
    summary = check_file(path)
    assert summary.usage["total_tokens"] == 6 + 22  # 13 of 26 before: the helper's was missing
    assert [e.execution.id for e in events(path, "model_exec_end") if e.execution] == ["model-1", "model-2"]


def asking(name: str, key: str) -> Agent[Any]:
    """An agent *name* whose model (a ``Model`` object) searches for *key*, then answers."""
    steps = [
        ModelStep(output=[call(f"call-{key}", "search", f'{{"q": "{key}"}}')], usage=USAGE),
        answer(f"{name} found {key}", tokens=7),
    ]
    return Agent(name=name, instructions=f"You are {name}.", model=ScriptedModel(steps), tools=[search])


@pytest.mark.parametrize("streamed", [False, True])
def test_two_agent_tools_whose_agents_hold_model_objects_are_recorded_each_in_its_call(
    tmp_path: Path, streamed: bool
) -> None:
    """Two agent tools called at once, each running an agent whose model is a Model object
    (as a provider's model class, LiteLLM's or OpenAIChatCompletionsModel, is), the agents
    run or (``on_stream``) streamed: each agent's model calls, with the requests they made,
    and its tool call are nested in its tool call, call by call, never in the other's."""
    path = tmp_path / "chat.jsonl"
    kinds: Counter[str] = Counter()

    def watch(event: AgentToolStreamEvent) -> None:
        kinds[event["event"].type] += 1

    agents = {"call-1": asking("alpha", "a"), "call-2": asking("beta", "b")}
    lead = ScriptedModel(
        [
            ModelStep(
                output=[
                    call("call-1", "ask_alpha", '{"input": "find a"}'),
                    call("call-2", "ask_beta", '{"input": "find b"}'),
                ],
                usage=USAGE,
            ),
            answer("both found"),
        ]
    )

    async def main() -> Any:
        async with recording(path) as recorder:
            tools: list[Tool] = [
                agent.as_tool(
                    f"ask_{agent.name}",
                    f"Ask {agent.name}.",
                    hooks=recorder,
                    on_stream=watch if streamed else None,
                )
                for agent in agents.values()
            ]
            return (
                await recorder.run(Agent(name="lead", model=lead, tools=tools), "find a and b")
            ).final_output

    assert asyncio.run(main()) == "both found"
    assert (kinds["raw_response_event"] > 0) == streamed, kinds
    summary = check_file(path)
    check_calls(path)
    assert summary.usage["total_tokens"] == 6 + 2 * (6 + 9) + 5
    for tool_id, agent in agents.items():
        key, branch = agent.name[0], f"tool-1-{tool_id}"
        check_nested(path, tool_id, 6 + 9, tools=(f"call-{key}",))
        mine = [
            e for e in session.iter_records(path) if e.data.get("execution", {}).get("parent_id") == branch
        ]
        assert [(r.type, r.data["execution"]["id"]) for r in mine if r.type != "model_request"] == [
            ("model_exec_start", f"{branch}/model-1"),
            ("model_exec_end", f"{branch}/model-1"),
            ("model_exec_start", f"{branch}/model-2"),
            ("model_exec_end", f"{branch}/model-2"),
        ]
        requests = [
            [said(m) for m in r.data["request"]["messages"]] for r in mine if r.type == "model_request"
        ]
        prompt = [f"system: You are {agent.name}.", f"user: find {key}"]
        assert requests == [prompt, [*prompt, "assistant: call search", f"tool: results for {key}"]]
        assert said(mine[-1].data["message"]) == f"assistant: {agent.name} found {key}"
        [start] = [e for e in events(path, "tool_exec_start") if e.tool_id == f"call-{key}"]
        [end] = [e for e in events(path, "tool_exec_end") if e.tool_id == f"call-{key}"]
        assert start.execution is not None and start.execution.parent_id == f"{branch}/model-1"
        assert end.execution == start.execution and end.result == f"results for {key}"
    [*_, last] = [e.request["messages"] for e in events(path, "model_request") if e.request]
    assert [said(m) for m in last[-2:]] == ["tool: alpha found a", "tool: beta found b"]
    check_each_message_recorded_once(path)


@pytest.mark.parametrize("given", ["the run", "an agent tool"])
def test_a_model_object_a_run_config_gives_is_recorded(tmp_path: Path, given: str) -> None:
    """A ``RunConfig(model=...)`` holding a Model object is the model of every agent of its
    run: given to ``recorder.run``, or to ``as_tool`` for the agent tool's run, its calls are
    recorded (nested in the tool call for the agent tool's)."""
    path = tmp_path / "chat.jsonl"
    helper = asking("helper", "h")
    assert isinstance(helper.model, Model)
    config = RunConfig(model=helper.model)  # the agent's own model is not the one called
    helper.model = "never used"

    async def main() -> Any:
        async with recording(path) as recorder:
            if given == "the run":
                return (await recorder.run(helper, "find h", run_config=config)).final_output
            tool = helper.as_tool("ask_helper", "Ask helper.", hooks=recorder, run_config=config)
            model = ScriptedModel(
                [
                    ModelStep(output=[call("call-1", "ask_helper", '{"input": "find h"}')], usage=USAGE),
                    answer("ok"),
                ]
            )
            return (await recorder.run(Agent(name="lead", model=model, tools=[tool]), "go")).final_output

    assert asyncio.run(main()) == ("helper found h" if given == "the run" else "ok")
    summary = check_file(path)
    check_calls(path)
    if given == "the run":
        assert summary.usage["total_tokens"] == 6 + 9
        assert [e.tool_id for e in events(path, "tool_exec_end")] == ["call-h"]
    else:
        check_nested(path, "call-1", 6 + 9, tools=("call-h",))


def test_an_agent_tool_whose_invoker_the_host_wrapped_is_a_loud_gap(tmp_path: Path) -> None:
    """The recorder makes an agent tool run its copy of the agent (its Model object
    wrapped) through the invoker ``Agent.as_tool`` made: one the host wrapped in its own
    function it cannot reach into, and says so."""
    path = tmp_path / "chat.jsonl"
    researcher = Agent(name="researcher", model=ScriptedModel([answer("found it")]))
    research = researcher.as_tool(tool_name="research", tool_description="Research a question.")
    invoke = research.on_invoke_tool

    async def logged(context: Any, arguments: str) -> Any:
        return await invoke(context, arguments)

    research.on_invoke_tool = logged
    model = ScriptedModel(
        [ModelStep(output=[call("call-r", "research", '{"input": "why"}')], usage=USAGE), answer("done")]
    )

    async def main() -> Any:
        async with recording(path) as recorder:
            return (await recorder.run(Agent(name="lead", model=model, tools=[research]), "go")).final_output

    with pytest.warns(RuntimeWarning, match="'research' runs agent 'researcher'.*not recorded"):
        assert asyncio.run(main()) == "done"
    check_gap(path, "call-r")


def test_the_recorder_given_to_runner_as_hooks_is_a_loud_gap(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    async def main() -> None:
        async with recording(path) as recorder:
            result = Runner.run_streamed(scenario(), "add 2 and 3, and look up x", hooks=recorder)
            async for _ in result.stream_events():
                pass

    with pytest.warns(RuntimeWarning, match="given to Runner as hooks"):
        asyncio.run(main())
    [gap] = events(path, "recording_gap")
    assert isinstance(gap.details, dict) and "recorder.run_streamed" in gap.details["unrecorded"]
    assert [g.kind for g in session.summarize(path).gaps] == ["no_agent_end", "unrecorded"]


def test_the_example_script_runs_as_written(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    assert run_example("openai_agents_example.py", path) == ["It is sunny in Paris."] * 2
    check_example(path, 4, ["weather", "weather"])


def reading(result: str) -> Agent[Any]:
    """An agent that reads once (the tool returns *result*), then answers."""

    @function_tool
    def read(key: str) -> str:
        """Read a key."""
        return result

    steps = [ModelStep(output=[call("call-1", "read", '{"key": "x"}')], usage=USAGE), answer("ok")]
    return Agent(name="reader", model=ScriptedModel(steps), tools=[read])


def test_the_event_loop_neither_writes_nor_syncs(
    tmp_path: Path, file_calls: list[tuple[str, int, bool]]
) -> None:
    path = tmp_path / "chat.jsonl"

    async def main() -> None:
        async with recording(path, checkpoint=True) as recorder:
            await recorder.run(reading("entry x"), "read x")

    asyncio.run(main())
    check_off_the_loop(file_calls, path)
    assert len(events(path, "tool_exec_end")) == 1
    check_file(path)


def test_a_record_that_cannot_be_written_fails_the_run(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    async def main() -> None:
        async with recording(path, max_line_bytes=4096) as recorder:
            await recorder.run(reading("x" * 5000), "read x")

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
    check_cancelled_as_the_program_ends("session_openai_agents", tmp_path / "chat.jsonl")
