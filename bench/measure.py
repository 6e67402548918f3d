"""What every benchmark here measures with: interleaved ratios, goals, wall time.

Standard library only; ``bench/run.py`` and ``bench/growth.py`` import it from beside them.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable


def median_ratio(runs: int, subject: Callable[[], float], baseline: Callable[[], float]) -> float:
    """Median over *runs* interleaved pairs (subject first, then baseline first, ...) of
    subject time / baseline time: a noisy machine slows both of a pair alike."""
    ratios = []
    for i in range(runs):
        if i % 2:
            b, s = baseline(), subject()
        else:
            s, b = subject(), baseline()
        ratios.append(s / b)
    return statistics.median(ratios)


def goal(value: float, bound: float, unit: str = "x", at_least: bool = False) -> str:
    """The goal *value* is held to, and whether this run met it."""
    met = value >= bound if at_least else value <= bound
    return f" [goal {'>=' if at_least else '<='} {bound:g}{unit}: {'met' if met else 'NOT met'}]"


def timed(work: Callable[[], Any]) -> float:
    """Seconds *work* takes, by the wall clock."""
    start = time.perf_counter()
    work()
    return time.perf_counter() - start
