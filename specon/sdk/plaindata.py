"""Plain data as JSON text, with the types JSON lacks tagged: what a checkpoint keeps beside
its tensors (step, optimizer hyperparameters, RNG states, the job's extra state).

Encoded: None, booleans, integers, floats (NaN and infinities too), strings, bytes, lists,
tuples, sets, dicts with any such hashable keys, and tensors (through the caller's
``tensor`` hook, which stores them elsewhere and returns a name). Anything else is refused
when saving (``TypeError`` naming where it is), so a checkpoint never needs code to load.

A value JSON cannot say is a one-key object whose key starts with ``$``: ``{"$tuple": [...]}``,
``{"$set": [...]}``, ``{"$bytes": "<base64>"}``, ``{"$float": "nan" | "inf" | "-inf"}``,
``{"$dict": [[key, value], ...]}`` (non-string keys, or a dict that would look like a tag)
and ``{"$tensor": "<name>"}``. Decoding is a JSON parse and a walk: no class is looked up."""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable
from typing import Any, NoReturn

#: Containers nest at most this deep (a state dict is 3 or 4 deep): a clear error, in both
#: directions, long before Python's recursion limit.
MAX_DEPTH = 100


class PlainDataError(ValueError):
    """Text that is not plain data as :func:`encode` writes it."""


def encode(obj: Any, tensor: Callable[[Any], str | None] = lambda _: None) -> str:
    """``obj`` as JSON text; ``tensor(value)`` names a value it has stored (None: not a
    tensor)."""

    def walk(value: Any, where: str, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise TypeError(f"state{where[:200]}: containers nest deeper than {MAX_DEPTH}")
        if value is None:
            return None
        if isinstance(value, bool):
            return bool(value)
        if isinstance(value, str):
            return str(value)
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            value = float(value)
            if math.isfinite(value):
                return value
            return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
        if isinstance(value, (bytes, bytearray)):
            return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
        if isinstance(value, list):
            return [walk(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
        if isinstance(value, tuple):
            items = [walk(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
            return {"$tuple": items}
        if isinstance(value, (set, frozenset)):
            return {"$set": [walk(v, f"{where}{{}}", depth + 1) for v in value]}
        if isinstance(value, dict):
            keys_plain = all(type(k) is str for k in value) and not (
                len(value) == 1 and next(iter(value)).startswith("$"))
            if keys_plain:
                return {k: walk(v, f"{where}[{k!r}]", depth + 1) for k, v in value.items()}
            return {"$dict": [[walk(k, f"{where} key", depth + 1),
                               walk(v, f"{where}[{k!r}]", depth + 1)] for k, v in value.items()]}
        name = tensor(value)
        if name is not None:
            return {"$tensor": name}
        raise TypeError(f"state{where} is a {type(value).__module__}.{type(value).__qualname__}: "
                        "a checkpoint holds tensors and plain data only (None, bool, int, "
                        "float, str, bytes, list, tuple, set, dict)")

    return json.dumps(walk(obj, ""), separators=(",", ":"), allow_nan=False)


def _fail(message: str) -> NoReturn:
    raise PlainDataError(message)


def _no_constant(name: str) -> NoReturn:
    _fail(f"bare {name} (non-finite floats are tagged)")


def decode(text: str, tensors: Callable[[str], Any] = lambda name: _fail(f"no tensor {name!r}")
           ) -> Any:
    """The value :func:`encode` wrote; ``tensors(name)`` gives the tensor stored as ``name``."""
    try:
        tree = json.loads(text, parse_constant=_no_constant)
    except PlainDataError:
        raise
    except (ValueError, RecursionError) as exc:
        _fail(f"not JSON ({type(exc).__name__}: {str(exc)[:200]})")

    def walk(value: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            _fail(f"containers nest deeper than {MAX_DEPTH}")
        if isinstance(value, list):
            return [walk(v, depth + 1) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            tag, body = next(iter(value.items()))
            if tag.startswith("$"):
                return tagged(tag, body, depth + 1)
        return {k: walk(v, depth + 1) for k, v in value.items()}

    def tagged(tag: str, body: Any, depth: int) -> Any:
        if tag == "$tuple" and isinstance(body, list):
            return tuple(walk(v, depth) for v in body)
        if tag == "$set" and isinstance(body, list):
            return {walk(v, depth) for v in body}
        if tag == "$dict" and isinstance(body, list):
            if not all(isinstance(p, list) and len(p) == 2 for p in body):
                _fail("$dict holds something other than [key, value] pairs")
            return {walk(k, depth): walk(v, depth) for k, v in body}
        if tag == "$bytes" and isinstance(body, str):
            try:
                return base64.b64decode(body, validate=True)
            except binascii.Error as exc:
                _fail(f"$bytes is not base64 ({exc})")
        if tag == "$float" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag == "$tensor" and isinstance(body, str):
            return tensors(body)
        _fail(f"unknown or malformed tag {tag[:40]!r}")

    try:
        return walk(tree)
    except TypeError as exc:  # an unhashable key or set member (a list)
        _fail(f"not plain data ({exc})")
    except RecursionError:
        _fail("nested too deeply")
