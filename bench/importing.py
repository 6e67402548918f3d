"""The import run: ``import_session`` of a large Claude Code transcript, against a ``json.loads``
loop over the same file.

    python3 bench/importing.py              # a 100 MB transcript: a few minutes
    python3 bench/importing.py --mb 10      # a smaller one
    python3 bench/importing.py --codex      # a Codex rollout instead
    python3 bench/importing.py --sidechains 20000

The transcript is written the way Claude Code writes one: per turn a user line (or the tool
result the previous turn asked for, with 2 to 24 KB of output), then the reply one line per
content block (thinking, text, a tool call) sharing ``message.id``, each line carrying the
session's bookkeeping fields, the reply's usage and a ``progress`` line between.  "loads" is
reading the file line by line and ``json.loads`` of each; "import" is
``session_import.import_session`` into a new file (which reads, parses, maps and writes a
version-2 session, synced).  The output is about twice the source's bytes, and encoding a
byte costs more than parsing one: "loads + dumps" adds to the loop the encoding of the
output's lines (each parsed once beforehand, then encoded by the C encoder ``record`` uses),
the least any import of it can cost.  All in CPU seconds (``time.process_time``), in this
process; each ratio is the median of interleaved runs.  "import peak" is the peak resident memory of
a process of its own that imports the transcript (Linux: ``VmHWM`` after ``5`` is written to
``/proc/self/clear_refs``; elsewhere ``ru_maxrss``).  Standard library only.

``--codex`` writes a Codex rollout instead, of the same turns: per turn the reasoning item
and its ``agent_reasoning`` event, a ``shell`` call, a ``token_count`` event and the call's
output (2 to 24 KB), every fifth turn a prompt (item and ``user_message`` event) and a reply
before it; the lines written together (an item and its event) share their millisecond.

``--sidechains N`` times instead the import of a hostile transcript of an older Claude Code:
one reply of *N* ``Task`` calls of one prompt, *N* sidechains in the session's file (lines
with ``isSidechain``) that begin with it, then the *N* results, each call taking its own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import measure  # noqa: E402 - after the path above

import session_import  # noqa: E402

SESSION = "0b1c2d3e-4f50-4617-8899-aabbccddeeff"


def lines(turns: int) -> Iterator[Dict[str, Any]]:
    """A Claude Code transcript of *turns* turns, line by line."""
    base = {"isSidechain": False, "userType": "external", "cwd": "/home/user/project"}
    base.update(sessionId=SESSION, version="2.0.61", gitBranch="main")
    parent = None
    second = 0

    def line(kind: str, uuid: str, **fields: Any) -> Dict[str, Any]:
        nonlocal parent, second
        second += 1
        day, rest = divmod(second, 86400)
        stamp = f"2026-03-{1 + day:02d}T{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}.000Z"
        out = {"parentUuid": parent, **base, "type": kind, **fields, "uuid": uuid, "timestamp": stamp}
        parent = uuid
        return out

    for turn in range(turns):
        if turn == 0 or turn % 5 == 0:
            text = f"Turn {turn}: look at the next part of the project and tell me what it does. " * 3
            yield line("user", f"u{turn}", message={"role": "user", "content": text})
        else:
            output = "\n".join(
                f"{n:6d}  line {n} of a file the tool read, turn {turn}" for n in range(40 + turn % 400)
            )
            result = {
                "tool_use_id": f"toolu_{turn - 1}",
                "type": "tool_result",
                "content": output,
                "is_error": False,
            }
            yield line(
                "user",
                f"r{turn}",
                message={"role": "user", "content": [result]},
                toolUseResult={"stdout": output, "stderr": "", "interrupted": False},
            )
        usage = {
            "input_tokens": 3,
            "cache_creation_input_tokens": 200,
            "cache_read_input_tokens": 1000 * turn,
            "output_tokens": 80,
        }
        blocks = [
            {
                "type": "thinking",
                "thinking": f"I should read part {turn} next. " * 8,
                "signature": "c2ln" * 40,
            },
            {"type": "text", "text": f"Reading part {turn}."},
            {
                "type": "tool_use",
                "id": f"toolu_{turn}",
                "name": "Read",
                "input": {"file_path": f"/home/user/project/src/part{turn}.py"},
            },
        ]
        for index, block in enumerate(blocks):
            message = {
                "id": f"msg_{turn}",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": [block],
                "stop_reason": "tool_use" if index == 2 else None,
                "stop_sequence": None,
                "usage": usage,
            }
            yield line("assistant", f"a{turn}.{index}", message=message, requestId=f"req_{turn}")
        progress = {"type": "bash_progress", "output": "reading"}
        yield {
            **line("progress", f"p{turn}", data=progress, toolUseID=f"toolu_{turn}"),
            "parentUuid": f"a{turn}.2",
        }
        parent = f"a{turn}.2"


def codex_lines(turns: int) -> Iterator[Dict[str, Any]]:
    """A Codex rollout of *turns* turns (a model call and its tool call each), line by line,
    each line stamped with the millisecond it was written in: an item and the event that
    repeats it share theirs (half the lines), the others have one of their own."""
    millisecond = 0

    def batch(*items: Tuple[str, Dict[str, Any]]) -> Iterator[Dict[str, Any]]:
        nonlocal millisecond
        millisecond += 1500
        seconds, rest = divmod(millisecond, 1000)
        clock = f"{seconds // 3600 % 24:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{rest:03d}"
        for kind, payload in items:
            yield {"timestamp": f"2026-03-01T{clock}Z", "type": kind, "payload": payload}

    def message(role: str, kind: str, text: str) -> Dict[str, Any]:
        return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}

    meta = {"id": SESSION, "timestamp": "2026-03-01T00:00:00.000Z", "cwd": "/home/user/project"}
    yield from batch(("session_meta", {**meta, "cli_version": "0.58.0", "originator": "codex_cli_rs"}))
    context = {"cwd": "/home/user/project", "approval_policy": "on-request", "model": "gpt-5-codex"}
    for turn in range(turns):
        total = {"input_tokens": 1000 * turn, "cached_input_tokens": 900 * turn, "output_tokens": 80}
        usage = ("event_msg", {"type": "token_count", "info": {"total_token_usage": total}})
        if turn % 5 == 0 and turn:
            said = f"Part {turn - 1} read."
            agent = {"type": "agent_message", "message": said}
            yield from batch(
                ("response_item", message("assistant", "output_text", said)), ("event_msg", agent)
            )
            yield from batch(usage)
        if turn % 5 == 0:
            text = f"Turn {turn}: look at the next part of the project and tell me what it does. " * 3
            typed = {"type": "user_message", "message": text}
            yield from batch(("turn_context", context))
            yield from batch(("response_item", message("user", "input_text", text)), ("event_msg", typed))
        thought = f"I should read part {turn} next. " * 8
        summary = [{"type": "summary_text", "text": thought}]
        reasoning = {
            "type": "reasoning",
            "summary": summary,
            "content": None,
            "encrypted_content": "c2ln" * 40,
        }
        yield from batch(
            ("response_item", reasoning), ("event_msg", {"type": "agent_reasoning", "text": thought})
        )
        arguments = json.dumps({"command": ["cat", f"src/part{turn}.py"], "workdir": "/home/user/project"})
        call = {"type": "function_call", "name": "shell", "arguments": arguments, "call_id": f"call_{turn}"}
        yield from batch(("response_item", call))
        yield from batch(usage)
        output = "\n".join(
            f"{n:6d}  line {n} of a file the tool read, turn {turn}" for n in range(40 + turn % 400)
        )
        result = {"type": "function_call_output", "call_id": f"call_{turn}", "output": output}
        yield from batch(("response_item", result))


def write(path: Path, megabytes: float, codex: bool) -> int:
    """A transcript (Claude Code's, or with *codex* a Codex rollout) of about *megabytes* at
    *path*; its number of turns (each ends with a ``progress`` line or a tool's output)."""
    turns = 0
    with open(path, "w", encoding="utf-8") as out:
        for line in (codex_lines if codex else lines)(1 << 30):
            out.write(json.dumps(line, separators=(",", ":")) + "\n")
            if line["type"] == "progress" or line.get("payload", {}).get("type") == "function_call_output":
                turns += 1
                if out.tell() >= megabytes * 1e6:
                    break
    return turns


def sidechain_lines(calls: int) -> Iterator[Dict[str, Any]]:
    """A transcript of *calls* ``Task`` calls of one prompt (one reply, a line per call), a
    sidechain each in the session's file, and their results, line by line."""

    def line(kind: str, uuid: str, parent: Any, content: Any, **fields: Any) -> Dict[str, Any]:
        message = {"role": kind, "content": content, **fields.pop("message", {})}
        stamp = "2026-03-01T10:00:00.000Z"
        out = {"parentUuid": parent, "sessionId": SESSION, "type": kind, "message": message}
        return {**out, "uuid": uuid, "timestamp": stamp, **fields}

    reply = {"id": "msg_1", "model": "claude-sonnet-4-5-20250929", "usage": {"input_tokens": 1}}
    yield line("user", "u", None, "Check each part")
    parent = "u"
    for n in range(calls):
        task = {"type": "tool_use", "id": f"toolu_{n}", "name": "Task", "input": {"prompt": "Check"}}
        yield line("assistant", f"a{n}", parent, [task], message=reply)
        parent = f"a{n}"
    for n in range(calls):
        yield line("user", f"s{n}", None, "Check", isSidechain=True)
        answer = {**reply, "id": f"msg_s{n}"}
        yield line("assistant", f"t{n}", f"s{n}", f"Part {n} checked", message=answer, isSidechain=True)
    for n in range(calls):
        result = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "checked"}
        yield line("user", f"r{n}", parent, [result])
        parent = f"r{n}"


def loads(path: Path) -> float:
    start = time.process_time()
    with open(path, "rb") as file:
        for line in file:
            json.loads(line)
    return time.process_time() - start


def dumps(values: Sequence[Any]) -> float:
    encoder = measure.tuned_encoder()
    start = time.process_time()
    for value in values:
        "".join(encoder(value, 0))
    return time.process_time() - start


def imported(path: Path, folder: str) -> float:
    output = Path(folder, "out.jsonl")
    start = time.process_time()
    session_import.import_session(path, output)
    elapsed = time.process_time() - start
    output.unlink()
    return elapsed


def output_values(path: Path, folder: str) -> List[Any]:
    """The records an import of *path* writes, parsed."""
    output = Path(folder, "values.jsonl")
    session_import.import_session(path, output)
    with open(output, "rb") as file:
        values = [json.loads(line) for line in file]
    output.unlink()
    return values


def peak_kb(path: Path, folder: str) -> int:
    output = Path(folder, "peak.jsonl")
    work = "import session_import\nsession_import.import_session(sys.argv[2], sys.argv[3])"
    kb = measure.peak_kb(work, str(path), str(output))
    output.unlink()
    return kb


def sidechains(calls: int, pairs: int) -> int:
    """The import of a transcript of *calls* sidechains (``sidechain_lines``), timed."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, f"{SESSION}.jsonl")
        with open(path, "w", encoding="utf-8") as out:
            out.writelines(json.dumps(line, separators=(",", ":")) + "\n" for line in sidechain_lines(calls))
        base = [loads(path) for _ in range(pairs)]
        runs = [imported(path, folder) for _ in range(pairs)]
        size = os.path.getsize(path)
    print("| transcript | Task calls and sidechains | json.loads loop (CPU) | import (CPU) |")
    print("|---|---|---|---|")
    cells = [
        f"{size / 1e6:.1f} MB",
        f"{calls:,}",
        f"{statistics.median(base):.2f} s",
        f"{statistics.median(runs):.2f} s",
    ]
    print(f"| {' | '.join(cells)} |")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--mb", type=float, default=100)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--codex", action="store_true", help="a Codex rollout instead")
    parser.add_argument("--sidechains", type=int, default=0, metavar="N")
    args = parser.parse_args(argv)
    if args.sidechains:
        return sidechains(args.sidechains, args.pairs)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, f"{SESSION}.jsonl")
        turns = write(path, args.mb, args.codex)
        values = output_values(path, folder)
        base, floor, runs, ratios, over_floor = [], [], [], [], []
        for _ in range(args.pairs):
            base.append(loads(path))
            floor.append(base[-1] + dumps(values))
            runs.append(imported(path, folder))
            ratios.append(runs[-1] / base[-1])
            over_floor.append(runs[-1] / floor[-1])
        del values
        peak = peak_kb(path, folder)
        size = os.path.getsize(path)
    print(
        "| transcript | turns | json.loads loop (CPU) | loads + dumps of the output (CPU) | import (CPU)"
        " | import/loads | import/(loads + dumps) | import peak |"
    )
    print("|---|---|---|---|---|---|---|---|")
    cells = [
        f"{size / 1e6:.0f} MB",
        f"{turns:,}",
        f"{statistics.median(base):.2f} s",
        f"{statistics.median(floor):.2f} s",
        f"{statistics.median(runs):.2f} s",
        f"{statistics.median(ratios):.1f}x",
        f"{statistics.median(over_floor):.1f}x",
        f"{peak / 1024:.0f} MB",
    ]
    print(f"| {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
