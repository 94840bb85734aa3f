"""The hand-written safetensors reader and writer (specon/sdk/tensorfile.py) against the
format's specification, against the `safetensors` library where it is installed, and the
plain-data codec beside it (specon/sdk/plaindata.py)."""

from __future__ import annotations

import json
import math
import struct

import pytest

from specon.sdk import plaindata, tensorfile
from specon.sdk.tensorfile import RawTensor, TensorFileError


def _file(header: dict | bytes, buffer: bytes = b"", length: int | None = None) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + buffer


def test_layout_is_the_specified_one() -> None:
    data = tensorfile.dumps(
        {"w": RawTensor("F32", (2,), struct.pack("<2f", 1.0, 2.0)),
         "s": RawTensor("I64", (), struct.pack("<q", -3))},
        {"k": "v"})
    (n,) = struct.unpack("<Q", data[:8])
    header = data[8:8 + n]
    assert header.startswith(b"{") and n % 8 == 0
    assert json.loads(header) == {
        "__metadata__": {"k": "v"},
        "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "s": {"dtype": "I64", "shape": [], "data_offsets": [8, 16]},
    }
    assert data[8 + n:] == struct.pack("<2fq", 1.0, 2.0, -3)
    tensors, metadata = tensorfile.loads(data)
    assert metadata == {"k": "v"}
    assert [(k, t.dtype, t.shape, bytes(t.data)) for k, t in tensors.items()] == [
        ("w", "F32", (2,), struct.pack("<2f", 1.0, 2.0)), ("s", "I64", (), struct.pack("<q", -3))]


def test_empty_tensors_and_no_tensors_are_valid() -> None:
    tensors, metadata = tensorfile.loads(tensorfile.dumps({"e": RawTensor("F16", (0, 4), b"")}))
    assert tensors["e"].shape == (0, 4) and bytes(tensors["e"].data) == b"" and metadata == {}
    assert tensorfile.loads(_file({})) == ({}, {})
    assert tensorfile.loads(_file(b"{}      ")) == ({}, {})  # padded with spaces


@pytest.mark.parametrize(("data", "why"), [
    (b"", "truncated"),
    (b"\x08\x00\x00", "truncated"),
    (_file({}, length=2**63), "over the limit"),
    (_file({}, length=tensorfile.MAX_HEADER + 1), "over the limit"),
    (_file({}, length=1000), "truncated"),
    (_file(b" {}"), "start with"),
    (_file(b"[1, 2]"), "start with"),
    (_file(b"{}\n"), "followed by spaces"),
    (_file(b"{} {}"), "not valid JSON"),
    (_file(b'{"a": 1'), "followed by spaces"),
    (_file(b"{\xff}"), "not valid JSON"),
    (_file(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
           b'"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4), "twice"),
    (_file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 3),
     "truncated"),
    (_file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 5),
     "trailing bytes"),
    (_file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8), "hole"),
    (_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
     "overlaps"),
    (_file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}, b"\0" * 4),
     "begin <= end"),
    (_file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}}, b"\0" * 4),
     "begin <= end"),
    (_file({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 4]}}, b"\0" * 4),
     "does not fill"),
    (_file({"a": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 4]}},
           b"\0" * 4), "does not fill"),
    (_file({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4),
     "shape"),
    (_file({"a": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, b"\0" * 4),
     "shape"),
    (_file({"a": {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}}, b"\0" * 4), "shape"),
    (_file({"a": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8),
     "unknown dtype"),
    (_file({"a": {"dtype": "O", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8),
     "unknown dtype"),
    (_file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}}, b"\0" * 4),
     "exactly"),
    (_file({"a": [1, 2]}), "exactly"),
    (_file(b'{"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}', b"\0" * 4),
     "only integers"),
    (_file(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4e0]}}', b"\0" * 4),
     "only integers"),
    (_file(b'{"a":{"dtype":"F32","shape":[NaN],"data_offsets":[0,4]}}', b"\0" * 4),
     "only integers"),
    (_file(b'{"a":{"dtype":"F32","shape":[Infinity],"data_offsets":[0,4]}}', b"\0" * 4),
     "only integers"),
    (_file(b'{"a":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}}', b"\0" * 4),
     "only integers"),
    (_file({"__metadata__": {"k": 1}}), "strings"),
    (_file({"__metadata__": ["k"]}), "strings"),
    (_file(b"{" + b'"a":' * 0 + b"[" * 100_000 + b"]" * 100_000 + b"}"), "not valid JSON"),
    (_file(b'{"a":{"dtype":"F32","shape":[' + b"9" * 5000 + b'],"data_offsets":[0,4]}}'),
     "not valid JSON"),
])
def test_malformed_files_are_refused(data: bytes, why: str) -> None:
    with pytest.raises(TensorFileError, match=why):
        tensorfile.loads(data)


def test_the_writer_refuses_what_it_could_not_read_back() -> None:
    with pytest.raises(ValueError, match="unknown dtype"):
        tensorfile.dumps({"a": RawTensor("C64", (1,), b"\0" * 8)})
    with pytest.raises(ValueError, match="bytes for shape"):
        tensorfile.dumps({"a": RawTensor("F32", (2,), b"\0" * 4)})
    with pytest.raises(ValueError, match="bad tensor name"):
        tensorfile.dumps({"__metadata__": RawTensor("F32", (1,), b"\0" * 4)})
    with pytest.raises(TypeError, match="strings"):
        tensorfile.dumps({}, {"k": 1})  # type: ignore[dict-item]


def test_agrees_with_the_safetensors_library() -> None:
    safetensors = pytest.importorskip("safetensors")
    numpy = pytest.importorskip("numpy")
    snp = pytest.importorskip("safetensors.numpy")
    arrays = {
        "f32": numpy.arange(6, dtype=numpy.float32).reshape(2, 3),
        "f64": numpy.array(math.pi),
        "f16": numpy.array([1.5, -2.0], dtype=numpy.float16),
        "i8": numpy.array([-1, 2], dtype=numpy.int8),
        "u8": numpy.array([255, 0, 7], dtype=numpy.uint8),
        "i64": numpy.array([[2**40]], dtype=numpy.int64),
        "bool": numpy.array([True, False]),
        "empty": numpy.zeros((0, 3), dtype=numpy.int32),
    }
    kinds = {"float32": "F32", "float64": "F64", "float16": "F16", "int8": "I8",
             "uint8": "U8", "int64": "I64", "bool": "BOOL", "int32": "I32"}
    # theirs -> ours
    theirs = snp.save(arrays, metadata={"format": "x", "state": "{}"})
    tensors, metadata = tensorfile.loads(theirs)
    assert metadata == {"format": "x", "state": "{}"}
    assert set(tensors) == set(arrays)
    for name, array in arrays.items():
        t = tensors[name]
        assert (t.dtype, t.shape) == (kinds[array.dtype.name], array.shape)
        assert bytes(t.data) == array.astype(array.dtype.newbyteorder("<")).tobytes()
    # ours -> theirs
    ours = tensorfile.dumps(
        {n: RawTensor(kinds[a.dtype.name], a.shape, a.tobytes()) for n, a in arrays.items()},
        {"k": "v"})
    back = snp.load(ours)
    assert set(back) == set(arrays)
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype and numpy.array_equal(back[name], array)
    assert {n for n, _ in safetensors.deserialize(ours)} == set(arrays)


def test_a_file_the_library_refuses_is_refused_here_too() -> None:
    safetensors = pytest.importorskip("safetensors")
    bad = [
        _file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 3),
        _file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
        _file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4),
        _file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 8),
        _file({}, length=10**9),
    ]
    for data in bad:
        with pytest.raises(Exception):  # noqa: B017 - the library's own error type
            safetensors.deserialize(data)
        with pytest.raises(TensorFileError):
            tensorfile.loads(data)


STATES = [
    None, True, 0, -(2**70), 1.5, -0.0, "text", "$tuple", b"\x00\xff", [], (), set(),
    {"a": (1, [2, (3,)]), "b": {1: "x", (2, "y"): None}, "c": {4, "z", (5, 6)}},
    {"$tuple": [1]}, {"$x": 1, "$y": 2}, {"": {}}, [float("inf"), float("-inf")],
    {True: 1, 2.5: 3},
    (3, tuple(range(625)), None),  # random.getstate()
]


@pytest.mark.parametrize("state", STATES)
def test_plain_data_round_trips_exactly(state: object) -> None:
    back = plaindata.decode(plaindata.encode(state))
    assert back == state and type(back) is type(state)
    assert repr(back) == repr(state) or isinstance(state, set | dict)


def test_plain_data_keeps_nan_and_refuses_objects() -> None:
    assert math.isnan(plaindata.decode(plaindata.encode(float("nan"))))
    with pytest.raises(TypeError, match=r"state\['a'\]\[1\] is a builtins.object"):
        plaindata.encode({"a": [1, object()]})
    with pytest.raises(TypeError, match="complex"):
        plaindata.encode(1j)


@pytest.mark.parametrize("text", [
    "NaN", "[Infinity]", '{"$module": "os"}', '{"$tuple": 1}', '{"$set": [[1]]}',
    '{"$dict": [[[1], 2]]}', '{"$dict": [[1]]}', '{"$bytes": "!!"}', '{"$float": "1"}',
    '{"$tensor": "0"}', "[" * 100_000 + "]" * 100_000, "{", "",
])
def test_plain_data_refuses_what_encode_never_writes(text: str) -> None:
    with pytest.raises(plaindata.PlainDataError):
        plaindata.decode(text)


def test_plain_data_nesting_is_bounded_with_a_clear_error() -> None:
    deep: list = []
    for _ in range(plaindata.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(TypeError, match="nest deeper"):
        plaindata.encode(deep)
    with pytest.raises(plaindata.PlainDataError, match="nest deeper"):
        plaindata.decode("[" * 900 + "]" * 900)
    ok: list = []
    for _ in range(plaindata.MAX_DEPTH - 1):
        ok = [ok]
    assert plaindata.decode(plaindata.encode(ok)) == ok
