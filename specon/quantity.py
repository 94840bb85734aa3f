"""Kubernetes CPU quantities, read and written the same way by the agent's resize actuator and
the manager (which copies a pod's spec for a migration).

The parser is written here rather than taken from ``kubernetes.utils.parse_quantity``: the
manager reads quantities too and does not depend on the ``kubernetes`` package (the agent alone
does), and that function is laxer than the API server's grammar (it takes ``1K``, ``NaN``,
``1_000`` and ``1e3k``, all of which the API server refuses). This one follows the grammar of
``k8s.io/apimachinery/pkg/api/resource`` (quantity.go)::

    <quantity>        ::= <signedNumber><suffix>
    <signedNumber>    ::= <number> | <sign><number>
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <signedInteger> | "E" <signedInteger>

(the exponent's number is an integer, as quantity.go's suffix parser reads it). Surrounding
white space is tolerated, as before.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, localcontext

_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<binary>[KMGTPE])i|[eE](?P<exponent>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE]))?",
    re.ASCII,
)
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"K": 10, "M": 20, "G": 30, "T": 40, "P": 50, "E": 60}
#: Decimal exponents beyond this are refused before any arithmetic (a float holds no more than
#: about 1e308; a CPU count anywhere near it is nonsense anyway).
_MAX_EXPONENT = 400
_GRAMMAR = ("a signed decimal number followed by a binary suffix (Ki Mi Gi Ti Pi Ei), a "
            "decimal suffix (n u m k M G T P E, or none) or an exponent (e3, E-2)")


def parse_quantity(quantity: str) -> Decimal:
    """The exact value of a Kubernetes quantity ("1500m", "2", "1Ki", "1e3"); ValueError when
    ``quantity`` does not follow the grammar."""
    text = quantity.strip() if isinstance(quantity, str) else None
    match = _QUANTITY.fullmatch(text) if text is not None else None
    if match is None:
        raise ValueError(f"{quantity!r} is not a Kubernetes quantity: expected {_GRAMMAR}")
    number = Decimal(match["number"])
    if match["binary"]:
        factor = Decimal(2) ** _BINARY_SI[match["binary"]]
        with localcontext() as ctx:
            ctx.prec = len(number.as_tuple().digits) + 20  # exact: 2**60 has 19 digits
            return number * factor
    if match["exponent"]:
        digits = match["exponent"].lstrip("+-").lstrip("0")
        if len(digits) > len(str(_MAX_EXPONENT)) or int(digits or "0") > _MAX_EXPONENT:
            raise ValueError(f"{quantity!r}: the exponent is out of range (at most "
                             f"{_MAX_EXPONENT} either way)")
        return _scaled(number, int(match["exponent"]))
    if match["decimal"]:
        return _scaled(number, _DECIMAL_SI[match["decimal"]])
    return number


def _scaled(number: Decimal, power: int) -> Decimal:
    """``number`` × 10**``power``, exactly (the digits kept, the exponent moved)."""
    sign, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # the grammar has no NaN or infinity
    return Decimal((sign, digits, exponent + power))


def parse_cpu(quantity: str | int | float) -> float:
    """Cores from a Kubernetes CPU quantity ("1500m", "2", "0.5", "1k", "100u", "1Ki", "1e3")
    or a finite number; ValueError when it is neither."""
    if isinstance(quantity, bool):
        raise ValueError(f"{quantity!r} is not a Kubernetes quantity")
    if isinstance(quantity, int | float):
        cores = float(quantity)
    else:
        cores = float(parse_quantity(quantity if isinstance(quantity, str) else str(quantity)))
    if not math.isfinite(cores):
        raise ValueError(f"{quantity!r} is out of range for a CPU quantity")
    return cores


def millicores(cores: float) -> str:
    """The quantity for ``cores``, in millicores (at least 1m)."""
    return f"{max(1, round(cores * 1000))}m"
