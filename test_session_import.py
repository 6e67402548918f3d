"""Tests for session_import.py, in its order: Claude Code's mapping, Codex CLI's, claude-trace's,
then the command line.  The sources are the fixtures of testdata/import (its README says what each
holds and where its shape comes from)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

import hypothesis
import pytest
from hypothesis import strategies as st

import session
import session_import
from session import EventData, Execution, Record
from test_session import run_cli, run_cli_process, sweep

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "testdata" / "import"
SESSION_ID = "5f0c2a1e-7b3d-4c8e-9a10-2b3c4d5e6f70"
CLAUDE_CODE = FIXTURES / "claude-code" / "project" / f"{SESSION_ID}.jsonl"
CLAUDE_TRACE = FIXTURES / "claude-trace" / "log-2026-03-01-10-00-00.jsonl"
TRACE_ID = "log-2026-03-01-10-00-00-34dc1d79c482"  # its name, and the digest of its first line
TORN = FIXTURES / "hostile" / "0d1e2f30-4150-4617-8899-aabbccddeeff.jsonl"
CODEX_ID = "019a9776-0a34-7842-8627-112b63d66e90"
CODEX_SESSIONS = FIXTURES / "codex" / "sessions"
CODEX = CODEX_SESSIONS / "2025" / "11" / "18" / f"rollout-2025-11-18T09-30-00-{CODEX_ID}.jsonl"
CODEX_OLDER = (
    CODEX_SESSIONS
    / "2025"
    / "09"
    / "02"
    / "rollout-2025-09-02T14-00-00-0199f0e1-2a3b-7c4d-8e5f-6a7b8c9d0e1f.jsonl"
)
CODEX_BARE = (
    CODEX_SESSIONS
    / "2025"
    / "07"
    / "01"
    / "rollout-2025-07-01T08-15-00-5973b6c0-94b8-487b-a530-2aeb6098ae0e.jsonl"
)
CODEX_HOSTILE = (
    FIXTURES / "hostile" / "rollout-2025-11-20T12-00-00-0199aaaa-bbbb-7ccc-8ddd-eeeeffff0000.jsonl"
)
GEMINI_ID = "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
GEMINI = FIXTURES / "gemini-cli" / "chats" / "session-2026-03-02T09-00-7c1d2e3f.jsonl"
GEMINI_OLDER = FIXTURES / "gemini-cli" / "chats" / "session-2025-11-20T14-30-0a1b2c3d.json"
GEMINI_HOSTILE = FIXTURES / "gemini-cli" / "hostile" / "session-2026-03-03T08-00-5e6f7a8b.jsonl"
GEMINI_AGENTS = FIXTURES / "gemini-cli" / "agents" / "chats" / "session-2026-04-20T10-00-3b4c5d6e.jsonl"
GEMINI_AGENTS_ID = "3b4c5d6e-7f80-4192-a3b4-c5d6e7f80912"


def imported(tmp_path: Path, source: Path) -> List[Record]:
    out = tmp_path / f"{source.stem}.out.jsonl"
    if not out.exists():
        session_import.import_session(source, out)
    return list(session.iter_records(out))


def data(record: Record) -> EventData:
    return EventData.from_record(record)


def call(record: Record) -> Execution:
    execution = data(record).execution
    assert execution is not None
    return execution


def call_id(record: Record) -> str:
    execution = record.data.get("execution")
    return str(execution.get("id", "")) if type(execution) is dict else ""


def request_of(record: Record) -> Dict[str, Any]:
    request = data(record).request
    assert request is not None
    return request


def of(records: List[Record], kind: str, execution: str = "") -> List[Record]:
    return [
        r
        for r in records
        if r.type == kind and (not execution or r.data.get("execution", {}).get("id") == execution)
    ]


def texts(message: Any) -> List[str]:
    value = message["value"] if "$type" in message else message
    return [block.get("text") or block.get("thinking") or block["type"] for block in value["content"]]


def run(*words: str, cwd: Path = HERE) -> subprocess.CompletedProcess[str]:
    """``python session.py WORDS``, run in this process (the tests about a process start one)."""
    return run_cli(*words, cwd=cwd)


def write_lines(path: Path, lines: List[Dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def line(uuid: str, parent: Any, kind: str, content: Any, **more: Any) -> Dict[str, Any]:
    message: Dict[str, Any] = {"role": kind, "content": content}
    if kind == "assistant":
        message.update(
            id=more.pop("id", "msg_" + uuid), model="m", usage={"input_tokens": 1, "output_tokens": 1}
        )
    return {
        "parentUuid": parent,
        "sessionId": "s",
        "type": kind,
        "message": message,
        "uuid": uuid,
        "timestamp": "2026-03-01T10:00:00Z",
        **more,
    }


def test_all_lists_exactly_the_public_names() -> None:
    defined_here = {
        name
        for name, value in vars(session_import).items()
        if getattr(value, "__module__", None) == "session_import" and not name.startswith("_")
    }
    assert sorted(session_import.__all__) == sorted(defined_here | {"FORMATS"})


# ---------------------------------------------------------------------------- Claude Code


def test_one_response_written_as_lines_is_one_call_with_the_last_lines_usage(tmp_path: Path) -> None:
    records = imported(tmp_path, CLAUDE_CODE)
    ends = of(records, "model_exec_end", "model-1")
    assert len(ends) == 1 and len(of(records, "model_exec_start", "model-1")) == 1
    message = data(ends[0]).message["value"]
    assert texts(message) == ["I should run ls.", "Let me look.", "toolCall"]
    assert message["usage"] == {
        "input": 10,
        "output": 42,  # the last of the three lines: 1, 5, then 42
        "cache_read": 100,
        "cache_write": 20,
        "total_tokens": 172,
        "provider": "anthropic",
        "model": "claude-sonnet-4-5-20250929",
    }
    assert message["stop_reason"] == "toolUse"


def test_usage_of_a_session_counts_each_response_once(tmp_path: Path) -> None:
    imported(tmp_path, CLAUDE_CODE)
    usage = session.summarize(tmp_path / f"{CLAUDE_CODE.stem}.out.jsonl").usage
    # the five successful responses of the session and the sub-agent's two
    assert usage["input"] == 10 + 3 + 2 + 5 + 4 + 50 + 50
    assert usage["output"] == 42 + 30 + 8 + 20 + 6 + 10 + 10


def test_the_conversation_follows_parent_uuid_and_a_rewound_prompt_ends_its_run(tmp_path: Path) -> None:
    records = imported(tmp_path, CLAUDE_CODE)
    first, second = sorted({r.run_id for r in records if r.run_id}, key=[r.run_id for r in records].index)
    # the prompt the user went back from is the last message of the first run, which ended "rewound"
    ends = [r for r in of(records, "message_end") if r.run_id == first]
    assert texts(data(ends[-1]).message["value"]) == ["an abandoned prompt, rewound"]
    assert [r.data["summary"]["end_reason"] for r in of(records, "agent_end")] == ["rewound", ""]
    # and no request of the run that went on from before it sends it
    assert not any("an abandoned prompt" in repr(r.data) for r in records if r.run_id == second)
    request = request_of(of(records, "model_request", "model-4")[0])
    assert [texts(m)[0] for m in request["messages"]][-2:] == ["Done: two files.", "What is in this picture?"]
    assert (
        "conversation line off the final branch"
        not in of(records, "import_note")[0].data["details"]["unmapped"]
    )


def test_each_branch_a_rewind_left_is_a_run_its_billed_calls_kept(tmp_path: Path) -> None:
    lines = [
        line("u1", None, "user", "Write a haiku", timestamp="2026-03-01T10:00:01Z"),
        line(
            "a1", "u1", "assistant", [{"type": "text", "text": "old pond"}], timestamp="2026-03-01T10:00:02Z"
        ),
        line("u2", "a1", "user", "Make it rhyme", timestamp="2026-03-01T10:00:03Z"),
        line(
            "a2",
            "u2",
            "assistant",
            [{"type": "text", "text": "a rhyming one"}],
            timestamp="2026-03-01T10:00:04Z",
        ),
        # the user went back to before "Make it rhyme", twice
        line("u3", "a1", "user", "Make it longer", timestamp="2026-03-01T10:00:05Z"),
        line(
            "a3",
            "u3",
            "assistant",
            [{"type": "text", "text": "a longer one"}],
            timestamp="2026-03-01T10:00:06Z",
        ),
        {"parentUuid": "a3", "type": "progress", "uuid": "p1", "timestamp": "2026-03-01T10:00:07.000Z"},
        line("u4", "a1", "user", "Make it shorter", timestamp="2026-03-01T10:00:08Z"),
        line("a4", "u4", "assistant", [{"type": "text", "text": "pond"}], timestamp="2026-03-01T10:00:09Z"),
    ]
    source = write_lines(tmp_path / f"{SESSION_ID}.jsonl", lines)
    records = imported(tmp_path, source)
    runs = list(dict.fromkeys(r.run_id for r in records if r.run_id))
    assert len(runs) == 3
    replies = [
        [texts(data(r).message)[0] for r in of(records, "model_exec_end") if r.run_id == run] for run in runs
    ]
    assert replies == [["old pond", "a rhyming one"], ["a longer one"], ["pond"]]  # each call once
    contexts = [[texts(m)[0] for m in request_of(r)["messages"]] for r in of(records, "model_request")]
    assert contexts[-1] == ["Write a haiku", "old pond", "Make it shorter"]
    assert contexts[2] == ["Write a haiku", "old pond", "Make it longer"]
    summary = session.summarize(tmp_path / f"{source.stem}.out.jsonl")
    assert not summary.gaps and summary.usage["output"] == 4  # every billed call counted
    assert [r.data["summary"]["end_reason"] for r in of(records, "agent_end")] == ["rewound", "rewound", ""]
    assert [r.time[17:19] for r in of(records, "agent_end")] == ["04", "07", "09"]


def test_a_prompt_written_again_at_its_time_is_a_replay_not_a_rewind(tmp_path: Path) -> None:
    lines = [
        line("u1", None, "user", "Write a haiku", timestamp="2026-03-01T10:00:01Z"),
        line(
            "a1", "u1", "assistant", [{"type": "text", "text": "old pond"}], timestamp="2026-03-01T10:00:02Z"
        ),
        line("u2", "a1", "user", "Again", timestamp="2026-03-01T10:00:03Z"),
        line("a2", "u2", "assistant", [{"type": "text", "text": "frog"}], timestamp="2026-03-01T10:00:04Z"),
        # the same prompt and reply written again under new uuids, at their first times
        line("u2r", "a1", "user", "Again", timestamp="2026-03-01T10:00:03Z"),
        line("a2r", "u2r", "assistant", [{"type": "text", "text": "frog"}], timestamp="2026-03-01T10:00:04Z"),
        line("u3", "a2", "user", "Thanks", timestamp="2026-03-01T10:00:05Z"),
    ]
    records = imported(tmp_path, write_lines(tmp_path / f"{SESSION_ID}.jsonl", lines))
    assert len({r.run_id for r in records if r.run_id}) == 1
    assert [texts(data(r).message)[0] for r in of(records, "model_exec_end")] == ["old pond", "frog"]
    note = of(records, "import_note")[0].data["details"]
    assert note["unmapped"] == {"replayed line (a prompt again at its time, and what follows it)": 2}


@pytest.mark.parametrize("interrupted", [False, True])
def test_parallel_tool_calls_forking_the_lines_stay_one_branch(tmp_path: Path, interrupted: bool) -> None:
    # Claude Code writes a response's next tool_use and the first call's result both after
    # the first tool_use line: a fork of parentUuids that is no rewind, even where the result
    # comes with a note of the user's (a call the user stopped)
    def use(tool: str) -> List[Dict[str, Any]]:
        return [{"type": "tool_use", "id": tool, "name": "Read", "input": {"file_path": tool}}]

    def result(tool: str) -> List[Dict[str, Any]]:
        return [{"type": "tool_result", "tool_use_id": tool, "content": f"text of {tool}"}]

    stopped = [{"type": "text", "text": "[Request interrupted by user for tool use]"}]
    lines = [
        line("u1", None, "user", "Read both", timestamp="2026-03-01T10:00:01Z"),
        line("a1", "u1", "assistant", use("t1"), timestamp="2026-03-01T10:00:02Z"),
        line("a2", "a1", "assistant", use("t2"), timestamp="2026-03-01T10:00:03Z"),
        line("r1", "a1", "user", result("t1") + stopped * interrupted, timestamp="2026-03-01T10:00:04Z"),
        line("r2", "a2", "user", result("t2"), timestamp="2026-03-01T10:00:05Z"),
        line(
            "a3", "r2", "assistant", [{"type": "text", "text": "both read"}], timestamp="2026-03-01T10:00:06Z"
        ),
    ]
    for response in lines[1:3]:
        response["message"]["id"] = "msg_a1"  # one response, one line per content block
    source = write_lines(tmp_path / f"{SESSION_ID}.jsonl", lines)
    records = imported(tmp_path, source)
    assert len({r.run_id for r in records if r.run_id}) == 1
    summary = session.summarize(tmp_path / f"{source.stem}.out.jsonl")
    assert not summary.gaps
    assert [data(r).result for r in of(records, "tool_exec_end")] == ["text of t1", "text of t2"]
    context = request_of(of(records, "model_request")[-1])["messages"]
    roles = (
        ["user", "assistant", "tool", "user", "tool"]
        if interrupted
        else ["user", "assistant", "tool", "tool"]
    )
    assert [m["value"]["role"] for m in context] == roles


def test_tool_calls_pair_use_and_result_with_is_error(tmp_path: Path) -> None:
    records = imported(tmp_path, CLAUDE_CODE)
    first = data(of(records, "tool_exec_end", "toolu_01")[0])
    assert (first.tool, first.result, first.is_error) == ("Bash", "README.md\nsession.py", False)
    assert first.details == {
        "tool_use_result": {"stdout": "README.md\nsession.py", "stderr": "", "interrupted": False}
    }
    failed = data(of(records, "tool_exec_end", "toolu_02")[0])
    assert (failed.tool, failed.is_error) == ("Read", True)
    started = data(of(records, "tool_exec_start", "toolu_02")[0])
    assert started.args == {"file_path": "/nope"}
    summaries = [r.data["summary"] for r in of(records, "agent_end")]  # the two runs a rewind made
    assert sum(s["tool_calls"] for s in summaries) == 4  # the sub-agent's Grep too
    assert sum(s["tool_errors"] for s in summaries) == 1


def test_thinking_images_and_documents_are_kept(tmp_path: Path) -> None:
    records = imported(tmp_path, CLAUDE_CODE)
    prompt = next(data(r).message["value"] for r in of(records, "message_end") if "picture" in str(r.data))
    assert [block["type"] for block in prompt["content"]] == ["text", "image"]
    assert prompt["content"][1]["image"]["mime_type"] == "image/png"
    assert prompt["metadata"]["unmapped_blocks"][0]["type"] == "document"


def test_a_sub_agent_file_is_nested_under_the_task_call_that_ran_it(tmp_path: Path) -> None:
    records = imported(tmp_path, CLAUDE_CODE)
    start = of(records, "tool_exec_start", "toolu_03")[0].seq
    end = of(records, "tool_exec_end", "toolu_03")[0].seq
    nested = [r for r in records if r.data.get("execution", {}).get("parent_id") == "toolu_03"]
    assert {call(r).id for r in nested} == {
        "toolu_03/model-1",
        "toolu_03/model-2",
        "toolu_03/toolu_s1",
    }
    assert all(start < r.seq < end for r in nested)
    assert not [r for r in nested if r.type == "message_end"]  # not mixed into the conversation
    request = request_of(of(records, "model_request", "toolu_03/model-1")[0])
    assert [texts(m) for m in request["messages"]] == [["Find the TODOs"]]
    assert (
        "sidechain line not in a sub-agent file"
        not in of(records, "import_note")[0].data["details"]["unmapped"]
    )


def sidechain_session(tmp_path: Path, prompt: str) -> Path:
    """A session of an older Claude Code, which wrote a Task call's sub-agent in the session's
    file as a sidechain (``isSidechain``, its first line following none) that began with the
    call's prompt; *prompt* is the Task's."""
    task = [
        {"type": "tool_use", "id": "toolu_T", "name": "Task", "input": {"description": "d", "prompt": prompt}}
    ]
    grep = [{"type": "tool_use", "id": "toolu_G", "name": "Grep", "input": {"pattern": "TODO"}}]
    found = [{"type": "tool_result", "tool_use_id": "toolu_G", "content": "a.py:1"}]
    answer = [{"type": "tool_result", "tool_use_id": "toolu_T", "content": "One TODO, in a.py"}]
    return write_lines(
        tmp_path / "s.jsonl",
        [
            line("u1", None, "user", "Look for TODOs"),
            line("a1", "u1", "assistant", task),
            line("s1", None, "user", "Find the TODOs", isSidechain=True),
            line("s2", "s1", "assistant", grep, isSidechain=True),
            line("s3", "s2", "user", found, isSidechain=True),
            line("s4", "s3", "assistant", "Found it: a.py:1", isSidechain=True),
            line("r1", "a1", "user", answer),
            line("a2", "r1", "assistant", "There is one TODO."),
        ],
    )


def test_a_sidechain_in_the_session_file_is_nested_under_the_task_call_whose_prompt_began_it(
    tmp_path: Path,
) -> None:
    report = session_import.import_session(
        sidechain_session(tmp_path, "Find the TODOs"), tmp_path / "out.jsonl"
    )
    assert report.not_understood == () and "sidechain line not in a sub-agent file" not in report.unmapped
    records = list(session.iter_records(tmp_path / "out.jsonl"))
    start = of(records, "tool_exec_start", "toolu_T")[0].seq
    end = of(records, "tool_exec_end", "toolu_T")[0].seq
    nested = [r for r in records if r.data.get("execution", {}).get("parent_id") == "toolu_T"]
    assert {call(r).id for r in nested} == {"toolu_T/model-1", "toolu_T/model-2", "toolu_T/toolu_G"}
    assert all(start < r.seq < end for r in nested)
    assert not [r for r in nested if r.type == "message_end"]  # not mixed into the conversation
    request = request_of(of(records, "model_request", "toolu_T/model-2")[0])
    assert [texts(m) for m in request["messages"]] == [["Find the TODOs"], ["toolCall"], ["a.py:1"]]
    spoken = [texts(data(r).message) for r in of(records, "message_end")]
    assert ["Find the TODOs"] not in spoken and ["Found it: a.py:1"] not in spoken
    assert gaps_of(tmp_path / "out.jsonl") == []


def test_parallel_task_calls_take_the_sidechains_their_prompts_began(tmp_path: Path) -> None:
    def task(key: str, prompt: str) -> List[Any]:
        return [{"type": "tool_use", "id": key, "name": "Task", "input": {"prompt": prompt}}]

    def result(key: str) -> List[Any]:
        return [{"type": "tool_result", "tool_use_id": key, "content": "done"}]

    source = write_lines(
        tmp_path / "s.jsonl",
        [
            line("u1", None, "user", "Two things"),
            line("a1", "u1", "assistant", task("toolu_A", "First"), id="m1"),
            line("x1", None, "user", "First", isSidechain=True),  # begun before the next block's line
            line("a2", "a1", "assistant", task("toolu_B", "Second"), id="m1"),
            line("y1", None, "user", "Second", isSidechain=True),
            line("y2", "y1", "assistant", "second done", isSidechain=True),
            line("x2", "x1", "assistant", "first done", isSidechain=True),
            line("r1", "a2", "user", result("toolu_B")),
            line("r2", "r1", "user", result("toolu_A")),
        ],
    )
    session_import.import_session(source, tmp_path / "out.jsonl")
    records = list(session.iter_records(tmp_path / "out.jsonl"))
    for key, said in (("toolu_A", "first done"), ("toolu_B", "second done")):
        (end,) = of(records, "model_exec_end", f"{key}/model-1")
        assert call(end).parent_id == key and texts(data(end).message) == [said]
    assert not [r for r in records if call_id(r).startswith(("x1/", "y1/"))]  # none left over


def test_task_calls_of_one_prompt_take_the_sidechains_that_ended_before_their_results(tmp_path: Path) -> None:
    def task(key: str) -> List[Any]:
        return [{"type": "tool_use", "id": key, "name": "Task", "input": {"prompt": "Check"}}]

    def result(key: str) -> List[Any]:
        return [{"type": "tool_result", "tool_use_id": key, "content": "done"}]

    source = write_lines(
        tmp_path / "s.jsonl",
        [
            line("u1", None, "user", "Check twice"),
            line("a1", "u1", "assistant", task("toolu_A"), id="m1"),
            line("a2", "a1", "assistant", task("toolu_B"), id="m1"),
            line("x1", None, "user", "Check", isSidechain=True),  # toolu_A's sub-agent, the slower
            line("y1", None, "user", "Check", isSidechain=True),
            line("y2", "y1", "assistant", "B checked", isSidechain=True),
            line("r1", "a2", "user", result("toolu_B")),  # toolu_A's sub-agent still runs
            line("x2", "x1", "assistant", "A checked", isSidechain=True),
            line("r2", "r1", "user", result("toolu_A")),
        ],
    )
    session_import.import_session(source, tmp_path / "out.jsonl")
    records = list(session.iter_records(tmp_path / "out.jsonl"))
    for key, said in (("toolu_A", "A checked"), ("toolu_B", "B checked")):
        (end,) = of(records, "model_exec_end", f"{key}/model-1")
        assert call(end).parent_id == key and texts(data(end).message) == [said]
    assert gaps_of(tmp_path / "out.jsonl") == []


def test_sidechains_of_one_prompt_go_to_the_calls_by_where_they_begin_and_end(tmp_path: Path) -> None:
    """Five sidechains of one prompt (and one of another) for three calls of it: each result
    takes the first chain not taken that began after the call's response and ended before the
    result; a chain begun before the calls, or still going on at the last result, is its own."""

    def task(key: str, prompt: str) -> List[Any]:
        return [{"type": "tool_use", "id": key, "name": "Task", "input": {"prompt": prompt}}]

    def result(key: str) -> List[Any]:
        return [{"type": "tool_result", "tool_use_id": key, "content": "done"}]

    def chain(name: str, prompt: str) -> Dict[str, Any]:
        return line(f"{name}1", None, "user", prompt, isSidechain=True)

    def answer(name: str) -> Dict[str, Any]:
        return line(f"{name}2", f"{name}1", "assistant", f"{name} done", isSidechain=True)

    source = write_lines(
        tmp_path / "s.jsonl",
        [
            line("u1", None, "user", "Check three times"),
            chain("z", "Check"),  # before the calls: no call's
            answer("z"),
            line("a1", "u1", "assistant", task("toolu_A", "Check"), id="m1"),
            line("a2", "a1", "assistant", task("toolu_B", "Check"), id="m1"),
            line("a3", "a2", "assistant", task("toolu_C", "Check"), id="m1"),
            line("a4", "a3", "assistant", task("toolu_D", "Nothing began with this"), id="m1"),
            chain("x", "Check"),  # goes on after toolu_B's result
            chain("o", "Other"),
            answer("o"),
            chain("y", "Check"),
            answer("y"),
            chain("w", "Check"),
            answer("w"),
            line("r1", "a4", "user", result("toolu_B")),  # x goes on: y
            answer("x"),
            chain("v", "Check"),  # goes on after the last result
            line("r2", "r1", "user", result("toolu_C")),  # x, begun first
            line("r3", "r2", "user", result("toolu_D")),
            line("r4", "r3", "user", result("toolu_A")),  # w, the one left that ended
            answer("v"),
        ],
    )
    report = session_import.import_session(source, tmp_path / "out.jsonl")
    assert report.not_understood == ()
    records = list(session.iter_records(tmp_path / "out.jsonl"))
    ran = {
        call(r).id.split("/")[0]: texts(data(r).message)[0]
        for r in of(records, "model_exec_end")
        if "/" in call(r).id
    }
    assert ran == {
        "toolu_A": "w done",
        "toolu_B": "y done",
        "toolu_C": "x done",
        "z1": "z done",
        "o1": "o done",
        "v1": "v done",
    }
    assert gaps_of(tmp_path / "out.jsonl") == []


def test_a_sidechain_no_task_call_began_is_calls_of_its_own_after_the_conversation(tmp_path: Path) -> None:
    report = session_import.import_session(
        sidechain_session(tmp_path, "Another task"), tmp_path / "out.jsonl"
    )
    assert report.not_understood == () and "sidechain line not in a sub-agent file" not in report.unmapped
    records = list(session.iter_records(tmp_path / "out.jsonl"))
    own = [r for r in records if call_id(r).startswith("s1/")]
    assert {call(r).id for r in own} == {"s1/model-1", "s1/model-2", "s1/toolu_G"}
    assert all(call(r).parent_id == "" for r in own)
    assert min(r.seq for r in own) > of(records, "message_end")[-1].seq  # after the conversation
    assert not [r for r in records if call_id(r).startswith("toolu_T/")]
    assert gaps_of(tmp_path / "out.jsonl") == []


def test_a_sub_agent_file_no_tool_call_ran_is_calls_of_its_own_after_the_conversation(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(CLAUDE_CODE.parent, project)
    agents = project / SESSION_ID / "subagents"
    shutil.copy(agents / "agent-a1b2c3.jsonl", agents / "agent-zzz.jsonl")
    report = session_import.import_session(project / CLAUDE_CODE.name, tmp_path / "out.jsonl")
    assert "sub-agent file no tool call ran" not in report.unmapped
    records = list(session.iter_records(tmp_path / "out.jsonl"))
    own = [r for r in records if call_id(r).startswith("agent-zzz/")]
    assert {call(r).id for r in own} == {"agent-zzz/model-1", "agent-zzz/model-2", "agent-zzz/toolu_s1"}
    assert all(call(r).parent_id == "" for r in own)
    assert min(r.seq for r in own) > of(records, "message_end")[-1].seq
    assert report.lines == session_import.import_session(CLAUDE_CODE, tmp_path / "base.jsonl").lines + 4


def test_a_compaction_replaces_the_context_of_the_calls_after_it(tmp_path: Path) -> None:
    records = imported(tmp_path, CLAUDE_CODE)
    compacted = of(records, "context_compacted")
    assert len(compacted) == 1
    compaction = compacted[0].data["compaction"]
    assert compaction["metadata"] == {"trigger": "auto", "preTokens": 1000}
    request = request_of(of(records, "model_request", "model-6")[0])
    assert [texts(m)[0][:30] for m in request["messages"]] == [
        "This session is being continue",
        "thanks",
        "again?",  # the API error message between them was never sent
    ]


def test_api_errors_are_failed_attempts_with_their_status(tmp_path: Path) -> None:
    records = imported(tmp_path, CLAUDE_CODE)
    retried = of(records, "model_exec_end", "model-3")
    assert [(call(r).attempt, data(r).error) for r in retried] == [
        (1, {"message": "status 529: Overloaded", "type": "overloaded_error"}),
        (2, None),
    ]
    failed = data(of(records, "model_exec_end", "model-5")[0])
    assert failed.error == {"message": "API Error: 500 Internal server error", "type": "server_error"}
    assert session.summarize(tmp_path / f"{CLAUDE_CODE.stem}.out.jsonl").gaps == []


def test_requests_are_rebuilt_and_say_what_is_unknown(tmp_path: Path) -> None:
    records = imported(tmp_path, CLAUDE_CODE)
    for record in of(records, "model_request"):
        request = request_of(record)
        assert request["tools"] == []
        assert request["config"]["extra"]["unknown"] == ["system prompt", "tool definitions", "parameters"]
        assert request["config"]["extra"]["rebuilt"] == "from the Claude Code transcript"


def test_lines_not_understood_are_named_and_the_rest_counted_per_type(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    report = session_import.import_session(CLAUDE_CODE, out)
    assert report.lines == 28 and report.format == "claude-code"
    assert [(p.file, p.line) for p in report.not_understood] == [("", 13)]
    assert report.text().endswith(f"imported 28 lines (claude-code), 1 not understood: line 13 -> {out}")
    note = of(list(session.iter_records(out)), "import_note")[0].data["details"]
    assert note["not_understood"][0]["line"] == 13
    assert note["unmapped"] == {
        "custom-title": 1,
        "file-history-snapshot": 1,
        "progress": 1,
        "summary": 1,
    }


def test_provenance_names_the_format_source_session_and_tool_version(tmp_path: Path) -> None:
    records = imported(tmp_path, CLAUDE_CODE)
    assert records[0].session_id == SESSION_ID.replace("-", "")
    provenance = of(records, "import")[0].data["details"]
    assert provenance["format"] == "claude-code"
    assert provenance["source"] == str(CLAUDE_CODE)
    assert provenance["source_session_id"] == SESSION_ID
    assert provenance["tool_versions"] == ["2.0.61"]
    assert set(provenance["files"]) == {f"{SESSION_ID}.jsonl", "subagents/agent-a1b2c3.jsonl"}


def test_a_torn_last_line_is_reported_not_an_error(tmp_path: Path) -> None:
    report = session_import.import_session(TORN, tmp_path / "out.jsonl")
    assert report.tail_bytes == 75 and report.lines == 2 and not report.not_understood
    assert "ignored 75-byte unfinished last line" in report.text()
    note = of(list(session.iter_records(tmp_path / "out.jsonl")), "import_note")[0].data["details"]
    assert note["unfinished_tail_bytes"] == 75


def test_a_blank_line_is_counted_blank_not_longer_than_the_limit(tmp_path: Path) -> None:
    source = tmp_path / "s.jsonl"
    said = [line("u1", None, "user", "Hi"), line("a1", "u1", "assistant", "Hello")]
    source.write_text(json.dumps(said[0]) + "\n\n" + json.dumps(said[1]) + "\n")
    report = session_import.import_session(source, tmp_path / "out.jsonl")
    assert report.not_understood == () and report.unmapped["(blank)"] == 1 and report.lines == 3


def test_a_line_over_the_limit_counts_whole_in_the_files_size(tmp_path: Path) -> None:
    source = write_lines(
        tmp_path / "s.jsonl",
        [line("u1", None, "user", "x" * 5000), line("a1", "u1", "assistant", "Hello")],
    )
    report = session_import.import_session(source, tmp_path / "out.jsonl", max_line_bytes=1000)
    assert [p.reason for p in report.not_understood] == ["longer than --max-line-bytes"]
    provenance = of(list(session.iter_records(tmp_path / "out.jsonl")), "import")[0].data["details"]
    assert provenance["files"] == {"s.jsonl": source.stat().st_size}


# ---------------------------------------------------------------------------- Codex CLI


def roles_and_texts(request: Dict[str, Any]) -> List[Any]:
    values = [message["value"] if "$type" in message else message for message in request["messages"]]
    return [(value["role"], texts(value)) for value in values]


def test_codex_requests_are_the_history_codex_resends_with_developer_items_as_system(tmp_path: Path) -> None:
    records = imported(tmp_path, CODEX)
    request = request_of(of(records, "model_request", "model-2")[0])
    assert [(role, text[0][:22]) for role, text in roles_and_texts(request)] == [
        ("system", "You are Codex, a codin"),  # session_meta's base_instructions
        ("system", "<permissions instructi"),  # a developer item
        ("user", "<environment_context>\n"),
        ("user", "List the files"),
        ("assistant", "**Listing files**"),
        ("tool", "README.md\nsrc"),
    ]
    assert request["tools"] == []
    assert request["config"] == {
        "thinking_level": "medium",
        "extra": {
            "model": "gpt-5-codex",
            "rebuilt": "from the Codex rollout",
            "unknown": ["tool definitions", "parameters other than the model and reasoning effort"],
            "reasoning_summary": "auto",
        },
    }


def test_codex_usage_is_each_calls_last_token_usage_as_reported(tmp_path: Path) -> None:
    records = imported(tmp_path, CODEX)
    message = data(of(records, "model_exec_end", "model-1")[0]).message["value"]
    assert message["usage"] == {
        "input": 1000,  # cached input included, as OpenAI counts it
        "cache_read": 200,
        "output": 50,  # reasoning included
        "total_tokens": 1050,
        "provider": "openai",
        "model": "gpt-5-codex",
    }
    assert message["metadata"] == {"token_counts": {"reasoning_output_tokens": 20}}
    usage = session.summarize(tmp_path / f"{CODEX.stem}.out.jsonl").usage
    assert (usage["input"], usage["cache_read"], usage["output"]) == (6000, 3500, 157)


def test_codex_a_usage_change_or_a_tool_output_starts_a_new_call(tmp_path: Path) -> None:
    records = imported(tmp_path, CODEX)
    ends = [data(r).message["value"] for r in of(records, "model_exec_end")]
    assert [(texts(m), m["usage"]["output"]) for m in ends] == [
        (["**Listing files**", "toolCall"], 50),  # its tool output was written before its usage
        (["toolCall"], 40),
        (["toolCall"], 30),  # its usage was written before its tool output
        (["Two files: README.md and src."], 25),
        (["Found it."], 12),
    ]
    note = of(records, "import_note")[0].data["details"]
    assert note["unmapped"]["event_msg:token_count"] == 2  # rate limits only, and an unchanged total


def test_codex_a_usage_written_before_its_items_goes_to_the_call_after_it(tmp_path: Path) -> None:
    records = imported(tmp_path, CODEX_OLDER)  # each call's usage written before its items
    ends = [data(r).message["value"] for r in of(records, "model_exec_end")]
    assert [(texts(m), m["usage"]["input"]) for m in ends] == [
        (["toolCall"], 800),
        (["All tests pass."], 900),
        (["You're welcome."], 300),
    ]


def test_codex_event_msg_copies_of_messages_are_not_recorded_twice(tmp_path: Path) -> None:
    records = imported(tmp_path, CODEX)
    said = [texts(data(r).message)[0] for r in of(records, "message_end")]
    assert said.count("List the files") == 1 and said.count("Two files: README.md and src.") == 1
    note = of(records, "import_note")[0].data["details"]
    assert note["unmapped"] == {
        "event_msg:agent_message": 1,
        "event_msg:agent_reasoning": 1,
        "event_msg:context_compacted": 1,
        "event_msg:token_count": 2,
        "event_msg:user_message": 2,
        "response_item:ghost_snapshot": 1,
    }
    assert note["lines"] == 31 and note["not_understood"] == []


def recorded(path: Path) -> List[Any]:
    """What an import recorded, its provenance and note aside (they name the source)."""
    return [
        (r.type, r.run_id, r.time, r.data)
        for r in session.iter_records(path)
        if r.type not in ("import", "import_note")
    ]


@pytest.mark.parametrize("copied", ["each line twice", "the rollout again after it"])
def test_codex_a_line_written_again_verbatim_is_a_copy_counted_not_recorded_twice(
    tmp_path: Path, copied: str
) -> None:
    lines = CODEX.read_text().splitlines(keepends=True)
    source = tmp_path / CODEX.name
    again = [text for text in lines for _ in (1, 2)] if copied == "each line twice" else lines + lines
    source.write_text("".join(again))
    report = session_import.import_session(source, tmp_path / "out.jsonl")
    base = session_import.import_session(CODEX, tmp_path / "base.jsonl")
    assert recorded(tmp_path / "out.jsonl") == recorded(tmp_path / "base.jsonl")
    assert report.unmapped == {**base.unmapped, "copy of an earlier line": len(lines)}
    assert report.lines == 2 * base.lines and report.not_understood == ()


def test_codex_lines_of_one_time_that_differ_as_written_are_not_copies(tmp_path: Path) -> None:
    # equal as Python values (1 == 1.0 == true), not as written: two lines
    time = "2025-11-18T09:30:01.000Z"
    written = ["1", "1.0", "true", "1"]
    lines = CODEX.read_text().splitlines(keepends=True)
    source = tmp_path / CODEX.name
    started = [
        f'{{"timestamp":"{time}","type":"event_msg","payload":{{"type":"task_started","n":{n}}}}}\n'
        for n in written
    ]
    source.write_text("".join(lines + started))
    report = session_import.import_session(source, tmp_path / "out.jsonl")
    base = session_import.import_session(CODEX, tmp_path / "base.jsonl")
    assert report.unmapped["copy of an earlier line"] == 1  # the last: the first again
    assert report.unmapped["event_msg:task_started"] == base.unmapped.get("event_msg:task_started", 0) + 3


def test_codex_lines_whose_time_is_not_a_text_are_never_copies(tmp_path: Path) -> None:
    lines = CODEX.read_text().splitlines(keepends=True)
    odd = [
        f'{{"timestamp":{time},"type":"event_msg","payload":{{"type":"task_started"}}}}\n'
        for time in ('["2025-11-18T09:30:01.000Z"]', "1763458201", "null")
        for _ in (1, 2)
    ]
    source = tmp_path / CODEX.name
    source.write_text("".join(lines + odd))
    report = session_import.import_session(source, tmp_path / "out.jsonl")
    base = session_import.import_session(CODEX, tmp_path / "base.jsonl")
    assert "copy of an earlier line" not in report.unmapped and report.not_understood == ()
    assert report.unmapped["event_msg:task_started"] == base.unmapped.get("event_msg:task_started", 0) + 6


def test_codex_a_prompt_typed_again_is_a_turn_again_and_bare_lines_are_never_copies(tmp_path: Path) -> None:
    lines = CODEX.read_text().splitlines(keepends=True)
    prompt = [text for text in lines if "List the files" in text][:2]  # the item and its event
    later = [text.replace("09:30:01.000Z", "09:30:30.000Z") for text in prompt]  # typed again
    source = tmp_path / CODEX.name
    source.write_text("".join(lines + later))
    report = session_import.import_session(source, tmp_path / "out.jsonl")
    assert "copy of an earlier line" not in report.unmapped
    records = list(session.iter_records(tmp_path / "out.jsonl"))
    said = [texts(data(r).message)[0] for r in of(records, "message_end")]
    assert said.count("List the files") == 2
    assert len(of(records, "turn_start")) == 3
    bare = CODEX_BARE.read_text().splitlines(keepends=True)  # no timestamps: a line again is a line
    source = tmp_path / CODEX_BARE.name
    source.write_text("".join([*bare, bare[1]]))
    report = session_import.import_session(source, tmp_path / "bare.jsonl")
    assert "copy of an earlier line" not in report.unmapped
    said = [
        texts(data(r).message)[0]
        for r in of(list(session.iter_records(tmp_path / "bare.jsonl")), "message_end")
    ]
    assert said.count("What is in src?") == 2


def test_codex_what_the_user_typed_starts_a_turn_and_added_context_does_not(tmp_path: Path) -> None:
    records = imported(tmp_path, CODEX)
    assert [r.data["turn_index"] for r in of(records, "turn_start")] == [1, 2]
    context = data(of(records, "message_end")[1]).message["value"]
    assert texts(context)[0].startswith("<environment_context>") and context["metadata"] == {"meta": True}
    prompt = data(of(records, "message_end")[-2]).message["value"]
    assert [block["type"] for block in prompt["content"]] == ["text", "image"]
    assert prompt["content"][1]["image"] == {"url": "https://example.com/shot.png"}


def test_codex_function_custom_and_local_shell_calls_become_tool_calls(tmp_path: Path) -> None:
    records = imported(tmp_path, CODEX)
    calls = {data(r).tool_id: data(r) for r in of(records, "tool_exec_start")}
    assert calls["call_1"].tool == "shell"
    assert calls["call_1"].args == {"command": ["ls"], "workdir": "/home/dev/project"}
    assert calls["call_2"].tool == "apply_patch" and calls["call_2"].args.startswith("*** Begin Patch")
    assert calls["call_3"].tool == "local_shell" and calls["call_3"].args["command"] == ["cat", "README.md"]
    ends = {data(r).tool_id: data(r) for r in of(records, "tool_exec_end")}
    assert (ends["call_1"].result, ends["call_1"].is_error) == ("README.md\nsrc", False)
    assert ends["call_2"].is_error is True  # an output of {content, success: false}
    assert ends["call_3"].result == [{"type": "input_text", "text": "# Readme"}]
    summary = of(records, "agent_end")[0].data["summary"]
    assert (summary["tool_calls"], summary["tool_errors"]) == (3, 1)


def test_codex_reasoning_summaries_are_thinking_and_server_tools_are_kept(tmp_path: Path) -> None:
    records = imported(tmp_path, CODEX)
    first = data(of(records, "model_exec_end", "model-1")[0]).message["value"]
    assert first["content"][0] == {"type": "thinking", "thinking": "**Listing files**"}
    last = data(of(records, "model_exec_end", "model-5")[0]).message["value"]
    assert last["metadata"]["unmapped_items"] == [
        {
            "type": "web_search_call",
            "status": "completed",
            "action": {"type": "search", "query": "README conventions"},
        }
    ]


def test_codex_a_compactions_replacement_history_is_the_next_requests_context(tmp_path: Path) -> None:
    records = imported(tmp_path, CODEX)
    compaction = of(records, "context_compacted")[0].data["compaction"]
    assert texts(compaction["summary"]) == ["The user asked for the files; there are two."]
    request = request_of(of(records, "model_request", "model-5")[0])
    assert [text[0][:25] for _, text in roles_and_texts(request)] == [
        "You are Codex, a coding a",
        "List the files",
        "Another language model st",
        "Search the web for it",
    ]
    assert request["config"]["thinking_level"] == "high"  # the turn context before it


def test_codex_a_compaction_without_replacement_history_says_the_context_is_unknown(tmp_path: Path) -> None:
    records = imported(tmp_path, CODEX_OLDER)
    request = request_of(of(records, "model_request", "model-3")[0])
    assert [texts(m)[0] for m in request["messages"]] == ["Ran the tests: all pass.", "Thanks"]
    assert request["config"]["extra"]["unknown"] == [
        "system prompt",
        "tool definitions",
        "parameters other than the model and reasoning effort",
        "the context after a compaction (the rollout kept only its summary)",
    ]
    assert "unknown" in request_of(of(records, "model_request", "model-2")[0])["config"]["extra"]


def test_codex_provenance_names_the_session_version_and_working_directory(tmp_path: Path) -> None:
    records = imported(tmp_path, CODEX)
    assert records[0].session_id == CODEX_ID.replace("-", "")
    provenance = of(records, "import")[0].data["details"]
    assert {
        key: provenance[key] for key in ("format", "source_session_id", "tool_versions", "cwd", "git_branch")
    } == {
        "format": "codex",
        "source_session_id": CODEX_ID,
        "tool_versions": ["0.58.0"],
        "cwd": "/home/dev/project",
        "git_branch": "main",
    }
    older = of(imported(tmp_path, CODEX_OLDER), "import")[0].data["details"]
    assert older["instructions"] == "Always run the tests."  # the user's, not the system prompt


def test_codex_rollouts_written_before_the_envelope_are_imported(tmp_path: Path) -> None:
    report = session_import.import_session(CODEX_BARE, tmp_path / "out.jsonl")
    assert (
        report.format == "codex"
        and report.not_understood == ()
        and report.unmapped == {"record_type:state": 2}
    )
    records = list(session.iter_records(tmp_path / "out.jsonl"))
    assert records[0].session_id == "5973b6c094b8487ba5302aeb6098ae0e"
    assert data(of(records, "tool_exec_end", "call_x")[0]).result == {"content": "main.rs", "success": True}
    request = request_of(of(records, "model_request", "model-2")[0])
    assert [texts(m) for m in request["messages"]] == [
        ["What is in src?"],
        ["Look in src.", "toolCall"],
        ["main.rs"],
    ]
    assert all(data(r).message["value"].get("usage") is None for r in of(records, "model_exec_end"))


def test_codex_hostile_lines_are_named_and_the_rest_imported(tmp_path: Path) -> None:
    report = session_import.import_session(CODEX_HOSTILE, tmp_path / "out.jsonl")
    assert [(p.line, p.reason[:30]) for p in report.not_understood] == [
        (5, "output of no call before it (c"),
        (6, "not JSON: Invalid control char"),
        (7, "unknown response item type 'qu"),
        (8, "unknown line type 'brand_new_l"),
        (9, "a message whose content is not"),
    ]
    assert report.tail_bytes == 86
    records = list(session.iter_records(tmp_path / "out.jsonl"))
    call = data(of(records, "model_exec_end", "model-1")[0]).message["value"]["content"][0]["tool_call"]
    assert call["args_invalid"] is True and call["args_raw_text"] == '{"command": ["ls"'
    assert not of(records, "tool_exec_end")  # the output of no call is not a tool call's end
    alone = data(of(records, "model_exec_end", "model-2")[0]).message["value"]
    assert alone["content"] == [] and alone["metadata"]["response_not_written"] is True
    assert alone["usage"]["input"] == 120


def test_codex_a_token_count_without_info_is_read_from_its_own_counts(tmp_path: Path) -> None:
    def line(kind: str, payload: Dict[str, Any]) -> Dict[str, Any]:
        return {"timestamp": "2025-08-01T10:00:00.000Z", "type": kind, "payload": payload}

    counts = {"input_tokens": 70, "cached_input_tokens": 0, "output_tokens": 3, "total_tokens": 73}
    source = write_lines(
        tmp_path / "rollout.jsonl",
        [
            line("session_meta", {"id": "0198aaaa-0000-7000-8000-000000000001", "timestamp": "x"}),
            line(
                "response_item",
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            ),
            line(
                "response_item",
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "hello"}],
                },
            ),
            line("event_msg", {"type": "token_count", **counts}),
            line("event_msg", {"type": "token_count", **counts}),  # the same counts again: no new call
        ],
    )
    session_import.import_session(source, tmp_path / "out.jsonl")
    records = list(session.iter_records(tmp_path / "out.jsonl"))
    assert [data(r).message["value"]["usage"] for r in of(records, "model_exec_end")] == [
        {"input": 70, "cache_read": 0, "output": 3, "total_tokens": 73, "provider": "openai"}
    ]


def test_detection_tells_codex_from_the_other_formats_and_from_forces_it(tmp_path: Path) -> None:
    formats = {
        source: session_import.import_session(source, tmp_path / f"{n}.jsonl").format
        for n, source in enumerate([CLAUDE_CODE, CLAUDE_TRACE, CODEX, CODEX_OLDER, CODEX_BARE, CODEX_HOSTILE])
    }
    assert list(formats.values()) == ["claude-code", "claude-trace", "codex", "codex", "codex", "codex"]
    source = tmp_path / "odd.jsonl"
    source.write_text('{"note": "copied from a rollout"}\n' + CODEX.read_text())
    assert run("import", str(source), "-o", str(tmp_path / "no.jsonl")).returncode == 1
    done = run("import", str(source), "-o", str(tmp_path / "yes.jsonl"), "--from", "codex")
    assert done.returncode == 0 and ", 1 not understood: line 1 -> " in done.stdout


def test_into_archives_codex_rollouts_and_again_only_what_grew(tmp_path: Path) -> None:
    sources, archive = tmp_path / "sessions", tmp_path / "archive"
    shutil.copytree(CODEX_SESSIONS, sources)
    assert run("import", str(sources), "--into", str(archive)).returncode == 0
    assert sorted(os.listdir(archive)) == sorted(
        path.name for path in CODEX_SESSIONS.rglob("rollout-*.jsonl")
    )
    kept = {name: (archive / name).read_bytes() for name in os.listdir(archive)}
    grown = next(sources.rglob(CODEX.name))
    with open(grown, "a") as file:
        file.write(
            '{"timestamp":"2025-11-18T09:31:00.000Z","type":"event_msg","payload":{"type":"turn_aborted"}}\n'
        )
    again = run("import", str(sources), "--into", str(archive))
    assert again.returncode == 0 and again.stdout.count(": unchanged -> ") == 2
    assert f"{grown}: imported 32 lines (codex)" in again.stdout
    assert (archive / CODEX.name).read_bytes() != kept[CODEX.name]
    assert run("validate", str(archive / CODEX.name)).returncode == 0


# ---------------------------------------------------------------------------- claude-trace


def test_each_trace_pair_is_one_call_with_the_exact_logged_request(tmp_path: Path) -> None:
    import json

    records = imported(tmp_path, CLAUDE_TRACE)
    pairs = [json.loads(line) for line in CLAUDE_TRACE.read_text().splitlines()]
    body = pairs[0]["request"]["body"]
    request = request_of(of(records, "model_request", "model-1")[0])
    assert request["messages"] == [{"role": "system", "content": body["system"]}, *body["messages"]]
    assert request["tools"] == body["tools"]
    assert request["config"] == {
        "max_tokens": 1024,
        "extra": {"model": "claude-sonnet-4-5", "temperature": 1},
    }
    later = request_of(of(records, "model_request", "model-2")[0])
    assert later["messages"][1:] == pairs[2]["request"]["body"]["messages"]
    note = of(records, "import_note")[0].data["details"]
    assert note["unmapped"] == {"request to /v1/messages/count_tokens": 1}


def test_a_streamed_trace_response_is_put_together_from_its_events(tmp_path: Path) -> None:
    records = imported(tmp_path, CLAUDE_TRACE)
    message = data(of(records, "model_exec_end", "model-2")[0]).message["value"]
    assert texts(message) == ["One file: README.md."]
    assert message["stop_reason"] == "stop"
    assert message["usage"]["output"] == 9 and message["usage"]["cache_read"] == 300


def test_a_trace_tool_use_and_its_later_result_are_one_tool_call(tmp_path: Path) -> None:
    records = imported(tmp_path, CLAUDE_TRACE)
    start, end = of(records, "tool_exec_start", "toolu_t1")[0], of(records, "tool_exec_end", "toolu_t1")[0]
    assert data(start).args == {"command": "ls"} and data(end).result == "README.md"
    assert of(records, "model_exec_end", "model-1")[0].seq < start.seq < end.seq
    assert end.seq < of(records, "model_exec_start", "model-2")[0].seq


def test_a_trace_error_fails_the_call_and_no_response_leaves_it_unfinished(tmp_path: Path) -> None:
    records = imported(tmp_path, CLAUDE_TRACE)
    assert data(of(records, "model_exec_end", "model-3")[0]).error == {
        "message": "status 529: Overloaded",
        "type": "overloaded_error",
    }
    assert not of(records, "model_exec_end", "model-4")
    gaps = session.summarize(tmp_path / f"{CLAUDE_TRACE.stem}.out.jsonl").gaps
    assert [(gap.kind, gap.ref.execution_id if gap.ref else "") for gap in gaps] == [
        ("model_call_unfinished", "model-4")
    ]


# ---------------------------------------------------------------------------- Gemini CLI


def conversation(request: Dict[str, Any]) -> List[List[Any]]:
    """A request's messages, each as [role, the text of each block...]."""
    return [[message["value"]["role"], *texts(message)] for message in request["messages"]]


def test_gemini_records_of_one_id_are_one_message_the_last_version_winning(tmp_path: Path) -> None:
    records = imported(tmp_path, GEMINI)
    ends = of(records, "model_exec_end", "model-1")
    assert len(ends) == 1 and len(of(records, "model_exec_start", "model-1")) == 1
    message = data(ends[0]).message["value"]
    # the record's first version had no toolCalls; the second one, with them, wins
    assert texts(message) == ["**Listing** I will list the directory.", "toolCall"]
    assert message["content"][1]["tool_call"] == {
        "id": "list_directory-1-a",
        "name": "list_directory",
        "args": {"dir_path": "."},
    }
    assert message["stop_reason"] == "toolUse" and message["metadata"]["id"] == "g1"
    assert len([r for r in of(records, "message_end") if "List the files here" in str(r.data)]) == 1


def test_gemini_usage_is_kept_as_gemini_reports_it(tmp_path: Path) -> None:
    records = imported(tmp_path, GEMINI)
    message = data(of(records, "model_exec_end", "model-2")[0]).message["value"]
    assert message["usage"] == {
        "input": 1300,  # promptTokenCount: the cached tokens are part of it
        "output": 12,
        "cache_read": 1024,
        "total_tokens": 1312,
        "provider": "gcp.gen_ai",
        "model": "gemini-2.5-pro",
    }
    first = data(of(records, "model_exec_end", "model-1")[0]).message["value"]
    assert first["usage"]["total_tokens"] == 1255  # input 1200 + output 20 + thoughts 35
    assert first["metadata"]["tokens"] == {
        "input": 1200,
        "output": 20,
        "cached": 0,
        "thoughts": 35,
        "tool": 0,
        "total": 1255,
    }
    usage = session.summarize(tmp_path / f"{GEMINI.stem}.out.jsonl").usage
    # every call Gemini billed, the rewound ones (model-3, model-4) included
    assert usage["input"] == 1200 + 1300 + 1350 + 1400 + 1500
    assert usage["cache_read"] == 1024 * 3


def test_gemini_tool_calls_end_with_their_status_and_each_result_is_one_message(tmp_path: Path) -> None:
    records = imported(tmp_path, GEMINI)
    listed = data(of(records, "tool_exec_end", "list_directory-1-a")[0])
    assert (listed.tool, listed.result, listed.is_error) == ("list_directory", "README.md\nsrc", False)
    assert listed.details["status"] == "success" and listed.details["resultDisplay"] == "Listed 2 item(s)."
    started = data(of(records, "tool_exec_start", "list_directory-1-a")[0])
    assert started.args == {"dir_path": "."}
    denied = data(of(records, "tool_exec_end", "run_shell_command-2-b")[0])
    assert (denied.result, denied.is_error) == ("Tool execution denied by policy.", True)
    results = [data(r).message["value"] for r in of(records, "message_end")]
    tools = [m["metadata"]["tool_call_id"] for m in results if m["role"] == "tool"]
    # the result is in the call's record and in a user record: one tool message each
    assert tools == ["list_directory-1-a", "run_shell_command-2-b"]
    summary = of(records, "agent_end")[0].data["summary"]
    assert (summary["tool_calls"], summary["tool_errors"]) == (2, 1)


def test_a_gemini_rewind_keeps_its_calls_but_not_in_later_requests(tmp_path: Path) -> None:
    records = imported(tmp_path, GEMINI)
    rewind = of(records, "rewind")
    assert [r.data["details"] for r in rewind] == [
        {"by": "$rewindTo", "to": "u3", "taken_out": ["u3", "g3", "u4", "g4", "w1"], "source_line": 16}
    ]
    assert [call(r).id for r in of(records, "model_exec_end")] == [f"model-{n}" for n in range(1, 6)]
    rewound = [data(r).message["value"] for r in of(records, "message_end") if r.seq < rewind[0].seq]
    assert [m["metadata"].get("rewound", False) for m in rewound] == [False] * 4 + [True] * 4
    request = request_of(of(records, "model_request", "model-5")[0])
    assert conversation(request) == [
        ["user", "List the files here"],
        ["assistant", "**Listing** I will list the directory.", "toolCall"],
        ["tool", "README.md\nsrc"],
        ["assistant", "Two entries: README.md and the src folder."],
        ["user", "Describe this picture instead", "image"],
    ]
    assert request["messages"][-1]["value"]["content"][1]["image"]["mime_type"] == "image/png"


def test_gemini_notices_are_recorded_apart_from_the_conversation(tmp_path: Path) -> None:
    records = imported(tmp_path, GEMINI)
    notices = [r.data["details"] for r in of(records, "ui_message")]
    assert [(n["type"], n["id"]) for n in notices] == [("info", "i1"), ("warning", "w1"), ("error", "e1")]
    assert [n.get("rewound", False) for n in notices] == [False, True, False]  # w1 came after u3
    assert notices[2]["content"] == "[API Error: You exceeded your current quota.]"
    assert not [r for r in of(records, "message_end") if "Loop detection" in str(r.data)]
    last = data(of(records, "message_end")[-1]).message["value"]
    assert texts(last) == ["thanks"]  # a last prompt no request sent is still recorded


def test_gemini_requests_are_rebuilt_and_say_what_is_unknown(tmp_path: Path) -> None:
    records = imported(tmp_path, GEMINI)
    for record in of(records, "model_request"):
        request = request_of(record)
        assert request["tools"] == []
        assert request["config"]["extra"]["unknown"] == ["system prompt", "tool definitions", "parameters"]
        assert request["config"]["extra"]["rebuilt"] == "from the Gemini CLI session file"
    assert (
        request_of(of(records, "model_request", "model-5")[0])["config"]["extra"]["model"]
        == "gemini-2.5-flash"
    )


def test_gemini_provenance_names_the_session_project_and_summary(tmp_path: Path) -> None:
    records = imported(tmp_path, GEMINI)
    assert records[0].session_id == GEMINI_ID.replace("-", "")
    provenance = of(records, "import")[0].data["details"]
    assert provenance["format"] == "gemini-cli"
    assert provenance["source_session_id"] == GEMINI_ID
    assert provenance["project_hash"].startswith("9f86d081")
    assert provenance["summary"] == "Listed the files and described a picture"  # a later $set
    assert (provenance["kind"], provenance["files"]) == ("main", {GEMINI.name: GEMINI.stat().st_size})
    assert records[1].time == "2026-03-02T09:00:00.000000Z"  # the session's startTime


def test_an_older_gemini_session_file_of_one_json_document_is_imported(tmp_path: Path) -> None:
    report = session_import.import_session(GEMINI_OLDER, tmp_path / "out.jsonl")
    assert (report.format, report.lines, report.not_understood) == ("gemini-cli", 4, ())
    records = list(session.iter_records(tmp_path / "out.jsonl"))
    assert data(of(records, "tool_exec_end", "read_file-1")[0]).result == "buy milk"
    request = request_of(of(records, "model_request", "model-2")[0])
    # no user record held the tool's result then: it comes from the call's record
    assert conversation(request) == [
        ["user", "What is in notes.txt?"],
        ["assistant", "**Reading** I need to read the file.", "toolCall"],
        ["tool", "buy milk"],
    ]
    assert of(records, "import")[0].data["details"]["summary"] == "Read notes.txt"


def test_an_older_gemini_session_file_names_the_line_of_what_it_cannot_read(tmp_path: Path) -> None:
    text = GEMINI_OLDER.read_text()
    odd = tmp_path / "session-odd.json"
    odd.write_text(text.replace('"messages": [\n', '"messages": [\n    5,\n', 1))
    report = session_import.import_session(odd, tmp_path / "odd.jsonl")
    assert [(p.line, p.reason) for p in report.not_understood] == [(7, "not a JSON object")]
    cut = tmp_path / "session-cut.json"
    cut.write_text(text[: len(text) // 2])
    with pytest.raises(session_import.UnknownFormatError, match=r"not whole JSON: .*line \d+ column"):
        session_import.import_session(cut, tmp_path / "cut.jsonl")
    assert sorted(os.listdir(tmp_path)) == ["odd.jsonl", "session-cut.json", "session-odd.json"]


def test_a_hostile_gemini_file_is_imported_as_gemini_cli_reads_it(tmp_path: Path) -> None:
    report = session_import.import_session(GEMINI_HOSTILE, tmp_path / "out.jsonl")
    assert [(p.line, p.reason[:27]) for p in report.not_understood] == [
        (4, "not JSON: Invalid control c"),  # a line cut in the middle of a string
        (9, "$rewindTo 'no-such-message'"),
    ]
    assert report.tail_bytes == 82
    records = list(session.iter_records(tmp_path / "out.jsonl"))
    assert [r.data["details"]["taken_out"] for r in of(records, "rewind")] == [
        ["c", "d"],
        ["a", "b", "d"],  # an id no message has: all of it, as Gemini CLI reads it
        ["f"],  # a $set of messages that leaves f out
    ]
    # d, written again after the rewind that took it out, is a message of its own again
    again = request_of(of(records, "model_request", "model-3")[0])
    assert conversation(again) == [["user", "first"], ["assistant", "one"]]
    assert texts(data(of(records, "model_exec_end", "model-3")[0]).message) == ["two, again"]
    assert conversation(request_of(of(records, "model_request", "model-4")[0])) == [["user", "third"]]
    assert session.summarize(tmp_path / "out.jsonl").gaps == []


def test_a_gemini_call_written_again_after_its_rewind_is_a_call_of_its_own(tmp_path: Path) -> None:
    ran = {"id": "t1", "name": "ls", "args": {}, "result": "a.txt", "status": "success"}
    answer = {"id": "g", "type": "gemini", "content": "", "model": "m", "toolCalls": [ran]}
    source = write_lines(
        tmp_path / "s.jsonl",
        [
            {"sessionId": "s", "projectHash": "p", "startTime": "2026-03-03T08:00:00Z"},
            {"id": "u", "type": "user", "content": "go", "timestamp": "2026-03-03T08:00:01Z"},
            answer,
            {"$rewindTo": "g"},
            answer,  # the same record again: Gemini CLI puts it back at the end
            {"id": "x", "type": "user", "content": 5},  # content neither text nor parts
        ],
    )
    report = session_import.import_session(source, tmp_path / "out.jsonl")
    assert [(p.line, p.reason) for p in report.not_understood] == [
        (6, "a message whose content is neither text, a part nor a list of parts")
    ]
    records = list(session.iter_records(tmp_path / "out.jsonl"))
    assert [call(r).id for r in of(records, "tool_exec_end")] == ["t1", "t1#2"]
    assert [data(r).result for r in of(records, "tool_exec_end")] == ["a.txt", "a.txt"]
    assert session.summarize(tmp_path / "out.jsonl").gaps == []


def test_a_resumed_older_gemini_session_has_each_tool_result_once_where_it_was(tmp_path: Path) -> None:
    older = json.loads(GEMINI_OLDER.read_text())
    messages = older.pop("messages")
    response = {  # what Gemini CLI's resume makes of the call's record, listed by its $set
        "id": "m2_response",
        "type": "user",
        "content": messages[1]["toolCalls"][0]["result"],
        "timestamp": "2026-04-11T08:00:00Z",
    }
    listed = [messages[0], messages[1], response, messages[2]]
    prompt = {"id": "m4", "type": "user", "content": "and now?", "timestamp": "2026-04-11T08:00:01Z"}
    answer = {**messages[2], "id": "m5", "content": "Nothing else.", "timestamp": "2026-04-11T08:00:02Z"}
    source = write_lines(
        tmp_path / "session-resumed.jsonl",
        [older, *messages, {"$set": {"messages": listed}}, prompt, answer],
    )
    session_import.import_session(source, tmp_path / "out.jsonl")
    records = list(session.iter_records(tmp_path / "out.jsonl"))
    assert conversation(request_of(of(records, "model_request", "model-3")[0])) == [
        ["user", "What is in notes.txt?"],
        ["assistant", "**Reading** I need to read the file.", "toolCall"],
        ["tool", "buy milk"],
        ["assistant", "It says: buy milk."],
        ["user", "and now?"],
    ]
    roles = [data(r).message["value"]["role"] for r in of(records, "message_end")]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]


def test_a_gemini_sub_agent_file_is_nested_under_the_tool_call_that_ran_it(tmp_path: Path) -> None:
    records = imported(tmp_path, GEMINI_AGENTS)
    start = of(records, "tool_exec_start", "codebase_investigator-1-c")[0].seq
    end = of(records, "tool_exec_end", "codebase_investigator-1-c")[0].seq
    nested = [
        r for r in records if r.data.get("execution", {}).get("parent_id") == "codebase_investigator-1-c"
    ]
    assert {call(r).id for r in nested} == {
        "codebase_investigator-1-c/model-1",
        "codebase_investigator-1-c/grep_search-1-d",
        "codebase_investigator-1-c/model-2",
    }
    assert all(start < r.seq < end for r in nested)
    assert not [r for r in nested if r.type == "message_end"]  # not mixed into the conversation
    request = request_of(of(records, "model_request", "codebase_investigator-1-c/model-2")[0])
    assert conversation(request) == [
        ["user", "Find the TODOs"],
        ["assistant", "toolCall"],
        ["tool", "a.py:3: # TODO\nb.py:9: # TODO"],
    ]
    # an older sub-agent file no tool call names (agentId came later): calls of their own
    older = "a2222222-3333-4444-8555-666666666666/model-1"
    assert data(of(records, "model_exec_end", older)[0]).message["value"]["usage"]["input"] == 200
    usage = session.summarize(tmp_path / f"{GEMINI_AGENTS.stem}.out.jsonl").usage
    assert usage["input"] == 900 + 1000 + 300 + 400 + 200
    assert set(of(records, "import")[0].data["details"]["files"]) == {
        GEMINI_AGENTS.name,
        f"{GEMINI_AGENTS_ID}/a1111111-2222-4333-8444-555555555555.jsonl",
        f"{GEMINI_AGENTS_ID}/a2222222-3333-4444-8555-666666666666.json",
    }


def test_into_reads_gemini_sub_agents_with_their_session_and_again_when_they_grow(tmp_path: Path) -> None:
    chats, archive = tmp_path / "chats", tmp_path / "archive"
    shutil.copytree(GEMINI_AGENTS.parent, chats)
    first = run("import", str(chats), "--into", str(archive))
    assert first.returncode == 0, first.stderr
    assert os.listdir(archive) == [f"{GEMINI_AGENTS.stem}.jsonl"]  # the sub-agents are in it
    agent = chats / GEMINI_AGENTS_ID / "a1111111-2222-4333-8444-555555555555.jsonl"
    with open(agent, "a") as file:
        file.write('{"$set":{"lastUpdated":"2026-04-20T10:00:45.000Z"}}\n')
    grown = run("import", str(chats), "--into", str(archive))
    assert grown.returncode == 0 and f"{chats / GEMINI_AGENTS.name}: imported 16 lines" in grown.stdout


def test_gemini_files_are_detected_and_from_forces_the_format(tmp_path: Path) -> None:
    for source in (GEMINI, GEMINI_OLDER, GEMINI_HOSTILE):
        assert session_import._detect(str(source)) == "gemini-cli"
    for source in (CLAUDE_CODE, CLAUDE_TRACE, TORN):
        assert session_import._detect(str(source)) != "gemini-cli"
    headless = write_lines(tmp_path / "headless.jsonl", [json.loads(GEMINI.read_text().splitlines()[1])])
    assert session_import._detect(str(headless)) == "gemini-cli"  # a message record, no metadata line
    forced = run("import", str(GEMINI), "-o", str(tmp_path / "forced.jsonl"), "--from", "gemini-cli")
    assert forced.returncode == 0 and "(gemini-cli)" in forced.stdout
    wrong = session_import.import_session(CLAUDE_TRACE, tmp_path / "wrong.jsonl", format="gemini-cli")
    assert wrong.format == "gemini-cli" and [p.line for p in wrong.not_understood] == [1, 2, 3, 4, 5]


def test_into_takes_an_older_gemini_file_unless_gemini_cli_made_its_jsonl(tmp_path: Path) -> None:
    chats, archive = tmp_path / "chats", tmp_path / "archive"
    shutil.copytree(FIXTURES / "gemini-cli" / "chats", chats)
    (chats / "logs.json").write_text("[]")  # Gemini CLI's other files are not sessions
    first = run("import", str(tmp_path / "chats"), "--into", str(archive))
    assert first.returncode == 0, first.stderr
    assert sorted(os.listdir(archive)) == [f"{GEMINI_OLDER.stem}.jsonl", f"{GEMINI.stem}.jsonl"]
    again = run("import", str(chats), "--into", str(archive))
    assert again.returncode == 0 and again.stdout.count(": unchanged -> ") == 2
    migrated = chats / f"{GEMINI_OLDER.name}l"  # what Gemini CLI writes when it resumes one
    migrated.write_text(GEMINI.read_text().replace(GEMINI_ID, "0a1b2c3d-1111-4222-8333-444455556666"))
    grown = run("import", str(chats), "--into", str(archive))
    assert grown.returncode == 0, grown.stderr
    assert f"{migrated}: imported" in grown.stdout and f"{GEMINI_OLDER}:" not in grown.stdout


# ---------------------------------------------------------------------------- command line


@pytest.mark.parametrize(
    "source",
    [
        CLAUDE_CODE,
        CLAUDE_TRACE,
        TORN,
        CODEX,
        CODEX_OLDER,
        CODEX_BARE,
        CODEX_HOSTILE,
        GEMINI,
        GEMINI_OLDER,
        GEMINI_HOSTILE,
        GEMINI_AGENTS,
    ],
)
def test_an_import_gives_the_same_bytes_each_time(tmp_path: Path, source: Path) -> None:
    session_import.import_session(source, tmp_path / "a.jsonl")
    session_import.import_session(source, tmp_path / "b.jsonl")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["a.jsonl", "b.jsonl"]  # no temporary file left
    records = list(session.iter_records(tmp_path / "a.jsonl"))
    for end in of(records, "agent_end"):  # a run ends after everything in it (its sub-agents too)
        assert all(r.time <= end.time for r in records if r.run_id == end.run_id and r.type != "run_close")


@pytest.mark.parametrize(
    "source",
    [CLAUDE_CODE, CLAUDE_TRACE, CODEX, CODEX_BARE, CODEX_HOSTILE, GEMINI, GEMINI_OLDER, GEMINI_AGENTS],
)
def test_validate_summary_show_html_export_and_otlp_read_an_import(tmp_path: Path, source: Path) -> None:
    out = tmp_path / "out.jsonl"
    done = run("import", str(source), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{source}: imported ")
    for words in (
        ["validate", str(out)],
        ["summary", str(out)],
        ["show", "--pretty", str(out)],
        ["html", "-o", str(tmp_path / "page.html"), str(out)],
        ["export", str(out), "-o", str(tmp_path / "all.jsonl")],
        ["otlp", str(out), "--content", "--output", str(tmp_path / "spans.bin")],
    ):
        done = run(*words)
        assert done.returncode == 0, (words, done.stderr)
    page = (tmp_path / "page.html").read_text()
    expected = {
        CLAUDE_CODE: "Find the TODOs",
        CODEX: "Two files: README.md and src.",
        GEMINI: "Describe this picture instead",
    }
    assert expected.get(source, "") in page
    assert run("validate", str(out)).stdout.startswith(f"{out}: ok, ")


@pytest.mark.parametrize("name", ["empty.jsonl", "other-format.jsonl", "not-json.jsonl"])
def test_a_source_of_no_known_format_exits_1_naming_it(tmp_path: Path, name: str) -> None:
    source = FIXTURES / "hostile" / name
    done = run("import", str(source), "-o", str(tmp_path / "out.jsonl"))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(
        f"{source}: of no known format (claude-code, codex, gemini-cli, claude-trace)"
    )
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "words",
    [
        [str(CLAUDE_CODE)],
        [str(CLAUDE_CODE), "-o", "x.jsonl", "--into", "d"],
        [str(CLAUDE_CODE), str(CLAUDE_TRACE), "-o", "x.jsonl"],
        [str(FIXTURES), "-o", "x.jsonl"],
        [str(CLAUDE_CODE), "-o", "x.jsonl", "--from", "nonesuch"],
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, words: List[str]) -> None:
    done = run("import", *words, cwd=tmp_path)
    assert done.returncode == 2 and os.listdir(tmp_path) == []


def test_an_output_that_exists_is_never_replaced(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("mine\n")
    done = run("import", str(CLAUDE_CODE), "-o", str(out))
    assert done.returncode == 1 and str(out) in done.stderr
    assert out.read_text() == "mine\n" and os.listdir(tmp_path) == ["out.jsonl"]


def test_a_failure_while_publishing_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "link", refuse)
    monkeypatch.setattr(os, "rename", refuse)
    with pytest.raises(OSError, match="No space left"):
        session_import.import_session(CLAUDE_CODE, tmp_path / "out.jsonl")
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
def test_an_import_interrupted_by_a_real_signal_leaves_nothing(tmp_path: Path) -> None:
    output = "\n".join(f"{n:6d}  a line of the file the tool read" for n in range(60))
    lines = [line("u0", None, "user", "Read them all")]
    for n in range(1, 4000):
        use = [{"type": "tool_use", "id": f"t{n}", "name": "Read", "input": {"file_path": str(n)}}]
        lines.append(line(f"a{n}", f"u{n - 1}", "assistant", use))
        result = [{"type": "tool_result", "tool_use_id": f"t{n}", "content": output}]
        lines.append(line(f"u{n}", f"a{n}", "user", result))
    source = write_lines(tmp_path / f"{SESSION_ID}.jsonl", lines)
    folder = tmp_path / "out"
    folder.mkdir()
    child = subprocess.Popen(
        [sys.executable, str(HERE / "session.py"), "import", str(source), "-o", str(folder / "s.jsonl")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as a terminal would start it: a test run launched in the background ignores SIGINT,
        # and the child would inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    while not os.listdir(folder) and child.poll() is None:  # until the temporary file is there
        time.sleep(0.001)
    child.send_signal(signal.SIGINT)
    stdout, stderr = child.communicate(timeout=120)
    assert child.returncode == 130, stderr
    assert stderr == "python -m session import: interrupted\n" and stdout == ""
    assert os.listdir(folder) == []  # neither the output nor its temporary file


def copy_sources(tmp_path: Path) -> Path:
    sources = tmp_path / "projects"
    shutil.copytree(FIXTURES / "claude-code", sources / "claude-code")
    shutil.copytree(FIXTURES / "claude-trace", sources / "claude-trace")
    return sources


def test_into_imports_every_session_once_and_again_only_what_grew(tmp_path: Path) -> None:
    sources, archive = copy_sources(tmp_path), tmp_path / "archive"
    first = run_cli_process("import", str(sources), "--into", str(archive))  # the command, in a process
    assert first.returncode == 0, first.stderr
    assert sorted(os.listdir(archive)) == [f"{SESSION_ID}.jsonl", f"{TRACE_ID}.jsonl"]
    kept = {name: (archive / name).read_bytes() for name in os.listdir(archive)}
    again = run("import", str(sources), "--into", str(archive))
    assert again.returncode == 0 and again.stdout.count(": unchanged -> ") == 2
    assert {name: (archive / name).read_bytes() for name in os.listdir(archive)} == kept
    agent = sources / "claude-code" / "project" / SESSION_ID / "subagents" / "agent-a1b2c3.jsonl"
    with open(agent, "a") as file:  # a grown sub-agent file is a grown session
        file.write('{"type":"progress","uuid":"x","timestamp":"2026-03-01T10:00:19Z"}\n')
    grown = run("import", str(sources), "--into", str(archive))
    assert grown.returncode == 0, grown.stderr
    assert f"{sources / 'claude-code' / 'project' / SESSION_ID}.jsonl: imported 29 lines" in grown.stdout
    assert grown.stdout.count(": unchanged -> ") == 1
    assert (archive / f"{TRACE_ID}.jsonl").read_bytes() == kept[f"{TRACE_ID}.jsonl"]
    assert sorted(os.listdir(archive)) == sorted(kept)  # replaced whole, no temporary file left
    assert run("validate", str(archive / f"{SESSION_ID}.jsonl")).returncode == 0


def test_into_reports_an_unknown_source_and_imports_the_rest(tmp_path: Path) -> None:
    sources = copy_sources(tmp_path)
    shutil.copy(FIXTURES / "hostile" / "other-format.jsonl", sources / "other-format.jsonl")
    done = run("import", str(sources), "--into", str(tmp_path / "archive"))
    assert done.returncode == 1
    assert f"{sources / 'other-format.jsonl'}: of no known format" in done.stderr
    assert len(os.listdir(tmp_path / "archive")) == 2


def test_import_without_its_companion_says_what_is_missing(tmp_path: Path) -> None:
    shutil.copy(HERE / "session.py", tmp_path / "session.py")
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(tmp_path / "session.py"), "import", "x", "-o", "y"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "import: needs session_import.py beside session.py" in done.stderr


def test_hostile_transcripts_are_imported_as_far_as_they_make_sense(tmp_path: Path) -> None:
    big = "x" * (20 << 20)  # a 20 MB tool result
    source = write_lines(
        tmp_path / "s.jsonl",
        [
            line("u1", "a9", "user", "hi"),  # a cycle: a9 names u1's parent... and u1 is a9's
            line(
                "a1",
                "u1",
                "assistant",
                [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}],
                id="m1",
            ),
            line("a2", "a1", "assistant", 5, id="m1"),  # same response, content neither text nor blocks
            line("u2", "a2", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": big}]),
            line("a9", "u2", "assistant", [{"type": "text", "text": "ok"}]),
            line("u3", "a9", "user", "a last prompt no request sent"),
        ],
    )
    report = session_import.import_session(source, tmp_path / "out.jsonl")
    assert [(p.line, p.reason) for p in report.not_understood] == [
        (3, "a message whose content is neither text nor a list of blocks")
    ]
    records = list(session.iter_records(tmp_path / "out.jsonl"))
    assert data(of(records, "tool_exec_end", "t1")[0]).result == big
    assert texts(data(of(records, "message_end")[-1]).message) == ["a last prompt no request sent"]
    assert [call(r).id for r in of(records, "model_exec_end")] == ["model-1", "model-2"]


# ---------------------------------------------------------------------------- odd and hostile sources


def gaps_of(path: Path) -> List[str]:
    return [gap.kind for gap in session.summarize(path).gaps]


@pytest.mark.parametrize("stamp", ["not a time", "", "2026-13-45T99:00:00Z", "0001-01-01T00:00:00+01:00"])
def test_a_timestamp_that_is_no_time_takes_the_previous_lines(tmp_path: Path, stamp: str) -> None:
    source = write_lines(
        tmp_path / "s.jsonl",
        [
            line("u1", None, "user", "hi", timestamp="2026-03-01T10:00:01Z"),
            line("a1", "u1", "assistant", [{"type": "text", "text": "hello"}], timestamp=stamp),
        ],
    )
    session_import.import_session(source, tmp_path / "out.jsonl")
    ends = of(list(session.iter_records(tmp_path / "out.jsonl")), "model_exec_end")
    assert [r.time for r in ends] == ["2026-03-01T10:00:01.000000Z"]


def test_a_trace_time_that_is_no_time_is_read_as_none(tmp_path: Path) -> None:
    pairs = [json.loads(text) for text in CLAUDE_TRACE.read_text().splitlines()]
    del pairs[0]["request"]["timestamp"], pairs[0]["response"]["timestamp"]
    session_import.import_session(write_lines(tmp_path / "log.jsonl", pairs), tmp_path / "none.jsonl")
    pairs[0]["request"]["timestamp"] = "yesterday"
    pairs[0]["response"]["timestamp"] = "9999-12-31T23:59:59-01:00"
    session_import.import_session(write_lines(tmp_path / "log.jsonl", pairs), tmp_path / "odd.jsonl")
    times = [[r.time for r in session.iter_records(tmp_path / name)] for name in ("odd.jsonl", "none.jsonl")]
    assert times[0] == times[1]


def test_a_parent_uuid_that_is_no_string_follows_no_line(tmp_path: Path) -> None:
    source = write_lines(
        tmp_path / "s.jsonl",
        [
            line("u1", None, "user", "hi"),
            line("a1", {"uuid": "u1"}, "assistant", [{"type": "text", "text": "o"}]),
        ],
    )
    report = session_import.import_session(source, tmp_path / "out.jsonl")
    assert report.not_understood == () and not gaps_of(tmp_path / "out.jsonl")


def test_a_tool_result_of_no_open_call_is_named_not_ended_again(tmp_path: Path) -> None:
    use = [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]
    result = [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]
    source = write_lines(
        tmp_path / "s.jsonl",
        [
            line("u1", None, "user", "hi"),
            line("a1", "u1", "assistant", use),
            line("r1", "a1", "user", result),
            line("r2", "a1", "user", result),  # the same result again
            line("r3", "r1", "user", [{"type": "tool_result", "tool_use_id": "t9", "content": "?"}]),
            line("a2", "r1", "assistant", [{"type": "tool_use", "id": "t2", "name": "Bash", "input": {}}]),
            line("u2", "a1", "user", "back before the result: a rewind", timestamp="2026-03-01T10:00:05Z"),
            line(
                "r4",
                "u2",
                "user",
                [{"type": "tool_result", "tool_use_id": "t2", "content": "late"}],
                timestamp="2026-03-01T10:00:06Z",
            ),
        ],
    )
    report = session_import.import_session(source, tmp_path / "out.jsonl")
    assert [(p.line, p.reason) for p in report.not_understood] == [
        (4, "result of no call open before it (t1)"),
        (5, "result of no call open before it (t9)"),
        (8, "result of no call open before it (t2)"),  # its call is on the branch rewound from
    ]
    assert gaps_of(tmp_path / "out.jsonl") == ["tool_call_unfinished"]  # t2, in the run rewound from
    assert len(of(list(session.iter_records(tmp_path / "out.jsonl")), "tool_exec_end")) == 1


def test_a_tool_call_id_used_again_starts_no_second_call(tmp_path: Path) -> None:
    use = [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]
    source = write_lines(
        tmp_path / "s.jsonl",
        [
            line("u1", None, "user", "hi"),
            line("a1", "u1", "assistant", use, id="m1"),
            line("r1", "a1", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]),
            line("a2", "r1", "assistant", use, id="m2"),
        ],
    )
    report = session_import.import_session(source, tmp_path / "out.jsonl")
    assert [(p.line, p.reason) for p in report.not_understood] == [(4, "a tool call id used before (t1)")]
    records = list(session.iter_records(tmp_path / "out.jsonl"))
    assert len(of(records, "tool_exec_start")) == 1
    assert of(records, "agent_end")[0].data["summary"]["tool_calls"] == 1


def test_codex_a_call_id_used_again_starts_no_second_call(tmp_path: Path) -> None:
    lines = CODEX.read_text().splitlines(keepends=True)
    call = next(n for n, text in enumerate(lines) if '"function_call"' in text)
    source = tmp_path / "rollout.jsonl"
    later = lines[call].replace("09:30:03.000Z", "09:30:40.000Z")  # another call, not a copy
    source.write_text("".join([*lines, later]))
    report = session_import.import_session(source, tmp_path / "out.jsonl")
    assert [(p.line, p.reason) for p in report.not_understood] == [
        (len(lines) + 1, "a tool call id used before (call_1)")
    ]
    starts = of(list(session.iter_records(tmp_path / "out.jsonl")), "tool_exec_start")
    assert [data(r).tool_id for r in starts] == ["call_1", "call_2", "call_3"]


def test_a_line_with_the_uuid_of_a_line_before_it_is_not_read_twice(tmp_path: Path) -> None:
    answer = line("a1", "u1", "assistant", [{"type": "text", "text": "hello"}])
    source = write_lines(
        tmp_path / "s.jsonl",
        [
            line("u1", None, "user", "hi"),
            answer,
            answer,  # a copy
            line("a1", "u1", "assistant", [{"type": "text", "text": "other"}]),  # another line, same uuid
        ],
    )
    report = session_import.import_session(source, tmp_path / "out.jsonl")
    assert [(p.line, p.reason) for p in report.not_understood] == [(4, "the uuid of line 2 again")]
    assert report.unmapped == {"copy of an earlier line": 1}
    ends = of(list(session.iter_records(tmp_path / "out.jsonl")), "model_exec_end")
    assert [texts(data(r).message) for r in ends] == [["hello"]]


# ---------------------------------------------------------------------------- fuzzing the fixtures

ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),  # lone surrogates and NULs included
    st.sampled_from(
        [
            "2026-03-01T09:59:59Z",  # back in time
            "\ud800 a lone surrogate",
            "0001-01-01T00:00:00+01:00",
            "9999-12-31T23:59:59-01:00",
            "u1",
            "a5",
            "toolu_01",
            "call_1",
            "msg_01",
            "tool_result",
            "tool_use",
            "function_call",
            "message",
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "x"},
            {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {}},
            {"type": "brand_new_block"},
        ]
    ),
    st.lists(st.integers(), max_size=3),
    st.integers(1, 700).map(lambda depth: json.loads("[" * depth + "]" * depth)),
)
EDITS = st.lists(
    st.tuples(
        st.sampled_from(["drop", "copy", "swap", "set", "delete", "cut"]),
        st.integers(0, 1 << 16),
        st.integers(0, 1 << 16),
        ODD_VALUES,
    ),
    min_size=1,
    max_size=6,
)


def edit_value(value: Any, path: int, new: Any) -> Any:
    """*value* with one of its values, chosen by *path*, set to *new* (``...``: deleted)."""
    if not isinstance(value, (dict, list)) or not value:
        return value if new is ... else new
    key = (sorted(value) if isinstance(value, dict) else range(len(value)))[path % len(value)]
    if path % 4 and isinstance(value[key], (dict, list)):
        value[key] = edit_value(value[key], path // 4, new)
    elif new is ...:
        del value[key]
    else:
        value[key] = new
    return value


def edit_line(raw: bytes, path: int, new: Any) -> bytes:
    try:
        obj = json.loads(raw)
    except ValueError:  # a line cut before
        return raw
    obj = edit_value(obj, path, json.loads(json.dumps(new)) if new is not ... else new)  # a copy
    return json.dumps(obj).encode("utf-8", "surrogatepass") + b"\n"


def edited(lines: List[bytes], edits: List[Any]) -> List[bytes]:
    """*lines* (each ending with a newline) changed by *edits*: lines dropped, copied,
    swapped, cut, their values set to odd ones or deleted."""
    lines = list(lines)
    for kind, at, other, value in edits:
        if not lines:
            break
        n, m = at % len(lines), other % len(lines)
        if kind == "drop":
            del lines[n]
        elif kind == "copy":
            lines.insert(m, lines[n])
        elif kind == "swap":
            lines[n], lines[m] = lines[m], lines[n]
        elif kind == "cut":
            lines[n] = lines[n][: m % len(lines[n])] + b"\n"
        else:
            lines[n] = edit_line(lines[n], other, ... if kind == "delete" else value)
    return lines


def encoded(lines: List[bytes], form: str) -> bytes:
    """*lines* as a file: as they are, with a byte order mark, CRLF line ends, a NUL byte in
    a line, or a torn last line."""
    text = b"".join(lines)
    return {
        "plain": text,
        "bom": b"\xef\xbb\xbf" + text,
        "crlf": text.replace(b"\n", b"\r\n"),
        "nul": text.replace(b"}", b"}\x00", 1),
        "torn": text[: max(0, len(text) - 7)],
    }[form]


IMPOSSIBLE = {"call_ended_twice", "call_end_without_start", "unknown_parent"}


def lines_in(data: bytes) -> int:
    return data.count(b"\n") + (not data.endswith(b"\n") and bool(data))


def check_import(source: Path, kind: str, folder: Path) -> None:
    """An import of *source* (of format *kind*, ``""``: detected) either of no known format
    (detected) or a file that validates, tells a possible history, starts each call once,
    accounts for every line read, and is the same bytes each time."""
    out, again = folder / "out.jsonl", folder / "again.jsonl"
    try:
        report = session_import.import_session(source, out, format=kind or None)
    except session_import.UnknownFormatError:
        assert not kind
        return
    session.read(out, lambda record: None)
    summary = session.summarize(out)
    assert not IMPOSSIBLE & {gap.kind for gap in summary.gaps}, summary.gaps
    records = list(session.iter_records(out))
    starts = [
        (r.run_id, r.type, call(r).id, call(r).attempt)
        for r in records
        if r.type in ("model_exec_start", "tool_exec_start")
    ]
    assert len(starts) == len(set(starts))
    note = of(records, "import_note")[0].data["details"]
    read = lines_in(source.read_bytes()) - bool(report.tail_bytes)
    agent = source.parent / SESSION_ID / "subagents" / "agent-a1b2c3.jsonl"
    if agent.exists() and "sub-agent file no tool call ran" not in note["unmapped"]:
        read += lines_in(agent.read_bytes())
    assert note["lines"] == report.lines == read
    assert sum(note["unmapped"].values()) + len(note["not_understood"]) <= report.lines
    session_import.import_session(source, again, format=kind or None)
    assert out.read_bytes() == again.read_bytes()


@pytest.mark.parametrize(
    ("fixture", "kind"),
    [
        (CLAUDE_CODE, "claude-code"),
        (CLAUDE_TRACE, "claude-trace"),
        (CODEX, "codex"),
        (CODEX_OLDER, "codex"),
        (CODEX_BARE, "codex"),
    ],
)
@hypothesis.settings(max_examples=sweep(40, 10), deadline=None, derandomize=True, database=None)
@hypothesis.given(
    edits=EDITS,
    form=st.sampled_from(["plain", "plain", "bom", "crlf", "nul", "torn"]),
    detect=st.booleans(),
)
def test_an_edited_fixture_imports_as_a_possible_history_or_not_at_all(
    fixture: Path, kind: str, edits: List[Any], form: str, detect: bool
) -> None:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        source = folder / fixture.name
        if fixture == CLAUDE_CODE:  # with its sub-agent, edited too
            shutil.copytree(fixture.parent / SESSION_ID, folder / SESSION_ID)
            agent = folder / SESSION_ID / "subagents" / "agent-a1b2c3.jsonl"
            agent.write_bytes(b"".join(edited(agent.read_bytes().splitlines(keepends=True), edits[::-1])))
        lines = fixture.read_bytes().splitlines(keepends=True)
        source.write_bytes(encoded(edited(lines, edits), form))
        check_import(source, "" if detect else kind, folder)


def test_into_never_replaces_an_archive_with_less_of_its_source(tmp_path: Path) -> None:
    # a claude-trace log cut short (its first lines) where it was imported whole
    first, second = tmp_path / "a" / CLAUDE_TRACE.name, tmp_path / "b" / CLAUDE_TRACE.name
    for path, lines in ((first, 5), (second, 2)):
        path.parent.mkdir()
        path.write_text("".join(CLAUDE_TRACE.read_text().splitlines(keepends=True)[:lines]))
    archive = tmp_path / "archive"
    assert run("import", str(first.parent), "--into", str(archive)).returncode == 0
    kept = (archive / f"{TRACE_ID}.jsonl").read_bytes()
    done = run("import", str(second.parent), "--into", str(archive))
    assert done.returncode == 1
    assert (
        f"holds {CLAUDE_TRACE.name} as {first.stat().st_size} bytes, more than the source has now"
        in done.stderr
    )
    assert (archive / f"{TRACE_ID}.jsonl").read_bytes() == kept


def test_into_keeps_two_trace_logs_of_one_second_apart(tmp_path: Path) -> None:
    # two claude-trace logs of the same second in two projects: the same file name, two sessions
    lines = CLAUDE_TRACE.read_text().splitlines(keepends=True)
    first, second = tmp_path / "a" / CLAUDE_TRACE.name, tmp_path / "b" / CLAUDE_TRACE.name
    for path, text in ((first, lines[:2]), (second, lines[2:])):
        path.parent.mkdir()
        path.write_text("".join(text))
    assert second.stat().st_size > first.stat().st_size  # a larger log, later
    archive = tmp_path / "archive"
    assert run("import", str(first.parent), "--into", str(archive)).returncode == 0
    (kept,) = archive.iterdir()
    before = kept.read_bytes()
    done = run("import", str(second.parent), "--into", str(archive))
    assert done.returncode == 0, done.stderr
    assert kept.read_bytes() == before  # never replaced by the other log's import
    files = sorted(archive.iterdir())
    assert len(files) == 2
    assert len({next(session.iter_records(path)).session_id for path in files}) == 2
    both = tmp_path / "both"  # in one run: both imported
    assert run("import", str(first.parent), str(second.parent), "--into", str(both)).returncode == 0
    assert sorted(path.name for path in both.iterdir()) == [path.name for path in files]
    again = run("import", str(first.parent), str(second.parent), "--into", str(archive))
    assert again.returncode == 0 and again.stdout.count(": unchanged -> ") == 2


def test_into_leaves_a_trace_log_for_when_its_first_line_is_whole(tmp_path: Path) -> None:
    # its session id is its first line's: a log still writing that line has none yet
    whole = CLAUDE_TRACE.read_bytes()
    log = tmp_path / "logs" / CLAUDE_TRACE.name
    log.parent.mkdir()
    archive = tmp_path / "archive"
    for written in (b"", whole[:200]):
        log.write_bytes(written)
        done = run("import", "--from", "claude-trace", str(log), "--into", str(archive))
        assert done.returncode == 1 and f"{log}: holds no whole line yet" in done.stderr
        assert list(archive.iterdir()) == []
    log.write_bytes(whole)
    assert run("import", "--from", "claude-trace", str(log), "--into", str(archive)).returncode == 0
    assert [path.name for path in archive.iterdir()] == [f"{TRACE_ID}.jsonl"]


@pytest.mark.parametrize("depth", [195, 450, 900])
def test_a_line_nested_deeper_than_the_writer_writes_is_named(tmp_path: Path, depth: int) -> None:
    deep = json.loads("[" * depth + "]" * depth)
    use = [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]
    result = [{"type": "tool_result", "tool_use_id": "t1", "content": [deep]}]
    source = write_lines(
        tmp_path / "s.jsonl",
        [
            line("u1", None, "user", "hi"),
            line("a1", "u1", "assistant", use),
            line("r1", "a1", "user", result),
        ],
    )
    report = session_import.import_session(source, tmp_path / "out.jsonl")
    deeper = depth > 195
    assert [(p.line, p.reason) for p in report.not_understood] == [
        (3, "not JSON: nested too deeply")
    ] * deeper
    assert len(of(list(session.iter_records(tmp_path / "out.jsonl")), "tool_exec_end")) == (not deeper)


def test_codex_reasoning_whose_summary_is_no_list_is_read_as_empty(tmp_path: Path) -> None:
    lines = [json.loads(text) for text in CODEX.read_text().splitlines()]
    reasoning = next(obj for obj in lines if obj["payload"].get("type") == "reasoning")
    reasoning["payload"].update(summary="a text", content=5)
    session_import.import_session(write_lines(tmp_path / "rollout.jsonl", lines), tmp_path / "out.jsonl")
    first = data(of(list(session.iter_records(tmp_path / "out.jsonl")), "model_exec_end", "model-1")[0])
    assert texts(first.message) == ["toolCall"]


def test_a_copy_of_a_trace_pair_is_counted_not_billed_twice(tmp_path: Path) -> None:
    lines = CLAUDE_TRACE.read_text().splitlines(keepends=True)
    source = tmp_path / CLAUDE_TRACE.name
    source.write_text("".join([lines[0], *lines]))
    report = session_import.import_session(source, tmp_path / "out.jsonl")
    assert report.unmapped["copy of an earlier line"] == 1
    imported(tmp_path, CLAUDE_TRACE)
    usage = session.summarize(tmp_path / "out.jsonl").usage
    assert usage == session.summarize(tmp_path / f"{CLAUDE_TRACE.stem}.out.jsonl").usage
