"""Elman RNN (tanh) classifying scikit-learn's 8x8 digits read as 8 rows of 8 pixels."""

from __future__ import annotations

from specon_examples._common import Job, run
from specon_examples._rows import build_rows

ITERATIONS = 6000


def build() -> Job:
    return build_rows("rnn", hidden=128, bidirectional=False)


def main(argv: list[str] | None = None) -> None:
    run("rnn", __doc__ or "", ITERATIONS, build, argv)


if __name__ == "__main__":
    main()
