"""How long `reinforge train` takes from process start to its first step, phase by phase.

A fast start is a design goal (DESIGN §1.4): with models cached, the quickstart should reach its
first step within a few seconds. `StartupClock` measures from the moment the process started (read
from /proc on Linux, so the Python interpreter and the first imports count too) and names each
phase as it ends; `reinforge train` prints the breakdown in its log when the first step begins, and
the first step's own duration when it ends.
"""

from __future__ import annotations

import os
import time


def seconds_since_process_start() -> float | None:
    """Seconds since this process started (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/stat") as f:
            started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: start time in clock ticks after boot
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


PROCESS_PHASE = "python, config and torch"  # the first phase of `reinforge train`: interpreter, config (its checks load torch)


class StartupClock:
    """Durations of the named phases of a start, the first one counted from process start."""

    def __init__(self, from_process_start: bool = True) -> None:
        now = time.perf_counter()
        since_start = seconds_since_process_start() if from_process_start else None
        self.origin = now - (since_start or 0.0)
        self.last = self.origin
        self.phases: list[tuple[str, float]] = []

    def mark(self, phase: str) -> None:
        """The phase `phase` ends now (it began when the previous one ended)."""
        now = time.perf_counter()
        self.phases.append((phase, now - self.last))
        self.last = now

    def elapsed(self) -> float:
        return time.perf_counter() - self.origin

    def summary(self) -> str:
        parts = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in self.phases)
        return f"first step begins {self.elapsed():.1f}s after {'process ' if self.phases[0][0] == PROCESS_PHASE else ''}start ({parts})"
