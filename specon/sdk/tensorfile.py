"""The safetensors file format, read and written by hand (no pickle, no code on load).

Why hand-written: a checkpoint folder sits on a shared volume, so a checkpoint file is
tenant-controlled input and must never be unpickled (``torch.load(weights_only=True)`` of
torch 1.13, what Debian bookworm ships, is bypassable: CVE-2025-32434). The ``safetensors``
library would do, but the example image is built offline from Debian packages only and
bookworm has no ``python3-safetensors``; and the SDK is the standard library only. The format
is small enough to implement exactly; ``tests/sdk/test_tensorfile.py`` checks this module
against the format's specification and, where it is installed, against the library.

The format (https://github.com/huggingface/safetensors, "Format"):

- 8 bytes: ``N``, the header's length, an unsigned little-endian 64-bit integer;
- ``N`` bytes: the header, a UTF-8 JSON object starting with ``{``, padded at the end with
  spaces: ``{"NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]}, ...}``
  and optionally ``"__metadata__": {"key": "string value", ...}`` (strings only);
- the rest: the byte buffer. Each tensor's data is ``buffer[BEGIN:END]``, little-endian,
  row-major; the tensors cover the buffer exactly, without holes or overlaps.

:func:`loads` refuses (with :class:`TensorFileError`, saying why) a file shorter than its
header says, a header over :data:`MAX_HEADER` bytes, a header that is not such a JSON object
(duplicate keys, floats, NaN or infinities, negative or non-integer numbers, unknown keys),
unknown dtypes, a shape whose element count does not match the offsets, and offsets that
overlap, leave a hole, run past the end or do not reach it."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

#: Bytes per element of each dtype the format names (and this module reads).
DTYPE_SIZES: dict[str, int] = {
    "BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}
#: The largest header read (the library's own limit): a file whose first 8 bytes claim more
#: is refused before anything else is read.
MAX_HEADER = 100_000_000
METADATA = "__metadata__"
_ENTRY_KEYS = frozenset({"dtype", "shape", "data_offsets"})


class TensorFileError(ValueError):
    """Not a well-formed safetensors file: refused, with the reason."""


@dataclass(frozen=True)
class RawTensor:
    """One tensor as stored: its dtype name, shape and little-endian row-major bytes."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes | memoryview

    @property
    def count(self) -> int:
        return math.prod(self.shape)


def _fail(message: str) -> NoReturn:
    raise TensorFileError(message)


def _reject_constant(name: str) -> NoReturn:
    _fail(f"the header holds {name}: only integers are allowed")


def _reject_float(text: str) -> NoReturn:
    _fail(f"the header holds the number {text[:40]}: only integers are allowed")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            _fail(f"the header names {key[:80]!r} twice")
        out[key] = value
    return out


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def dumps(tensors: Mapping[str, RawTensor], metadata: Mapping[str, str] | None = None) -> bytes:
    """A safetensors file of ``tensors`` (in their order) and ``metadata`` (strings)."""
    header: dict[str, Any] = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("metadata keys and values must be strings")
        header[METADATA] = dict(metadata)
    offset = 0
    parts: list[bytes | memoryview] = []
    for name, tensor in tensors.items():
        if not isinstance(name, str) or name == METADATA:
            raise ValueError(f"bad tensor name {name!r}")
        size = DTYPE_SIZES.get(tensor.dtype)
        if size is None:
            raise ValueError(f"tensor {name!r}: unknown dtype {tensor.dtype!r}")
        if not all(_is_count(d) for d in tensor.shape):
            raise ValueError(f"tensor {name!r}: bad shape {tensor.shape!r}")
        length = len(memoryview(tensor.data).cast("B"))
        if length != tensor.count * size:
            raise ValueError(f"tensor {name!r}: {length} bytes for shape {list(tensor.shape)} "
                             f"of {tensor.dtype}")
        header[name] = {"dtype": tensor.dtype, "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + length]}
        parts.append(tensor.data)
        offset += length
    text = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    text += b" " * (-len(text) % 8)  # pad: the buffer starts 8-byte aligned
    return b"".join([struct.pack("<Q", len(text)), text, *parts])


def loads(data: bytes | memoryview, *, max_header: int = MAX_HEADER
          ) -> tuple[dict[str, RawTensor], dict[str, str]]:
    """The tensors (name -> :class:`RawTensor`, their data views into ``data``) and the
    metadata of a safetensors file; :class:`TensorFileError` when it is not a well-formed
    one. Nothing in the file is executed or imported: it is parsed as JSON and bytes."""
    view = memoryview(data).cast("B")
    if len(view) < 8:
        _fail(f"truncated: {len(view)} bytes, not even the 8-byte header length")
    (n,) = struct.unpack("<Q", view[:8])
    if n > max_header:
        _fail(f"the header length is {n} bytes, over the limit of {max_header}")
    if 8 + n > len(view):
        _fail(f"truncated: the header length is {n} bytes but the file has {len(view)}")
    raw = bytes(view[8:8 + n])
    if not raw.startswith(b"{"):
        _fail("the header does not start with '{'")
    raw = raw.rstrip(b" ")
    if not raw.endswith(b"}"):
        _fail("the header is not one JSON object followed by spaces")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique,
                            parse_constant=_reject_constant, parse_float=_reject_float)
    except TensorFileError:
        raise
    except (ValueError, RecursionError) as exc:  # bad JSON or UTF-8, too deep, too long ints
        _fail(f"the header is not valid JSON ({type(exc).__name__}: {str(exc)[:200]})")
    if not isinstance(header, dict):
        _fail("the header is not a JSON object")
    metadata = header.pop(METADATA, {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        _fail(f"{METADATA} is not an object of strings")
    buffer = view[8 + n:]
    spans: list[tuple[int, int, str]] = []
    entries: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name, entry in header.items():
        label = repr(name[:80])
        if not isinstance(entry, dict) or set(entry) != _ENTRY_KEYS:
            _fail(f"tensor {label}: an entry needs exactly dtype, shape and data_offsets")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in DTYPE_SIZES:
            _fail(f"tensor {label}: unknown dtype {str(dtype)[:40]!r}")
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            _fail(f"tensor {label}: the shape is not a list of counts")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(_is_count(o) for o in offsets) or offsets[0] > offsets[1]):
            _fail(f"tensor {label}: data_offsets is not [begin, end] with begin <= end")
        begin, end = offsets
        if math.prod(shape) * DTYPE_SIZES[dtype] != end - begin:
            _fail(f"tensor {label}: shape {shape} of {dtype} does not fill {end - begin} bytes")
        spans.append((begin, end, name))
        entries[name] = (dtype, tuple(shape))
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            what = "overlaps the one before" if begin < at else "leaves a hole before it"
            _fail(f"tensor {name[:80]!r}: data_offsets {[begin, end]} {what}")
        at = end
    if at != len(buffer):
        _fail(f"the tensors cover {at} bytes of a {len(buffer)}-byte buffer"
              + (" (truncated)" if at > len(buffer) else " (trailing bytes)"))
    tensors = {name: RawTensor(dtype, shape, buffer[b:e])
               for (b, e, name) in spans for dtype, shape in [entries[name]]}
    return tensors, dict(metadata)
