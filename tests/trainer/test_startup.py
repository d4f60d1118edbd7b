"""The startup clock behind the 'first step begins ...' line of `reinforge train`."""

import time

from reinforge.trainer.startup import PROCESS_PHASE, StartupClock, seconds_since_process_start

IMPORTED_AT = time.perf_counter()  # this process started before this module was imported


def test_phases_are_the_time_between_marks():
    clock = StartupClock(from_process_start=False)
    time.sleep(0.05)
    clock.mark("data")
    time.sleep(0.02)
    clock.mark("models")
    (first, a), (second, b) = clock.phases
    assert (first, second) == ("data", "models") and 0.05 <= a < 0.5 and 0.02 <= b < 0.5
    assert abs(clock.elapsed() - (a + b)) < 0.05
    assert clock.summary().startswith(f"first step begins {a + b:.1f}s after start (data {a:.1f}s, models {b:.1f}s)")


def test_the_first_phase_counts_from_process_start():
    since_start = seconds_since_process_start()
    assert since_start is not None and since_start >= time.perf_counter() - IMPORTED_AT
    clock = StartupClock()
    clock.mark(PROCESS_PHASE)
    assert clock.phases[0][1] >= time.perf_counter() - IMPORTED_AT - 0.02  # /proc's clock ticks are 10 ms
    assert "after process start (python, config and torch" in clock.summary()
