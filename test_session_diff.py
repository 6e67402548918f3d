"""Tests of ``python -m session diff``, on pairs of sessions recorded by examples/agent_loop.py."""

from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

import session
import session_diff
from session import AgentState, Event, Execution, Message

HERE = Path(__file__).resolve().parent


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("agent_loop_for_diff", HERE / "examples" / "agent_loop.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record(
    path: Path,
    questions: Tuple[str, ...] = (
        "How long is session.py, and what is beside it?",
        "And how long are the tests?",
    ),
    *,
    version: int = 2,
    retry: bool = True,
    compaction: bool = True,
    system: str = "",
    max_tokens: int = 1024,
    count_lines: Optional[Any] = None,
    model_name: str = "",
    described: str = "Count the lines of a file",
    hesitant: bool = False,
    parallel: bool = False,
    ids: str = "",
) -> Path:
    """A session of the example loop, one run per question, varied as asked: *model_name* in
    each reply's usage, *described* the count_lines tool, a *hesitant* model that looks at a
    folder first (one turn more), tools run *parallel* (all started, then ended last first),
    *ids* the config's session id and prompt cache key."""
    loop = _example()
    loop.CONFIG = session.CallConfig(
        max_tokens=max_tokens, thinking_level="low", session_id=ids, prompt_cache_key=ids
    )
    loop.TOOLS[1] = {**loop.TOOLS[1], "description": described}
    if not compaction:
        loop.compact = lambda run, state, turn: None
    if count_lines is not None:
        loop.TOOL_FUNCTIONS["count_lines"] = count_lines
    if parallel:
        loop.run_tools = functools.partial(run_tools_in_parallel, loop)
    model = loop.ScriptedModel()
    model.generate = functools.partial(generate, model, loop, model_name, hesitant)
    model.calls = 0 if retry else 1  # the first call is rate limited
    state = AgentState([Message("system", [session.text_block(system)])] if system else [])
    with session.create(path, version=version) as s:
        for question in questions:
            with s.begin_run() as run:
                loop.agent_loop(run, model, state, question, [])
    return path


def generate(model: Any, loop: Any, name: str, hesitant: bool, messages: List[Message]) -> Message:
    """The example's scripted model, naming *name* in its usage; if *hesitant*, its third
    call (the second turn's) lists the examples folder first."""
    if hesitant and model.calls == 2:
        model.calls += 1
        return Message("assistant", [loop.tool_call("call-x", "list_files", folder="examples")], "toolUse")
    reply: Message = loop.ScriptedModel.generate(model, messages)
    if name:
        reply.usage = {**(reply.usage or {}), "model": name}
    return reply


def run_tools_in_parallel(
    loop: Any, run: session.Run, response: Message, turn: int, timeline: Any
) -> List[Message]:
    """The example's tool calls of *response*, recorded as its run_tools does, but all
    started, then ended last first."""
    calls = [b["tool_call"] for b in response.content or () if b["type"] == "toolCall"]
    executions = [Execution(c["id"], "tool", parent_id=f"model-{turn}", turn_index=turn) for c in calls]
    for call, execution in zip(calls, executions):
        name, args = call["name"], call["args"]
        run.record(Event("tool_exec_start", execution=execution, tool_id=call["id"], tool=name, args=args))
    results = []
    for call, execution in reversed(list(zip(calls, executions))):
        name, args = call["name"], call["args"]
        error: Optional[OSError] = None
        try:
            output = f"{args.get('path', args.get('folder'))}: {loop.TOOL_FUNCTIONS[name](**args)}"
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
        results.append(session.tool_result(call["id"], output, is_error=error is not None))
    return results[::-1]  # in the order of the calls, as the model reads them


def parallel(
    path: Path, ended: Tuple[str, ...], result: str = "42", usage: Optional[session.Usage] = None
) -> Path:
    """One turn whose model asks for two tools, run at once, ending in the order *ended*."""
    calls = {"t1": ("list_files", {"folder": "."}), "t2": ("count_lines", {"path": "session.py"})}
    blocks: List[session.ContentBlock] = [session.tool_call_block(i, n, a) for i, (n, a) in calls.items()]
    reply = Message("assistant", blocks, "toolUse", usage)
    with session.create(path) as s, s.begin_run() as run:
        model = Execution("model-1", "model", turn_index=1)
        request = session.ModelRequest([Message("user", [session.text_block("look")])])
        run.record(Event("model_request", execution=model, request=request))
        run.record(Event("model_exec_end", execution=model, message=reply))
        for call_id, (name, args) in calls.items():
            tool = Execution(call_id, "tool", parent_id="model-1", turn_index=1)
            run.record(Event("tool_exec_start", execution=tool, tool_id=call_id, tool=name, args=args))
        for call_id in ended:
            tool = Execution(call_id, "tool", parent_id="model-1", turn_index=1)
            name = calls[call_id][0]
            run.record(Event("tool_exec_end", execution=tool, tool_id=call_id, tool=name, result=result))
    return path


def diff(capsys: Any, *args: str) -> Tuple[int, str, str]:
    status = session.main(["diff", *args])
    out, err = capsys.readouterr()
    return status, out, err


def diff_json(capsys: Any, *args: str) -> Tuple[int, Dict[str, Any]]:
    status, out, err = diff(capsys, *args, "--json")
    assert out.count("\n") == 1, (out, err)
    return status, json.loads(out)


def refs(run_file: Path) -> List[session.CallRef]:
    return [r.ref for r in session.iter_records(run_file) if r.ref is not None]


def test_two_recordings_of_one_conversation_are_the_same(tmp_path: Path, capsys: Any) -> None:
    a, b = record(tmp_path / "a.jsonl"), record(tmp_path / "b.jsonl")
    status, report = diff_json(capsys, str(a), str(b))
    assert (status, report["same"], report["first"]) == (0, True, None)
    status, out, _ = diff(capsys, str(a), str(b))
    assert status == 0 and out.startswith("same\n") and "run 2: A " in out


def test_version_1_and_version_2_are_the_same(tmp_path: Path, capsys: Any) -> None:
    a, b = record(tmp_path / "a.jsonl", version=1), record(tmp_path / "b.jsonl")
    assert diff_json(capsys, str(a), str(b)) == (0, {"same": True, "first": None, "damaged": []})


def test_parallel_tool_calls_ending_in_another_order_are_the_same(tmp_path: Path, capsys: Any) -> None:
    a, b = parallel(tmp_path / "a.jsonl", ("t1", "t2")), parallel(tmp_path / "b.jsonl", ("t2", "t1"))
    assert diff_json(capsys, str(a), str(b))[0] == 0
    c = parallel(tmp_path / "c.jsonl", ("t2", "t1"), result="43")
    status, report = diff_json(capsys, str(a), str(c))
    assert status == 1 and report["first"]["what"] == "result"
    assert report["first"]["a"]["execution_id"] == report["first"]["b"]["execution_id"] == "t1"


def test_other_token_counts_are_the_same_but_another_model_differs(tmp_path: Path, capsys: Any) -> None:
    used: session.Usage = {"model": "m-1", "input": 10, "output": 5, "cost": {"total": 0.25}}
    a = parallel(tmp_path / "a.jsonl", ("t1", "t2"), usage=used)
    b = parallel(tmp_path / "b.jsonl", ("t1", "t2"), usage={**used, "input": 99, "cost": {"total": 0.5}})
    status, out, _ = diff(capsys, str(a), str(b))
    assert (
        status == 0
        and "  tokens  15 / 104 (+89)" in out
        and "  cost    0.25 USD / 0.5 USD (+0.25 USD)" in out
    )
    c = parallel(tmp_path / "c.jsonl", ("t1", "t2"), usage={**used, "model": "m-2"})
    status, report = diff_json(capsys, str(a), str(c))
    assert (
        status == 1
        and report["first"]["what"] == "reply"
        and report["first"]["a"]["execution_id"] == "model-1"
    )


def test_another_prompt_is_one_changed_message_naming_both_calls(tmp_path: Path, capsys: Any) -> None:
    a = record(tmp_path / "a.jsonl")
    b = record(tmp_path / "b.jsonl", ("How long is session.py, and what is beside it?", "And the tests?"))
    status, report = diff_json(capsys, str(a), str(b), "--all")
    first = report["first"]
    assert (status, report["same"], first["what"]) == (1, False, "message changed")
    assert len(report["differences"]) == 1  # not again in turn 2's request, which carries it
    assert first["a"]["run_id"] == refs(a)[-1].run_id and first["b"]["run_id"] == refs(b)[-1].run_id
    assert first["a"]["execution_id"] == "model-1" and first["a"]["attempt"] == 1
    assert "And how long are the tests?" in first["a_text"] and "And the tests?" in first["b_text"]
    assert "run 2" in first["where"] and "turn 1" in first["where"]


def test_another_system_prompt_is_named_so(tmp_path: Path, capsys: Any) -> None:
    a = record(tmp_path / "a.jsonl", system="Be brief.", compaction=False)  # it keeps the first
    b = record(tmp_path / "b.jsonl", system="Be thorough.\nCite files.", compaction=False)
    status, out, _ = diff(capsys, str(a), str(b))
    assert status == 1
    assert out.splitlines()[1].startswith("first difference: system prompt changed at run 1 (")
    assert "  -Be brief." in out and "  +Be thorough." in out  # a line diff: the text has lines


def test_another_tool_result_is_the_first_difference(tmp_path: Path, capsys: Any) -> None:
    a = record(tmp_path / "a.jsonl")
    b = record(tmp_path / "b.jsonl", count_lines=lambda path: 7)
    status, report = diff_json(capsys, str(a), str(b))
    first = report["first"]
    assert status == 1 and first["what"] == "result" and first["a"]["execution_id"] == "call-2"
    assert '"output":"sessions.py: 7"' in first["b_text"] and "sessions.py: 7" not in first["a_text"]


def test_an_extra_retry_names_the_call_and_the_extra_attempt(tmp_path: Path, capsys: Any) -> None:
    a, b = record(tmp_path / "a.jsonl", retry=False), record(tmp_path / "b.jsonl")
    status, report = diff_json(capsys, str(a), str(b), "--all")
    first = report["first"]
    assert status == 1 and first["what"] == "retry"
    assert (first["a"]["execution_id"], first["a"]["attempt"]) == ("model-1", 1)
    assert (first["b"]["execution_id"], first["b"]["attempt"]) == ("model-1", 2)
    assert first["b_text"] == "2 attempt(s); 1: error 429 Too Many Requests: retry after 10 ms; 2: done"
    assert [d["what"] for d in report["differences"]] == ["retry"]  # not a shift of later calls


def test_a_retried_attempts_other_error_is_a_difference(tmp_path: Path, capsys: Any) -> None:
    """Both sides retry once and then agree: the first attempt's error (its type and message)
    is still compared, at that attempt."""
    a = record(tmp_path / "a.jsonl")
    b = tmp_path / "b.jsonl"
    said = "429 Too Many Requests: retry after 10 ms"
    b.write_text(a.read_text(encoding="utf-8").replace(said, "503 Service Unavailable"), encoding="utf-8")
    status, report = diff_json(capsys, str(a), str(b))
    first = report["first"]
    assert status == 1 and first["what"] == "reply" and first["where"].endswith(": attempt 1 / 1")
    assert (first["a"]["execution_id"], first["a"]["attempt"], first["b"]["attempt"]) == ("model-1", 1, 1)
    assert said in first["a_text"] and "503 Service Unavailable" in first["b_text"]


def test_a_missing_compaction_is_named_first(tmp_path: Path, capsys: Any) -> None:
    """Without it, B's model answers at once: A's turn (the compaction, the model asking for
    a tool, the tool) is one turn on one side only, and the answers pair."""
    a, b = record(tmp_path / "a.jsonl"), record(tmp_path / "b.jsonl", compaction=False)
    status, report = diff_json(capsys, str(a), str(b), "--all")
    first = report["first"]
    assert status == 1 and first["what"] == "turn" and first["b"] is None
    assert (
        first["a"]["execution_id"] == "compact-1" and "turn 1 / -: only in A (compact call" in first["where"]
    )
    assert [d["what"] for d in report["differences"]][1:] == ["message added", "message removed", "reply"]
    assert all("turn 2 / 1, model call" in d["where"] for d in report["differences"][1:])


def test_a_compaction_that_failed_otherwise_is_a_difference(tmp_path: Path, capsys: Any) -> None:
    """A compaction's error is on its context_prepare_end: another message is a difference."""
    a = record(tmp_path / "a.jsonl")
    failed = []
    for reason in ("summary too long", "model refused"):
        records = [json.loads(line) for line in a.read_text(encoding="utf-8").splitlines()]
        for r in records:
            if r["type"] == "context_prepare_end":
                r["data"]["error"] = {"message": reason, "type": "CompactionError"}
        failed.append(tmp_path / f"{reason}.jsonl")
        failed[-1].write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    status, report = diff_json(capsys, *map(str, failed))
    first = report["first"]
    assert status == 1 and first["what"] == "error" and first["a"]["execution_id"] == "compact-1"
    assert "summary too long" in first["a_text"] and "model refused" in first["b_text"]


def test_a_turn_on_one_side_only_is_one_difference(tmp_path: Path, capsys: Any) -> None:
    """B's model looks at a folder first: its turn 2 is extra, and its turns 3 and 4 pair with
    A's 2 and 3 (their requests carry B's extra messages, said once)."""
    question = ("How long is session.py, and what is beside it?",)
    a = record(tmp_path / "a.jsonl", question, compaction=False)
    b = record(tmp_path / "b.jsonl", question, compaction=False, hesitant=True)
    status, report = diff_json(capsys, str(a), str(b), "--all")
    differences = report["differences"]
    assert status == 1 and [d["what"] for d in differences] == ["turn", "message added"]
    assert differences[0]["where"].endswith(
        "turn - / 2: only in B (model call model-2, tool call list_files call-x)"
    )
    assert differences[0]["a"] is None and differences[0]["b"]["execution_id"] == "model-2"
    assert "turn 2 / 3, model call model-2 / model-3" in differences[1]["where"]
    assert "examples" in differences[1]["b_text"] and differences[1]["a_text"] is None


def test_tool_calls_run_in_parallel_and_ending_in_another_order_are_the_same(
    tmp_path: Path, capsys: Any
) -> None:
    a = record(tmp_path / "a.jsonl", parallel=True, compaction=False)
    ends = [r.data["execution"]["id"] for r in session.iter_records(a) if r.type == "tool_exec_end"]
    assert ends[:2] == ["call-2", "call-1"]  # turn 1's, last first
    b = record(tmp_path / "b.jsonl", compaction=False)  # one after the other
    assert diff_json(capsys, str(a), str(b))[0] == 0


def test_ignore_options_widen_what_is_ignored_each_its_own(tmp_path: Path, capsys: Any) -> None:
    kept: Dict[str, Any] = {
        "model_name": "m-1",
        "compaction": False,
    }  # a compaction would drop the system prompt
    base = record(tmp_path / "a.jsonl", **kept)
    varied = {
        "config": record(tmp_path / "config.jsonl", **{**kept, "max_tokens": 2048}),
        "tools": record(tmp_path / "tools.jsonl", **{**kept, "described": "Count lines"}),
        "system": record(tmp_path / "system.jsonl", **{**kept, "system": "Be brief."}),
        "model": record(tmp_path / "model.jsonl", **{**kept, "model_name": "m-2"}),
    }
    whats = {"config": "config", "tools": "tools", "system": "system prompt added", "model": "reply"}
    for name, path in varied.items():
        status, report = diff_json(capsys, str(base), str(path), "--all")
        # the second run's first request carries the first run's replies: from another model
        also = {"message changed"} if name == "model" else set()
        assert status == 1 and {d["what"] for d in report["differences"]} == {whats[name], *also}, name
        assert diff_json(capsys, str(base), str(path), f"--ignore-{name}")[0] == 0, name
        others = [f"--ignore-{other}" for other in varied if other != name]
        assert diff_json(capsys, str(base), str(path), *others)[1]["first"]["what"] == whats[name]


def test_two_imported_claude_code_sessions(tmp_path: Path, capsys: Any) -> None:
    import session_import

    project = tmp_path / "project"
    shutil.copytree(HERE / "testdata" / "import" / "claude-code" / "project", project)
    source = next(project.glob("*.jsonl"))
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    session_import.import_session(source, a)
    assert diff_json(capsys, str(a), str(a)) == (0, {"same": True, "first": None, "damaged": []})
    source.write_text(
        source.read_text().replace("README.md\\nsession.py", "README.md\\nsession.py\\nnotes.txt")
    )
    session_import.import_session(source, b)
    status, report = diff_json(capsys, str(a), str(b), "--all")
    first = report["first"]
    assert status == 1 and first["what"] == "result" and first["a"]["execution_id"] == "toolu_01"
    assert "notes.txt" in first["b_text"] and "notes.txt" not in first["a_text"]
    # the next request carries the result as a tool message (said once in each run: the
    # fixture's rewind made a second run, whose context holds the first one's result)
    differences = report["differences"]
    assert [d["what"] for d in differences] == ["result", "message changed", "message changed"]
    assert differences[1]["a"]["run_id"] != differences[2]["a"]["run_id"]


def test_another_config_is_a_difference(tmp_path: Path, capsys: Any) -> None:
    a, b = record(tmp_path / "a.jsonl"), record(tmp_path / "b.jsonl", max_tokens=2048)
    status, report = diff_json(capsys, str(a), str(b))
    first = report["first"]
    assert status == 1 and first["what"] == "config"
    assert '"max_tokens":1024' in first["a_text"] and '"max_tokens":2048' in first["b_text"]


def test_the_configs_session_id_and_prompt_cache_key_are_ignored(tmp_path: Path, capsys: Any) -> None:
    a, b = record(tmp_path / "a.jsonl", ids="sess-a"), record(tmp_path / "b.jsonl", ids="sess-b")
    assert '"session_id":"sess-a"' in a.read_text()  # written, and not compared
    assert diff(capsys, str(a), str(b))[0] == 0


def test_each_error_of_a_run_outside_its_calls_is_compared(tmp_path: Path, capsys: Any) -> None:
    """A run that recorded two errors is not the same as one that recorded only its last."""
    files = []
    for name, errors in (("a", ["disk full", "gave up"]), ("b", ["gave up"])):
        with session.create(tmp_path / f"{name}.jsonl") as s, s.begin_run() as run:
            for error in errors:
                run.record(Event("error", error=error))
            run.record(Event("agent_end", summary=session.RunSummary(end_reason="error")))
        files.append(str(tmp_path / f"{name}.jsonl"))
    status, report = diff_json(capsys, *files)
    assert (
        status == 1 and report["first"]["what"] == "run outcome" and "disk full" in report["first"]["a_text"]
    )


def test_requests_that_differ_all_along_are_matched_by_what_each_adds(
    tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    """200 turns whose tool results differ at each (say, a time in each): each request is
    matched from where the last one ended, not whole (quadratic in it, so cubic over a run:
    minutes at 1,000 turns); difflib's find_longest_match is counted, each difference said once."""

    def turns(path: Path, said: str) -> str:
        context = [Message("user", [session.text_block("go")])]
        with session.create(path) as s, s.begin_run() as run:
            for turn in range(1, 201):
                model = Execution(f"model-{turn}", "model", turn_index=turn)
                run.record(Event("model_exec_start", execution=model))
                run.record(
                    Event("model_request", execution=model, request=session.ModelRequest(list(context)))
                )
                reply = Message("assistant", [session.tool_call_block(f"c{turn}", "read", {})], "toolUse")
                run.record(Event("model_exec_end", execution=model, message=reply))
                tool = Execution(f"c{turn}", "tool", parent_id=f"model-{turn}", turn_index=turn)
                run.record(Event("tool_exec_start", execution=tool, tool_id=f"c{turn}", tool="read", args={}))
                result = {"output": f"{said} {turn}"}
                run.record(
                    Event("tool_exec_end", execution=tool, tool_id=f"c{turn}", tool="read", result=result)
                )
                context += [reply, session.tool_result(f"c{turn}", f"{said} {turn}")]
        return str(path)

    a, b = turns(tmp_path / "a.jsonl", "at 10:00"), turns(tmp_path / "b.jsonl", "at 11:00")
    matched = []
    find = difflib.SequenceMatcher.find_longest_match

    def counted(*args: Any) -> Any:
        matched.append(args)
        return find(*args)

    monkeypatch.setattr(difflib.SequenceMatcher, "find_longest_match", counted)
    status, report = diff_json(capsys, a, b, "--all")
    assert status == 1 and [d["what"] for d in report["differences"]] == [
        "result",
        "message changed",
    ] * 199 + ["result"]
    assert len(matched) < 5 * 200
    matched.clear()  # without --all, nothing is looked for after the first difference
    assert diff_json(capsys, a, b)[1]["first"]["what"] == "result" and len(matched) < 10


def test_an_extra_run_is_one_difference(tmp_path: Path, capsys: Any) -> None:
    two = ("How long is session.py, and what is beside it?", "And how long are the tests?")
    a = record(tmp_path / "a.jsonl", two)
    b = record(tmp_path / "b.jsonl", (*two, "And the tests?"))
    status, report = diff_json(capsys, str(a), str(b), "--all")
    assert status == 1 and [d["what"] for d in report["differences"]] == ["run"]
    first = report["first"]
    assert first["a"] is None and first["b"]["run_id"] == refs(b)[-1].run_id
    assert first["where"].startswith("run 3 (- / ") and first["where"].endswith(": only in B")


def test_memory_does_not_grow_with_the_texts_of_runs_already_compared(tmp_path: Path, capsys: Any) -> None:
    """Forty runs, each with its own 200 KB message: diff's peak (traced by tracemalloc) stays
    under the 8 MB those texts make, as it holds a digest of each, not the text."""

    def forty_runs(path: Path) -> str:
        with session.create(path) as s:
            for number in range(40):
                with s.begin_run() as run:
                    model = Execution("model-1", "model", turn_index=1)
                    asked = Message("user", [session.text_block(f"{number}:" + "x" * 200_000)])
                    run.record(Event("model_exec_start", execution=model))
                    run.record(Event("model_request", execution=model, request=session.ModelRequest([asked])))
                    reply = Message("assistant", [session.text_block("ok")], "stop")
                    run.record(Event("model_exec_end", execution=model, message=reply))
        return str(path)

    a, b = forty_runs(tmp_path / "a.jsonl"), forty_runs(tmp_path / "b.jsonl")
    tracemalloc.start()
    try:
        status = session.main(["diff", a, b, "--json"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert status == 0 and json.loads(capsys.readouterr().out)["same"] is True
    assert peak < 40 * 200_000


def test_a_message_is_read_again_to_be_shown_and_a_file_changed_since_is_said_so(tmp_path: Path) -> None:
    a = record(tmp_path / "a.jsonl")
    asked, answered = [r for r in session.iter_records(a, resolve=False) if r.type == "message"][:2]
    texts = session_diff._Texts(frozenset(), session._MAX_LINE_BYTES)
    number, other = (
        texts.number(r.data["message"], str(a), r.offset, ("message",)) for r in (asked, answered)
    )
    assert texts.readable(number) == "[user]\nHow long is session.py, and what is beside it?"
    changed = a.read_text(encoding="utf-8").replace("How long", "How LONG")  # at the same offsets
    a.write_text(changed, encoding="utf-8")
    assert texts.readable(other).startswith("[assistant]\nLet me look around.")  # the next record read
    said = f"(the message is no longer at offset {asked.offset} of {a}: the file changed)"
    assert texts.readable(number) == said


def test_run_reads_up_to_four_digits_as_a_position_and_a_longer_start_as_a_run_id(
    tmp_path: Path, capsys: Any
) -> None:
    """A run id's start made of digits (about one id in sixteen has six) picks that run."""
    path = tmp_path / "s.jsonl"
    with session.create(path) as s:
        for run_id in ("3" * 32, "22222" + "a" * 27):
            with s.begin_run(run_id=run_id) as run:
                run.record(Event("agent_start"))
    assert diff_json(capsys, str(path), str(path), "--run", "1", "--run", "22222")[1]["same"] is True
    assert diff_json(capsys, str(path), str(path), "--run", "2", "--run", "33333")[1]["same"] is True
    assert diff(capsys, str(path), str(path), "--run", "3")[0] == 2  # no third run


def test_run_matching_several_runs_holds_only_the_first(tmp_path: Path, capsys: Any) -> None:
    """Forty runs, each with a 200 KB tool result, all matched by one start of a run id: the
    trouble is said with the peak (traced by tracemalloc) under the 8 MB those results make."""
    path = tmp_path / "a.jsonl"
    with session.create(path) as s:
        for number in range(40):
            with s.begin_run(run_id=f"abcdef{number:026}") as run:
                tool = Execution("t1", "tool", turn_index=1)
                run.record(Event("tool_exec_start", execution=tool, tool_id="t1", tool="read", args={}))
                result = {"output": f"{number}:" + "x" * 200_000}
                run.record(Event("tool_exec_end", execution=tool, tool_id="t1", tool="read", result=result))
    tracemalloc.start()
    try:
        status, out, err = diff(capsys, str(path), str(path), "--run", "abcdef")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (status, out, err) == (2, "", f"python -m session diff: {path}: 40 runs matches --run abcdef\n")
    assert peak < 40 * 200_000


def test_run_picks_two_runs_of_one_file(tmp_path: Path, capsys: Any) -> None:
    a = record(tmp_path / "a.jsonl", ("How long are the tests?", "How long are the tests?"))
    second = refs(a)[-1].run_id
    assert diff_json(capsys, str(a), str(a), "--run", "1", "--run", second[:6])[0] == 1  # the state grew
    status, _, err = diff(capsys, str(a), str(a), "--run", "3")
    assert status == 2 and err.count("\n") == 1 and "no run matches --run 3" in err


def test_a_missing_or_non_session_file_is_one_line_and_exit_2(tmp_path: Path, capsys: Any) -> None:
    a = record(tmp_path / "a.jsonl")
    status, out, err = diff(capsys, str(a), str(tmp_path / "missing.jsonl"))
    assert (status, out, err.count("\n")) == (2, "", 1) and "missing.jsonl" in err
    (tmp_path / "notes.txt").write_text("hello\n")
    status, out, err = diff(capsys, str(tmp_path / "notes.txt"), str(a))
    assert (status, out, err.count("\n")) == (2, "", 1) and "notes.txt: not a session" in err


def test_a_damaged_file_is_compared_up_to_its_damage(tmp_path: Path, capsys: Any) -> None:
    a, b = record(tmp_path / "a.jsonl"), record(tmp_path / "b.jsonl")
    whole = b.read_bytes()
    b.write_bytes(whole + b"garbage\n" + whole.splitlines(keepends=True)[-1])
    status, out, err = diff(capsys, str(a), str(b))
    line = whole.count(b"\n") + 1
    assert status == 2 and out.startswith("same up to the damage\n")
    reason = f"invalid JSON: Expecting value at column 1 (offset {len(whole)})"
    assert err == f"{b}:{line}: {reason}; compared up to this line\n"
    c = record(tmp_path / "c.jsonl", count_lines=lambda path: 7)
    assert diff(capsys, str(c), str(b))[0] == 1  # a difference before the damage is a difference


def test_a_time_without_an_offset_shows_no_duration(tmp_path: Path, capsys: Any) -> None:
    """The reader takes any string as a time: a run whose times cannot be subtracted (one
    without an offset, one not a time) has no time figure, and the report is still printed."""
    a, b = record(tmp_path / "a.jsonl"), tmp_path / "b.jsonl"
    lines = a.read_text(encoding="utf-8").splitlines(keepends=True)
    last = json.loads(lines[-1])
    lines[-1] = json.dumps({**last, "time": "2026-01-01T00:00:00"}) + "\n"
    b.write_text("".join(lines), encoding="utf-8")
    status, out, err = diff(capsys, str(a), str(b))
    assert (status, err) == (0, "") and re.search(r"\n  time    [0-9.]+ s / -\n$", out)


def test_long_texts_are_shown_from_where_they_differ_without_a_quadratic_line_diff(
    tmp_path: Path, capsys: Any
) -> None:
    """Two prompts of 5,000 lines, every other one changed: past 2,000 lines a side, no
    difflib (quadratic there: minutes for 100,000 such lines), but one hunk from the first line
    that differs to the last, each side cut at 2,000 lines; the page marks those lines."""
    lines = [f"line {n}" for n in range(5000)]
    a = record(tmp_path / "a.jsonl", ("\n".join(lines),))
    b = record(tmp_path / "b.jsonl", ("\n".join(f"{x}!" if n % 2 == 0 else x for n, x in enumerate(lines)),))
    status, out, _ = diff(capsys, str(a), str(b))
    shown = out.split("\n  @@ ", 1)[1].split("\nrun 1: ")[0].splitlines()
    assert (
        status == 1
        and shown[0] == "-1,5001 +1,5001 @@"
        and shown[1:4] == ["   [user]", "  -line 0", "  -line 1"]
    )
    assert shown[2002:2005] == ["  \\ 2999 more lines not shown", "  +line 0!", "  +line 1"]
    assert shown[4003:] == ["  \\ 2999 more lines not shown", "   line 4999"]
    marks_a, marks_b = session_diff._marks(*("\n".join(["[user]", *text]) for text in (lines, lines[:1])))
    assert marks_a == [False, False] + [True] * 4999 and marks_b == [False, False]


def test_hostile_texts_are_escaped_for_the_terminal(tmp_path: Path, capsys: Any) -> None:
    a = record(tmp_path / "a.jsonl", ("tests?\x1b]0;pwned\x07", "x"))
    b = record(tmp_path / "b.jsonl", ("tests?\u202eevil", "x"))
    status, out, _ = diff(capsys, str(a), str(b))
    assert status == 1 and "\\x1b]0;pwned\\x07" in out and "\\u202eevil" in out
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out


def test_diff_runs_as_a_command_and_says_when_its_module_is_missing(tmp_path: Path) -> None:
    a = record(tmp_path / "a.jsonl")
    command = [sys.executable, str(HERE / "session.py"), "diff", str(a), str(a)]
    assert subprocess.run(command, capture_output=True, text=True).returncode == 0
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "session.py").write_bytes((HERE / "session.py").read_bytes())
    missing = subprocess.run(
        [sys.executable, "-I", "-S", str(alone / "session.py"), "diff", str(a), str(a)],
        capture_output=True,
        text=True,
        cwd=alone,
    )
    assert missing.returncode == 2
    assert missing.stderr.endswith(
        "diff: needs session_diff.py beside session.py"
        " (the wheel installs both; a vendored copy needs both files)\n"
    )


def page_parts(page: str) -> Any:
    from test_session_export import PageParts

    parts = PageParts()
    parts.feed(page)
    return parts


def reported(out: str) -> List[Tuple[str, List[str], List[str]]]:
    """Each difference of a text report with --all: its title, and the lines it gives as A's
    only and B's only (a short text's whole line; a line diff's - and + lines)."""
    found: List[Tuple[str, List[str], List[str]]] = []
    for line in out.splitlines():
        if line.startswith("difference "):
            found.append((line.split(": ", 1)[1], [], []))
        elif found and line.startswith(("  A: ", "  B: ")):
            if line[5:] != "(nothing)":
                (found[-1][1] if line[2] == "A" else found[-1][2]).append(line[5:])
        elif (
            found and line[2:3] in "-+" and not line.startswith(("  ---", "  +++")) and line.startswith("  ")
        ):
            (found[-1][1] if line[2] == "-" else found[-1][2]).append(line[3:])
    return found


def test_html_page_marks_the_differences_the_report_names_in_chromium(tmp_path: Path, capsys: Any) -> None:
    from test_session_export import WebDriver

    a = record(tmp_path / "a.jsonl", system="Be brief.\nCite files.", compaction=False)
    b = record(
        tmp_path / "b.jsonl",
        ("How long is session.py, and what is beside it?", "And the tests?"),
        system="Be thorough.\nCite files.",
        compaction=False,
        count_lines=lambda path: 7,
    )
    page = tmp_path / "page.html"
    assert diff(capsys, str(a), str(b), "--html", "-o", str(page)) == (1, "", "")
    status, out, _ = diff(capsys, str(a), str(b), "--all")
    expected = reported(out)
    assert status == 1 and len(expected) > 3
    browser = WebDriver(tmp_path / "profile")
    try:
        browser.page("POST", "/url", {"url": page.as_uri()})
        shown = browser.run(
            "return [...document.querySelectorAll('section.difference')].map(s => ["
            "s.querySelector('h3').textContent.replace(/^[0-9]+[.] /, ''),"
            "[...s.querySelectorAll('td:nth-child(1) .only')].map(e => e.textContent),"
            "[...s.querySelectorAll('td:nth-child(2) .only')].map(e => e.textContent)])"
        )
        assert [tuple(item) for item in shown] == expected
        first = browser.run("return document.querySelector('#calls tr.differs a').getAttribute('href')")
        assert first == "#difference-1"  # the calls side by side start at the first difference
        assert browser.run("return performance.getEntriesByType('resource').length") == 0
    finally:
        browser.close()
    status, out, _ = diff(capsys, str(a), str(a), "--html")  # to stdout, and exits as the report
    assert status == 0 and "<h1>same</h1>" in out and "0 differences" in out


def test_html_page_shows_hostile_texts_as_text_and_runs_nothing_in_chromium(
    tmp_path: Path, capsys: Any
) -> None:
    from test_session_export import HOSTILE_NAME, PAYLOADS, PWN, WebDriver, csp_hash

    attacks = " ".join(PAYLOADS[:6]) + " \u202egnp.exe\u200b \x1b[31mred \u2028\u2029"
    questions = ("How long is session.py, and what is beside it?", f"tests? {attacks}")
    a = record(tmp_path / "a.jsonl", questions, compaction=False)
    b = record(
        tmp_path / HOSTILE_NAME,
        (questions[0], f"tests! {attacks}"),
        compaction=False,
        count_lines=lambda path: attacks,
    )
    page = tmp_path / "page.html"
    assert diff(capsys, str(a), str(b), "--html", "-o", str(page))[0] == 1
    text = page.read_text(encoding="utf-8")
    parts = page_parts(text)
    (style,) = parts.texts["style"]
    assert [tag for tag, _ in parts.elements][:4] == ["html", "head", "meta", "meta"]
    assert parts.elements[3][1] == {
        "http-equiv": "Content-Security-Policy",
        "content": f"default-src 'none'; style-src {csp_hash(style)}; img-src data:; "
        "base-uri 'none'; form-action 'none'",
    }
    for tag, attrs in parts.elements:
        assert tag not in ("script", "img", "iframe", "svg", "link") and "src" not in attrs, (tag, attrs)
        assert not [name for name in attrs if name.startswith("on") or name == "style"], (tag, attrs)
        assert re.fullmatch(r"#difference-\d+", attrs.get("href") or "#difference-1"), attrs
    for char in "\u202e\u200b\x1b\u2028\u2029":
        assert char not in text and f"[U+{ord(char):04X}]" in text
    unprotected = tmp_path / "no-csp.html"
    unprotected.write_text(
        re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text), encoding="utf-8"
    )
    browser = WebDriver(tmp_path / "profile")
    try:
        for copy in (page, unprotected):  # by escaping alone, and with the policy too
            browser.page("POST", "/url", {"url": copy.as_uri()})
            assert browser.run(f"return {PWN} === undefined")
            assert browser.run("return document.querySelectorAll('script,img,iframe,svg').length") == 0
            assert browser.run("return performance.getEntriesByType('resource').length") == 0
            body = browser.run("return document.body.textContent")
            assert PAYLOADS[0] in body and PAYLOADS[3] in body and str(b) in body  # shown as text
    finally:
        browser.close()


def test_html_page_exits_as_the_report_and_never_overwrites_a_session(tmp_path: Path, capsys: Any) -> None:
    a, b = record(tmp_path / "a.jsonl"), record(tmp_path / "b.jsonl")
    whole = b.read_bytes()
    b.write_bytes(whole + b"garbage\n")
    page = tmp_path / "page.html"
    status, out, err = diff(capsys, str(a), str(b), "--html", "-o", str(page))
    assert (status, out, err.count("\n")) == (2, "", 1) and "compared up to this line" in err
    assert "<h1>same up to the damage</h1>" in page.read_text(encoding="utf-8")
    status, out, err = diff(capsys, str(a), str(b), "--html", "-o", str(b))
    assert (status, out, b.read_bytes()) == (2, "", whole + b"garbage\n")
    assert err.endswith(f"diff: will not write the page over the session {b}\n")
    with pytest.raises(SystemExit) as usage:
        session.main(["diff", str(a), str(a), "-o", str(page)])
    assert usage.value.code == 2 and "-o/--output is the page's, with --html" in capsys.readouterr().err


def test_html_page_needs_session_export_beside_session_py(tmp_path: Path) -> None:
    a = record(tmp_path / "a.jsonl")
    alone = tmp_path / "alone"
    alone.mkdir()
    for module in ("session.py", "session_diff.py"):
        (alone / module).write_bytes((HERE / module).read_bytes())
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(alone / "session.py"), "diff", str(a), str(a), "--html"],
        capture_output=True,
        text=True,
        cwd=alone,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.endswith(
        "diff: --html needs session_export.py beside session.py (the wheel installs both)\n"
    )
    plain = [sys.executable, "-I", "-S", str(alone / "session.py"), "diff", str(a), str(a)]
    assert subprocess.run(plain, capture_output=True, cwd=alone).returncode == 0  # the report needs it not


def test_a_value_of_the_wrong_type_is_damage_not_a_crash(tmp_path: Path, capsys: Any) -> None:
    """validate takes a tool name that is a number (the reader checks the envelope); diff,
    which compares it, stops there as at a bad line, and says so."""
    a = parallel(tmp_path / "a.jsonl", ("t1", "t2"))
    b = tmp_path / "b.jsonl"
    lines = a.read_text(encoding="utf-8").splitlines(keepends=True)
    line = next(n for n, text in enumerate(lines) if '"type":"tool_exec_start"' in text)
    lines[line] = lines[line].replace('"tool":"list_files"', '"tool":5')
    b.write_text("".join(lines), encoding="utf-8")
    status, out, err = diff(capsys, str(a), str(b))
    offset = len("".join(lines[:line]).encode())
    reason = "data.tool must be a string, found an integer"
    assert status == 1 and err == f"{b}:{line + 1}: {reason} (offset {offset}); compared up to this line\n"
    assert "first difference: missing call at run 1 (" in out  # what the damage hid is missing
