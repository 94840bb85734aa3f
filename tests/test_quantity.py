"""Kubernetes CPU quantities (issue 31): `specon.quantity` follows the API server's grammar; on
every quantity of that grammar it agrees with `kubernetes.utils.parse_quantity` (the agent's
dependency, not the manager's: hence the parser is written here), and on anything else it
raises ValueError, never another exception."""

import math
from decimal import Decimal

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as kube_parse_quantity

from specon.quantity import millicores, parse_cpu, parse_quantity

DIGITS = st.text("0123456789", min_size=1, max_size=12)
NUMBER = st.one_of(
    DIGITS,
    st.builds(lambda a, b: f"{a}.{b}", DIGITS, DIGITS),
    st.builds(lambda a: f"{a}.", DIGITS),
    st.builds(lambda b: f".{b}", DIGITS),
)
SIGN = st.sampled_from(["", "+", "-"])
SUFFIX = st.one_of(
    st.sampled_from(["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]),
    st.sampled_from(["n", "u", "m", "", "k", "M", "G", "T", "P", "E"]),
    st.builds(lambda e, s, d: f"{e}{s}{d}", st.sampled_from("eE"), SIGN,
              st.integers(0, 30).map(str)),
)
QUANTITY = st.builds(lambda s, n, x: s + n + x, SIGN, NUMBER, SUFFIX)


@given(QUANTITY)
@example("1k")
@example("100u")
@example("2500000n")
@example("1e3")
@example("0.5")
@example("500m")
@example("1Ki")
@example("1E")
@example("1E3")
@example("-.5Mi")
def test_every_grammatical_quantity_agrees_with_the_kubernetes_client(text: str) -> None:
    ours = parse_quantity(text)
    theirs = kube_parse_quantity(text)
    assert float(ours) == pytest.approx(float(theirs), rel=1e-12, abs=0.0)
    assert parse_cpu(text) == pytest.approx(float(theirs), rel=1e-12, abs=0.0)


@pytest.mark.parametrize("text, cores", [
    ("1k", 1000.0), ("100u", 1e-4), ("2500000n", 0.0025), ("1e3", 1000.0), ("0.5", 0.5),
    ("500m", 0.5), ("1Ki", 1024.0), ("1.5Mi", 1.5 * 2**20), ("1E", 1e18), ("1E-2", 0.01),
    (".5", 0.5), ("2.", 2.0), ("+1500m", 1.5), (" 2 ", 2.0), (2, 2.0), (0.25, 0.25),
])
def test_valid_quantities(text: str | int | float, cores: float) -> None:
    assert parse_cpu(text) == pytest.approx(cores, rel=1e-15)


def test_binary_suffixes_are_exact() -> None:
    assert parse_quantity("3Ei") == Decimal(3 * 2**60)
    assert parse_quantity("1.25Ki") == Decimal(1280)


#: Malformed, including what the Kubernetes client accepts but the API server refuses (a capital
#: K, NaN, underscores, an exponent with a suffix after it).
MALFORMED = ["", " ", "m", "Ki", "1K", "1ki", "1mi", "1e3k", "NaN", "nan", "inf", "-Infinity",
             "1_000", "1.5.", ".", "+", "-", "1 m", "1e", "1e1.5", "1e+", "１", "0x10", "1,5",
             "1m1", "e3", "++1", "1e999", "1e400"]


@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_quantities_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"Kubernetes quantity|out of range"):
        parse_cpu(text)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, True, None, object()])
def test_non_quantities_are_refused(value: object) -> None:
    with pytest.raises(ValueError):
        parse_cpu(value)  # type: ignore[arg-type]


@given(st.one_of(st.text(max_size=20), st.text("0123456789.+-eEnumkMGTPiK ", max_size=12)))
def test_anything_else_is_a_value_error_or_agrees(text: str) -> None:
    try:
        ours = parse_quantity(text)
    except ValueError:
        return  # the only exception it may raise
    # whatever it accepts is grammatical, so the client takes it too, with the same value
    assert float(ours) == pytest.approx(float(kube_parse_quantity(text.strip())), rel=1e-12)


@given(st.floats(min_value=0.001, max_value=1e6))
def test_millicores_round_trips(cores: float) -> None:
    assert parse_cpu(millicores(cores)) == pytest.approx(cores, abs=5e-4)
