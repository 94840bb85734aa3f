"""Fault injection, named as such: run a module with its node's wall clock stepped, which the
campaign cannot do to the real clock (one clock for every process on the machine).

    python steppedclock.py OFFSET_FILE -m MODULE ARGS...

runs ``python -m MODULE ARGS...`` with ``time.time`` and ``time.time_ns`` reading the real wall
clock plus the seconds written in OFFSET_FILE (read every 50 ms; missing or empty: 0). The
monotonic clock is left alone, as a step of the wall clock leaves it. The same fault as
``SteppedClock`` in tests/agent/test_agent_clock.py, for an agent in a process of its own."""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time

_real_time, _real_time_ns = time.time, time.time_ns
_offset = 0.0


def _read(path: str) -> float | None:
    try:
        with open(path) as f:
            text = f.read().strip()
        return float(text) if text else 0.0
    except (OSError, ValueError):
        return None


def _follow(path: str) -> None:
    global _offset
    while True:
        value = _read(path)
        if value is not None:
            _offset = value
        time.sleep(0.05)


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        sys.exit(__doc__)
    path, module = sys.argv[1], sys.argv[3]
    global _offset
    _offset = _read(path) or 0.0
    # Before the module is imported: defaults such as ``clock=time.time`` take the stepped one.
    time.time = lambda: _real_time() + _offset
    time.time_ns = lambda: _real_time_ns() + int(_offset * 1e9)
    threading.Thread(target=_follow, args=(path,), name="steppedclock", daemon=True).start()
    sys.argv = [module, *sys.argv[4:]]
    sys.path[0] = os.getcwd()  # as ``python -m`` does
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
