"""SpeCon Algorithm 3: categories, the stay rule, migrate-at-most-once, the request trigger."""

from hypothesis import given
from hypothesis import strategies as st

from specon.core.categorize import Category, JobState, categorize, counts

A = 0.1
PC, WC, CC = Category.PROGRESSING, Category.WATCHING, Category.CONVERGED


def test_falling_growth_below_alpha_moves_pc_to_wc_to_cc():
    s = {"j": JobState(PC, last_growth=0.5)}
    r = categorize(s, {"j": 0.05}, A)
    assert r.states["j"].category is WC
    r = categorize(r.states, {"j": 0.04}, A)
    assert r.states["j"].category is CC


def test_non_falling_growth_below_alpha_stays():
    s = {"j": JobState(WC, last_growth=0.02)}
    r = categorize(s, {"j": 0.03}, A)
    assert r.states["j"].category is WC


def test_growth_above_alpha_goes_back_to_pc():
    s = {"j": JobState(CC, last_growth=0.01)}
    r = categorize(s, {"j": 0.5}, A)
    assert r.states["j"].category is PC


def test_converged_job_on_crowded_worker_requests_reallocation():
    s = {
        "old": JobState(CC, last_growth=0.02),
        "a": JobState(PC, last_growth=1.0),
        "b": JobState(WC, last_growth=0.05),
    }
    r = categorize(s, {"old": 0.01, "a": 1.0, "b": 0.5}, A)
    assert r.reallocation_requests == ("old",)


def test_no_request_when_at_most_one_active_job():
    s = {"old": JobState(CC, last_growth=0.02), "a": JobState(PC, last_growth=1.0)}
    r = categorize(s, {"old": 0.01, "a": 1.0}, A)
    assert r.reallocation_requests == ()


def test_becoming_cc_does_not_request_yet():
    s = {"x": JobState(WC, last_growth=0.05), "a": JobState(PC), "b": JobState(PC)}
    r = categorize(s, {"x": 0.01, "a": 1.0, "b": 1.0}, A)
    assert r.states["x"].category is CC and r.reallocation_requests == ()


def test_migrated_job_is_frozen():
    s = {"m": JobState(CC, last_growth=0.01, migrated=True), "a": JobState(PC), "b": JobState(PC)}
    r = categorize(s, {"m": 5.0, "a": 1.0, "b": 1.0}, A)
    assert r.states["m"] == s["m"] and r.reallocation_requests == ()


def test_counts():
    s = {"a": JobState(PC), "b": JobState(WC), "c": JobState(CC), "d": JobState(CC)}
    assert counts(s) == (1, 1, 2)


@given(st.lists(st.lists(st.floats(0, 1, allow_nan=False), min_size=3, max_size=3),
                min_size=1, max_size=30))
def test_a_migrated_job_is_never_requested_again(rounds):
    states = {n: JobState() for n in "abc"}
    requested: set[str] = set()
    for g in rounds:
        r = categorize(states, dict(zip("abc", g, strict=True)), A)
        for name in r.reallocation_requests:
            assert name not in requested
            requested.add(name)
        # the manager marks every requested job migrated (moved or kept)
        states = {
            n: (JobState(s.category, s.last_growth, True) if n in r.reallocation_requests else s)
            for n, s in r.states.items()
        }


def test_no_valid_loss_for_n_intervals_makes_a_progressing_job_watching():
    """A loss that stays NaN or inf gives no growth; after NO_VALID_LOSS_INTERVALS such
    intervals in a row the job is not progressing any more (issue 32)."""
    from specon.defaults import NO_VALID_LOSS_INTERVALS as N

    s = {"nan": JobState(PC, last_growth=0.5), "ok": JobState(PC, last_growth=0.5)}
    for k in range(1, N):
        r = categorize(s, {"nan": None, "ok": 0.5}, A, invalid={"nan": k})
        assert r.states["nan"] == s["nan"]  # not yet: a few bad intervals are no trend
    r = categorize(s, {"nan": None, "ok": 0.5}, A, invalid={"nan": N, "ok": 0})
    assert r.states["nan"] == JobState(WC, last_growth=None)  # its old growth is forgotten
    assert r.states["ok"].category is PC
    # watching and converged jobs stay where they are
    for cat in (WC, CC):
        r2 = categorize({"j": JobState(cat, 0.01)}, {"j": None}, A, invalid={"j": N + 4})
        assert r2.states["j"].category is cat
    # a finite loss again: judged as any job (growth over alpha: progressing)
    r3 = categorize(r.states, {"nan": 0.5}, A, invalid={"nan": 0})
    assert r3.states["nan"].category is PC
    # without the counts (the simulator's jobs never diverge) nothing changes
    assert categorize(s, {"nan": None}, A).states["nan"] == s["nan"]
