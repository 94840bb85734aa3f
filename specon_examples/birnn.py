"""bidirectional LSTM (Bi-RNN) classifying scikit-learn's 8x8 digits read as 8 rows of 8 pixels."""

from __future__ import annotations

from specon_examples._common import Job, run
from specon_examples._rows import build_rows

ITERATIONS = 2500


def build() -> Job:
    return build_rows("lstm", hidden=96, bidirectional=True)


def main(argv: list[str] | None = None) -> None:
    run("birnn", __doc__ or "", ITERATIONS, build, argv)


if __name__ == "__main__":
    main()
