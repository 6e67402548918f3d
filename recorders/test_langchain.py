"""The LangChain recorder against real LangChain and LangGraph, offline, with LangChain's
fake chat model driving a small LangGraph agent."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
from collections import Counter
from collections.abc import AsyncGenerator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import pydantic
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

need("langgraph")

from langchain_core.callbacks import (
    AsyncCallbackHandler,
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda
from langchain_core.tools import BaseTool, StructuredTool, tool
from langgraph.errors import NodeCancelledError
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Send
from session_langchain import SessionRecorder, recording, to_json, to_message

import session


class RateLimitError(Exception):
    """What a provider's client raises on HTTP 429."""


class Script(Iterator[AIMessage]):
    """The fake model's replies in order; an exception in the script is raised instead."""

    def __init__(self, *steps: AIMessage | Exception) -> None:
        self._steps = list(steps)

    def __next__(self) -> AIMessage:
        step = self._steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


def reply(text: str = "", tokens: int = 3, calls: list[dict[str, Any]] | None = None) -> AIMessage:
    usage = {"input_tokens": tokens, "output_tokens": 2, "total_tokens": tokens + 2}
    return AIMessage(text, tool_calls=calls or [], usage_metadata=usage)


def agent(
    model: Runnable[Any, Any], tools: list[BaseTool], *, handle_tool_errors: bool = True
) -> CompiledStateGraph[Any]:
    """A tool-calling agent: the model, then its tools in parallel, until it answers; it runs
    with ``invoke`` as with ``ainvoke``."""

    async def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    def call_model_sync(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", RunnableLambda(call_model_sync, afunc=call_model))
    graph.add_node("tools", ToolNode(tools, handle_tool_errors=handle_tool_errors))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile()


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    raise KeyError(key)


def with_retry(script: Script) -> Runnable[Any, Any]:
    model = GenericFakeChatModel(messages=script)
    return model.with_retry(retry_if_exception_type=(RateLimitError,), wait_exponential_jitter=False)


def test_retry_parallel_tools_and_usage(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    calls = [
        {"name": "add", "args": {"a": 2, "b": 3}, "id": "call-add", "type": "tool_call"},
        {"name": "lookup", "args": {"key": "x"}, "id": "call-lookup", "type": "tool_call"},
    ]
    script = Script(
        RateLimitError("429: rate limit reached"), reply(tokens=11, calls=calls), reply("done", 23)
    )
    graph = agent(with_retry(script), [add, lookup])

    async def main() -> Any:
        async with recording(path) as recorder:
            state = await graph.ainvoke(
                {"messages": [HumanMessage("add 2 and 3, and look up x")]}, {"callbacks": [recorder]}
            )
        return state["messages"][-1].content

    assert asyncio.run(main()) == "done"

    summary = check_file(path)
    assert summary.usage == {"input": 34, "output": 4, "cache_read": 0, "cache_write": 0, "total_tokens": 38}
    assert summary.runs[0].end_reason == "stop"
    ends = events(path, "model_exec_end")
    assert [(e.execution.id, e.execution.attempt, bool(e.error)) for e in ends if e.execution] == [
        ("model-1", 1, True),
        ("model-1", 2, False),
        ("model-2", 1, False),
    ]
    assert ends[0].error == {"message": "429: rate limit reached", "type": "RateLimitError"}
    assert [e.retry.error for e in events(path, "retry") if e.retry] == [ends[0].error]

    tool_ends = {e.tool_id: e for e in events(path, "tool_exec_end")}
    assert tool_ends["call-add"].result == "5"
    assert not tool_ends["call-add"].is_error
    assert tool_ends["call-lookup"].is_error
    assert tool_ends["call-lookup"].error == {"message": "'x'", "type": "KeyError"}
    assert {e.tool_id: e.args for e in events(path, "tool_exec_start")} == {
        "call-add": {"a": 2, "b": 3},
        "call-lookup": {"key": "x"},
    }

    check_conversation(path, "done")


def test_a_fallback_is_another_attempt(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    primary = GenericFakeChatModel(messages=Script(RateLimitError("429: rate limit reached")))
    backup = GenericFakeChatModel(messages=Script(reply("from the backup", 5)))
    graph = agent(primary.with_fallbacks([backup]), [add])

    async def main() -> Any:
        async with recording(path) as recorder:
            state = await graph.ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [recorder]})
        return state["messages"][-1].content

    assert asyncio.run(main()) == "from the backup"
    summary = check_file(path)
    assert summary.usage["total_tokens"] == 7
    ends = events(path, "model_exec_end")
    assert [(e.execution.id, e.execution.attempt, bool(e.error)) for e in ends if e.execution] == [
        ("model-1", 1, True),
        ("model-1", 2, False),
    ]


def test_a_synchronous_graph_with_its_tools_in_threads(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    calls = [
        {"name": "add", "args": {"a": 1, "b": 1}, "id": f"call-{n}", "type": "tool_call"} for n in range(4)
    ]
    graph = agent(with_retry(Script(reply(calls=calls), reply("four twos"))), [add])
    with session.create(path) as s, s.begin_run() as run:
        state = graph.invoke({"messages": [HumanMessage("add")]}, {"callbacks": [SessionRecorder(run)]})
    assert state["messages"][-1].content == "four twos"
    summary = check_file(path)
    assert summary.counts["tool_exec_end"] == 4
    assert summary.runs[0].end_reason == "stop"
    assert [e.result for e in events(path, "tool_exec_end")] == ["2"] * 4


def test_agent_ending_in_an_error(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    calls = [{"name": "lookup", "args": {"key": "x"}, "id": "call-1", "type": "tool_call"}]
    graph = agent(with_retry(Script(reply(calls=calls))), [lookup], handle_tool_errors=False)

    async def main() -> None:
        async with recording(path) as recorder:
            await graph.ainvoke({"messages": [HumanMessage("look up x")]}, {"callbacks": [recorder]})

    with pytest.raises(KeyError):
        asyncio.run(main())
    summary = check_file(path)
    run = summary.runs[0]
    assert run.end_reason == "error"
    assert run.error == {"message": "'x'", "type": "KeyError"}


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Report:
    color: Color
    data: bytes
    when: datetime  # naive, as some libraries hand them over
    ratio: float


@tool(response_format="content_and_artifact")
def report() -> tuple[str, Report]:
    """A report, with the data behind it as its artifact."""
    return "a report", Report(Color.RED, b"\x00\xff", datetime(2026, 1, 2, 3, 4, 5), float("nan"))


def test_stray_values_are_kept_and_the_session_lives_on(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    calls = [{"name": "report", "args": {}, "id": "call-1", "type": "tool_call"}]
    graph = agent(with_retry(Script(reply(calls=calls), reply("ok"))), [report])

    async def main() -> None:
        async with recording(path, checkpoint=True) as recorder:
            await graph.ainvoke({"messages": [HumanMessage("report")]}, {"callbacks": [recorder]})

    asyncio.run(main())
    check_file(path)
    [end] = events(path, "tool_exec_end")
    assert end.result == "a report"
    assert end.details == {"color": "red", "data": "AP8=", "when": "2026-01-02T03:04:05", "ratio": "NaN"}
    [tool_message] = [m for m in messages(path) if m.role == "tool"]
    assert tool_message.content[0]["text"] == "a report"


class Unprintable:
    """An object LangChain never prints: its repr fails."""

    def __repr__(self) -> str:
        raise RuntimeError("half made")


def nested(depth: int) -> list[Any]:
    deepest: list[Any] = []
    for _ in range(depth):
        deepest = [deepest]
    return deepest


@tool(response_format="content_and_artifact")
def parse() -> tuple[str, list[Any]]:
    """A parse, with its tree, too deep to print, and a node that cannot print as its artifact."""
    return "parsed", [nested(100_000), Unprintable()]


def artifact_recorded(tool_: BaseTool, path: Path) -> session.EventData:
    """The ``tool_exec_end`` of a run whose model calls *tool_* once, then answers: the run
    goes on to its end, and the file is whole."""
    calls = [{"name": tool_.name, "args": {}, "id": "call-1", "type": "tool_call"}]
    graph = agent(with_retry(Script(reply(calls=calls), reply("ok"))), [tool_])

    async def main() -> None:
        async with recording(path) as recorder:
            await graph.ainvoke({"messages": [HumanMessage("go")]}, {"callbacks": [recorder]})

    asyncio.run(main())
    check_file(path)
    [end] = events(path, "tool_exec_end")
    return end


def test_an_artifact_that_cannot_even_print_is_kept_as_its_type_and_the_run_goes_on(tmp_path: Path) -> None:
    end = artifact_recorded(parse, tmp_path / "chat.jsonl")
    assert end.result == "parsed"
    assert end.details == {"type": "builtins.list", "repr": "(its repr failed: RecursionError)"}
    assert to_json(Unprintable()) == {
        "type": f"{__name__}.Unprintable",
        "repr": "(its repr failed: RuntimeError)",
    }


class Summary(pydantic.BaseModel):
    """A model whose computed field fails when it is serialized."""

    text: str = "a summary"

    @pydantic.computed_field(repr=False)  # type: ignore[prop-decorator]
    @property
    def words(self) -> int:
        raise RuntimeError("not counted yet")


@tool(response_format="content_and_artifact")
def summarize() -> tuple[str, Summary]:
    """A summary, with its model as the artifact."""
    return "summarized", Summary()


def test_an_artifact_that_fails_to_serialize_is_kept_as_its_type_and_the_run_goes_on(tmp_path: Path) -> None:
    end = artifact_recorded(summarize, tmp_path / "chat.jsonl")
    assert end.result == "summarized"
    assert end.details == {"type": f"{__name__}.Summary", "repr": "Summary(text='a summary')"}


def test_resume_from_the_checkpoint_in_a_reopened_session(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    model = GenericFakeChatModel(messages=Script(reply("answer 1"), reply("answer 2")))
    graph = agent(model, [add])

    async def turn(prompt: str) -> Any:
        async with recording(path, checkpoint=True) as recorder:
            messages = [*recorder.history(), HumanMessage(prompt)]
            state = await graph.ainvoke({"messages": messages}, {"callbacks": [recorder]})
        return [m.content for m in state["messages"]]

    assert asyncio.run(turn("first")) == ["first", "answer 1"]
    assert asyncio.run(turn("second")) == ["first", "answer 1", "second", "answer 2"]

    summary = check_file(path)
    assert len(summary.runs) == 2
    assert summary.checkpoints == 2
    assert summary.usage["total_tokens"] == 10
    ids = [e.execution.id for e in events(path, "model_exec_start") if e.execution]
    assert ids == ["model-1", "model-2"]  # the resumed run goes on counting turns
    assert [m.role for m in messages(path)] == ["user", "assistant", "user", "assistant"]


@tool
def read(page: int) -> str:
    """Read a page."""
    return f"page {page}: " + "lorem ipsum " * 300


class Sent(AsyncCallbackHandler):
    """The messages of every chat model call, as the model got them, converted anew as a
    file would hold them, without their timestamps."""

    run_inline = True

    def __init__(self) -> None:
        self.calls: list[list[Any]] = []

    async def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        self.calls.append([unstamped(as_read(to_message(m))) for m in messages[0]])


def unstamped_requests(path: Path) -> list[list[Any]]:
    """The messages of every model request of the file at *path*, without their timestamps."""
    return [
        [unstamped(m) for m in e.request["messages"]] if e.request else []
        for e in events(path, "model_request")
    ]


def test_each_message_is_written_once(
    tmp_path: Path,
    sent_messages: dict[str, list[list[session.Message]]],
    every_event: dict[str, list[session.Event]],
) -> None:
    """Seven model calls over two runs, the second resuming the first's conversation: each
    message is written once, with the time it was first seen, and every request reads back as
    the messages the model got."""
    path = tmp_path / "chat.jsonl"

    def read_calls(*pages: int) -> AIMessage:
        calls = [{"name": "read", "args": {"page": n}, "id": f"call-{n}", "type": "tool_call"} for n in pages]
        return reply(tokens=10, calls=calls)

    first_run = (read_calls(1, 2), read_calls(3), read_calls(4), reply("read 4 pages"))
    script = Script(*first_run, read_calls(5), read_calls(6), reply("read 6 pages"))
    graph = agent(GenericFakeChatModel(messages=script), [read])
    sent = Sent()

    async def turn(*messages: BaseMessage) -> Any:
        async with recording(path, checkpoint=True) as recorder:
            state = await graph.ainvoke(
                {"messages": [*recorder.history(), *messages]}, {"callbacks": [recorder, sent]}
            )
        return state["messages"][-1].content

    first = (SystemMessage("Read what you are asked to."), HumanMessage("read pages 1 to 4"))
    assert asyncio.run(turn(*first)) == "read 4 pages"
    assert asyncio.run(turn(HumanMessage("and pages 5 and 6"))) == "read 6 pages"

    figures = check_each_message_once(path)
    # system, prompt, 3 x (calls, results), answer; prompt, 2 x (call, result)
    assert (figures["requests"], figures["messages"]) == (7, 15)
    assert figures["request_bytes"] * 3 < figures["whole_bytes"], figures  # 3.1 to 3.4 times less
    assert unstamped_requests(path) == sent.calls
    requests = [e.request["messages"] if e.request else [] for e in events(path, "model_request")]
    for request in requests:  # each message has the time it was first seen
        times = [m["value"]["timestamp"] for m in request]
        assert times == sorted(times)
    written = Counter(r.run_id for r in session.iter_records(path) if r.type == "message")
    assert list(written.values()) == [9, 6]  # the resumed run wrote its new messages only
    assert [len(requests) for requests in sent_messages.values()] == [4, 3]
    check_converted_once(sent_messages)
    check_both_versions(every_event, tmp_path)


def test_a_message_changed_in_place_is_sent_as_it_is_now(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    calls = [[{"name": "read", "args": {"page": n}, "id": f"call-{n}", "type": "tool_call"}] for n in (1, 2)]
    model = GenericFakeChatModel(messages=Script(reply(calls=calls[0]), reply(calls=calls[1]), reply("done")))
    called = 0

    def clear_the_first_page(messages: list[BaseMessage]) -> list[BaseMessage]:
        nonlocal called
        called += 1
        if called == 3:  # what a host trimming its context may do
            messages[2].content = "[cleared]"
        return messages

    async def aclear_the_first_page(messages: list[BaseMessage]) -> list[BaseMessage]:
        return clear_the_first_page(messages)

    graph = agent(RunnableLambda(clear_the_first_page, afunc=aclear_the_first_page) | model, [read])
    sent = Sent()

    async def main() -> None:
        async with recording(path) as recorder:
            await graph.ainvoke(
                {"messages": [HumanMessage("read two pages")]}, {"callbacks": [recorder, sent]}
            )

    asyncio.run(main())
    assert unstamped_requests(path) == sent.calls
    assert sent.calls[2][2]["value"]["content"] == [{"type": "text", "text": "[cleared]"}]
    assert check_each_message_once(path)["messages"] == 6  # the page, and the page cleared


def test_long_results_that_differ_at_their_end_are_two_messages(tmp_path: Path) -> None:
    """Two tool results of 20 KB alike but for their last character, and a reply sent back
    as a copy: each result is a message of its own, the copy the reply recorded."""
    path = tmp_path / "chat.jsonl"

    @tool
    def tail(page: int) -> str:
        """Read a page, its number last."""
        return "lorem ipsum " * 1700 + str(page)

    calls = [{"name": "tail", "args": {"page": n}, "id": f"call-{n}", "type": "tool_call"} for n in (1, 2)]
    model = GenericFakeChatModel(
        messages=Script(reply(calls=calls[:1]), reply(calls=calls[1:]), reply("done"))
    )

    async def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        answer = await model.ainvoke(state["messages"])
        return {"messages": [answer.model_copy()]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode([tail]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    sent = Sent()

    async def main() -> None:
        async with recording(path) as recorder:
            await graph.compile().ainvoke(
                {"messages": [HumanMessage("read")]}, {"callbacks": [recorder, sent]}
            )

    asyncio.run(main())
    assert unstamped_requests(path) == sent.calls
    # the prompt, two replies, two results
    assert check_each_message_once(path)["messages"] == 5


def test_a_field_replaced_twice_is_sent_as_it_is_now(tmp_path: Path) -> None:
    """The host scrubs a card number before the second call, replacing the message's content
    twice: the second list is made where CPython's free list puts it, at the address of the
    first one (freed by the first replacement), so a message recognised by the addresses of
    its fields' values would be recorded as it was."""
    path = tmp_path / "chat.jsonl"
    calls = [{"name": "add", "args": {"a": 1, "b": 2}, "id": "call-1", "type": "tool_call"}]
    model = GenericFakeChatModel(messages=Script(reply(calls=calls), reply("done")))
    called = 0

    def scrub_the_card(messages: list[BaseMessage]) -> list[BaseMessage]:
        nonlocal called
        called += 1
        if called == 2:
            messages[0].content = [{"type": "text", "text": "my card is [CARD]"}]
            messages[0].content = [{"type": "text", "text": "[REDACTED]"}]
        return messages

    async def ascrub_the_card(messages: list[BaseMessage]) -> list[BaseMessage]:
        return scrub_the_card(messages)

    graph = agent(RunnableLambda(scrub_the_card, afunc=ascrub_the_card) | model, [add])
    sent = Sent()

    async def main() -> None:
        async with recording(path) as recorder:
            card = HumanMessage([{"type": "text", "text": "my card is 4111 1111 1111 1111"}])
            await graph.ainvoke({"messages": [card]}, {"callbacks": [recorder, sent]})

    asyncio.run(main())
    assert sent.calls[1][0]["value"]["content"] == [{"type": "text", "text": "[REDACTED]"}]
    assert unstamped_requests(path) == sent.calls


def test_one_recorder_records_one_run(tmp_path: Path) -> None:
    graph = agent(GenericFakeChatModel(messages=Script(reply("hi"), reply("hi"), reply("hi"))), [add])

    async def main() -> list[Any]:
        async with recording(tmp_path / "a.jsonl") as a, recording(tmp_path / "b.jsonl") as b:
            results = await asyncio.gather(
                graph.ainvoke({"messages": [HumanMessage("1")]}, {"callbacks": [a]}),
                graph.ainvoke({"messages": [HumanMessage("2")]}, {"callbacks": [b]}),
            )
            with pytest.raises(RuntimeError, match="records one run"):
                await graph.ainvoke({"messages": [HumanMessage("3")]}, {"callbacks": [a]})
        return [r["messages"][-1].content for r in results]

    assert asyncio.run(main()) == ["hi", "hi"]
    for name in ("a.jsonl", "b.jsonl"):
        assert check_file(tmp_path / name).counts["agent_end"] == 1


@tool
async def slow() -> str:
    """Take too long."""
    await asyncio.sleep(5)
    return "late"


@tool
async def give_up() -> str:
    """Be cancelled."""
    raise asyncio.CancelledError


def test_every_way_a_tool_fails_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    calls = [
        {"name": "lookup", "args": {"key": "x"}, "id": "call-raise", "type": "tool_call"},
        {"name": "add", "args": {"a": "two", "b": 3}, "id": "call-args", "type": "tool_call"},
        {"name": "slow", "args": {}, "id": "call-timeout", "type": "tool_call"},
    ]
    graph = agent(with_retry(Script(reply(calls=calls), reply("all failed"))), [add, lookup, slow])

    async def main() -> Any:
        async with recording(path) as recorder:
            config: Any = {"callbacks": [recorder]}
            task = graph.ainvoke({"messages": [HumanMessage("fail every way")]}, config)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(task, 0.5)

    asyncio.run(main())
    check_aborted(path)
    check_tool_failures(
        path, {"call-raise": "KeyError", "call-args": "ValidationError", "call-timeout": "CancelledError"}
    )


def test_a_cancelled_tool_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    calls = [{"name": "give_up", "args": {}, "id": "call-cancel", "type": "tool_call"}]
    graph = agent(with_retry(Script(reply(calls=calls), reply("gave up"))), [give_up])

    async def main() -> None:
        async with recording(path) as recorder:
            await graph.ainvoke({"messages": [HumanMessage("give up")]}, {"callbacks": [recorder]})

    with pytest.raises(NodeCancelledError):  # LangGraph's word for a node whose task was cancelled
        asyncio.run(main())
    check_tool_failures(path, {"call-cancel": "CancelledError"})


def test_a_stream_closed_early_is_aborted(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    graph = agent(with_retry(Script(reply("one"), reply("two"))), [add])

    async def main() -> None:
        async with recording(path) as recorder:
            chunks = graph.astream({"messages": [HumanMessage("count")]}, {"callbacks": [recorder]})
            stream = cast(AsyncGenerator[Any, None], chunks)  # an async generator, as the host holds it
            async for _ in stream:
                break
            await stream.aclose()

    asyncio.run(main())
    check_aborted(path)


def test_settings_that_do_not_serialize_do_not_fail_the_run(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    class Opaque:
        def __repr__(self) -> str:
            return "Opaque()"

    model = GenericFakeChatModel(messages=Script(reply("hi"))).bind(handle=Opaque(), max_tokens="many")
    graph = agent(model, [add])

    async def main() -> Any:
        async with recording(path) as recorder:
            state = await graph.ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [recorder]})
        return state["messages"][-1].content

    assert asyncio.run(main()) == "hi"
    check_file(path)
    [request] = [e.request for e in events(path, "model_request")]
    assert request is not None
    assert request["config"]["extra"]["handle"]["repr"] == "Opaque()"


@tool
def login(token: str) -> str:
    """Log in with a token."""
    return f"logged in with {token}"


def test_a_redactor_removes_a_secret_from_tool_arguments_and_results(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    calls = [{"name": "login", "args": {"token": SECRET}, "id": "call-1", "type": "tool_call"}]
    graph = agent(with_retry(Script(reply(calls=calls), reply("in"))), [login])

    async def main() -> None:
        async with recording(path, redact=scrub) as recorder:
            await graph.ainvoke({"messages": [HumanMessage("log in")]}, {"callbacks": [recorder]})

    asyncio.run(main())
    check_redacted(path)


class StreamingFakeChatModel(GenericFakeChatModel):
    """The fake chat model, its stream ending with the reply's usage, as a provider's does."""

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        message = self._generate(messages, stop, run_manager, **kwargs).generations[0].message
        assert isinstance(message, AIMessage)
        alone = GenericFakeChatModel(messages=iter([message]))
        yield from alone._stream(messages, stop, run_manager, **kwargs)
        yield ChatGenerationChunk(message=AIMessageChunk(content="", usage_metadata=message.usage_metadata))


def test_a_reply_sent_back_as_a_copy_is_the_one_recorded(tmp_path: Path) -> None:
    """A node that names its agent's replies puts in the state a copy of the reply LangChain
    reports, its name set (a field the file does not hold): the next request sends it back,
    and the file holds it once, as recorded (version 2 refers to the reply's record)."""
    path = tmp_path / "chat.jsonl"
    calls = [{"name": "add", "args": {"a": 1, "b": 2}, "id": "call-1", "type": "tool_call"}]
    model = GenericFakeChatModel(messages=Script(reply("adding", calls=calls), reply("3")))

    async def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        answer = await model.ainvoke(state["messages"])
        return {"messages": [answer.model_copy(update={"name": "adder"})]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode([add]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    sent = Sent()

    async def main() -> None:
        async with recording(path) as recorder:
            await graph.compile().ainvoke(
                {"messages": [HumanMessage("add")]}, {"callbacks": [recorder, sent]}
            )

    asyncio.run(main())
    assert unstamped_requests(path) == sent.calls
    assert check_each_message_once(path)["messages"] == 3  # the prompt, the reply, the tool result
    [first, _] = [
        e.message
        for e in events(path, "message_end")
        if e.message and e.message["value"]["role"] == "assistant"
    ]
    request = events(path, "model_request")[1].request
    assert request is not None and request["messages"][1] == first


def test_a_chat_model_called_alone_is_the_run(tmp_path: Path) -> None:
    """A chat model streamed or invoked on its own (no chain around it) is a run of one turn:
    agent_start, the turn, agent_end; a checkpoint holds the prompt and the reply."""

    async def main(path: Path, streamed: bool) -> str:
        model = StreamingFakeChatModel(messages=Script(reply("hello there", 4)))
        async with recording(path, checkpoint=True) as recorder:
            prompt = [*recorder.history(), HumanMessage("hi")]
            if not streamed:
                return str((await model.ainvoke(prompt, {"callbacks": [recorder]})).content)
            chunks = [chunk async for chunk in model.astream(prompt, {"callbacks": [recorder]})]
            assert len(chunks) > 1  # it did stream
            return "".join(str(chunk.content) for chunk in chunks)

    for streamed in (False, True):
        path = tmp_path / f"streamed-{streamed}.jsonl"
        assert asyncio.run(main(path, streamed)) == "hello there"
        summary = check_file(path)
        assert [run.end_reason for run in summary.runs] == ["stop"]
        [end] = events(path, "agent_end")
        assert end.summary is not None and end.summary.turn_count == 1
        kinds = [
            r.type
            for r in session.iter_records(path)
            if r.type in ("agent_start", "turn_start", "turn_end", "agent_end")
        ]
        assert kinds == ["agent_start", "turn_start", "turn_end", "agent_end"], kinds
        assert [(m.role, m.content[0]["text"]) for m in messages(path)] == [
            ("user", "hi"),
            ("assistant", "hello there"),
        ]
        opened = session.open(path)
        saved = opened.load_checkpoint()
        opened.close()
        assert saved is not None
        assert [m.content for m in messages_from_dict(saved.snapshot)] == ["hi", "hello there"]


def test_a_chat_model_alone_that_fails_or_is_closed_early(tmp_path: Path) -> None:
    async def failing(path: Path) -> None:
        model = GenericFakeChatModel(messages=Script(RateLimitError("429: rate limit reached")))
        async with recording(path) as recorder:
            async for _ in model.astream([HumanMessage("hi")], {"callbacks": [recorder]}):
                pass

    async def closed_early(path: Path) -> None:
        model = StreamingFakeChatModel(messages=Script(reply("one two three")))
        async with recording(path) as recorder:
            chunks = model.astream([HumanMessage("hi")], {"callbacks": [recorder]})
            stream = cast(AsyncGenerator[Any, None], chunks)  # an async generator, as the host holds it
            async for _ in stream:
                break
            await stream.aclose()

    with pytest.raises(RateLimitError):
        asyncio.run(failing(tmp_path / "failed.jsonl"))
    [run] = check_file(tmp_path / "failed.jsonl").runs
    assert (run.end_reason, run.error) == (
        "error",
        {"message": "429: rate limit reached", "type": "RateLimitError"},
    )
    asyncio.run(closed_early(tmp_path / "closed.jsonl"))
    check_aborted(tmp_path / "closed.jsonl")


@tool
def search(q: str) -> str:
    """Search for something."""
    return f"results for {q}"


@tool
def fetch() -> str:
    """Fetch a page."""
    raise ConnectionError("offline")


def research_tool() -> BaseTool:
    """A tool that runs a sub-agent (its own graph) on the question: rate limited once (its
    retry answers), it asks for ``search`` and ``fetch`` (which fails), then answers."""
    calls = [
        {"name": "search", "args": {"q": "why"}, "id": "call-s", "type": "tool_call"},
        {"name": "fetch", "args": {}, "id": "call-f", "type": "tool_call"},
    ]
    script = Script(RateLimitError("429"), reply(tokens=10, calls=calls), reply("found it", 20))
    return tool_running(agent(with_retry(script), [search, fetch]), "research")


def tool_running(sub_agent: CompiledStateGraph[Any], name: str) -> BaseTool:
    """A tool *name* that runs *sub_agent* (its own graph) on a question, and answers with the
    sub-agent's answer."""

    async def ask(question: str) -> str:
        state = await sub_agent.ainvoke({"messages": [HumanMessage(question)]})
        return str(state["messages"][-1].content)

    return StructuredTool.from_function(coroutine=ask, name=name, description=f"Ask {name} a question.")


def test_an_agent_run_in_a_tool_is_nested_in_its_tool_call(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    ask = [{"name": "research", "args": {"question": "why"}, "id": "call-r", "type": "tool_call"}]
    graph = agent(with_retry(Script(reply(tokens=5, calls=ask), reply("done", 7))), [research_tool()])

    async def main() -> Any:
        async with recording(path) as recorder:
            state = await graph.ainvoke({"messages": [HumanMessage("find out")]}, {"callbacks": [recorder]})
        return state["messages"][-1].content

    assert asyncio.run(main()) == "done"
    summary = check_file(path)
    assert summary.usage["total_tokens"] == 7 + 12 + 22 + 9  # the sub-agent's calls counted
    [tool_call] = [e.execution for e in events(path, "tool_exec_start") if e.tool_id == "call-r"]
    assert tool_call is not None
    starts = [(e.execution.id, e.execution.attempt) for e in events(path, "model_exec_start") if e.execution]
    nested = f"{tool_call.id}/model-"
    assert starts == [("model-1", 1), (nested + "1", 1), (nested + "1", 2), (nested + "2", 1), ("model-2", 1)]
    check_nested(path, "call-r", 12 + 22, tools=("call-s", "call-f"))
    ends = {e.tool_id: e for e in events(path, "tool_exec_end")}
    assert ends["call-s"].result == "results for why" and ends["call-f"].is_error
    assert summary.counts["turn_start"] == 2  # the sub-agent's calls are no turns of the run
    check_conversation_of_two_turns(path)


def test_an_agent_run_in_a_tool_of_a_sub_agent_is_nested_two_levels_down(tmp_path: Path) -> None:
    """The lead's tool runs a sub-agent whose own tool runs another: the inner agent's call
    is nested in the sub-agent's tool call, not beside the sub-agent's calls."""
    path = tmp_path / "chat.jsonl"
    dig = tool_running(agent(with_retry(Script(reply("deep", 20))), [search]), "dig")
    down = [{"name": "dig", "args": {"question": "how"}, "id": "call-d", "type": "tool_call"}]
    middle = agent(with_retry(Script(reply(tokens=10, calls=down), reply("found", 15))), [dig])
    ask = [{"name": "research", "args": {"question": "why"}, "id": "call-r", "type": "tool_call"}]
    research = tool_running(middle, "research")
    graph = agent(with_retry(Script(reply(tokens=5, calls=ask), reply("done", 7))), [research])

    async def main() -> Any:
        async with recording(path) as recorder:
            state = await graph.ainvoke({"messages": [HumanMessage("find out")]}, {"callbacks": [recorder]})
        return state["messages"][-1].content

    assert asyncio.run(main()) == "done"
    summary = check_file(path)
    assert summary.usage["total_tokens"] == 7 + (12 + 17) + 22 + 9
    check_nested(path, "call-r", 12 + 17, tools=("call-d",))
    check_nested(path, "call-d", 22)
    [dig_call] = [e.execution for e in events(path, "tool_exec_start") if e.tool_id == "call-d"]
    assert dig_call is not None and dig_call.parent_id.endswith("call-r/model-1"), dig_call
    starts = [e.execution.id for e in events(path, "model_exec_start") if e.execution]
    down_id = dig_call.id + "/model-1"
    assert starts == ["model-1", "tool-1-call-r/model-1", down_id, "tool-1-call-r/model-2", "model-2"]
    check_conversation_of_two_turns(path)


def check_conversation_of_two_turns(path: Path) -> None:
    """The run's own messages only: the prompt, the call, its result, the answer."""
    assert [m.role for m in messages(path)] == ["user", "assistant", "tool", "assistant"]


class Meeting(GenericFakeChatModel):
    """A fake model for branches run at once: each request waits at *barrier* until the
    other branch's is under way too.  A branch's topic is its first message's text; the
    model asks for ``add`` (the call ``call-<topic>``), then, given its result, answers
    ``<topic>: <result>``."""

    barrier: Any = None

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        await self.barrier.wait()
        topic, last = str(messages[0].content), messages[-1]
        if isinstance(last, ToolMessage):
            message = reply(f"{topic}: {last.content}", 4)
        else:
            ask = {
                "name": "add",
                "args": {"a": len(topic), "b": 1},
                "id": f"call-{topic}",
                "type": "tool_call",
            }
            message = reply(tokens=3, calls=[ask])
        return ChatResult(generations=[ChatGeneration(message=message)])


def check_branches(path: Path, topics: tuple[str, ...]) -> None:
    """Each branch (a *topic*) made two model calls, at once with the other branch's, and a
    tool call between them: its tool call's parent is its own first model call, its second
    model call was sent its own tool's result, each reply is recorded in its own call, and
    each call and turn started and ended once, each message written once."""
    check_each_message_once(path)
    starts = [e.execution for e in events(path, "model_exec_start") if e.execution]
    ends = {e.execution.id: e for e in events(path, "model_exec_end") if e.execution}
    requests = {
        e.execution.id: e.request["messages"]
        for e in events(path, "model_request")
        if e.execution and e.request
    }
    replies = {
        e.execution.id: e.message
        for e in events(path, "message_end")
        if e.execution and e.execution.kind == "model"
    }
    assert len(starts) == len(ends) == len(replies) == 2 * len(topics), (starts, ends)
    assert len(events(path, "model_exec_end")) == len(starts) and len(events(path, "tool_exec_end")) == len(
        topics
    )
    kinds = [r.type for r in session.iter_records(path) if r.type in ("model_exec_start", "model_exec_end")]
    assert kinds[: len(topics)] == ["model_exec_start"] * len(
        topics
    )  # the first calls were under way at once
    tools = {str(e.result): e.execution for e in events(path, "tool_exec_end")}  # by their result
    assert len(tools) == len(topics)
    for topic in topics:
        [asking] = [
            ends[s.id]
            for s in starts
            if any(
                b["type"] == "toolCall" and b["tool_call"]["id"] == f"call-{topic}"
                for b in ends[s.id].message["value"]["content"]
            )
        ]
        tool = tools[str(len(topic) + 1)]
        assert asking.execution is not None and tool is not None
        assert (tool.parent_id, tool.turn_index) == (asking.execution.id, asking.execution.turn_index)
        [answering] = [
            s.id
            for s in starts
            if any(
                m["value"].get("metadata", {}).get("tool_call_id") == f"call-{topic}" for m in requests[s.id]
            )
        ]
        text = [b["text"] for b in ends[answering].message["value"]["content"] if b["type"] == "text"]
        assert text == [f"{topic}: {len(topic) + 1}"]
        assert (
            replies[answering] == ends[answering].message and replies[asking.execution.id] == asking.message
        )
    turns = [
        (r.type, r.data["turn_index"])
        for r in session.iter_records(path)
        if r.type in ("turn_start", "turn_end")
    ]
    assert sorted(turns) == sorted({*turns}) and len(turns) == 4 * len(topics), turns  # each once


def test_branches_sent_at_once_are_recorded_each_in_its_own_calls(tmp_path: Path) -> None:
    """A LangGraph ``Send`` fan-out: two branches, each an agent of its own (the model, its
    tool, the model), run at once."""
    path = tmp_path / "chat.jsonl"

    async def main() -> list[str]:
        model = Meeting(messages=iter([]), barrier=asyncio.Barrier(2))
        graph = StateGraph(MessagesState)
        graph.add_node("worker", agent(model, [add]))
        topics = [Send("worker", {"messages": [HumanMessage(topic)]}) for topic in ("apples", "pears")]
        graph.add_conditional_edges(START, lambda state: topics)
        async with recording(path) as recorder:
            state = await graph.compile().ainvoke({"messages": []}, {"callbacks": [recorder]})
        return sorted(str(m.content) for m in state["messages"] if isinstance(m, AIMessage) and m.content)

    assert asyncio.run(main()) == ["apples: 7", "pears: 6"]
    check_branches(path, ("apples", "pears"))


def test_two_nodes_from_the_start_are_recorded_each_in_its_own_calls(tmp_path: Path) -> None:
    """Two nodes from ``START``, run at once, each calling the model, its tool (given the
    arguments alone: the tool call has no id), the model."""
    path = tmp_path / "chat.jsonl"

    def branch(model: Meeting, topic: str) -> Any:
        async def node(state: MessagesState) -> dict[str, list[BaseMessage]]:
            sent: list[BaseMessage] = [HumanMessage(topic)]
            first = await model.ainvoke(sent)
            assert isinstance(first, AIMessage)
            [call] = first.tool_calls
            result = ToolMessage(str(await add.ainvoke(call["args"])), tool_call_id=call["id"])
            return {"messages": [*sent, first, result, await model.ainvoke([*sent, first, result])]}

        return node

    async def main() -> list[str]:
        model = Meeting(messages=iter([]), barrier=asyncio.Barrier(2))
        graph = StateGraph(MessagesState)
        for topic in ("apples", "pears"):
            graph.add_node(topic, branch(model, topic))
            graph.add_edge(START, topic)
        async with recording(path) as recorder:
            state = await graph.compile().ainvoke({"messages": []}, {"callbacks": [recorder]})
        return sorted(str(m.content) for m in state["messages"] if isinstance(m, AIMessage) and m.content)

    assert asyncio.run(main()) == ["apples: 7", "pears: 6"]
    check_branches(path, ("apples", "pears"))


def test_the_example_script_runs_as_written(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    assert run_example("langchain_example.py", path) == ["It is sunny in Paris."] * 2
    check_example(path, 4, ["weather", "weather"])


def test_a_stream_left_unfinished_ends_aborted_when_its_recording_is_left(tmp_path: Path) -> None:
    """A graph's stream broken out of and never closed (LangChain tells the recorder nothing
    until it is collected): its run ends ``aborted`` when the ``recording`` block is left,
    once."""
    path = tmp_path / "chat.jsonl"
    calls = [{"name": "add", "args": {"a": 1, "b": 2}, "id": "call-1", "type": "tool_call"}]
    graph = agent(with_retry(Script(reply(calls=calls), reply("three"))), [add])
    streams: list[Any] = []  # kept from being collected until the loop ends

    async def main() -> None:
        async with recording(path) as recorder:
            streams.append(graph.astream({"messages": [HumanMessage("add")]}, {"callbacks": [recorder]}))
            async for _ in streams[0]:
                break

    asyncio.run(main())
    check_aborted(path)
    [end] = events(path, "agent_end")
    assert end.error == {"message": "the run was left before it ended", "type": "CancelledError"}


def reading(result: str) -> CompiledStateGraph[Any]:
    """An agent that reads once (the tool returns *result*), then answers."""

    @tool
    def read(key: str) -> str:
        """Read a key."""
        return result

    model = GenericFakeChatModel(
        messages=Script(reply(calls=[{"name": "read", "args": {"key": "x"}, "id": "call-1"}]), reply("ok"))
    )
    return agent(model, [read])


def test_the_event_loop_neither_writes_nor_syncs(
    tmp_path: Path, file_calls: list[tuple[str, int, bool]]
) -> None:
    path = tmp_path / "chat.jsonl"

    async def main() -> None:
        async with recording(path, checkpoint=True) as recorder:
            await reading("entry x").ainvoke(
                {"messages": [HumanMessage("read x")]}, {"callbacks": [recorder]}
            )

    asyncio.run(main())
    check_off_the_loop(file_calls, path)
    assert len(events(path, "tool_exec_end")) == 1
    check_file(path)


def test_a_record_that_cannot_be_written_fails_the_run(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"

    async def main() -> None:
        async with recording(path, max_line_bytes=4096) as recorder:
            await reading("x" * 5000).ainvoke(
                {"messages": [HumanMessage("read x")]}, {"callbacks": [recorder]}
            )

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
    check_cancelled_as_the_program_ends("session_langchain", tmp_path / "chat.jsonl")
