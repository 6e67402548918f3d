"""Tests for session.py, each in the section of the module it tests, in the module's order:
surface (with the packaging and the README's commands), errors, values, codec, writer, faults,
locking, reader, analysis, repair, command line; a subcommand's tests sit with the feature it
runs. Last come the reliability harnesses, which drive all of it."""

from __future__ import annotations

import ast
import configparser
import contextlib
import dataclasses
import datetime as dt
import dis
import doctest
import enum
import errno
import functools
import gc
import inspect
import io
import itertools
import json
import locale
import logging
import os
import pickle
import random
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import tracemalloc
import typing
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple

import hypothesis
import pytest
from hypothesis import strategies as st

import session
from session import (
    AgentSnapshot,
    AgentState,
    CallConfig,
    CallRef,
    CodecError,
    Event,
    EventData,
    Execution,
    FormatError,
    JSONCodec,
    Message,
    ModelRequest,
    RawJSON,
    RecordingError,
    RetryInfo,
    RunSummary,
    TypeSpec,
)

HERE = Path(__file__).resolve().parent
MODULE = HERE / "session.py"
UTC = dt.timezone.utc
T0 = dt.datetime(2026, 12, 2, 9, 27, 36, 123456, tzinfo=UTC)
MODEL = Execution("m1", "model")
TOOL = Execution("t1", "tool", parent_id="m1", turn_index=1)
session.register_event_type("my_custom_event")  # the tests' own types, as a host registers its own
session.register_event_type("my_own_event")


# ---------------------------------------------------------------------------- helpers


def lines_of(path: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def data_of(path: Path, seq: int) -> Dict[str, Any]:
    return lines_of(path)[seq - 1]["data"]  # type: ignore[no-any-return]


def records(path: Path) -> List[session.Record]:
    return list(session.iter_records(path))


def recorded(
    tmp_path: Path, *events: Event, codec: Optional[session.Codec] = None, version: int = 2
) -> List[Dict[str, Any]]:
    """Record *events* in one run of a new session; the JSON objects of the event lines (of a
    version-2 file, without the records that hold the messages and tools its requests refer to)."""
    path = tmp_path / "events.jsonl"
    with session.create(path, codec=codec, version=version) as s, s.begin_run() as run:
        for event in events:
            run.record(event)
    return [obj for obj in lines_of(path)[2:-1] if obj["type"] not in ("message", "tools")]


def requests_of(path: Path) -> List[Dict[str, Any]]:
    """The ``request`` of every model_request in *path*, as the reader gives them back."""
    return [r.data["request"] for r in session.iter_records(path) if r.type == "model_request"]


def sample_file(path: Path, runs: int = 2, checkpoint: bool = True) -> Path:
    """A small valid session: *runs* runs, each a model call, a tool call and a checkpoint."""
    with session.create(path) as s:
        for n in range(runs):
            with s.begin_run() as run:
                run.record(Event("turn_start", turn_index=1, timestamp=T0))
                run.record(Event("model_exec_start", execution=MODEL, timestamp=T0))
                message = Message("assistant", [session.text_block(f"héllo {n}")], usage={"input": 3})
                run.record(Event("model_exec_end", execution=MODEL, message=message, timestamp=T0))
                run.record(Event("tool_exec_start", execution=TOOL, tool="ls", args={"d": "/"}))
                run.record(Event("tool_exec_end", execution=TOOL, tool="ls", result=["a", "b"]))
                if checkpoint:
                    run.save_checkpoint(AgentSnapshot(AgentState(messages=[message])))
    return path


def envelope_lines(n: int = 4) -> List[Dict[str, Any]]:
    """The objects of a valid file: header, run_start, events, run_close (n lines in all)."""
    sid, rid = "a" * 32, "b" * 32
    objs: List[Dict[str, Any]] = [
        {"session_id": sid, "seq": 1, "type": "session_start", "time": "t", "data": {"version": 1}},
        {"session_id": sid, "seq": 2, "type": "run_start", "time": "t", "run_id": rid, "data": {}},
    ]
    for seq in range(3, n):
        objs.append(
            {"session_id": sid, "seq": seq, "type": "turn_start", "time": "t", "run_id": rid, "data": {}}
        )
    objs.append({"session_id": sid, "seq": n, "type": "run_close", "time": "t", "run_id": rid, "data": {}})
    return objs


def dump(objs: List[Any]) -> bytes:
    return b"".join(json.dumps(o, separators=(",", ":")).encode() + b"\n" for o in objs)


def offsets(blob: bytes) -> List[int]:
    """The start offset of each line of *blob*."""
    starts = [0]
    for i, byte in enumerate(blob):
        if byte == 0x0A:
            starts.append(i + 1)
    return starts


def run_cli_process(*args: str, cwd: Optional[Path] = None) -> subprocess.CompletedProcess[str]:
    """``python session.py ARGS`` in a process of its own."""
    return subprocess.run(
        [sys.executable, str(MODULE), *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def run_cli(*args: str, cwd: Optional[Path] = None) -> subprocess.CompletedProcess[str]:
    """``python session.py ARGS`` run in this process, without the cost of starting one: its
    exit status, and its output written as bytes and decoded as run_cli_process decodes a
    child's.  The tests about a process (signals, a closed pipe, a full disk, the stack left
    to a reader, a lone copy, the interpreter's start and end) use run_cli_process or start
    their own."""
    encoding = locale.getpreferredencoding(False)
    written = [io.BytesIO(), io.BytesIO()]
    streams = [io.TextIOWrapper(raw, encoding=encoding) for raw in written]
    status: Any = 0
    with contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.redirect_stdout(streams[0]))
        stack.enter_context(contextlib.redirect_stderr(streams[1]))
        if "COLUMNS" not in os.environ:  # a child's terminal width, its output being a pipe
            stack.enter_context(pytest.MonkeyPatch.context()).setenv("COLUMNS", "80")
        if cwd is not None:
            stack.enter_context(pytest.MonkeyPatch.context()).chdir(cwd)
        try:
            status = session.main(list(args))
        except SystemExit as ended:  # argparse's usage errors and --help
            status = ended.code
        for stream in streams:
            stream.flush()
    out, err = (io.TextIOWrapper(io.BytesIO(raw.getvalue()), encoding=encoding).read() for raw in written)
    return subprocess.CompletedProcess([sys.executable, str(MODULE), *args], int(status or 0), out, err)


def need(name: str, why: str) -> None:
    """Skip, saying *why*, when the program or module *name* is missing; under CI=true, fail:
    CI installs every tool the tests use, so a missing one there is a broken set-up."""
    import importlib.util

    if shutil.which(name) or importlib.util.find_spec(name) is not None:
        return
    message = f"{name} is not installed: {why}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def sweep(full: int, sampled: int) -> int:
    """The size of a stress, fuzz or signal sweep: *full*, or *sampled* where the environment
    says SESSION_TEST_SWEEPS=sampled, as tox.ini does for the Pythons between the oldest and
    the newest; every test runs on every Python, only the number of cases varies."""
    return sampled if os.environ.get("SESSION_TEST_SWEEPS") == "sampled" else full


def deep_value(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def doc_section(heading: str, file: str = "README.md") -> str:
    """The text under *heading* (such as ``"### CallRef"``) in *file* (the README, or a page
    such as ``"docs/format.md"``), up to the next heading of its level or above outside a code
    block."""
    lines = (HERE / file).read_text(encoding="utf-8").splitlines(keepends=True)
    start = lines.index(heading + "\n") + 1
    level = len(heading.split()[0])
    fenced = False
    for end in range(start, len(lines)):
        fenced ^= lines[end].startswith("```")
        mark = re.match(r"(#+) ", lines[end])
        if mark and not fenced and len(mark.group(1)) <= level:
            break
    else:
        end = len(lines)
    return "".join(lines[start:end])


# ---------------------------------------------------------------------------- surface


SPEC_NAMES = [
    *("create", "open", "read", "iter_records", "Session", "Run", "Event", "Execution", "CallRef"),
    *("Record", "ReadResult", "Checkpoint", "EventData", "ModelRequest", "CallConfig", "RetryInfo"),
    *("RunSummary", "RawJSON", "Codec", "JSONCodec", "TypeSpec", "Message", "AgentState", "AgentSnapshot"),
    *("SessionError", "FormatError", "UnsupportedVersionError", "CodecError", "RecordingError"),
    *("RunOpenError", "LockedError", "main"),
    *("repair", "RepairResult"),  # section 8
    *("find", "summarize", "Summary", "RunInfo", "Gap"),  # section 9
    *("TextBlock", "ThinkingBlock", "ToolCall", "ToolCallBlock", "ImageData", "ImageBlock"),
    *("ToolReferenceBlock", "ContentBlock", "Usage", "Cost", "STOP_REASONS"),
    *("text_block", "thinking_block", "tool_call_block", "image_block", "tool_reference_block"),
    *("tool_result",),  # section 4: the message vocabulary
    *("register_event_type",),  # section 3: a host's own event types
]


def test_all_lists_exactly_the_public_names() -> None:
    assert sorted(session.__all__) == sorted(SPEC_NAMES)
    defined_here = {
        name
        for name, value in vars(session).items()
        if getattr(value, "__module__", None) == "session" and not name.startswith("_")
    }
    assert defined_here - {"Source"} == set(SPEC_NAMES) - {"ContentBlock", "STOP_REASONS"}


def is_stdlib(name: str) -> bool:
    """Whether *name* is a standard-library module: by the interpreter's own list where it has
    one (3.10+), else by where the module lives (built in, or in the standard library's folder,
    not in site-packages)."""
    import importlib.util
    import sysconfig

    if hasattr(sys, "stdlib_module_names"):
        return name in sys.stdlib_module_names
    if name in sys.builtin_module_names or name in {"msvcrt", "winreg", "_winapi"}:
        return True
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return False
    folders = {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
    origin = os.path.realpath(spec.origin)
    return "site-packages" not in origin and any(
        origin.startswith(os.path.realpath(folder) + os.sep) for folder in folders
    )


MODULES = ["session.py", "session_export.py", "session_import.py", "session_diff.py"]  # and the companions


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_only_the_standard_library(module: str) -> None:
    tree = ast.parse((HERE / module).read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    assert {
        name
        for name in found - {"__future__", "session", "session_export", "session_import"}
        if not is_stdlib(name)
    } == set()
    assert not is_stdlib("pytest")  # the check can fail


SECTIONS = [
    "constants",
    "errors",
    "value types",
    "JSON text",
    "codec",
    "event data",
    "platform",
    "lines",
    "writer",
    "reader",
    "repair",
    "analysis",
    "command line",
]


def module_sections(module: str) -> Tuple[List[str], List[Tuple[int, str]]]:
    """*module*'s source lines and where each of its banner-headed sections starts."""
    lines = (HERE / module).read_text(encoding="utf-8").splitlines()
    starts = [
        (n, line.split(" ", 2)[2]) for n, line in enumerate(lines, 1) if line.startswith("# " + "-" * 20)
    ]
    return lines, starts


@pytest.mark.parametrize("module", MODULES)
def test_module_reads_top_to_bottom_in_functions_of_60_lines_at_most(module: str) -> None:
    """No section uses a name that a later section defines, and no function is longer than
    60 lines (the team's limit)."""
    lines, starts = module_sections(module)
    if module == "session.py":
        assert [name for _, name in starts] == SECTIONS
    tree = ast.parse("\n".join(lines))

    def section(line: int) -> int:
        return sum(1 for start, _ in starts if start <= line)

    defined: Dict[str, int] = {}
    for node in tree.body:
        for name in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [node]:
            if isinstance(name, (ast.FunctionDef, ast.ClassDef)):
                defined.setdefault(name.name, node.lineno)
            elif isinstance(name, ast.Name) and isinstance(name.ctx, ast.Store):
                defined.setdefault(name.id, node.lineno)
    later = []
    for node in tree.body:
        inner = list(ast.walk(node))
        local = {n.id for n in inner if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        local |= {a.arg for n in inner if isinstance(n, ast.arguments) for a in [*n.args, *n.kwonlyargs]}
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            local.discard(node.name)
        else:
            local = set()  # module level: its stores are the module's names
        later += [
            f"{module}:{n.lineno}: {n.id}"
            for n in inner
            if isinstance(n, ast.Name)
            and n.id in defined
            and n.id not in local
            and section(defined[n.id]) > section(n.lineno)
        ]
    sizes = {
        f"{module}:{f.lineno}: {f.name}": (f.end_lineno or 0) - f.lineno + 1
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef)
    }
    assert (later, {where: size for where, size in sizes.items() if size > 60}) == ([], {})
    assert max(sizes.values()) > 20  # the check can fail (each module has functions of some length)


RECORDERS = sorted((HERE / "recorders").glob("session_*.py"))
SHARED_BY_RECORDERS = (
    *("recording", "to_json", "_int_or_digits", "_unknown", "_content_key"),
    *("_Writer", "_Later", "_made"),  # the writer thread of each recording
    *("_opened", "_close_once_open", "_close"),  # and its opening and closing
)
# the resume helpers, in each recorder whose framework's messages carry no time of their own;
# and those of each that knows a message it saw by its object (the Agents SDK sends copies made
# anew: its recorder knows them by content alone, in its _ConvertedByContent)
SHARED_BY_SOME_RECORDERS = (
    *("_Recalled", "_sent_before", "_unstamped", "_parsed"),
    *("_Converted", "_message_key", "_fields", "_unchanged"),
)


def _shared_body(path: Path, name: str) -> str | None:
    """The code of the function or class *name* of the recorder at *path*, docstring aside
    (which may name the framework); None when it has none."""
    nodes = [n for n in ast.parse(path.read_text(encoding="utf-8")).body if getattr(n, "name", "") == name]
    if not nodes:
        return None
    [node] = nodes
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    docstring = ast.get_docstring(node) is not None
    return ast.dump(ast.Module(body=node.body[docstring:], type_ignores=[]))


@pytest.mark.parametrize("name", SHARED_BY_RECORDERS + SHARED_BY_SOME_RECORDERS)
def test_the_recorders_share_their_helpers_word_for_word(name: str) -> None:
    """Each recorder is one file that stands alone: what they share is copied, and must not
    drift apart (docstrings aside, which name the framework)."""
    bodies = [body for body in (_shared_body(path, name) for path in RECORDERS) if body is not None]
    assert len(RECORDERS) >= 3
    assert len(bodies) == len(RECORDERS) if name in SHARED_BY_RECORDERS else len(bodies) >= 2
    assert len(set(bodies)) == 1


PUBLIC_DATACLASSES = [
    *("Execution", "CallConfig", "ModelRequest", "RetryInfo", "RunSummary", "RawJSON", "Event"),
    *("CallRef", "Checkpoint", "EventData", "TypeSpec", "Message", "AgentState", "AgentSnapshot"),
    *("RunInfo", "Gap", "Summary"),
]


@pytest.mark.parametrize("name", PUBLIC_DATACLASSES)
def test_the_public_types_are_plain_dataclasses(name: str) -> None:
    cls: type = getattr(session, name)
    frozen = getattr(cls, "__dataclass_params__").frozen  # noqa: B009 - a class attribute mypy does not know
    assert dataclasses.is_dataclass(cls) and cls.__mro__[1:] == (object,)
    assert ("__setattr__" in vars(cls)) == frozen and (cls.__hash__ is not None) == frozen


def test_the_dataclasses_behave_as_dataclasses() -> None:
    one, same = session.Execution("a", "model"), session.Execution("a", "model")
    assert one == same and hash(one) == hash(same)
    assert repr(one) == "Execution(id='a', kind='model', parent_id='', turn_index=0, attempt=1)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.id = "b"  # type: ignore[misc]
    config = session.CallConfig(api_key="sk-9")
    assert "sk-9" not in repr(config) and session.CallConfig.api_key == "" and config != session.CallConfig()
    assert session.Message("user", []).timestamp is not None
    ref = session.CallRef("s", "r", "e", 1)
    assert pickle.loads(pickle.dumps(ref)) == ref
    if sys.version_info >= (3, 13):
        import copy

        assert copy.replace(ref, attempt=2) == session.CallRef("s", "r", "e", 2)  # type: ignore[attr-defined]


SIGNAL_BUILDS_VALUES = """
import signal, sys
sys.path.insert(0, sys.argv[1])
import session
built = []
def build(signum, frame):
    built.append((session.Execution("m", "model"), session.Event("turn_start"), session.Message("user", []),
                  session.CallRef("s", "r", "e", 1), session.RunSummary(1)))
signal.signal(signal.SIGALRM, build)
signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
for i in range(20000):
    session.Event("tool_exec_end", execution=session.Execution(str(i), "tool"), result=i)
signal.setitimer(signal.ITIMER_REAL, 0)
print(len(built) > 0)
"""


@pytest.mark.skipif(os.name != "posix", reason="SIGALRM and setitimer are POSIX")
def test_a_signal_handler_builds_values_from_the_first_moment_on() -> None:
    """Right after import, a handler that builds the public values interrupts code that builds
    them too: no value is ever half made."""
    child = subprocess.run(
        [sys.executable, "-c", SIGNAL_BUILDS_VALUES, str(HERE)], capture_output=True, text=True, timeout=120
    )
    assert (child.returncode, child.stdout, child.stderr) == (0, "True\n", "")


SIGNAL_RECORDS_WHILE_A_PATTERN_COMPILES = """
import re, signal, sys
sys.path.insert(0, sys.argv[1])
import session
s = session.create(sys.argv[2])
run = s.begin_run()
def record(signum, frame):
    run.record(session.Event("tool_exec_start", execution=session.Execution("t2", "tool"), args="b\\ud800"))
def profile(frame, event, arg):  # the signal comes as the pattern of lone surrogates is first compiled
    if frame.f_code is re._compile.__code__ and frame.f_locals["pattern"] == "[\\ud800-\\udfff]":
        sys.setprofile(None)
        signal.raise_signal(signal.SIGUSR1)
        print("signalled")
signal.signal(signal.SIGUSR1, record)
sys.setprofile(profile)
run.record(session.Event("tool_exec_start", execution=session.Execution("t1", "tool"), args="a\\ud800"))
sys.setprofile(None)
s.close()
"""


@pytest.mark.skipif(os.name != "posix", reason="SIGUSR1 is POSIX")
def test_a_signal_handler_records_while_a_pattern_is_first_compiled(tmp_path: Path) -> None:
    """The module's patterns are compiled on first use: a handler that records, and needs the
    pattern a record under way is compiling, gets it too, and both records are written."""
    path = tmp_path / "s.jsonl"
    child = subprocess.run(
        [sys.executable, "-c", SIGNAL_RECORDS_WHILE_A_PATTERN_COMPILES, str(HERE), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (child.returncode, child.stdout, child.stderr) == (0, "signalled\n", "")
    started = sorted(r.data["args"] for r in records(path) if r.type == "tool_exec_start")
    assert started == ["a\ud800", "b\ud800"]


def test_every_public_dataclass_is_named_in_the_test() -> None:
    public = [name for name in session.__all__ if dataclasses.is_dataclass(getattr(session, name))]
    assert sorted(public) == sorted(PUBLIC_DATACLASSES)


def test_version_is_a_string() -> None:
    assert isinstance(session.__version__, str) and session.__version__[0].isdigit()


SUPPORTED = ["3.8", "3.9", "3.10", "3.11", "3.12", "3.13"]


def test_the_readmes_test_command_is_what_ci_runs() -> None:
    command = "python3 -m venv .venv && .venv/bin/python -m pip install -q tox tox-uv && .venv/bin/tox p -p 4"
    sample = "python3 examples/agent_loop.py demo.jsonl && python3 -m session validate demo.jsonl"
    assert re.findall(r"```sh\n(.*?)\n```", doc_section("## Try it"), re.S) == [sample]
    assert re.findall(r"```sh\n(.*?)\n```", doc_section("## Test it"), re.S) == [command]
    assert (HERE / ".ci" / "run").read_text(encoding="utf-8").splitlines()[-1] == command
    readme = (HERE / "README.md").read_text(encoding="utf-8")
    assert re.findall(r"```sh\n(.*?)\n```", readme, re.S) == [sample, command]  # the only two set-ups


def test_the_readmes_own_loop_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    [code] = re.findall(r"```python\n(.*?)```", doc_section("## Record your own loop"), re.S)
    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # a new file, then the same file continued in a second run
        with contextlib.redirect_stdout(io.StringIO()) as out:
            exec(code, {})
        assert CallRef.from_json(ast.literal_eval(out.getvalue())).execution_id == "model-1"
    types = [record.type for record in session.iter_records(tmp_path / "chat.jsonl")]
    assert types.count("message") == 2  # one per run: each run asks with a message of its own
    types = [kind for kind in types if kind not in ("message", "tools")]
    one_run = [
        "run_start", "agent_start", "turn_start", "model_exec_start", "model_request", "model_exec_end",
        "message_end", "tool_exec_start", "tool_exec_end", "message_end", "turn_end", "agent_end",
        "checkpoint", "run_close",
    ]  # fmt: skip
    assert types == ["session_start", *one_run, *one_run]
    summary = session.summarize(tmp_path / "chat.jsonl")
    assert summary.gaps == [] and summary.usage == {"input": 24, "output": 18}


def github_slugs(markdown: str) -> Set[str]:
    """The anchors GitHub gives the headings of *markdown*: lower case, punctuation dropped,
    spaces as hyphens, and a repeated slug numbered (``-1``, ``-2``…)."""
    slugs: Set[str] = set()
    for line in re.sub(r"(?ms)^```.*?^```", "", markdown).splitlines():
        heading = re.match(r"#{1,6} +(.*?) *#* *$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
            number = 0
            while (slug if number == 0 else f"{slug}-{number}") in slugs:
                number += 1
            slugs.add(slug if number == 0 else f"{slug}-{number}")
    return slugs


def test_every_link_in_the_readme_and_docs_resolves() -> None:
    pages = [HERE / "README.md", *sorted((HERE / "docs").glob("*.md")), HERE / "bench" / "README.md"]
    assert len(pages) >= 7
    checked = 0
    for page in pages:
        text = re.sub(r"(?ms)^```.*?^```", "", page.read_text(encoding="utf-8"))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(HERE)}: {target}"
            assert linked.exists() and HERE in linked.parents, where
            if anchor:
                assert linked.suffix == ".md", where
                assert anchor in github_slugs(linked.read_text(encoding="utf-8")), where
            checked += 1
    assert checked >= 30


def test_tox_pyproject_and_toxfile_name_the_same_pythons() -> None:
    tox_ini = configparser.ConfigParser()
    tox_ini.read(HERE / "tox.ini", encoding="utf-8")
    envs = [name.strip() for name in tox_ini["tox"]["env_list"].split(",")]
    pythons = [name for name in envs if re.fullmatch(r"py3\d+", name)]  # in the order they start
    assert sorted(pythons, key=lambda name: int(name[3:])) == ["py" + v.replace(".", "") for v in SUPPORTED]
    pyproject = (HERE / "pyproject.toml").read_text(encoding="utf-8")
    assert re.findall(r'"Programming Language :: Python :: (3\.\d+)"', pyproject) == SUPPORTED
    assert f'requires-python = ">={SUPPORTED[0]}"' in pyproject
    toxfile = ast.parse((HERE / "toxfile.py").read_text(encoding="utf-8"))
    [listed] = [
        node.value
        for node in toxfile.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SUPPORTED"
    ]
    assert list(ast.literal_eval(listed)) == SUPPORTED


def tox_outside_pyenv(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run this project's tox (*args* after ``-c tox.ini``) as a user's shell would: without tox's
    own variables, and with pyenv's installed interpreters, if any, only behind its shims."""
    need("tox", "the test runs tox on this project's tox.ini")
    outside = {key: value for key, value in os.environ.items() if not key.startswith("TOX") and key != "CI"}
    path = os.environ["PATH"].split(os.pathsep)
    outside["PATH"] = os.pathsep.join(folder for folder in path if "/versions/" not in folder)
    command = [sys.executable, "-m", "tox", "-c", str(HERE / "tox.ini"), "--workdir", str(tmp_path), *args]
    return subprocess.run(command, capture_output=True, text=True, env={**outside, **env}, timeout=300)


def test_tox_finds_every_python_pyenv_installed(tmp_path: Path) -> None:
    need("pyenv", "the test checks that tox finds the Pythons pyenv installed")
    bare = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True, check=True).stdout
    installed = {v for v in SUPPORTED for line in bare.split() if re.fullmatch(re.escape(v) + r"\.\d+", line)}
    envs = ",".join("py" + v.replace(".", "") for v in SUPPORTED)
    config = tox_outside_pyenv(tmp_path, "config", "-e", envs, "-k", "py_dot_ver")
    assert config.returncode == 0, config.stderr
    found = re.findall(r"^py_dot_ver = (3\.\d+)$", config.stdout, re.M)
    assert installed and installed <= set(found), config.stdout


@pytest.mark.parametrize("ci", ["", "true"])
@pytest.mark.parametrize("command", ["run", "run-parallel"])  # the README's runs in parallel
def test_tox_names_a_python_it_did_not_test(tmp_path: Path, ci: str, command: str) -> None:
    missing = next(v for v in SUPPORTED if v != "{}.{}".format(*sys.version_info))
    env = "py" + missing.replace(".", "")
    empty = tmp_path / "empty"
    empty.mkdir()
    run = tox_outside_pyenv(
        tmp_path, command, "-e", env, PATH=str(empty), PYENV_ROOT=str(empty), HOME=str(empty), CI=ci
    )
    lines = run.stdout.strip().splitlines()
    assert lines[-1].startswith(f"*** NOT TESTED on Python {missing}: tox found no interpreter"), run.stdout
    assert f"{env}: {'FAIL' if ci else 'SKIP'}" in run.stdout
    if ci:
        assert run.returncode == 1


TYPED_APP = """
import session

summary: session.Summary = session.summarize("chat.jsonl")
records: int = summary.records
wrong: str = summary.records
"""


def installed_here() -> bool:
    """Whether this Python has the wheel of these very files installed, as tox installs it
    into each of its environments: the modules and the stub package's marker, byte for byte."""
    import importlib.metadata

    try:
        files = importlib.metadata.distribution("session-jsonl").files or []
    except importlib.metadata.PackageNotFoundError:
        return False
    shipped = {file.as_posix(): file for file in files}
    wanted = [*MODULES, "session-stubs/py.typed"]
    return all(
        name in shipped
        and Path(str(shipped[name].locate())).is_file()
        and Path(str(shipped[name].locate())).read_bytes() == (HERE / name).read_bytes()
        for name in wanted
    )


def installed_copy(tmp_path: Path) -> Path:
    """A Python that imports this project's wheel: this one where it is installed already
    (see installed_here), else a new virtual environment with the wheel built and installed."""
    if installed_here():
        return Path(sys.executable)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(HERE)], check=True
    )
    [wheel] = tmp_path.glob("session_jsonl-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
    return python


def test_the_installed_copy_is_typed(tmp_path: Path) -> None:
    need("mypy", "the test type-checks an application that imports the installed wheel")
    python = installed_copy(tmp_path)
    sample = sample_file(tmp_path / "s.jsonl", runs=1)
    page = subprocess.run(  # from tmp_path: `-m` looks in the current folder first
        [str(python), "-m", "session", "html", str(sample)], capture_output=True, text=True, cwd=tmp_path
    )
    assert page.returncode == 0 and page.stdout.startswith("<!DOCTYPE html>"), page.stderr  # both modules
    app = tmp_path / "app.py"
    app.write_text(TYPED_APP, encoding="utf-8")
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--python-executable",
            str(python),
            str(app),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert checked.stdout.splitlines()[0] == (
        f"{app.name}:6: error: Incompatible types in assignment"
        ' (expression has type "int", variable has type "str")  [assignment]'
    ), checked.stdout
    assert "import-untyped" not in checked.stdout and checked.stdout.endswith(
        "Found 1 error in 1 file (checked 1 source file)\n"
    )


# ---------------------------------------------------------------------------- errors


def test_error_family() -> None:
    assert issubclass(session.FormatError, session.SessionError)
    assert issubclass(session.FormatError, ValueError)
    assert issubclass(session.UnsupportedVersionError, session.FormatError)
    assert issubclass(session.CodecError, session.SessionError) and issubclass(session.CodecError, ValueError)
    assert issubclass(session.RecordingError, session.SessionError)
    assert issubclass(session.RunOpenError, session.SessionError)
    assert issubclass(session.RunOpenError, RuntimeError)
    assert issubclass(session.LockedError, session.SessionError)


def test_format_error_renders_like_json_decode_error() -> None:
    exc = FormatError("seq 58 expected, found 60", "chat.jsonl", 57, 10240)
    assert str(exc) == "chat.jsonl: seq 58 expected, found 60 (line 57, offset 10240)"
    assert (exc.reason, exc.path, exc.line, exc.offset) == (
        "seq 58 expected, found 60",
        "chat.jsonl",
        57,
        10240,
    )
    assert str(FormatError("bad")) == "bad"


def test_errors_survive_pickling() -> None:
    exc = pickle.loads(pickle.dumps(FormatError("r", "p", 3, 9)))
    assert (exc.reason, exc.path, exc.line, exc.offset) == ("r", "p", 3, 9)
    version = pickle.loads(pickle.dumps(session.UnsupportedVersionError(2, "p", 1, 0)))
    assert version.version == 2 and version.line == 1 and "2" in str(version)


# ---------------------------------------------------------------------------- values


def test_execution_checks_its_field_types() -> None:
    assert Execution("a", "tool").attempt == 1
    with pytest.raises(TypeError, match="attempt"):
        Execution("a", "tool", attempt=True)
    with pytest.raises(TypeError, match="id"):
        Execution(1, "tool")  # type: ignore[arg-type]


def test_event_takes_keywords_after_type() -> None:
    event = Event("tool_queued", tool="ls")
    assert event.tool == "ls" and event.timestamp is None and event.result is None
    with pytest.raises(TypeError):
        Event("tool_queued", None)  # type: ignore[call-arg]
    assert Event("x", tool="a") == Event("x", tool="a")
    assert [f.name for f in dataclasses.fields(Event)][:3] == ["type", "timestamp", "execution"]


def test_event_lists_its_fields_once_more_and_only_in_its_init() -> None:
    """Event's keyword-only __init__ (Python 3.8 has no kw_only dataclasses) names the fields
    again: in the same order, with the same defaults; every other list is derived."""
    fields = {f.name: f.default for f in dataclasses.fields(Event)}
    params = list(inspect.signature(Event.__init__).parameters.values())[1:]
    assert [p.name for p in params] == list(fields)
    assert [p.default for p in params[1:]] == list(fields.values())[1:]
    assert set(session._PUTS) == set(fields) - {"type", "timestamp", "state", "delta"}
    kinds = session._EVENT_DATA_KINDS
    assert list(kinds) == [f.name for f in dataclasses.fields(session.EventData)]
    assert (kinds["turn_index"], kinds["redacted"], kinds["retry"], kinds["args"]) == (int, list, dict, None)


def test_call_config_repr_hides_the_api_key() -> None:
    assert "sk-secret" not in repr(CallConfig(api_key="sk-secret", max_tokens=5))


def test_call_ref_round_trips_through_json() -> None:
    ref = CallRef("s" * 32, "r" * 32, "call-1", 2)
    assert CallRef.from_json(ref.to_json()) == ref
    assert CallRef.from_json(json.dumps(ref.to_json())) == ref
    assert {ref: 1}[CallRef("s" * 32, "r" * 32, "call-1", 2)] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        ref.attempt = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="attempt"):
        CallRef.from_json({"session_id": "s", "run_id": "r", "execution_id": "e"})
    with pytest.raises(TypeError):
        CallRef.from_json({"session_id": "s", "run_id": "r", "execution_id": "e", "attempt": "1"})


def test_the_format_page_shows_what_call_ref_to_json_gives() -> None:
    [example] = re.findall(r"```python\n(.*?)```", doc_section("### CallRef", "docs/format.md"), re.S)
    test = doctest.DocTestParser().get_doctest(
        example, {"session": session, "json": json}, "docs/format.md: CallRef", None, 0
    )
    out = io.StringIO()
    result = doctest.DocTestRunner().run(test, out=out.write)
    assert result.attempted == 4 and result.failed == 0, out.getvalue()


def test_event_data_gives_a_typed_view(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    event = full_event(
        "my_custom_event", execution=TOOL, request=ModelRequest([], config=CallConfig(extra={"password": 1}))
    )
    with session.create(path) as s, s.begin_run() as run:
        run.record(event)
        run.record(full_event("turn_end"))
        run.record(Event("turn_start"))
    rs = records(path)
    view = EventData.from_record(rs[2])
    assert view.execution == TOOL and view.turn_index == 2
    assert JSONCodec().decode(view.message) == event.message
    assert JSONCodec().decode(view.partial_message) == event.partial_message
    assert view.request == {"messages": [], "tools": [], "config": {"extra": {}}}
    assert view.redacted == ("config.extra.password",)
    assert (view.tool_id, view.tool, view.tool_label, view.preview) == ("call-1", "ls", "List", "pre")
    assert (view.args, view.result, view.details) == ({"dir": "/"}, {"files": []}, {"ms": 3})
    assert view.is_error is True and view.disposition == "done" and view.context_operation == "project"
    assert view.context_items == [{"id": 1}] and view.compaction == {"kept": 2}
    assert view.retry == RetryInfo(3, 1.5, {"message": "rate limited"})
    assert view.summary == RunSummary(1, 2, 1, "stop") and view.recovery == "length"
    assert view.error == {"message": "boom", "type": "ValueError"} and view.committed is False
    assert EventData.from_record(rs[3]).committed is True
    assert EventData.from_record(rs[4]) == EventData()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({"tool": 1}, "data.tool must be a string, found an integer"),
        ({"is_error": 1}, "data.is_error must be a boolean"),
        ({"turn_index": 1.0}, "data.turn_index must be an integer, found a number"),
        ({"execution": {"id": "x"}}, "data.execution.kind must be a string, found null"),
        (
            {"execution": {"id": "x", "kind": "tool", "attempt": "2"}},
            "data.execution.attempt must be an integer",
        ),
        ({"retry": {"delay": "1s"}}, "data.retry.delay must be a number"),
        ({"retry": {"error": "x"}}, "data.retry.error must be an object"),
        ({"summary": {"end_reason": 1}}, "data.summary.end_reason must be a string"),
        ({"redacted": [1]}, "data.redacted must hold strings"),
        ({"retry": {"delay": 10**400}}, "data.retry.delay is out of range"),
        ({"error": "text"}, "data.error must be an object, found a string"),
        ({"request": []}, "data.request must be an object"),
    ],
)
def test_event_data_of_the_wrong_type_is_a_format_error(data: Dict[str, Any], reason: str) -> None:
    record = session.Record(SID, 7, "x", "t", RID, data, 420)
    with pytest.raises(FormatError, match=re.escape(reason)) as info:
        EventData.from_record(record)
    assert (info.value.line, info.value.offset) == (7, 420)
    if "execution" in data:
        with pytest.raises(FormatError):
            _ = record.ref


# ---------------------------------------------------------------------------- codec


class Color(str, enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    ONE = 1


@dataclasses.dataclass
class Note:
    text: str
    at: Optional[dt.datetime] = None
    tags: List[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Box:
    inner: Any
    label: str = ""


class Point:
    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)


def point_codec() -> JSONCodec:
    return JSONCodec(TypeSpec("test.point", Point, lambda p: [p.x, p.y], lambda v: Point(*v)))


def test_builtin_types_round_trip_with_agentgo_ids() -> None:
    codec = JSONCodec(TypeSpec("test.note", Note))
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    message = Message("user", [session.text_block("hi")], "stop", {"input": 1}, {"k": [1]}, when)
    snapshot = AgentSnapshot(
        AgentState([message, Note("a")], [], {"total_tokens": 3}, {"completed_turns": 1}),
        steering_queue=[message],
        follow_up_queue=[],
    )
    encoded = codec.encode(snapshot)
    assert encoded["$type"] == "agentgo.agent-snapshot.v1"
    assert encoded["value"]["state"]["$type"] == "agentgo.agent-state.v1"
    assert encoded["value"]["state"]["value"]["messages"][0]["$type"] == "agentgo.message.v1"
    assert encoded["value"]["steering_queue"][0]["value"]["timestamp"] == "2026-01-02T03:04:05.000006+02:00"
    assert codec.decode(json.loads(json.dumps(encoded))) == snapshot


def odd_offsets() -> List[dt.tzinfo]:
    """Time zones whose UTC offset has seconds, which RFC 3339 cannot write."""
    zones: List[dt.tzinfo] = [
        dt.timezone(dt.timedelta(seconds=30)),
        dt.timezone(-dt.timedelta(hours=3, seconds=59)),
        dt.timezone(dt.timedelta(minutes=19, seconds=32)),  # Amsterdam's mean time until 1937
        dt.timezone(dt.timedelta(hours=1, microseconds=1)),
    ]
    if sys.version_info >= (3, 9):
        import zoneinfo

        zones.append(zoneinfo.ZoneInfo("Europe/Amsterdam"))  # +00:19:32 in 1890
    return zones


ODD_MOMENT = dt.datetime(1890, 6, 1, 12, 0, 0, 250000)


def test_a_datetime_whose_offset_has_seconds_is_written_in_utc_exactly() -> None:
    codec = JSONCodec()
    for zone in odd_offsets():
        moment = ODD_MOMENT.replace(tzinfo=zone)
        offset = moment.utcoffset()
        assert offset is not None and offset % dt.timedelta(minutes=1)
        text = codec.encode(moment)
        assert text == (ODD_MOMENT - offset).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), zone
        back = codec.decode(codec.encode(Message("u", [], timestamp=moment))).timestamp
        assert back == moment and back.utcoffset() == dt.timedelta(0)
    amsterdam = dt.datetime(1890, 6, 1, 12, tzinfo=dt.timezone(dt.timedelta(minutes=19, seconds=32)))
    assert codec.encode(amsterdam) == "1890-06-01T11:40:28.000000Z"


def test_datetime_is_rfc3339_with_z_for_utc() -> None:
    encoded = JSONCodec().encode(Message("user", [], timestamp=T0))
    assert encoded["value"]["timestamp"] == "2026-12-02T09:27:36.123456Z"
    assert JSONCodec().encode(dt.datetime(2026, 1, 1, tzinfo=UTC)) == "2026-01-01T00:00:00.000000Z"


def test_message_fields_are_left_out_as_go_leaves_them_out() -> None:
    # Go writes role, content and timestamp always, the rest only when set
    assert JSONCodec().encode(Message("user", [session.text_block("x")], timestamp=T0))["value"] == {
        "role": "user",
        "content": [{"type": "text", "text": "x"}],
        "timestamp": "2026-12-02T09:27:36.123456Z",
    }


def test_registered_dataclass_restores_nested_values_and_datetimes() -> None:
    codec = JSONCodec(TypeSpec("test.note", Note), TypeSpec("test.box", Box))
    value = Box(Note("n", T0, ["a"]), "lbl")
    assert codec.decode(json.loads(json.dumps(codec.encode(value)))) == value
    # a datetime outside an annotated field stays a string
    assert codec.decode(codec.encode({"at": T0})) == {"at": "2026-12-02T09:27:36.123456Z"}


def test_string_annotations_an_old_python_cannot_evaluate() -> None:
    namespace: Dict[str, Any] = {}
    source = textwrap.dedent(
        """
        from __future__ import annotations
        import dataclasses, datetime
        @dataclasses.dataclass
        class Stamp:
            a: datetime.datetime | None = None
            b: "Optional[datetime]" = None
            c: int | None = None
        """
    )
    exec(compile(source, "<stamp>", "exec"), namespace)
    stamp_cls = namespace["Stamp"]
    codec = JSONCodec(TypeSpec("test.stamp", stamp_cls))
    decoded = codec.decode(codec.encode(stamp_cls(T0, T0, 3)))
    assert decoded.a == T0 and decoded.b == T0 and decoded.c == 3


def test_unordinary_dicts_are_escaped_and_come_back() -> None:
    codec = JSONCodec()
    tricky = [{"$type": "x", "value": 1}, {"$object": 2}, {"$object": {"$object": 3}}, {"$type": "y"}]
    encoded = codec.encode(tricky)
    assert encoded[0] == {"$object": {"$type": "x", "value": 1}}
    assert encoded[1] == {"$object": {"$object": 2}}
    assert encoded[3] == {"$type": "y"}  # not ambiguous: left alone
    assert codec.decode(json.loads(json.dumps(encoded))) == tricky


def test_tuples_become_arrays() -> None:
    assert JSONCodec().encode((1, (2,))) == [1, [2]]


def test_functions_encode_recursively() -> None:
    codec = JSONCodec(
        TypeSpec("test.point", Point, lambda p: [p.x, p.y], lambda v: Point(*v)),
        TypeSpec("test.box", Box),
    )
    value = Box(Point(1, 2))
    assert codec.encode(value)["value"]["inner"] == {"$type": "test.point", "value": [1, 2]}
    assert codec.decode(codec.encode(value)) == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": {1, 2}}, r"builtins\.set at \$\.a"),
        ([0, b"x"], r"builtins\.bytes at \$\[1\]"),
        ({"a": [1.0, float("nan")]}, r"non-finite float nan at \$\.a\[1\]"),
        ({"a": float("inf")}, r"non-finite float inf at \$\.a"),
        (Message("user", [{"type": "text", "text": Color.RED}]), r"Color at \$\.content\[0\]\.text"),
        ({"x y": Point(1, 2)}, r"Point at \$\[\"x y\"\]"),
        ({1: "a"}, r"object key 1 of type int at \$"),
        (Message("user", [], timestamp=dt.datetime(2026, 1, 1)), r"naive datetime .* at \$\.timestamp"),
        (Note("x"), r"unregistered type test_session\.Note at \$"),
        (dict, r"unregistered type builtins\.type"),
    ],
)
def test_anything_else_is_a_codec_error_naming_type_and_path(value: Any, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        JSONCodec().encode(value)


def test_subclasses_of_json_types_are_not_lowered() -> None:
    class MyDict(dict):  # type: ignore[type-arg]
        pass

    for value in (MyDict(a=1), Color.RED, Level.ONE):
        with pytest.raises(CodecError):
            JSONCodec().encode(value)


@pytest.mark.parametrize(
    ("encoded", "message"),
    [
        ({"$type": "nope", "value": 1}, "unknown type id 'nope'"),
        ([{"$type": 5, "value": 1}], r"unknown type id 5 at \$\[0\]"),
        ({"a": {"$object": [1]}}, r"\$object must wrap an object at \$\.a"),
        ({"$type": "agentgo.message.v1", "value": []}, "value must be an object"),
        ({"$type": "agentgo.message.v1", "value": {"content": []}}, "rejects its fields"),
        (
            {"$type": "agentgo.message.v1", "value": {"role": "u", "content": [], "timestamp": "yesterday"}},
            "RFC 3339",
        ),
        (
            {
                "$type": "agentgo.message.v1",
                "value": {"role": "u", "content": [], "timestamp": "2026-01-01T00:00:00"},
            },
            "offset",
        ),
        ({"$type": "test.point", "value": "not a list"}, "test.point decode function failed"),
    ],
)
def test_decoding_bad_values_is_a_codec_error(encoded: Any, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        point_codec().decode(encoded)


def test_decoding_never_builds_a_class_by_name() -> None:
    hostile = {"$type": "os.system", "value": "echo pwned"}
    with pytest.raises(CodecError, match=r"unknown type id 'os\.system'"):
        JSONCodec().decode(hostile)
    assert JSONCodec().decode({"$object": {"$type": "os.system", "value": 1}}) == {
        "$type": "os.system",
        "value": 1,
    }


def test_deep_nesting_is_a_codec_error() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(CodecError, match="nested too deeply"):
        JSONCodec().encode(deep)
    nested: Any = 1
    for _ in range(100_000):
        nested = {"a": nested}
    with pytest.raises(CodecError, match="nested too deeply"):
        JSONCodec().decode(nested)


def nested(kind: str, depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = {"a": value} if kind == "object" else [value] if kind == "array" else Box(value)
    return value


DEEP_CODEC = JSONCodec(TypeSpec("test.box", Box))


def unnested(value: Any) -> Tuple[str, int, Any]:
    """What *nested* made *value* of: its kind, depth and innermost value (compared without
    recursion, which a value this deep would overflow)."""
    kinds, depth = set(), 0
    while type(value) in (dict, list, Box):
        kinds.add(type(value))
        value = value["a"] if type(value) is dict else value[0] if type(value) is list else value.inner
        depth += 1
    kind = {dict: "object", list: "array", Box: "tagged"}[kinds.pop()] if len(kinds) == 1 else str(kinds)
    return kind, depth, value


def deepest_checkpoint(tmp_path: Path, kind: str) -> Tuple[int, Path]:
    """The deepest value of *kind* save_checkpoint takes, and a file holding it."""

    def saved(depth: int) -> Optional[Path]:
        path = tmp_path / f"{kind}-{depth}.jsonl"
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        # A failed session lives in a cycle with its sticky error's traceback: collected now,
        # not by a collection that a deep encoding triggers, with its callbacks on that stack.
        gc.collect()
        s = session.create(path, DEEP_CODEC)
        try:
            s.begin_run().save_checkpoint(nested(kind, depth))
            s.close()
        except RecordingError:
            with contextlib.suppress(RecordingError):
                s.close()
            return None
        return path

    low, high = 1, 4000
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if saved(middle) else (low, middle - 1)
    path = saved(low)
    assert path is not None and not saved(low + 1)
    return low, path


@pytest.mark.parametrize("kind", ["object", "array", "tagged"])
def test_the_deepest_checkpoint_the_writer_takes_loads_back(tmp_path: Path, kind: str) -> None:
    depth, path = deepest_checkpoint(tmp_path, kind)
    assert depth > 200

    def load(frames: int) -> Any:
        if frames:
            return load(frames - 1)
        with session.open(path, DEEP_CODEC) as s:
            checkpoint = s.load_checkpoint()
        assert checkpoint is not None
        return checkpoint.snapshot

    assert unnested(load(0)) == (kind, depth, 0)
    assert unnested(load(sys.getrecursionlimit() // 2)) == (kind, depth, 0)  # deeper than it was saved


DEEPEST_AT_TOP_LEVEL = """
import contextlib, os, sys, tempfile
import session
from test_session import DEEP_CODEC, nested, unnested

kind, folder = sys.argv[1], tempfile.mkdtemp()
low, high = 1, 4000
while low < high:  # save_checkpoint right at the top level: the shallowest stack it can have
    middle = (low + high + 1) // 2
    s = session.create(os.path.join(folder, str(middle)), DEEP_CODEC)
    try:
        s.begin_run().save_checkpoint(nested(kind, middle))
        low = middle
    except session.RecordingError:
        high = middle - 1
    with contextlib.suppress(session.RecordingError):
        s.close()
s = session.open(os.path.join(folder, str(low)), DEEP_CODEC)
print(low, unnested(s.load_checkpoint().snapshot) == (kind, low, 0))
"""


@pytest.mark.parametrize("kind", ["object", "array", "tagged"])
def test_the_deepest_checkpoint_saved_at_the_top_level_loads_back(tmp_path: Path, kind: str) -> None:
    script = tmp_path / "deepest.py"
    script.write_text(DEEPEST_AT_TOP_LEVEL)
    done = subprocess.run(
        [sys.executable, str(script), kind],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=HERE,
        env=dict(os.environ, PYTHONPATH=str(HERE)),
    )
    assert done.returncode == 0, done.stderr
    depth, loaded = done.stdout.split()
    assert int(depth) > 200 and loaded == "True"


def test_duplicate_registrations_are_refused() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        JSONCodec(TypeSpec("agentgo.message.v1", Note))
    with pytest.raises(ValueError, match="registered twice"):
        JSONCodec(TypeSpec("test.message", Message))
    with pytest.raises(ValueError, match="registered twice"):
        JSONCodec(TypeSpec("a", Note), TypeSpec("a", Box))


def test_type_spec_checks_what_it_is_given() -> None:
    with pytest.raises(TypeError, match="not a dataclass"):
        TypeSpec("test.point", Point)
    with pytest.raises(ValueError, match="both"):
        TypeSpec("test.point", Point, encode=lambda p: 1)
    with pytest.raises(ValueError, match="empty"):
        TypeSpec("", Note)
    with pytest.raises(TypeError):
        JSONCodec("test.note")  # type: ignore[arg-type]


def test_codec_is_immutable_and_shareable_between_threads() -> None:
    codec = JSONCodec(TypeSpec("test.note", Note))
    value = [Note(str(i), T0) for i in range(200)]
    results: List[Any] = []

    def work() -> None:
        results.append(codec.decode(codec.encode(value)))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [value] * 8
    assert not hasattr(codec, "register")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-02T03:04:05.1Z", dt.datetime(2026, 1, 2, 3, 4, 5, 100000, tzinfo=UTC)),
        ("2026-01-02T03:04:05.123456789Z", dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)),
        ("2026-01-02T03:04:05Z", dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02t03:04:05.5-05:30", dt.datetime(2026, 1, 2, 8, 34, 5, 500000, tzinfo=UTC)),
    ],
)
def test_rfc3339_times_decode_alike_on_every_python(text: str, expected: dt.datetime) -> None:
    value = {"role": "u", "content": [], "timestamp": text}
    decoded = JSONCodec().decode({"$type": "agentgo.message.v1", "value": value})
    assert decoded.timestamp == expected and decoded.timestamp.utcoffset() is not None


def test_datetime_annotations_through_a_module_alias() -> None:
    namespace: Dict[str, Any] = {}
    source = "from __future__ import annotations\nimport dataclasses, datetime as dtm\n"
    source += "@dataclasses.dataclass\nclass Seen:\n    at: dtm.datetime | None = None\n"
    exec(compile(source, "<seen>", "exec"), namespace)
    codec = JSONCodec(TypeSpec("test.seen", namespace["Seen"]))
    assert codec.decode(codec.encode(namespace["Seen"](T0))).at == T0


def test_encoding_shares_unchanged_values_and_never_changes_its_input() -> None:
    codec = JSONCodec()
    plain = {"a": [1, {"b": "c"}], "d": None}
    assert codec.encode(plain) is plain  # nothing to change: nothing copied
    mixed = {"a": [1, (2, 3)], "at": T0, "keep": {"x": 1}}
    encoded = codec.encode(mixed)
    assert encoded == {"a": [1, [2, 3]], "at": "2026-12-02T09:27:36.123456Z", "keep": {"x": 1}}
    assert mixed == {"a": [1, (2, 3)], "at": T0, "keep": {"x": 1}} and encoded["keep"] is mixed["keep"]


# agentgo's message vocabulary: builders, checks on the way out, and round trips with Go

AGENTGO_SAMPLES = HERE / "testdata" / "agentgo" / "values.jsonl"  # as agentgo's codec writes them


def test_builders_make_agentgo_blocks() -> None:
    assert session.text_block("hi") == {"type": "text", "text": "hi"}
    assert session.thinking_block("hm") == {"type": "thinking", "thinking": "hm"}
    assert session.tool_call_block("c1", "ls", {"d": "/"}) == {
        "type": "toolCall",
        "tool_call": {"id": "c1", "name": "ls", "args": {"d": "/"}},
    }
    assert session.tool_call_block(
        "c2",
        "grep",
        None,
        args_invalid=True,
        args_raw_text='{"p',
        args_parse_error="EOF",
        thought_signature="sig",
    ) == {
        "type": "toolCall",
        "tool_call": {
            "id": "c2",
            "name": "grep",
            "args": {},
            "args_invalid": True,
            "args_raw_text": '{"p',
            "args_parse_error": "EOF",
            "thought_signature": "sig",
        },
    }
    assert session.image_block(data=b"\x89PNG", mime_type="image/png") == {
        "type": "image",
        "image": {"data": "iVBORw==", "mime_type": "image/png"},
    }
    assert session.image_block(data="iVBORw==", mime_type="image/png") == session.image_block(
        data=b"\x89PNG", mime_type="image/png"
    )
    assert session.image_block(url="https://example.com/a.jpg") == {
        "type": "image",
        "image": {"url": "https://example.com/a.jpg"},
    }
    assert session.tool_reference_block("web_search") == {"type": "tool_reference", "tool_name": "web_search"}
    assert session.STOP_REASONS == ("stop", "length", "toolUse", "error", "safety", "aborted")


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (lambda: session.text_block(b"hi"), TypeError),  # type: ignore[arg-type]
        (lambda: session.thinking_block(None), TypeError),  # type: ignore[arg-type]
        (lambda: session.tool_call_block("c1", "", {}), ValueError),
        (lambda: session.tool_call_block(1, "ls", {}), TypeError),  # type: ignore[arg-type]
        (lambda: session.tool_call_block("c1", "ls", "{not json"), ValueError),
        (lambda: session.tool_call_block("c1", "ls", {"s": {1}}), TypeError),
        (lambda: session.tool_call_block("c1", "ls", {"a": 1}, args_invalid=True), ValueError),
        (lambda: session.tool_call_block("c1", "ls", {}, args_raw_text="x"), ValueError),
        (lambda: session.tool_call_block("c1", "ls", {}, args_invalid=1), TypeError),  # type: ignore[arg-type]
        (lambda: session.image_block(data=b"x"), ValueError),  # no mime type
        (lambda: session.image_block(data=b"x", mime_type="image/png", url="u"), ValueError),
        (lambda: session.image_block(), ValueError),
        (lambda: session.image_block(data="not base64!", mime_type="image/png"), ValueError),
        (lambda: session.tool_reference_block(""), ValueError),
        (lambda: session.tool_result("", "x"), ValueError),
        (lambda: session.tool_result("c1", "x", is_error="yes"), TypeError),  # type: ignore[arg-type]
    ],
)
def test_builders_refuse_misuse(build: Callable[[], Any], error: type) -> None:
    with pytest.raises(error):
        build()


def test_tool_result_answers_its_call() -> None:
    ok = session.tool_result("c1", "120", timestamp=T0)
    assert ok == Message("tool", [session.text_block("120")], metadata={"tool_call_id": "c1"}, timestamp=T0)
    failed = session.tool_result("c2", [session.text_block("no such file")], is_error=True)
    assert failed.metadata == {"tool_call_id": "c2", "is_error": True}
    assert failed.timestamp is not None and failed.timestamp.utcoffset() == dt.timedelta(0)


def test_a_message_carries_the_time_it_was_made() -> None:
    before = dt.datetime.now(UTC)
    made = Message("user", [session.text_block("hi")])
    assert made.timestamp is not None and before <= made.timestamp <= dt.datetime.now(UTC)
    assert made.timestamp.tzinfo is UTC
    assert JSONCodec().encode(made)["value"]["timestamp"] != "0001-01-01T00:00:00Z"


def test_go_zero_time_and_null_content_come_back_as_none_and_go_out_as_go_wrote_them() -> None:
    codec = JSONCodec()
    go = {
        "$type": "agentgo.message.v1",
        "value": {"content": None, "role": "user", "timestamp": "0001-01-01T00:00:00Z"},
    }
    message = codec.decode(go)
    assert (message.content, message.timestamp) == (None, None)
    assert codec.encode(message) == {"$type": "agentgo.message.v1", "value": go["value"]}
    # an older writer left both out: read as Go reads the same line
    assert codec.decode({"$type": "agentgo.message.v1", "value": {"role": "user"}}) == message


def test_tool_call_args_are_written_as_the_model_sent_them(tmp_path: Path) -> None:
    tagged_looking = {"$type": "not a codec tag", "value": 1}
    blocks: List[session.ContentBlock] = [
        session.tool_call_block("c1", "ls", '{ "path" : "a b",\n "n": 1e2 }'),  # the model's text
        session.tool_call_block("c2", "ls", RawJSON(b'{"k": [1,  2]}')),
        session.tool_call_block("c3", "ls", {"opts": tagged_looking}),
        {"type": "toolCall", "tool_call": {"id": "c4", "name": "echo", "args": "a JSON string"}},
    ]
    [obj] = recorded(tmp_path, Event("message_end", message=Message("assistant", blocks, "toolUse")))
    text = (tmp_path / "events.jsonl").read_text(encoding="utf-8")
    assert '"args":{"path":"a b","n":1e2}' in text and '"args":{"k":[1,2]}' in text  # compacted only
    assert '"args":{"opts":{"$type":"not a codec tag","value":1}}' in text  # no codec escape
    decoded = JSONCodec().decode(obj["data"]["message"])
    assert [b["tool_call"]["args"] for b in decoded.content] == [
        {"path": "a b", "n": 100.0},
        {"k": [1, 2]},
        {"opts": tagged_looking},  # neither unescaped nor read as a tagged value
        "a JSON string",
    ]


def test_plain_dicts_in_agentgo_shape_are_accepted() -> None:
    codec = JSONCodec()
    by_hand = Message(
        "assistant",
        [
            {"type": "text", "text": "hi"},
            {"type": "text"},  # type: ignore[list-item]  # Go leaves an empty text out
            {"type": "toolCall", "tool_call": {"id": "c1", "name": "ls", "args": {}}},
            {"type": "image", "image": {"url": "u"}},
        ],
        "stop",
        {"output": 3},  # any of agentgo's keys
        timestamp=T0,
    )
    assert codec.decode(json.loads(json.dumps(codec.encode(by_hand)))) == by_hand
    full: session.Usage = {
        "provider": "p",
        "model": "m",
        "input": -1,
        "output": (1 << 63) - 1,
        "cache_read": 0,
        "cache_write": 0,
        "total_tokens": 9,
        "cost": {"input": 0.5, "output": 1, "cache_read": 0.0, "cache_write": 0.0, "total": 1.5},
    }
    assert codec.encode(Message("assistant", [], usage=full))["value"]["usage"] == full


def message_with(**fields: Any) -> Message:
    return Message("assistant", **{"content": [session.text_block("ok")], **fields})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            message_with(content=[{"type": "tool_call", "id": "c1"}]),
            r"unknown block type 'tool_call' .* at \$\.content\[0\]\.type",
        ),
        (message_with(content=[{"text": "x"}]), r"unknown block type None .* at \$\.content\[0\]\.type"),
        (
            message_with(content=[{"type": "text", "thinking": "x"}]),
            r"'thinking' does not belong in a text block at \$\.content\[0\]\.thinking",
        ),
        (
            message_with(content=[session.text_block("a"), {"type": "toolCall", "text": "x"}]),
            r"at \$\.content\[1\]\.text",
        ),
        (message_with(content=[{"type": "toolCall"}]), r"needs its tool_call at \$\.content\[0\]\.tool_call"),
        (
            message_with(content=[{"type": "image", "image": {"path": "a.png"}}]),
            r"'path' is not an image's at \$\.content\[0\]\.image\.path",
        ),
        (
            message_with(content=[{"type": "text", "text": 1}]),
            r"text must be a string, not int at \$\.content\[0\]\.text",
        ),
        (message_with(content=["plain text"]), r"block must be an object, not str at \$\.content\[0\]"),
        (message_with(content="plain text"), r"content must be a list of blocks, not str at \$\.content"),
        (
            message_with(content={"type": "text"}),
            r"content must be a list of blocks, not dict at \$\.content",
        ),
        (
            message_with(
                content=[
                    session.text_block("a"),
                    {"type": "toolCall", "tool_call": {"id": "c", "name": "n", "args": {1, 2}}},
                ]
            ),
            r"args are not one JSON value: .*set.* at \$\.content\[1\]\.tool_call\.args",
        ),
        (
            message_with(
                content=[{"type": "toolCall", "tool_call": {"id": "c", "name": "n", "args": RawJSON("{")}}]
            ),
            r"args are not one JSON value: .* at \$\.content\[0\]\.tool_call\.args",
        ),
        (
            message_with(
                content=[{"type": "toolCall", "tool_call": {"id": "c", "name": "n", "arguments": {}}}]
            ),
            r"'arguments' is not a tool call's at \$\.content\[0\]\.tool_call\.arguments",
        ),
        (message_with(usage={"input": 1.0}), r"input must be an integer, not float at \$\.usage\.input"),
        (message_with(usage={"output": True}), r"output must be an integer, not bool at \$\.usage\.output"),
        (
            message_with(usage={"total_tokens": 1 << 63}),
            r"does not fit in 64 bits at \$\.usage\.total_tokens",
        ),
        (
            message_with(usage={"input": 1, "requests": 2}),
            r"'requests' is not agentgo's usage .* at \$\.usage\.requests",
        ),
        (
            message_with(usage={"cost": {"total": "1"}}),
            r"total must be a number, not str at \$\.usage\.cost\.total",
        ),
        (
            message_with(usage={"cost": {"total": 1 << 2000}}),
            r"total of about 602 digits is not a finite double at \$\.usage\.cost\.total",
        ),
        (
            message_with(usage={"cost": {"input": float("nan")}}),
            r"input nan is not a finite double at \$\.usage\.cost\.input",
        ),
        (
            message_with(usage={"input": -1 << 20000}),
            r"input of about 6021 digits does not fit in 64 bits at \$\.usage\.input",
        ),
        (message_with(stop_reason="end_turn"), r"stop reason 'end_turn' is not one of stop, length, toolUse"),
        (message_with(stop_reason="tool_use"), r"at \$\.stop_reason"),
        (message_with(timestamp="2026-01-01"), r"timestamp must be a datetime, not str at \$\.timestamp"),
        (message_with(metadata=[1]), r"metadata must be an object, not list at \$\.metadata"),
        (
            AgentState([{"role": "user", "content": []}]),
            r"a plain dict where agentgo needs a tagged value .* at \$\.messages\[0\]",
        ),
        (
            AgentState([message_with()], artifacts=[{"id": "a1", "kind": "note"}]),
            r"a plain dict where agentgo needs a tagged value .* at \$\.artifacts\[0\]",
        ),
        (AgentState([message_with(content="x")]), r"at \$\.messages\[0\]\.content"),
        (AgentState(total_usage={"input": 0.5}), r"at \$\.total_usage\.input"),
        (
            AgentState(progress={"pending_messages": [{"role": "user"}]}),
            r"at \$\.progress\.pending_messages\[0\]",
        ),
        (AgentState(progress={"tool_calls": 1.5}), r"at \$\.progress\.tool_calls"),
        (
            AgentState(progress={"consecutive_tool_errors": {"ls": None}}),
            r"at \$\.progress\.consecutive_tool_errors\.ls",
        ),
        (AgentState(progress={"step": 1}), r"'step' is not agentgo's run progress .* at \$\.progress\.step"),
        (AgentSnapshot(AgentState(), steering_queue=[{"role": "user"}]), r"at \$\.steering_queue\[0\]"),
        (AgentSnapshot(AgentState(), follow_up_queue=["next"]), r"at \$\.follow_up_queue\[0\]"),
        (AgentSnapshot(AgentState([message_with(usage={"x": 1})])), r"at \$\.state\.messages\[0\]\.usage\.x"),
        (AgentSnapshot({"messages": []}), r"state must be an AgentState, not dict at \$\.state"),  # type: ignore[arg-type]
    ],
)
def test_what_go_would_drop_or_refuse_is_a_codec_error_naming_its_path(value: Any, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        JSONCodec().encode(value)


@pytest.mark.parametrize("checkpoint", [False, True])
def test_record_and_save_checkpoint_refuse_what_go_cannot_read(tmp_path: Path, checkpoint: bool) -> None:
    bad = Message("assistant", [session.text_block("a"), {"type": "tool_call", "name": "ls"}])  # type: ignore[list-item]
    s = session.create(tmp_path / "s.jsonl")
    run = s.begin_run()
    save = functools.partial(run.save_checkpoint, AgentSnapshot(AgentState([bad])))
    with pytest.raises(RecordingError, match=r"unknown block type 'tool_call'") as caught:
        save() if checkpoint else run.record(Event("message_end", message=bad))
    assert isinstance(caught.value.__cause__, CodecError)
    path = "$.state.messages[0].content[1].type" if checkpoint else "$.content[1].type"
    assert str(caught.value.__cause__).endswith(f" at {path}")
    with pytest.raises(RecordingError):
        s.close()


def as_instant(text: Any) -> Any:
    try:
        return session._parse_rfc3339(text)
    except (session._CodecFault, TypeError):
        return go_time(text)


def go_time(value: Any) -> Any:
    """*value* with every timestamp string as the instant it names: Go writes 2026-...01.5Z
    where Python writes 2026-...01.500000Z.  (A "timestamp" key in metadata may hold any
    text: what is no time stays as it is.)"""
    if type(value) is dict:
        return {
            key: as_instant(item) if key == "timestamp" and item != "0001-01-01T00:00:00Z" else go_time(item)
            for key, item in value.items()
        }
    if type(value) is list:
        return [go_time(item) for item in value]
    return value


def test_values_go_writes_come_back_and_go_out_as_go_wrote_them() -> None:
    codec = JSONCodec()
    samples = AGENTGO_SAMPLES.read_text(encoding="utf-8").splitlines()
    for line in samples:
        value = codec.decode(json.loads(line))
        again = json.loads(session._dumps(codec.encode(value)))
        assert go_time(again) == go_time(json.loads(line)), line
    values = [codec.decode(json.loads(line)) for line in samples]
    tool_call = values[1].content[1]["tool_call"]
    assert tool_call["args"]["opts"] == {"$type": "not a codec tag", "value": [1, 2.5, 12345678901234567890]}
    assert values[1].timestamp == dt.datetime(2026, 8, 26, 10, 0, 1, 123456, tzinfo=UTC)
    assert (
        values[3].content[0]["tool_call"]["args_invalid"] is True
        and values[3].content[1]["tool_call"]["args"] is None
    )
    assert (values[5].content, values[5].timestamp) == (None, None)
    assert values[7].messages is None and values[7].progress["active"] is False
    assert values[8].state.progress["pending_messages"][0].content == [session.text_block("and then?")]


GO_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)  # Go makes a lone surrogate U+FFFD
GO_INT = st.integers(-(1 << 63), (1 << 63) - 1)


def go_containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keys = st.sampled_from(["$type", "value", "$object"]) | GO_TEXT
    return st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3)


GO_JSON = st.recursive(
    st.none() | st.booleans() | GO_INT | st.floats(allow_nan=False, allow_infinity=False) | GO_TEXT,
    go_containers,
    max_leaves=10,
)
BLOCKS = st.one_of(
    GO_TEXT.map(session.text_block),
    GO_TEXT.map(session.thinking_block),
    st.builds(
        session.tool_call_block,
        GO_TEXT,
        GO_TEXT.filter(bool),
        st.dictionaries(GO_TEXT, GO_JSON, max_size=3),
        thought_signature=GO_TEXT,
    ),
    st.builds(
        lambda data, mime: session.image_block(data=data, mime_type=mime),
        st.binary(max_size=40),
        GO_TEXT.filter(bool),
    ),
    GO_TEXT.filter(bool).map(session.tool_reference_block),
)
COUNTS = ("input", "output", "cache_read", "cache_write", "total_tokens")
COST = st.fixed_dictionaries({}, optional={key: st.floats(-1e9, 1e9) for key in (*COUNTS[:4], "total")})
USAGE = st.fixed_dictionaries(
    {}, optional={**dict.fromkeys(COUNTS, GO_INT), "provider": GO_TEXT, "model": GO_TEXT, "cost": COST}
)
MESSAGES = st.builds(
    Message,
    st.sampled_from(["user", "assistant", "system", "tool"]),
    st.none() | st.lists(BLOCKS, max_size=4),
    st.sampled_from(("", *session.STOP_REASONS)),
    st.none() | USAGE,
    st.none() | st.dictionaries(GO_TEXT, GO_JSON, max_size=3),
    st.none() | st.datetimes(min_value=dt.datetime(2, 1, 1), timezones=st.just(UTC)),
)


@hypothesis.settings(max_examples=sweep(300, 100), deadline=None, derandomize=True, database=None)
@hypothesis.given(MESSAGES)
def test_every_message_the_builders_make_round_trips(message: Message) -> None:
    codec = JSONCodec()
    assert codec.decode(json.loads(session._dumps(codec.encode(message)))) == message


GO_MIRROR = r"""
// Reads agentgo codec values, one JSON line each, as agentgo's Go types would, and writes
// them back as agentgo's codec does (keys sorted); a value Go refuses becomes {"error": "..."}.
// The types mirror agentgo's message.go, tool.go and state.go: same fields, same tags.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

type ContentBlock struct {
	Type     string     `json:"type"`
	Text     string     `json:"text,omitempty"`
	Thinking string     `json:"thinking,omitempty"`
	ToolCall *ToolCall  `json:"tool_call,omitempty"`
	Image    *ImageData `json:"image,omitempty"`
	ToolName string     `json:"tool_name,omitempty"`
}

type ToolCall struct {
	ID               string          `json:"id"`
	Name             string          `json:"name"`
	Args             json.RawMessage `json:"args"`
	ArgsInvalid      bool            `json:"args_invalid,omitempty"`
	ArgsRawText      string          `json:"args_raw_text,omitempty"`
	ArgsParseError   string          `json:"args_parse_error,omitempty"`
	ThoughtSignature string          `json:"thought_signature,omitempty"`
}

type ImageData struct {
	Data     string `json:"data,omitempty"`
	URL      string `json:"url,omitempty"`
	MimeType string `json:"mime_type,omitempty"`
}

type Cost struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cache_read"`
	CacheWrite float64 `json:"cache_write"`
	Total      float64 `json:"total"`
}

type Usage struct {
	Provider    string `json:"provider,omitempty"`
	Model       string `json:"model,omitempty"`
	Input       int    `json:"input"`
	Output      int    `json:"output"`
	CacheRead   int    `json:"cache_read"`
	CacheWrite  int    `json:"cache_write"`
	TotalTokens int    `json:"total_tokens"`
	Cost        *Cost  `json:"cost,omitempty"`
}

type Message struct {
	Role       string         `json:"role"`
	Content    []ContentBlock `json:"content"`
	StopReason string         `json:"stop_reason,omitempty"`
	Usage      *Usage         `json:"usage,omitempty"`
	Metadata   map[string]any `json:"metadata,omitempty"`
	Timestamp  time.Time      `json:"timestamp"`
}

type RunProgress struct {
	Active                bool           `json:"active"`
	NextTurn              bool           `json:"next_turn"`
	CompletedTurns        int            `json:"completed_turns"`
	LengthRecoveries      int            `json:"length_recoveries"`
	ToolCalls             int            `json:"tool_calls"`
	ToolErrors            int            `json:"tool_errors"`
	ConsecutiveToolErrors map[string]int `json:"consecutive_tool_errors,omitempty"`
	PendingMessages       []Tagged       `json:"pending_messages,omitempty"`
}

type AgentState struct {
	Messages   []Tagged    `json:"messages"`
	Artifacts  []Tagged    `json:"artifacts,omitempty"`
	TotalUsage Usage       `json:"total_usage"`
	Progress   RunProgress `json:"progress"`
}

type Finding struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	Text string `json:"text,omitempty"`
}

type AgentSnapshot struct {
	State         Tagged   `json:"state"`
	SteeringQueue []Tagged `json:"steering_queue,omitempty"`
	FollowUpQueue []Tagged `json:"follow_up_queue,omitempty"`
}

// Tagged is a field typed as an interface (AgentMessage, Artifact): only a registered,
// tagged value fits there.
type Tagged struct {
	ID    string
	Value any
}

func (t *Tagged) UnmarshalJSON(data []byte) error {
	var wire struct {
		Type  *string         `json:"$type"`
		Value json.RawMessage `json:"value"`
	}
	if err := decode(data, &wire); err != nil {
		return err
	}
	if wire.Type == nil || wire.Value == nil {
		return fmt.Errorf("interface requires a registered tagged value: %s", data)
	}
	t.ID = *wire.Type
	switch t.ID {
	case "agentgo.message.v1":
		t.Value = &Message{}
	case "agentgo.agent-state.v1":
		t.Value = &AgentState{}
	case "agentgo.agent-snapshot.v1":
		t.Value = &AgentSnapshot{}
	case "example.finding.v1": // an application's Artifact, registered with the codec
		t.Value = &Finding{}
	default:
		return fmt.Errorf("codec type %q is not registered", t.ID)
	}
	return decode(wire.Value, t.Value)
}

func (t Tagged) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"$type": t.ID, "value": t.Value})
}

func decode(data []byte, target any) error {
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.UseNumber()
	return decoder.Decode(target)
}

func roundTrip(line []byte) ([]byte, error) {
	var value Tagged
	if err := decode(line, &value); err != nil {
		return nil, err
	}
	encoded, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	var sorted any // as agentgo's codec writes: every object a map, its keys sorted
	if err := decode(encoded, &sorted); err != nil {
		return nil, err
	}
	return json.Marshal(sorted)
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		encoded, err := roundTrip(in.Bytes())
		if err != nil {
			encoded, _ = json.Marshal(map[string]string{"error": err.Error()})
		}
		out.Write(append(encoded, '\n'))
	}
}
"""  # a stand-in for agentgo's types, written from its source; agentgo itself is not needed


@pytest.fixture(scope="module")
def go_mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go program above, built offline: it reads each line as agentgo's types do and
    writes them back as agentgo's codec does."""
    need("go", "only Go can tell what agentgo's types read")
    folder = tmp_path_factory.mktemp("agentgocheck")
    (folder / "main.go").write_text(GO_MIRROR.lstrip(), encoding="utf-8")
    (folder / "go.mod").write_text("module agentgocheck\n\ngo 1.18\n", encoding="utf-8")
    offline = {"GOFLAGS": "-mod=mod", "GOPROXY": "off", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
    env = {**os.environ, **offline, "GOCACHE": str(folder / "cache")}
    subprocess.run(["go", "build", "-o", "mirror", "."], cwd=folder, env=env, check=True, timeout=600)
    return folder / "mirror"


def through_go(mirror: Path, lines: List[str]) -> List[str]:
    done = subprocess.run(
        [str(mirror)],
        input="".join(f"{line}\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")[:-1]  # only "\n" ends a line: text may hold U+0085 and U+2028


def go_zero(value: Any) -> bool:
    if type(value) is dict:
        return all(go_zero(item) for item in value.values())
    return value in (0, "", None, []) and value is not True


def go_kept(written: Any, read: Any) -> bool:
    """Whether Go's *read* holds all of *written*: only zero values may come and go."""
    if type(written) is dict:
        return (
            type(read) is dict
            and all(
                go_kept(item, read[key]) if key in read else go_zero(item) for key, item in written.items()
            )
            and all(go_zero(read[key]) for key in read.keys() - written.keys())
        )
    if type(written) is list:
        return type(read) is list and len(read) == len(written) and all(map(go_kept, written, read))
    return written == read and (type(written) is bool) == (type(read) is bool)  # Go writes 1.0 as 1


@dataclasses.dataclass
class Finding:
    """An application's artifact, as agentgo's Artifact interface wants one: an id and a kind."""

    id: str
    kind: str
    text: str = ""


FINDINGS = session.TypeSpec("example.finding.v1", Finding)


def every_shape() -> List[Any]:
    """A value of each shape, with every block and every optional key."""
    blocks: List[session.ContentBlock] = [
        session.text_block("<b>&</b> ünïcode"),
        session.thinking_block("hm"),
        session.tool_call_block(
            "c1", "ls", '{"path": "a", "tag": {"$type": "x", "value": 1}}', thought_signature="s"
        ),
        session.tool_call_block("c2", "ls", {"big": 1 << 62, "f": 0.1, "tag": {"$object": 1}}),
        session.tool_call_block(
            "c3", "ls", None, args_invalid=True, args_raw_text="{", args_parse_error="EOF"
        ),
        session.image_block(data=bytes(range(256)), mime_type="image/png"),
        session.image_block(url="https://example.com/a.jpg", mime_type="image/jpeg"),
        session.tool_reference_block("web_search"),
    ]
    usage: session.Usage = {"provider": "p", "model": "m", "input": 7, "total_tokens": -(1 << 63)}
    usage["cost"] = {"total": 0.25, "input": 1}
    assistant = Message("assistant", blocks, "toolUse", usage, {"tag": {"$type": "x", "value": [1]}}, T0)
    result = session.tool_result("c1", "120", is_error=True)
    empty = Message("user", None, timestamp=None)
    progress = {
        "active": True,
        "next_turn": False,
        "completed_turns": 2,
        "tool_errors": 1,
        "consecutive_tool_errors": {"ls": 1},
        "pending_messages": [result],
    }
    state = AgentState([assistant, result, empty], [Finding("f1", "note", "kept")], {"input": 3}, progress)
    return [
        assistant,
        result,
        empty,
        state,
        AgentSnapshot(state, [empty], [result]),
        AgentSnapshot(AgentState()),
    ]


def test_go_reads_everything_python_writes(go_mirror: Path) -> None:
    codec = JSONCodec(FINDINGS)
    lines = [session._dumps(codec.encode(value)) for value in every_shape()]
    assert codec.decode(json.loads(lines[3])).artifacts == [Finding("f1", "note", "kept")]
    assert (
        '"artifacts":[{"$type":"example.finding.v1","value":{"id":"f1","kind":"note","text":"kept"}}]'
        in lines[3]
    )
    for written, read in zip(lines, through_go(go_mirror, lines)):
        assert go_kept(go_time(json.loads(written)), go_time(json.loads(read))), (written, read)


@hypothesis.settings(max_examples=40, deadline=None, derandomize=True, database=None)
@hypothesis.given(st.lists(MESSAGES, min_size=1, max_size=6))
def test_go_reads_every_message_the_builders_make(go_mirror: Path, messages: List[Message]) -> None:
    codec = JSONCodec()
    lines = [session._dumps(codec.encode(message)) for message in messages]
    for written, read in zip(lines, through_go(go_mirror, lines)):
        assert go_kept(go_time(json.loads(written)), go_time(json.loads(read))), (written, read)


def test_what_go_writes_comes_back_from_python_unchanged_for_go(go_mirror: Path) -> None:
    samples = AGENTGO_SAMPLES.read_text(encoding="utf-8").splitlines()
    assert through_go(go_mirror, samples) == samples  # these are Go's own output
    codec = JSONCodec()
    rewritten = [session._dumps(codec.encode(codec.decode(json.loads(line)))) for line in samples]
    assert through_go(go_mirror, rewritten) == samples  # Go reads back what it wrote, byte for byte


def test_the_example_session_holds_only_values_go_reads_whole(go_mirror: Path, tmp_path: Path) -> None:
    path = tmp_path / "demo.jsonl"
    done = subprocess.run(
        [sys.executable, str(HERE / "examples" / "agent_loop.py"), str(path)], capture_output=True
    )
    assert done.returncode == 0, done.stderr
    values = []
    for record in records(path):
        data = record.data
        request = data.get("request", {})
        values += [data[key] for key in ("message", "partial_message", "snapshot") if key in data]
        values += request.get("messages", [])
    lines = [json.dumps(value, ensure_ascii=False, separators=(",", ":")) for value in values]
    assert len(lines) > 20 and all(value["$type"].startswith("agentgo.") for value in values)
    assert sum(line.count('"type":"toolCall"') for line in lines) >= 4
    for written, read in zip(lines, through_go(go_mirror, lines)):
        assert go_kept(go_time(json.loads(written)), go_time(json.loads(read))), (written, read)


def test_go_refuses_what_the_codec_refuses(go_mirror: Path) -> None:
    def message(**fields: Any) -> str:
        value = {"role": "user", "content": [], "timestamp": "2026-01-01T00:00:00Z", **fields}
        return json.dumps({"$type": "agentgo.message.v1", "value": value})

    unchecked = [
        message(usage={"input": 1.5}),
        message(usage={"input": 1 << 64}),
        message(content="hi"),
        message(timestamp=None, content=[{"type": "toolCall", "tool_call": []}]),
        json.dumps({"$type": "agentgo.agent-state.v1", "value": {"messages": [{"role": "user"}]}}),
    ]
    assert all("error" in json.loads(line) for line in through_go(go_mirror, unchecked))


# ---------------------------------------------------------------------------- writer: the wire format

ID = r"[0-9a-f]{32}"
TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"


@pytest.mark.parametrize("version", [None, 1, 2])
def test_create_writes_the_header_line(tmp_path: Path, version: Optional[int]) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) if version is None else session.create(path, version=version) as s:
        assert re.fullmatch(ID, s.session_id) and s.path == str(path)
    line = path.read_bytes().splitlines()[0]
    assert re.fullmatch(
        rb'\{"session_id":"'
        + s.session_id.encode()
        + rb'","seq":1,"type":"session_start","time":"'
        + TIME.encode()
        + rb'","data":\{"version":'
        + str(version or 2).encode()
        + rb"\}\}",
        line,
    )


@pytest.mark.parametrize("version", [0, 3, "2", True])
def test_create_refuses_a_version_it_does_not_write(tmp_path: Path, version: Any) -> None:
    with pytest.raises(ValueError, match="version must be 1 or 2"):
        session.create(tmp_path / "s.jsonl", version=version)
    assert list(tmp_path.iterdir()) == []


def _chosen_session(path: Path) -> None:
    at = dt.datetime(2026, 3, 1, 10, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    with session.create(path, session_id="a" * 32, time=at) as s:
        run = s.begin_run(run_id="b" * 32, time=at + dt.timedelta(seconds=1))
        run.record(Event("agent_start", timestamp=at + dt.timedelta(seconds=2)))
        run.close(time=at + dt.timedelta(seconds=3))


def test_a_writer_chooses_the_ids_and_times_and_gets_the_same_bytes(tmp_path: Path) -> None:
    _chosen_session(tmp_path / "a.jsonl")
    _chosen_session(tmp_path / "b.jsonl")
    text = (tmp_path / "a.jsonl").read_bytes()
    assert text == (tmp_path / "b.jsonl").read_bytes()
    a, b = "a" * 32, "b" * 32
    assert text.decode().splitlines() == [
        f'{{"session_id":"{a}","seq":1,"type":"session_start","time":"2026-03-01T08:00:00.000000Z","data":{{"version":2}}}}',
        f'{{"session_id":"{a}","seq":2,"type":"run_start","time":"2026-03-01T08:00:01.000000Z","run_id":"{b}","data":{{}}}}',
        f'{{"session_id":"{a}","seq":3,"type":"agent_start","time":"2026-03-01T08:00:02.000000Z","run_id":"{b}","data":{{}}}}',
        f'{{"session_id":"{a}","seq":4,"type":"run_close","time":"2026-03-01T08:00:03.000000Z","run_id":"{b}","data":{{}}}}',
    ]


@pytest.mark.parametrize("bad", ["A" * 32, "a" * 31, "g" * 32, "a" * 32 + "\n", b"a" * 32, 1])
def test_create_and_begin_run_refuse_an_id_of_another_form(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(ValueError, match="session_id must be 32 lowercase hex digits"):
        session.create(tmp_path / "s.jsonl", session_id=bad)
    assert list(tmp_path.iterdir()) == []
    with session.create(tmp_path / "s.jsonl") as s:
        with pytest.raises(ValueError, match="run_id must be 32 lowercase hex digits"):
            s.begin_run(run_id=bad)
        s.begin_run().close()  # nothing was written, nothing is sticky
    session.read(tmp_path / "s.jsonl", lambda record: None)  # a valid file


@pytest.mark.parametrize(
    ("bad", "error"), [(dt.datetime(2026, 1, 1), ValueError), ("2026-01-01T00:00:00Z", TypeError)]
)
def test_create_begin_run_and_close_refuse_a_time_that_is_not_aware(
    tmp_path: Path, bad: Any, error: type
) -> None:
    path = tmp_path / "s.jsonl"
    with pytest.raises(error):
        session.create(path, time=bad)
    assert list(tmp_path.iterdir()) == []
    with session.create(path) as s:
        with pytest.raises(error):
            s.begin_run(time=bad)
        run = s.begin_run()
        with pytest.raises(error):
            run.close(time=bad)
        run.close()
    assert [r.type for r in session.iter_records(path)] == ["session_start", "run_start", "run_close"]


def test_begin_run_refuses_a_run_id_the_file_already_has(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s:
        s.begin_run(run_id="c" * 32).close()
        with pytest.raises(ValueError, match="already used"):
            s.begin_run(run_id="c" * 32)
        first = s.begin_run()
        first.close()
    with session.open(path) as s:  # the ids of the runs written before open count too
        for used in ("c" * 32, first.run_id):
            with pytest.raises(ValueError, match="already used"):
                s.begin_run(run_id=used)
        s.begin_run(run_id="d" * 32).close()
    session.read(path, lambda record: None)  # a valid file


def test_create_refuses_an_existing_file_and_makes_it_private(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"keep")
    with pytest.raises(FileExistsError):
        session.create(path)
    assert path.read_bytes() == b"keep"
    fresh = tmp_path / "new.jsonl"
    session.create(fresh).close()
    if os.name == "posix":
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o600


def test_envelope_of_run_and_event_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        assert re.fullmatch(ID, run.run_id) and run.session_id == s.session_id
        run.record(Event("turn_start", turn_index=1, timestamp=T0))
    objs = lines_of(path)
    assert [o["seq"] for o in objs] == [1, 2, 3, 4]
    assert [o["type"] for o in objs] == ["session_start", "run_start", "turn_start", "run_close"]
    assert all(list(o) == ["session_id", "seq", "type", "time", "run_id", "data"] for o in objs[1:])
    assert {o["run_id"] for o in objs[1:]} == {run.run_id} and "run_id" not in objs[0]
    assert objs[1]["data"] == {} and objs[3]["data"] == {}
    assert objs[2]["time"] == "2026-12-02T09:27:36.123456Z"


def test_lines_are_compact_utf8(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("tool_exec_start", execution=TOOL, tool="grüß", args={"k": [1, 2.5, "日本", None]}))
    for raw in path.read_bytes().splitlines():
        obj = json.loads(raw)
        assert raw == json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    assert "grüß".encode() in path.read_bytes() and "日本".encode() in path.read_bytes()


def test_lone_surrogates_are_escaped_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    text = "a\ud800b\udfffc é"
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("tool_exec_start", execution=TOOL, tool=text, args={text: [text]}))
    blob = path.read_bytes()
    blob.decode("utf-8")  # still valid UTF-8
    assert b"a\\ud800b\\udfffc \xc3\xa9" in blob
    data = records(path)[2].data
    assert data["tool"] == text and data["args"] == {text: [text]}


def test_event_time_is_converted_to_utc(tmp_path: Path) -> None:
    plus2 = dt.timezone(dt.timedelta(hours=2))
    before = dt.datetime.now(UTC)
    objs = recorded(
        tmp_path,
        Event("turn_start", timestamp=dt.datetime(2026, 12, 2, 11, 0, tzinfo=plus2)),
        Event("turn_start"),
    )
    assert objs[0]["time"] == "2026-12-02T09:00:00.000000Z"
    now = dt.datetime.strptime(objs[1]["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert before <= now <= dt.datetime.now(UTC)


def full_event(kind: str, **changes: Any) -> Event:
    """An event with every field set to something non-empty."""
    fields: Dict[str, Any] = {
        "timestamp": T0,
        "execution": MODEL,
        "turn_index": 2,
        "message": Message("assistant", [session.text_block("ok")]),
        "partial_message": Message("assistant", [session.text_block("o")]),
        "request": ModelRequest(
            [Message("user", [session.text_block("q")])], [{"name": "ls"}], CallConfig(max_tokens=9)
        ),
        "tool_id": "call-1",
        "tool": "ls",
        "tool_label": "List",
        "args": {"dir": "/"},
        "result": {"files": []},
        "details": {"ms": 3},
        "preview": "pre",
        "is_error": True,
        "disposition": "done",
        "context_operation": "project",
        "context_items": [{"id": 1}],
        "compaction": {"kept": 2},
        "retry": RetryInfo(3, 1.5, "rate limited"),
        "summary": RunSummary(1, 2, 1, "stop"),
        "recovery": "length",
        "error": ValueError("boom"),
        "state": {"messages": ["STATE-MARK"]},
        "delta": "DELTA-MARK",
    }
    fields.update(changes)
    return Event(kind, **fields)


ALL_DATA_KEYS = {
    "execution",
    "turn_index",
    "message",
    "partial_message",
    "request",
    "tool_id",
    "tool",
    "tool_label",
    "args",
    "result",
    "details",
    "preview",
    "is_error",
    "disposition",
    "context_operation",
    "context_items",
    "compaction",
    "retry",
    "summary",
    "recovery",
    "error",
}

PROJECTION = [
    ("model_response", {"execution", "recovery"}),
    ("model_request", {"execution", "request", "messages", "tools"}),  # version 2: references
    ("model_exec_start", {"execution"}),
    ("model_exec_end", {"execution", "partial_message", "error"}),
    ("message_end", {"execution", "message"}),
    ("tool_queued", {"execution", "tool_id", "tool"}),
    ("tool_exec_start", {"execution", "tool_id", "tool", "tool_label", "args"}),
    ("tool_invoke_start", {"execution", "tool_id", "tool", "args"}),
    ("tool_invoke_end", {"execution", "tool_id", "tool", "is_error", "error"}),
    (
        "tool_exec_end",
        {
            "execution",
            "tool_id",
            "tool",
            "tool_label",
            "result",
            "details",
            "is_error",
            "disposition",
            "error",
        },
    ),
    ("context_projected", {"execution", "context_items"}),
    ("context_compacted", {"execution", "compaction"}),
    ("context_prepare_start", {"execution", "context_operation", "error"}),
    ("context_prepare_end", {"execution", "context_operation", "error"}),
    ("retry", {"execution", "retry", "error"}),
    ("retry_wait_start", {"execution", "retry", "error"}),
    ("retry_wait_end", {"execution", "retry", "error"}),
    ("turn_start", {"turn_index"}),
    ("turn_end", {"turn_index", "error", "committed"}),
    ("agent_start", set()),
    ("agent_end", {"summary", "error"}),
    ("error", {"error"}),
    ("my_custom_event", ALL_DATA_KEYS),
]


@pytest.mark.parametrize(("kind", "keys"), PROJECTION)
def test_each_event_type_writes_exactly_its_keys(tmp_path: Path, kind: str, keys: set) -> None:  # type: ignore[type-arg]
    [obj] = recorded(tmp_path, full_event(kind))
    assert obj["type"] == kind and set(obj["data"]) == keys
    blob = json.dumps(obj)
    assert "STATE-MARK" not in blob and "DELTA-MARK" not in blob  # state and delta: never


def test_version_1_writes_a_request_whole(tmp_path: Path) -> None:
    [obj] = recorded(tmp_path, full_event("model_request"), version=1)
    assert set(obj["data"]) == {"execution", "request"}
    assert set(obj["data"]["request"]) == {"messages", "tools", "config"}
    assert obj["data"]["request"]["messages"][0]["value"]["content"] == [session.text_block("q")]


def documented_event_table() -> Dict[str, Set[str]]:
    """docs/format.md's table of event types: each type (or "any other type") → its data keys."""
    table = {}
    for line in doc_section("### Events and their data", "docs/format.md").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] not in ("event type", "---"):
            keys = set(re.findall(r"`(\w+)`", cells[1]))
            for kind in re.findall(r"`(\w+)`", cells[0]) or [cells[0]]:
                table[kind] = keys
    return table


def keys_written(folder: Path, kind: str) -> Set[str]:
    """Every data key a *kind* event writes: all fields set, with and without an error, and a
    request whose config has a credential and a value that cannot be encoded."""
    folder.mkdir()
    request = ModelRequest([], [{"name": "ls"}], CallConfig(extra={"password": "x", "odd": {1}}))
    lines = recorded(folder, full_event(kind, request=request), full_event(kind, request=request, error=None))
    return set().union(*(obj["data"] for obj in lines))


def test_the_format_page_lists_every_event_type_and_the_keys_it_writes(tmp_path: Path) -> None:
    table = documented_event_table()
    assert set(table) == {*session._PROJECTIONS, "any other type"}
    for kind, keys in table.items():
        example = "my_custom_event" if kind == "any other type" else kind
        assert keys_written(tmp_path / kind, example) == keys, kind


@pytest.mark.parametrize("kind", ["message_start", "message_update", "tool_exec_update", "model_stream"])
def test_transient_events_are_not_written(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        assert run.record(full_event(kind)) is False
        assert run.record(Event("turn_start")) is True
    assert [o["type"] for o in lines_of(path)] == ["session_start", "run_start", "turn_start", "run_close"]


def test_model_response_is_written_only_with_a_recovery(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        assert run.record(full_event("model_response", recovery="")) is False
        assert run.record(full_event("model_response")) is True
    assert data_of(path, 3) == {
        "execution": {"id": "m1", "kind": "model", "attempt": 1},
        "recovery": "length",
    }


def test_model_exec_end_success_writes_the_message(tmp_path: Path) -> None:
    [ok, failed, failed_text] = recorded(
        tmp_path,
        full_event("model_exec_end", error=None),
        full_event("model_exec_end", partial_message=None),
        full_event("model_exec_end", error="timeout"),
    )
    assert set(ok["data"]) == {"execution", "message"}
    assert ok["data"]["message"]["value"]["content"] == [{"type": "text", "text": "ok"}]
    assert set(failed["data"]) == {"execution", "error"}
    assert failed["data"]["error"] == {"message": "boom", "type": "ValueError"}
    assert failed_text["data"]["error"] == {"message": "timeout"}


def test_turn_end_marks_committed_only_with_a_state(tmp_path: Path) -> None:
    [with_state, without] = recorded(tmp_path, full_event("turn_end"), full_event("turn_end", state=None))
    assert with_state["data"]["committed"] is True and "committed" not in without["data"]


def test_shapes_of_execution_retry_summary_error(tmp_path: Path) -> None:
    [obj] = recorded(tmp_path, full_event("my_custom_event", execution=TOOL))
    data = obj["data"]
    assert data["execution"] == {"id": "t1", "kind": "tool", "parent_id": "m1", "turn_index": 1, "attempt": 1}
    assert data["retry"] == {"max_retries": 3, "delay": 1.5, "error": {"message": "rate limited"}}
    assert data["summary"] == {"turn_count": 1, "tool_calls": 2, "tool_errors": 1, "end_reason": "stop"}
    assert data["error"] == {"message": "boom", "type": "ValueError"}
    (tmp_path / "events.jsonl").unlink()
    [bare] = recorded(tmp_path, Event("retry", retry=RetryInfo()))
    assert bare["data"] == {"retry": {}}


def test_an_error_handed_over_as_data_is_written_as_given(tmp_path: Path) -> None:
    retry = RetryInfo(1, error={"message": "rate limited", "type": "RateLimitError"})
    written = recorded(
        tmp_path,
        Event("error", error={"message": "boom", "type": "ProviderError"}),
        Event("error", error={"message": "boom", "type": ""}),
        Event("retry", retry=retry),
    )
    assert [obj["data"] for obj in written] == [
        {"error": {"message": "boom", "type": "ProviderError"}},
        {"error": {"message": "boom"}},
        {"retry": {"max_retries": 1, "error": {"message": "rate limited", "type": "RateLimitError"}}},
    ]
    read_back = session.EventData.from_record(records(tmp_path / "events.jsonl")[2])
    (tmp_path / "events.jsonl").unlink()
    [again] = recorded(tmp_path, Event("error", error=read_back.error))  # what a reader gets records again
    assert again["data"] == written[0]["data"]


def test_empty_values_are_left_out_but_zero_results_are_written(tmp_path: Path) -> None:
    [a, b, c] = recorded(
        tmp_path,
        Event("tool_exec_end", execution=TOOL, tool="", tool_id="", is_error=False, result=0, details={}),
        Event("tool_exec_end", execution=TOOL, result=[], preview=""),
        Event("turn_start", turn_index=0),
    )
    assert a["data"] == {"execution": a["data"]["execution"], "result": 0, "details": {}}
    assert b["data"] == {"execution": b["data"]["execution"], "result": []}
    assert c["data"] == {}


@pytest.mark.parametrize("version", [1, 2])
def test_the_api_key_is_never_written(tmp_path: Path, version: int) -> None:
    path = tmp_path / "s.jsonl"
    config = CallConfig(thinking_level="high", max_tokens=100, api_key="sk-live-123", prompt_cache_key="p")
    with session.create(path, version=version) as s, s.begin_run() as run:
        run.record(Event("model_request", execution=MODEL, request=ModelRequest([], config=config)))
    assert b"sk-live-123" not in path.read_bytes() and b"api_key" not in path.read_bytes()
    [request] = requests_of(path)
    assert request == {
        "messages": [],
        "tools": [],
        "config": {"thinking_level": "high", "prompt_cache_key": "p", "max_tokens": 100},
    }


@pytest.mark.parametrize("version", [1, 2])
def test_request_messages_are_codec_values(tmp_path: Path, version: int) -> None:
    request = ModelRequest([Message("user", [session.text_block("hi")]), {"$object": 1}], ({"name": "t"},))
    recorded(tmp_path, Event("model_request", execution=MODEL, request=request), version=version)
    [written] = requests_of(tmp_path / "events.jsonl")
    messages = written["messages"]
    assert messages[0]["$type"] == "agentgo.message.v1" and messages[1] == {"$object": {"$object": 1}}
    assert JSONCodec().decode(messages) == list(request.messages)
    assert written["tools"] == [{"name": "t"}]


def test_unencodable_config_values_become_a_snapshot_error(tmp_path: Path) -> None:
    config = CallConfig(tool_choice={1, 2}, response_format={"x": float("nan")}, extra={"f": print, "ok": 1})
    [obj] = recorded(
        tmp_path, Event("model_request", execution=MODEL, request=ModelRequest([], config=config))
    )
    data = obj["data"]
    assert data["request"]["config"] == {}
    assert "config.tool_choice: " in data["snapshot_error"] and "set" in data["snapshot_error"]
    assert "config.response_format: " in data["snapshot_error"]
    assert "config.extra: " in data["snapshot_error"] and "function" in data["snapshot_error"]


def test_credential_keys_in_extra_are_dropped_and_listed(tmp_path: Path) -> None:
    extra = {
        "Authorization": "Bearer x",
        "headers": [{"password": "p", "keep": 1}, {"X-Api_Key": "k"}],
        "nested": {"client_secret": "s", "ACCESS_TOKEN": "t", "apikey": "a", "fine": RawJSON('{"secret":1}')},
        "temperature": 0.2,
    }
    config = CallConfig(extra=extra, tool_choice={"password": "not extra: kept"})
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("model_request", execution=MODEL, request=ModelRequest([], config=config)))
    data = data_of(path, 3)
    assert data["request"]["config"]["extra"] == {
        "headers": [{"keep": 1}, {}],
        "nested": {"fine": {}},
        "temperature": 0.2,
    }
    assert data["redacted"] == [
        "config.extra.Authorization",
        "config.extra.headers[0].password",
        "config.extra.headers[1].X-Api_Key",
        "config.extra.nested.client_secret",
        "config.extra.nested.ACCESS_TOKEN",
        "config.extra.nested.apikey",
        "config.extra.nested.fine.secret",
    ]
    assert data["request"]["config"]["tool_choice"] == {"password": "not extra: kept"}
    for secret in (b"Bearer x", b'"p"', b'"k"', b'"s"', b'"t"', b'"a"'):
        assert secret not in path.read_bytes()


CREDENTIAL_NAMES = [
    "x-api-key",  # Anthropic
    "api-key",  # Azure OpenAI
    "Ocp-Apim-Subscription-Key",  # Azure API Management
    "x-goog-api-key",  # Google
    "X-Goog-Iam-Authorization-Token",
    "key",  # Google's ?key=
    "Proxy-Authorization",
    "cf-aig-authorization",  # Cloudflare AI Gateway
    "X-Auth-Key",
    "x-auth-token",
    "X-Amz-Security-Token",  # AWS
    "aws_secret_access_key",
    "aws_access_key_id",
    "AWS_SESSION_TOKEN",
    "Cookie",
    "Set-Cookie",
    "refresh_token",
    "id_token",
    "idToken",
    "private_key",
    "private_key_id",
    "session_token",
    "client_secret",
    "credentials",
    "token",
    "REPLICATE_API_TOKEN",
    "bearer",
    "passphrase",
    "DB PASSWD",
    "X.API.KEY",
]
NOT_CREDENTIALS = [
    "temperature",
    "max_tokens",
    "budget_tokens",
    "top_k",
    "keep",
    "monkey",
    "tokens",
    "cookbook",
]


def test_credential_names_are_compared_with_case_and_separators_folded(tmp_path: Path) -> None:
    extra: Dict[str, Any] = {name: f"secret-{n}" for n, name in enumerate(CREDENTIAL_NAMES)}
    extra.update(dict.fromkeys(NOT_CREDENTIALS, 1))
    extra["headers"] = {"X-API-KEY": "secret-h", "anthropic-version": "2023-06-01", "OpenAI-Project": "p"}
    path = tmp_path / "s.jsonl"
    config = CallConfig(extra=extra)
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("model_request", execution=MODEL, request=ModelRequest([], config=config)))
    data = data_of(path, 3)
    assert data["request"]["config"]["extra"] == {
        **dict.fromkeys(NOT_CREDENTIALS, 1),
        "headers": {"anthropic-version": "2023-06-01", "OpenAI-Project": "p"},
    }
    assert data["redacted"] == [f"config.extra.{name}" for name in CREDENTIAL_NAMES] + [
        "config.extra.headers.X-API-KEY"
    ]
    assert b"secret-" not in path.read_bytes()


def test_credential_pairs_in_extra_are_dropped_and_listed(tmp_path: Path) -> None:
    extra = {
        "headers": [("Authorization", "Bearer secret-1"), ("Accept", "*/*"), ["x-api-key", "secret-2"]],
        "params": [("key", "secret-3"), ("alt", "sse")],  # Google's ?key= as query pairs
        "nested": [[("Cookie", "secret-4")], RawJSON('[["X-Vault-Token", "secret-5"], ["n", 1]]')],
        "other_pairs": [(1, "one"), ["stop", "token"]],
    }
    request = ModelRequest([], config=CallConfig(extra=extra))
    [obj] = recorded(tmp_path, Event("model_request", execution=MODEL, request=request))
    assert obj["data"]["request"]["config"]["extra"] == {
        "headers": [["Accept", "*/*"]],
        "params": [["alt", "sse"]],
        "nested": [[], [["n", 1]]],
        "other_pairs": [[1, "one"], ["stop", "token"]],
    }
    assert obj["data"]["redacted"] == [
        "config.extra.headers[0]",
        "config.extra.headers[2]",
        "config.extra.params[0]",
        "config.extra.nested[0][0]",
        "config.extra.nested[1][0]",
    ]
    assert b"secret-" not in (tmp_path / "events.jsonl").read_bytes()


PROVIDER_CREDENTIALS = [
    "Authorization",  # OpenAI, Mistral, Groq, Cohere and other bearer-token APIs
    "Proxy-Authorization",
    "x-api-key",  # Anthropic
    "api-key",  # Azure OpenAI
    "Ocp-Apim-Subscription-Key",  # Azure API Management
    "x-goog-api-key",  # Gemini
    "x-goog-iam-authorization-token",  # Google Cloud
    "X-Amz-Security-Token",  # AWS
    "X-aws-ec2-metadata-token",  # AWS instance metadata (IMDSv2)
    "access_token",
    "refresh_token",  # OAuth
    "id_token",
    "session_token",
    "oauth_token",
    "bearer_token",
    "X-Auth-Token",  # OpenStack
    "X-CSRF-Token",
    "X-XSRF-TOKEN",
    "PRIVATE-TOKEN",  # GitLab
    "JOB-TOKEN",
    "X-Gitlab-Token",
    "github_token",  # GitHub Actions
    "hf_token",  # Hugging Face
    "HUGGING_FACE_HUB_TOKEN",
    "bot_token",  # Slack
    "X-Vault-Token",  # HashiCorp
    "X-Consul-Token",
    "Circle-Token",  # CircleCI
    "Cookie",
]
PROVIDER_SETTINGS = [
    "max_tokens",  # OpenAI, Anthropic
    "max_completion_tokens",
    "max_output_tokens",
    "maxOutputTokens",  # Gemini
    "max_tokens_to_sample",
    "budget_tokens",
    "total_tokens",  # usage counts
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "token_budget",
    "tokenizer",
    "top_k",
    "top_p",
    "temperature",
    "stop",
    "stop_sequences",
    "logprobs",
    "user",
    "model",
    "seed",
    "anthropic-version",
    "OpenAI-Organization",
    "x-goog-user-project",
    "X-aws-ec2-metadata-token-ttl-seconds",
]


@pytest.mark.parametrize("name", PROVIDER_CREDENTIALS)
def test_provider_credential_names_are_dropped_as_keys_and_as_pairs(tmp_path: Path, name: str) -> None:
    extra = {name: "secret-1", "headers": [(name, "secret-2"), ("Accept", "application/json")]}
    request = ModelRequest([], config=CallConfig(extra=extra))
    [obj] = recorded(tmp_path, Event("model_request", execution=MODEL, request=request))
    assert obj["data"]["request"]["config"]["extra"] == {"headers": [["Accept", "application/json"]]}
    assert obj["data"]["redacted"] == [f"config.extra.{name}", "config.extra.headers[0]"]
    assert b"secret-" not in (tmp_path / "events.jsonl").read_bytes()


@pytest.mark.parametrize("name", PROVIDER_SETTINGS)
def test_provider_settings_are_kept_beside_a_dropped_credential_pair(tmp_path: Path, name: str) -> None:
    extra = {name: 1, "headers": [(name, 2), ("Authorization", "Bearer secret")]}
    request = ModelRequest([], config=CallConfig(extra=extra))
    [obj] = recorded(tmp_path, Event("model_request", execution=MODEL, request=request))
    assert obj["data"]["request"]["config"]["extra"] == {name: 1, "headers": [[name, 2]]}
    assert obj["data"]["redacted"] == ["config.extra.headers[1]"]


def test_raw_json_is_checked_and_written_compacted(tmp_path: Path) -> None:
    raw = ' {"n": 1e2, "s": "a  b\\u00e9\\"", "l": [1.50 , true,null]}\n'
    [obj] = recorded(
        tmp_path,
        Event("tool_exec_end", execution=TOOL, result=RawJSON(raw), details=[RawJSON(b" 7 "), RawJSON("[]")]),
    )
    line = (tmp_path / "events.jsonl").read_bytes().splitlines()[2]
    assert b'"result":{"n":1e2,"s":"a  b\\u00e9\\"","l":[1.50,true,null]}' in line
    assert b'"details":[7,[]]' in line
    assert obj["data"]["result"] == {"n": 100.0, "s": 'a  bé"', "l": [1.5, True, None]}


@pytest.mark.parametrize("text", ["", "{", "NaN", "[1] [2]", "{'a': 1}", "[1,]", b"\xff", "-1e999"])
def test_invalid_raw_json_is_a_recording_error(tmp_path: Path, text: Any) -> None:
    s = session.create(tmp_path / "s.jsonl")
    run = s.begin_run()
    with pytest.raises(RecordingError, match=r"RawJSON|utf-8"):
        run.record(Event("tool_exec_end", execution=TOOL, result=RawJSON(text)))
    with pytest.raises(RecordingError):
        run.record(Event("turn_start"))  # sticky
    with pytest.raises(RecordingError):
        s.close()
    # nothing of the bad event reached the file
    assert [r.type for r in records(tmp_path / "s.jsonl")] == ["session_start", "run_start"]


def test_a_string_like_the_raw_placeholder_is_refused_not_confused(tmp_path: Path) -> None:
    mark = session._RAW_MARK
    s = session.create(tmp_path / "s.jsonl")
    run = s.begin_run()
    run.record(Event("tool_exec_end", execution=TOOL, result=[mark]))  # no RawJSON: plain string
    with pytest.raises(RecordingError, match="placeholder"):
        run.record(Event("tool_exec_end", execution=TOOL, result=[mark, RawJSON("1")]))
    with pytest.raises(RecordingError):
        s.close()
    assert records(tmp_path / "s.jsonl")[2].data["result"] == [mark]


@contextlib.contextmanager
def another_thread() -> Iterator[None]:
    """A thread that waits while the block runs: a writer then shares the GIL."""
    done = threading.Event()
    waiter = threading.Thread(target=done.wait)
    waiter.start()
    try:
        yield
    finally:
        done.set()
        waiter.join()


@hypothesis.settings(max_examples=60, deadline=None, derandomize=True, database=None)
@hypothesis.given(st.text(alphabet=st.sampled_from('a"\\\n\x00\x1fé\u2028\ud800\udc00😀'), max_size=40))
def test_a_long_string_is_quoted_in_pieces_to_the_same_text(part: str) -> None:
    piece = session._PIECE
    for text in (part * (2 * piece // max(len(part), 1) + 1), "x" * (piece - 1) + part + "y" * piece):
        assert session._quote_in_pieces(text) == session._quote(text)


def test_beside_other_threads_no_string_is_quoted_in_one_long_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One call over a 20 MB string keeps the GIL for some 50 ms: an event loop in another
    thread would wait that long.  The writer quotes it a piece at a time instead."""
    lengths: List[int] = []
    quote = session._quote

    def noting(text: str) -> str:
        lengths.append(len(text))
        return quote(text)

    monkeypatch.setattr(session, "_quote", noting)
    text = "a line\n" * (3 * session._PIECE // 7) + "é\ud800"
    s = session.create(tmp_path / "s.jsonl")
    run = s.begin_run()
    with another_thread():
        run.record(Event("tool_exec_end", execution=TOOL, result={"output": text, "raw": RawJSON('"x"')}))
    run.record(Event("tool_exec_end", execution=TOOL, result={"output": text}))  # alone: one call
    s.close()
    assert max(lengths) <= session._PIECE < len(text) <= sum(lengths)
    first, second = [r.data["result"] for r in records(tmp_path / "s.jsonl")[2:4]]
    assert first == {"output": text, "raw": "x"} and second == {"output": text}


class _Misleading(str):
    """A str whose ``len`` and slices lie (a long ``len`` would cut a short text in as many
    pieces): ``json.dumps`` reads its characters, not them."""

    def __len__(self) -> int:
        return 2 * session._PIECE

    def __getitem__(self, index: Any) -> str:
        return "lie"


def test_beside_other_threads_a_str_subclass_is_quoted_by_its_characters(tmp_path: Path) -> None:
    s = session.create(tmp_path / "s.jsonl")
    run = s.begin_run()
    short, long = _Misleading("the text"), _Misleading("ab" * 300_000)
    with another_thread():
        run.record(Event("tool_exec_end", execution=TOOL, result={short: short, "long": long}))
    s.close()
    assert records(tmp_path / "s.jsonl")[2].data["result"] == {"the text": "the text", "long": "ab" * 300_000}


@pytest.mark.parametrize(
    ("event", "cause"),
    [
        (Event("tool_exec_end", execution=TOOL, result={"x": float("nan")}), ValueError),
        (Event("tool_exec_end", execution=TOOL, result={"x": {1, 2}}), ValueError),
        (Event("message_end", execution=MODEL, message=Note("unregistered")), CodecError),
        (
            Event(
                "message_end", execution=MODEL, message=Message("u", [], timestamp=dt.datetime(2026, 1, 1))
            ),
            CodecError,
        ),
        (Event("turn_start", timestamp=dt.datetime(2026, 1, 1)), ValueError),
        (Event("turn_start", timestamp="2026-01-01"), TypeError),  # type: ignore[arg-type]
        (Event("tool_queued", execution=TOOL, tool=7), TypeError),  # type: ignore[arg-type]
        (Event("tool_queued", execution="t1"), TypeError),  # type: ignore[arg-type]
        (Event("turn_start", turn_index=True), TypeError),
        (Event("error", error=42), TypeError),
        (Event("error", error={"msg": "x"}), ValueError),
        (Event("error", error={"message": "x", "code": 3}), ValueError),
        (Event("error", error={"message": "x", "type": 3}), TypeError),
    ],
)
def test_encoding_failures_are_sticky_recording_errors(tmp_path: Path, event: Event, cause: type) -> None:
    path = tmp_path / "s.jsonl"
    s = session.create(path)
    run = s.begin_run()
    run.record(Event("turn_start"))
    with pytest.raises(RecordingError) as info:
        run.record(event)
    assert isinstance(info.value.__cause__, cause)
    for call in (
        lambda: run.record(Event("turn_start")),
        lambda: run.save_checkpoint({}),
        s.begin_run,
        s.sync,
    ):
        with pytest.raises(RecordingError) as again:
            call()
        assert again.value.__cause__ is info.value.__cause__
    with pytest.raises(RecordingError):
        run.close()
    with pytest.raises(RecordingError):
        s.close()
    with pytest.raises(RecordingError):
        s.close()  # again
    assert [r.type for r in records(path)] == ["session_start", "run_start", "turn_start"]
    session.open(path).close()  # the lock was released


def test_the_failing_field_is_named(tmp_path: Path) -> None:
    for event, message in [
        (Event("tool_exec_end", execution=TOOL, result=1, details={"x": {1}}), r"data\.details: .*set"),
        (Event("model_exec_end", error="x", partial_message=Note("n")), r"partial_message: .*Note at \$"),
    ]:
        s = session.create(tmp_path / f"{len(message)}.jsonl")
        with pytest.raises(RecordingError, match=message):
            s.begin_run().record(event)
        with pytest.raises(RecordingError):
            s.close()


@pytest.mark.parametrize("kind", ["session_start", "run_start", "run_close", "checkpoint"])
def test_reserved_types_are_refused_and_not_sticky(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        with pytest.raises(ValueError, match="reserved"):
            run.record(Event(kind))
        assert run.record(Event("turn_start"))
    assert [r.type for r in records(path)][2:] == ["turn_start", "run_close"]


def test_a_misspelt_event_type_warns_naming_the_closest_known_type(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        with pytest.warns(
            RuntimeWarning,
            match=r"'model_exec_ned' is no known event type \(did you mean 'model_exec_end'\?\)",
        ) as caught:
            assert run.record(Event("model_exec_ned", execution=MODEL))
        assert [w.filename for w in caught] == [__file__]  # the line that recorded it
        with pytest.warns(
            RuntimeWarning, match=r"'approval_asked' is no known event type; .*register_event_type"
        ):
            run.record(Event("approval_asked"))
        session.register_event_type("approval_asked")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            run.record(Event("approval_asked"))
            run.record(Event("recording_gap", details={"unrecorded": "x"}))  # known, though no table row
    assert [r.type for r in records(path)][2:-1] == [
        "model_exec_ned",
        "approval_asked",
        "approval_asked",
        "recording_gap",
    ]


@pytest.mark.parametrize(
    ("name", "error"),
    [("", TypeError), (None, TypeError), ("run_close", ValueError), ("message", ValueError)],
)
def test_register_event_type_refuses_what_is_no_event_type(name: Any, error: type) -> None:
    with pytest.raises(error):
        session.register_event_type(name)


@pytest.mark.parametrize("kind", ["", None, 5, b"turn_start"])
def test_a_type_that_is_not_a_non_empty_string_is_a_type_error(tmp_path: Path, kind: Any) -> None:
    with session.create(tmp_path / "s.jsonl") as s, s.begin_run() as run:
        with pytest.raises(TypeError):
            run.record(Event(kind))
        with pytest.raises(TypeError):
            run.record({"type": "turn_start"})  # type: ignore[arg-type]
        assert run.record(Event("turn_start"))


def test_redact_sees_each_events_and_checkpoints_data(tmp_path: Path) -> None:
    seen: List[Dict[str, Any]] = []

    def redact(data: Dict[str, Any]) -> Dict[str, Any]:
        seen.append(data)
        return json.loads(json.dumps(data).replace("sk-123", "[key]"))  # type: ignore[no-any-return]

    path = tmp_path / "s.jsonl"
    with session.create(path, redact=redact) as s, s.begin_run() as run:
        run.record(Event("tool_exec_end", execution=TOOL, result={"out": "token sk-123"}))
        run.save_checkpoint({"note": "sk-123"})
    assert b"sk-123" not in path.read_bytes() and path.read_bytes().count(b"[key]") == 2
    assert len(seen) == 2 and seen[1] == {"snapshot": {"note": "sk-123"}}
    s = session.open(path, redact=lambda d: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(RecordingError, match="redact must return a dict"):
        s.begin_run().record(Event("turn_start"))
    with pytest.raises(RecordingError):
        s.close()


def test_the_example_redactor_scrubs_common_key_formats(tmp_path: Path) -> None:
    sys.path.insert(0, str(HERE / "examples"))
    try:
        from redactor import redact
    finally:
        sys.path.remove(str(HERE / "examples"))
    secrets = [
        "sk-proj-" + "a" * 40,
        "sk-ant-api03-" + "b" * 40,
        "AKIA" + "C" * 16,
        "ghp_" + "d" * 36,
        "xoxb-1234567890-abcdef",
        "AIza" + "e" * 35,
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abcdefghijklmnop",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
    ]
    path = tmp_path / "s.jsonl"
    with session.create(path, redact=redact) as s, s.begin_run() as run:
        for secret in secrets:
            run.record(Event("tool_exec_end", execution=TOOL, result={"out": f"x {secret} y"}))
        run.record(
            Event("tool_exec_end", execution=TOOL, result=RawJSON(json.dumps({"h": "Bearer " + "f" * 30})))
        )
        run.save_checkpoint({"note": secrets[0]})
    blob = path.read_bytes()
    for secret in [*secrets, "f" * 30]:
        assert json.dumps(secret)[1:-1].encode() not in blob
    assert blob.count(b"[REDACTED]") == len(secrets) + 2
    assert b'"out":"x [REDACTED] y"' in blob


def test_the_writer_refuses_a_line_its_open_would_refuse(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    s = session.create(path, max_line_bytes=1000)
    run = s.begin_run()
    run.record(Event("tool_exec_end", execution=TOOL, result="x" * 700))
    with pytest.raises(RecordingError, match="longer than max_line_bytes"):
        run.record(Event("tool_exec_end", execution=TOOL, result="x" * 1000))
    with pytest.raises(RecordingError):
        s.close()
    with session.open(path, max_line_bytes=1000) as again:
        assert again.session_id == s.session_id


def test_ids_are_uuid4_hex(tmp_path: Path) -> None:
    import uuid

    with session.create(tmp_path / "s.jsonl") as s, s.begin_run() as run:
        ids = [s.session_id, run.run_id]
    for value in ids + [session._new_id() for _ in range(50)]:
        assert (
            re.fullmatch(ID, value)
            and uuid.UUID(hex=value).version == 4
            and uuid.UUID(hex=value).hex == value
        )


def test_time_stamps_stay_right_when_seconds_and_offsets_alternate(tmp_path: Path) -> None:
    plus = dt.timezone(dt.timedelta(hours=5, minutes=30))
    minus = dt.timezone(dt.timedelta(hours=-8))
    moments = [
        T0,
        T0 + dt.timedelta(seconds=1),
        T0.astimezone(plus),
        T0,
        T0.astimezone(minus),
        T0.replace(microsecond=0),
    ]
    objs = recorded(tmp_path, *(Event("turn_start", timestamp=m) for m in moments))
    assert [o["time"] for o in objs] == [
        "2026-12-02T09:27:36.123456Z",
        "2026-12-02T09:27:37.123456Z",
        "2026-12-02T09:27:36.123456Z",
        "2026-12-02T09:27:36.123456Z",
        "2026-12-02T09:27:36.123456Z",
        "2026-12-02T09:27:36.000000Z",
    ]
    codec = JSONCodec()
    assert [codec.encode(m) for m in moments[2:5]] == [
        "2026-12-02T14:57:36.123456+05:30",
        "2026-12-02T09:27:36.123456Z",
        "2026-12-02T01:27:36.123456-08:00",
    ]
    assert [codec.decode(codec.encode(Message("u", [], timestamp=m))).timestamp for m in moments] == moments


def test_an_event_time_whose_offset_has_seconds_is_exact(tmp_path: Path) -> None:
    moments = [ODD_MOMENT.replace(tzinfo=zone) for zone in odd_offsets()]
    objs = recorded(tmp_path, *(Event("turn_start", timestamp=m) for m in moments))
    assert [o["time"] for o in objs] == [m.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") for m in moments]
    assert objs[2]["time"] == "1890-06-01T11:40:28.250000Z"


# ---------------------------------------------------------------------------- writer: sessions and runs


def test_one_run_at_a_time(tmp_path: Path) -> None:
    with session.create(tmp_path / "s.jsonl") as s:
        first = s.begin_run()
        with pytest.raises(session.RunOpenError, match=first.run_id):
            s.begin_run()
        first.close()
        second = s.begin_run()
        assert second.run_id != first.run_id


def test_closed_runs_and_sessions_refuse_work(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    s = session.create(path)
    run = s.begin_run()
    run.close()
    run.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        run.record(Event("turn_start"))
    with pytest.raises(ValueError, match="closed"):
        run.record(Event("message_update"))  # even one that would not be written
    with pytest.raises(ValueError, match="closed"):
        run.save_checkpoint({})
    assert run.ref(TOOL) == CallRef(s.session_id, run.run_id, "t1", 1)
    s.close()
    s.close()  # idempotent
    for call in (s.begin_run, s.sync, s.load_checkpoint):
        with pytest.raises(ValueError, match="closed"):
            call()
    assert [r.type for r in records(path)] == ["session_start", "run_start", "run_close"]


def test_session_close_closes_the_open_run(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s:
        run = s.begin_run()
        run.record(Event("turn_start"))
    with pytest.raises(ValueError, match="closed"):
        run.record(Event("turn_start"))
    run.close()  # nothing more to do
    assert [r.type for r in records(path)] == ["session_start", "run_start", "turn_start", "run_close"]


def test_ref_combines_the_four_coordinates(tmp_path: Path) -> None:
    with session.create(tmp_path / "s.jsonl") as s, s.begin_run() as run:
        ref = run.ref(Execution("call-7", "tool", attempt=3))
        run.record(Event("tool_exec_start", execution=Execution("call-7", "tool", attempt=3), tool="ls"))
    assert ref == CallRef(s.session_id, run.run_id, "call-7", 3)
    assert records(tmp_path / "s.jsonl")[2].ref == ref


class FsyncSpy:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = os.fsync

        def spy(fd: int) -> None:
            self.calls += 1
            real(fd)

        monkeypatch.setattr(os, "fsync", spy)


def test_what_syncs_and_what_does_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = FsyncSpy(monkeypatch)
    s = session.create(tmp_path / "s.jsonl")
    assert spy.calls == (1 if os.name == "nt" else 2)  # the file, then its directory
    run = s.begin_run()
    spy.calls = 0
    for _ in range(5):
        run.record(Event("turn_start"))
    assert spy.calls == 0
    run.save_checkpoint({"n": 1})
    assert spy.calls == 1
    s.sync()
    assert spy.calls == 2
    run.close()
    assert spy.calls == 3
    s.close()
    assert spy.calls == 4


def test_checkpoints_latest_wins_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s:
        assert s.load_checkpoint() is None
        with s.begin_run() as run:
            run.save_checkpoint(AgentSnapshot(AgentState([Message("user", [session.text_block("one")])])))
            run.record(Event("turn_start"))
            run.save_checkpoint(AgentSnapshot(AgentState([Message("user", [session.text_block("two")])])))
            run.record(Event("tool_exec_end", execution=TOOL, result="later records never advance it"))
            loaded = s.load_checkpoint()
    assert loaded is not None and loaded.snapshot.state.messages[0].content == [session.text_block("two")]
    assert (loaded.seq, loaded.run_id) == (5, run.run_id) and re.fullmatch(TIME, loaded.time)
    with session.open(path) as s:
        again = s.load_checkpoint()
        assert again == loaded
        with s.begin_run() as second:
            second.save_checkpoint({"three": 3})
        third = s.load_checkpoint()
    assert third is not None and third.snapshot == {"three": 3} and third.run_id == second.run_id


def test_load_checkpoint_does_not_rescan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = sample_file(tmp_path / "s.jsonl", runs=3)
    with session.open(path) as s:
        monkeypatch.setattr(session, "_records", None)  # any scan now would crash
        monkeypatch.setattr(session, "_read", None)
        loaded = s.load_checkpoint()
    assert loaded is not None and loaded.seq == records_count(path) - 1


def records_count(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def test_load_checkpoint_uses_the_sessions_codec(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path, codec=point_codec()) as s, s.begin_run() as run:
        run.save_checkpoint({"at": Point(1, 2)})
    with session.open(path, codec=point_codec()) as s:
        loaded = s.load_checkpoint()
        assert loaded is not None and loaded.snapshot == {"at": Point(1, 2)}
    with session.open(path) as s, pytest.raises(CodecError, match=r"unknown type id 'test\.point'"):
        s.load_checkpoint()


def test_load_checkpoint_notices_a_file_changed_underneath(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        run.save_checkpoint({"n": 1})
        blob = path.read_bytes()
        with path.open("r+b") as f:  # another program rewrites the file behind the lock
            f.write(blob.replace(b'"checkpoint"', b'"chockpoint"'))
        with pytest.raises(FormatError, match="changed"):
            s.load_checkpoint()


def test_open_continues_seq_and_keeps_an_interrupted_run(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    s = session.create(path)
    old = s.begin_run()
    old.record(Event("turn_start"))
    s._file.close()  # simulate a crash: the process vanishes without run_close
    with session.open(path) as reopened:
        assert reopened.session_id == s.session_id
        with reopened.begin_run() as new:
            new.record(Event("turn_start"))
    rs = records(path)
    assert [r.seq for r in rs] == list(range(1, 7))
    assert [r.type for r in rs] == [
        "session_start",
        "run_start",
        "turn_start",
        "run_start",
        "turn_start",
        "run_close",
    ]
    assert rs[1].run_id == old.run_id and rs[3].run_id == new.run_id != old.run_id
    assert run_cli("validate", str(path)).stdout.endswith("2 runs (1 incomplete), 0 checkpoints\n")


@pytest.mark.parametrize("tail", [b'{"partial', b'{"session_id":"x"}', b"\x00" * 100])
def test_open_cuts_the_unfinished_tail_and_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: bytes
) -> None:
    path = sample_file(tmp_path / "s.jsonl")
    whole = path.read_bytes()
    path.write_bytes(whole + tail)
    spy = FsyncSpy(monkeypatch)
    with session.open(path) as s:
        assert path.read_bytes() == whole
        assert spy.calls == 1
        s.begin_run().record(Event("turn_start"))
    assert records(path)[-2].type == "turn_start"


def test_open_changes_nothing_when_a_complete_line_is_bad(tmp_path: Path) -> None:
    path = sample_file(tmp_path / "s.jsonl")
    bad = path.read_bytes().replace(b'"seq":5,', b'"seq":50,') + b'{"torn'
    path.write_bytes(bad)
    before = path.stat()
    with pytest.raises(FormatError, match="seq 5 expected, found 50") as info:
        session.open(path)
    assert (info.value.line, info.value.path) == (5, str(path))
    assert path.read_bytes() == bad and path.stat().st_mtime_ns == before.st_mtime_ns
    path.write_bytes(bad.replace(b'"seq":50,', b'"seq":5,'))
    session.open(path).close()  # the lock was released after the failure


def test_open_of_a_missing_file_passes_the_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        session.open(tmp_path / "missing.jsonl")
    assert not (tmp_path / "missing.jsonl").exists()


def test_codec_may_be_given_by_position(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path, point_codec()) as s, s.begin_run() as run:
        run.save_checkpoint(Point(3, 4))
    with session.open(path, point_codec()) as s:
        loaded = s.load_checkpoint()
    assert loaded is not None and loaded.snapshot == Point(3, 4)


def test_a_checkpoint_without_snapshot_says_so(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(blob_of([HEAD, START, line_obj(3, "checkpoint", data={})]))
    with session.open(path) as s, pytest.raises(FormatError, match=r"no data\.snapshot") as info:
        s.load_checkpoint()
    assert (info.value.line, info.value.offset) == (3, offsets(path.read_bytes())[2])


@pytest.mark.parametrize(
    "content",
    [
        b"",
        bytes(40),  # zeros: what a power loss can leave
        b'{"session_id":"',
        b"ghp_0123456789abcdef",
        b'{"session_id":"x","seq":1,"type":"session_start"}\n',
        b"{" + b" " * 200,
    ],
)
def test_create_refuses_every_file_that_exists(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(content)
    path.chmod(0o600)  # as a create would have made it
    with pytest.raises(FileExistsError) as info:
        session.create(path)
    assert str(info.value) == f"[Errno {errno.EEXIST}] {os.strerror(errno.EEXIST)}: {str(path)!r}"
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.jsonl"]  # no temporary name left


def test_a_file_without_a_complete_line_is_refused_by_open_and_repair(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"session_id":"')
    with pytest.raises(FormatError, match=r"no complete line: not a session file"):
        session.open(path)
    with pytest.raises(FormatError, match="no complete line"):
        session.repair(path)
    assert path.read_bytes() == b'{"session_id":"'


@pytest.mark.skipif(os.name != "posix", reason="symlinks are POSIX")
def test_create_never_follows_or_replaces_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "dangling.jsonl").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        session.create(tmp_path / "dangling.jsonl")
    assert not (tmp_path / "nowhere").exists() and (tmp_path / "dangling.jsonl").is_symlink()


def test_create_publishes_a_whole_locked_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The moment the path exists, it holds a whole, synced header, and the creator's lock:
    another open gets LockedError, never a file without a complete line."""
    path = tmp_path / "s.jsonl"
    seen: List[Any] = []
    real_link, real_fsync = os.link, os.fsync
    synced: List[int] = []

    def fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_size)
        real_fsync(fd)

    def link(src: Any, dst: Any, **kwargs: Any) -> None:
        seen.append((os.path.basename(src), os.stat(src).st_mode & 0o777, list(synced)))
        real_link(src, dst, **kwargs)
        seen.append([r.type for r in records(path)])  # a whole header, readable at once
        with pytest.raises(session.LockedError):
            session.open(path)

    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "fsync", fsync)
    with session.create(path) as s:
        assert s.load_checkpoint() is None
    monkeypatch.undo()
    (temporary, mode, sizes), types = seen
    assert re.fullmatch(r"\.s\.jsonl\.[0-9a-f]{16}\.tmp", temporary) and mode == 0o600
    assert sizes and sizes[0] == path.stat().st_size  # synced with its whole header before the link
    assert types == ["session_start"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.jsonl"]
    assert path.stat().st_mode & 0o777 == 0o600


def test_create_in_a_missing_folder_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "s.jsonl"
    with pytest.raises(FileNotFoundError) as info:
        session.create(path)
    assert info.value.filename == str(path)


def test_the_temporary_name_fits_beside_a_long_name(tmp_path: Path) -> None:
    path = tmp_path / ("é" * 120 + ".jsonl")  # 246 bytes: the temporary name must be shorter than 256
    session.create(path).close()
    assert [r.type for r in records(path)] == ["session_start"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


CREATE_RACER = """
import sys, time
sys.path.insert(0, {here!r})
import session
path, how, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
while time.time() < start:
    pass
try:
    if how == "create":
        s = session.create(path)
    else:
        s = session.open(path, create=True)
except (FileExistsError, session.LockedError) as exc:
    print(type(exc).__name__)
    raise SystemExit(0)
with s, s.begin_run() as run:
    run.record(session.Event("turn_start"))
    time.sleep(0.05)  # hold it: the others meet the lock
print("owner", s.session_id)
"""


def test_processes_racing_to_create_one_path_get_one_owner_and_clear_errors(tmp_path: Path) -> None:
    """Many processes at once create, or open with create=True, one new path: every outcome
    is ownership or FileExistsError/LockedError, and the file always opens afterwards."""
    script = tmp_path / "racer.py"
    script.write_text(CREATE_RACER.format(here=str(HERE)))
    for round_ in range(sweep(6, 2)):
        path = tmp_path / f"s{round_}.jsonl"
        start = time.time() + 0.5
        hows = ["create", "open"] * 4
        children = [
            subprocess.Popen(
                [sys.executable, "-S", str(script), str(path), how, str(start)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for how in hows
        ]
        outcomes = [child.communicate(timeout=60) for child in children]
        assert all(child.returncode == 0 for child in children), outcomes
        said = [out.split()[0] for out, _ in outcomes]
        owners = {out.split()[1] for out, _ in outcomes if out.startswith("owner")}
        assert set(said) <= {"owner", "FileExistsError", "LockedError"}, outcomes
        assert all(said[i] != "FileExistsError" for i, how in enumerate(hows) if how == "open")
        rs = records(path)
        assert rs[0].session_id in owners and len(owners) == 1, outcomes
        assert [r.type for r in rs].count("session_start") == 1
        assert [r.type for r in rs].count("run_start") == said.count("owner")
        session.open(path).close()
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


INTERRUPTED_AT_EACH_STEP = """
import dis, json, os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, even where started ignored
sys.path.insert(0, sys.argv[2])
import session
folder, how = sys.argv[1], sys.argv[3]
tries = {}
existing = os.path.join(folder, "existing.jsonl")
session.create(existing).close()


def descriptors():  # of files: a folder's, open for its fsync, may stay where only a tracer stops
    return sorted(fd for fd in os.listdir("/dev/fd") if os.path.isfile(f"/dev/fd/{fd}"))


def entering_a_try(frame):  # where no Python checks for signals, nor does the try cover it
    code = frame.f_code
    if code not in tries:
        tries[code] = {i.offset for i in dis.get_instructions(code) if i.opname in ("NOP", "SETUP_FINALLY")}
    return frame.f_lasti in tries[code]


def sigint_at_step(n):
    steps = [0, ""]  # steps, and the function of the n-th

    def trace(frame, event, arg):
        if frame.f_code.co_filename != session.__file__:
            return None
        if event == "call" or (event == "line" and not entering_a_try(frame)):
            steps[0] += 1
            if steps[0] == n:
                steps[1] = frame.f_code.co_name
                sys.settrace(None)
                os.kill(os.getpid(), signal.SIGINT)  # Python's own handler: KeyboardInterrupt
        return trace

    sys.settrace(trace)
    return steps


for n in range(1, 100000):
    path = existing if how == "open" else os.path.join(folder, f"s{n}.jsonl")
    before, s, interrupted = descriptors(), None, False
    try:
        try:
            steps = sigint_at_step(n)
            if how == "create":
                s = session.create(path)
            else:
                s = session.open(path, create=how == "open create")
        finally:
            sys.settrace(None)
        for _ in range(3):  # a signal still pending is handled by now, in every Python
            pass
    except KeyboardInterrupt:
        interrupted = True
    if s is not None:
        s.close()
    try:
        session.open(path).close()  # never LockedError: nothing holds the file
        opens = "yes"
    except FileNotFoundError:
        opens = "no file"
    except session.SessionError as exc:
        opens = repr(exc)
    names = sorted(name for name in os.listdir(folder) if name != "existing.jsonl")
    leaked = sorted(set(descriptors()) - set(before))
    print(json.dumps({"n": n, "at": steps[1], "interrupted": interrupted, "returned": s is not None,
                      "names": names, "leaked": leaked, "opens": opens}))
    for name in names:
        os.unlink(os.path.join(folder, name))
    if steps[0] < n:  # the call ended before its n-th step: every step was tried
        break
"""


@pytest.mark.skipif(not os.path.isdir("/dev/fd"), reason="counts descriptors in /dev/fd")
@pytest.mark.parametrize("how", ["create", "open", "open create"])
def test_ctrl_c_at_any_step_of_create_or_open_leaves_no_descriptor_lock_or_half_made_file(
    tmp_path: Path, how: str
) -> None:
    """A real SIGINT, Python's own handler, at each step of session.py in turn: the call
    returns a session, or raises KeyboardInterrupt having kept no descriptor, so the file
    opens at once; a create cut short leaves nothing at the path, nor its temporary name.
    (Once the session is made, the public function's last step drops it: it is a whole
    file, released as the session's finalizer releases it.)"""
    script = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_AT_EACH_STEP, str(tmp_path), str(HERE), how],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert script.returncode == 0, script.stderr
    outcomes = [json.loads(line) for line in script.stdout.splitlines()]
    assert len(outcomes) > 20 and sum(o["interrupted"] for o in outcomes) >= len(outcomes) - 1
    for o in outcomes:
        made = how != "open" and (o["returned"] or (o["at"] in ("create", "open") and o["names"]))
        assert o["leaked"] == [] and o["opens"] == ("yes" if how == "open" or made else "no file"), o
        assert o["names"] == ([f"s{o['n']}.jsonl"] if made else []), o
    assert outcomes[-1]["returned"] and not outcomes[-1]["interrupted"]


def test_open_with_create_makes_a_new_file_or_appends(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.open(path, create=True) as s:
        first = s.session_id
        s.begin_run().close()
    with session.open(path, create=True) as s:
        assert s.session_id == first
        s.begin_run().close()
    assert [r.type for r in records(path)] == ["session_start", "run_start", "run_close"] * 1 + [
        "run_start",
        "run_close",
    ]
    path.write_bytes(b"not a session\n")
    with pytest.raises(FormatError):
        session.open(path, create=True)  # never replaced


# ---------------------------------------------------------------------------- faults


def failing_write(monkeypatch: pytest.MonkeyPatch, *, after: int = 0, partial: int = 0) -> List[bytes]:
    """Make the (*after*+1)-th os.write write *partial* bytes and then fail with ENOSPC."""
    real = os.write
    calls: List[bytes] = []

    def write(fd: int, data: bytes) -> int:
        calls.append(bytes(data))
        if len(calls) == after + 1:
            if partial:
                real(fd, bytes(data)[:partial])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    return calls


def test_a_failed_write_is_sticky_and_close_still_releases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.jsonl"
    s = session.create(path)
    run = s.begin_run()
    run.save_checkpoint({"n": 1})
    failing_write(monkeypatch, partial=10)
    with pytest.raises(RecordingError, match="No space left") as info:
        run.record(Event("turn_start"))
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.ENOSPC
    monkeypatch.undo()
    calls = failing_write(monkeypatch, after=10**9)  # count writes from now on: none may happen
    for call in (
        lambda: run.record(Event("turn_start")),
        lambda: run.record(Event("message_update")),
        lambda: run.save_checkpoint({}),
        s.begin_run,
        s.sync,
        run.close,
        s.close,
        s.close,
        run.close,
    ):
        with pytest.raises(RecordingError) as again:
            call()
        assert again.value.__cause__ is info.value.__cause__
    assert calls == []
    monkeypatch.undo()
    with session.open(path) as reopened:  # lock released; the torn line is cut
        loaded = reopened.load_checkpoint()
        assert loaded is not None and loaded.snapshot == {"n": 1}
    assert [r.type for r in records(path)] == ["session_start", "run_start", "checkpoint"]


@pytest.fixture
def unlimited_int_digits() -> Any:
    """A host that lifted the int-to-text digit limit (where this Python has one)."""
    if not hasattr(sys, "set_int_max_str_digits"):  # an old Python without the limit
        yield
        return
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(before)


@pytest.mark.parametrize(
    "write",
    [
        lambda run, n: run.record(Event("tool_exec_end", execution=TOOL, result={"n": [n]})),
        lambda run, n: run.record(Event("tool_exec_end", execution=TOOL, result=RawJSON(f"[-{n}]"))),
        lambda run, n: run.save_checkpoint({"state": [{"n": n}]}),
    ],
    ids=["json", "raw", "checkpoint"],
)
def test_an_integer_the_reader_refuses_is_never_written(
    tmp_path: Path, unlimited_int_digits: None, write: Any
) -> None:
    path = tmp_path / "s.jsonl"
    s = session.create(path)
    run = s.begin_run()
    write(run, 10**4300 - 1)  # 4300 digits: every reader takes it
    size = path.stat().st_size
    with pytest.raises(RecordingError, match="an integer of 4301 digits: readers refuse more than 4300"):
        write(run, 10**4300)
    assert path.stat().st_size == size
    with pytest.raises(RecordingError):  # sticky, like any encoding failure
        run.record(Event("turn_start"))
    with pytest.raises(RecordingError):
        s.close()
    assert b"0" * 4300 not in path.read_bytes()
    script = "import session, sys; print(session.read(sys.argv[1], lambda r: None).records)"
    done = subprocess.run(  # a reader with the default limit
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, cwd=HERE, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, "3\n"), done.stderr


def test_digits_in_strings_and_long_fractions_are_written(tmp_path: Path, unlimited_int_digits: None) -> None:
    values = ["9" * 5000, float("0." + "3" * 5000), float("1" * 300 + "e-250"), {"k" * 5000: 1}]
    objs = recorded(tmp_path, Event("tool_exec_end", execution=TOOL, result=values))
    assert objs[0]["data"]["result"] == values


def test_load_checkpoint_works_after_a_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = session.create(tmp_path / "s.jsonl")
    run = s.begin_run()
    run.save_checkpoint({"n": 1})
    failing_write(monkeypatch)
    with pytest.raises(RecordingError):
        run.save_checkpoint({"n": 2})
    loaded = s.load_checkpoint()
    assert loaded is not None and loaded.snapshot == {"n": 1}
    with pytest.raises(RecordingError):
        s.close()


def test_a_failed_fsync_is_sticky(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.jsonl"
    s = session.create(path)
    run = s.begin_run()

    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(RecordingError, match=r"cannot sync.*Input/output"):
        run.save_checkpoint({"n": 1})
    monkeypatch.undo()
    with pytest.raises(RecordingError):
        run.record(Event("turn_start"))
    assert s.load_checkpoint() is None  # an unsynced checkpoint is not the latest
    with pytest.raises(RecordingError):
        s.close()
    session.open(path).close()


@pytest.mark.parametrize("call", ["sync", "close", "run_close"])
def test_fsync_failure_in_each_syncing_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    s = session.create(tmp_path / "s.jsonl")
    run = s.begin_run()
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "EIO")))
    with pytest.raises(RecordingError, match="EIO"):
        {"sync": s.sync, "close": s.close, "run_close": run.close}[call]()
    monkeypatch.undo()
    with pytest.raises(RecordingError):
        s.close()
    session.open(tmp_path / "s.jsonl").close()


def test_short_writes_are_continued(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real(fd, bytes(data)[:7]))
    path = sample_file(tmp_path / "s.jsonl")
    monkeypatch.undo()
    assert session.read(path, lambda r: None).records == records_count(path)


def test_a_write_that_makes_no_progress_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = session.create(tmp_path / "s.jsonl")
    monkeypatch.setattr(os, "write", lambda fd, data: 0)
    with pytest.raises(RecordingError, match="no progress"):
        s.begin_run()
    monkeypatch.undo()
    with pytest.raises(RecordingError):
        s.close()


@pytest.mark.parametrize("written", [0, 10, None])  # None: all of the line
def test_an_interrupt_during_a_write_costs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written: Optional[int]
) -> None:
    """What a signal handler raises anywhere in a write (KeyboardInterrupt here): the line is
    then whole in the file or not there, and recording goes on with the right seq."""
    path = tmp_path / "s.jsonl"
    s = session.create(path)
    run = s.begin_run()
    real = os.write

    def write(fd: int, data: bytes) -> int:
        real(fd, bytes(data)[:written])
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(KeyboardInterrupt):
        run.record(Event("turn_start", turn_index=1))
    monkeypatch.undo()
    run.record(Event("turn_start", turn_index=2))
    s.close()
    turns = [r.data["turn_index"] for r in records(path) if r.type == "turn_start"]  # records() validates
    assert turns == ([2] if written == 0 else [1, 2])


@pytest.mark.parametrize("step", ["write", "fsync"])
def test_create_removes_the_file_when_the_header_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    def fail(*args: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, step, fail)
    path = tmp_path / "s.jsonl"
    with pytest.raises(RecordingError, match="No space") as info:
        session.create(path)
    assert isinstance(info.value.__cause__, OSError)
    assert list(tmp_path.iterdir()) == []  # neither the file nor its temporary name


def test_a_failed_close_is_a_recording_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = session.create(tmp_path / "s.jsonl")
    real_release = session._release_file

    def release(file: io.FileIO) -> None:
        real_release(file)
        raise OSError(errno.EIO, "Input/output error")  # as close(2) reports on NFS

    monkeypatch.setattr(session, "_release_file", release)
    with pytest.raises(RecordingError, match="cannot close"):
        s.close()
    monkeypatch.undo()
    assert repr(s).endswith("closed>")
    with pytest.raises(RecordingError):
        s.close()


def test_the_error_handling_examples_work(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    reopen_code, record_code = re.findall(
        r"```python\n(.*?)```", doc_section("## Handling errors", "docs/durability.md"), re.S
    )
    path = sample_file(tmp_path / "chat.jsonl")
    good = path.read_bytes()
    path.write_bytes(good + b'{"seq": \n{}\n')  # a bad complete line, then another
    scope: Dict[str, Any] = {"session": session, "contextlib": contextlib, "log": logging.getLogger("app")}
    exec(reopen_code, scope)
    s = scope["reopen"](path)  # repaired, then opened
    assert path.read_bytes() == good and list(tmp_path.glob("chat.jsonl.broken-*"))
    run = s.begin_run()
    run.record(Event("turn_start", turn_index=1))
    scope.update(s=s, run=run, path=path, event=Event("tool_exec_end", execution=TOOL, result={1, 2}))
    exec(record_code, scope)  # a value that cannot be encoded stops s; the example opens the file again
    assert "recording stopped" in caplog.text and "cause: ValueError('data.result" in caplog.text
    with scope["s"] as again, scope["run"] as next_run:
        assert again is not s and next_run.record(Event("turn_start", turn_index=1))
    summary = session.summarize(path)
    assert [info.closed for info in summary.runs] == [True, True, False, True]
    assert [gap.kind for gap in summary.gaps] == ["run_not_closed"]


DEEP_STACK_RECORD = """
import sys
sys.path.insert(0, {here!r})
import session


def nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


def depth_here():
    frame, n = sys._getframe(1), 0
    while frame is not None:
        frame, n = frame.f_back, n + 1
    return n


def at_depth(n, call):
    return at_depth(n - 1, call) if n > 0 else call()


for gap in range(8, 120, 3):
    s = session.create(sys.argv[1] + str(gap))
    run = s.begin_run()

    def record():
        try:
            tool = session.Execution("t", "tool")
            run.record(session.Event("tool_exec_end", execution=tool, result=nested(300)))
            return "recorded"
        except session.RecordingError:
            return "refused"

    print(at_depth(sys.getrecursionlimit() - depth_here() - gap, record), flush=True)
    try:
        s.close()
    except session.RecordingError:
        pass
"""


def test_a_record_from_deep_in_the_stack_is_refused_not_fatal(tmp_path: Path) -> None:
    """Encoding again right after a RecursionError aborted CPython 3.8 ("Cannot recover from
    stack overflow"): the writer touches the stack no more once it overflowed."""
    script = tmp_path / "deep.py"
    script.write_text(DEEP_STACK_RECORD.format(here=str(HERE)))
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "s")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    outcomes = done.stdout.split()
    assert len(outcomes) == 38 and set(outcomes) <= {"recorded", "refused"}


# ---------------------------------------------------------------------------- locking and concurrency

HOLD_OPEN = """
import sys, time
sys.path.insert(0, {here!r})
import session
s = session.open(sys.argv[1])
print("locked", flush=True)
sys.stdin.readline()
s.close()
"""


def test_a_second_writer_in_this_process_is_locked_out(tmp_path: Path) -> None:
    path = sample_file(tmp_path / "s.jsonl")
    with session.open(path):
        with pytest.raises(session.LockedError, match="another handle"):
            session.open(path)
        session.read(path, lambda r: None)  # readers take no lock
    session.open(path).close()


def test_a_second_writer_in_another_process_is_locked_out(tmp_path: Path) -> None:
    path = sample_file(tmp_path / "s.jsonl")
    script = tmp_path / "hold.py"
    script.write_text(HOLD_OPEN.format(here=str(HERE)))
    child = subprocess.Popen(
        [sys.executable, str(script), str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "locked\n"
        with pytest.raises(session.LockedError):
            session.open(path)
    finally:
        child.communicate("\n", timeout=60)
    assert child.returncode == 0
    with session.open(path):  # and the other way round
        other = subprocess.run(
            [sys.executable, str(script), str(path)], capture_output=True, text=True, timeout=60
        )
        assert other.returncode == 1 and "LockedError" in other.stderr


def test_eight_threads_write_whole_contiguous_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    per_thread = 1000
    with session.create(path) as s, s.begin_run() as run:

        def work(n: int) -> None:
            for i in range(per_thread):
                run.record(
                    Event(
                        "tool_exec_end", execution=TOOL, tool=f"w{n}", result={"i": i, "pad": "x" * (i % 300)}
                    )
                )

        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    rs = records(path)  # validates seq contiguity and every line
    assert len(rs) == 3 + 8 * per_thread
    for n in range(8):
        assert [r.data["result"]["i"] for r in rs if r.data.get("tool") == f"w{n}"] == list(range(per_thread))


KILL_WRITER = """
import os, random, sys
sys.path.insert(0, {here!r})
import session
s = session.open(sys.argv[1])
run = s.begin_run()
execution = session.Execution("t", "tool")
i = 0
while True:
    i += 1
    size = random.choice([10, 1000, 30000, 300000])
    run.record(session.Event("tool_exec_end", execution=execution, result={{"i": i, "pad": "x" * size}}))
    if i % 3 == 0:
        run.save_checkpoint({{"i": i}})
        print(s.load_checkpoint().seq, flush=True)
"""


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL is POSIX")
def test_reliability_kill_9(tmp_path: Path) -> None:
    """A writer killed at random moments, again and again on one file: every reopen
    succeeds and every checkpointed record, of every earlier round too, is there."""
    path = tmp_path / "s.jsonl"
    session.create(path).close()
    script = tmp_path / "writer.py"
    script.write_text(KILL_WRITER.format(here=str(HERE)))
    rng = random.Random(1)
    confirmed: List[int] = []
    rounds, tails = sweep(30, 10), 0
    for _ in range(rounds):
        child = subprocess.Popen(
            [sys.executable, "-S", str(script), str(path)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        first = child.stdout.readline()  # the first checkpoint, however slow the machine is today
        time.sleep(rng.uniform(0.0, 0.25))
        child.kill()  # SIGKILL
        out, _ = child.communicate(timeout=60)
        confirmed += map(int, (first + out).split())
        before = path.stat().st_size
        with session.open(path) as s:  # every reopen succeeds
            latest = s.load_checkpoint()
        tails += path.stat().st_size < before
        by_seq = {r.seq: r for r in records(path)}
        for seq in confirmed:
            assert by_seq[seq].type == "checkpoint"
            assert by_seq[seq].data["snapshot"] == {"i": by_seq[seq - 1].data["result"]["i"]}
        if confirmed:
            assert latest is not None and latest.seq >= confirmed[-1]
    print(
        f"kill -9: {rounds} crashes, {tails} torn tails cut, {len(confirmed)} checkpoints confirmed, 0 lost"
    )
    assert len(confirmed) > rounds


def test_create_removes_its_file_when_it_cannot_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_locks(fd: int, name: str) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(session, "_lock", no_locks)
    path = tmp_path / "s.jsonl"
    with pytest.raises(OSError, match="No locks"):
        session.create(path)
    assert list(tmp_path.iterdir()) == []


def test_a_codec_or_redactor_calling_its_session_neither_hangs_nor_breaks_the_file(tmp_path: Path) -> None:
    holder: List[session.Session] = []

    def redact(data: Dict[str, Any]) -> Dict[str, Any]:
        holder[0].sync()
        return data

    path = tmp_path / "a.jsonl"
    s = session.create(path, redact=redact)
    holder.append(s)
    run = s.begin_run()
    assert run.record(Event("turn_start"))
    s.close()
    assert [r.type for r in records(path)] == ["session_start", "run_start", "turn_start", "run_close"]

    class Recording:  # records from inside encode, for ever: fails on the stack, never hangs
        def encode(self, value: Any) -> Any:
            assert other.load_checkpoint() is None
            other_run.record(Event("message_end", message="again"))
            return value

        def decode(self, value: Any) -> Any:
            return value

    other = session.create(tmp_path / "b.jsonl", Recording())
    other_run = other.begin_run()
    with pytest.raises(RecordingError, match="recursion"):
        other_run.save_checkpoint(1)
    with pytest.raises(RecordingError):
        other.close()
    records(tmp_path / "b.jsonl")


if sys.platform != "win32":  # SIGUSR1, SIGALRM and setitimer are POSIX

    def signal_after_each_write(monkeypatch: pytest.MonkeyPatch, signum: int) -> List[int]:
        """A real signal raised the moment each os.write returns: its handler runs before the
        writer has taken note of the line (the window where a seq could be written twice)."""
        real = os.write
        sizes: List[int] = []

        def write(fd: int, data: bytes) -> int:
            done = real(fd, data)
            sizes.append(done)
            signal.raise_signal(signum)
            return done

        monkeypatch.setattr(os, "write", write)
        return sizes

    @pytest.mark.parametrize("call", ["record", "save_checkpoint", "sync", "close", "close and exit"])
    def test_a_signal_handler_that_calls_the_session_right_after_a_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
    ) -> None:
        path = tmp_path / "s.jsonl"
        s = session.create(path)
        run = s.begin_run()
        run.save_checkpoint({"n": 0})
        calls: List[str] = []

        def handler(signum: int, frame: Any) -> None:
            if len(calls) < 3:
                calls.append(call)
                if call == "record":
                    run.record(Event("turn_start", turn_index=len(calls)))
                elif call == "save_checkpoint":
                    run.save_checkpoint({"n": len(calls)})
                elif call == "sync":
                    s.sync()
                else:
                    s.close()
                    if call == "close and exit":
                        raise SystemExit(0)

        previous = signal.signal(signal.SIGUSR1, handler)
        try:
            signal_after_each_write(monkeypatch, signal.SIGUSR1)
            with contextlib.suppress(SystemExit, ValueError):  # ValueError: recording after close
                for i in range(5):
                    run.record(Event("tool_exec_end", execution=TOOL, result={"i": i}))
            monkeypatch.undo()
        finally:
            signal.signal(signal.SIGUSR1, previous)
        if not call.startswith("close"):
            s.close()
        assert calls and repr(s).endswith("closed>")
        rs = records(path)  # every line valid, seqs consecutive
        assert rs[-1].type == "run_close"
        with session.open(path) as again:  # the lock is released, the last checkpoint found
            loaded = again.load_checkpoint()
        assert loaded is not None
        assert loaded.snapshot == {"n": 3 if call == "save_checkpoint" else 0}
        if call == "record":
            assert [r.data["turn_index"] for r in rs if r.type == "turn_start"] == [1, 2, 3]
        if call.startswith("close"):  # the line under way when the handler ran, then run_close
            assert [r.type for r in rs][-3:] == ["checkpoint", "tool_exec_end", "run_close"]

    def test_a_signal_handler_that_closes_and_exits_while_close_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = tmp_path / "s.jsonl"
        s = session.create(path)
        s.begin_run().record(Event("turn_start"))

        def handler(signum: int, frame: Any) -> None:
            s.close()
            raise SystemExit(0)

        previous = signal.signal(signal.SIGUSR1, handler)
        try:
            signal_after_each_write(monkeypatch, signal.SIGUSR1)  # right after run_close is written
            with pytest.raises(SystemExit):
                s.close()
        finally:
            monkeypatch.undo()
            signal.signal(signal.SIGUSR1, previous)
        assert repr(s).endswith("closed>")
        assert [r.type for r in records(path)] == ["session_start", "run_start", "turn_start", "run_close"]
        session.open(path).close()

    def signal_at_step(number: int, signum: int) -> List[str]:
        """Raise a real signal at the *number*-th step of session.py from now on: the entry of
        one of its functions (Python checks for signals there), or an instruction of the two
        that mark a write as under way (3.8 and 3.9 check before most of them, never before
        entering a try); the steps reached."""
        steps: List[str] = []
        marked = {f.__code__: f for f in (session.Session._write, session.Session._finish)}
        names = {code: {i.offset: i.opname for i in dis.get_instructions(f)} for code, f in marked.items()}

        def trace(frame: Any, event: str, arg: Any) -> Any:
            code = frame.f_code
            if event == "call":
                # __del__: the finalizer of another test's session, when the collector runs here
                if code.co_filename != session.__file__ or code.co_name == "__del__":
                    return None
                frame.f_trace_opcodes = code in marked
            elif event != "opcode" or names[code][frame.f_lasti] in ("SETUP_FINALLY", "NOP"):
                return trace
            steps.append(f"{code.co_name} {event} {frame.f_lasti}")
            if len(steps) > number:
                sys.settrace(None)
                signal.raise_signal(signum)  # its handler's exception is raised at that step
            return trace

        sys.settrace(trace)
        return steps

    @pytest.mark.parametrize("call", ["record", "save_checkpoint", "run close"])
    def test_a_signal_handler_that_closes_and_exits_at_any_step_of_a_write(tmp_path: Path, call: str) -> None:
        """The usual SIGTERM handler run at each step of a write in turn (any place Python may
        run it, and more: the entry of what writes the queued lines too, and the end of a try):
        its exit comes through, and the file always ends closed."""

        def write(run: session.Run) -> None:
            if call == "record":
                run.record(Event("tool_exec_end", execution=TOOL, result={"i": 1}))
            elif call == "save_checkpoint":
                run.save_checkpoint({"n": 1})
            else:
                run.close()

        number = 0
        while True:
            path = tmp_path / f"s{number}.jsonl"
            s = session.create(path)
            run = s.begin_run()

            def handler(signum: int, frame: Any, s: session.Session = s) -> None:
                s.close()
                raise SystemExit(0)

            previous, tracing, exited = signal.signal(signal.SIGUSR1, handler), sys.gettrace(), False
            gc.collect()  # no finalizer of an earlier test's session runs during the steps
            try:
                entered = signal_at_step(number, signal.SIGUSR1)
                write(run)
            except SystemExit:
                exited = True
            finally:
                sys.settrace(tracing)
                signal.signal(signal.SIGUSR1, previous)
            if len(entered) <= number:  # the write was over before as many steps: all tried
                break
            assert exited and repr(s).endswith("closed>"), entered[-1]
            assert [r.type for r in records(path)][-1] == "run_close", entered[-1]
            session.open(path).close()  # nothing to cut, the lock released
            number += sweep(1, 3)  # every step, or every third
        s.close()
        assert any(step.startswith("_append call") for step in entered)  # up to the write itself
        # 3.12 and later may deliver no opcode events here; they, as 3.10 and 3.11 do, check
        # for signals only at calls and backward jumps
        assert sys.version_info >= (3, 12) or any(" opcode " in step for step in entered)

    def test_a_heartbeat_signal_every_half_millisecond_records_while_the_program_does(tmp_path: Path) -> None:
        path = tmp_path / "s.jsonl"
        s = session.create(path)
        run = s.begin_run()
        beats: List[int] = []

        numbers = itertools.count(1)

        def beat(signum: int, frame: Any) -> None:
            n = next(numbers)  # one call: a beat that interrupts this one gets the next number
            beats.append(n)
            run.record(Event("turn_start", turn_index=-n))

        previous = signal.signal(signal.SIGALRM, beat)
        signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)
        try:
            for i in range(3000):
                run.record(
                    Event("tool_exec_end", execution=TOOL, result={"i": i, "pad": "x" * (i % 7 * 500)})
                )
                if i % 100 == 0:
                    run.save_checkpoint({"i": i})
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        s.close()
        rs = records(path)  # validates every line and that seqs are consecutive
        assert [r.seq for r in rs] == list(range(1, len(rs) + 1))
        assert [r.data["result"]["i"] for r in rs if r.type == "tool_exec_end"] == list(range(3000))
        assert (
            sorted(-r.data["turn_index"] for r in rs if r.type == "turn_start")
            == list(range(1, len(beats) + 1))
            == sorted(beats)
        )
        assert beats  # 3000 records take far longer than half a millisecond

    @contextlib.contextmanager
    def a_signal_at_step(n: int, signum: int, opcodes: bool) -> Iterator[List[int]]:
        """Trace session.py and raise a real signal at its n-th step: a function's start (where
        every Python checks for signals) or, with *opcodes*, any bytecode (Python 3.8 checks
        almost everywhere).  Its handler runs right there, as when a signal arrives at that
        moment.  Yields a list that holds n once the signal was raised."""
        code = session.create.__code__.co_filename
        fired: List[int] = []
        steps = [0]

        def step(frame: Any, event: str, arg: Any) -> Any:
            frame.f_trace_opcodes = opcodes  # Python 3.12+ heed it only once the frame runs
            if event == ("opcode" if opcodes else "call") and not fired:
                steps[0] += 1
                if steps[0] == n:
                    fired.append(n)
                    signal.raise_signal(signum)  # the handler runs now; what it raises, raises here
            return step if opcodes and not fired else None

        def enter(frame: Any, event: str, arg: Any) -> Any:
            # __del__: the finalizer of an earlier session, when the collector runs here (what
            # a handler raises there, Python prints and drops)
            if fired or frame.f_code.co_filename != code or frame.f_code.co_name == "__del__":
                return None
            return step(frame, event, arg)

        previous = sys.gettrace()
        sys.settrace(enter)
        try:
            yield fired
        finally:
            sys.settrace(previous)

    def test_an_interrupt_at_any_bytecode_of_a_write_leaves_the_session_recording(tmp_path: Path) -> None:
        """Ctrl-C at each point of a record: that record is in the file or not, and the next
        one is written (never queued for ever behind a write that ended long ago)."""
        path = tmp_path / "s.jsonl"
        s = session.create(path)
        run = s.begin_run()
        returned: List[int] = []

        def interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGUSR1, interrupt)
        try:
            for n in itertools.count(1):
                with a_signal_at_step(n, signal.SIGUSR1, opcodes=True) as fired, contextlib.suppress(
                    KeyboardInterrupt
                ):
                    returned += [n] if run.record(Event("turn_start", turn_index=n)) else []
                if not fired:
                    break
                assert run.record(Event("turn_start", turn_index=-n))
                returned.append(-n)
        finally:
            signal.signal(signal.SIGUSR1, previous)
        s.close()
        session.open(path).close()  # close released the file
        indices = [r.data["turn_index"] for r in records(path) if r.type == "turn_start"]
        assert n > 500 and len(indices) == len(set(indices))  # a point for each bytecode, none twice
        assert set(returned) <= set(indices) and [i for i in indices if i < 0] == list(range(-1, -n, -1))

    @pytest.mark.parametrize("handler_does", ["interrupt", "record a request", "close the run"])
    def test_a_signal_at_any_call_of_a_version_2_request_leaves_every_reference_right(
        tmp_path: Path, quick_steps: List[int], handler_does: str
    ) -> None:
        """At each call made recording a request whose messages are partly new: Ctrl-C, a
        handler that records a request of its own, or one that closes the run.  The file is
        always valid, and every request in it reads back as the messages it was asked with."""
        asked = {
            "before": POOL[:2],
            "mine": [*POOL[:2], POOL[2], dataclasses.replace(POOL[3]), POOL[2]],
            "theirs": [POOL[1], POOL[4], POOL[2]],
        }

        def ask(run: session.Run, name: str) -> None:
            run.record(
                Event("model_request", execution=Execution(name, "model"), request=ModelRequest(asked[name]))
            )

        for n in itertools.count(1):
            path = tmp_path / f"s{n}.jsonl"
            s = session.create(path)
            run = s.begin_run()
            ask(run, "before")

            def handler(signum: int, frame: Any, run: session.Run = run) -> None:
                if handler_does == "interrupt":
                    raise KeyboardInterrupt
                if handler_does == "record a request":
                    ask(run, "theirs")
                else:
                    run.close()

            previous = signal.signal(signal.SIGUSR1, handler)
            try:
                # at each call: where 3.10 and later check for signals (and 3.8 too, most often)
                with a_signal_at_step(n, signal.SIGUSR1, opcodes=False) as fired, contextlib.suppress(
                    KeyboardInterrupt, ValueError
                ):
                    ask(run, "mine")
            finally:
                signal.signal(signal.SIGUSR1, previous)
            with contextlib.suppress(ValueError):  # the run may be closed
                ask(run, "mine")  # the next record settles what an interrupt cut short
            s.close()
            session.open(path).close()
            codec = JSONCodec()
            for r in requests(path):
                assert r.data["request"]["messages"] == [
                    codec.encode(m) for m in asked[r.data["execution"]["id"]]
                ]
            if not fired:
                break
        assert n > 50

    def test_load_checkpoint_agrees_with_the_file_after_an_interrupted_save(tmp_path: Path) -> None:
        path = tmp_path / "s.jsonl"
        s = session.create(path)
        run = s.begin_run()

        def interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGUSR1, interrupt)
        try:
            for n in itertools.count(1):
                with a_signal_at_step(n, signal.SIGUSR1, opcodes=False) as fired, contextlib.suppress(
                    KeyboardInterrupt
                ):
                    run.save_checkpoint({"n": n})
                run.record(Event("turn_start"))  # settles a line the interrupt left unaccounted
                loaded = s.load_checkpoint()
                latest = [r for r in records(path) if r.type == "checkpoint"]
                if latest:
                    assert loaded is not None, n
                    assert (loaded.seq, loaded.snapshot) == (latest[-1].seq, latest[-1].data["snapshot"]), n
                if not fired:
                    break
        finally:
            signal.signal(signal.SIGUSR1, previous)
        s.close()

    @pytest.mark.parametrize("ending", ["KeyboardInterrupt", "close and exit"])
    def test_a_handler_that_raises_at_any_call_of_the_writer_leaves_a_closed_file(
        tmp_path: Path, ending: str
    ) -> None:
        """A SIGTERM handler ``s.close(); sys.exit(0)`` (or Ctrl-C) arriving as any of the
        writer's functions starts, a record and a checkpoint under way: close releases the
        file, which ends closed, with every record that was confirmed."""
        for n in itertools.count(1):
            path = tmp_path / f"s{n}.jsonl"
            s = session.create(path)
            run = s.begin_run()
            returned: List[int] = []

            def handler(signum: int, frame: Any, s: session.Session = s) -> None:
                if ending == "close and exit":
                    s.close()
                    raise SystemExit(0)
                raise KeyboardInterrupt

            previous = signal.signal(signal.SIGUSR1, handler)
            try:
                with a_signal_at_step(n, signal.SIGUSR1, opcodes=False) as fired, contextlib.suppress(
                    KeyboardInterrupt, SystemExit
                ):
                    returned += [1] if run.record(Event("turn_start", turn_index=1)) else []
                    run.save_checkpoint({"n": 1})
                    returned.append(2)
            finally:
                signal.signal(signal.SIGUSR1, previous)
            s.close()
            if not fired:
                break
            assert repr(s).endswith("closed>"), n
            session.open(path).close()  # released, and valid
            rs = records(path)
            assert rs[-1].type == "run_close", n
            found = {r.data["turn_index"] for r in rs if r.type == "turn_start"}
            assert set(returned) <= found | ({2} if rs[-2].type == "checkpoint" else set()), n
        assert n > 20  # every function the writer calls on the way

    @pytest.fixture
    def quick_steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[List[int]]:
        """For tests that step through a write many times: no collection during the steps
        (no other session's finalizer runs in them), and an fsync that only notes the size
        of the file it would sync."""
        synced: List[int] = []
        monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.fstat(fd).st_size))
        gc.collect()
        gc.disable()
        try:
            yield synced
        finally:
            gc.enable()

    @pytest.mark.parametrize("handler_does", ["run.close", "session.close"])
    @pytest.mark.parametrize("call", ["record", "save_checkpoint"])
    def test_a_handler_that_closes_at_any_bytecode_of_a_write_leaves_a_valid_file(
        tmp_path: Path, quick_steps: List[int], handler_does: str, call: str
    ) -> None:
        """A handler that closes the run (or the session) and returns, at each bytecode of a
        record: the record is written before the close, or refused with ValueError after it,
        never written after it (a file open refuses) nor to a released descriptor."""
        for n in itertools.count(1):
            path = tmp_path / f"s{n}.jsonl"
            s = session.create(path)
            run = s.begin_run()
            outcome = ""

            def handler(signum: int, frame: Any, s: session.Session = s, run: session.Run = run) -> None:
                (run.close if handler_does == "run.close" else s.close)()

            previous = signal.signal(signal.SIGUSR1, handler)
            try:
                with a_signal_at_step(n, signal.SIGUSR1, opcodes=True) as fired:
                    try:
                        if call == "record":
                            run.record(Event("turn_start", turn_index=1))
                        else:
                            run.save_checkpoint({"n": 1})
                        outcome = "written"
                    except ValueError as exc:
                        outcome = str(exc)
            finally:
                signal.signal(signal.SIGUSR1, previous)
            assert not repr(s).endswith("failed>"), (n, outcome)
            s.close()  # never a RecordingError
            types = [r.type for r in records(path)]
            session.open(path).close()  # valid: no record after its run's close
            assert types[-1] == "run_close", n
            if outcome == "written":
                assert types[-2] in ("turn_start", "checkpoint"), n
            else:
                assert outcome.endswith(("is closed", "session is closed")), (n, outcome)
            if not fired:
                break
        assert n > 100  # a point for each bytecode of the way

    def test_begin_run_while_a_handler_closes_the_open_run_is_a_run_open_error_or_a_run(
        tmp_path: Path, quick_steps: List[int]
    ) -> None:
        for n in itertools.count(1):
            path = tmp_path / f"s{n}.jsonl"
            s = session.create(path)
            run = s.begin_run()

            def handler(signum: int, frame: Any, run: session.Run = run) -> None:
                run.close()

            previous = signal.signal(signal.SIGUSR1, handler)
            try:
                with a_signal_at_step(n, signal.SIGUSR1, opcodes=True) as fired, contextlib.suppress(
                    session.RunOpenError
                ):
                    s.begin_run().close()
            finally:
                signal.signal(signal.SIGUSR1, previous)
            s.close()
            session.open(path).close()
            if not fired:
                break
        assert n > 20

    def test_an_interrupt_at_any_bytecode_of_close_is_finished_by_the_next_close(
        tmp_path: Path, quick_steps: List[int]
    ) -> None:
        """Ctrl-C anywhere in Session.close: the next close() writes what is missing of the
        run_close, syncs it and releases the file (never a descriptor kept until exit)."""
        synced = quick_steps

        def interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        for n in itertools.count(1):
            path = tmp_path / f"s{n}.jsonl"
            s = session.create(path)
            s.begin_run().record(Event("turn_start"))
            previous = signal.signal(signal.SIGUSR1, interrupt)
            try:
                with a_signal_at_step(n, signal.SIGUSR1, opcodes=True) as fired, contextlib.suppress(
                    KeyboardInterrupt
                ):
                    s.close()
            finally:
                signal.signal(signal.SIGUSR1, previous)
            s.close()
            assert repr(s).endswith("closed>"), n
            assert [r.type for r in records(path)][-2:] == ["turn_start", "run_close"], n
            assert synced[-1] == path.stat().st_size, n  # the last sync came after run_close
            session.open(path).close()  # released
            if not fired:
                break
        assert n > 50


STRESS_WRITER = """
import signal, sys, time
sys.path.insert(0, {here!r})
import session
path, mode, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
state = {{"s": session.create(path)}}
state["run"] = state["s"].begin_run()
tool = session.Execution("t", "tool")


def handler(signum, frame):
    try:
        if mode == "record":
            state["run"].record(session.Event("turn_start", turn_index=-1))
        elif mode == "run.close":
            state["run"].close()
        else:
            state["s"].close()
    except ValueError:  # the run or session the handler found is closed
        pass


signal.signal(signal.SIGALRM, handler)
# a close syncs, which can take longer than 0.2 ms: a beat every 0.2 ms would then nest
# handlers in handlers until the stack overflows, in any program
beat = 0.002 if mode == "session.close" else 0.0002
signal.setitimer(signal.ITIMER_REAL, beat, beat)
deadline = time.monotonic() + seconds
i = 0
while time.monotonic() < deadline:
    i += 1
    try:
        state["run"].record(session.Event("tool_exec_end", execution=tool, result={{"i": i}}))
        if i % 50 == 0:
            state["run"].save_checkpoint({{"i": i}})
    except ValueError:  # closed by the handler: start again
        if repr(state["s"]).endswith("closed>"):
            state["s"] = session.open(path)
        try:
            state["run"] = state["s"].begin_run()
        except (session.RunOpenError, ValueError):
            pass
signal.setitimer(signal.ITIMER_REAL, 0)
state["s"].close()
print(i)
"""


@pytest.mark.skipif(os.name != "posix", reason="SIGALRM and setitimer are POSIX")
@pytest.mark.parametrize("mode", ["record", "run.close", "session.close"])
def test_real_signals_every_fifth_of_a_millisecond_never_break_the_file(tmp_path: Path, mode: str) -> None:
    """A SIGALRM handler that records, closes the run, or closes the session, raised every
    0.2 ms (2 ms for the session's close, which syncs) for two seconds while the program
    records: no stray exception, and a file that opens, whose runs all end closed."""
    script = tmp_path / "writer.py"
    script.write_text(STRESS_WRITER.format(here=str(HERE)))
    path = tmp_path / "s.jsonl"
    child = subprocess.run(
        [sys.executable, "-S", str(script), str(path), mode, "2"], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0 and child.stderr == "", child.stderr
    session.open(path).close()
    summary = session.summarize(path)
    assert summary.counts["run_start"] == summary.counts["run_close"] >= 1
    assert summary.counts["tool_exec_end"] >= 20
    if mode != "record":
        assert summary.counts["run_start"] > 10  # the handler did close, often


SIGTERM_WRITER = """
import signal, sys
sys.path.insert(0, {here!r})
import session
s = session.create(sys.argv[1])
run = s.begin_run()


def stop(signum, frame):
    s.close()
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
execution = session.Execution("t", "tool")
i = 0
while True:
    i += 1
    pad = "x" * (i % 4 * 40000)
    run.record(session.Event("tool_exec_end", execution=execution, result={{"i": i, "pad": pad}}))
    if i % 3 == 0:
        run.save_checkpoint({{"i": i}})
        print(s.load_checkpoint().seq, flush=True)
"""


@pytest.mark.skipif(os.name != "posix", reason="SIGTERM to a handler is POSIX")
def test_graceful_shutdown_on_sigterm_at_random_moments(tmp_path: Path) -> None:
    """The usual handler, s.close() then sys.exit(0), run at a random moment of recording:
    every file opens, ends closed, and holds every checkpoint the writer confirmed."""
    script = tmp_path / "writer.py"
    script.write_text(SIGTERM_WRITER.format(here=str(HERE)))
    rng = random.Random(3)
    for n in range(sweep(30, 10)):
        path = tmp_path / f"s{n}.jsonl"
        child = subprocess.Popen(
            [sys.executable, "-S", str(script), str(path)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        first = child.stdout.readline()  # recording has begun
        time.sleep(rng.uniform(0, 0.05))
        child.terminate()  # SIGTERM
        out, _ = child.communicate(timeout=60)
        assert child.returncode == 0, (n, first, out)
        confirmed = [int(seq) for seq in (first + out).split()]
        with session.open(path) as s:  # opens: nothing to cut, the handler closed it
            latest = s.load_checkpoint()
        rs = records(path)
        assert rs[-1].type == "run_close", n
        assert all(rs[seq - 1].type == "checkpoint" for seq in confirmed)
        assert latest is not None and latest.seq >= confirmed[-1]


if sys.platform != "win32":  # os.fork is POSIX

    def test_a_forked_child_cannot_write_through_the_parents_handle(tmp_path: Path) -> None:
        path = tmp_path / "s.jsonl"
        with session.create(path) as s, s.begin_run() as run:
            run.record(Event("turn_start", turn_index=1))
            pid = os.fork()
            if pid == 0:  # the child: every write must fail, and close must not unlock
                status = 0
                for call in (
                    lambda: run.record(Event("turn_start", turn_index=99)),
                    s.sync,
                    run.close,
                    s.close,
                ):
                    try:
                        call()
                        status = 1
                    except RecordingError as exc:
                        status |= 0 if "belongs to process" in str(exc) else 2
                os._exit(status)
            _, status = os.waitpid(pid, 0)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            with pytest.raises(session.LockedError):  # the child's close released nothing
                session.open(path)
            run.record(Event("turn_start", turn_index=2))
        assert [r.data.get("turn_index") for r in records(path) if r.type == "turn_start"] == [1, 2]


if sys.platform != "win32":  # os.fork is POSIX

    def test_a_forked_child_does_not_keep_the_file_locked(tmp_path: Path) -> None:
        path = tmp_path / "s.jsonl"
        s = session.create(path)
        closed_before = session.create(tmp_path / "other.jsonl")
        closed_before.close()
        s.begin_run().record(Event("turn_start"))
        parent_reads, child_ready = os.pipe()
        child_waits, parent_done = os.pipe()
        pid = os.fork()
        if pid == 0:  # a long-lived worker, as a fork pool keeps
            closed_before.close()  # closed before the fork: still just closed
            os.write(child_ready, b"x")  # running: the at-fork hook has let go of the file
            os.read(child_waits, 1)
            os._exit(0)
        os.read(parent_reads, 1)
        try:
            s.close()
            with session.open(path) as again:  # the child's copy of the descriptor is gone
                again.begin_run().record(Event("turn_start"))
        finally:
            os.write(parent_done, b"x")
            _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert [r.type for r in records(path)].count("turn_start") == 2


if sys.platform != "win32":  # os.fork is POSIX

    def test_a_child_forked_while_another_thread_encodes_gets_recording_errors(tmp_path: Path) -> None:
        path = tmp_path / "s.jsonl"
        encoding, go_on = threading.Event(), threading.Event()

        def redact(data: Dict[str, Any]) -> Dict[str, Any]:
            if data.get("turn_index") == 1:  # hold the lock, mid-record, until the fork is done
                encoding.set()
                go_on.wait(60)
            return data

        s = session.create(path, redact=redact)
        run = s.begin_run()
        worker = threading.Thread(target=run.record, args=(Event("turn_start", turn_index=1),))
        worker.start()
        assert encoding.wait(60)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: "may lead to deadlocks"
            pid = os.fork()
        if pid == 0:  # the child: no worker thread, and a handle that is not its own
            status = 0
            for call in (lambda: run.record(Event("turn_start", turn_index=2)), run.close, s.close):
                try:
                    call()
                    status |= 1
                except RecordingError:
                    pass
                except BaseException:  # noqa: BLE001 - the child reports, never raises
                    status |= 2
            os._exit(status)
        go_on.set()
        worker.join()
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        s.close()
        assert [r.data.get("turn_index") for r in records(path) if r.type == "turn_start"] == [1]


def test_a_session_dropped_unclosed_warns_and_lets_go_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    s = session.create(path)
    s.begin_run().record(Event("turn_start"))
    del s
    with pytest.warns(ResourceWarning, match="unclosed session"):
        gc.collect()  # a run and its session refer to each other: the collector finds them
    with session.open(path) as again:  # the lock went with the descriptor
        again.begin_run()
    # nothing was written for the dropped session: its run reads as interrupted
    assert [r.type for r in records(path)] == [
        "session_start",
        "run_start",
        "turn_start",
        "run_start",
        "run_close",
    ]
    dev = subprocess.run(
        [
            sys.executable,
            "-X",
            "dev",
            "-c",
            f"import sys; sys.path.insert(0, {str(HERE)!r}); import session; "
            f"s = session.create({str(tmp_path / 'dev.jsonl')!r}); del s",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dev.returncode == 0 and "ResourceWarning: unclosed session" in dev.stderr


# ---------------------------------------------------------------------------- reader rules

SID, RID = "a" * 32, "b" * 32


def line_obj(n: int, kind: str = "turn_start", **changes: Any) -> Dict[str, Any]:
    obj: Dict[str, Any] = {"session_id": SID, "seq": n, "type": kind, "time": "t", "run_id": RID, "data": {}}
    obj.update(changes)
    return {k: v for k, v in obj.items() if v is not DROP}


DROP = object()
HEAD = {"session_id": SID, "seq": 1, "type": "session_start", "time": "t", "data": {"version": 1}}
START = line_obj(2, "run_start")


def raw_line(text: str) -> Any:
    return text.encode() if isinstance(text, str) else text


BAD_FILES: List[Any] = [
    # (id, objects or raw lines, bad line, reason pattern)
    ("utf8", [HEAD, START, b'{"x":"\xff"}'], 3, "invalid UTF-8 at byte 6"),
    ("surrogate bytes", [HEAD, START, b'{"x":"\xed\xa0\x80"}'], 3, "invalid UTF-8"),
    ("json", [HEAD, START, b'{"seq":'], 3, "invalid JSON: Expecting value at column 8"),
    ("trailing", [HEAD, START, b'{"seq":3} x'], 3, "invalid JSON: Extra data"),
    ("NaN", [HEAD, START, b'{"seq":NaN}'], 3, "NaN is not strict JSON"),
    ("Infinity", [HEAD, START, b'{"x":[-Infinity]}'], 3, "-Infinity is not strict JSON"),
    ("deep", [HEAD, START, b"[" * 100_000], 3, "nested too deeply|Expecting"),
    ("deep object", [HEAD, START, b'{"a":' * 100_000], 3, "nested too deeply|Expecting"),
    ("array", [HEAD, START, [1, 2]], 3, "line holds an array, not an object"),
    ("string", [HEAD, START, "x"], 3, "line holds a string"),
    ("null", [HEAD, START, None], 3, "line holds null"),
    ("empty line", [HEAD, START, b""], 3, "Expecting value"),
    ("NUL run", [HEAD, START, b"\x00" * 4096], 3, "invalid JSON"),
    ("no session_id", [HEAD, START, line_obj(3, session_id=DROP)], 3, "missing key 'session_id'"),
    ("no seq", [HEAD, START, line_obj(3, seq=DROP)], 3, "missing key 'seq'"),
    ("no type", [HEAD, START, line_obj(3, type=DROP)], 3, "missing key 'type'"),
    ("no time", [HEAD, START, line_obj(3, time=DROP)], 3, "missing key 'time'"),
    ("no data", [HEAD, START, line_obj(3, data=DROP)], 3, "missing key 'data'"),
    ("no run_id", [HEAD, START, line_obj(3, run_id=DROP)], 3, "missing key 'run_id'"),
    ("seq string", [HEAD, START, line_obj(3, seq="3")], 3, "seq must be an integer, found a string"),
    ("seq float", [HEAD, START, line_obj(3, seq=3.0)], 3, "seq must be an integer, found a number"),
    ("seq bool", [HEAD, line_obj(2, "run_start", seq=True)], 2, "seq must be an integer, found a boolean"),
    ("type int", [HEAD, START, line_obj(3, type=3)], 3, "type must be a string, found an integer"),
    ("time null", [HEAD, START, line_obj(3, time=None)], 3, "time must be a string, found null"),
    ("data array", [HEAD, START, line_obj(3, data=[])], 3, "data must be an object, found an array"),
    ("run_id int", [HEAD, START, line_obj(3, run_id=1)], 3, "run_id must be a string, found an integer"),
    ("session_id int", [HEAD, START, line_obj(3, session_id=1)], 3, "session_id must be a string"),
    (
        "other session",
        [HEAD, START, line_obj(3, session_id="c" * 32)],
        3,
        "session_id 'c+' differs from line 1's",
    ),
    ("seq gap", [HEAD, START, line_obj(4)], 3, "seq 3 expected, found 4"),
    ("seq repeat", [HEAD, START, line_obj(2)], 3, "seq 3 expected, found 2"),
    ("huge seq", [HEAD, START, b'{"seq":' + b"9" * 5000 + b"}"], 3, "seq|integer|JSON"),
    ("1e999", [HEAD, START, b'{"x":[1.5,1e999]}'], 3, "number 1e999 is out of range for a double"),
    ("first not header", [START], 1, "line 1 must be a session_start record, found type 'run_start'"),
    ("no version", [dict(HEAD, data={})], 1, "integer data.version"),
    ("version text", [dict(HEAD, data={"version": "1"})], 1, "integer data.version"),
    ("version bool", [dict(HEAD, data={"version": True})], 1, "integer data.version"),
    ("header run_id", [dict(HEAD, run_id=RID)], 1, "session_start carries no run_id"),
    ("header seq", [dict(HEAD, seq=0)], 1, "seq 1 expected, found 0"),
    ("header time", [dict(HEAD, time=0)], 1, "time must be a string"),
    ("header array", [[HEAD]], 1, "line holds an array"),
    ("BOM", [b"\xef\xbb\xbf" + json.dumps(HEAD).encode()], 1, "invalid JSON"),
    (
        "header again",
        [HEAD, START, line_obj(3, "session_start", run_id=DROP)],
        3,
        "session_start is allowed on line 1 only",
    ),
    (
        "header with the run's id",
        [HEAD, START, line_obj(3, "session_start", data={"version": 1})],
        3,
        "line 1 only",
    ),
    (
        "run_id reused",
        [HEAD, START, line_obj(3, "run_close"), line_obj(4, "run_start")],
        4,
        "run_start reuses run_id 'b+'",
    ),
    ("before a run", [HEAD, line_obj(2)], 2, "run_id 'b+' has no run_start"),
    ("unknown run", [HEAD, START, line_obj(3, run_id="d" * 32)], 3, "run_id 'd+' has no run_start"),
    ("after close", [HEAD, START, line_obj(3, "run_close"), line_obj(4)], 4, "run 'b+' is already closed"),
    ("close twice", [HEAD, START, line_obj(3, "run_close"), line_obj(4, "run_close")], 4, "already closed"),
    (
        "old run",
        [HEAD, START, line_obj(3, "run_start", run_id="e" * 32), line_obj(4)],
        4,
        "record for run 'b+' after run 'e+' started",
    ),
    (
        "checkpoint of old run",
        [
            HEAD,
            START,
            line_obj(3, "run_start", run_id="e" * 32),
            line_obj(4, "checkpoint", data={"snapshot": 1}),
        ],
        4,
        "after run",
    ),
]


def blob_of(items: List[Any]) -> bytes:
    return b"".join(
        (item if isinstance(item, bytes) else json.dumps(item, separators=(",", ":")).encode()) + b"\n"
        for item in items
    )


@pytest.mark.parametrize(
    ("items", "line", "reason"), [case[1:] for case in BAD_FILES], ids=[c[0] for c in BAD_FILES]
)
def test_each_reader_rule_names_its_line_and_offset(
    tmp_path: Path, items: List[Any], line: int, reason: str
) -> None:
    blob = blob_of(items) + blob_of([line_obj(99)])  # what follows a bad line does not matter
    path = tmp_path / "bad.jsonl"
    path.write_bytes(blob)
    visited: List[int] = []
    with pytest.raises(FormatError) as info:
        session.read(path, lambda r: visited.append(r.seq))
    assert re.search(reason, info.value.reason), info.value.reason
    assert (info.value.line, info.value.offset, info.value.path) == (line, offsets(blob)[line - 1], str(path))
    assert visited == list(range(1, line))  # the records before it were visited
    with pytest.raises(FormatError):
        list(session.iter_records(path))
    with pytest.raises(FormatError):
        session.open(path)
    assert path.read_bytes() == blob


def test_an_unsupported_version_names_it(tmp_path: Path) -> None:
    path = tmp_path / "v3.jsonl"
    path.write_bytes(blob_of([dict(HEAD, data={"version": 3}, new_envelope=True)]))
    with pytest.raises(session.UnsupportedVersionError, match="unsupported format version 3") as info:
        session.read(path, lambda r: None)
    assert info.value.version == 3 and (info.value.line, info.value.offset) == (1, 0)
    assert "reads 1 and 2" in str(info.value)


@pytest.mark.parametrize("blob", [b"", b'{"session_id":"a', b"\x00" * 600, json.dumps(HEAD).encode()])
def test_a_file_without_a_complete_line_is_not_a_session(tmp_path: Path, blob: bytes) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(blob)
    with pytest.raises(FormatError, match="no complete line") as info:
        session.read(path, lambda r: None)
    assert (info.value.line, info.value.offset) == (1, 0)
    with pytest.raises(FormatError, match="no complete line"):
        session.open(path)
    assert path.read_bytes() == blob


def test_a_final_line_without_newline_is_ignored_even_when_valid(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    complete = blob_of([HEAD, START])
    tail = json.dumps(line_obj(3)).encode()
    path.write_bytes(complete + tail)
    seen: List[session.Record] = []
    result = session.read(path, seen.append)
    assert result == session.ReadResult(SID, 2, len(complete), len(tail))
    assert [r.type for r in seen] == ["session_start", "run_start"]


def test_whitespace_around_a_line_and_crlf_are_json(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(
        b" " + json.dumps(HEAD).encode() + b"\r\n" + json.dumps(START, indent=None).encode() + b" \t\n"
    )
    assert [r.seq for r in records(path)] == [1, 2]


def test_records_carry_envelope_data_and_offset(tmp_path: Path) -> None:
    path = sample_file(tmp_path / "s.jsonl", runs=1)
    blob = path.read_bytes()
    rs = records(path)
    assert [r.offset for r in rs] == offsets(blob)[:-1]
    assert rs[0].run_id is None and rs[0].data == {"version": 2} and rs[0].ref is None
    head = json.loads(blob.splitlines()[2])
    assert rs[2] == session.Record(
        head["session_id"], 3, head["type"], head["time"], head["run_id"], head["data"], rs[2].offset
    )
    assert rs[3].ref == CallRef(rs[0].session_id, str(rs[1].run_id), "m1", 1)
    assert [r.ref for r in rs if r.type in ("run_start", "checkpoint", "turn_start")] == [None, None, None]


def test_unknown_envelope_keys_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(blob_of([dict(HEAD, extra=1), dict(START, trace="x")]))
    assert [r.seq for r in records(path)] == [1, 2]


def test_every_truncation_of_a_sample_file(tmp_path: Path) -> None:
    blob = sample_file(tmp_path / "whole.jsonl", runs=1).read_bytes()
    starts = offsets(blob)
    path = tmp_path / "cut.jsonl"
    for size in range(len(blob) + 1):
        path.write_bytes(blob[:size])
        complete = [s for s in starts if 0 < s <= size]
        if not complete:
            with pytest.raises(FormatError) as info:
                session.read(path, lambda r: None)
            assert (info.value.line, info.value.offset) == (1, 0)
            continue
        result = session.read(path, lambda r: None)
        assert (result.records, result.complete_bytes) == (len(complete), complete[-1])
        assert result.tail_bytes == size - complete[-1]


def test_open_after_every_truncation_keeps_the_complete_lines(tmp_path: Path) -> None:
    blob = sample_file(tmp_path / "whole.jsonl", runs=1).read_bytes()
    starts = offsets(blob)
    path = tmp_path / "cut.jsonl"
    for size in range(starts[1], len(blob) + 1, 7):
        path.write_bytes(blob[:size])
        keep = max(s for s in starts if s <= size)
        with session.open(path) as s:
            assert path.read_bytes() == blob[:keep]
            with s.begin_run() as run:
                run.record(Event("turn_start"))
        assert records(path)[-2].type == "turn_start"


def test_a_file_object_is_read_from_its_position(tmp_path: Path) -> None:
    blob = sample_file(tmp_path / "s.jsonl", runs=1).read_bytes()
    path = tmp_path / "container"
    path.write_bytes(b"PREFIX\n" + blob)
    with path.open("rb") as f:
        f.seek(7)
        seen: List[int] = []
        result = session.read(f, lambda r: seen.append(r.offset))
    assert seen == [7 + o for o in offsets(blob)[:-1]]
    assert result.complete_bytes == len(blob) and result.tail_bytes == 0
    with path.open("rb") as f:
        with pytest.raises(FormatError) as info:
            session.read(f, lambda r: None)
        assert info.value.path == str(path) and info.value.line == 1


def test_a_text_file_is_refused(tmp_path: Path) -> None:
    path = sample_file(tmp_path / "s.jsonl", runs=1)
    with path.open(encoding="utf-8") as f, pytest.raises(TypeError, match="binary"):
        session.read(f, lambda r: None)  # type: ignore[arg-type]


def test_a_visit_exception_stops_the_read(tmp_path: Path) -> None:
    path = sample_file(tmp_path / "s.jsonl", runs=1)
    seen: List[int] = []

    def visit(record: session.Record) -> None:
        seen.append(record.seq)
        if record.seq == 3:
            raise KeyError("stop")

    with pytest.raises(KeyError, match="stop"):
        session.read(path, visit)
    assert seen == [1, 2, 3]


def test_a_line_longer_than_max_line_bytes(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    blob = blob_of([HEAD, START, line_obj(3, data={"x": "y" * 5000}), line_obj(4)])
    path.write_bytes(blob)
    longest = max(len(line) for line in blob.split(b"\n"))
    assert session.read(path, lambda r: None, max_line_bytes=longest).records == 4
    with pytest.raises(FormatError, match=r"longer than max_line_bytes \(1000\)") as info:
        session.read(path, lambda r: None, max_line_bytes=1000)
    assert (info.value.line, info.value.offset) == (3, offsets(blob)[2])
    with pytest.raises(FormatError, match="longer than"):
        session.read(path, lambda r: None, max_line_bytes=10)  # line 1
    path.write_bytes(blob[: offsets(blob)[2] + 3000])  # an over-long unfinished tail
    with pytest.raises(FormatError, match="longer than"):
        session.open(path, max_line_bytes=1000)


@pytest.mark.parametrize("limit", [0, -1, -(2**70)])
def test_max_line_bytes_below_one_is_refused(tmp_path: Path, limit: int) -> None:
    path = sample_file(tmp_path / "s.jsonl", runs=1)
    blob = path.read_bytes()
    calls: List[Callable[[], Any]] = [
        lambda: session.read(path, lambda r: None, max_line_bytes=limit),
        lambda: list(session.iter_records(path, max_line_bytes=limit)),
        lambda: session.open(path, max_line_bytes=limit),
        lambda: session.repair(path, max_line_bytes=limit),
        lambda: session.summarize(path, max_line_bytes=limit),
        lambda: session.find(path, CallRef(SID, RID, "m1", 1), max_line_bytes=limit),
        lambda: session.create(tmp_path / "new.jsonl", max_line_bytes=limit),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=f"max_line_bytes must be at least 1, not {limit}"):
            call()
    assert not (tmp_path / "new.jsonl").exists()
    assert path.read_bytes() == blob
    with session.open(path) as s:  # a refused open let go of the lock
        assert s.session_id == records(path)[0].session_id


CORPUS = HERE / "testdata" / "JSONTestSuite" / "test_parsing"


def test_json_test_suite_lines_are_rejected_cleanly(tmp_path: Path) -> None:
    header = blob_of([HEAD])
    path = tmp_path / "case.jsonl"
    cases = sorted(CORPUS.iterdir())
    checked = 0
    for case in cases:
        content = case.read_bytes()
        if b"\n" in content:
            continue
        path.write_bytes(header + content + b"\n")
        with pytest.raises(FormatError) as info:
            session.read(path, lambda r: None)
        assert (info.value.line, info.value.offset) == (2, len(header)), case.name
        checked += 1
    assert checked > 250


def json_accepts(blob: bytes) -> bool:
    """The reader's verdict on one line parsed whole: strict json.loads, on a fresh stack."""
    try:
        session._decode_anywhere(blob.decode(), blob)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return True


def scanner_accepts(blob: bytes) -> bool:
    """The verdict of the byte scanner the reader uses on long lines."""
    if session._invalid_utf8(blob) >= 0:
        return False
    try:
        session._scan_json(blob, frozenset())
    except session._NotJSON:
        return False
    return True


def test_the_long_line_scanner_agrees_with_json_on_the_test_suite() -> None:
    verdicts = {case.name: json_accepts(case.read_bytes()) for case in sorted(CORPUS.iterdir())}
    assert sum(verdicts.values()) > 90 and not all(verdicts.values())
    assert {name: scanner_accepts((CORPUS / name).read_bytes()) for name in verdicts} == verdicts


def long_line(data: bytes) -> bytes:
    return (
        f'{{"session_id":"{SID}","seq":3,"type":"tool_exec_end","time":"t","run_id":"{RID}",'.encode()
        + b'"data":'
        + data
        + b"}"
    )


LONG = b"[" + b'{},1.5,0,"x\\u00e9\\n",[],true,null,' * 60_000 + b"0]"  # 2 MB
LONG_LINES = [
    ("valid", long_line(b'{"execution":{"id":"t1","kind":"tool"},"result":' + LONG + b"}")),
    ("NaN", long_line(b'{"result":' + LONG.replace(b"1.5,", b"NaN,", 1) + b"}")),
    ("1e999", long_line(b'{"result":' + LONG[:-2] + b"1e999]}")),
    ("long int", long_line(b'{"result":' + LONG[:-2] + b"9" * 5000 + b"]}")),
    ("trailing comma", long_line(b'{"result":' + LONG[:-2] + b"]}")),
    ("control character", long_line(b'{"result":' + LONG.replace(b"\\n", b"\\n\x01") + b"}")),
    ("bad escape", long_line(b'{"result":' + LONG.replace(b"\\u00e9", b"\\x", 1) + b"}")),
    ("invalid UTF-8", long_line(b'{"result":' + LONG.replace(b"x", b"\xed\xa0\x80", 1) + b"}")),
    ("deep", long_line(b'{"result":' + LONG[:-2] + b"[" * 5000 + b"]" * 5000 + b"]}")),
    ("data twice", long_line(b'{"result":' + LONG + b'},"data":[]')),
    ("seq as text", long_line(b'{"result":' + LONG + b"}").replace(b'"seq":3', b'"seq":"3"')),
    ("no type", long_line(b'{"result":' + LONG + b"}").replace(b'"type":"tool_exec_end",', b"")),
    ("array", b"[" + long_line(b'{"result":' + LONG + b"}") + b"]"),
    ("extra data", long_line(b'{"result":' + LONG + b"}") + b" {}"),
]


@pytest.mark.parametrize("line", [case[1] for case in LONG_LINES], ids=[case[0] for case in LONG_LINES])
def test_a_long_line_gets_the_verdict_json_gives_without_being_built(tmp_path: Path, line: bytes) -> None:
    assert len(line) > session._BIG_LINE and not session._builds_little(line)
    path = tmp_path / "s.jsonl"
    path.write_bytes(blob_of([HEAD, START, line, line_obj(4, "run_close")]))

    def outcome(reader: Any) -> Any:
        try:
            return reader()
        except FormatError as exc:
            return (exc.line, exc.offset)

    whole: List[session.Record] = []
    scanned: List[session.Record] = []
    verdict = outcome(lambda: session.read(path, whole.append))
    with path.open("rb") as f:
        assert (
            outcome(lambda: session._read(f, str(path), 1 << 30, scanned.append, session._NO_DATA)) == verdict
        )
    valid = isinstance(verdict, session.ReadResult)
    assert outcome(lambda: session.open(path).close()) == (None if valid else verdict)
    assert outcome(lambda: session.summarize(path).records) == (verdict.records if valid else verdict)
    assert run_cli("validate", str(path)).returncode == (0 if valid else 1)
    if valid:  # read built the data; the others did not
        assert whole[2].data["result"][:3] == [{}, 1.5, 0]
        assert scanned[2].data == {} and scanned[2]._replace(data=whole[2].data) == whole[2]
        # the call's execution was read, where the line has one: its end has no start (the
        # deep line is valid where json nests 5,000 deep, as on 3.13, and has none)
        gaps = [(gap.kind, gap.seq, gap.ref and gap.ref.execution_id) for gap in session.summarize(path).gaps]
        assert gaps == ([("call_end_without_start", 3, "t1")] if b'"execution"' in line else [])


PEAK_OF_VALIDATE = """
import sys, session
def peak():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the high-water mark starts again from what is resident now
before = peak()
assert session.main(["validate", sys.argv[1]]) == int(sys.argv[2] if len(sys.argv) > 2 else 0)
print((peak() - before) * 1024)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="peak memory is measured through Linux's /proc")
def test_validating_a_hostile_long_line_takes_a_few_times_its_size(tmp_path: Path) -> None:
    line = long_line(b'{"result":[' + b"{}," * ((16 << 20) // 3) + b"0]}")  # json would build 5 million dicts
    path = tmp_path / "s.jsonl"
    path.write_bytes(blob_of([HEAD, START, line, line_obj(4, "run_close")]))
    done = subprocess.run(
        [sys.executable, "-c", PEAK_OF_VALIDATE, str(path)],
        capture_output=True,
        text=True,
        cwd=HERE,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) < 3 * len(line)  # 26 times when the line was built


def test_a_long_string_without_escapes_is_left_to_the_linear_scanner(tmp_path: Path) -> None:
    # re's patterns for runs of plain values backtracked over the whole of such a string each
    # time the container around it did not fit them (a 37 MB line summarized in 3.4 s, read
    # in 0.07 s); a plain run is bounded now, and the string left to the scanner
    items, members = session._plain_runs()
    assert items.match(b'"' + b"x" * 4096 + b'",') and not items.match(b'"' + b"x" * 4097 + b'",')
    assert not members.match(b'"k":"' + b"x" * 4097 + b'",')
    path = tmp_path / "s.jsonl"
    with session.create(path, max_line_bytes=1 << 23) as s, s.begin_run() as run:
        call = Execution("t1", "tool", turn_index=1)
        run.record(Event("tool_exec_start", execution=call, tool_id="t1", tool="read", args={}))
        text = {"content": [{"type": "text", "text": "\u00e9" * (1 << 20)}]}  # 2 MiB, one line
        run.record(Event("tool_exec_end", execution=call, tool_id="t1", tool="read", result=text))
    summary = session.summarize(path, max_line_bytes=1 << 23)
    assert not summary.gaps and summary.records == len(
        list(session.iter_records(path, max_line_bytes=1 << 23))
    )


@pytest.mark.parametrize(
    "line",
    [
        b"[" + b"{}," * 100_000 + b"0]",
        b"[" + b"[[]]," * 100_000 + b"0]",
        b"[" + b'{"a":{}},' * 50_000 + b"0]",
        b"{" + b",".join(b'"k%d":%d' % (n, n) for n in range(50_000)) + b"}",
        b"[" + b"1.5," * 100_000 + b"0]",
        '["\U0001f600' + "a" * 300_000 + '"]',
        "[" + '"\U0001f600a","\u00e9\u00e9",' * 30_000 + '"x"]',
    ],
    ids=["dicts", "nested lists", "nested dicts", "keys", "floats", "emoji in ASCII", "short strings"],
)
def test_what_json_builds_of_a_line_is_no_more_than_the_reader_counts(line: Any) -> None:
    raw = line.encode() if isinstance(line, str) else line
    text = raw.decode()
    tracemalloc.start()
    try:
        json.loads(text)
        built = tracemalloc.get_traced_memory()[1] + sys.getsizeof(text)
    finally:
        tracemalloc.stop()
    saved = session._PARSE_BUDGET
    session._PARSE_BUDGET = built - 1  # the count may not say it fits
    try:
        assert not session._builds_little(raw)
    finally:
        session._PARSE_BUDGET = saved


def hostile_v2_file(path: Path, place: str, value: bytes) -> bytes:
    """A version-2 file whose request (or header, for *place* ``version``) holds *value* at
    *place*; the hostile line."""
    objs = a_v2_file(path)
    at = 0 if place == "version" else 5
    objs[at]["data"][place] = "hostile"
    lines = blob_of(objs).split(b"\n")
    lines[at] = lines[at].replace(b'"hostile"', value)
    path.write_bytes(b"\n".join(lines))
    return lines[at]


@pytest.mark.skipif(sys.platform != "linux", reason="peak memory is measured through Linux's /proc")
@pytest.mark.parametrize(
    ("place", "value", "status"),
    [
        ("messages", b"[" + b"[3,3]," * ((4 << 20) // 6) + b"[3,4]]", 0),  # json builds 700,000 lists
        ("messages", b"[" + b"{}," * ((4 << 20) // 3) + b"[3,3]]", 1),
        ("tools", b"[" + b"{}," * ((4 << 20) // 3) + b"0]", 1),
        ("version", b"[" + b"{}," * ((4 << 20) // 3) + b"0]", 1),
    ],
    ids=["messages", "messages of dicts", "tools", "version"],
)
def test_validating_a_hostile_version_2_line_takes_a_few_times_its_size(
    tmp_path: Path, place: str, value: bytes, status: int
) -> None:
    path = tmp_path / "s.jsonl"
    line = hostile_v2_file(path, place, value)
    done = subprocess.run(
        [sys.executable, "-c", PEAK_OF_VALIDATE, str(path), str(status)],
        capture_output=True,
        text=True,
        cwd=HERE,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) < 3 * len(line)  # 15 to 34 times when its data was built


PADDING = b',"padding":[' + b"0," * 600_000 + b"0]"  # another member, of which json would build much


@pytest.mark.parametrize(
    ("place", "value", "reason"),
    [
        ("messages", b"[" + b"[3,4]," * 200_000 + b"[3,3]]", ""),
        ("messages", b"[[3," + b" " * 200_000 + b"4]," + b" [3 ,3]\t," * 200_000 + b"[3,3]]", ""),
        ("messages", b"[" + b"{}," * 400_000 + b"[3,3]]", session._RANGES),
        ("messages", b"[" + b"[3,3]," * 200_000 + b"[3,3],4]", session._RANGES),
        ("messages", b"[" + b"[3,4]," * 200_000 + b"[3,[3]]]", session._RANGES),
        ("messages", b"[" + b"[3,4] ,\t\r " * 200_000 + b'"[3,3]"]', session._RANGES),
        ("messages", b"[" + b"[3,4]," * 200_000 + b"[3,6]]", "data.messages: [3, 6] is no range"),
        ("messages", b"[" + b"[3,4]," * 200_000 + b"[[3,4]]]", session._RANGES),
        ("messages", b"{" + b'"a":[3,4],' * 200_000 + b'"b":0}', session._RANGES),
        ("tools", b"[" + b"5," * 600_000 + b"5]", "data.tools must be the seq"),
        ("tools", b'"' + b"5" * 100_000 + b'"' + PADDING, "data.tools must be the seq"),
        ("tools", b"5." + b"0" * 100_000 + PADDING, "data.tools must be the seq"),
        ("tools", b"true" + PADDING, "data.tools must be the seq"),
        ("tools", b"5" + PADDING, ""),
        ("version", b'"' + b"2" * 100_000 + b'"' + PADDING, "session_start needs an integer data.version"),
        ("version", b"3" + PADDING, "unsupported format version 3"),
        ("version", b"[" + b"2," * 600_000 + b"2]", "session_start needs an integer data.version"),
    ],
)
def test_a_long_version_2_line_gets_the_verdict_of_the_line_built(
    tmp_path: Path, place: str, value: bytes, reason: str
) -> None:
    path = tmp_path / "s.jsonl"
    line = hostile_v2_file(path, place, value)
    assert len(line) > session._BIG_LINE and not session._builds_little(line)  # read without building it

    def verdict(keys: Any) -> str:
        with path.open("rb") as f:
            try:
                session._read(f, str(path), 1 << 30, lambda record: None, keys)
            except FormatError as exc:
                return exc.reason
        return ""

    assert verdict(None) == verdict(session._NO_DATA)
    assert verdict(session._NO_DATA).startswith(reason)


def test_reading_a_deep_line_does_not_depend_on_the_callers_stack(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("tool_exec_end", execution=TOOL, result=deep_value(900)))

    def deep_call(frames: int) -> session.ReadResult:
        if frames:
            return deep_call(frames - 1)
        session.open(path).close()
        return session.read(path, lambda r: None)

    assert deep_call(300).records == 4


HOSTILE_NESTING = """
import contextlib, gc, io, os, sys, tempfile
import session

mode, limit = sys.argv[1], int(sys.argv[2])
sys.setrecursionlimit(limit)
SID, RID = "a" * 32, "b" * 32
HEAD = '{"session_id":"%s","seq":1,"type":"session_start","time":"t","data":{"version":1}}' % SID
START = '{"session_id":"%s","seq":2,"type":"run_start","time":"t","run_id":"%s","data":{}}' % (SID, RID)


def record(kind, data):
    envelope = '{"session_id":"%s","seq":3,"type":"%s","time":"t","run_id":"%s","data":%s}'
    return envelope % (SID, kind, RID, data)


def hostile(n):
    deep_array, deep_object = "[" * n + "1.5" + "]" * n, '{"a":' * n + "0" + "}" * n
    return {
        "arrays": "[" * n,
        "objects": '{"a":' * n,
        "closed arrays": "[" * n + "]" * n,
        "data array": record("tool_exec_end", '{"result":%s}' % deep_array),
        "data object": record("tool_exec_end", '{"result":%s}' % deep_object),
        "long data": record("tool_exec_end", '{"pad":"%s","result":%s}' % ("x" * 3000, deep_array)),
        "message": record("model_exec_end", '{"message":%s}' % deep_object),
        "checkpoint": record("checkpoint", '{"snapshot":%s}' % deep_array),
    }


folder, files = tempfile.mkdtemp(), {}
depths = (limit // 4, limit - 60, limit + 60, 5 * limit)
lines = {f"{name} {n}": line for n in depths for name, line in hostile(n).items()}
lines["big line"] = record(  # over a megabyte: validate and summarize check it without building it
    "model_exec_end", '{"pad":"%s","message":%s}' % ("x" * (1 << 20), '{"a":' * 900 + "0" + "}" * 900)
)
for name, line in lines.items():
    files[name] = os.path.join(folder, name.replace(" ", "-"))
    with open(files[name], "w") as f:
        f.write("\\n".join([HEAD, START, line, ""]))


def validate(path):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        return session.main(["validate", path]), out.getvalue()


def load_checkpoint(path):
    with session.open(path) as s:
        return s.load_checkpoint() is not None


def iter_records_moving(path):  # the line after the run's start asked for from deeper
    records = session.iter_records(path)
    extra = [0, 0, max(here["gap"] - 50, 0), 0]
    return [getattr(at_depth(n, lambda: next(records, None)), "type", None) for n in extra]


READERS = {
    "read": lambda path: session.read(path, lambda r: None).records,
    "iter_records": lambda path: len(list(session.iter_records(path))),
    "iter_records moving": iter_records_moving,
    "validate": validate,
    "summarize": lambda path: session.summarize(path).records,
    "load_checkpoint": load_checkpoint,
}


def outcome(reader, path):
    try:
        return repr(READERS[reader](path))
    except (session.FormatError, session.CodecError) as exc:
        return repr(exc)
    except RecursionError:
        return "RecursionError"


def depth_here():
    frame, n = sys._getframe(1), 0
    while frame is not None:
        frame, n = frame.f_back, n + 1
    return n


def at_depth(n, call):
    return at_depth(n - 1, call) if n > 0 else call()


def overflow(levels):  # a few levels past the limit, never 50, even where the gc callback ...
    return overflow(levels - 1) if levels else None


here = {}


def read_all(gap, after_an_overflow):
    here["gap"] = gap
    if after_an_overflow:  # ... lets it through: raised and caught right here, 3.8 marks the stack
        try:
            overflow(gap + 10)
        except RecursionError:
            pass
    return {(reader, name): outcome(reader, path) for reader in READERS for name, path in files.items()}


if mode == "gc":  # as hypothesis does: code that runs at every collection and catches its RecursionError
    def callback(phase, info):
        try:
            int("1")
        except RecursionError:
            pass

    gc.callbacks.append(callback)
    gc.set_threshold(5)
expected = read_all(limit, False)
print("reference", sorted(expected.items()), flush=True)
for gap in (limit, limit // 2, 120, 60, 45, 30, 20, 12, 6):  # levels left below the limit
    for after_an_overflow in (False, True):
        seen = at_depth(limit - depth_here() - gap, lambda: read_all(gap, after_an_overflow))
        for key, want in expected.items():
            if seen[key] != want:
                print("differs", gap, after_an_overflow, *key, seen[key][:200], flush=True)
        print("done", gap, flush=True)
"""
ROOM_THE_READER_NEEDS = 30  # levels below the recursion limit; the command line's argparse takes most


@pytest.mark.parametrize("mode", ["stack", "gc"])
def test_hostile_nesting_read_from_any_stack_depth_never_aborts(tmp_path: Path, mode: str) -> None:
    """Lines nested deep, read by every reader from a shallow stack, from half the recursion
    limit and from a few levels below it, each time also right after a RecursionError there;
    with mode "gc", a collection runs at almost every allocation and calls back code that
    catches its own RecursionError, as hypothesis's does.  On CPython 3.8 either used to abort
    the process ("Cannot recover from stack overflow"): a RecursionError leaves a thread's stack
    marked overflowed until it unwinds 50 levels below the limit, and 50 levels past the limit
    a marked stack is fatal.  The guarantee: the process lives; every outcome is what a shallow
    stack gives, except a RecursionError where fewer than ROOM_THE_READER_NEEDS levels are left."""
    script = tmp_path / "hostile.py"
    script.write_text(HOSTILE_NESTING)
    done = subprocess.run(
        [sys.executable, str(script), mode, "1000"],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(HERE)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("\ndone ") == 18, done.stdout[-3000:]  # 9 depths, each twice
    reference = done.stdout.split("\n", 1)[0]
    assert "RecursionError" not in reference and "nested too deeply" in reference
    for line in done.stdout.splitlines():
        if line.startswith("differs"):
            gap, outcome = int(line.split()[1]), line.rsplit(None, 1)[-1]
            assert gap < ROOM_THE_READER_NEEDS and outcome == "RecursionError", line


# ---------------------------------------------------------------------------- analysis


def crash(s: session.Session) -> None:
    """The process dies: the handle is dropped without writing or syncing anything."""
    s._file.close()


def usage_message(text: str, **usage: int) -> Message:
    return Message("assistant", [session.text_block(text)], "stop", typing.cast(session.Usage, usage))


def gappy_file(path: Path) -> Dict[str, Any]:
    """Three runs: one complete, one cut off by a crash with calls left open, one after."""
    m1a1, m1a2 = Execution("m1", "model", attempt=1), Execution("m1", "model", attempt=2)
    m2, m3, t1, t2 = (
        Execution("m2", "model"),
        Execution("m3", "model"),
        Execution("t1", "tool"),
        Execution("t2", "tool"),
    )
    s = session.create(path)
    a = s.begin_run()
    a.record(Event("agent_start", timestamp=T0))
    a.record(Event("model_exec_start", execution=m1a1))
    a.record(Event("model_request", execution=m1a1, request=ModelRequest([])))
    a.record(
        Event("model_exec_end", execution=m1a1, error="429", partial_message=usage_message("p", input=99))
    )
    a.record(Event("model_exec_start", execution=m1a2))
    a.record(Event("model_request", execution=m1a2, request=ModelRequest([])))
    a.record(
        Event(
            "model_exec_end", execution=m1a2, message=usage_message("hi", input=10, output=5, total_tokens=15)
        )
    )
    a.record(Event("message_end", execution=m1a2, message=usage_message("hi")))
    a.record(Event("tool_exec_start", execution=t1, tool="ls"))
    a.record(Event("tool_exec_end", execution=t1, tool="ls", result=[]))
    a.record(Event("model_exec_end", execution=m3, message=usage_message("x", input=3, output=1)))
    a.record(Event("agent_end", summary=RunSummary(1, 1, 0, "stop"), error=ValueError("boom")))
    a.close()
    b = s.begin_run()
    b.record(Event("agent_start"))
    b.record(Event("model_exec_start", execution=m2))
    b.record(Event("model_request", execution=m2, request=ModelRequest([])))
    b.record(Event("tool_exec_start", execution=t2, tool="cat"))
    b.record(Event("model_request", execution=m3, request=ModelRequest([])))
    crash(s)
    with session.open(path) as s2, s2.begin_run() as c:
        c.record(Event("agent_start"))
        c.record(Event("agent_end", summary=RunSummary(end_reason="done")))
        c.save_checkpoint({"n": 1})
    return {"session": s.session_id, "a": a.run_id, "b": b.run_id, "c": c.run_id}


def test_summarize_finds_runs_counts_usage_and_gaps(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    ids = gappy_file(path)
    rs = records(path)
    summary = session.summarize(path)
    assert (summary.session_id, summary.records, summary.checkpoints, summary.tail_bytes) == (
        ids["session"],
        26,
        1,
        0,
    )
    assert summary.counts == {
        "session_start": 1, "run_start": 3, "run_close": 2, "agent_start": 3, "agent_end": 2,
        "model_exec_start": 3, "model_request": 4, "model_exec_end": 3, "message_end": 1,
        "tool_exec_start": 2, "tool_exec_end": 1, "checkpoint": 1,
    }  # fmt: skip
    assert summary.usage == {
        "input": 13,
        "output": 6,
        "total_tokens": 15,
    }  # each successful attempt; no bools
    a, b, c = summary.runs
    boom = {"message": "boom", "type": "ValueError"}
    assert a == session.RunInfo(ids["a"], 2, 15, rs[1].time, rs[14].time, 14, True, "stop", boom)
    assert b == session.RunInfo(ids["b"], 16, 21, rs[15].time, rs[20].time, 6, False, "", None)
    assert c == session.RunInfo(ids["c"], 22, 26, rs[21].time, rs[25].time, 5, True, "done", None)

    def ref(execution: str, run: str = "b") -> CallRef:
        return CallRef(ids["session"], ids[run], execution, 1)

    assert summary.gaps == [
        session.Gap("call_end_without_start", ids["a"], 13, ref("m3", "a")),  # its usage counts all the same
        session.Gap("run_not_closed", ids["b"], 16, None),
        session.Gap("no_agent_end", ids["b"], 17, None),
        session.Gap("model_call_unfinished", ids["b"], 18, ref("m2")),
        session.Gap("tool_call_unfinished", ids["b"], 20, ref("t2")),
        session.Gap("model_call_unfinished", ids["b"], 21, ref("m3")),
    ]


def impossible_file(path: Path) -> Dict[str, Any]:
    """A run whose records tell what cannot have happened, as a recorder's bug writes them:
    a model call ended twice (seq 5), a tool call ended unstarted (seq 6), a tool call whose
    parent is no call (seq 7)."""
    model, orphan = Execution("m1", "model"), Execution("t1", "tool", parent_id="m1")
    child = Execution("t2", "tool", parent_id="m9")
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("model_exec_start", execution=model))
        run.record(Event("model_exec_end", execution=model, message=usage_message("hi")))
        run.record(Event("model_exec_end", execution=model, message=usage_message("hi")))
        run.record(Event("tool_exec_end", execution=orphan, tool="ls", result=[]))
        run.record(Event("tool_exec_start", execution=child, tool="ls"))
        run.record(Event("tool_exec_end", execution=child, tool="ls", result=[]))
        return {"session": s.session_id, "run": run.run_id}


def test_an_impossible_history_is_a_gap_of_its_own_kind_everywhere(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    ids = impossible_file(path)

    def ref(execution: str) -> CallRef:
        return CallRef(ids["session"], ids["run"], execution, 1)

    gaps = [
        session.Gap("call_ended_twice", ids["run"], 5, ref("m1")),
        session.Gap("call_end_without_start", ids["run"], 6, ref("t1")),
        session.Gap("unknown_parent", ids["run"], 7, ref("t2")),
    ]
    assert session.summarize(path).gaps == gaps
    text = run_cli("summary", str(path)).stdout
    assert "gaps: 3\n  seq 5: call_ended_twice, m1 attempt 1\n" in text
    assert "  seq 6: call_end_without_start, t1 attempt 1\n" in text and "  seq 7: unknown_parent, t2" in text
    report = json.loads(run_cli("summary", "--json", str(path)).stdout)
    assert [(gap["kind"], gap["seq"], CallRef.from_json(gap["ref"])) for gap in report["gaps"]] == [
        (gap.kind, gap.seq, gap.ref) for gap in gaps
    ]
    checked = run_cli("validate", str(path))
    assert (checked.returncode, checked.stdout) == (
        0,
        f"{path}: ok, 9 records, 1 run (0 incomplete), 0 checkpoints, 3 records of an impossible history"
        " (seq 5, 6, 7; see summary)\n",
    )
    assert json.loads(run_cli("validate", "--json", str(path)).stdout)["impossible"] == [5, 6, 7]
    with session.open(path) as s, s.begin_run() as run:  # writers take them all the same
        assert run.record(Event("tool_exec_end", execution=Execution("t3", "tool"), tool="ls"))


def test_a_history_that_can_happen_has_no_impossible_gap(tmp_path: Path) -> None:
    """A retry, a call started by its request alone, a parent before its child, a call id
    used again in a later run: none of them contradicts the history."""
    path = tmp_path / "s.jsonl"
    first, second = Execution("m1", "model"), Execution("m1", "model", attempt=2)
    tool = Execution("t1", "tool", parent_id="m1")
    with session.create(path) as s:
        for _ in range(2):
            with s.begin_run() as run:
                run.record(Event("model_request", execution=first, request=ModelRequest([])))
                run.record(Event("model_exec_end", execution=first, error="429"))
                run.record(Event("model_exec_start", execution=second))
                run.record(Event("model_exec_end", execution=second, message=usage_message("hi")))
                run.record(Event("tool_exec_start", execution=tool, tool="ls"))
                run.record(Event("tool_exec_end", execution=tool, tool="ls", result=[]))
    assert session.summarize(path).gaps == []
    assert run_cli("validate", str(path)).stdout.endswith(" 2 runs (0 incomplete), 0 checkpoints\n")


def long_run_lines(calls: int, then: List[Dict[str, Any]]) -> Iterator[Dict[str, Any]]:
    """The lines of a version-1 session of one run of *calls* model calls, each followed by a
    tool call under it, then the executions *then*'s records: ``(type, execution)`` each."""
    yield {"seq": 1, "type": "session_start", "data": {"version": 1}}
    records: List[Tuple[str, Optional[Dict[str, str]]]] = [("run_start", None)]
    for n in range(calls):
        model, tool = {"id": f"m{n}", "kind": "model"}, {"id": f"t{n}", "kind": "tool", "parent_id": f"m{n}"}
        records += [("model_exec_start", model), ("model_exec_end", model)]
        records += [("tool_exec_start", tool), ("tool_exec_end", tool)]
    records += [(line["type"], line["execution"]) for line in then]
    for seq, (kind, execution) in enumerate(records, 2):
        yield {"seq": seq, "type": kind, "run_id": "r", "data": {"execution": execution} if execution else {}}


def write_lines(path: Path, lines: Iterable[Dict[str, Any]]) -> Path:
    envelope = {"session_id": "s", "time": "2026-12-02T09:27:36Z"}
    path.write_text("".join(json.dumps({**envelope, **line}) + "\n" for line in lines))
    return path


def test_a_long_runs_impossible_history_is_told_exactly_from_a_few_bytes_a_call(tmp_path: Path) -> None:
    """What the summary keeps of a run's calls that ended (to tell a call ended twice from one
    never started, and a parent that started from one that did not) is exact however long ago
    the call was, and costs a few bytes a call, not the 250 a set of tuples of strings took."""
    then = [
        {"type": "model_exec_end", "execution": {"id": "m3", "kind": "model"}},  # long ended
        {"type": "tool_exec_end", "execution": {"id": "m3", "kind": "tool"}},  # a model call's id
        {"type": "model_exec_end", "execution": {"id": "m3", "kind": "model", "attempt": 2}},
        {"type": "tool_exec_start", "execution": {"id": "u", "kind": "tool", "parent_id": "m5"}},
        {"type": "tool_exec_start", "execution": {"id": "v", "kind": "tool", "parent_id": "m5x"}},
        {"type": "model_exec_start", "execution": {"id": "w", "kind": "model", "attempt": 0}},
        {"type": "model_exec_end", "execution": {"id": "w", "kind": "model", "attempt": 0}},
        {"type": "model_exec_end", "execution": {"id": "w", "kind": "model", "attempt": 0}},
    ]
    calls = 3000
    path = write_lines(tmp_path / "s.jsonl", long_run_lines(calls, then))
    first = 3 + 4 * calls  # the seq of then's first record
    gaps = [(gap.kind, gap.seq, gap.ref and gap.ref.execution_id) for gap in session.summarize(path).gaps]
    assert gaps == [
        ("run_not_closed", 2, None),
        ("call_ended_twice", first, "m3"),
        ("call_end_without_start", first + 1, "m3"),
        ("call_end_without_start", first + 2, "m3"),
        ("tool_call_unfinished", first + 3, "u"),
        ("tool_call_unfinished", first + 4, "v"),
        ("unknown_parent", first + 4, "v"),
        ("call_ended_twice", first + 7, "w"),
    ]
    records = list(session.iter_records(path))
    tally = session._Summarizer()
    tracemalloc.start()
    for record in records:
        tally(record)
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert held < 60 * 2 * calls, held / (2 * calls)


def test_an_id_started_again_after_others_is_kept_once_so_a_look_up_walks_no_copies() -> None:
    """A hostile run starts one id again after every few hundred others: the summary keeps it
    once (where each start had added a copy that every later look-up of it walked past, a
    quadratic time), with every attempt it started."""
    started = session._Attempts()
    rounds = 40
    for round_ in range(rounds):
        started.add("again", round_ % 63 + 1)
        for other in range(session._RECENT_CALLS):
            started.add(f"c{round_}-{other}", 1)
    started.add("again", 64)  # an attempt beyond the mask, kept apart
    kept = [bytes(started._ids[a:b]) for a, b in zip(started._starts, started._starts[1:])]
    assert kept.count(b"again") == 1 and len(kept) == len(set(kept)) > (rounds - 1) * session._RECENT_CALLS
    assert [started.started("again", n) for n in (1, 40, 41, 64, 65)] == [True, True, False, True, False]
    assert started.latest("again") == 64 and "c0-0" in started and "c0-x" not in started


def test_summarize_counts_what_a_recorder_says_it_missed_as_a_gap(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    tool = Execution("t1", "tool")
    with session.create(path) as s, s.begin_run() as run:
        for execution in (tool, tool, None):  # twice in one call: one gap for it
            run.record(Event("recording_gap", execution=execution, details={"unrecorded": "a sub-agent"}))
    rs = records(path)
    summary = session.summarize(path)
    assert summary.gaps == [
        session.Gap(
            "unrecorded", rs[1].run_id or "", 3, CallRef(rs[0].session_id, rs[1].run_id or "", "t1", 1)
        ),
        session.Gap("unrecorded", rs[1].run_id or "", 5, None),
    ]
    shown = run_cli("summary", str(path))
    assert shown.returncode == 0 and "gaps: 2" in shown.stdout and "seq 5: unrecorded, run " in shown.stdout


def test_summarize_adds_up_only_token_counts(tmp_path: Path) -> None:
    class AsIs:  # a host's codec that writes what it is given, as older writers did
        def encode(self, value: Any) -> Any:
            return value

        def decode(self, value: Any) -> Any:
            return value

    usage = {"input": 3, "output": 1, "cache_read": 5, "requests": 2, "cached": True, "latency_ms": 900}
    message = {"$type": "agentgo.message.v1", "value": {"role": "assistant", "content": [], "usage": usage}}
    path = tmp_path / "s.jsonl"
    with session.create(path, codec=AsIs()) as s, s.begin_run() as run:
        run.record(Event("model_exec_end", execution=MODEL, message=message))
        checked = JSONCodec().encode(usage_message("a", input=1, cache_write=2))
        run.record(Event("model_exec_end", execution=MODEL, message=checked))
    assert session.summarize(path).usage == {"input": 4, "output": 1, "cache_read": 5, "cache_write": 2}


def test_summarize_of_a_complete_session_has_no_gaps(tmp_path: Path) -> None:
    summary = session.summarize(sample_file(tmp_path / "s.jsonl"))
    assert summary.gaps == [] and all(run.closed for run in summary.runs) and summary.usage == {"input": 6}


def test_find_returns_every_record_of_one_call_in_order(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    ids = gappy_file(path)
    found = session.find(path, CallRef(ids["session"], ids["a"], "m1", 2))
    assert [(r.seq, r.type) for r in found] == [
        (7, "model_exec_start"),
        (8, "model_request"),
        (9, "model_exec_end"),
        (10, "message_end"),
    ]
    assert session.find(path, CallRef(ids["session"], ids["c"], "m1", 2)) == []
    with path.open("rb") as f:
        assert [r.seq for r in session.find(f, CallRef(ids["session"], ids["b"], "t2", 1))] == [20]


def test_analysis_of_a_bad_file_is_a_format_error(tmp_path: Path) -> None:
    path, _, _ = damaged(tmp_path)
    with pytest.raises(FormatError):
        session.summarize(path)
    with pytest.raises(FormatError):
        session.find(path, CallRef("a", "b", "c", 1))


def test_summary_command(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    ids = gappy_file(path)
    done = run_cli("summary", str(path))
    assert done.returncode == 0 and done.stderr == ""  # gaps are findings, not failures
    text = done.stdout
    assert text.startswith(f"{path}: session {ids['session']}, 26 records, 3 runs, 1 checkpoint\n")
    assert f"run {ids['a']}: seq 2-15, 14 records, closed, end reason stop\n" in text
    assert (
        "  error: ValueError: boom\n" in text
        and f"run {ids['b']}: seq 16-21, 6 records, not closed\n" in text
    )
    assert "usage: input 13, output 6, total_tokens 15\n" in text and "gaps: 6\n" in text
    assert (
        f"  seq 18: model_call_unfinished, m2 attempt 1\n"
        f"    ref {json.dumps(CallRef(ids['session'], ids['b'], 'm2', 1).to_json())}\n" in text
    )
    assert f"python -m session show {path} --run {ids['b']} --execution m2 --attempt 1 --pretty" in text
    assert re.search(r"\n  \S+Z to \S+Z \(\d+\.\d{3} s\)\n", text)


def test_summary_json(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    ids = gappy_file(path)
    done = run_cli("summary", "--json", str(path))
    report = json.loads(done.stdout)
    summary = session.summarize(path)
    assert done.returncode == 0 and report["file"] == str(path) and report["ok"] is True
    assert list(report) == [
        *(
            "file",
            "ok",
            "session_id",
            "records",
            "counts",
            "runs",
            "checkpoints",
            "gaps",
            "usage",
            "tail_bytes",
            "uninterpreted",
        )
    ]
    assert report["runs"] == [dataclasses.asdict(run) for run in summary.runs]
    assert report["gaps"][1] == {"kind": "run_not_closed", "run_id": ids["b"], "seq": 16, "ref": None}
    assert CallRef.from_json(report["gaps"][3]["ref"]) == summary.gaps[3].ref
    (tmp_path / "bad").mkdir()
    bad, _, _ = damaged(tmp_path / "bad")
    failed = run_cli("summary", "--json", str(bad))
    assert failed.returncode == 1 and json.loads(failed.stdout)["ok"] is False


def busy_file(path: Path, calls: int, seed: int, version: int = 2) -> Path:
    """A valid session of two runs of *calls* model calls, each followed by a tool call; a
    model call in four fails, about a tool call in three; usage has integer and other values;
    each call asks with the context so far."""
    rng = random.Random(seed)
    context = [Message("user", [session.text_block(f"task {seed}")], timestamp=T0)]
    with session.create(path, version=version) as s:
        for _ in range(2):
            with s.begin_run() as run:
                for n in range(calls):
                    model = Execution(f"m{n}", "model")
                    run.record(Event("model_exec_start", execution=model))
                    request = ModelRequest(context, [{"name": "ls"}, {"name": "rm"}])
                    run.record(Event("model_request", execution=model, request=request))
                    if n % 4 == 3:
                        run.record(Event("model_exec_end", execution=model, error=RuntimeError("overloaded")))
                        continue
                    usage = session.Usage(input=rng.randrange(5000), output=rng.randrange(500), model="m")
                    usage["cost"] = {"total": 0.25}  # summarize counts only the integers
                    text: List[session.ContentBlock] = [session.text_block("é" * rng.randrange(200))]
                    message = Message("assistant", text, "stop", usage)
                    run.record(Event("model_exec_end", execution=model, message=message))
                    context = [*context, message, Message("user", [session.text_block(f"then {n}")])]
                    tool = Execution(f"t{n}", "tool", parent_id=f"m{n}")
                    if rng.random() < 0.3:
                        run.record(
                            Event(
                                "tool_exec_end",
                                execution=tool,
                                tool="rm",
                                is_error=True,
                                error=OSError("disk"),
                            )
                        )
                    else:
                        run.record(Event("tool_exec_end", execution=tool, tool="ls", result=["a"]))
    return path


def test_summary_of_several_files_in_one_process(tmp_path: Path) -> None:
    paths = [busy_file(tmp_path / "a.jsonl", 3, seed=1), tmp_path / "missing.jsonl"]
    paths.append(busy_file(tmp_path / "b.jsonl", 4, seed=2))
    done = run_cli("summary", "--json", *map(str, paths))
    reports = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 1 and [report["file"] for report in reports] == list(map(str, paths))
    assert reports[1] == {
        "file": str(paths[1]),
        "ok": False,
        "line": None,
        "offset": None,
        "error": "No such file or directory",
    }
    for report, path in zip(reports[::2], paths[::2]):
        summary = session.summarize(path)
        assert (report["session_id"], report["usage"], report["counts"]) == (
            summary.session_id,
            summary.usage,
            summary.counts,
        )
    text = run_cli("summary", str(paths[0]), str(paths[2]))
    assert text.returncode == 0
    assert text.stdout == "".join(run_cli("summary", str(path)).stdout for path in paths[::2])


def test_show_prints_the_original_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    ids = gappy_file(path)
    blob = path.read_bytes()
    lines = blob.splitlines(keepends=True)
    everything = subprocess.run(
        [sys.executable, str(MODULE), "show", str(path), "--as-written"], capture_output=True, timeout=60
    )
    assert everything.returncode == 0 and everything.stdout == blob

    def show(*args: str) -> bytes:
        done = subprocess.run(
            [sys.executable, str(MODULE), "show", str(path), "--as-written", *args],
            capture_output=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert show("--type", "agent_end", "--type", "checkpoint") == lines[13] + lines[23] + lines[24]
    call = session.find(path, CallRef(ids["session"], ids["a"], "m1", 2))
    assert show("--run", ids["a"], "--execution", "m1", "--attempt", "2") == b"".join(
        lines[r.seq - 1] for r in call
    )
    assert show("--execution", "m1") == b"".join(lines[3:10])
    assert show("--run", ids["c"], "--type", "agent_start") == lines[22]
    for out in (show("--execution", "m1"), show("--type", "tool_exec_start")):
        assert all(json.loads(line) for line in out.splitlines())  # ready for jq


def test_show_needs_execution_for_attempt_and_reports_bad_files(tmp_path: Path) -> None:
    path, good, _ = damaged(tmp_path)
    usage = run_cli("show", str(path), "--attempt", "1")
    assert usage.returncode == 2 and usage.stderr.startswith("usage: python -m session show [-h]")
    assert usage.stderr.endswith("show: error: --attempt needs --execution\n")
    done = subprocess.run([sys.executable, str(MODULE), "show", str(path)], capture_output=True, timeout=60)
    assert done.returncode == 1 and done.stdout == good  # what came before the bad line
    assert done.stderr.decode().startswith(f"{path}:4: invalid JSON")


def test_show_pretty_is_a_readable_transcript(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        question = Message("user", [session.text_block("line one\nline two")])
        call = session.tool_call_block("c1", "grep", {"pattern": "x" * 5000})
        answer = Message("assistant", [session.text_block("Looking."), call], "toolUse", {"input": 7})
        run.record(
            Event("model_request", execution=MODEL, request=ModelRequest([question], [{"name": "grep"}]))
        )
        run.record(Event("model_exec_end", execution=MODEL, message=answer))
        run.record(
            Event(
                "tool_exec_end",
                execution=TOOL,
                tool="grep",
                result={"lines": 3},
                is_error=True,
                error=OSError("disk"),
            )
        )
    done = run_cli(
        "show",
        str(path),
        "--pretty",
        "--type",
        "model_request",
        "--type",
        "model_exec_end",
        "--type",
        "tool_exec_end",
    )
    assert done.returncode == 0
    text = done.stdout
    assert "#5 " in text and "model_request  [model m1 attempt 1]" in text  # after its message and tools
    assert "  user: line one\n    line two\n" in text and '  tools: [{"name": "grep"}]\n' in text
    assert "  assistant: Looking.\n" in text
    assert f'  assistant calls grep({{"pattern": "{"x" * 5000}"}}) id c1\n' in text  # never cut short
    assert '  stop_reason: "toolUse"\n  usage: {"input": 7}\n' in text
    assert (
        '  tool: "grep"\n' in text
        and '  result: {"lines": 3}\n' in text
        and "  error: OSError: disk\n" in text
    )


def test_show_pretty_renders_every_block(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    blocks: List[session.ContentBlock] = [
        session.thinking_block("first\nthen"),
        session.tool_call_block(
            "c2", "grep", None, args_invalid=True, args_raw_text='{"p', args_parse_error="EOF"
        ),
        session.image_block(data=bytes(1000), mime_type="image/png"),
        session.image_block(url="https://example.com/a.jpg"),
        session.tool_reference_block("web_search"),
    ]
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("message_end", message=Message("assistant", blocks, "toolUse")))
        run.record(Event("message_end", message=session.tool_result("c2", "no such file", is_error=True)))
        run.record(Event("message_end", message=session.tool_result("c1", [session.text_block("3")])))
        run.record(Event("message_end", message=Message("assistant", None)))
    text = run_cli("show", str(path), "--pretty", "--type", "message_end").stdout
    assert "  assistant thinks: first\n    then\n" in text
    assert '  assistant calls grep(unparsed "{\\"p") id c2\n' in text
    assert "  assistant: [image, 1000 bytes, image/png]\n" in text  # a placeholder, not the data
    assert "  assistant: [image, at https://example.com/a.jpg, type not given]\n" in text
    assert "  assistant refers to tool web_search\n" in text
    assert "  tool error for c2: no such file\n" in text and "  tool result for c1: 3\n" in text
    assert "  assistant: (no content)\n" in text
    assert "AAAA" not in text


def test_checkpoint_command(tmp_path: Path) -> None:
    path = sample_file(tmp_path / "s.jsonl")
    done = run_cli("checkpoint", str(path))
    latest = [r for r in records(path) if r.type == "checkpoint"][-1]
    assert done.returncode == 0 and json.loads(done.stdout) == latest.data["snapshot"]
    empty = sample_file(tmp_path / "none.jsonl", checkpoint=False)
    none = run_cli("checkpoint", str(empty))
    assert (
        none.returncode == 1 and none.stderr == f"{empty}: no checkpoint in {records_count(empty)} records\n"
    )


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("command", ["validate", "summary", "show"])
def test_progress_on_a_terminal_for_big_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    path = sample_file(tmp_path / "s.jsonl")
    monkeypatch.setattr(session, "_PROGRESS_FROM", 1000)  # "big", for this test
    for stderr, shown in ((Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr(sys, "stderr", stderr)
        with contextlib.redirect_stdout(io.StringIO()) as out:
            if command == "show":
                out.buffer = io.BytesIO()  # type: ignore[misc]
            assert session.main([command, str(path)]) == 0
        progress = stderr.getvalue()
        if shown:
            assert progress.startswith(f"\r{path}: 0%") and f"\r{path}: 9" in progress
            assert progress.endswith("\r\033[K")
        else:
            assert progress == ""


def test_summary_of_values_too_deep_or_long_to_print(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("agent_end", error="x"))
    blob = path.read_bytes().replace(
        b'"error":{"message":"x"}', b'"error":{"message":"x","deep":' + b"[" * 980 + b"]" * 980 + b"}"
    )
    path.write_bytes(blob)
    assert run_cli_process("validate", str(path)).returncode == 0
    done = run_cli_process("summary", "--json", str(path))
    assert (done.returncode, done.stderr) == (0, "")
    assert '"deep":' + "[" * 980 + "]" * 980 in done.stdout.replace(" ", "")


def test_analysis_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(blob_of([HEAD, START, line_obj(3, "agent_end", data={"summary": "x"})]))
    with pytest.raises(FormatError) as info:  # a visit's own reading of the data
        session.read(path, EventData.from_record)
    assert (info.value.path, info.value.line) == (str(path), 3)
    assert session.summarize(path).uninterpreted == 1  # summarize reads what it can


def odd_shapes_file(path: Path) -> Path:
    """A file validate accepts whose data the format never writes, next to a normal call."""
    good = {"execution": {"id": "e", "kind": "model"}}
    path.write_bytes(
        blob_of(
            [
                HEAD,
                START,
                line_obj(3, "model_exec_start", data={"execution": "x; rm"}),
                line_obj(4, "agent_end", data={"summary": "x", "error": 5}),
                line_obj(5, "model_exec_end", data={"execution": {"id": 5, "kind": "model"}, "message": 3}),
                line_obj(6, "model_exec_start", data=good),
                line_obj(7, "model_request", data={**good, "request": {"messages": 5}}),
                line_obj(
                    8, "tool_exec_start", data={"execution": {"id": "e", "kind": "tool", "attempt": "2"}}
                ),
            ]
        )
    )
    return path


def test_summarize_counts_the_data_it_cannot_interpret(tmp_path: Path) -> None:
    path = odd_shapes_file(tmp_path / "s.jsonl")
    summary = session.summarize(path)
    assert summary.uninterpreted == 4 and summary.records == 8 and summary.counts["agent_end"] == 1
    assert summary.runs[0].end_reason == "" and summary.runs[0].error is None
    ref = CallRef(SID, RID, "e", 1)
    assert [(gap.kind, gap.seq, gap.ref) for gap in summary.gaps] == [
        ("run_not_closed", 2, None),
        ("model_call_unfinished", 6, ref),
    ]
    assert [r.seq for r in session.find(path, ref)] == [6, 7]
    assert session.summarize(sample_file(tmp_path / "good.jsonl")).uninterpreted == 0


@pytest.mark.parametrize(
    "execution",
    [
        {"kind": "tool"},
        {"id": "e"},
        {"id": "e", "kind": 5},
        {"id": "e", "kind": "tool", "parent_id": 1},
        {"id": "e", "kind": "tool", "turn_index": "3"},
        {"id": "e", "kind": "tool", "turn_index": True},
        {"id": "e", "kind": "tool", "attempt": True},
        {"id": "e", "kind": "tool", "attempt": 1.0},
        ["e", 1],
        None,
    ],
)
def test_summarize_checks_an_execution_as_record_ref_does(tmp_path: Path, execution: Any) -> None:
    path = tmp_path / "s.jsonl"
    lines = [HEAD, START, line_obj(3, "tool_exec_start", data={"execution": execution})]
    path.write_bytes(blob_of(lines))
    with pytest.raises(FormatError):
        _ = records(path)[2].ref
    summary = session.summarize(path)
    assert summary.uninterpreted == 1 and [gap.kind for gap in summary.gaps] == ["run_not_closed"]


def test_a_token_count_beyond_64_bits_is_not_summed(tmp_path: Path) -> None:
    """Counts of 4,300 digits each read, but their sum could not be printed (str() refuses
    it): such a record is uninterpreted, and its call still ends."""
    huge = int("9" * 4300) if sys.version_info >= (3, 11) else 1 << 63
    path = tmp_path / "s.jsonl"
    lines = [HEAD, START]
    for seq, count in ((3, huge), (5, 7), (7, huge)):
        call = {"id": f"c{seq}", "kind": "model"}
        message = {"$type": "message", "value": {"role": "assistant", "usage": {"input": count, "output": 1}}}
        lines += [
            line_obj(seq, "model_exec_start", data={"execution": call}),
            line_obj(seq + 1, "model_exec_end", data={"execution": call, "message": message}),
        ]
    path.write_bytes(blob_of(lines))
    summary = session.summarize(path)
    assert (summary.uninterpreted, summary.usage) == (2, {"input": 7, "output": 1})
    assert [gap.kind for gap in summary.gaps] == ["run_not_closed"]
    text = run_cli("summary", str(path))
    assert (text.returncode, text.stderr) == (0, "") and "uninterpreted: 2 records" in text.stdout


def test_summary_and_show_work_on_every_file_validate_accepts(tmp_path: Path) -> None:
    path = odd_shapes_file(tmp_path / "s.jsonl")
    assert run_cli("validate", str(path)).returncode == 0
    text = run_cli("summary", str(path))
    assert (text.returncode, text.stderr) == (0, "")
    assert "uninterpreted: 4 records whose data has an unexpected shape\n" in text.stdout
    report = run_cli("summary", "--json", str(path))
    assert report.returncode == 0 and json.loads(report.stdout)["uninterpreted"] == 4
    shown = run_cli("show", str(path), "--execution", "e")
    assert shown.returncode == 0 and [json.loads(line)["seq"] for line in shown.stdout.splitlines()] == [6, 7]
    assert shown.stderr == f"{path}: 3 records with an execution of unexpected shape not matched\n"
    pretty = run_cli("show", str(path), "--pretty")
    assert pretty.returncode == 0 and '  request: {"messages": 5}\n' in pretty.stdout, pretty.stderr


# ---------------------------------------------------------------------------- repair


def damaged(tmp_path: Path, garbage: bytes = b"\x00" * 700, tail: bytes = b"") -> tuple:  # type: ignore[type-arg]
    """A sample file with *garbage* over its fourth line onward, as a power cut leaves it;
    (path, the good prefix, the whole damaged content)."""
    path = sample_file(tmp_path / "s.jsonl")
    blob = path.read_bytes()
    cut = offsets(blob)[3]
    bad = blob[:cut] + garbage + b"\n" + blob[cut + len(garbage) + 1 :] + tail
    path.write_bytes(bad)
    return path, blob[:cut], bad


def test_repair_keeps_the_good_records_and_a_backup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, good, bad = damaged(tmp_path, tail=b'{"torn')
    with pytest.raises(FormatError):
        session.open(path)
    spy = FsyncSpy(monkeypatch)
    result = session.repair(path)
    assert spy.calls == (2 if os.name == "nt" else 4)  # the copy, the cut, and their directory
    assert (result.kept_records, result.dropped_bytes) == (3, len(bad) - len(good))
    assert result.error is not None and (result.error.line, result.error.offset) == (4, len(good))
    assert "invalid JSON" in result.error.reason
    assert result.backup_path is not None and re.fullmatch(
        re.escape(str(path)) + r"\.broken-\d{8}T\d{6}Z", result.backup_path
    )
    backup = Path(result.backup_path)
    assert backup.read_bytes() == bad
    if os.name == "posix":
        assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    assert path.read_bytes() == good
    with session.open(path) as s, s.begin_run() as run:  # and recording goes on
        run.record(Event("turn_start"))
    assert [r.seq for r in records(path)] == [1, 2, 3, 4, 5, 6]


def test_repair_leaves_a_valid_file_alone(tmp_path: Path) -> None:
    path = sample_file(tmp_path / "s.jsonl")
    with path.open("ab") as f:
        f.write(b'{"unfinished')
    before = path.read_bytes()
    result = session.repair(path)
    assert result == session.RepairResult(records_count(path), 0, None, None)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["s.jsonl"]


def test_repair_never_overwrites_a_backup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz: Optional[dt.tzinfo] = None) -> Frozen:
            return cls(2026, 12, 2, 9, 0, 0, tzinfo=UTC)

    path, _, bad = damaged(tmp_path)
    monkeypatch.setattr(session, "datetime", Frozen)  # for the backup's name only
    backups = []
    for n in range(3):
        path.write_bytes(bad + b"#" * n)
        result = session.repair(path)
        assert result.backup_path is not None
        backups.append(result.backup_path)
    stamp = f"{path}.broken-20261202T090000Z"
    assert backups == [stamp, stamp + "-2", stamp + "-3"]
    assert [Path(b).read_bytes() for b in backups] == [bad, bad + b"#", bad + b"##"]


def test_repair_refuses_a_bad_first_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\x00" * 100 + b"\n" + blob_of([START]))
    with pytest.raises(FormatError) as info:
        session.repair(path)
    assert info.value.line == 1
    assert path.read_bytes() == b"\x00" * 100 + b"\n" + blob_of([START])
    assert [p.name for p in tmp_path.iterdir()] == ["s.jsonl"]


def test_repair_takes_the_writers_lock(tmp_path: Path) -> None:
    path = sample_file(tmp_path / "s.jsonl")
    with session.open(path), pytest.raises(session.LockedError):
        session.repair(path)


def test_repair_does_not_cut_a_line_only_for_its_length(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    blob = blob_of([HEAD, START, line_obj(3, data={"x": "y" * 5000}), line_obj(4)])
    path.write_bytes(blob)
    with pytest.raises(FormatError, match="not cut: repair with a larger max_line_bytes") as info:
        session.repair(path, max_line_bytes=1000)
    assert (info.value.line, info.value.offset) == (3, offsets(blob)[2])
    assert path.read_bytes() == blob and [p.name for p in tmp_path.iterdir()] == ["s.jsonl"]
    assert session.repair(path).error is None  # with room for it, the line is a good one
    garbage = blob.replace(b'"x":"yyy', b'"x":\x00yy')
    path.write_bytes(garbage)
    assert session.repair(path).kept_records == 2 and path.read_bytes() == blob[: offsets(blob)[2]]


def test_a_failed_backup_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, _, bad = damaged(tmp_path)
    failing_write(monkeypatch)
    with pytest.raises(OSError, match="No space"):
        session.repair(path)
    monkeypatch.undo()
    assert path.read_bytes() == bad and [p.name for p in tmp_path.iterdir()] == ["s.jsonl"]


def test_repair_command(tmp_path: Path) -> None:
    path, good, bad = damaged(tmp_path)
    done = run_cli("repair", str(path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    dropped = f"dropped {len(bad) - len(good)} bytes from line 4 (offset {len(good)})"
    assert lines[0] == f"{path}: kept 3 records; {dropped}: invalid JSON: Expecting value at column 1"
    assert re.fullmatch(
        re.escape(f"{path}: the original is kept as {path}.broken-") + r"\d{8}T\d{6}Z", lines[1]
    )
    again = run_cli("repair", str(path))
    assert (again.returncode, again.stdout) == (0, f"{path}: valid, nothing to repair (3 records)\n")
    assert run_cli("validate", str(path)).returncode == 0
    path.write_bytes(b"garbage\n")
    hopeless = run_cli("repair", str(path))
    assert hopeless.returncode == 1 and hopeless.stderr.startswith(f"{path}:1: invalid JSON")
    missing = run_cli("repair", str(tmp_path / "missing"))
    assert missing.returncode == 1 and "No such file" in missing.stderr


def test_repair_refuses_a_file_that_changes_while_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _, bad = damaged(tmp_path)
    real_backup = session._backup

    def backup(fd: int, name: str) -> str:
        copied = real_backup(fd, name)
        with open(name, "ab") as f:  # a writer that ignores the lock
            f.write(b"more\n")
        return copied

    monkeypatch.setattr(session, "_backup", backup)
    with pytest.raises(RecordingError, match="changed while it was copied; nothing was cut"):
        session.repair(path)
    assert path.read_bytes() == bad + b"more\n"


# ---------------------------------------------------------------------------- command line


@pytest.mark.parametrize(
    "command", [["validate"], ["validate", "--json"], ["summary"], ["summary", "--json"]]
)
def test_many_files_are_read_one_by_one_in_order(tmp_path: Path, command: List[str]) -> None:
    """Each file's output in the files' order and the highest exit status, with a bad file, a
    missing one and a torn tail among them; ``--jobs`` (a pool that gained nothing) is gone."""
    good = sample_file(tmp_path / "good.jsonl")
    names = []
    for i in range(6):
        path = tmp_path / f"f{i}.jsonl"
        path.write_bytes(good.read_bytes() + (b"garbage\n" if i == 2 else b'{"torn' if i == 4 else b""))
        names.append(str(path))
    names.insert(3, str(tmp_path / "missing.jsonl"))
    done = run_cli(*command, *names)
    assert done.returncode == 1
    said = done.stdout + done.stderr
    assert all(Path(name).name in said for name in names)
    out = [Path(name).name for name in names if Path(name).name in done.stdout]
    assert out == sorted(out, key=lambda name: done.stdout.index(name))  # in the files' order
    assert run_cli(*command, "--jobs", "2", *names).returncode == 2


def test_counts_are_in_english(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        run.save_checkpoint({"n": 1})
    assert (
        run_cli("validate", str(path)).stdout
        == f"{path}: ok, 4 records, 1 run (0 incomplete), 1 checkpoint\n"
    )
    assert "4 records, 1 run, 1 checkpoint\n" in run_cli("summary", str(path)).stdout
    alone = tmp_path / "alone.jsonl"
    session.create(alone).close()
    assert (
        run_cli("validate", str(alone)).stdout
        == f"{alone}: ok, 1 record, 0 runs (0 incomplete), 0 checkpoints\n"
    )


def test_show_type_that_no_record_has_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("my_own_event", tool="x"))
    typo = run_cli("show", str(path), "--type", "tool_exec_edn")
    assert typo.returncode == 2 and typo.stdout == ""
    assert "--type tool_exec_edn: no such record type" in typo.stderr and "my_own_event" in typo.stderr
    never = run_cli("show", str(path), "--type", "message_update")
    assert never.returncode == 2 and "never written" in never.stderr
    known_but_absent = run_cli("show", str(path), "--type", "tool_exec_end")
    assert known_but_absent.returncode == 0 and known_but_absent.stdout == ""
    own = run_cli("show", str(path), "--type", "my_own_event")
    assert own.returncode == 0 and '"type":"my_own_event"' in own.stdout


def test_every_option_in_help_gives_its_default() -> None:
    for command in ("validate", "repair", "summary", "show", "checkpoint", "export", "html"):
        text = run_cli(command, "--help").stdout
        options = (
            text.split("options:", 1)[1] if "options:" in text else text.split("optional arguments:", 1)[1]
        )
        entries = re.split(r"\n  (?=-)", options.split("\nexit status")[0])
        for entry in entries[1:]:
            if not entry.startswith("-h"):
                assert "default" in entry or "required" in entry, (command, entry)


def test_a_first_line_without_a_type_says_so(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text('{"session_id":"' + "a" * 32 + '","seq":1,"time":"t","data":{}}\n')
    with pytest.raises(FormatError, match=r"record, found no type \("):
        records(path)


def test_the_example_never_overwrites_a_file_unless_told(tmp_path: Path) -> None:
    path = tmp_path / "demo.jsonl"
    path.write_text("mine\n")
    example = [sys.executable, str(HERE / "examples" / "agent_loop.py")]
    refused = subprocess.run([*example, str(path)], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and "--force" in refused.stderr and path.read_text() == "mine\n"
    forced = subprocess.run([*example, "--force", str(path)], capture_output=True, text=True, timeout=120)
    assert forced.returncode == 0 and records(path)[0].type == "session_start"


def test_summary_says_why_provider_messages_give_no_usage(tmp_path: Path) -> None:
    """A host that passes OpenAI's own message dicts is told what the usage needs."""
    path = tmp_path / "s.jsonl"
    call = Execution("m1", "model")
    openai_style = {
        "role": "assistant",
        "content": "hi",
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("model_exec_end", execution=call, message=openai_style))
    text = run_cli("summary", str(path)).stdout
    assert (
        "usage: none reported by 1 successful model_exec_end record: no message of theirs is a Message"
        " whose usage" in text
    )
    assert "record each reply as session.Message(..., usage={'input': N, 'output': N})" in text
    with session.create(tmp_path / "t.jsonl") as s, s.begin_run() as run:
        run.record(Event("turn_start"))
    assert "usage: none reported\n" in run_cli("summary", str(tmp_path / "t.jsonl")).stdout


def test_summary_gives_no_usage_advice_when_no_model_call_succeeded(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    call = Execution("m1", "model")
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("model_exec_start", execution=call))
        run.record(Event("model_exec_end", execution=call, error="rate limited"))
    assert "usage: none reported\n" in run_cli("summary", str(path)).stdout


def test_validate_reports_a_valid_file(tmp_path: Path) -> None:
    path = sample_file(tmp_path / "s.jsonl")
    with path.open("ab") as f:
        f.write(b'{"torn')
    done = run_cli("validate", str(path))
    n = records_count(path)
    assert (done.returncode, done.stderr) == (0, "")
    assert (
        done.stdout
        == f"{path}: ok, {n} records, 2 runs (0 incomplete), 2 checkpoints, ignored 6-byte unfinished tail\n"
    )


def test_validate_reports_every_file_and_fails_if_any_fails(tmp_path: Path) -> None:
    good = sample_file(tmp_path / "good.jsonl", runs=1)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(good.read_bytes().replace(b'"seq":4,', b'"seq":9,'))
    missing = tmp_path / "missing.jsonl"
    done = run_cli("validate", str(bad), str(missing), str(good))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"{bad}:4: seq 4 expected, found 9 (offset {offsets(bad.read_bytes())[3]})",
        f"{missing}: No such file or directory",
    ]
    assert done.stdout.startswith(f"{good}: ok, ")


@pytest.mark.parametrize("limit", ["0", "-5", "ten"])
@pytest.mark.parametrize("command", ["validate", "repair", "summary", "show", "checkpoint"])
def test_max_line_bytes_below_one_is_a_usage_error(tmp_path: Path, command: str, limit: str) -> None:
    path = sample_file(tmp_path / "s.jsonl", runs=1)
    blob = path.read_bytes()
    done = run_cli(command, "--max-line-bytes", limit, str(path))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("usage: ")
    assert "argument --max-line-bytes: " in done.stderr
    assert ("at least 1" if limit != "ten" else "invalid literal") in done.stderr
    assert path.read_bytes() == blob and not list(tmp_path.glob("*.broken-*"))


def test_validate_json_output(tmp_path: Path) -> None:
    good = sample_file(tmp_path / "good.jsonl", runs=1)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(good.read_bytes()[:300] + b"\x00" * 10 + b"\n")
    done = run_cli("validate", "--json", str(good), str(bad), str(tmp_path))
    assert done.returncode == 1 and done.stderr == ""
    first, second, third = map(json.loads, done.stdout.splitlines())
    result = session.read(good, lambda r: None)
    assert first == {
        "file": str(good),
        "ok": True,
        "session_id": result.session_id,
        "records": result.records,
        "runs": 1,
        "incomplete_runs": 0,
        "checkpoints": 1,
        "complete_bytes": result.complete_bytes,
        "tail_bytes": 0,
        "impossible": [],
    }
    with pytest.raises(FormatError) as info:
        session.read(bad, lambda r: None)
    err = info.value
    assert second == {
        "file": str(bad),
        "ok": False,
        "line": err.line,
        "offset": err.offset,
        "error": err.reason,
    }
    assert third["ok"] is False and third["line"] is None and third["error"]


def test_usage_errors_exit_2() -> None:
    assert run_cli().returncode == 2
    assert run_cli("validate").returncode == 2
    assert run_cli("frobnicate", "x").returncode == 2
    assert run_cli("validate", "--nope", "x").returncode == 2


def test_main_returns_the_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = sample_file(tmp_path / "s.jsonl", runs=1)
    assert session.main(["validate", str(path)]) == 0
    assert capsys.readouterr().out.startswith(f"{path}: ok")


def test_a_lone_copy_runs_isolated(tmp_path: Path) -> None:
    lone = tmp_path / "elsewhere"
    lone.mkdir()
    shutil.copy(MODULE, lone / "session.py")
    path = sample_file(tmp_path / "s.jsonl", runs=1)
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(lone / "session.py"), "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.startswith(f"{path}: ok, ")
    module = subprocess.run(
        [sys.executable, "-S", "-m", "session", "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=lone,
        timeout=60,
    )
    assert module.returncode == 0, module.stderr
    alone = [sys.executable, "-I", "-S", str(lone / "session.py")]
    for words in (
        ["html", str(path)],
        ["html", "-o", "x.html", str(path)],
        ["otlp", "--endpoint=u", str(path)],
    ):
        missing = subprocess.run([*alone, *words], capture_output=True, text=True, timeout=60)
        assert missing.returncode == 2 and missing.stdout == ""  # its options are not a usage error
        assert f"{words[0]}: needs session_export.py beside session.py" in missing.stderr
    typo = subprocess.run(
        [*alone, "validate", "--jsn", str(path)], capture_output=True, text=True, timeout=60
    )
    assert typo.returncode == 2 and "error: unrecognized arguments: --jsn\n" in typo.stderr
    assert "html " in subprocess.run([*alone, "--help"], capture_output=True, text=True, timeout=60).stdout
    shutil.copy(HERE / "session_export.py", lone / "session_export.py")
    page = subprocess.run([*alone, "html", str(path)], capture_output=True, text=True, timeout=60)
    assert page.returncode == 0 and page.stdout.startswith("<!DOCTYPE html>"), page.stderr


def test_validate_works_without_docstrings(tmp_path: Path) -> None:
    path = sample_file(tmp_path / "s.jsonl", runs=1)
    done = subprocess.run(
        [sys.executable, "-OO", str(MODULE), "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.startswith(f"{path}: ok")


def test_commands_print_lone_surrogates_as_escapes(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("agent_end", error="bad \udc80"))
        run.save_checkpoint({"k": "v\udc80"})
    env = dict(os.environ, PYTHONIOENCODING="utf-8:strict")

    def output(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, str(MODULE), *args, str(path)], capture_output=True, env=env, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.decode("utf-8")  # valid UTF-8

    assert json.loads(output("summary", "--json"))["runs"][0]["error"]["message"] == "bad \udc80"
    assert json.loads(output("checkpoint")) == {"k": "v\udc80"}
    assert "error: bad \\udc80" in output("show", "--pretty")
    assert "error: bad \\udc80" in output("summary")


HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x9b\x7f\u202e\u2066\u200f\u061c"
SHOWN = "\\x1b]0;pwned\\x07\\x1b[2J\\x9b\\x7f\\u202e\\u2066\\u200f\\u061c"


def hostile_file(path: Path) -> Path:
    """A session whose every string the commands print holds terminal controls."""
    s = session.create(path)
    run = s.begin_run()
    call = Execution(f"x; rm -rf ~ {HOSTILE}", "model")
    run.record(Event("agent_start"))
    run.record(Event("model_exec_start", execution=call))
    run.record(
        Event("agent_end", summary=RunSummary(end_reason=f"stop{HOSTILE}"), error=f"bad{HOSTILE}\nfake")
    )
    text = session.text_block(f"hi{HOSTILE}")
    run.record(Event("message_end", execution=MODEL, message=Message(f"user{HOSTILE}", [text])))
    with pytest.warns(RuntimeWarning, match="is no known event type") as caught:
        run.record(Event(f"kind{HOSTILE}", tool=f"ls{HOSTILE}", error=RuntimeError(HOSTILE)))
    assert SHOWN in str(caught[0].message) and HOSTILE not in str(caught[0].message)
    run.save_checkpoint({HOSTILE: HOSTILE})
    crash(s)
    return path


UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def test_human_output_shows_terminal_controls_as_escapes(tmp_path: Path) -> None:
    path = hostile_file(tmp_path / f"s{HOSTILE}.jsonl")
    summary = run_cli("summary", str(path))
    pretty = run_cli("show", "--pretty", str(path))
    for done in (summary, pretty):
        assert done.returncode == 0 and not UNSAFE.search(done.stdout), done.stdout
    assert (
        f"end reason stop{SHOWN}\n" in summary.stdout and f"  error: bad{SHOWN}\\x0afake\n" in summary.stdout
    )
    assert f"kind{SHOWN} 1" in summary.stdout and f"x; rm -rf ~ {SHOWN} attempt 1" in summary.stdout
    assert f"  user{SHOWN}: hi{SHOWN}\n" in pretty.stdout and f" kind{SHOWN}\n" in pretty.stdout
    assert (
        f"  error: RuntimeError: {SHOWN}\n" in pretty.stdout
        and f"  error: bad{SHOWN}\n    fake\n" in pretty.stdout
    )
    report, snapshot = run_cli("summary", "--json", str(path)), run_cli("checkpoint", str(path))
    assert not UNSAFE.search(report.stdout + snapshot.stdout)  # JSON escapes: the same values
    assert json.loads(report.stdout)["runs"][0]["end_reason"] == f"stop{HOSTILE}"
    assert json.loads(snapshot.stdout) == {HOSTILE: HOSTILE}
    raw = subprocess.run([sys.executable, str(MODULE), "show", str(path)], capture_output=True, timeout=60)
    assert raw.returncode == 0 and raw.stdout == path.read_bytes()  # the lines, byte for byte
    path.write_bytes(path.read_bytes() + f'{{"x":"{HOSTILE}"}}\n'.encode())
    failures = [run_cli(command, str(path)) for command in ("validate", "summary", "show", "checkpoint")]
    for done in failures:
        assert done.returncode == 1 and not UNSAFE.search(done.stderr.rstrip("\n")), done.stderr
    assert failures[0].stderr.startswith(
        f"{tmp_path}/s{SHOWN}.jsonl:9: invalid JSON: Invalid control character at"
    )


def test_show_pretty_keeps_line_breaks_only_in_texts(tmp_path: Path) -> None:
    """A line break in a role, a tool name, a call id, a key or an error type is shown as an
    escape: only a record starts a line with '#'.  A text keeps its lines, indented."""
    objs = envelope_lines(5)
    message = {
        "role": "user\n#90 forged",
        "content": [
            {"type": "text", "text": "line 1\nline 2"},
            {"type": "toolCall", "tool_call": {"name": "ls\n#91 forged", "id": "c\n#92 forged", "args": {}}},
        ],
    }
    objs[2]["data"] = {"message": message}
    objs[3]["data"] = {"odd\n#93 key": 1, "error": {"type": "Boom\n#94 forged", "message": "a\nb"}}
    path = tmp_path / "s.jsonl"
    path.write_bytes(dump(objs))
    done = run_cli("show", "--pretty", str(path))
    assert done.returncode == 0, done.stderr
    heads = [line for line in done.stdout.splitlines() if not line.startswith(" ")]
    assert [line.split()[0] for line in heads] == ["#1", "#2", "#3", "#4", "#5"], done.stdout
    assert "  user\\x0a#90 forged: line 1\n    line 2\n" in done.stdout
    assert "  user\\x0a#90 forged calls ls\\x0a#91 forged({}) id c\\x0a#92 forged\n" in done.stdout
    assert "  odd\\x0a#93 key: 1\n  error: Boom\\x0a#94 forged: a\n    b\n" in done.stdout


def test_usage_errors_show_the_arguments_they_quote_escaped(tmp_path: Path) -> None:
    """validate *.jsonl where a file is named like an option: argparse quotes it raw."""
    for args in (["validate", "a.jsonl", f"-{HOSTILE}.jsonl"], ["show", "a.jsonl", f"--{HOSTILE}"]):
        done = run_cli(*args)
        assert done.returncode == 2 and not UNSAFE.search(done.stderr.rstrip("\n")), done.stderr
        assert done.stderr.endswith(f"unrecognized arguments: {args[-1].replace(HOSTILE, SHOWN)}\n")


def test_summary_quotes_the_show_commands_for_the_shell(tmp_path: Path) -> None:
    path = tmp_path / "my sessions" / "s.jsonl"
    path.parent.mkdir()
    s = session.create(path)
    run = s.begin_run()
    run.record(Event("model_exec_start", execution=Execution("x; rm -rf ~", "model")))
    crash(s)
    lines = run_cli("summary", str(path)).stdout.splitlines()
    command = shlex.split(next(line for line in lines if "python -m session show" in line))
    assert command == [
        *("python", "-m", "session", "show", str(path), "--run", run.run_id),
        *("--execution", "x; rm -rf ~", "--attempt", "1", "--pretty"),
    ]
    shown = run_cli(*command[3:])
    assert shown.returncode == 0 and "model_exec_start  [model x; rm -rf ~ attempt 1]" in shown.stdout
    hostile = hostile_file(tmp_path / "h.jsonl")
    pasted = next(
        line for line in run_cli("summary", str(hostile)).stdout.splitlines() if " -m session " in line
    )
    assert SHOWN not in pasted and not re.search(r"[\x00-\x1f\x7f-\x9f\u202e]", pasted)
    need("bash", "the test pastes the command into bash, which reads $'...' words")
    words = (
        subprocess.run(  # what bash makes of the pasted words: the execution id itself
            ["bash", "-c", "printf '%s\\0' " + pasted.split(" show ", 1)[1]], capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    assert words[words.index("--execution") + 1] == f"x; rm -rf ~ {HOSTILE}"


DEEPEST_WRITTEN = """
import contextlib, io, sys, session

class Plain:  # writes values as they are: the deepest the writer can write
    def encode(self, value): return value
    def decode(self, value): return value

for depth in range(1200, 900, -1):
    value = 0
    for _ in range(depth):
        value = [value]
    try:
        with session.create(sys.argv[1] + str(depth), codec=Plain()) as s, s.begin_run() as run:
            call = session.Execution("t1", "tool")
            run.record(session.Event("tool_exec_end", execution=call, result=value))
            run.save_checkpoint(value)
    except session.RecordingError:
        continue
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if session.main(["validate", sys.argv[1] + str(depth)]):
            continue
    print(depth)
    break
"""


def deepest_written(tmp_path: Path) -> Path:
    """A file holding the deepest values the writer takes and the reader reads back (990
    levels or so) when a program records them from a shallow stack."""
    env = dict(os.environ, PYTHONPATH=str(HERE))
    done = subprocess.run(
        [sys.executable, "-c", DEEPEST_WRITTEN, str(tmp_path / "s")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return tmp_path / f"s{int(done.stdout)}"


def test_every_command_prints_values_as_deep_as_the_writer_writes(tmp_path: Path) -> None:
    path = deepest_written(tmp_path)
    depth = int(path.name[1:])
    assert depth >= 985 and run_cli_process("validate", str(path)).returncode == 0
    for command in (["show", "--pretty"], ["checkpoint"], ["summary"], ["show", "--execution", "t1"]):
        done = run_cli_process(*command, str(path))
        assert (done.returncode, done.stderr) == (0, ""), (command, done.stderr[-500:])
    snapshot = "".join(run_cli_process("checkpoint", str(path)).stdout.split())
    assert snapshot == "[" * depth + "0" + "]" * depth


def test_a_closed_pipe_ends_no_command_early_or_in_a_traceback(tmp_path: Path) -> None:
    good_path, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    gappy_file(good_path)
    bad.write_bytes(b"garbage\n")
    damaged_path, _, _ = damaged(tmp_path)

    def into_a_closed_pipe(*args: str) -> Tuple[int, str]:
        command = [sys.executable, str(MODULE), *args]
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
            assert child.stdout is not None and child.stderr is not None
            child.stdout.close()  # like `| head -1` that has its line
            err = child.stderr.read().decode()
            return child.wait(timeout=120), err

    status, err = into_a_closed_pipe("validate", str(bad), *[str(good_path)] * 3000, str(bad))
    assert status == 1 and err == f"{bad}:1: invalid JSON: Expecting value at column 1 (offset 0)\n" * 2
    for args in (["validate", str(good_path)], ["summary", str(good_path)], ["show", str(good_path)]):
        assert into_a_closed_pipe(*args) == (0, ""), args
    assert into_a_closed_pipe("show", "--pretty", str(good_path)) == (0, "")
    assert into_a_closed_pipe("checkpoint", str(good_path)) == (0, "")
    assert into_a_closed_pipe("summary", str(bad)) == (
        1,
        f"{bad}:1: invalid JSON: Expecting value at column 1 (offset 0)\n",
    )
    assert into_a_closed_pipe("repair", str(damaged_path)) == (0, "")
    assert run_cli("validate", str(damaged_path)).returncode == 0  # repaired all the same


def wait_until_blocked_in_a_pipe_read(pid: int) -> None:
    """Where Linux tells (``/proc/PID/wchan``), wait until *pid* sleeps in a pipe's read: a
    signal then interrupts that read.  One that came just before it, while C code was still
    on its way there, would be seen only once the read returns: never, on a pipe kept open."""
    wchan = Path(f"/proc/{pid}/wchan")
    deadline = time.monotonic() + 30
    while wchan.exists() and "pipe" not in wchan.read_text() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_an_interrupt_ends_in_one_line_and_status_130(tmp_path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("needs a named pipe (POSIX) to interrupt a read at a known point")
    import signal

    fifo = tmp_path / "big.jsonl"
    os.mkfifo(fifo)
    child = subprocess.Popen(
        [sys.executable, str(MODULE), "validate", str(fifo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # as a terminal would start it: a test run launched in the background ignores SIGINT,
        # and the child would inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    with child, fifo.open("wb") as f:  # open returns once validate has opened the file: it is reading it
        f.write(blob_of([HEAD, START]))
        f.flush()
        wait_until_blocked_in_a_pipe_read(child.pid)
        child.send_signal(signal.SIGINT)
        try:
            out, err = child.communicate(timeout=60)
        finally:
            child.kill()
    assert (child.returncode, out, err) == (130, b"", b"python -m session validate: interrupted\n")


def test_a_full_device_is_an_output_error_not_an_invalid_file(tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full (Linux) to fill the output")
    path = sample_file(tmp_path / "s.jsonl")
    for command in ("validate", "summary", "show", "checkpoint"):
        with open("/dev/full", "w") as full:
            done = subprocess.run(
                [sys.executable, str(MODULE), command, str(path)],
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
            )
        assert done.returncode == 74, (command, done.stderr)
        assert (
            done.stderr == f"python -m session {command}: cannot write the output: No space left on device\n"
        )


def test_a_dash_reads_standard_input(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    gappy_file(path)
    blob = path.read_bytes()

    def with_stdin(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, str(MODULE), *args], input=blob, capture_output=True, timeout=60
        )

    assert (
        with_stdin("validate", "-").stdout
        == run_cli("validate", str(path)).stdout.replace(str(path), "-").encode()
    )
    summary = with_stdin("summary", "-")
    assert summary.returncode == 0 and summary.stdout.startswith(b"-: session ")
    assert with_stdin("show", "-", "--as-written").stdout == blob
    assert with_stdin("show", "-", "--type", "agent_end").stdout == b"".join(
        line for line in blob.splitlines(keepends=True) if b'"agent_end"' in line
    )
    torn = subprocess.run(
        [sys.executable, str(MODULE), "validate", "-"], input=blob[:50], capture_output=True, timeout=60
    )
    assert torn.returncode == 1 and torn.stderr.startswith(b"-:")


if sys.platform != "win32":  # FIFOs are POSIX

    def test_every_command_reads_a_fifo_once_and_never_waits_for_a_second_writer(tmp_path: Path) -> None:
        blob = sample_file(tmp_path / "s.jsonl").read_bytes()
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        for command in ("validate", "summary", "show", "checkpoint"):
            writer = threading.Thread(target=fifo.write_bytes, args=(blob,), daemon=True)
            writer.start()  # one writer, as a pipe from another program
            done = run_cli(command, str(fifo))  # before the fix, checkpoint opened it again and waited
            writer.join(60)
            assert not writer.is_alive(), command
            if command == "checkpoint":  # the snapshot is found, and then cannot be read back
                assert done.returncode == 1 and done.stderr == f"{fifo}: File or stream is not seekable.\n"
            else:
                assert done.returncode == 0 and done.stdout, (command, done.stderr)


def test_the_installed_script_names_itself(tmp_path: Path) -> None:
    script = tmp_path / "bin" / "session-jsonl"
    script.parent.mkdir()
    script.write_text(  # what pip writes for the [project.scripts] entry
        "import re\nimport sys\nfrom session import main\n"
        "if __name__ == '__main__':\n"
        "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
        "    sys.exit(main())\n"
    )
    env = dict(os.environ, PYTHONPATH=str(HERE))
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0 and done.stdout.startswith("usage: session-jsonl ")
    assert run_cli_process("--help").stdout.startswith("usage: python -m session ")


@pytest.mark.parametrize("command", ["validate", "repair", "summary", "show", "checkpoint"])
def test_each_commands_help_states_its_exit_codes_and_defaults(command: str) -> None:
    text = " ".join(run_cli(command, "--help").stdout.split())
    assert "default: 268435456, 256 MiB" in text and ("- reads stdin" in text) is (
        command in ("validate", "summary", "show")
    )
    assert re.search(r"exit status: 0 .*; 1 .*; 2 usage error; 74 output not written; 130 interrupted", text)


def test_repair_says_what_it_did_in_each_case(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(blob_of([HEAD, START, line_obj(3), line_obj(4, data={"x": "y" * 5000}), line_obj(5)]))
    long = run_cli("repair", "--max-line-bytes", "1000", str(path))
    assert long.returncode == 1 and long.stderr == (
        f"{path}:4: line longer than max_line_bytes (1000); not cut: repair with a larger --max-line-bytes"
        f" (offset {offsets(path.read_bytes())[3]})\n"
    )
    path.write_bytes(blob_of([HEAD, START]) + b'{"torn')
    torn = run_cli("repair", str(path))
    assert (torn.returncode, torn.stdout) == (
        0,
        f"{path}: valid, nothing to repair (2 records); its 6-byte unfinished last line is left for open,"
        " which removes it\n",
    )
    with session.open(path):
        locked = run_cli("repair", str(path))
    assert (locked.returncode, locked.stderr) == (1, f"{path} is open for writing by another handle\n")


def test_text_errors_give_the_offset_and_read_as_sentences(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    blob = blob_of([HEAD, START, b'{"x":"a\tb"}'])
    path.write_bytes(blob)
    done = run_cli("validate", str(path))
    assert (
        done.stderr
        == f"{path}:3: invalid JSON: Invalid control character at column 8 (offset {offsets(blob)[2]})\n"
    )
    path.write_bytes(blob_of([HEAD, START, b'{"x":"abc']))
    unterminated = run_cli("validate", str(path)).stderr
    assert (
        unterminated
        == f"{path}:3: invalid JSON: Unterminated string starting at column 6 (offset {offsets(blob)[2]})\n"
    )


# ---------------------------------------------------------------------------- reliability: power loss
# Sessions are recorded through a layer that logs every write, cut and fsync reaching the file.
# From that log come the disk states a power cut may leave: everything up to the last completed
# fsync intact; after it, any prefix of the later writes, the file's size possibly updated
# before its data, so that any 512-byte sector of the unsynced region holds the data, zeros or
# garbage.  For each state, open either succeeds with every synced record intact, or raises
# FormatError and changes nothing; then repair recovers every synced record.


class DiskLog:
    """The writes (offset, bytes), cuts and syncs that reach one file, in order."""

    def __init__(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ops: List[Any] = []
        real_write, real_fsync, real_truncate = os.write, os.fsync, os.ftruncate

        def ours(fd: int) -> bool:
            try:
                mine, target = os.fstat(fd), os.stat(path)
            except OSError:
                return False
            return (mine.st_dev, mine.st_ino) == (target.st_dev, target.st_ino)

        def write(fd: int, data: bytes) -> int:
            offset = os.fstat(fd).st_size  # the file is opened O_APPEND
            done = real_write(fd, data)
            if ours(fd):
                self.ops.append(("write", offset, bytes(data)[:done]))
            return done

        def fsync(fd: int) -> None:
            real_fsync(fd)
            if ours(fd):
                self.ops.append(("sync",))

        def ftruncate(fd: int, size: int) -> None:
            real_truncate(fd, size)
            if ours(fd):
                self.ops.append(("cut", size))

        def link(source: Any, target: Any) -> None:  # create publishes a file written and synced
            real_link(source, target)
            if os.path.samefile(target, path):
                self.ops += [("write", 0, Path(target).read_bytes()), ("sync",)]

        real_link = os.link
        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "ftruncate", ftruncate)
        monkeypatch.setattr(os, "link", link)


def crash_images(ops: List[Any], rng: random.Random, variants: int) -> Any:
    """(synced bytes, what a power cut after each logged operation may leave on disk)."""
    image = bytearray()
    synced = b""
    for op in ops:
        if op[0] == "write":
            assert op[1] == len(image)
            image += op[2]
        elif op[0] == "cut":
            del image[op[1] :]
        else:
            synced = bytes(image)
            continue
        if not synced:
            continue  # create has not returned yet: there is no session to lose
        assert image.startswith(synced)
        later = bytes(image[len(synced) :])
        for _ in range(variants):
            yield synced, synced + torn(later, len(synced), rng)


def torn(later: bytes, start: int, rng: random.Random) -> bytes:
    """Any prefix of *later*, whose 512-byte sectors (aligned in the file) may be lost."""
    data = bytearray(later[: rng.choice([0, len(later), rng.randint(0, len(later))])])
    sector = start - start % 512
    while sector < start + len(data):
        lo, hi = max(sector, start) - start, min(sector + 512, start + len(data)) - start
        fate = rng.choices(["kept", "zeros", "garbage"], [5, 3, 2])[0]
        if fate == "zeros":
            data[lo:hi] = bytes(hi - lo)
        elif fate == "garbage":
            data[lo:hi] = rng.randbytes(hi - lo) if hasattr(rng, "randbytes") else os.urandom(hi - lo)
        sector += 512
    return bytes(data)


def record_scenarios(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Dict[str, List[Any]]:
    """Realistic sessions, each with its operation log."""
    logs: Dict[str, List[Any]] = {}
    sys.path.insert(0, str(HERE / "examples"))
    try:
        import agent_loop
    finally:
        sys.path.remove(str(HERE / "examples"))

    path = tmp_path / "example.jsonl"
    logs["example agent loop, two runs"] = DiskLog(path, monkeypatch).ops
    with contextlib.redirect_stdout(io.StringIO()):
        agent_loop.main([str(path)])
    monkeypatch.undo()

    path = tmp_path / "heavy.jsonl"
    logs["large tool results"] = DiskLog(path, monkeypatch).ops
    rng = random.Random(7)
    with session.create(path) as s:
        for _ in range(2):
            with s.begin_run() as run:
                for i in range(30):
                    size = rng.choice([100, 3000, 40000])
                    run.record(Event("tool_exec_end", execution=TOOL, result={"i": i, "out": "é" * size}))
                    if i % 7 == 6:
                        run.save_checkpoint({"i": i})
    monkeypatch.undo()

    path = tmp_path / "failing.jsonl"
    log = DiskLog(path, monkeypatch)
    logs["a failed write, then reopened"] = log.ops
    s = session.create(path)
    run = s.begin_run()
    for i in range(10):
        run.record(Event("turn_start", turn_index=i))
    run.save_checkpoint({"i": 10})
    logged_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: logged_write(fd, bytes(data)[:50]) and 1 / 0)
    with pytest.raises(RecordingError):
        run.record(Event("tool_exec_end", execution=TOOL, result="x" * 2000))
    monkeypatch.setattr(os, "write", logged_write)
    with pytest.raises(RecordingError):
        s.close()
    with session.open(path) as s, s.begin_run() as run:
        for i in range(10):
            run.record(Event("turn_start", turn_index=i))
    monkeypatch.undo()
    return logs


def test_reliability_power_loss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logs = record_scenarios(tmp_path, monkeypatch)
    rng = random.Random(2026)
    path = tmp_path / "state.jsonl"
    states = opened = repaired = synced_records = 0
    for scenario, ops in logs.items():
        for synced, image in crash_images(ops, rng, variants=4):
            states += 1
            synced_records = max(synced_records, synced.count(b"\n"))
            path.write_bytes(image)
            try:
                session.open(path).close()
            except FormatError:
                assert path.read_bytes() == image, scenario  # a failed open changes nothing
                result = session.repair(path)
                assert result.kept_records >= synced.count(b"\n"), scenario
                assert result.backup_path is not None and Path(result.backup_path).read_bytes() == image
                Path(result.backup_path).unlink()
                session.open(path).close()
                repaired += 1
            else:
                opened += 1
            assert path.read_bytes().startswith(synced), scenario  # every synced record, byte for byte
            for _ in session.iter_records(path):  # every reference of what is left resolves
                pass
    print(f"power loss: {states} states; {opened} opened, {repaired} repaired; 0 synced records lost")
    assert states > 600 and opened > 100 and repaired > 100


# ---------------------------------------------------------------------------- reliability: fuzzing
# Valid files, mutated the ways damage and malice mutate them, go through read, open, validate
# and repair: only FormatError and CodecError may escape, a failed open changes nothing, an
# accepted file is consistent, and every command works on it.

FUZZ_MAX_LINE = 1 << 16


@functools.lru_cache(maxsize=None)
def fuzz_base() -> bytes:
    with tempfile.TemporaryDirectory() as scratch:
        path = sample_file(Path(scratch) / "base.jsonl")
        with session.open(path) as s, s.begin_run() as run:
            run.record(full_event("model_request", error=None))
            run.record(full_event("tool_exec_end", result={"n": [1.5, -2, True, None, "\\u00e9"]}))
        return path.read_bytes()


POSITION = st.integers(min_value=0, max_value=10**6)
MUTATION = st.one_of(
    st.tuples(st.just("flip"), POSITION, st.integers(0, 7)),
    st.tuples(st.just("insert"), POSITION, st.binary(min_size=1, max_size=12)),
    st.tuples(st.just("delete"), POSITION, st.integers(1, 80)),
    st.tuples(st.just("duplicate line"), POSITION),
    st.tuples(st.just("drop line"), POSITION),
    st.tuples(st.just("swap lines"), POSITION, POSITION),
    st.tuples(st.just("NUL run"), POSITION, st.integers(1, 3000)),
    st.tuples(st.just("deep nesting"), POSITION, st.integers(1, 50_000)),
    st.tuples(
        st.just("invalid UTF-8"), POSITION, st.sampled_from([b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\xf4\x90"])
    ),
    st.tuples(st.just("lone surrogate"), POSITION, st.sampled_from(['"\\ud800"', '"\\udfff x"'])),
    st.tuples(st.just("NaN"), POSITION, st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999"])),
    st.tuples(st.just("huge line"), POSITION),
    st.tuples(
        st.just("retype"),
        POSITION,
        POSITION,
        st.sampled_from([5, -1, "x; \x1b[2J\u202e", [], {}, None, True, "deep"]),
    ),
)


def mutate(blob: bytes, mutation: Tuple[Any, ...]) -> bytes:
    kind, at, *rest = mutation
    extra: Any = rest[0] if rest else None
    lines = blob.split(b"\n")
    pos = at % (len(blob) + 1)
    row = at % len(lines)
    if kind == "flip" and blob:
        pos %= len(blob)
        return blob[:pos] + bytes([blob[pos] ^ (1 << extra)]) + blob[pos + 1 :]
    if kind in ("insert", "invalid UTF-8"):
        return blob[:pos] + bytes(extra) + blob[pos:]
    if kind == "delete":
        return blob[:pos] + blob[pos + extra :]
    if kind == "duplicate line":
        return b"\n".join([*lines[: row + 1], lines[row], *lines[row + 1 :]])
    if kind == "drop line":
        return b"\n".join(lines[:row] + lines[row + 1 :])
    if kind == "swap lines":
        other = extra % len(lines)
        lines[row], lines[other] = lines[other], lines[row]
        return b"\n".join(lines)
    if kind == "NUL run":
        size: int = extra
        return blob[:pos] + b"\x00" * size + blob[pos + size :]
    if kind == "deep nesting":
        lines[row] = b'{"session_id":' + b"[" * extra + b"]" * extra + b"}"
        return b"\n".join(lines)
    if kind in ("lone surrogate", "NaN"):  # in place of the first value after a colon
        colon = blob.find(b":", pos)
        end = min((i for i in (blob.find(b",", colon), blob.find(b"}", colon)) if i > 0), default=-1)
        return blob if colon < 0 or end < 0 else blob[: colon + 1] + extra.encode() + blob[end:]
    if kind == "retype":
        return b"\n".join([*lines[:row], retyped(lines[row], extra, rest[1]), *lines[row + 1 :]])
    lines[row] = b'{"x":"' + b"y" * (FUZZ_MAX_LINE + 10) + b'"}'  # huge line
    return b"\n".join(lines)


def retyped(line: bytes, pick: int, value: Any) -> bytes:
    """*line* with one value inside its data replaced by *value*: a file the format allows,
    holding data no writer writes."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return line
    if type(obj) is not dict or type(obj.get("data")) is not dict:
        return line
    places, todo = [], [obj["data"]]
    while todo:
        node = todo.pop()
        for key in list(node) if isinstance(node, dict) else range(len(node)):
            places.append((node, key))
            if isinstance(node[key], (dict, list)):
                todo.append(node[key])
    if not places:
        return line
    node, key = places[pick % len(places)]
    node[key] = deep_value(500) if value == "deep" else value
    return json.dumps(obj, separators=(",", ":")).encode()


def check_consistent(path: Path) -> int:
    """An accepted file reads the same twice, its values decode or fail cleanly; its records."""
    first = records(path)
    assert [r.seq for r in first] == list(range(1, len(first) + 1))
    assert [r.offset for r in first] == sorted(r.offset for r in first)
    assert records(path) == first
    for record in first:
        try:
            view = EventData.from_record(record)
            _ = record.ref
            JSONCodec().decode([view.message, view.partial_message, view.context_items, view.compaction])
        except (FormatError, CodecError):
            pass
    return len(first)


COMMANDS = [
    ["summary"],
    ["summary", "--json"],
    ["show"],
    ["show", "--as-written"],
    ["show", "--pretty"],
    ["show", "--execution", "m1", "--attempt", "1"],
    ["checkpoint"],
    ["repair"],
]


def check_commands(path: Path) -> None:
    """Every command on an accepted file prints its output: no exception, exit status 0."""
    for command in COMMANDS:
        raw, err = io.BytesIO(), io.StringIO()
        out = io.TextIOWrapper(raw, encoding="utf-8")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = session.main([*command, "--max-line-bytes", str(FUZZ_MAX_LINE), str(path)])
        if command == ["checkpoint"] and err.getvalue().endswith(" records\n"):
            assert status == 1 and "no checkpoint in" in err.getvalue()
        else:
            assert status == 0, (command, err.getvalue())
        out.flush()
        if command in (["summary"], ["show", "--pretty"]):
            assert not UNSAFE.search(raw.getvalue().decode()), command
        if command == ["show", "--as-written"]:
            assert path.read_bytes().startswith(raw.getvalue())


FUZZ_CASES = sweep(400, 100)


@hypothesis.settings(max_examples=FUZZ_CASES, deadline=None, derandomize=True, database=None)
@hypothesis.given(st.lists(MUTATION, min_size=1, max_size=4))
def test_reliability_fuzz_mutated_files(mutations: List[Any]) -> None:
    blob = fuzz_base()
    for mutation in mutations:
        blob = mutate(blob, mutation)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "fuzz.jsonl"
        path.write_bytes(blob)
        try:
            accepted = session.read(path, lambda r: None, max_line_bytes=FUZZ_MAX_LINE)
        except FormatError:
            accepted = None
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = session.main(["validate", "--json", "--max-line-bytes", str(FUZZ_MAX_LINE), str(path)])
        assert status == (0 if accepted else 1) and json.loads(out.getvalue())["ok"] is bool(accepted)
        if accepted:
            check_consistent(path)
            check_commands(path)
        try:
            with session.open(path, max_line_bytes=FUZZ_MAX_LINE) as s, s.begin_run() as run:
                run.record(Event("turn_start"))
        except FormatError:
            assert accepted is None and path.read_bytes() == blob  # a failed open changes nothing
            unrepairable: Optional[FormatError] = None
            try:
                result = session.repair(path, max_line_bytes=FUZZ_MAX_LINE)
            except FormatError as exc:
                unrepairable = exc
            if unrepairable is not None:  # a bad first line, or a line too long to judge
                assert unrepairable.line == 1 or "not cut" in unrepairable.reason
                assert path.read_bytes() == blob
                return
            assert result.error is not None and path.read_bytes() == blob[: result.error.offset]
            assert check_consistent(path) == result.kept_records
        else:
            assert accepted is not None and check_consistent(path) == accepted.records + 3


def json_containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keys = st.sampled_from(["$type", "value", "$object", "role", "content", "timestamp"]) | st.text()
    return st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    json_containers,
    max_leaves=20,
)


@hypothesis.settings(max_examples=FUZZ_CASES, deadline=None, derandomize=True, database=None)
@hypothesis.given(JSON_VALUES)
def test_reliability_fuzz_codec_and_event_data(value: Any) -> None:
    with contextlib.suppress(CodecError):
        JSONCodec().decode(value)
    data = value if isinstance(value, dict) else {"execution": value, "retry": value, "summary": value}
    with contextlib.suppress(FormatError):
        EventData.from_record(session.Record(SID, 3, "x", "t", RID, data, 0))
    assert JSONCodec().decode(JSONCodec().encode(value)) == value  # plain JSON round-trips


JSON_BYTES = b'{}[],:"\\ \t\n\r0123456789.-+eEtrufalsn\x00\x1f\x7f\xc3\xa9\xff'
TEXT_EDIT = st.tuples(
    st.integers(0, 10**6),
    st.integers(0, 3),
    st.binary(max_size=3)
    | st.sampled_from(
        [
            b"\\u00e9",
            b"\\ud800",
            b"\\x",
            b"NaN",
            b"-Infinity",
            b"1e999",
            b"1E+2",
            b"-0.0e-0",
            b"01",
            b"9" * 4400,
        ]
    ),
)


@hypothesis.settings(max_examples=FUZZ_CASES * 2, deadline=None, derandomize=True, database=None)
@hypothesis.given(
    JSON_VALUES,
    st.sampled_from([(",", ":"), (", ", ": "), (" ,\t", "\r\n:\n")]),
    st.booleans(),
    st.lists(
        TEXT_EDIT | st.tuples(st.integers(0, 10**6), st.just(1), st.sampled_from(list(JSON_BYTES))),
        max_size=3,
    ),
)
def test_reliability_fuzz_the_long_line_scanner_agrees_with_json(
    value: Any, separators: Tuple[str, str], only_ascii: bool, edits: List[Tuple[int, int, Any]]
) -> None:
    blob = json.dumps(value, separators=separators, ensure_ascii=only_ascii).encode()
    for at, cut, insert in edits:
        at %= len(blob) + 1
        blob = blob[:at] + (bytes([insert]) if isinstance(insert, int) else insert) + blob[at + cut :]
    assert scanner_accepts(blob) == json_accepts(blob), blob


@hypothesis.settings(max_examples=FUZZ_CASES * 2, deadline=None, derandomize=True, database=None)
@hypothesis.given(
    JSON_VALUES,
    st.integers(1, 48),
    st.lists(
        TEXT_EDIT | st.tuples(st.integers(0, 10**6), st.just(1), st.sampled_from(list(JSON_BYTES))),
        max_size=2,
    ),
)
def test_reliability_fuzz_the_long_line_scanner_agrees_with_json_whatever_window_json_gets(
    value: Any, window: int, edits: List[Tuple[int, int, Any]]
) -> None:
    inner = json.dumps(value, ensure_ascii=False).encode()
    blob = (
        b'{"data":{"a":[' + inner + b',1.5e-7,1.25,-0,[2e3,"x\\n"],{"k":[true]}],"b":' + inner + b'},"c":1}'
    )
    for at, cut, insert in edits:
        at %= len(blob) + 1
        blob = blob[:at] + (bytes([insert]) if isinstance(insert, int) else insert) + blob[at + cut :]
    whole = session._scan_json(blob, frozenset({"a", "b"})) if json_accepts(blob) else None
    saved = session._WINDOW
    session._WINDOW = window  # json is given values cut at every place
    try:
        assert scanner_accepts(blob) == (whole is not None), blob
        if whole is not None:  # and the spans of the members are where they are
            assert session._scan_json(blob, frozenset({"a", "b"})) == whole
    finally:
        session._WINDOW = saved


@hypothesis.settings(max_examples=FUZZ_CASES, deadline=None, derandomize=True, database=None)
@hypothesis.given(st.lists(MUTATION, min_size=1, max_size=4))
def test_reliability_fuzz_the_long_line_scanner_on_mutated_lines(mutations: List[Any]) -> None:
    blob = fuzz_base()
    for mutation in mutations:
        blob = mutate(blob, mutation)
    for line in blob.split(b"\n"):
        assert scanner_accepts(line) == json_accepts(line), line[:200]


def scanner_depth(text: str) -> int:
    """How deep json's scanner recurses on *text* before it stops: its pure-Python twin,
    which recurses alike, counting."""
    depth = deepest = 0

    def counted(parse: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            nonlocal depth, deepest
            depth += 1
            deepest = max(deepest, depth)
            try:
                return parse(*args, **kwargs)
            finally:
                depth -= 1

        return call

    decoder = json.JSONDecoder()
    for name, parse in (("parse_object", "JSONObject"), ("parse_array", "JSONArray")):
        setattr(decoder, name, counted(getattr(json.decoder, parse)))
    with contextlib.suppress(StopIteration, ValueError):
        json.scanner.py_make_scanner(decoder)(text, 0)  # type: ignore[attr-defined]
    return deepest


JSON_PIECES = st.sampled_from(
    ["[", "]", "{", "}", '"', "\\", '\\"', "\\\\", ",", ":", " ", "1", '"a"', '"["', '"]"', '"\\\\"', '"k":']
)


@hypothesis.settings(max_examples=FUZZ_CASES * 2, deadline=None, derandomize=True, database=None)
@hypothesis.given(st.lists(JSON_PIECES, max_size=60) | JSON_VALUES.map(json.dumps))
def test_reliability_fuzz_the_bracket_depth_bound_holds(text: Any) -> None:
    """Python 3.8's reader parses a line where it has room for it by this bound: it must never
    be lower than the depth json reaches, whatever the line."""
    text = "".join(text) if isinstance(text, list) else text
    bound = session._bracket_depth(text.encode())
    assert bound == -1 or bound >= scanner_depth(text), text


def test_the_bracket_depth_of_a_line_is_its_nesting() -> None:
    rows = [{"id": n, "tags": ["a", "b"], "meta": {"x": [1.5], "why": 'say "hi\\"'}} for n in range(500)]
    line = json.dumps({"data": {"result": rows}}).encode()
    assert session._bracket_depth(line) == 6 == scanner_depth(line.decode())
    assert session._json_levels(line + b"\n") == 6  # where the brackets are too many to count
    assert session._bracket_depth(b'{"a":"[" }') == -1  # a bracket in a string: no verdict


# ---------------------------------------------------------------------------- format version 2
# Version 2 writes each message and tool list once and refers to it; read back, a request is
# what version 1 writes.  The same events are recorded in both versions and compared.

RELEASED = HERE / "testdata" / "released" / "session_1_0_0.py"  # the release before version 2
RELEASED_COMMIT = "df334b9"
RELEASED_SHA256 = "dfd28513cf0df1baeaefc7d0ea25deff41d37236e31668d3e8ec9a7b1c08550d"


@functools.lru_cache(maxsize=None)
def released_module() -> Any:
    """The version-1-only release of session.py, imported under a name of its own."""
    import hashlib
    import importlib.util

    assert hashlib.sha256(RELEASED.read_bytes()).hexdigest() == RELEASED_SHA256
    spec = importlib.util.spec_from_file_location("session_1_0_0", RELEASED)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # where its dataclasses look themselves up
    spec.loader.exec_module(module)
    return module


def test_the_released_copy_is_the_commit_it_names() -> None:
    shown = subprocess.run(
        ["git", "-C", str(HERE), "show", f"{RELEASED_COMMIT}:session.py"], capture_output=True, timeout=60
    )
    if shown.returncode == 0:  # a clone with its history: the copy is that commit's file
        assert shown.stdout == RELEASED.read_bytes()
    else:  # a shallow clone or an unpacked archive: the copy is checked by its digest alone
        assert b"unknown revision" in shown.stderr or b"not a git repository" in shown.stderr
    assert released_module().__version__ == "1.0.0"


def stamped(role: str, text: str, n: int = 0) -> Message:
    return Message(role, [session.text_block(text)], timestamp=T0 + dt.timedelta(seconds=n))


def requests(path: Path, **options: Any) -> List[session.Record]:
    return [r for r in session.iter_records(path, **options) if r.type == "model_request"]


def same_events(one: Path, two: Path) -> None:
    """*two* (version 2) reads back as *one* (version 1): every record but the message and
    tool list records, with the same data, and each message the same JSON text."""

    def events(path: Path) -> List[Tuple[str, str, Dict[str, Any]]]:  # at their own time stamps
        skip = {"message", "tools", *session._RESERVED}
        return [(r.type, r.time, r.data) for r in session.iter_records(path) if r.type not in skip]

    v1, v2 = events(one), events(two)
    assert v1 == v2 and records(one)[0].data == {"version": 1} and records(two)[0].data == {"version": 2}
    for (_, _, a), (_, _, b) in zip(v1, v2):
        if "request" in a:
            texts = [session._dumps(m) for m in a["request"]["messages"]]
            assert texts == [session._dumps(m) for m in b["request"]["messages"]]


def record_both(
    tmp_path: Path, contexts: List[Tuple[List[Any], List[Any]]], **options: Any
) -> Tuple[Path, Path]:
    """Each (messages, tools) as a model call's request, recorded in a version-1 and a
    version-2 file; the two paths."""
    paths = []
    for version in (1, 2):
        path = tmp_path / f"v{version}.jsonl"
        with session.create(path, version=version, **options) as s, s.begin_run() as run:
            for n, (messages, tools) in enumerate(contexts):
                execution = Execution(f"m{n}", "model", turn_index=n)
                request = ModelRequest(messages, tools, CallConfig(max_tokens=n))
                run.record(Event("model_request", execution=execution, request=request, timestamp=T0))
                reply = stamped("assistant", f"r{n}")
                run.record(Event("model_exec_end", execution=execution, message=reply, timestamp=T0))
        paths.append(path)
    return paths[0], paths[1]


POOL = [stamped(role, f"{role} {n} " + "é" * (n % 3), n) for n in range(8) for role in ("user", "assistant")]
CONTEXT_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("grow"), st.integers(0, len(POOL) - 1)),  # a message, maybe seen before
        st.tuples(st.just("copy"), st.integers(0, len(POOL) - 1)),  # an equal message, a new object
        st.tuples(st.just("drop"), st.integers(0, 5)),  # a compaction: one message goes
        st.tuples(st.just("branch"), st.integers(0, 5)),  # back to a shorter prefix
        st.tuples(st.just("repeat"), st.integers(0, 5)),  # a message again, in the same context
        st.tuples(st.just("plain"), st.integers(0, 3)),  # a plain JSON message
        st.tuples(st.just("tools"), st.integers(0, 2)),  # another tool list
        st.tuples(st.just("call"), st.just(0)),  # a model call with the context as it is
    ),
    max_size=40,
)


def contexts_of(steps: List[Tuple[str, int]]) -> List[Tuple[List[Any], List[Any]]]:
    context: List[Any] = []
    tools: List[Any] = []
    out = []
    for step, n in steps:
        if step == "grow":
            context.append(POOL[n])
        elif step == "copy":
            context.append(dataclasses.replace(POOL[n]))
        elif step == "drop" and context:
            del context[n % len(context)]
        elif step == "branch":
            del context[n:]
        elif step == "repeat" and context:
            context.append(context[n % len(context)])
        elif step == "plain":
            context.append({"role": "user", "text": f"plain {n}"} if n else "just text")
        elif step == "tools":
            tools = [{"name": f"tool{i}", "parameters": {"n": i}} for i in range(n)]
        elif step == "call":
            out.append((list(context), list(tools)))
    out.append((context, tools))
    return out


@hypothesis.settings(max_examples=sweep(150, 50), deadline=None, derandomize=True, database=None)
@hypothesis.given(CONTEXT_STEPS)
def test_version_2_reads_back_what_version_1_writes(steps: List[Tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        one, two = record_both(Path(folder), contexts_of(steps))
        same_events(one, two)
        ref = CallRef(records(two)[0].session_id, records(two)[1].run_id or "", "m0", 1)
        [request] = [r for r in session.find(two, ref) if r.type == "model_request"]
        assert request.data == requests(one)[0].data
        with two.open("rb") as f:  # a file that cannot seek: every message line kept as it streams
            piped = [
                r.data
                for r in session.iter_records(typing.cast(typing.BinaryIO, Unseekable(f)))
                if r.type == "model_request"
            ]
        assert piped == [r.data for r in requests(one)]


@hypothesis.settings(max_examples=60, deadline=None, derandomize=True, database=None)
@hypothesis.given(CONTEXT_STEPS)
def test_a_limit_version_1_writes_under_version_2_writes_under_too(steps: List[Tuple[str, int]]) -> None:
    """The size rule of a request and what it refers to is version 1's line: what version 1
    writes under a max_line_bytes, version 2 writes and reads under it too."""
    contexts = contexts_of(steps)
    with tempfile.TemporaryDirectory() as folder:
        one, _ = record_both(Path(folder), contexts)
        limit = max(map(len, one.read_bytes().splitlines()))  # its longest line: at the limit
    with tempfile.TemporaryDirectory() as folder:
        one, two = record_both(Path(folder), contexts, max_line_bytes=limit)
        assert [r.data for r in requests(two, max_line_bytes=limit)] == [r.data for r in requests(one)]
        with session.open(two, max_line_bytes=limit) as s, s.begin_run() as run:  # it learns the sizes
            n, (messages, tools) = len(contexts) - 1, contexts[-1]
            request = ModelRequest(messages, tools, CallConfig(max_tokens=n))
            execution = Execution(f"m{n}", "model", turn_index=n)
            run.record(Event("model_request", execution=execution, request=request, timestamp=T0))
    with tempfile.TemporaryDirectory() as folder, pytest.raises(RecordingError):
        record_both(
            Path(folder), contexts, max_line_bytes=limit - 1
        )  # version 1 refuses it: the limit is tight


class Unseekable(io.RawIOBase):
    """A binary file read as a pipe is: no seek, no tell, no descriptor."""

    def __init__(self, f: Any) -> None:
        self._f = f

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._f.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def readline(self, size: Optional[int] = -1) -> bytes:
        return self._f.readline(size)  # type: ignore[no-any-return]


def test_version_2_writes_each_message_and_tool_list_once(tmp_path: Path) -> None:
    tools = [{"name": "ls"}]
    contexts = [(POOL[: n + 1], tools) for n in range(len(POOL))]  # a context that grows
    contexts.append((POOL[3:], tools))  # compacted: the first three dropped
    contexts.append((POOL[:2] + POOL[5:7], tools))  # a branch
    one, two = record_both(tmp_path, contexts)
    same_events(one, two)
    written = [r for r in session.iter_records(two) if r.type in ("message", "tools")]
    assert [r.type for r in written].count("message") == len(POOL) and [r.type for r in written].count(
        "tools"
    ) == 1
    raw = requests(two, resolve=False)
    first = written[0].seq
    assert raw[len(POOL) - 1].data["messages"] == [[first, written[-1].seq]]  # all of them: one range
    seqs = [r.seq for r in written if r.type == "message"]
    assert raw[-2].data["messages"] == [[seqs[3], seqs[-1]]]
    assert raw[-1].data["messages"] == [[seqs[0], seqs[1]], [seqs[5], seqs[6]]]
    assert all(r.data["tools"] == written[1].seq for r in raw) and written[1].type == "tools"
    assert two.stat().st_size < one.stat().st_size


def test_a_request_that_goes_on_from_the_previous_one_refers_to_what_it_did(tmp_path: Path) -> None:
    """The writer carries the latest request's references on while the next one starts with its
    very objects, and starts over from each message when it does not."""
    a, b, c, d, e = POOL[:5]
    contexts: List[Tuple[List[Any], List[Any]]] = [
        ([a, b], []),
        ([a, b, c], []),  # goes on
        ([a, c, d], []),  # a message of the prefix replaced: the same length and more
        ([a, c, d, {"role": "user", "text": "plain"}], []),  # goes on with a value not a Message
        ([a, c, d, {"role": "user", "text": "plain"}, e], []),  # no object to go on from
        ([a, c, d, {"role": "user", "text": "plain"}, e, a], []),
        ([e, a], []),
        ([e, a, b, dataclasses.replace(c)], []),  # goes on, with an equal copy of one written
    ]
    one, two = record_both(tmp_path, contexts)
    same_events(one, two)
    written = session._Written()  # which requests take the carried-on path
    carried = []
    for messages, _ in contexts:
        context, new, places, _ = written.plan(list(messages), JSONCodec())
        carried.append(context.length)
        tools = written.tool_list([])[0]
        for n, place in enumerate(places):
            written.add("message", place if type(place) is bytes else None, 100 + n, 1)
        written.request_text("{}", context, new, places, tools)
    assert carried == [0, 2, 0, 3, 0, 0, 0, 2]  # the prefix of the request before, where it is one
    seq = [r.seq for r in records(two) if r.type == "message"]  # a, b, c, d, the plain one, e
    raw = [r.data["messages"] for r in requests(two, resolve=False)]
    a_, b_, c_, d_, plain, e_ = ([n, n] for n in seq)
    assert raw == [
        [[a_[0], b_[0]]],
        [[a_[0], c_[0]]],
        [a_, [c_[0], d_[0]]],
        [a_, [c_[0], plain[0]]],
        [a_, [c_[0], e_[0]]],
        [a_, [c_[0], e_[0]], a_],
        [e_, a_],
        [e_, [a_[0], c_[0]]],
    ]


class Touchy:
    """A host's message type whose comparison raises (as a numpy array's does)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        raise ValueError("the truth value of a comparison is ambiguous")

    __hash__ = None  # type: ignore[assignment]


def test_a_request_goes_on_only_from_the_messages_it_was_sent(tmp_path: Path) -> None:
    """The writer compares a request with the latest by identity, and keeps its own list of
    what that one sent: a host that changes its one list in place after a call, replaces a
    message by an equal one that encodes otherwise (1.0 for 1), passes a tuple, or holds
    values whose comparison raises, gets every request read back as it sent it."""
    codec = JSONCodec(TypeSpec("test.touchy", Touchy, lambda t: t.text, Touchy))
    one = Message("assistant", [session.tool_call_block("c", "t", {"n": 1})], timestamp=T0)
    as_float = Message("assistant", [session.tool_call_block("c", "t", {"n": 1.0})], timestamp=T0)
    assert one == as_float
    a, b = POOL[:2]
    shared = [a, one]
    sent: List[List[Any]] = []
    path = tmp_path / "s.jsonl"
    with session.create(path, codec) as s, s.begin_run() as run:

        def send(messages: Any) -> None:
            run.record(Event("model_request", execution=MODEL, request=ModelRequest(messages), timestamp=T0))
            sent.append(json.loads(session._dumps([codec.encode(m) for m in messages])))

        send(shared)
        shared[1] = as_float  # in place, after the call
        send(shared)
        shared.append(b)
        send(tuple(shared))
        send([a, Touchy("x"), b])
        send([a, Touchy("y"), b])
        send([a, as_float, b, Touchy("z")])
    got = [r.data["request"]["messages"] for r in requests(path)]
    assert got == sent and '"n":1.0' in path.read_text()


class CountingCodec(session.JSONCodec):
    """The default codec, counting what it encodes."""

    encoded = 0

    def encode(self, value: Any) -> Any:
        CountingCodec.encoded += 1
        return super().encode(value)


def test_a_message_sent_again_is_neither_checked_nor_encoded_again(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    context = [stamped("user", "q")]
    with session.create(path, CountingCodec()) as s, s.begin_run() as run:
        for n in range(5):
            CountingCodec.encoded = 0
            run.record(Event("model_request", execution=MODEL, request=ModelRequest(context)))
            assert CountingCodec.encoded == (1 if n < 2 else 0)  # the new one; then none
            if n == 0:
                context = [*context, stamped("assistant", "a")]  # the same first object, one new
        run.record(Event("model_request", execution=MODEL, request=ModelRequest([stamped("user", "q")])))
        assert CountingCodec.encoded == 1  # an equal copy: encoded to find it, not written again
    assert [r.type for r in records(path)].count("message") == 2


def test_a_message_changed_in_place_reads_as_it_was_first_recorded(tmp_path: Path) -> None:
    """Documented: a Message is recognised by the object itself in the next request."""
    path = tmp_path / "s.jsonl"
    message = stamped("user", "before")
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("model_request", execution=MODEL, request=ModelRequest([message])))
        message.content = [session.text_block("after")]
        run.record(Event("model_request", execution=MODEL, request=ModelRequest([message])))
        changed = dataclasses.replace(message)  # a new object: written as it is now
        run.record(Event("model_request", execution=MODEL, request=ModelRequest([changed])))
    texts = [r.data["request"]["messages"][0]["value"]["content"][0]["text"] for r in requests(path)]
    assert texts == ["before", "before", "after"]


def test_open_continues_a_version_2_file_referring_to_what_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    big = stamped("user", "x" * (2 << 20))  # a line too long to be read whole when opening
    with session.create(path) as s, s.begin_run() as run:
        run.record(
            Event("model_request", execution=MODEL, request=ModelRequest([POOL[0], big, POOL[1]], [{"a": 1}]))
        )
    with session.open(path) as s, s.begin_run() as run:  # new objects, equal content
        again = [
            dataclasses.replace(POOL[0]),
            dataclasses.replace(big),
            dataclasses.replace(POOL[1]),
            POOL[2],
        ]
        run.record(Event("model_request", execution=MODEL, request=ModelRequest(again, [{"a": 1}])))
    rs = records(path)
    assert [r.type for r in rs].count("tools") == 1
    assert [r.type for r in rs].count("message") == 5  # the long one again, and the new one
    last = requests(path)[-1].data["request"]
    assert last["messages"] == [JSONCodec().encode(m) for m in again] and last["tools"] == [{"a": 1}]
    raw = requests(path, resolve=False)[-1].data["messages"]
    assert raw == [[3, 3], [10, 10], [5, 5], [11, 11]]  # where they are; the long one written again


def test_open_continues_a_version_1_file_in_version_1(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path, version=1) as s, s.begin_run() as run:
        run.record(Event("message", turn_index=1))  # no reserved type in version 1
        run.record(Event("model_request", execution=MODEL, request=ModelRequest([POOL[0]])))
    with session.open(path) as s, s.begin_run() as run:
        run.record(Event("model_request", execution=MODEL, request=ModelRequest([POOL[0]])))
    assert [r.type for r in records(path)].count("message") == 1
    assert all(
        "messages" in obj["data"]["request"] for obj in lines_of(path) if obj["type"] == "model_request"
    )
    released = released_module()
    assert [r.data for r in released.iter_records(path)] == [r.data for r in records(path)]


@pytest.mark.parametrize("kind", ["message", "tools"])
def test_version_2_reserves_its_own_record_types(tmp_path: Path, kind: str) -> None:
    with session.create(tmp_path / "s.jsonl") as s, s.begin_run() as run:
        with pytest.raises(ValueError, match="reserved"):
            run.record(Event(kind, turn_index=1))
        run.record(Event("turn_start"))  # nothing sticky


def test_the_released_reader_refuses_a_version_2_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("model_request", execution=MODEL, request=ModelRequest([POOL[0]])))
    released = released_module()
    with pytest.raises(released.UnsupportedVersionError) as info:
        list(released.iter_records(path))
    assert info.value.version == 2 and (info.value.line, info.value.offset) == (1, 0)
    done = subprocess.run(
        [sys.executable, str(RELEASED), "validate", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 1 and "unsupported format version 2" in done.stderr


def test_the_released_reader_reads_what_version_1_writes(tmp_path: Path) -> None:
    one, _ = record_both(tmp_path, contexts_of([("grow", 1), ("call", 0), ("grow", 2), ("tools", 1)]))
    released = released_module()
    assert [(r.type, r.data) for r in released.iter_records(one)] == [(r.type, r.data) for r in records(one)]
    assert one.read_bytes().count(b'"type":"message"') == 0


def a_v2_file(path: Path) -> List[Dict[str, Any]]:
    """A small version-2 file; its lines as objects: 3 message, 4 message, 5 tools, 6 request."""
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("model_request", execution=MODEL, request=ModelRequest(POOL[:2], [{"n": 1}])))
    objs = lines_of(path)
    assert [o["type"] for o in objs] == [
        "session_start",
        "run_start",
        "message",
        "message",
        "tools",
        "model_request",
        "run_close",
    ]
    return objs


NO_REQUEST = "data.messages and data.tools come with data.request, an object"
BAD_REFERENCES = [
    ("ahead", {"messages": [[3, 6]]}, "data.messages: [3, 6] is no range of records before this one"),
    (
        "beyond the file",
        {"messages": [[3, 99]]},
        "data.messages: [3, 99] is no range of records before this one",
    ),
    ("reversed", {"messages": [[4, 3]]}, "data.messages: [4, 3] is no range of records before this one"),
    ("not a message record", {"messages": [[2, 4]]}, "data.messages: record 2 is no message record"),
    ("to the tools", {"messages": [[3, 5]]}, "data.messages: record 5 is no message record"),
    ("no seq", {"messages": [[0, 3]]}, "data.messages: record 0 is no message record"),
    (
        "huge",
        {"messages": [[3, 2**70]]},
        f"data.messages: [3, {2**70}] is no range of records before this one",
    ),
    ("three numbers", {"messages": [[3, 4, 1]]}, "data.messages must be a list of [first, last] seq ranges"),
    ("a boolean", {"messages": [[True, 4]]}, "data.messages must be a list of [first, last] seq ranges"),
    ("a float", {"messages": [[3.0, 4]]}, "data.messages must be a list of [first, last] seq ranges"),
    ("an object", {"messages": {"3": 4}}, "data.messages must be a list of [first, last] seq ranges"),
    ("missing", {"messages": None}, "data.messages must be a list of [first, last] seq ranges"),
    ("tools to a message", {"tools": 3}, "data.tools must be the seq of a tool list record before this one"),
    ("tools ahead", {"tools": 7}, "data.tools must be the seq of a tool list record before this one"),
    (
        "tools a list",
        {"tools": [{"n": 1}]},
        "data.tools must be the seq of a tool list record before this one",
    ),
    ("a request that is no object", {"request": []}, NO_REQUEST),
    ("references without a request", {"request": None}, NO_REQUEST),
    (
        "tools without messages",
        {"messages": None},
        "data.messages must be a list of [first, last] seq ranges",
    ),
]


@pytest.mark.parametrize(("case", "change", "reason"), BAD_REFERENCES, ids=[c[0] for c in BAD_REFERENCES])
@pytest.mark.parametrize("long_line", [False, True])
def test_every_bad_reference_is_a_format_error_naming_its_line(
    tmp_path: Path, case: str, change: Dict[str, Any], reason: str, long_line: bool
) -> None:
    path = tmp_path / "s.jsonl"
    objs = a_v2_file(path)
    data = objs[5]["data"]
    for key, value in change.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    if long_line:  # read without building it where the reader needs no data
        data["padding"] = [0] * session._BIG_LINE
    path.write_bytes(blob_of(objs))
    offset = offsets(path.read_bytes())[5]
    for read in (
        lambda: records(path),
        lambda: list(session.iter_records(path, resolve=False)),
        lambda: session.open(path),
    ):
        with pytest.raises(FormatError) as info:
            read()
        assert (info.value.line, info.value.offset, info.value.reason) == (6, offset, reason), case
    done = run_cli("validate", str(path))
    assert done.returncode == 1 and f"{path}:6: {reason} (offset {offset})" in done.stderr


@pytest.mark.parametrize("kind", ["message", "tools"])
@pytest.mark.parametrize("long_line", [False, True])
def test_a_message_or_tools_record_without_its_value_is_a_format_error(
    tmp_path: Path, kind: str, long_line: bool
) -> None:
    path = tmp_path / "s.jsonl"
    objs = a_v2_file(path)
    line = 3 if kind == "message" else 5
    objs[line - 1]["data"] = {"other": [0] * session._BIG_LINE if long_line else 1}
    path.write_bytes(blob_of(objs))
    with pytest.raises(FormatError, match=f"a {kind} record needs data.{kind}") as info:
        session.summarize(path)
    assert info.value.line == line
    assert run_cli("validate", str(path)).returncode == 1


def test_a_line_changed_after_it_was_read_is_a_format_error_not_a_wrong_message(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    a_v2_file(path)
    blob = path.read_bytes()
    with path.open("rb") as f:
        index = session._Index(f)
        found = list(session._records(f, str(path), 1 << 20, [], None, False, index))
        request = next(r for r in found if r.type == "model_request")
        path.write_bytes(blob.replace(b'"seq":3,"type":"message"', b'"seq":3,"type":"tuning"', 1))
        with pytest.raises(FormatError, match="record 3 changed while it was read"):
            index.resolved(request.data, str(path))


def test_every_truncation_of_a_version_2_file_reads_and_resolves(tmp_path: Path) -> None:
    one, two = record_both(
        tmp_path, contexts_of([("grow", 0), ("call", 0), ("grow", 1), ("tools", 2), ("call", 0), ("grow", 2)])
    )
    blob = two.read_bytes()
    starts = offsets(blob)
    path = tmp_path / "cut.jsonl"
    for size in range(starts[1], len(blob) + 1):
        path.write_bytes(blob[:size])
        got = [r.data for r in requests(path)]  # every reference left resolves
        assert got == [r.data for r in requests(one)][: len(got)]
    with session.open(path) as s, s.begin_run() as run:  # the whole file: continued, referring back
        run.record(
            Event("model_request", execution=MODEL, request=ModelRequest([dataclasses.replace(POOL[0])]))
        )
    assert [r.type for r in records(path)].count("message") == blob.count(b'"type":"message"')


def test_the_redactor_sees_each_message_once_and_cannot_take_the_references(tmp_path: Path) -> None:
    seen: List[Dict[str, Any]] = []

    def redact(data: Dict[str, Any]) -> Dict[str, Any]:
        seen.append(data)
        if "message" in data:
            return {"message": json.loads(json.dumps(data["message"]).replace("secret", "[gone]"))}
        return data

    path = tmp_path / "s.jsonl"
    context = [stamped("user", "my secret"), stamped("assistant", "ok")]
    with session.create(path, redact=redact) as s, s.begin_run() as run:
        run.record(Event("model_request", execution=MODEL, request=ModelRequest(context[:1])))
        run.record(Event("model_request", execution=MODEL, request=ModelRequest(context)))
    assert [sorted(d) for d in seen] == [
        ["message"],
        ["execution", "request"],
        ["message"],
        ["execution", "request"],
    ]
    assert b"secret" not in path.read_bytes()
    assert [len(r.data["request"]["messages"]) for r in requests(path)] == [1, 2]
    bad = tmp_path / "bad.jsonl"
    s = session.create(bad, redact=lambda data: {**data, "messages": []})
    run = s.begin_run()
    with pytest.raises(RecordingError, match=r"redact may not add data\.messages"):
        run.record(Event("model_request", execution=MODEL, request=ModelRequest(context)))
    with pytest.raises(RecordingError):
        s.close()
    assert [r.type for r in records(bad)] == ["session_start", "run_start"]


def test_show_prints_a_request_with_its_messages_in_place(tmp_path: Path) -> None:
    one, two = record_both(
        tmp_path, contexts_of([("grow", 0), ("grow", 1), ("tools", 1), ("call", 0), ("grow", 3)])
    )
    for path in (one, two):
        shown = run_cli("show", str(path), "--type", "model_request", "--execution", "m1")
        [line] = shown.stdout.splitlines()
        obj = json.loads(line)
        assert obj["data"] == requests(one)[1].data and obj["seq"] == requests(path)[1].seq
    as_written = run_cli("show", str(two), "--type", "model_request", "--as-written").stdout.splitlines()
    assert [json.loads(line)["data"]["messages"] for line in as_written][-1] == requests(two, resolve=False)[
        -1
    ].data["messages"]
    piped = subprocess.run(
        [sys.executable, str(MODULE), "show", "-", "--type", "model_request"],
        input=two.read_bytes(),
        capture_output=True,
        timeout=60,
    )
    assert piped.returncode == 0 and [json.loads(line)["data"] for line in piped.stdout.splitlines()] == [
        r.data for r in requests(one)
    ]


class TeeRun:
    """A run that records every call in two runs: one of each version."""

    def __init__(self, runs: List[Any]) -> None:  # runs, or sessions
        self.runs = runs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runs[1], name)

    def __enter__(self) -> TeeRun:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def record(self, event: Event) -> bool:
        return bool([run.record(event) for run in self.runs][1])

    def save_checkpoint(self, snapshot: Any) -> None:
        for run in self.runs:
            run.save_checkpoint(snapshot)

    def close(self) -> None:
        for run in self.runs:
            run.close()


class TeeSession(TeeRun):
    """A session that writes what it is given to a version-1 file beside its version-2 one."""

    def __init__(self, path: Any, opener: Callable[[Path], session.Session]) -> None:
        super().__init__([opener(Path(f"{path}.v1")), opener(Path(path))])

    def begin_run(self) -> TeeRun:
        return TeeRun([s.begin_run() for s in self.runs])


def test_the_example_reads_back_alike_in_both_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sys.path.insert(0, str(HERE / "examples"))
    try:
        import agent_loop
    finally:
        sys.path.remove(str(HERE / "examples"))
    real_create, real_open = session.create, session.open
    created: List[int] = []

    def create(path: Any, **options: Any) -> TeeSession:
        created.append(1)
        return TeeSession(path, lambda p: real_create(p, version=1 if p.suffix == ".v1" else 2))

    monkeypatch.setattr(session, "create", create)
    monkeypatch.setattr(session, "open", lambda path, **options: TeeSession(path, real_open))
    path = tmp_path / "demo.jsonl"
    with contextlib.redirect_stdout(io.StringIO()):
        assert agent_loop.main([str(path)]) == 0
    monkeypatch.undo()
    one, two = Path(f"{path}.v1"), path

    def events(p: Path) -> List[Tuple[str, Dict[str, Any]]]:
        return [
            (r.type, r.data)
            for r in session.iter_records(p)
            if r.type not in ("message", "tools", "session_start")
        ]

    assert created and events(one) == events(two) and len(requests(two)) >= 6
    assert records(one)[0].data == {"version": 1} and records(two)[0].data == {"version": 2}
    assert two.stat().st_size < one.stat().st_size


def test_a_tools_record_holds_an_array(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    objs = a_v2_file(path)
    objs[4]["data"]["tools"] = 5
    path.write_bytes(blob_of(objs))
    with pytest.raises(FormatError, match=r"data\.tools of a tools record must be an array") as info:
        records(path)
    assert info.value.line == 5


def test_a_request_no_bigger_whole_than_a_line_may_be(tmp_path: Path) -> None:
    """A few bytes of references cannot stand for more than a line may hold: the reader
    refuses such a request, and the writer never writes one."""
    path = tmp_path / "s.jsonl"
    objs = a_v2_file(path)
    objs[5]["data"]["messages"] = [[3, 4]] * 40  # 40 times two message lines of ~250 bytes
    path.write_bytes(blob_of(objs))
    assert len(records(path)) == 7  # within the default limit
    with pytest.raises(
        FormatError, match="with the messages and tools it refers to: longer than max_line_bytes"
    ) as info:
        session.read(path, lambda r: None, max_line_bytes=10_000)
    assert info.value.line == 6
    assert run_cli("validate", str(path), "--max-line-bytes", "10000").returncode == 1
    written = tmp_path / "w.jsonl"
    s = session.create(written, max_line_bytes=2_000)
    run = s.begin_run()
    run.record(Event("model_request", execution=MODEL, request=ModelRequest(POOL[:4])))  # 4 short lines
    with pytest.raises(
        RecordingError,
        match="with the messages and tools it refers to in place, is longer than max_line_bytes",
    ):
        run.record(Event("model_request", execution=MODEL, request=ModelRequest(POOL[:4] * 5)))
    with pytest.raises(RecordingError):
        s.close()
    assert [len(r.data["request"]["messages"]) for r in requests(written)] == [4]
    session.read(written, lambda r: None, max_line_bytes=2_000)  # what it wrote, it reads


def test_a_redactor_cannot_make_a_file_the_reader_refuses(tmp_path: Path) -> None:
    def allow(data: Dict[str, Any]) -> Dict[str, Any]:  # written for version 1's keys
        return {key: value for key, value in data.items() if key in session.EventData.__annotations__}

    tools = [{"name": "search"}]
    path = tmp_path / "allow.jsonl"
    s = session.create(path, redact=allow)
    run = s.begin_run()
    with pytest.raises(RecordingError, match=r"redact took data\.tools of a tools record"):
        run.record(Event("model_request", execution=MODEL, request=ModelRequest(POOL[:1], tools)))
    with pytest.raises(RecordingError):
        s.close()
    assert [r.type for r in records(path)] == ["session_start", "run_start"]  # nothing of it written

    def mask(data: Dict[str, Any]) -> Dict[str, Any]:
        return {**data, "request": "[redacted]"} if "request" in data else data

    def add(data: Dict[str, Any]) -> Dict[str, Any]:
        return {**data, "request": {"config": {}}} if "execution" in data else data

    for redact in (mask, add):
        path = tmp_path / f"{redact.__name__}.jsonl"
        with session.create(path, redact=redact) as s, s.begin_run() as run:
            run.record(Event("model_request", execution=MODEL, request=ModelRequest(POOL[:1], tools)))
            run.record(Event("model_request", execution=MODEL))
        session.open(path).close()
        got: List[Any] = [r.data.get("request") for r in requests(path)]
        if redact is mask:
            assert got == ["[redacted]", None]
        else:
            assert got[1] == {"config": {}} and got[0]["tools"] == tools and len(got[0]["messages"]) == 1


def test_a_list_the_host_changes_while_its_request_is_recorded_is_taken_as_it_was(tmp_path: Path) -> None:
    context = [stamped("user", "A"), stamped("user", "B")]

    def redact(data: Dict[str, Any]) -> Dict[str, Any]:
        if "message" in data and len(context) == 2:
            context.insert(0, stamped("user", "C"))  # another thread, say, as the line is made
        return data

    path = tmp_path / "s.jsonl"
    with session.create(path, redact=redact) as s, s.begin_run() as run:
        for _ in range(2):
            run.record(Event("model_request", execution=MODEL, request=ModelRequest(context)))
    texts = [
        [m["value"]["content"][0]["text"] for m in r.data["request"]["messages"]] for r in requests(path)
    ]
    assert texts == [["A", "B"], ["C", "A", "B"]]


@pytest.mark.parametrize("opener", ["gzip", "bz2", "lzma"])
def test_find_in_a_compressed_file_resolves_its_request(tmp_path: Path, opener: str) -> None:
    import importlib

    one, two = record_both(tmp_path, contexts_of([("grow", 0), ("grow", 1), ("call", 0), ("grow", 2)]))
    module = importlib.import_module(opener)
    packed = tmp_path / f"s.jsonl.{opener}"
    packed.write_bytes(module.compress(two.read_bytes()))
    ref = CallRef(records(two)[0].session_id, records(two)[1].run_id or "", "m1", 1)
    with module.open(packed, "rb") as f:
        [request] = [r for r in session.find(f, ref) if r.type == "model_request"]
    assert request.data == requests(one)[1].data


class _Stream(io.RawIOBase):
    """A host's own raw stream over *blob*: it seeks, and has no descriptor."""

    def __init__(self, blob: bytes) -> None:
        self._blob, self._at = blob, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        chunk = self._blob[self._at : self._at + len(buffer)]
        buffer[: len(chunk)] = chunk
        self._at += len(chunk)
        return len(chunk)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._at = offset + (0, self._at, len(self._blob))[whence]
        return self._at


@pytest.mark.parametrize("stream", [io.BytesIO, _Stream])
def test_find_in_a_stream_without_a_descriptor_resolves_its_request(tmp_path: Path, stream: Any) -> None:
    one, two = record_both(tmp_path, contexts_of([("grow", 0), ("grow", 1), ("call", 0), ("grow", 2)]))
    ref = CallRef(records(two)[0].session_id, records(two)[1].run_id or "", "m1", 1)
    with io.BufferedReader(stream(two.read_bytes())) as f:
        [request] = [r for r in session.find(f, ref) if r.type == "model_request"]
    assert request.data == requests(one)[1].data


def test_show_prints_a_version_2_request_as_version_1_writes_it_raw_json_digits_and_all(
    tmp_path: Path,
) -> None:
    tools = [RawJSON('{"name": "f", "weight": 0.10000000000000000001, "big": 1E30, "e": "\\u00e9"}')]
    messages = [POOL[1], {"role": "user", "text": "é \u2028 \x00"}]
    lines = []
    for version in (1, 2):
        path = tmp_path / f"v{version}.jsonl"
        with session.create(path, version=version) as s, s.begin_run() as run:
            request = ModelRequest(messages, tools, CallConfig(max_tokens=5))
            run.record(Event("model_request", execution=MODEL, request=request, timestamp=T0))
        command = [sys.executable, str(MODULE), "show", str(path), "--type", "model_request"]
        shown = subprocess.run(command, capture_output=True, timeout=120, check=True).stdout
        lines.append(shown[shown.index(b',"data":') :])
    assert b'"weight":0.10000000000000000001,"big":1E30,"e":"\\u00e9"' in lines[0]
    assert lines[1] == lines[0]


def test_a_message_as_deep_as_the_reader_takes_opens_and_shows(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    objs = a_v2_file(path)
    depth = session._parse_depth_limit() - 4  # in a message line: three levels more
    objs[2]["data"]["message"] = "DEEP"
    blob = blob_of(objs).replace(b'"DEEP"', b"[" * depth + b"]" * depth)
    path.write_bytes(blob)
    assert run_cli_process("validate", str(path)).returncode == 0

    def deep(levels: int) -> None:
        if levels:
            deep(levels - 1)
        else:
            session.open(path).close()
            assert len(list(session.iter_records(path))) == 7

    deep(sys.getrecursionlimit() // 2)
    assert (
        run_cli_process("show", str(path)).returncode == 0
        and run_cli_process("show", str(path), "--pretty").returncode == 0
    )


FOLLOWED_WRITER = """
import os, sys, time
sys.path.insert(0, sys.argv[2])
import session
with session.create(sys.argv[1]) as s, s.begin_run() as run:
    run.record(session.Event("agent_start"))
    s.sync()
    while not os.path.exists(sys.argv[1] + ".go"):  # the test reads what came so far
        time.sleep(0.05)
    for n in range(3):
        run.record(session.Event("turn_start", turn_index=n))
        time.sleep(0.1)
"""


def assert_follows_while_written(path: Path, meanwhile: Callable[[], None] = lambda: None) -> None:
    """``show --follow`` of *path* prints each record once as another process writes them, and
    ends when the writer closes the session; *meanwhile* runs while the writer holds it."""
    writer = subprocess.Popen([sys.executable, "-c", FOLLOWED_WRITER, str(path), str(HERE)])
    while len(path.read_bytes().splitlines()) < 3 if path.exists() else True:
        time.sleep(0.05)
    follow = subprocess.Popen(
        [sys.executable, str(MODULE), "show", str(path), "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert follow.stdout is not None and follow.stderr is not None
    first = [follow.stdout.readline() for _ in range(3)]  # printed while the writer still writes
    assert writer.poll() is None and first == path.read_bytes().splitlines(keepends=True)[:3]
    meanwhile()
    Path(f"{path}.go").touch()
    rest = follow.stdout.read()
    assert (writer.wait(timeout=60), follow.wait(timeout=60), follow.stderr.read()) == (0, 0, b"")
    assert b"".join(first) + rest == path.read_bytes()  # every record, each once, up to run_close
    follow.stdout.close()
    follow.stderr.close()


def test_show_follow_prints_records_as_another_process_writes_them(tmp_path: Path) -> None:
    assert_follows_while_written(tmp_path / "s.jsonl")


@contextlib.contextmanager
def a_btrfs_subvolume(folder: Path) -> Iterator[Path]:
    """A subvolume of a new btrfs, mounted from an image file in *folder* through a loop device."""
    if shutil.which("mkfs.btrfs") is None or shutil.which("btrfs") is None:
        pytest.skip("needs mkfs.btrfs and btrfs (btrfs-progs)")
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a file system needs root")
    image, mount = folder / "btrfs.img", folder / "mnt"
    image.write_bytes(b"")
    os.truncate(image, 128 << 20)
    mount.mkdir()
    subprocess.run(["mkfs.btrfs", "-q", str(image)], check=True, capture_output=True)
    mounted = subprocess.run(["mount", "-o", "loop", str(image), str(mount)], capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a btrfs image through a loop device here: {mounted.stderr.strip()}")
    try:
        subprocess.run(["btrfs", "subvolume", "create", str(mount / "sub")], check=True, capture_output=True)
        yield mount / "sub"
    finally:
        subprocess.run(["umount", str(mount)], check=True)


if sys.platform != "win32":  # os.major and os.minor are POSIX's

    def test_show_follow_on_btrfs_waits_for_the_writer(tmp_path: Path) -> None:
        """On btrfs, stat() gives the subvolume's device and /proc/locks the file system's: the
        writer's lock was never found there, and --follow ended at once."""
        with a_btrfs_subvolume(tmp_path) as folder:
            path = folder / "s.jsonl"

            def the_lock_shows_another_device() -> None:
                st = path.stat()
                with open("/proc/locks", encoding="ascii") as locks:
                    held = {line.split()[5] for line in locks if line.split()[1:2] == ["FLOCK"]}
                assert any(h.endswith(f":{st.st_ino}") for h in held)
                assert f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}" not in held

            assert_follows_while_written(path, the_lock_shows_another_device)


def test_show_follow_ends_on_ctrl_c_and_at_a_truncated_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    s = session.create(path)
    s.begin_run()
    s.sync()
    for how in ("interrupt", "truncate"):
        follow = subprocess.Popen(
            [sys.executable, str(MODULE), "show", str(path), "--follow"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # as a terminal would start it: a test run launched in the background ignores
            # SIGINT, and the child would inherit that
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        assert follow.stdout is not None and follow.stderr is not None
        assert follow.stdout.readline().startswith(b'{"session_id"')  # then it waits for more
        if how == "interrupt":
            follow.send_signal(signal.SIGINT)
            assert (follow.wait(timeout=60), follow.stderr.read()) == (
                130,
                b"python -m session show: interrupted\n",
            )
        else:
            os.truncate(path, 10)
            assert follow.wait(timeout=60) == 1
            assert (
                b"truncated or replaced while followed (see python -m session repair)" in follow.stderr.read()
            )
        follow.stdout.close()
        follow.stderr.close()
    with contextlib.suppress(session.SessionError):
        s.close()
