"""An offline agent loop, recorded with session.py.

A scripted model answers from a script, two real tools read this project's files, one tool
call fails, the first model call is rate limited and retried, the context is compacted, a
checkpoint is saved after every turn, and a second run resumes from the latest checkpoint,
as a host would after a restart.  Each call's CallRef goes to a small "timeline", as an
application's own trace would hold it.

Each reply's usage names its provider and model, its tokens and its cost, as a provider's
client reports them.  No provider is asked: the provider is "demo", the model
"scripted-model", and the figures are examples, made up to look like a real call's: 300 input
tokens a message of the context, 48 output tokens a reply, priced at $3 a million input
tokens and $15 a million output tokens.

    python3 examples/agent_loop.py demo.jsonl
    python3 -m session validate demo.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a clone without installing anything

import session  # noqa: E402 - after the path above
from session import AgentSnapshot, AgentState, Event, Execution, Message  # noqa: E402

TOOLS = [
    {"name": "list_files", "description": "List a folder of the project", "parameters": {"folder": "string"}},
    {"name": "count_lines", "description": "Count the lines of a file", "parameters": {"path": "string"}},
]
CONFIG = session.CallConfig(max_tokens=1024, thinking_level="low", api_key="sk-demo-never-written")
PRICES = {"input": 3, "output": 15}  # example figures: USD a million tokens


class RateLimited(Exception):
    """What a provider's client raises on HTTP 429."""


def list_files(folder: str) -> List[str]:
    return sorted(p.name for p in (ROOT / folder).iterdir() if not p.name.startswith("."))


def count_lines(path: str) -> int:
    with (ROOT / path).open(encoding="utf-8") as f:
        return sum(1 for _ in f)


TOOL_FUNCTIONS: Dict[str, Callable[..., Any]] = {"list_files": list_files, "count_lines": count_lines}
Timeline = List[Tuple[session.CallRef, str, str]]  # what an application's own trace keeps


def text(message: Message) -> str:
    return " ".join(block.get("text", "") for block in message.content or () if block["type"] == "text")


def tool_call(call_id: str, name: str, **args: Any) -> session.ToolCallBlock:
    return session.tool_call_block(call_id, name, args)


def usage(input_tokens: int, output_tokens: int) -> session.Usage:
    """A reply's usage as a provider's client reports it: tokens, and their cost at PRICES."""
    cost_in = input_tokens * PRICES["input"]  # in millionths of a USD
    cost_out = output_tokens * PRICES["output"]
    cost: session.Cost = {
        "input": cost_in / 1e6,
        "output": cost_out / 1e6,
        "total": (cost_in + cost_out) / 1e6,
    }
    return {
        "provider": "demo",
        "model": "scripted-model",
        "input": input_tokens,
        "output": output_tokens,
        "total_tokens": input_tokens + output_tokens,
        "cost": cost,
    }


class ScriptedModel:
    """Answers the way the script says; looks at the latest tool results for its final words."""

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, messages: List[Message]) -> Message:
        self.calls += 1
        if self.calls == 1:
            raise RateLimited("429 Too Many Requests: retry after 10 ms")
        question = next(text(m) for m in reversed(messages) if m.role == "user")
        results = [text(m) for m in messages if m.role == "tool"]
        content: List[session.ContentBlock]
        if "tests" in question and not any("test_session.py" in r for r in results):
            content = [tool_call("call-4", "count_lines", path="test_session.py")]
        elif "tests" in question:
            content = [session.text_block(f"The tests: {results[-1]}.")]
        elif not results:
            content = [
                session.text_block("Let me look around."),
                tool_call("call-1", "list_files", folder="."),
                tool_call("call-2", "count_lines", path="sessions.py"),
            ]
        elif not any(r.startswith("session.py:") for r in results):
            content = [tool_call("call-3", "count_lines", path="session.py")]
        else:
            content = [session.text_block(f"{results[-1]}; the project holds {results[0]}.")]
        stop = "toolUse" if any(b["type"] == "toolCall" for b in content) else "stop"
        return Message("assistant", content, stop, usage(300 * len(messages), 48))


def call_model(
    run: session.Run, model: ScriptedModel, state: AgentState, turn: int, timeline: Timeline
) -> Message:
    """One model call with up to two retries, as a kernel's executor reports it."""
    for attempt in (1, 2, 3):
        execution = Execution(f"model-{turn}", "model", turn_index=turn, attempt=attempt)
        request = session.ModelRequest(list(state.messages), TOOLS, CONFIG)
        run.record(Event("model_exec_start", execution=execution))
        run.record(Event("model_request", execution=execution, request=request))
        try:
            response = model.generate(state.messages)
        except RateLimited as exc:
            run.record(Event("model_exec_end", execution=execution, error=exc))
            timeline.append((run.ref(execution), "model", "error"))
            retry = session.RetryInfo(max_retries=2, delay=0.01, error=exc)
            run.record(Event("retry", execution=execution, retry=retry))
            continue
        run.record(Event("model_stream", execution=execution, delta="partial tokens"))  # not written
        run.record(Event("model_exec_end", execution=execution, message=response))
        run.record(Event("message_end", execution=execution, message=response))
        timeline.append((run.ref(execution), "model", "ok"))
        return response
    raise RuntimeError("the model kept failing")


def run_tools(run: session.Run, response: Message, turn: int, timeline: Timeline) -> List[Message]:
    """Run each tool call of *response*; a failure becomes an error result, not a crash."""
    results = []
    for block in response.content or ():
        if block["type"] != "toolCall":
            continue
        call = block["tool_call"]
        execution = Execution(call["id"], "tool", parent_id=f"model-{turn}", turn_index=turn)
        name, args = call["name"], call["args"]
        run.record(Event("tool_exec_start", execution=execution, tool_id=call["id"], tool=name, args=args))
        try:
            value = TOOL_FUNCTIONS[name](**args)
            output, error = f"{args.get('path', args.get('folder'))}: {value}", None
        except OSError as exc:
            output, error = f"error: {exc.strerror}", exc
        run.record(
            Event(
                "tool_exec_end",
                execution=execution,
                tool_id=call["id"],
                tool=name,
                result={"output": output},
                is_error=error is not None,
                error=error,
                disposition="continue",
            )
        )
        timeline.append((run.ref(execution), "tool", "error" if error else "ok"))
        message = session.tool_result(call["id"], output, is_error=error is not None)
        run.record(Event("message_end", execution=execution, message=message))
        results.append(message)
    return results


def compact(run: session.Run, state: AgentState, turn: int) -> None:
    """Keep the first user message and the last three messages: a stand-in for summarising."""
    execution = Execution(f"compact-{turn}", "compact", turn_index=turn)
    run.record(Event("context_prepare_start", execution=execution, context_operation="compact"))
    dropped = state.messages[1:-3]
    state.messages = state.messages[:1] + state.messages[-3:]
    compaction = {"dropped_messages": len(dropped), "kept_messages": len(state.messages)}
    run.record(Event("context_compacted", execution=execution, compaction=compaction))
    run.record(Event("context_prepare_end", execution=execution, context_operation="compact"))


def agent_loop(
    run: session.Run, model: ScriptedModel, state: AgentState, question: str, timeline: Timeline
) -> None:
    run.record(Event("agent_start"))
    state.messages.append(Message("user", [session.text_block(question)]))
    turns = tool_calls = tool_errors = 0
    while True:
        turns += 1
        run.record(Event("turn_start", turn_index=turns))
        if len(state.messages) > 6:
            compact(run, state, turns)
        response = call_model(run, model, state, turns, timeline)
        state.messages.append(response)
        results = run_tools(run, response, turns, timeline)
        state.messages.extend(results)
        tool_calls += len(results)
        tool_errors += sum(text(r).startswith("error") for r in results)
        run.record(Event("turn_end", turn_index=turns, state=state))
        run.save_checkpoint(AgentSnapshot(state))  # a committed boundary: resume from here
        if not results:
            break
    summary = session.RunSummary(turns, tool_calls, tool_errors, "stop")
    run.record(Event("agent_end", summary=summary))


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    force = "--force" in args
    files = [arg for arg in args if arg != "--force"]
    if len(files) != 1:
        print("usage: python3 examples/agent_loop.py [--force] SESSION_FILE", file=sys.stderr)
        return 2
    path = Path(files[0])
    if path.exists() and not force:
        print(f"{path} exists: pass --force to replace it", file=sys.stderr)
        return 1
    path.unlink(missing_ok=True)
    model = ScriptedModel()
    timeline: Timeline = []

    with session.create(path) as s, s.begin_run() as run:
        agent_loop(run, model, AgentState(), "How long is session.py, and what is beside it?", timeline)

    # Later, in another process: reopen, resume from the latest checkpoint, ask more.
    with session.open(path) as s:
        checkpoint = s.load_checkpoint()
        assert checkpoint is not None
        with s.begin_run() as run:
            agent_loop(run, model, checkpoint.snapshot.state, "And how long are the tests?", timeline)

    for ref, kind, outcome in timeline:
        print(
            f"{kind:5} {ref.execution_id:8} attempt {ref.attempt}  {outcome:5}  {json.dumps(ref.to_json())}"
        )
    result = session.read(path, lambda record: None)
    print(f"recorded {result.records} records ({result.complete_bytes} bytes) to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
