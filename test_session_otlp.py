"""Tests for ``otlp`` (session_export.py): what a receiver on 127.0.0.1 gets, decoded with
opentelemetry-proto, for the demo session and made ones, in protobuf and JSON; the encoder
byte for byte against protobuf's; the faults of sending; and, with -m phoenix, a real Phoenix."""

from __future__ import annotations

import base64
import contextlib
import gzip
import http.server
import json
import os
import shutil
import ssl
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Set, Tuple

import hypothesis
import pytest
from hypothesis import strategies as st

import session
import session_export
from session import Event, Execution, Message, ModelRequest
from test_session import HERE, T0, busy_file, need, run_cli, sweep

# ---------------------------------------------------------------------------- helpers


def proto() -> Any:
    """opentelemetry-proto's ExportTraceServiceRequest, or a skip (a failure under CI)."""
    need(
        "opentelemetry", "the requests are decoded with opentelemetry-proto (pip install opentelemetry-proto)"
    )
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    return trace_service_pb2.ExportTraceServiceRequest


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("demo") / "demo.jsonl"
    done = subprocess.run(
        [sys.executable, str(HERE / "examples" / "agent_loop.py"), str(path)], capture_output=True
    )
    assert done.returncode == 0, done.stderr
    return path


class Receiver:
    """An OTLP/HTTP receiver on 127.0.0.1: answers each POST with the next of *answers*
    (status, headers[, body]), then 200; keeps every request's path, headers, body (gunzipped) and
    arrival time (header names in lowercase).  *delay*: seconds to wait before answering."""

    def __init__(self, answers: Tuple[Tuple[Any, ...], ...] = (), delay: float = 0.0) -> None:
        self.answers = list(answers)
        self.got: List[Tuple[str, Dict[str, str], bytes, float]] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.got.append(
                    (self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic())
                )
                time.sleep(delay)
                status, headers, *said = receiver.answers.pop(0) if receiver.answers else (200, {})
                answer = said[0] if said else b""
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def decode(body: bytes, protocol: str) -> Any:
    """The ExportTraceServiceRequest in *body*: protobuf, or OTLP/JSON (hex ids)."""
    request = proto()()
    if protocol == "http/protobuf":
        request.ParseFromString(body)
        return request
    from google.protobuf import json_format

    obj = json.loads(body)
    for resource in obj["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for item in [span, *span.get("links", [])]:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in item:
                            item[key] = base64.b64encode(bytes.fromhex(item[key])).decode()
    return json_format.ParseDict(obj, request)


def decode_proto(body: bytes) -> Any:
    return decode(body, "http/protobuf")


def spans_of(*requests: Any) -> List[Any]:
    return [span for r in requests for rs in r.resource_spans for ss in rs.scope_spans for span in ss.spans]


def attributes(item: Any) -> Dict[str, Any]:
    def value(v: Any) -> Any:
        which = v.WhichOneof("value")
        if which == "array_value":
            return [value(x) for x in v.array_value.values]
        return getattr(v, which)

    return {kv.key: value(kv.value) for kv in item.attributes}


def sent(path: Path, protocol: str = "http/protobuf", *flags: str) -> Tuple[List[Any], Receiver]:
    with Receiver() as receiver:
        done = run_cli("otlp", str(path), "--endpoint", receiver.url, "--protocol", protocol, *flags)
    assert done.returncode == 0, done.stderr
    assert "left out" in done.stdout and receiver.got
    return spans_of(*(decode(body, protocol) for _, _, body, _ in receiver.got)), receiver


def nanos(time_text: str) -> int:
    moment = session._parse_rfc3339(time_text)
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def execution_of(span: Any) -> Tuple[str, int]:
    """The execution id and attempt a call's span names (``("", 0)`` for a run's)."""
    a = attributes(span)
    return a.get("session_jsonl.execution.id", ""), a.get("session_jsonl.execution.attempt", 0)


def call_records(path: Path) -> Dict[Tuple[str, str, int], List[session.Record]]:
    calls: Dict[Tuple[str, str, int], List[session.Record]] = {}
    for record in session.iter_records(path):
        ref = record.ref
        if ref is not None:
            calls.setdefault((ref.run_id, ref.execution_id, ref.attempt), []).append(record)
    return calls


# ---------------------------------------------------------------------------- the demo session


@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json"])
def test_the_demo_session_arrives_as_spans_by_the_genai_conventions(demo: Path, protocol: str) -> None:
    spans, receiver = sent(demo, protocol)
    path, headers, _, _ = receiver.got[0]
    assert path == "/v1/traces" and headers["content-encoding"] == "gzip"
    assert headers["content-type"] == session_export._OTLP_PROTOCOLS[protocol]
    runs = [s for s in spans if s.name == "invoke_agent"]
    runs_in_file = [r for r in session.iter_records(demo) if r.type in ("run_start", "run_close")]
    assert [(s.start_time_unix_nano, s.end_time_unix_nano) for s in runs] == [
        (nanos(a.time), nanos(b.time)) for a, b in zip(runs_in_file[::2], runs_in_file[1::2])
    ]
    assert {s.kind for s in runs} == {1} and all(not s.parent_span_id for s in runs)
    assert len({s.trace_id for s in runs}) == 2 and {s.trace_id for s in spans} == {s.trace_id for s in runs}
    by_id = {s.span_id: s for s in spans}
    run_of = {span.trace_id: str(record.run_id) for span, record in zip(runs, runs_in_file[::2])}
    calls = call_records(demo)
    assert len(spans) == len(runs) + len(calls) == 13
    for span in spans:
        a = attributes(span)
        assert a["gen_ai.conversation.id"] == a["session.id"] == runs_in_file[0].session_id
        if span in runs:
            assert set(a) == keys_of("run", False) and a["openinference.span.kind"] == "AGENT"
            continue
        run_id, (execution_id, attempt) = run_of[span.trace_id], execution_of(span)
        records = calls[run_id, execution_id, attempt]
        assert span.start_time_unix_nano == nanos(records[0].time)
        data = {r.type: r.data for r in records}
        execution = records[0].data["execution"]
        parent = by_id[span.parent_span_id]
        assert parent.trace_id == span.trace_id
        if execution["kind"] == "model":
            check_model_span(span, data, spans)
            assert parent.name == "invoke_agent"
        elif execution["kind"] == "tool":
            check_tool_span(span, data)
            attempts = [key[2] for key in calls if key[:2] == (run_id, execution["parent_id"])]
            assert parent.name == "chat" and execution_of(parent) == (execution["parent_id"], max(attempts))
            assert parent.status.code == 0  # the attempt that asked for it
        else:
            assert execution["kind"] == "compact" and span.name == "compact" and parent.name == "invoke_agent"
            assert set(a) == keys_of("compact", False)  # and no compaction: it may summarize, it is content


def keys_of(kind: str, failed: bool) -> Set[str]:
    """Every attribute a span of *kind* has in the demo session, without content."""
    common = {"gen_ai.operation.name", "gen_ai.conversation.id", "session.id", "openinference.span.kind"}
    call = common | {
        "session_jsonl.execution.id",
        "session_jsonl.execution.attempt",
        "session_jsonl.turn_index",
    }
    usage = {"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.response.finish_reasons"}
    usage |= {"llm.token_count.prompt", "llm.token_count.completion", "llm.token_count.total"}
    error = {"error.type"} if failed else set()
    return {
        "run": common | {"session_jsonl.end_reason"},
        "model": call | {"gen_ai.request.max_tokens"} | (error or usage),
        "tool": call | {"gen_ai.tool.type", "gen_ai.tool.name", "tool.name", "gen_ai.tool.call.id"} | error,
        "compact": call,
    }[kind]


def check_model_span(span: Any, data: Dict[str, Dict[str, Any]], spans: List[Any]) -> None:
    """A model call's attempt: a chat span with the usage of its end, or its error; an
    attempt after the first a sibling of the one before, linked to it."""
    a, end = attributes(span), data["model_exec_end"]
    assert set(a) == keys_of("model", "error" in end)
    assert span.name == "chat" and span.kind == 3 and a["openinference.span.kind"] == "LLM"
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.max_tokens"] == 1024
    if "error" in end:
        assert span.status.code == 2 and span.status.message == end["error"]["message"]
        assert a["error.type"] == end["error"]["type"] == "RateLimited"
    else:
        usage, stop = end["message"]["value"]["usage"], end["message"]["value"]["stop_reason"]
        assert a["gen_ai.usage.input_tokens"] == a["llm.token_count.prompt"] == usage["input"]
        assert a["gen_ai.usage.output_tokens"] == a["llm.token_count.completion"] == usage["output"]
        assert a["llm.token_count.total"] == usage["total_tokens"]
        assert a["gen_ai.response.finish_reasons"] == [{"toolUse": "tool_call"}.get(stop, stop)]
        assert span.status.code == 0
    execution_id, attempt = execution_of(span)
    if attempt > 1:
        (before,) = [
            s for s in spans if s.trace_id == span.trace_id and execution_of(s) == (execution_id, attempt - 1)
        ]
        assert [(link.trace_id, link.span_id) for link in span.links] == [(span.trace_id, before.span_id)]
        assert before.parent_span_id == span.parent_span_id  # siblings
    else:
        assert not span.links


def check_tool_span(span: Any, data: Dict[str, Dict[str, Any]]) -> None:
    """A tool call: an execute_tool span with its tool's name and call id, failed as it did."""
    a, end = attributes(span), data["tool_exec_end"]
    failed = end.get("error")
    assert set(a) == keys_of("tool", failed is not None)
    assert (
        span.name == f"execute_tool {end['tool']}"
        and span.kind == 1
        and a["openinference.span.kind"] == "TOOL"
    )
    assert a["gen_ai.operation.name"] == "execute_tool" and a["gen_ai.tool.type"] == "function"
    assert (
        a["gen_ai.tool.name"] == a["tool.name"] == end["tool"] and a["gen_ai.tool.call.id"] == end["tool_id"]
    )
    assert (span.status.code, a.get("error.type")) == ((2, failed["type"]) if failed else (0, None))


def test_the_encoder_writes_what_protobuf_writes_and_json_says_the_same(demo: Path, tmp_path: Path) -> None:
    path = hostile_file(tmp_path / "hostile.jsonl")
    for source in (demo, path):
        for content in (False, True):
            (body,) = session_export.otlp_requests([source], content=content)
            (text,) = session_export.otlp_requests([source], content=content, protocol="http/json")
            message = decode(body, "http/protobuf")
            assert message.SerializeToString() == body
            assert decode(text, "http/json") == message


def test_content_is_opt_in_resolved_without_credentials_and_cut(demo: Path, tmp_path: Path) -> None:
    spans, _ = sent(demo, "http/protobuf", "--content")
    chats = [attributes(s) for s in spans if s.name == "chat"]
    first = json.loads(chats[0]["gen_ai.input.messages"])
    question = {"type": "text", "content": "How long is session.py, and what is beside it?"}
    assert first == [{"role": "user", "parts": [question]}]
    assert [tool["name"] for tool in json.loads(chats[0]["gen_ai.tool.definitions"])] == [
        "list_files",
        "count_lines",
    ]
    third = json.loads(chats[2]["gen_ai.input.messages"])
    assert [m["role"] for m in third] == ["user", "assistant", "tool", "tool"]
    assert third[2]["parts"][0]["type"] == "tool_call_response" and third[2]["parts"][0]["id"] == "call-1"
    failed = {"type": "tool_call_response", "id": "call-2", "response": "error: No such file or directory"}
    assert third[3]["parts"] == [failed]
    assert json.loads(chats[1]["gen_ai.output.messages"])[0]["finish_reason"] == "tool_call"
    tools = [attributes(s) for s in spans if s.name.startswith("execute_tool")]
    assert json.loads(tools[0]["gen_ai.tool.call.arguments"]) == {"folder": "."}
    (compact,) = [attributes(s) for s in spans if s.name == "compact"]
    assert json.loads(compact["session_jsonl.compaction"]) == {"dropped_messages": 4, "kept_messages": 4}
    path = tmp_path / "secret.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        system = Message("system", [session.text_block("Be brief.")], timestamp=T0)
        older, newer = (Message("user", [session.text_block(c * 10000)], timestamp=T0) for c in "on")
        model = Execution("m1", "model")
        run.record(Event("model_exec_start", execution=model))
        run.record(Event("model_request", execution=model, request=ModelRequest([system, older, newer])))
        run.record(
            Event("model_exec_end", execution=model, message=Message("assistant", [session.text_block("ok")]))
        )
        tool = Execution("t1", "tool", parent_id="m1")
        run.record(
            Event("tool_exec_start", execution=tool, tool="call", args={"url": "u", "api_key": "sk-1"})
        )
        run.record(
            Event(
                "tool_exec_end", execution=tool, tool="call", result={"Authorization": "B", "x": "x" * 40000}
            )
        )
    spans, _ = sent(path, "http/json", "--content")
    chat = attributes(next(s for s in spans if s.name == "chat"))
    assert json.loads(chat["gen_ai.system_instructions"]) == [{"type": "text", "content": "Be brief."}]
    latest = json.loads(chat["gen_ai.input.messages"])  # the latest messages that fit
    assert latest == [{"role": "user", "parts": [{"type": "text", "content": "n" * 10000}]}]
    assert chat["session_jsonl.input_messages_left_out"] == 1
    tool_attributes = attributes(next(s for s in spans if s.name == "execute_tool call"))
    assert json.loads(tool_attributes["gen_ai.tool.call.arguments"]) == {"url": "u"}
    cut = tool_attributes["gen_ai.tool.call.result"]
    assert cut == '{"x": "' + "x" * (16384 - 7) + "... [23625 more characters cut]"


def test_content_is_the_same_from_either_version_and_a_long_message_is_cut(tmp_path: Path) -> None:
    def contents(path: Path) -> List[Dict[str, Any]]:
        (body,) = session_export.otlp_requests([path], content=True)
        spans = spans_of(decode_proto(body))
        return [{k: v for k, v in attributes(s).items() if k.startswith(CONTENT)} for s in spans]

    made = [
        contents(busy_file(tmp_path / f"v{version}.jsonl", 12, seed=5, version=version)) for version in (1, 2)
    ]
    assert made[0] == made[1] and sum(len(found) for found in made[0]) > 40
    path = tmp_path / "long.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        model = Execution("m1", "model")
        run.record(Event("model_exec_start", execution=model))
        long = Message("user", [session.text_block("z" * 40000)], timestamp=T0)
        run.record(Event("model_request", execution=model, request=ModelRequest([long])))
    whole = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "z" * 40000}]}])
    (chat,) = [found for found in contents(path) if found]
    assert chat == {"gen_ai.input.messages": f"{whole[:16384]}... [{len(whole) - 16384} more characters cut]"}


def test_content_of_a_long_version_2_session_costs_what_it_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each request's content takes its latest messages that fit: the messages looked at are
    about those it shows, not every message of every request (quadratic in the turns)."""
    looked_at = [0]

    class Counted(Dict[int, Any]):
        def __getitem__(self, seq: int) -> Any:
            looked_at[0] += 1
            return super().__getitem__(seq)

    made = session_export._Contents.__init__

    def counting(contents: Any) -> None:
        made(contents)
        contents._messages = Counted()

    monkeypatch.setattr(session_export._Contents, "__init__", counting)
    path = tmp_path / "long.jsonl"
    context = [Message("system", [session.text_block("Be brief.")], timestamp=T0)]
    with session.create(path) as s, s.begin_run() as run:
        for n in range(100):
            context.append(Message("user", [session.text_block(f"{n} " + "z" * 4000)], timestamp=T0))
            model = Execution(f"m{n}", "model")
            run.record(Event("model_exec_start", execution=model))
            run.record(Event("model_request", execution=model, request=ModelRequest(list(context))))
    (body,) = session_export.otlp_requests([path], content=True)
    chats = [attributes(span).get("gen_ai.input.messages") for span in spans_of(decode_proto(body))]
    assert sum(1 for chat in chats if chat and f'"99 {"z" * 10}' in chat) == 1  # the latest, shown
    fit = 16384 // 4000  # whole messages of the latest that fit, then one more looked at
    assert looked_at[0] <= 100 * (fit + 2)  # and the system message
    assert 8 * looked_at[0] < 100 * 101 // 2  # every message of every request: many times more


CONTENT: Tuple[str, ...] = ("gen_ai.input", "gen_ai.output", "gen_ai.system", "gen_ai.tool.definitions")
CONTENT += ("gen_ai.tool.call.", "session_jsonl.input")


def hostile_file(path: Path) -> Path:
    """A session whose tool name, arguments and messages hold a lone surrogate and controls."""
    name = "ls\udc80\x1b[2J\x00\u202e"
    with session.create(path) as s, s.begin_run() as run:
        model = Execution("m\udfff", "model")
        message = Message("user", [session.text_block(name)], timestamp=T0)
        run.record(Event("model_exec_start", execution=model))
        run.record(Event("model_request", execution=model, request=ModelRequest([message])))
        run.record(Event("model_exec_end", execution=model, message=message))
        tool = Execution("t1", "tool", parent_id="m\udfff")
        run.record(Event("tool_exec_start", execution=tool, tool=name, tool_id=name, args={name: name}))
        run.record(Event("tool_exec_end", execution=tool, tool=name, tool_id=name, result=name))
    return path


def test_hostile_strings_are_escaped_never_a_crash(tmp_path: Path) -> None:
    spans, _ = sent(hostile_file(tmp_path / "h.jsonl"), "http/protobuf", "--content")
    tool = next(s for s in spans if s.name.startswith("execute_tool"))
    escaped = "ls\\udc80\x1b[2J\x00\u202e"
    assert tool.name == f"execute_tool {escaped}" and attributes(tool)["gen_ai.tool.call.id"] == escaped
    assert (
        json.loads(attributes(tool)["gen_ai.tool.call.result"]) == "ls\udc80\x1b[2J\x00\u202e"
    )  # JSON: equal
    assert tool.parent_span_id == next(s for s in spans if s.name == "chat").span_id


VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([1 << 63, -(1 << 63) - 1])
    | st.floats()
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
KEYS = ["execution", "message", "partial_message", "request", "messages", "tools", "error", "tool", "tool_id"]
KEYS += ["args", "result", "is_error", "summary", "compaction", "turn_index", "retry"]


@hypothesis.settings(max_examples=sweep(150, 50), deadline=None, derandomize=True, database=None)
@hypothesis.given(st.data())
def test_whatever_a_file_holds_is_exported_or_left_out_never_a_crash(demo: Path, data: Any) -> None:
    """A record's data, or its execution's, replaced by any JSON value: the reader accepts the
    file (then every encoding holds what protobuf reads back) or refuses it (then it is left
    out), and the export never fails otherwise."""
    lines = demo.read_bytes().splitlines(keepends=True)
    row = data.draw(st.integers(2, len(lines) - 1))
    record = json.loads(lines[row])
    value = data.draw(VALUES)
    if "execution" in record["data"] and data.draw(st.booleans()):
        record["data"]["execution"][data.draw(st.sampled_from(["id", "kind", "parent_id", "attempt"]))] = (
            value
        )
    else:
        record["data"][data.draw(st.sampled_from(KEYS))] = value
    lines[row] = json.dumps(record).encode() + b"\n"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "changed.jsonl"
        path.write_bytes(b"".join(lines))
        entries: List[Dict[str, Any]] = []
        bodies = list(session_export.otlp_requests([path], content=True, entries=entries))
        texts = list(session_export.otlp_requests([path], protocol="http/json", content=True))
    hypothesis.event("accepted" if entries[0]["ok"] else "refused")
    assert len(bodies) == len(texts) == (1 if entries[0]["ok"] else 0)
    for body, text in zip(bodies, texts):
        message = decode(body, "http/protobuf")
        assert message.SerializeToString() == body and decode(text, "http/json") == message
        assert len(spans_of(message)) == entries[0]["spans"]


@pytest.mark.parametrize("time", ["0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "9999-12-31T23:59:59Z"])
def test_a_time_otlp_cannot_hold_is_as_one_unread(demo: Path, tmp_path: Path, time: str) -> None:
    """OTLP's times are nanoseconds since 1970 in 64 bits: a run_start's time before 1970 or
    after 2554 is as a time that cannot be read (the latest before it), never a crash."""
    lines = demo.read_bytes().splitlines(keepends=True)
    record = json.loads(lines[1])
    assert record["type"] == "run_start"
    record["time"] = time
    lines[1] = json.dumps(record).encode() + b"\n"
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(lines))
    message = decode(b"".join(session_export.otlp_requests([path])), "http/protobuf")
    assert (
        decode(b"".join(session_export.otlp_requests([path], protocol="http/json")), "http/json") == message
    )
    first = nanos(json.loads(lines[0])["time"])  # session_start's
    run = next(span for span in spans_of(message) if not span.parent_span_id)
    assert run.start_time_unix_nano == first and run.end_time_unix_nano > first


def test_ids_are_the_same_on_every_export_and_a_salt_changes_them(demo: Path) -> None:
    once, _ = sent(demo)
    again, _ = sent(demo, "http/json")
    salted, _ = sent(demo, "http/protobuf", "--salt", "project-2")
    ids = [(s.trace_id, s.span_id, s.parent_span_id) for s in once]
    assert ids == [(s.trace_id, s.span_id, s.parent_span_id) for s in again] and len(set(ids)) == 13
    assert not {s.span_id for s in salted} & {s.span_id for s in once}
    assert not {s.trace_id for s in salted} & {s.trace_id for s in once}


# ---------------------------------------------------------------------------- files and options


def test_unfinished_calls_and_runs_are_error_spans_and_invalid_files_left_out(
    demo: Path, tmp_path: Path
) -> None:
    lines = demo.read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b'"tool_exec_start"' in line) + 1
    unfinished = tmp_path / "unfinished.jsonl"
    unfinished.write_bytes(b"".join(lines[:cut]) + b'{"session_id":"torn')  # and a torn tail
    invalid = tmp_path / "invalid.jsonl"
    invalid.write_bytes(b"".join(lines[:5]) + b"{}\n")
    with Receiver() as receiver:
        done = run_cli("otlp", str(unfinished), str(invalid), "--endpoint", receiver.url)
    assert done.returncode == 1 and "invalid.jsonl" in done.stderr and "(left out)" in done.stderr
    assert "4 spans of 1 files in 1 requests (1 left out)" in done.stdout
    spans = spans_of(decode(receiver.got[0][2], "http/protobuf"))
    status = {s.name: (s.status.code, s.status.message, attributes(s).get("error.type")) for s in spans}
    no = "unfinished: the file holds no"
    assert status["invoke_agent"] == (2, f"{no} run_close for it", "unfinished")
    assert status["execute_tool list_files"] == (2, f"{no} tool_exec_end for it", "unfinished")
    assert [s.status.code for s in spans if s.name == "chat"] == [2, 0]  # rate limited, then answered


def test_output_writes_the_requests_instead(demo: Path, tmp_path: Path) -> None:
    spans, _ = sent(demo)
    for protocol, name in (("http/protobuf", "out.pb"), ("http/json", "out.jsonl")):
        done = run_cli("otlp", str(demo), "--output", str(tmp_path / name), "--protocol", protocol)
        assert done.returncode == 0 and done.stdout.startswith(f"{tmp_path / name}: 13 spans"), done.stderr
        written = (tmp_path / name).read_bytes()
        bodies = [written] if protocol == "http/protobuf" else written.splitlines()
        assert spans_of(*(decode(body, protocol) for body in bodies)) == spans
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl", "out.pb"]  # no temporary file left
    if hasattr(os, "mkfifo"):  # a pipe (as /dev/stdout can be) is written into, not replaced
        os.mkfifo(tmp_path / "pipe")
        reader = subprocess.Popen(["cat", str(tmp_path / "pipe")], stdout=subprocess.PIPE)
        done = run_cli("otlp", str(demo), "--output", str(tmp_path / "pipe"))
        assert (
            done.returncode == 0 and reader.communicate(timeout=60)[0] == (tmp_path / "out.pb").read_bytes()
        )
        assert stat.S_ISFIFO(os.stat(tmp_path / "pipe").st_mode)
    done = run_cli("otlp", str(demo), "--output", str(tmp_path / "missing" / "out.pb"))
    assert done.returncode == 74 and "cannot write the output" in done.stderr
    assert run_cli("otlp", str(demo)).returncode == 2  # neither an endpoint nor --output
    done = run_cli("otlp", str(tmp_path), "--output", str(tmp_path / "out.jsonl"), "--protocol", "http/json")
    assert done.returncode == 2 and "the export's own output" in done.stderr, done.stderr
    for url in ("localhost:4318/v1/traces", "ftp://127.0.0.1/v1/traces"):
        done = run_cli("otlp", str(demo), "--endpoint", url)
        assert done.returncode == 2 and "must be an http:// or https:// URL" in done.stderr, done.stderr


def test_endpoint_headers_and_resource_from_the_environment(demo: Path) -> None:
    with Receiver() as receiver:
        done = otlp_with_environment(
            demo,
            "--header",
            "x-team=2",
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url[: -len("/v1/traces")] + "/",
            OTEL_EXPORTER_OTLP_HEADERS="api-key=a%20b,x-team=1",
            OTEL_SERVICE_NAME="agents",
            OTEL_RESOURCE_ATTRIBUTES="openinference.project.name=second%2C,service.name=x",
            OTEL_EXPORTER_OTLP_PROTOCOL="http/json",
        )
    assert done.returncode == 0, done.stderr
    path, headers, body, _ = receiver.got[0]
    assert path == "/v1/traces" and headers["api-key"] == "a b" and headers["x-team"] == "2"
    assert headers["content-type"] == "application/json"
    (resource,) = decode(body, "http/json").resource_spans
    assert attributes(resource.resource) == {
        "service.name": "agents",
        "openinference.project.name": "second,",
    }


def test_a_protocol_the_command_does_not_send_is_a_usage_error(demo: Path) -> None:
    out = str(demo.parent / "out.jsonl")
    grpc = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    done = otlp_with_environment(demo, "--output", out, **grpc)
    assert done.returncode == 2 and "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: this command sends" in done.stderr
    done = otlp_with_environment(demo, "--protocol", "http/json", "--output", out, **grpc)
    assert done.returncode == 0, done.stderr  # --protocol wins
    os.unlink(out)


def otlp_with_environment(path: Path, *args: str, **environment: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HERE / "session.py"), "otlp", str(path), *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, **environment),
        timeout=60,
    )


def test_requests_are_batched_within_the_size_asked(demo: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.jsonl"
    shutil.copyfile(demo, copy)
    bodies = list(session_export.otlp_requests([demo, copy], max_request_bytes=2000))
    spans = spans_of(*(decode(body, "http/protobuf") for body in bodies))
    assert (
        len(bodies) > 2 and len(spans) == 26 and len({s.span_id for s in spans}) == 13
    )  # the same ids twice
    assert all(len(body) < 2000 + 200 for body in bodies)  # and the envelope


# ---------------------------------------------------------------------------- faults


def fails(demo: Path, url: str, *flags: str) -> str:
    done = run_cli("otlp", str(demo), "--endpoint", url, *flags)
    assert done.returncode == 74 and f"not sent: {url}: " in done.stderr, done.stderr
    return done.stderr


def test_an_endpoint_that_is_down_or_says_no_is_an_error_naming_it(demo: Path) -> None:
    with Receiver() as receiver:
        url = receiver.url
    assert "refused" in fails(demo, url).lower()
    for status in (413, 500, 400):
        with Receiver(((status, {}),)) as receiver:
            assert f"HTTP {status} " in fails(demo, receiver.url)
        assert len(receiver.got) == 1  # not tried again
    with Receiver(((302, {"Location": "/elsewhere"}),)) as receiver:  # urllib would GET it
        assert "HTTP 302 Found (to /elsewhere)" in fails(demo, receiver.url)
    assert len(receiver.got) == 1


def test_429_and_503_are_tried_again_after_retry_after(demo: Path) -> None:
    with Receiver(((429, {"Retry-After": "1"}), (503, {"Retry-After": "0"}))) as receiver:
        done = run_cli("otlp", str(demo), "--endpoint", receiver.url)
    assert done.returncode == 0, done.stderr
    assert len(receiver.got) == 3 and receiver.got[1][2] == receiver.got[0][2]
    assert receiver.got[1][3] - receiver.got[0][3] >= 1.0  # waited as the answer said
    with Receiver(((503, {"Retry-After": "0"}),) * 5) as receiver:
        assert "HTTP 503 " in fails(demo, receiver.url)
    assert len(receiver.got) == 5
    with Receiver(((503, {"Retry-After": "nan"}), (503, {"Retry-After": "-inf"}))) as receiver:
        done = run_cli("otlp", str(demo), "--endpoint", receiver.url)  # NaN: the usual wait
    assert (done.returncode, done.stderr, len(receiver.got)) == (0, "", 3)


def test_spans_a_backend_rejects_are_reported(demo: Path) -> None:
    proto()  # or a skip
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    answer = trace_service_pb2.ExportTraceServiceResponse()
    answer.partial_success.rejected_spans = 3
    answer.partial_success.error_message = "too \x1b[31mold"
    protobuf, json_type = {"Content-Type": "application/x-protobuf"}, {"Content-Type": "application/json"}
    accepted = (200, json_type, b'{"partialSuccess":{}}')
    cases = [
        ((200, protobuf, answer.SerializeToString()), "rejected 3 spans: too \\x1b[31mold"),  # escaped
        ((200, json_type, b'{"partialSuccess":{"rejectedSpans":"2"}}'), "rejected 2 spans"),
    ]
    for reply, said in cases:
        with Receiver((reply,)) as receiver:
            done = run_cli("otlp", str(demo), "--endpoint", receiver.url)
        assert done.returncode == 1 and f"{receiver.url}: the backend {said}\n" in done.stderr, done.stderr
    with Receiver((accepted,)) as receiver:
        assert run_cli("otlp", str(demo), "--endpoint", receiver.url).returncode == 0


def test_a_slow_receiver_times_out(demo: Path) -> None:
    with Receiver(delay=3.0) as receiver:
        assert "timed out" in fails(demo, receiver.url, "--timeout", "0.5")


@contextlib.contextmanager
def tls_receiver(folder: Path) -> Iterator[str]:
    """An HTTPS receiver with a self-signed certificate: its URL."""
    need("openssl", "the bad certificate is made with the openssl command")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    with Receiver() as receiver:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        receiver.server.socket = context.wrap_socket(receiver.server.socket, server_side=True)
        yield receiver.url.replace("http://", "https://")


def test_a_bad_certificate_is_an_error(demo: Path, tmp_path: Path) -> None:
    with tls_receiver(tmp_path) as url:
        assert "CERTIFICATE_VERIFY_FAILED" in fails(demo, url)


# ---------------------------------------------------------------------------- a real Phoenix


@pytest.mark.phoenix
def test_phoenix_stores_the_demo_session(demo: Path, tmp_path: Path) -> None:
    need("phoenix", "tox -e phoenix installs arize-phoenix")
    port, grpc = free_port(), free_port()
    env = dict(
        os.environ, PHOENIX_WORKING_DIR=str(tmp_path), PHOENIX_PORT=str(port), PHOENIX_HOST="127.0.0.1"
    )
    env.update(PHOENIX_GRPC_PORT=str(grpc), PHOENIX_TELEMETRY_ENABLED="false")
    serve = [sys.executable, "-c", "from phoenix.server.main import main; main()", "serve"]  # fmt: skip
    with (tmp_path / "phoenix.log").open("wb") as log:
        server = subprocess.Popen(serve, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_for(f"{base}/healthz", server, tmp_path / "phoenix.log")
            for _ in range(2):  # the same ids again are not stored again
                done = run_cli("otlp", str(demo), "--endpoint", f"{base}/v1/traces")
                assert done.returncode == 0, done.stderr
            project = {"OTEL_RESOURCE_ATTRIBUTES": "openinference.project.name=second"}
            salted = otlp_with_environment(demo, "--endpoint", f"{base}/v1/traces", "--salt", "2", **project)
            assert salted.returncode == 0, salted.stderr
            projects = phoenix_spans(base, 26)  # taken in order: the repeated spans were before these
        finally:
            server.terminate()
            server.wait(30)
    assert {name: len(spans) for name, spans in projects.items()} == {"default": 13, "second": 13}
    spans = projects["default"]
    kinds = sorted(span["spanKind"] for span in spans)
    assert kinds == ["agent"] * 2 + ["chain"] + ["llm"] * 6 + ["tool"] * 4, kinds
    by_id = {span["context"]["spanId"]: span for span in spans}
    for span in spans:
        parent = span["parentId"]
        assert (parent is None) == (span["spanKind"] == "agent")
        if span["spanKind"] == "tool":
            assert by_id[parent]["spanKind"] == "llm"
    ends = [r.data for r in session.iter_records(demo) if r.type == "model_exec_end"]
    usage = [end["message"]["value"]["usage"] for end in ends if "message" in end]
    answered = [s for s in spans if s["spanKind"] == "llm" and s["statusCode"] != "ERROR"]
    assert sorted((s["tokenCountPrompt"], s["tokenCountCompletion"]) for s in answered) == sorted(
        (u["input"], u["output"]) for u in usage
    )
    assert sum(1 for s in spans if s["statusCode"] == "ERROR") == 2  # the rate-limited call, the failed tool


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    import urllib.request

    for _ in range(600):
        assert server.poll() is None, log.read_text(errors="replace")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2):
            return
        time.sleep(0.5)
    raise AssertionError(f"Phoenix did not answer {url}: {log.read_text(errors='replace')[-2000:]}")


def phoenix_spans(base: str, count: int) -> Dict[str, List[Dict[str, Any]]]:
    """The spans Phoenix stored, by project, from its GraphQL API, once *count* arrived."""
    import urllib.request

    query = """{ projects { edges { node { name spans(first: 1000) { edges { node {
        name spanKind statusCode parentId tokenCountPrompt tokenCountCompletion context { spanId traceId }
    } } } } } } }"""
    found: Dict[str, List[Dict[str, Any]]] = {}
    for _ in range(60):
        request = urllib.request.Request(
            f"{base}/graphql", json.dumps({"query": query}).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            result = json.loads(answer.read())
        assert "errors" not in result, result
        found = {
            project["node"]["name"]: [edge["node"] for edge in project["node"]["spans"]["edges"]]
            for project in result["data"]["projects"]["edges"]
        }
        if sum(map(len, found.values())) >= count:
            return found
        time.sleep(0.5)
    raise AssertionError(f"Phoenix holds fewer spans than {count}: {found}")
