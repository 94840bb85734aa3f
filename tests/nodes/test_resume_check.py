"""The real-node e2e's check that a migrated job's loss curve continued rather than started over
(nodehelp.resumed_not_restarted), on curves the e2e has produced and on a restart."""

from __future__ import annotations

from nodehelp import resumed_not_restarted

#: The warm run of f84ac1b (2026-11-28): the move came at step 20 of the example's steep start,
#: and the window check of that day refused a curve that had continued.
EARLY_MOVE = [(10, 2.4457), (20, 2.1762), (30, 1.2925), (40, 0.7323), (50, 0.3210)]
#: A move late in training: the loss flat and noisy around the stop.
LATE_MOVE = [(10, 2.45), (20, 2.1), (30, 1.3), (40, 0.7), (50, 0.35), (60, 0.31), (70, 0.36),
             (80, 0.30), (90, 0.33), (100, 0.31), (110, 0.30), (120, 0.29)]


def test_a_curve_that_went_on_falling_after_an_early_move_continued() -> None:
    assert resumed_not_restarted(EARLY_MOVE, 20) is None


def test_a_noisy_flat_curve_after_a_late_move_continued() -> None:
    assert resumed_not_restarted(LATE_MOVE, 100) is None


def test_the_untrained_loss_again_after_the_restore_is_a_restart() -> None:
    # the deterministic example started over repeats its first losses
    restarted_early = [*EARLY_MOVE[:2], (30, 2.4457), (40, 2.1762)]
    restarted_late = [*LATE_MOVE[:10], (110, 2.45), (120, 2.1)]
    assert "nearer the run's first loss" in (resumed_not_restarted(restarted_early, 20) or "")
    assert "above the losses before the stop" in (resumed_not_restarted(restarted_late, 100)
                                                   or "")
    # a move while the window still spans the steep part: its spread allows much, the
    # distance from the first loss still tells
    restarted_mid = [*LATE_MOVE[:7], (80, 2.45), (90, 2.1)]
    assert "nearer the run's first loss" in (resumed_not_restarted(restarted_mid, 70) or "")


def test_a_curve_with_nothing_after_the_stop_is_refused() -> None:
    assert "both sides" in (resumed_not_restarted(EARLY_MOVE[:2], 20) or "")
