"""What ``import session`` costs over ``import json``, in instructions and in milliseconds.

    python3 bench/startup.py                                # this Python, about a minute
    python3 bench/startup.py --python OTHER --python THIRD  # other Pythons as well
    python3 bench/startup.py --against OLD_DIR              # OLD_DIR's session.py beside this one's

Each figure is a whole process, ``python -S -c "import session"`` less ``python -S -c "import
json"``, bytecode cached (apart, so that the project's own cache is left alone).  Instructions
are counted by ``valgrind --tool=cachegrind`` (the same from run to run, within a few
thousand), if it is installed; milliseconds are the median of the differences over interleaved
processes, each round in a turning order.  Standard library only.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent


def command(python: str, module: str) -> List[str]:
    return [python, "-S", "-c", f"import {module}"]


def instructions(python: str, source: Path, module: str, env: Dict[str, str]) -> int:
    """What cachegrind counts of one process importing *module* from *source*."""
    valgrind = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
    done = subprocess.run(
        [*valgrind, *command(python, module)], cwd=source, env=env, capture_output=True, text=True, check=True
    )
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no count from cachegrind: {done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def timed(args: List[str], cwd: Path, env: Dict[str, str]) -> Tuple[float, float]:
    """The wall time and the CPU time (user and system) of one process."""
    start = time.perf_counter()
    if sys.platform == "win32":  # no os.wait4: the wall time only
        subprocess.run(args, cwd=cwd, env=env, check=True)
        cpu = math.nan
    else:
        child = subprocess.Popen(args, cwd=cwd, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = status  # reaped here, by wait4
        if status:
            raise subprocess.CalledProcessError(status, args)
        cpu = usage.ru_utime + usage.ru_stime
    return time.perf_counter() - start, cpu


def milliseconds(python: str, sources: Dict[str, Path], runs: int, env: Dict[str, str]) -> Dict[str, str]:
    """Median over *runs* rounds of each source's ``import session`` less ``import json``,
    in CPU time and in wall time."""
    commands = {"json": (command(python, "json"), ROOT)}
    commands.update({label: (command(python, "session"), source) for label, source in sources.items()})
    times: Dict[str, List[Tuple[float, float]]] = {name: [] for name in commands}
    names = list(commands)
    for i in range(runs):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            times[name].append(timed(*commands[name], env))
    rows = {}
    for label in sources:
        pairs = list(zip(times[label], times["json"]))
        cpu = statistics.median(a[1] - b[1] for a, b in pairs) * 1000
        wall = statistics.median(a[0] - b[0] for a, b in pairs) * 1000
        rows[label] = f"{cpu:.1f} ms of CPU ({wall:.1f} ms wall)"
    return rows


def measure(python: str, sources: Dict[str, Path], runs: int, scratch: str) -> List[str]:
    env = {**os.environ, "PYTHONPYCACHEPREFIX": os.path.join(scratch, "pycache"), "PYTHONHASHSEED": "0"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    asked = [python, "-S", "-c", "import sys; print(sys.version.split()[0])"]
    version = subprocess.run(asked, capture_output=True, text=True, check=True).stdout.strip()
    rows = []
    counts: Dict[str, str] = {}
    for label, source in sources.items():
        subprocess.run(command(python, "session"), cwd=source, env=env, check=True)  # fills the cache
        if shutil.which("valgrind"):
            json_count = instructions(python, source, "json", env)
            over = instructions(python, source, "session", env) - json_count
            counts[label] = f"{over / 1e6:.1f} M instructions, "
    for label, times in milliseconds(python, sources, runs, env).items():
        row = f"Python {version}, {label}: import session: {counts.get(label, '')}{times} over import json"
        rows.append(row)
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--python", action="append", help="a Python to measure with (default: this one)")
    parser.add_argument("--against", type=Path, help="a folder holding another session.py to measure as well")
    parser.add_argument("--runs", type=int, default=40, help="interleaved rounds of processes (default 40)")
    args = parser.parse_args(argv)
    sources = {"this": ROOT}
    if args.against:
        sources[str(args.against)] = args.against.resolve()
    with tempfile.TemporaryDirectory(prefix="startup-") as scratch:
        for python in args.python or [sys.executable]:
            for row in measure(python, sources, args.runs, scratch):
                print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
