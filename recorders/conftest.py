"""Checks every recorder test makes of the file it recorded."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import io
import json
import os
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import session


def need(module: str) -> None:
    """Skip this test file when the framework *module* is missing (each framework has its own
    tox environment); under CI=true, fail: CI installs every framework."""
    if importlib.util.find_spec(module) is not None:
        return
    message = f"{module} is not installed: run this file in its tox environment"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message, allow_module_level=True)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m session ARGS``, run in this process: starting one for each check of each
    recorded file cost more than the checks (the tests of the command line as a process are
    the suite's, in test_session.py)."""
    written = [io.BytesIO(), io.BytesIO()]  # as bytes: `show` writes to sys.stdout.buffer
    out, err = (io.TextIOWrapper(raw, encoding="utf-8") for raw in written)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = session.main(list(args))
    out.flush()
    err.flush()
    printed = [raw.getvalue().decode() for raw in written]
    return subprocess.CompletedProcess(["python", "-m", "session", *args], status, *printed)


def check_file(path: Path, unrecorded: tuple[session.CallRef, ...] = ()) -> session.Summary:
    """The file validates, its summary shows no gaps but the calls *unrecorded* (where the
    recorder says it missed work), every successful model attempt carries its usage, and
    every tool call is found whole; its summary for further checks."""
    validated = _cli("validate", str(path))
    assert validated.returncode == 0, validated.stderr
    assert ": ok," in validated.stdout
    summary = session.summarize(path)
    assert [(gap.kind, gap.ref) for gap in summary.gaps] == [("unrecorded", ref) for ref in unrecorded]
    assert all(run.closed for run in summary.runs)
    failed: dict[str, bool] = {}  # tool call id -> whether its tool_exec_end is an error
    every: dict[str, bool] = {}  # and the same for all runs
    for record in session.iter_records(path):
        if record.type == "model_exec_end" and "error" not in record.data:
            assert record.data["message"]["value"]["usage"]["total_tokens"] > 0, record
        if record.type == "tool_exec_start":
            assert record.ref is not None
            found = [r.type for r in session.find(path, record.ref)]
            assert found[0] == "tool_exec_start" and "tool_exec_end" in found, found
        if record.type == "tool_exec_end":
            end = session.EventData.from_record(record)
            assert end.is_error == (end.error is not None), record  # a failure says what failed
            failed[str(end.tool_id)] = every[str(end.tool_id)] = bool(end.is_error)
        if record.type == "agent_end":  # the run counts every failed tool call
            assert record.data["summary"]["tool_errors"] == sum(failed.values()), (record, failed)
            failed = {}
    for message in messages(path):
        call_id = (message.metadata or {}).get("tool_call_id")
        if message.role == "tool" and call_id in every:  # the model is told what the file says
            assert bool(message.metadata.get("is_error")) == every[call_id], (message, every)
    check_calls(path)
    check_spans(path)
    return summary


# each end's start: a run's agent_end ends its agent_start, a call's end the start of its attempt
_STARTS = {
    "agent_end": "agent_start",
    "model_exec_end": "model_exec_start",
    "tool_exec_end": "tool_exec_start",
}


def check_calls(path: Path) -> None:
    """No run, model call attempt or tool call ends twice, and every end has its start: a
    run's ``agent_end`` follows its ``agent_start``, a ``model_exec_end`` or ``tool_exec_end``
    the start of the same attempt of the same execution, in the same run."""
    started: set[tuple[str, ...]] = set()
    ended: set[tuple[str, ...]] = set()
    for record in session.iter_records(path):
        kind = _STARTS.get(record.type, record.type)
        if kind not in _STARTS.values():
            continue
        ref = record.ref
        call = (kind, record.run_id or "") + ((ref.execution_id, str(ref.attempt)) if ref else ())
        assert kind == "agent_start" or ref is not None, record  # a call's record names its call
        if record.type == kind:
            assert call not in started, ("started twice", record)
            started.add(call)
        else:
            assert call in started, ("an end without its start", record)
            assert call not in ended, ("ended twice", record)
            ended.add(call)


def check_spans(path: Path) -> None:
    """``otlp`` (OTLP/JSON, written with ``--output``) gives a span to each run and to each
    attempt of each call, none unfinished, the same spans as it gives in protobuf; a model
    call's span carries its usage, a tool call's its name and call id, under the model call
    that asked for it."""
    out = path.with_name(path.name + ".otlp.jsonl")
    done = _cli("otlp", str(path), "--protocol", "http/json", "--content", "--output", str(out))
    assert done.returncode == 0, done.stderr
    spans = [
        span
        for line in out.read_text(encoding="utf-8").splitlines()
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]
    values = {
        span["spanId"]: {a["key"]: next(iter(a["value"].values())) for a in span["attributes"]}
        for span in spans
    }
    by_call = {
        (
            span["traceId"],
            found.get("session_jsonl.execution.id"),
            found.get("session_jsonl.execution.attempt"),
        ): span
        for span, found in zip(spans, values.values())
    }
    assert not [span for span in spans if "unfinished" in span.get("status", {}).get("message", "")]
    assert _as_decoded(spans) == _protobuf_spans(path)
    records = [record for record in session.iter_records(path) if record.ref is not None]
    runs = [span["traceId"] for span in spans if span["name"] == "invoke_agent"]
    traces = dict(zip((r.run_id for r in session.iter_records(path) if r.type == "run_start"), runs))
    calls = {(traces[r.run_id], r.ref.execution_id, str(r.ref.attempt)): r for r in records if r.ref}
    assert len(spans) == len(runs) + len(calls) == len(by_call), (spans, calls)
    for record in records:
        assert record.ref is not None
        span = by_call[traces[record.run_id], record.ref.execution_id, str(record.ref.attempt)]
        found, data = values[span["spanId"]], record.data
        usage = data.get("message", {}).get("value", {}).get("usage", {})
        if record.type == "model_exec_end" and "input" in usage:
            assert found["gen_ai.usage.input_tokens"] == str(usage["input"]), (found, usage)
        if record.type == "tool_exec_end":
            assert (found["gen_ai.tool.name"], found["gen_ai.tool.call.id"]) == (
                data["tool"],
                data["tool_id"],
            )
            if data["execution"].get("parent_id"):
                parent = values[span["parentSpanId"]]
                assert parent["session_jsonl.execution.id"] == data["execution"]["parent_id"], (found, parent)


def _json_value(value: dict[str, Any]) -> Any:
    ((kind, item),) = value.items()
    if kind == "arrayValue":
        return [_json_value(v) for v in item.get("values", [])]
    return int(item) if kind == "intValue" else item


def _as_decoded(spans: list[Any]) -> list[tuple[Any, ...]]:
    """OTLP/JSON *spans* as ``_protobuf_spans`` gives them: ids in hex, attribute values."""
    return [
        (
            span["traceId"],
            span["spanId"],
            span.get("parentSpanId", ""),
            span["name"],
            span.get("kind", 0),
            int(span["startTimeUnixNano"]),
            int(span["endTimeUnixNano"]),
            {a["key"]: _json_value(a["value"]) for a in span["attributes"]},
            span.get("status", {}).get("code", 0),
        )
        for span in spans
    ]


def _protobuf_spans(path: Path) -> list[tuple[Any, ...]]:
    """The spans ``otlp`` writes for *path* in protobuf, decoded with opentelemetry-proto."""
    need("opentelemetry.proto")
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    def value(v: Any) -> Any:
        which = v.WhichOneof("value")
        return [value(x) for x in v.array_value.values] if which == "array_value" else getattr(v, which)

    out = path.with_name(path.name + ".otlp.pb")
    done = _cli("otlp", str(path), "--content", "--output", str(out))
    assert done.returncode == 0, done.stderr
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(out.read_bytes())  # requests merge
    return [
        (
            span.trace_id.hex(),
            span.span_id.hex(),
            span.parent_span_id.hex(),
            span.name,
            span.kind,
            span.start_time_unix_nano,
            span.end_time_unix_nano,
            {a.key: value(a.value) for a in span.attributes},
            span.status.code,
        )
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]


def check_tool_failures(path: Path, ends: dict[str, str]) -> None:
    """Every tool call of *ends* (call id -> the error type its failure is recorded with)
    ended in an error, and the run counts them all."""
    check_file(path)
    recorded = {e.tool_id: e for e in events(path, "tool_exec_end")}
    assert {call_id: recorded[call_id].is_error for call_id in ends} == dict.fromkeys(ends, True)
    errors = {call_id: (recorded[call_id].error or {}).get("type") for call_id in ends}
    assert errors == ends


def check_aborted(path: Path) -> None:
    """The run was stopped from outside (cancelled, or its stream closed early): aborted."""
    summary = check_file(path)
    assert [run.end_reason for run in summary.runs] == ["aborted"], summary.runs


SECRET = "sk-live-0123456789"


def scrub(data: dict[str, Any]) -> dict[str, Any]:
    """A redactor: every occurrence of ``SECRET`` becomes ``[redacted]``."""
    cleaned = _scrub(data)
    assert isinstance(cleaned, dict)
    return cleaned


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace(SECRET, "[redacted]")
    if isinstance(value, session.RawJSON):
        text = value.text.decode() if isinstance(value.text, bytes) else value.text
        return session.RawJSON(text.replace(SECRET, "[redacted]"))
    if isinstance(value, dict):
        return {key: _scrub(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(item) for item in value]
    return value


def check_redacted(path: Path) -> None:
    """The secret a tool was given and returned is nowhere in the file, and was there to
    redact: its tool call's arguments and result say ``[redacted]``."""
    check_file(path)
    assert SECRET not in path.read_text(encoding="utf-8")
    [start] = events(path, "tool_exec_start")
    [end] = events(path, "tool_exec_end")
    assert "[redacted]" in str(start.args) and "[redacted]" in str(end.result), (start, end)


def transcript(path: Path) -> str:
    """``show --pretty`` of the whole file."""
    shown = _cli("show", "--pretty", str(path))
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def events(path: Path, kind: str) -> list[session.EventData]:
    return [session.EventData.from_record(r) for r in session.iter_records(path) if r.type == kind]


def messages(path: Path) -> list[Any]:
    """The committed messages, decoded."""
    codec = session.JSONCodec()
    return [codec.decode(data.message) for data in events(path, "message_end")]


@pytest.fixture
def recorded() -> Callable[[Path], session.Summary]:
    return check_file


def check_conversation(path: Path, answer: str) -> None:
    """The committed messages of the scenario every framework's test runs: the prompt, the
    model's two tool calls, their results (``lookup``'s an error), and the *answer*."""
    assert [(m.role, m.metadata) for m in messages(path)] == [
        ("user", None),
        ("assistant", None),
        ("tool", {"tool_call_id": "call-add"}),
        ("tool", {"tool_call_id": "call-lookup", "is_error": True}),
        ("assistant", None),
    ]
    text = transcript(path)
    assert "user: add 2 and 3, and look up x" in text
    assert f"assistant: {answer}" in text


def check_nested(path: Path, tool_id: str, tokens: int, tools: tuple[str, ...] = ()) -> None:
    """A sub-agent's work (an agent run in the tool call *tool_id*) is in the file whole,
    nested in that call, with no recording gap: its model calls are executions whose parent
    is the call, each attempt numbered from 1 (a retry is the next attempt of its call, after
    a ``retry`` event), with their usage (*tokens* in all, counted in the summary); every
    tool call its model calls asked for (the ids *tools*) is an execution within the call
    whose parent is the model call that asked for it, started and ended; all of it between
    the call's start and end.  (The work of a sub-agent's own sub-agents is nested deeper,
    in the tool call that ran each: checked as a call of its own.)"""
    records = list(session.iter_records(path))
    [start] = [r for r in records if r.type == "tool_exec_start" and r.data.get("tool_id") == tool_id]
    [end] = [r.seq for r in records if r.type == "tool_exec_end" and r.data.get("tool_id") == tool_id]
    tool = start.data["execution"]["id"]
    within = [r for r in records if r.data.get("execution", {}).get("id", "").startswith(tool + "/")]
    assert within and all(start.seq < r.seq < end for r in within), within
    inside = [r for r in within if "/" not in r.data["execution"]["id"][len(tool) + 1 :]]
    models = [r for r in inside if r.type in ("model_exec_start", "model_exec_end", "retry")]
    assert all(r.data["execution"]["parent_id"] == tool for r in models), models
    _check_attempts([r for r in models if r.type != "model_exec_end"])
    ends = [r for r in models if r.type == "model_exec_end"]
    used = [r.data["message"]["value"]["usage"]["total_tokens"] for r in ends if "error" not in r.data]
    assert sum(used) == tokens and len(ends) == len([r for r in models if r.type == "model_exec_start"])
    assert session.summarize(path).usage["total_tokens"] >= tokens
    asked = {  # tool call id -> the model call that asked for it
        block["tool_call"]["id"]: r.data["execution"]["id"]
        for r in ends
        for block in r.data.get("message", {}).get("value", {}).get("content", [])
        if block["type"] == "toolCall"
    }
    calls = {r.data["tool_id"]: r for r in inside if r.type == "tool_exec_start"}
    assert set(asked) == set(calls) == set(tools), (asked, calls)
    for call_id, r in calls.items():
        assert r.data["execution"]["parent_id"] == asked[call_id], r
        found = [f.type for f in session.find(path, r.ref)] if r.ref is not None else []
        assert found[0] == "tool_exec_start" and found[-1] == "tool_exec_end", found
    assert not [r for r in records if r.type == "recording_gap"]


def _check_attempts(starts: list[session.Record]) -> None:
    """The ``model_exec_start`` and ``retry`` records of some executions: each execution's
    attempts numbered 1, 2, ... in order, every attempt after the first preceded by its
    ``retry``."""
    latest: dict[str, int] = {}
    retried: set[tuple[str, int]] = set()
    for r in starts:
        execution = r.data["execution"]
        key = (execution["id"], execution["attempt"])
        if r.type == "retry":
            retried.add(key)
            continue
        assert execution["attempt"] == latest.get(execution["id"], 0) + 1, r
        assert execution["attempt"] == 1 or key in retried, r
        latest[execution["id"]] = execution["attempt"]


ROOT = Path(__file__).resolve().parent.parent


def run_example(name: str, path: Path) -> list[str]:
    """Run the example script ``examples/recorders/<name>`` twice (a conversation, then one
    going on from its checkpoint) as its docstring says, from the project's folder with
    ``PYTHONPATH=.:recorders``, recording into *path*; the last line each run printed."""
    script = Path("examples", "recorders", name)
    assert f"PYTHONPATH=.:recorders python3 {script.as_posix()} chat.jsonl" in (ROOT / script).read_text()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([".", "recorders"])}
    printed = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, str(script), str(path)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            encoding="utf-8",
        )
        assert done.returncode == 0, done.stderr
        printed.append(done.stdout.splitlines()[-1])
    return printed


def check_example(path: Path, calls: int, tools: list[str]) -> None:
    """The file an example script recorded twice: it validates, with no gaps; two runs, each
    ended ``stop``, the second going on from the first's checkpoint (its turns counted on);
    *calls* model calls and the tool calls *tools*, by name, in all."""
    summary = check_file(path)
    assert [run.end_reason for run in summary.runs] == ["stop", "stop"]
    assert summary.checkpoints >= 2
    assert summary.counts["model_exec_end"] == calls
    assert [e.tool for e in events(path, "tool_exec_start")] == tools
    ids = [e.execution.id for e in events(path, "model_exec_start") if e.execution]
    assert ids == [f"model-{n}" for n in range(1, calls + 1)], ids


def check_gap(path: Path, tool_id: str) -> None:
    """Work in the tool call *tool_id* the recorder could not see is said in the file: a
    ``recording_gap`` event in that call, saying what went unrecorded."""
    [gap] = events(path, "recording_gap")
    [tool] = [e for e in events(path, "tool_exec_start") if e.tool_id == tool_id]
    assert gap.execution == tool.execution and tool.execution is not None
    [run] = {r.run_id for r in session.iter_records(path) if r.type == "recording_gap"}
    check_file(path, (session.CallRef(session.summarize(path).session_id, str(run), tool.execution.id, 1),))
    assert isinstance(gap.details, dict) and gap.details["unrecorded"], gap


def as_read(message: session.Message) -> Any:
    """*message* as a reader gives it back from a file: its codec value, raw JSON parsed."""
    encoded = session.JSONCodec().encode(message)
    return json.loads(json.dumps(encoded, default=lambda raw: json.loads(raw.text)))


def unstamped(value: Any) -> Any:
    """A message as read back, without its timestamp."""
    return {**value, "value": {k: v for k, v in value["value"].items() if k != "timestamp"}}


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def check_each_message_once(path: Path) -> dict[str, int]:
    """Every message of the file's requests is written once (format version 2): one
    ``message`` record per distinct message the requests send, in the order first sent, and
    no two of them alike but for their timestamps (a message sent again, also by a later run
    that resumed the conversation, is the one written before).  The figures: ``requests``,
    ``messages`` (records), ``request_bytes`` (the lines of the requests and of the records
    they refer to), ``whole_bytes`` (the requests' JSON, whole, as version 1 writes it),
    ``checkpoint_bytes`` and ``file_bytes``."""
    check_file(path)
    records = list(session.iter_records(path))
    requests = [r for r in records if r.type == "model_request"]
    sent = [m for r in requests for m in r.data["request"]["messages"]]
    written = [r for r in records if r.type == "message"]
    assert [_text(r.data["message"]) for r in written] == list(dict.fromkeys(_text(m) for m in sent))
    assert len(written) == len({_text(unstamped(m)) for m in sent})
    sizes: dict[str, int] = {}
    for line in path.read_bytes().splitlines(keepends=True):
        kind = json.loads(line)["type"]
        sizes[kind] = sizes.get(kind, 0) + len(line)
    figures = {
        "requests": len(requests),
        "messages": len(written),
        "request_bytes": sum(sizes.get(kind, 0) for kind in ("model_request", "message", "tools")),
        "whole_bytes": sum(len(json.dumps(r.data, separators=(",", ":"))) for r in requests),
        "checkpoint_bytes": sizes.get("checkpoint", 0),
        "file_bytes": path.stat().st_size,
    }
    return figures


@pytest.fixture
def sent_messages(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[list[session.Message]]]:
    """The messages of every model request recorded from here on, as given to ``Run.record``,
    by run id."""
    sent: dict[str, list[list[session.Message]]] = {}
    record = session.Run.record

    def spy(run: session.Run, event: session.Event) -> bool:
        if event.type == "model_request" and isinstance(event.request, session.ModelRequest):
            sent.setdefault(run.run_id, []).append(list(event.request.messages))
        return record(run, event)

    monkeypatch.setattr(session.Run, "record", spy)
    return sent


def check_converted_once(sent: dict[str, list[list[session.Message]]]) -> None:
    """Within each run, a message sent again is the same ``session.Message`` object (the
    writer of a version-2 file then neither checks nor encodes it again): as many objects as
    distinct messages."""
    for requests in sent.values():
        objects = {id(message): message for messages in requests for message in messages}
        assert len(objects) == len({_text(as_read(message)) for message in objects.values()})


@pytest.fixture
def every_event(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[session.Event]]:
    """Every event recorded from here on, as given to ``Run.record``, by run id."""
    given: dict[str, list[session.Event]] = {}
    record = session.Run.record

    def spy(run: session.Run, event: session.Event) -> bool:
        given.setdefault(run.run_id, []).append(event)
        return record(run, event)

    monkeypatch.setattr(session.Run, "record", spy)
    return given


def check_both_versions(given: dict[str, list[session.Event]], folder: Path) -> None:
    """The events a recorder gave, recorded again in format version 1 and in version 2 (one
    run each), read back alike: the same records with the same data, each message of a
    request the same JSON text (version 2 read with its references resolved)."""
    for run_id, events in list(given.items()):  # as given: recording them again adds runs
        read = []
        for version in (1, 2):
            path = folder / f"again-{run_id}-v{version}.jsonl"
            with session.create(path, version=version) as s, s.begin_run() as run:
                for event in events:
                    run.record(event)
            kept = [r for r in session.iter_records(path) if r.type not in {"message", "tools"}]
            read.append([(r.type, r.data) for r in kept[2:-1]])  # the events: no header, no run's ends
        assert read[0] == read[1] and len(read[0]) == len(events)
        for (kind, one), (_, two) in zip(*read):
            if kind == "model_request":
                assert [json.dumps(m) for m in one["request"]["messages"]] == [
                    json.dumps(m) for m in two["request"]["messages"]
                ]


@pytest.fixture
def file_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, bool]]:
    """Every ``os.write`` and ``os.fsync`` from here on: its name, the inode of the file it
    went to, and whether it ran in the main thread (the event loop's, under ``asyncio.run``).
    Each is observed, then made as it was asked."""
    calls: list[tuple[str, int, bool]] = []

    def observed(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def spy(fd: int, *args: Any) -> Any:
            main = threading.current_thread() is threading.main_thread()
            calls.append((name, os.fstat(fd).st_ino, main))
            return call(fd, *args)

        return spy

    monkeypatch.setattr(os, "write", observed("write", os.write))
    monkeypatch.setattr(os, "fsync", observed("fsync", os.fsync))
    return calls


def check_off_the_loop(calls: list[tuple[str, int, bool]], path: Path) -> None:
    """The file at *path* was written and synced (*calls*: ``file_calls``'), never in the
    event loop's thread."""
    made = [(name, main) for name, inode, main in calls if inode == path.stat().st_ino]
    assert {name for name, _ in made} == {"write", "fsync"}
    assert [name for name, main in made if main] == []


_CANCELLED_AS_THE_PROGRAM_ENDS = """
import asyncio, sys, threading, time
import session
from {module} import recording

opening, real_open = threading.Event(), session.open

def slow_open(*args, **kwargs):
    opening.set()
    while threading.main_thread().is_alive():  # until the program has ended
        time.sleep(0.01)
    return real_open(*args, **kwargs)

session.open = slow_open

async def enter():
    async with recording(sys.argv[1]):
        raise AssertionError("the recording began")

async def cancelled():
    task = asyncio.ensure_future(enter())
    await asyncio.to_thread(opening.wait)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass

asyncio.run(cancelled())
"""


def check_cancelled_as_the_program_ends(module: str, path: Path) -> None:
    """A program whose recording is cancelled while its file opens (Ctrl-C) ends at once; the
    file opens as the interpreter shuts down, when no thread can be started: the thread that
    opens it closes it, with no error and no ``ResourceWarning``."""
    program = _CANCELLED_AS_THE_PROGRAM_ENDS.format(module=module)
    done = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", program, str(path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([".", "recorders"])},
        capture_output=True,
        text=True,
        check=False,
        encoding="utf-8",
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "ResourceWarning" not in done.stderr, done.stderr
    assert [r.type for r in session.iter_records(path)] == ["session_start"]


def check_closed_by_its_threads(stop: Callable[[], None]) -> None:
    """*stop* (a recording stopped while its file opens), then the recorder's threads that
    open and close the file, done: the session was closed by them, with no ``ResourceWarning``
    (the garbage collector finds none left open)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stop()
        for name in ("session-open", "session-close"):  # the second where it was open already
            for thread in [t for t in threading.enumerate() if t.name == name]:
                thread.join()
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def check_interrupted_while_opening(
    recording: Callable[..., Any], path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C raised in the recording as the thread that opens its file starts (a second
    one, which asyncio raises where the loop is) leaves the session closed once it is open,
    as a cancelled wait does."""
    real_start = threading.Thread.start

    def start_then_interrupted(thread: threading.Thread) -> None:
        real_start(thread)
        if thread.name == "session-open":
            raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", start_then_interrupted)

    async def enter() -> None:
        async with recording(path):
            raise AssertionError("the recording began")

    def interrupted() -> None:
        with pytest.raises(KeyboardInterrupt):
            asyncio.run(enter())

    check_closed_by_its_threads(interrupted)
    with session.open(path) as again:  # not LockedError: closed, and only once
        assert again.load_checkpoint() is None


def check_cancelled_while_opening(
    recording: Callable[..., Any], path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recording whose wait for its file to open is cancelled (Ctrl-C, a timeout) leaves the
    session closed once it is open, not to the garbage collector: no ``ResourceWarning``, and
    the file is free for the next recording at once."""
    opening, release = threading.Event(), threading.Event()
    real_open = session.open

    def slow_open(*args: Any, **kwargs: Any) -> session.Session:
        opening.set()
        release.wait()
        return real_open(*args, **kwargs)

    monkeypatch.setattr(session, "open", slow_open)

    async def enter() -> None:
        async with recording(path):
            raise AssertionError("the recording began")

    async def cancelled() -> None:
        task = asyncio.ensure_future(enter())
        await asyncio.to_thread(opening.wait)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()

    check_closed_by_its_threads(lambda: asyncio.run(cancelled()))
    monkeypatch.setattr(session, "open", real_open)
    with session.open(path) as again:  # not LockedError: closed, and only once
        assert again.load_checkpoint() is None
    assert [r.type for r in session.iter_records(path)] == ["session_start"]
