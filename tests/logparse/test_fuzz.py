"""Property tests: the parser never raises, and how the stream is cut into chunks does not
change what it finds."""

from __future__ import annotations

import math
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from specon.logparse import LogParser, Record

FIXTURES = sorted(Path(__file__).with_name("fixtures").glob("*.log"))

_pieces = st.sampled_from([
    "loss", "=", ":", " ", "\n", "\r", "\x08", "\x1b[32m", "\x1b[0m", "{", "}", "'", '"',
    "nan", "inf", "-", "1", "0.5", "e", "step", "Epoch 1/3", "3/10", "tensor(", ",",
    '{"specon":1,"event":"progress","step":', "━", "é", "\x00", "train_runtime",
])
_texts = st.lists(st.one_of(_pieces, st.text(max_size=8)), max_size=60).map("".join)


def key(r: Record) -> tuple:
    loss = "nan" if math.isnan(r.loss) else r.loss
    return (r.step, loss, tuple(sorted((k, str(v)) for k, v in r.metrics.items())), r.format)


def run(chunks: list[bytes | str], regex: str | None = None) -> tuple[list[Record], LogParser]:
    parser = LogParser(regex=regex, max_line=200)
    out: list[Record] = []
    for chunk in chunks:
        out.extend(parser.feed(chunk))
    out.extend(parser.flush())
    return out, parser


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=64), _texts), max_size=20))
def test_never_raises_and_counts_every_record(chunks):
    out, parser = run(chunks, regex=r"obj (?P<loss>\S+)(?: s (?P<step>\S+))?")
    assert parser.counters.records == len(out)
    assert all(isinstance(r.loss, float) for r in out)
    assert all(r.step is None or (isinstance(r.step, int) and r.step >= 0) for r in out)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(FIXTURES), st.lists(st.integers(1, 97), min_size=1, max_size=400))
def test_chunking_does_not_change_the_records(path, cuts):
    data = path.read_bytes()
    whole, _ = run([data])
    chunks, pos, i = [], 0, 0
    while pos < len(data):
        size = cuts[i % len(cuts)]
        chunks.append(data[pos:pos + size])
        pos += size
        i += 1
    pieces, _ = run(chunks)
    assert [key(r) for r in pieces] == [key(r) for r in whole]
    assert whole  # every fixture holds records
