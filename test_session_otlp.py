"""Tests for ``otlp`` (session_export.py): what a receiver on 127.0.0.1 gets, decoded with
opentelemetry-proto, for the demo session and made ones, in protobuf and JSON; the encoder
byte for byte against protobuf's; the faults of sending; and, with -m phoenix, a real Phoenix."""

from __future__ import annotations

import base64
import contextlib
import gc
import gzip
import http.server
import json
import os
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

import hypothesis
import pytest
from hypothesis import strategies as st

import session
import session_export
from session import Event, Execution, Message, ModelRequest
from test_session import HERE, T0, busy_file, long_run_lines, need, run_cli, sweep, write_lines

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
    arrival time (header names in lowercase).  *delay*: seconds to wait before answering.  An
    error in a handler fails the test (it is not printed), but that of answering a client that
    left, when *client_leaves*."""

    def __init__(
        self, answers: Tuple[Tuple[Any, ...], ...] = (), delay: float = 0.0, client_leaves: bool = False
    ) -> None:
        self.answers = list(answers)
        self.got: List[Tuple[str, Dict[str, str], bytes, float]] = []
        self.client_leaves = client_leaves  # before it is answered: writing the answer fails
        self.errors: List[Optional[BaseException]] = []
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

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = False  # server_close waits for them: none outlives its test

            def handle_error(self, request: Any, client_address: Any) -> None:
                receiver.errors.append(sys.exc_info()[1])  # checked at the end, not printed

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()  # and waits for the handlers
        left = (BrokenPipeError, ConnectionResetError) if self.client_leaves else ()
        assert all(isinstance(error, left) for error in self.errors), self.errors


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
    (compaction,) = [r.seq for r in session.iter_records(demo) if r.type == "context_compacted"]
    for span in spans:
        a = attributes(span)
        assert a["gen_ai.conversation.id"] == a["session.id"] == runs_in_file[0].session_id
        if span in runs:
            assert set(a) == keys_of("run", False) and a["openinference.span.kind"] == "AGENT"
            assert span.status.code == 1  # OK: closed without an error
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
            assert a.get("gen_ai.conversation.compacted") is (True if records[0].seq > compaction else None)
        elif execution["kind"] == "tool":
            check_tool_span(span, data)
            attempts = [key[2] for key in calls if key[:2] == (run_id, execution["parent_id"])]
            assert parent.name == "chat scripted-model" and execution_of(parent) == (
                execution["parent_id"],
                max(attempts),
            )
            assert parent.status.code == 1  # the attempt that asked for it
        else:
            assert execution["kind"] == "compact" and span.name == "compact" and parent.name == "invoke_agent"
            assert set(a) == keys_of("compact", False)  # and no compaction: it may summarize, it is content
            assert span.status.code == 1


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
    usage |= {"gen_ai.provider.name", "llm.provider", "gen_ai.request.model", "gen_ai.response.model"}
    usage |= {
        "llm.model_name",
        "llm.cost.prompt",
        "llm.cost.completion",
        "llm.cost.total",
        "gen_ai.usage.cost",
    }
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
    assert set(a) - {"gen_ai.conversation.compacted"} == keys_of("model", "error" in end)
    assert span.kind == 3 and a["openinference.span.kind"] == "LLM"
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.max_tokens"] == 1024
    if "error" in end:
        assert span.name == "chat"  # a failed attempt's usage names no model
        assert span.status.code == 2 and span.status.message == end["error"]["message"]
        assert a["error.type"] == end["error"]["type"] == "RateLimited"
    else:
        usage, stop = end["message"]["value"]["usage"], end["message"]["value"]["stop_reason"]
        assert span.name == "chat scripted-model" and a["llm.model_name"] == usage["model"]
        assert a["gen_ai.request.model"] == a["gen_ai.response.model"] == usage["model"]
        assert a["gen_ai.provider.name"] == a["llm.provider"] == usage["provider"] == "demo"
        assert a["gen_ai.usage.input_tokens"] == a["llm.token_count.prompt"] == usage["input"]
        assert a["gen_ai.usage.output_tokens"] == a["llm.token_count.completion"] == usage["output"]
        assert a["llm.token_count.total"] == usage["total_tokens"]
        cost = usage["cost"]
        assert (a["llm.cost.prompt"], a["llm.cost.completion"]) == (cost["input"], cost["output"])
        assert a["llm.cost.total"] == a["gen_ai.usage.cost"] == cost["total"]
        assert a["gen_ai.response.finish_reasons"] == [{"toolUse": "tool_call"}.get(stop, stop)]
        assert span.status.code == 1
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
    assert (span.status.code, a.get("error.type")) == ((2, failed["type"]) if failed else (1, None))


def test_usage_counts_input_tokens_with_the_cached_ones_as_the_conventions_do(tmp_path: Path) -> None:
    """Usage counted the Anthropic way (total = input + output + cache read + cache write) has
    its cached tokens added to the input; counted the OpenAI way, or without a total, it is
    sent as recorded.  The calls after a compaction say their context was compacted."""
    path = tmp_path / "usage.jsonl"
    usages: List[session.Usage] = [
        {"input": 3, "output": 10, "cache_read": 5758, "cache_write": 6174, "total_tokens": 11945},
        {"input": 2006, "output": 300, "cache_read": 1920, "total_tokens": 2306},
        {"input": 50, "output": 5, "cache_read": 20},
        {"input": 7, "output": 1, "total_tokens": 8},
    ]
    with session.create(path) as s, s.begin_run() as run:
        for n, usage in enumerate(usages):
            if n == 3:
                compact = Execution("c", "compact")
                run.record(Event("context_prepare_start", execution=compact, context_operation="compact"))
                run.record(Event("context_compacted", execution=compact, compaction={"kept": 2}))
                run.record(Event("context_prepare_end", execution=compact, context_operation="compact"))
            model = Execution(f"m{n}", "model")
            answer = Message("assistant", [session.text_block("ok")], "stop", usage, timestamp=T0)
            run.record(Event("model_exec_start", execution=model))
            run.record(Event("model_exec_end", execution=model, message=answer))
    (body,) = session_export.otlp_requests([path])
    chats = [attributes(s) for s in spans_of(decode_proto(body)) if s.name == "chat"]
    assert [(a["gen_ai.usage.input_tokens"], a["llm.token_count.prompt"]) for a in chats] == [
        (11935, 11935),
        (2006, 2006),
        (50, 50),
        (7, 7),
    ]
    first = chats[0]
    assert first["gen_ai.usage.cache_write.input_tokens"] == 6174
    assert first["gen_ai.usage.cache_creation.input_tokens"] == 6174  # the name backends read today
    assert first["llm.token_count.prompt_details.cache_write"] == 6174
    assert first["llm.token_count.total"] == 11945 == 11935 + first["gen_ai.usage.output_tokens"]
    assert [a.get("gen_ai.conversation.compacted") for a in chats] == [None, None, None, True]
    assert all(a["openinference.span.kind"] == "LLM" for a in chats)


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
    chats = [attributes(s) for s in spans if s.name.startswith("chat")]
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


def test_a_runs_span_carries_its_input_and_final_answer_with_content(demo: Path) -> None:
    spans, _ = sent(demo, "http/protobuf", "--content")
    runs = [attributes(s) for s in spans if s.name == "invoke_agent"]
    answers = [
        r.data["message"]["value"]
        for r in session.iter_records(demo)
        if r.type == "model_exec_end" and "message" in r.data
    ]
    finals = [a for a in answers if a["stop_reason"] == "stop"]
    questions = ["How long is session.py, and what is beside it?", "And how long are the tests?"]
    assert [r["input.value"] for r in runs] == questions  # the second run's context holds the first's
    assert [json.loads(r["gen_ai.input.messages"]) for r in runs] == [
        [{"role": "user", "parts": [{"type": "text", "content": q}]}] for q in questions
    ]
    assert [r["output.value"] for r in runs] == [a["content"][0]["text"] for a in finals]
    assert [json.loads(r["gen_ai.output.messages"]) for r in runs] == [
        [
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": a["content"][0]["text"]}],
                "finish_reason": "stop",
            }
        ]
        for a in finals
    ]
    assert {r["input.mime_type"] for r in runs} == {r["output.mime_type"] for r in runs} == {"text/plain"}


def reply_value(message: Dict[str, Any]) -> Optional[Tuple[str, str]]:
    """What a chat span's ``output.value`` and its MIME type are for a recorded reply: its
    text, or with tool calls a JSON object of its text and calls."""
    text = "\n".join(b["text"] for b in message["content"] if b["type"] == "text")
    calls = [b["tool_call"] for b in message["content"] if b["type"] == "toolCall"]
    if not calls:
        return text, "text/plain"
    reply: Dict[str, Any] = {"content": text} if text else {}
    reply["tool_calls"] = [{"id": c["id"], "name": c["name"], "arguments": c["args"]} for c in calls]
    return json.dumps(reply, ensure_ascii=False), "application/json"


def recorded_replies(path: Path) -> List[Optional[Tuple[str, str]]]:
    """Each model call's ``reply_value``, in the file's order: ``None`` for a call that failed."""
    ends = [r.data for r in session.iter_records(path) if r.type == "model_exec_end"]
    return [None if "error" in end else reply_value(end["message"]["value"]) for end in ends]


def test_a_chat_span_carries_its_request_and_reply_as_input_and_output_values(
    demo: Path, tmp_path: Path
) -> None:
    """With content, each chat span's input.value is its input messages (JSON), its
    output.value what the call answered; a failed call answered nothing.  Without
    content, neither is sent (the keys the demo test checks)."""
    spans, _ = sent(demo, "http/protobuf", "--content")
    chats = [attributes(s) for s in spans if s.name.startswith("chat")]
    assert [(a["input.value"], a["input.mime_type"]) for a in chats] == [
        (a["gen_ai.input.messages"], "application/json") for a in chats
    ]
    found = [(a["output.value"], a["output.mime_type"]) if "output.value" in a else None for a in chats]
    assert found == recorded_replies(demo)
    assert found[0] is None and "output.mime_type" not in chats[0]  # rate-limited
    reply = json.loads(chats[1]["output.value"])  # text and two tool calls
    assert reply["content"] == "Let me look around." and len(reply["tool_calls"]) == 2
    path = tmp_path / "long-reply.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        model = Execution("m1", "model")
        call = session.tool_call_block("c1", "write", {"text": "w" * 20000})
        run.record(Event("model_exec_start", execution=model))
        run.record(Event("model_exec_end", execution=model, message=Message("assistant", [call], "toolUse")))
    (body,) = session_export.otlp_requests([path], content=True)
    (chat,) = [attributes(s) for s in spans_of(decode_proto(body)) if s.name == "chat"]
    whole = json.dumps({"tool_calls": [{"id": "c1", "name": "write", "arguments": {"text": "w" * 20000}}]})
    assert chat["output.value"] == f"{whole[:16384]}... [{len(whole) - 16384} more characters cut]"
    assert chat["output.mime_type"] == "text/plain"  # JSON no more, once cut


def test_the_recorded_cost_goes_on_each_chat_span_none_where_none_was(tmp_path: Path) -> None:
    path = tmp_path / "costs.jsonl"
    costs: List[Any] = [
        {"input": 0.25, "output": 0.5, "cache_read": 0.125, "cache_write": 1.0, "total": 1.875},
        {"input": 0.1, "output": 0.2},  # no total: the sum of its parts
        None,  # none recorded
        {"total": 3.0},
        {"input": 1e308, "output": 1e308},  # a sum beyond a double: no total
    ]
    with session.create(path) as s, s.begin_run() as run:
        for n, cost in enumerate(costs):
            model = Execution(f"m{n}", "model")
            usage: session.Usage = {"input": 10, "output": 5, "total_tokens": 15, "model": "m"}
            if cost is not None:
                usage["cost"] = cost
            answer = Message("assistant", [session.text_block("ok")], "stop", usage, timestamp=T0)
            run.record(Event("model_exec_start", execution=model))
            run.record(Event("model_exec_end", execution=model, message=answer))
    for protocol in ("http/protobuf", "http/json"):
        (body,) = session_export.otlp_requests([path], protocol=protocol)
        request = decode(body, protocol)
        if protocol == "http/protobuf":
            assert request.SerializeToString() == body
        chats = [attributes(s) for s in spans_of(request) if s.name == "chat m"]
        found = [{k: v for k, v in a.items() if "cost" in k} for a in chats]
        assert found == [
            {
                "llm.cost.prompt": 1.375,
                "llm.cost.completion": 0.5,
                "llm.cost.prompt_details.cache_read": 0.125,
                "llm.cost.prompt_details.cache_write": 1.0,
                "llm.cost.total": 1.875,
                "gen_ai.usage.cost": 1.875,
            },
            {
                "llm.cost.prompt": 0.1,
                "llm.cost.completion": 0.2,
                "llm.cost.total": 0.30000000000000004,
                "gen_ai.usage.cost": 0.30000000000000004,
            },
            {},
            {"llm.cost.total": 3.0, "gen_ai.usage.cost": 3.0},
            {"llm.cost.prompt": 1e308, "llm.cost.completion": 1e308},
        ]


def test_a_string_tools_arguments_and_result_are_sent_as_their_text(tmp_path: Path) -> None:
    path = tmp_path / "strings.jsonl"
    results = ["line 1\nline 2 \u00e9", {"output": "line 1\nline 2"}, "r" * 20000]
    with session.create(path) as s, s.begin_run() as run:
        for n, result in enumerate(results):
            tool = Execution(f"t{n}", "tool")
            run.record(Event("tool_exec_start", execution=tool, tool="grep", args='{"pattern": "a"}'))
            run.record(Event("tool_exec_end", execution=tool, tool="grep", result=result))
    for protocol in ("http/protobuf", "http/json"):
        (body,) = session_export.otlp_requests([path], protocol=protocol, content=True)
        tools = [attributes(s) for s in spans_of(decode(body, protocol)) if s.name == "execute_tool grep"]
        assert [a["gen_ai.tool.call.arguments"] for a in tools] == [
            '{"pattern": "a"}'
        ] * 3  # as the model wrote
        assert [a["gen_ai.tool.call.result"] for a in tools] == [
            "line 1\nline 2 \u00e9",  # its lines, not a JSON string of them
            '{"output": "line 1\\nline 2"}',  # structured: JSON
            "r" * 16384 + "... [3616 more characters cut]",
        ]


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
    asked, chat = contents(path)  # the run's input is that message too
    assert asked["gen_ai.input.messages"] == chat["gen_ai.input.messages"]
    cut = f"{whole[:16384]}... [{len(whole) - 16384} more characters cut]"
    assert chat == {"gen_ai.input.messages": cut, "input.value": cut, "input.mime_type": "text/plain"}


def test_content_of_a_long_version_2_session_costs_what_it_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each request's content takes its latest messages that fit: the messages looked at are
    about those it shows, not every message of every request (quadratic in the turns)."""
    looked_at = [0]
    message = session_export._Contents._message

    def counting(contents: Any, at: int) -> Any:
        looked_at[0] += 1
        return message(contents, at)

    monkeypatch.setattr(session_export._Contents, "_message", counting)
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


def test_content_is_the_same_when_the_messages_kept_are_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message no longer kept (the system prompt, early in a long session) is read again at
    its offset: what is sent does not depend on how much is kept."""
    path = busy_file(tmp_path / "v2.jsonl", 12, seed=5, version=2)
    with session.open(path) as s, s.begin_run() as run:
        model = Execution("late", "model")
        system = Message("system", [session.text_block("Be brief.")], timestamp=T0)
        run.record(Event("model_exec_start", execution=model))
        run.record(Event("model_request", execution=model, request=ModelRequest([system])))
    whole = list(session_export.otlp_requests([path], content=True))
    monkeypatch.setattr(session_export, "_OTLP_KEPT", 0)  # each message read again when shown
    assert list(session_export.otlp_requests([path], content=True)) == whole


def test_content_keeps_of_each_system_message_what_it_sends(tmp_path: Path) -> None:
    import tracemalloc

    path = tmp_path / "prompts.jsonl"
    prompts = [f"{n} " + "p" * (256 << 10) for n in range(48)]  # each run its own system prompt
    with session.create(path) as s, s.begin_run() as run:
        for n, prompt in enumerate(prompts):
            model = Execution(f"m{n}", "model")
            system = [Message("system", [session.text_block(prompt)], timestamp=T0)] * (1 + n % 2)
            run.record(Event("model_exec_start", execution=model))
            run.record(Event("model_request", execution=model, request=ModelRequest(system)))
    tracemalloc.start()
    try:
        bodies = list(session_export.otlp_requests([path], content=True))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < sum(map(len, prompts)) // 2, peak  # not every prompt whole (16 MB, 4 MB kept)
    sent = [
        attributes(s)["gen_ai.system_instructions"]
        for s in spans_of(*map(decode_proto, bodies))
        if s.name == "chat"
    ]
    for n, (prompt, instructions) in enumerate(zip(prompts, sent)):
        whole = json.dumps([{"type": "text", "content": prompt}] * (1 + n % 2))
        assert instructions == f"{whole[:16384]}... [{len(whole) - 16384} more characters cut]"


def long_session(path: Path, calls: int) -> Path:
    """A version-2 session of *calls* model calls, each answering 8 KB and followed by a tool
    call whose result is 8 KB, each asking with the whole context so far."""
    context = [Message("user", [session.text_block("Read them all.")], timestamp=T0)]
    with session.create(path) as s, s.begin_run() as run:
        for n in range(calls):
            model = Execution(f"m{n}", "model")
            run.record(Event("model_exec_start", execution=model))
            run.record(Event("model_request", execution=model, request=ModelRequest(list(context))))
            usage: session.Usage = {"input": 10, "output": 5, "total_tokens": 15}
            blocks: List[session.ContentBlock] = [
                session.text_block(f"{n} " + "a" * 8000),
                session.tool_call_block(f"c{n}", "read", {}),
            ]
            answer = Message("assistant", blocks, "toolUse", usage, timestamp=T0)
            run.record(Event("model_exec_end", execution=model, message=answer))
            tool = Execution(f"c{n}", "tool", parent_id=f"m{n}")
            run.record(Event("tool_exec_start", execution=tool, tool="read", tool_id=f"c{n}", args={}))
            run.record(Event("tool_exec_end", execution=tool, tool="read", result="r" * 8000))
            result = Message("tool", [session.text_block("r" * 8000)], metadata={"tool_call_id": f"c{n}"})
            context += [answer, result]
    return path


@pytest.mark.parametrize("content", [False, True])
def test_memory_stays_bounded_whatever_the_files_length(tmp_path: Path, content: bool) -> None:
    """Each call's span goes out as the call ends: four times the file takes no more memory."""
    import tracemalloc

    peaks = []
    for calls in (100, 400):
        path = long_session(tmp_path / f"{calls}.jsonl", calls)
        tracemalloc.start()
        spans = 0
        for body in session_export.otlp_requests([path], content=content, max_request_bytes=1 << 16):
            spans += len(spans_of(decode_proto(body)))
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert spans == 1 + 2 * calls
    small, large = peaks
    assert large < small * 1.5 + (1 << 20), peaks  # the file grew by 4 * 100 * 16 KB


def span_ids_held(root: object) -> int:
    """How many 8-byte span ids the objects reachable from *root* hold (classes, modules and
    functions not followed: they are not what *root* keeps)."""
    seen: Set[int] = set()
    stack, count = [root], 0
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, (type, types.ModuleType, types.FunctionType)):
            continue
        seen.add(id(item))
        if type(item) is bytes:
            count += len(item) == 8
        else:
            stack += gc.get_referents(item)
    return count


def test_of_the_calls_that_ended_a_few_bytes_each_are_held_and_let_go_with_their_run(tmp_path: Path) -> None:
    """What is kept of a call once its span is out (to find the parent of a later call and link
    a retry to the attempt before it) is its execution id and attempts, in arrays: through an
    export of 40 runs of 10 model and 10 tool calls each, the span ids held are those of the
    calls under way alone; through one run of 6,000 calls, a few bytes a call are held (some
    200 in sets of span ids before), let go with the run."""
    path = tmp_path / "runs.jsonl"
    with session.create(path) as s:
        for _ in range(40):
            with s.begin_run() as run:
                for n in range(10):
                    model, tool = Execution(f"m{n}", "model"), Execution(f"c{n}", "tool", parent_id=f"m{n}")
                    run.record(Event("model_exec_start", execution=model))
                    run.record(Event("model_exec_end", execution=model, message=Message("assistant", [])))
                    run.record(Event("tool_exec_start", execution=tool, tool="read", tool_id=f"c{n}"))
                    run.record(Event("tool_exec_end", execution=tool, tool="read", result="r"))
    traces = session_export._Traces(str(path), True, "", 1 << 20)
    held, spans = [], []
    for record in session.iter_records(path, resolve=False):
        spans += traces.add(record)
        held.append(span_ids_held(traces))
    spans += traces.rest()
    assert len(spans) == 40 * 21 and not list(traces.rest())
    parents = {span.span_id: span.name for span in spans}
    tools = [span for span in spans if span.name == "execute_tool read"]
    assert len(tools) == 400 and all(parents[span.parent_id] == "chat" for span in tools)
    assert max(held) <= 2, max(held)  # the span id of the call under way, and of its parent
    import tracemalloc

    calls = 3000
    long = write_lines(tmp_path / "long.jsonl", long_run_lines(calls, []))
    records = list(session.iter_records(long))
    traces = session_export._Traces(str(long), False, "", 1 << 20)
    tracemalloc.start()
    for record in records:  # no run_close: all the run's calls are held
        assert len(traces.add(record)) == record.type.endswith("_end")
    kept = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert kept < 60 * 2 * calls, kept / (2 * calls)


def test_a_calls_parent_is_its_latest_attempt_whatever_its_number(tmp_path: Path) -> None:
    """An attempt numbered 0 or less (not what a recorder writes, but what a file may hold)
    is a parent as any other: its span, not one of an attempt that never started."""
    then = []
    for attempt in (-1, 0, -(2**70)):
        model = {"id": f"m{attempt}", "kind": "model", "attempt": attempt}
        tool = {"id": f"t{attempt}", "kind": "tool", "parent_id": model["id"]}
        then += [{"type": kind, "execution": model} for kind in ("model_exec_start", "model_exec_end")]
        then += [{"type": kind, "execution": tool} for kind in ("tool_exec_start", "tool_exec_end")]
    path = write_lines(tmp_path / "s.jsonl", long_run_lines(0, then))
    spans = spans_of(*(decode_proto(body) for body in session_export.otlp_requests([path])))
    by_id = {execution_of(span)[0]: span for span in spans}
    for attempt in (-1, 0, -(2**70)):
        assert by_id[f"t{attempt}"].parent_span_id == by_id[f"m{attempt}"].span_id


CONTENT: Tuple[str, ...] = ("gen_ai.input", "gen_ai.output", "gen_ai.system", "gen_ai.tool.definitions")
CONTENT += ("gen_ai.tool.call.", "session_jsonl.input", "input.", "output.")


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
    assert attributes(tool)["gen_ai.tool.call.result"] == escaped  # a string result: its text, escaped
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
    """The salt changes the session's id too: a backend that keys sessions by id across
    projects (Phoenix) keeps a salted copy in a second project apart from the first."""
    once, _ = sent(demo)
    again, _ = sent(demo, "http/json")
    salted, _ = sent(demo, "http/protobuf", "--salt", "project-2")
    ids = [(s.trace_id, s.span_id, s.parent_span_id) for s in once]
    assert ids == [(s.trace_id, s.span_id, s.parent_span_id) for s in again] and len(set(ids)) == 13
    assert not {s.span_id for s in salted} & {s.span_id for s in once}
    assert not {s.trace_id for s in salted} & {s.trace_id for s in once}
    session_id = next(session.iter_records(demo)).session_id
    for spans, expected in ((once, session_id), (salted, f"{session_id}:project-2")):
        assert {(attributes(s)["session.id"], attributes(s)["gen_ai.conversation.id"]) for s in spans} == {
            (expected, expected)
        }


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
    assert [s.status.code for s in spans if s.name.startswith("chat")] == [2, 1]  # rate limited, then OK


def test_a_call_of_the_hosts_own_kind_has_no_status_its_run_is_ok(tmp_path: Path) -> None:
    path = tmp_path / "own.jsonl"
    retrieval = Execution("r1", "retrieval")
    for kind in ("retrieval_start", "retrieval_end"):  # the host's own: recorded without a warning
        session.register_event_type(kind)
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("retrieval_start", execution=retrieval))
        run.record(Event("retrieval_end", execution=retrieval))
    for protocol in ("http/protobuf", "http/json"):
        (body,) = session_export.otlp_requests([path], protocol=protocol)
        status = {s.name: (s.status.code, s.HasField("status")) for s in spans_of(decode(body, protocol))}
        assert status == {"invoke_agent": (1, True), "retrieval": (0, False)}  # whether it worked: not known


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
    with Receiver(delay=3.0, client_leaves=True) as receiver:
        assert "timed out" in fails(demo, receiver.url, "--timeout", "0.5")


class RawServer:
    """A server on 127.0.0.1 that reads each request, then writes *answer* (bytes no HTTP
    server would write), *pace* seconds between its bytes.  It stops itself: at the end of
    its ``with``, or once its client has gone."""

    def __init__(self, answer: bytes, pace: float = 0.0) -> None:
        self.answer, self.pace, self.stopped = answer, pace, threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1/traces"
        self.thread = threading.Thread(target=self.serve)

    def serve(self) -> None:
        while not self.stopped.is_set():
            try:
                connection, _ = self.listener.accept()
            except socket.timeout:
                continue
            with connection, contextlib.suppress(OSError):  # the client gave up
                connection.settimeout(10)
                self.read_request(connection.makefile("rb"))
                chunks = (
                    [self.answer[i : i + 1] for i in range(len(self.answer))] if self.pace else [self.answer]
                )
                for chunk in chunks:
                    if self.stopped.is_set():
                        break
                    connection.sendall(chunk)
                    time.sleep(self.pace)

    @staticmethod
    def read_request(reader: Any) -> None:
        length = 0
        for line in iter(reader.readline, b"\r\n"):
            name, _, value = line.decode("latin-1").partition(":")
            length = int(value) if name.lower() == "content-length" else length
        reader.read(length)

    def __enter__(self) -> RawServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join()
        self.listener.close()


def test_a_backend_answering_a_byte_at_a_time_times_out(demo: Path) -> None:
    # Each byte comes well within the timeout; the whole answer, in 12 s, does not.
    answer = b"HTTP/1.1 200 OK\r\nX-Padding: " + b"x" * 200 + b"\r\nContent-Length: 0\r\n\r\n"
    with RawServer(answer, pace=0.05) as server:
        assert "timed out" in fails(demo, server.url, "--timeout", "1")


def ok(content_type: str, body: bytes) -> bytes:
    """An answer 200 of *body*."""
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "the answer is not HTTP: "),
        (b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", "got more than 100 headers"),
        (b"HTTP/1.1 200 OK\r\nX-A: " + b"b" * 65536 + b"\r\n\r\n", "got more than 65536 bytes"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "IncompleteRead"),
        (b"HTTP/1.1 500 No\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "HTTP 500 No\n"),
        (ok("application/json", b"[" * 100_000), "JSON nested too deeply"),
        (ok("application/json", b'{"partialSuccess": {"rejectedSpans": Infinity}}'), "float infinity"),
        (ok("application/json", b'{"partialSuccess": {"rejectedSpans": 1e999}}'), "float infinity"),
        (ok("application/x-protobuf", b"\x80" * ((1 << 20) - 1) + b"\x01"), "varint longer than 10 bytes"),
    ],
    ids=["ssh", "101-headers", "64k-header", "chunk", "chunk-500", "nested", "infinity", "1e999", "varint"],
)
def test_an_answer_http_or_otlp_cannot_read_is_one_line_naming_the_endpoint(
    demo: Path, answer: bytes, said: str
) -> None:
    with RawServer(answer) as server:
        stderr = fails(demo, server.url)
    assert said in stderr and stderr.count("\n") == 1, stderr


def test_a_header_value_is_never_printed(demo: Path, tmp_path: Path) -> None:
    secret = base64.b64encode(b"pk-lf-0123456789abcdef:sk-lf-0123456789abcdef0123456789abcdef").decode()
    wrapped = f"Basic {secret[:40]}\n{secret[40:]}"  # as base64 wraps a long credential
    nowhere = "http://127.0.0.1:9/v1/traces"
    for done in (
        run_cli("otlp", str(demo), "--endpoint", nowhere, "--header", f"Authorization={wrapped}"),
        otlp_with_environment(
            demo, "--endpoint", nowhere,
            OTEL_EXPORTER_OTLP_HEADERS="Authorization=" + wrapped.replace(" ", "%20").replace("\n", "%0A"),
        ),
    ):  # fmt: skip
        assert (
            done.returncode == 2 and "the value of the header Authorization holds a line break" in done.stderr
        ), done.stderr
        assert secret[:40] not in done.stderr and secret[40:] not in done.stderr
    done = run_cli(
        "otlp",
        str(demo),
        "--endpoint",
        "http://127.0.0.1:9/v1/traces",
        "--header",
        f"Authorization: {secret}",
    )
    assert done.returncode == 2 and "the name of the header Authorization holds" in done.stderr, done.stderr
    assert secret not in done.stderr
    done = run_cli("otlp", str(demo), "--endpoint", nowhere, "--header", secret.rstrip("="))
    assert done.returncode == 2 and "NAME=VALUE" in done.stderr and secret[:-1] not in done.stderr, (
        done.stderr
    )
    for url in ("http://user:" + secret + "@127.0.0.1/v1/traces", "ftp://user:" + secret + "@127.0.0.1:21/x"):
        done = run_cli("otlp", str(demo), "--endpoint", url)
        assert done.returncode == 2 and "holds a user name or password" in done.stderr, done.stderr
        assert secret not in done.stderr
    echoed: Tuple[Any, ...] = (
        401,
        {},
        f"no such key: Basic {secret}".encode(),
    )  # a backend that says what it got
    with Receiver((echoed,)) as receiver:
        stderr = fails(demo, receiver.url, "--header", f"Authorization=Basic {secret}")
    assert "HTTP 401 Unauthorized: no such key: [a header's value]" in stderr and secret not in stderr, stderr


def test_a_header_value_echoed_where_an_answer_is_cut_is_not_printed_in_part(demo: Path) -> None:
    secret = "sk-lf-0123456789abcdef0123456789abcdef"
    said = "x" * 180 + f" no such key: {secret}"  # the answer's first 200 characters end in the key
    with Receiver(((401, {}, said.encode()),)) as receiver:
        stderr = fails(demo, receiver.url, "--header", f"X-Api-Key={secret}")
    assert "HTTP 401 Unauthorized: " + "x" * 180 + " no such key: [a hea\n" in stderr, stderr
    assert secret[:6] not in stderr, stderr


def test_a_timeout_beyond_what_a_socket_takes_is_refused_as_a_usage_error(demo: Path) -> None:
    for seconds in ("inf", "1e308", "nan", "0", "-1", "ten"):
        done = run_cli("otlp", str(demo), "--endpoint", "http://127.0.0.1:9/v1/traces", "--timeout", seconds)
        assert done.returncode == 2 and "Traceback" not in done.stderr, (seconds, done.stderr)
        assert "--timeout: a number of seconds above 0, at most 86,400" in done.stderr, done.stderr


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
    """The demo, sent twice with --content, then salted into a second project; a session that
    records costs into a third: Phoenix's API gives back the spans, runs' input and output,
    sessions apart by project, the recorded costs and OK statuses."""
    need("phoenix", "tox -e phoenix installs arize-phoenix")
    costed = busy_file(tmp_path / "costed.jsonl", 3, seed=2)
    entries: List[Dict[str, Any]] = []
    list(session_export.otlp_requests([costed], entries=entries))
    costed_spans = entries[0]["spans"]
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
                done = run_cli("otlp", str(demo), "--endpoint", f"{base}/v1/traces", "--content")
                assert done.returncode == 0, done.stderr
            project = {"OTEL_RESOURCE_ATTRIBUTES": "openinference.project.name=second"}
            salted = otlp_with_environment(demo, "--endpoint", f"{base}/v1/traces", "--salt", "2", **project)
            assert salted.returncode == 0, salted.stderr
            project = {"OTEL_RESOURCE_ATTRIBUTES": "openinference.project.name=costs"}
            sent_costs = otlp_with_environment(costed, "--endpoint", f"{base}/v1/traces", **project)
            assert sent_costs.returncode == 0, sent_costs.stderr
            projects = phoenix_spans(base, 26 + costed_spans)
        finally:
            server.terminate()
            server.wait(30)
    counts = {name: len(spans) for name, spans in projects.items()}
    assert counts["default"] == counts["second"] == 13
    check_phoenix_demo(demo, projects["default"], projects["sessions"])
    check_phoenix_chat_values(demo, projects["default"], projects["second"])
    check_phoenix_costs(costed, projects["costs"])


def check_phoenix_demo(demo: Path, spans: List[Dict[str, Any]], sessions: Dict[str, Any]) -> None:
    """The demo's spans in Phoenix: kinds, nesting, tokens, statuses, the runs' input and
    output, and one session per project, its traces and tokens those of the file."""
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
    assert {s["statusCode"] for s in spans} == {"OK", "ERROR"}  # none left unset
    runs = sorted((s for s in spans if s["spanKind"] == "agent"), key=lambda s: str(s["startTime"]))
    questions = ["How long is session.py, and what is beside it?", "And how long are the tests?"]
    assert [run["input"]["value"] for run in runs] == questions
    assert all(run["output"]["value"] for run in runs)
    session_id = next(session.iter_records(demo)).session_id
    assert sessions["default"] == [
        {
            "sessionId": session_id,
            "numTraces": 2,
            "firstInput": {"value": questions[0]},
            "lastOutput": {"value": runs[-1]["output"]["value"]},
            "tokenUsage": {
                "prompt": float(sum(u["input"] for u in usage)),
                "completion": float(sum(u["output"] for u in usage)),
            },
        }
    ]
    assert [s["sessionId"] for s in sessions["second"]] == [f"{session_id}:2"]  # apart from the first


def check_phoenix_chat_values(demo: Path, spans: List[Dict[str, Any]], without: List[Dict[str, Any]]) -> None:
    """Each chat span's input and output in Phoenix: with content, its input messages and the
    recorded reply (none for the failed call); without, no input, and as output what
    Phoenix makes of the response's model (docs/otlp.md), none for the failed call."""
    mime = {"text/plain": "text", "application/json": "json"}
    replies = [None if r is None else (r[0], mime[r[1]]) for r in recorded_replies(demo)]
    for project, expected in (
        (spans, replies),
        (without, [r and ('{"model": "scripted-model"}', "json") for r in replies]),
    ):
        chats = sorted((s for s in project if s["spanKind"] == "llm"), key=lambda s: str(s["startTime"]))
        outputs = [s["output"] and (s["output"]["value"], s["output"]["mimeType"]) for s in chats]
        assert outputs == expected
    inputs = [s["input"] for s in sorted(spans, key=lambda s: str(s["startTime"])) if s["spanKind"] == "llm"]
    assert all(i["mimeType"] == "json" and json.loads(i["value"])[0]["role"] == "user" for i in inputs)
    assert [s["input"] for s in without if s["spanKind"] == "llm"] == [None] * len(replies)


def check_phoenix_costs(path: Path, spans: List[Dict[str, Any]]) -> None:
    """Each chat span carries the cost its call recorded; together, the file's total."""
    recorded = [
        r.data["message"]["value"]["usage"]["cost"]["total"]
        for r in session.iter_records(path)
        if r.type == "model_exec_end" and "message" in r.data
    ]
    llm = [json.loads(s["attributes"]) for s in spans if s["spanKind"] == "llm" and s["statusCode"] == "OK"]
    assert sorted(a["llm"]["cost"]["total"] for a in llm) == sorted(recorded)
    assert sum(a["gen_ai"]["usage"]["cost"] for a in llm) == sum(recorded)
    assert all(s["statusCode"] in ("OK", "ERROR") for s in spans)


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


def phoenix_spans(base: str, count: int) -> Dict[str, Any]:
    """The spans Phoenix stored, by project, from its GraphQL API, once *count* arrived, and
    under "sessions" each project's sessions."""
    import urllib.request

    query = """{ projects { edges { node { name spans(first: 1000) { edges { node {
        name spanKind statusCode parentId tokenCountPrompt tokenCountCompletion context { spanId traceId }
        startTime input { value mimeType } output { value mimeType } attributes
    } } }
    sessions(first: 100) { edges { node {
        sessionId numTraces firstInput { value } lastOutput { value } tokenUsage { prompt completion }
    } } } } } } }"""
    found: Dict[str, List[Dict[str, Any]]] = {}
    for _ in range(60):
        request = urllib.request.Request(
            f"{base}/graphql", json.dumps({"query": query}).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            result = json.loads(answer.read())
        assert "errors" not in result, result
        nodes = [project["node"] for project in result["data"]["projects"]["edges"]]
        found = {node["name"]: [edge["node"] for edge in node["spans"]["edges"]] for node in nodes}
        if sum(map(len, found.values())) >= count:
            sessions = {node["name"]: [edge["node"] for edge in node["sessions"]["edges"]] for node in nodes}
            return dict(found, sessions=sessions)
        time.sleep(0.5)
    raise AssertionError(f"Phoenix holds fewer spans than {count}: {found}")
