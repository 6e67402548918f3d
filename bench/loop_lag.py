"""How long a recorder keeps an agent's event loop from running: the added max loop lag.

    PYTHON bench/loop_lag.py pydantic-ai    # PYTHON: an environment with that framework
    PYTHON bench/loop_lag.py --runs 9 openai-agents langchain google-adk
    python3 bench/loop_lag.py --text session   # session.py alone, no framework

A 1 ms heartbeat runs beside an offline agent (the framework's own test model, a tool
called at each turn) and notes how late it wakes at worst: that is the max lag of the run.
Each case is run with the recorder (``recording(..., checkpoint=True)``) and without,
interleaved in this one process; "added" is the median over the pairs of the difference.
A normal run is four turns with a 1 KB tool result each; the big run has one 20 MB tool
result (a list of rows; ``--text``: one string), and its reference is one ``json.dumps`` of
that value, timed after each pair (the median).
A framework that is not installed is skipped, saying so.  ``session`` is no framework: the
tool's results recorded with ``session.py`` alone from a worker thread, the floor under the
recorders; it also times a small record written beside another thread against alone.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List, Optional

ROOT = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT.parent), str(ROOT.parent / "recorders")]

from measure import timed  # noqa: E402

TURNS = 4
SMALL = "a line of a file, as a tool reads it\n" * 28  # about 1 KB


def big_value(size: int = 20_000_000, text: bool = False) -> Any:
    """About *size* bytes of JSON: rows as a database tool returns them, or (*text*) one
    string, as a tool that reads a file returns it."""
    if text:
        return "a line of a file, as a tool reads it\n" * (size // 38)
    row = {"id": 0, "name": "row 00000", "text": "x" * 180, "score": 0.5, "tags": ["a", "b"]}
    count = size // (len(json.dumps(row, separators=(",", ":"))) + 1)
    return [dict(row, id=n, name=f"row {n}") for n in range(count)]


class Tool:
    """The tool's results in turn: *big* at the second call (if given), else ``SMALL``."""

    def __init__(self, big: Optional[Any]) -> None:
        self.big = big
        self.calls = 0

    def __call__(self) -> Any:
        self.calls += 1
        return self.big if self.big is not None and self.calls == 2 else SMALL


# A run: (the tool, the recorder's file or None) -> awaitable of the run
Runner = Callable[[Tool, Optional[Path]], Awaitable[None]]


def pydantic_ai_run() -> Runner:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from session_pydantic_ai import recording

    def model(messages: List[Any], info: Any) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn < TURNS - 1:
            return ModelResponse([ToolCallPart("read", {"path": f"f{turn}"}, f"call-{turn}")])
        return ModelResponse([TextPart("done")])

    async def run(tool: Tool, path: Optional[Path]) -> None:
        def read(path: str) -> Any:
            return tool()

        agent = Agent(FunctionModel(model), tools=[read])
        if path is None:
            await agent.run("read the files")
            return
        async with recording(path, checkpoint=True) as recorder:
            await agent.run("read the files", capabilities=[recorder])

    return run


def openai_agents_run() -> Runner:
    from agents import Agent, Runner, Usage, function_tool, set_tracing_disabled
    from agents.testing.model import ModelStep, ScriptedModel
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
    from session_openai_agents import recording

    set_tracing_disabled(True)
    usage = Usage(requests=1, input_tokens=5, output_tokens=1, total_tokens=6)

    def call(turn: int) -> ModelStep:
        call = ResponseFunctionToolCall(
            type="function_call", call_id=f"call-{turn}", name="read", arguments="{}", id=f"fc-{turn}"
        )
        return ModelStep(output=[call], usage=usage)

    text = ResponseOutputText(type="output_text", text="done", annotations=[])
    answer = ResponseOutputMessage(
        id="m", type="message", role="assistant", status="completed", content=[text]
    )

    async def run(tool: Tool, path: Optional[Path]) -> None:
        def read() -> Any:
            """Read a file."""
            return tool()

        steps = [call(turn) for turn in range(TURNS - 1)] + [ModelStep(output=[answer], usage=usage)]
        agent = Agent(name="reader", model=ScriptedModel(steps), tools=[function_tool(read)])
        if path is None:
            await Runner.run(agent, "read the files")
            return
        async with recording(path, checkpoint=True) as recorder:
            await recorder.run(agent, "read the files")

    return run


def langchain_run() -> Runner:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool as make_tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from session_langchain import recording

    def replies() -> List[AIMessage]:
        calls = [[{"name": "read", "args": {}, "id": f"call-{turn}"}] for turn in range(TURNS - 1)]
        return [AIMessage("", tool_calls=c) for c in calls] + [AIMessage("done")]

    async def run(tool: Tool, path: Optional[Path]) -> None:
        model = GenericFakeChatModel(messages=iter(replies()))

        def read() -> Any:
            """Read a file."""
            return tool()

        async def call_model(state: MessagesState) -> Dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        graph = StateGraph(MessagesState)
        graph.add_node("model", call_model)
        graph.add_node("tools", ToolNode([make_tool(read)]))
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", tools_condition)
        graph.add_edge("tools", "model")
        agent = graph.compile()
        prompt = {"messages": [("user", "read the files")]}
        if path is None:
            await agent.ainvoke(prompt)
            return
        async with recording(path, checkpoint=True) as recorder:
            await agent.ainvoke(prompt, config={"callbacks": [recorder]})

    return run


def google_adk_run() -> Runner:
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types
    from session_google_adk import recording

    class Scripted(BaseLlm):  # type: ignore[misc]
        model: str = "scripted"

        async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> Any:
            turn = sum(c.role == "model" for c in llm_request.contents)
            if turn < TURNS - 1:
                call = types.FunctionCall(id=f"call-{turn}", name="read", args={})
                part = types.Part(function_call=call)
            else:
                part = types.Part(text="done")
            usage = types.GenerateContentResponseUsageMetadata(
                prompt_token_count=5, candidates_token_count=1, total_token_count=6
            )
            yield LlmResponse(content=types.Content(role="model", parts=[part]), usage_metadata=usage)

    async def run(tool: Tool, path: Optional[Path]) -> None:
        def read() -> Any:
            """Read a file."""
            return {"result": tool()}

        agent = LlmAgent(name="reader", model=Scripted(), tools=[read])
        plugins: List[Any] = []

        async def go() -> None:
            service = InMemorySessionService()
            runner = Runner(app=App(name="app", root_agent=agent, plugins=plugins), session_service=service)
            chat = await service.create_session(app_name="app", user_id="u")
            message = types.Content(role="user", parts=[types.Part(text="read the files")])
            async for _ in runner.run_async(user_id="u", session_id=chat.id, new_message=message):
                pass

        if path is None:
            await go()
            return
        async with recording(path, checkpoint=True) as recorder:
            plugins.append(recorder)
            await go()

    return run


def session_run() -> Runner:
    """No framework: the tool's results recorded with ``session.py`` alone, each handed to a
    worker thread as the recorders hand theirs to their writer thread."""
    import session

    async def run(tool: Tool, path: Optional[Path]) -> None:
        loop = asyncio.get_running_loop()
        opened = None if path is None else await loop.run_in_executor(None, session.create, path)
        run = None if opened is None else await loop.run_in_executor(None, opened.begin_run)
        for turn in range(TURNS):
            result = {"output": tool()}
            if run is not None:
                execution = session.Execution(f"call-{turn}", "tool", turn_index=turn)
                event = session.Event("tool_exec_end", execution=execution, tool="read", result=result)
                await loop.run_in_executor(None, run.record, event)
        if opened is not None:
            await loop.run_in_executor(None, opened.close)

    return run


def record_cost(runs: int) -> str:
    """What quoting strings a piece at a time costs a small record: written beside another
    thread (which may wait for the GIL) against alone, interleaved."""
    import session

    message = session.Message("assistant", [session.text_block("The answer, in a sentence.")], "stop")
    event = session.Event("message_end", execution=session.Execution("m", "model"), message=message)
    with tempfile.TemporaryDirectory() as folder:
        opened = session.create(Path(folder) / "cost.jsonl")
        run = opened.begin_run()

        def cost() -> float:
            return timed(lambda: [run.record(event) for _ in range(5000)]) / 5000

        pairs = []
        for _ in range(runs):
            alone = cost()
            idle = threading.Event()
            waiter = threading.Thread(target=idle.wait)
            waiter.start()
            pairs.append((cost(), alone))
            idle.set()
            waiter.join()
        opened.close()
    beside, alone = (statistics.median(p[n] for p in pairs) for n in (0, 1))
    times = f"{beside * 1e6:.1f} us beside another thread, {alone * 1e6:.1f} us alone"
    return f"  a small record      {times} ({beside / alone:.2f}x)"


FRAMEWORKS: Dict[str, Callable[[], Runner]] = {
    "session": session_run,
    "pydantic-ai": pydantic_ai_run,
    "openai-agents": openai_agents_run,
    "langchain": langchain_run,
    "google-adk": google_adk_run,
}
MODULES = {
    "session": "session",
    "pydantic-ai": "pydantic_ai",
    "openai-agents": "agents",
    "langchain": "langgraph",
    "google-adk": "google.adk",
}


async def max_lag(work: Awaitable[None]) -> float:
    """The latest a 1 ms heartbeat woke, in seconds, while *work* ran."""
    done = False
    worst = 0.0

    async def heartbeat() -> None:
        nonlocal worst
        while not done:
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - start - 0.001)

    beat = asyncio.ensure_future(heartbeat())
    await asyncio.sleep(0.005)  # the heartbeat is under way
    try:
        await work
    finally:
        done = True
        await beat
    return worst


def lags(run: Runner, big: Optional[Any], folder: Path, pairs: int) -> List[tuple[float, float, float]]:
    """*pairs* (with the recorder, without, one ``json.dumps`` of *big*) max lags and times,
    interleaved, for one case."""
    found = []
    for n in range(pairs):
        path = folder / f"run-{n}.jsonl"
        if n % 2:
            bare = asyncio.run(max_lag(run(Tool(big), None)))
            recorded = asyncio.run(max_lag(run(Tool(big), path)))
        else:
            recorded = asyncio.run(max_lag(run(Tool(big), path)))
            bare = asyncio.run(max_lag(run(Tool(big), None)))
        found.append((recorded, bare, timed(lambda: json.dumps(big))))
        path.unlink()
    return found


def report(name: str, found: List[tuple[float, float, float]], big: bool) -> None:
    added = statistics.median(r - b for r, b, _ in found)
    recorded = statistics.median(r for r, _, _ in found)
    bare = statistics.median(b for _, b, _ in found)
    line = f"  {name:18} max lag {recorded * 1e3:7.2f} ms, without {bare * 1e3:7.2f} ms"
    line += f": added {added * 1e3:7.2f} ms"
    if big:
        reference = statistics.median(d for _, _, d in found)
        line += f" ({added / reference:.2f}x one json.dumps of the value, {reference * 1e3:.2f} ms)"
    print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("frameworks", nargs="*", default=list(FRAMEWORKS), choices=list(FRAMEWORKS))
    parser.add_argument("--runs", type=int, default=7, help="pairs per case (default 7)")
    parser.add_argument("--size", type=int, default=20_000_000, help="the big result's JSON bytes")
    parser.add_argument("--text", action="store_true", help="the big result is one string, not rows")
    args = parser.parse_args()
    big = big_value(args.size, args.text)
    print(f"Python {sys.version.split()[0]}; {args.runs} interleaved pairs per case", flush=True)
    for name in args.frameworks:
        if importlib.util.find_spec(MODULES[name].split(".")[0]) is None or (
            "." in MODULES[name] and importlib.util.find_spec(MODULES[name]) is None
        ):
            print(f"{name}: skipped, {MODULES[name]} is not installed in this Python")
            continue
        run = FRAMEWORKS[name]()
        print(f"{name}:", flush=True)
        with tempfile.TemporaryDirectory() as folder:
            asyncio.run(max_lag(run(Tool(None), Path(folder) / "warm.jsonl")))  # imports, caches
            report("normal run", lags(run, None, Path(folder), args.runs), False)
            size = len(json.dumps(big, separators=(",", ":"))) / 1e6
            report(f"{size:.0f} MB tool result", lags(run, big, Path(folder), args.runs), True)
        if name == "session":
            print(record_cost(args.runs), flush=True)


if __name__ == "__main__":
    main()
