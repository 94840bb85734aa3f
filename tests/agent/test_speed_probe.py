"""The agent's probe of its node's per-core speed (specon_agent.speed_probe): float32 matrix
products per CPU-second of the probing thread, relative to REFERENCE_FLOPS, the best of a few
rounds, clamped to the label's bounds; a broken BLAS leaves the speed unknown, never stops the
agent."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from specon.cpu_speed import MAX_SPEED, MIN_SPEED
from specon_agent.speed_probe import (
    FLOPS_PER_CALL,
    KEEP,
    REFERENCE_FLOPS,
    SpeedProbe,
    measure_cpu_speed,
)


class TickClock:
    """A CPU clock that advances ``tick`` seconds at each reading: one reading per product."""

    def __init__(self, tick: float) -> None:
        self.tick, self.now = tick, 0.0

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def test_the_speed_is_flops_per_cpu_second_against_the_reference() -> None:
    # each product reads the clock once: 1 ms CPU-second rounds of 10 us products
    speed = measure_cpu_speed(rounds=2, round_s=1e-3, cpu_clock=TickClock(1e-5))
    assert speed == pytest.approx(FLOPS_PER_CALL / 1e-5 / REFERENCE_FLOPS, rel=0.02)


@pytest.mark.parametrize(("tick", "bound"), [(1e-15, MAX_SPEED), (0.5, MIN_SPEED)])
def test_a_speed_out_of_the_labels_bounds_is_clamped(tick: float, bound: float) -> None:
    assert measure_cpu_speed(rounds=1, round_s=1e-12 if tick < 0.1 else 0.6,
                             cpu_clock=TickClock(tick)) == bound


def test_a_round_without_one_product_done_measures_nothing() -> None:
    assert measure_cpu_speed(rounds=2, round_s=1.0, cpu_clock=TickClock(10.0)) is None


def test_this_machine_measures_a_sane_and_repeatable_speed() -> None:
    """The real probe on this machine's CPU time: within the bounds, and two probes agree
    (CPU time of the probing thread: another process's load does not slow it by half)."""
    first, second = measure_cpu_speed(), measure_cpu_speed(cpu_clock=time.thread_time)
    assert first is not None and second is not None
    assert MIN_SPEED <= first <= MAX_SPEED
    assert 0.5 < first / second < 2.0


def test_a_broken_blas_leaves_the_speed_unknown(monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    def broken(*_: object, **__: object) -> None:  # a fault no real BLAS shows on demand
        raise RuntimeError("illegal instruction in the BLAS kernel")

    monkeypatch.setattr(np, "matmul", broken)
    assert measure_cpu_speed() is None
    assert "CPU speed probe failed" in caplog.text


def test_the_agent_reports_the_best_of_its_last_probes_and_probes_again() -> None:
    """One probe disturbed throughout (low) is outvoted by the next; an old best leaves the
    window after KEEP probes; a failed probe keeps the best so far."""
    answers = iter([0.6, 1.0, None, *[0.9] * KEEP])
    probe = SpeedProbe(lambda: next(answers))
    assert [probe.probe() for _ in range(3)] == [0.6, 1.0, 1.0]
    assert [probe.probe() for _ in range(KEEP)][-1] == 0.9  # 1.0 was KEEP probes ago
    stop, reported = threading.Event(), []
    again = SpeedProbe(lambda: 2.0)

    def report(speed: float | None) -> None:
        reported.append(speed)
        if len(reported) == 3:
            stop.set()

    again.run(stop, report, every_s=0.001)
    assert reported == [2.0, 2.0, 2.0]
