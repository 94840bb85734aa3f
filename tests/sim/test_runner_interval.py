"""The 95% interval of `Stat.of` uses the exact Student t quantile at every sample size (issue
31: the old table jumped to 1.96 at 31+ degrees of freedom, 4% narrow at n = 31)."""

import math
import statistics

import pytest
from scipy.stats import t as student_t

from specon.sim.runner import Stat, t95

#: Two-sided 95% critical values from a printed t-table (3 decimals), by degrees of freedom.
TABLE = {1: 12.706, 4: 2.776, 30: 2.042, 31: 2.040, 39: 2.023, 120: 1.980}


@pytest.mark.parametrize("df, value", sorted(TABLE.items()))
def test_t95_matches_the_printed_table(df: int, value: float) -> None:
    assert t95(df) == pytest.approx(value, abs=5e-4)


def test_t95_refuses_no_degrees_of_freedom() -> None:
    with pytest.raises(ValueError, match="degrees of freedom"):
        t95(0)


@pytest.mark.parametrize("n", [2, 5, 31, 40])
def test_half_width_is_exact_t_times_standard_error(n: int) -> None:
    values = [float((7 * i) % 11) + 0.25 * i for i in range(n)]
    s = statistics.stdev(values)
    stat = Stat.of(values)
    expected = float(student_t.ppf(0.975, n - 1)) * s / math.sqrt(n)
    assert stat.n == n
    assert stat.mean == pytest.approx(statistics.fmean(values))
    assert stat.ci95 == pytest.approx(expected, rel=1e-12)
    # and against the printed table, to its 3 decimals
    assert stat.ci95 == pytest.approx(TABLE[n - 1] * s / math.sqrt(n), rel=3e-4)


def test_wider_than_the_normal_beyond_thirty() -> None:
    values = [float(i % 5) for i in range(31)]
    z = 1.96 * statistics.stdev(values) / math.sqrt(31)
    assert Stat.of(values).ci95 > z * 1.03


def test_one_or_no_finite_values() -> None:
    assert Stat.of([3.0]) == Stat(3.0, 0.0, 1)
    assert Stat.of([math.nan]).n == 0
