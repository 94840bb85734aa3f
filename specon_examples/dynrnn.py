"""Dynamic-length RNN: an LSTM over padded, packed sequences of 3-40 steps telling linear
sequences from random ones (the classic dynamic_rnn toy task; data generated, seeded)."""

from __future__ import annotations

from specon_examples._common import Job, classifier, run

ITERATIONS = 1000
SAMPLES = 2000
MAX_LEN = 40


def sequences(seed: int = 1234):  # type: ignore[no-untyped-def]
    """Fixed data set from its own generator, so the job's seed changes only training."""
    import torch

    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, MAX_LEN + 1, (SAMPLES,), generator=g)
    labels = torch.randint(0, 2, (SAMPLES,), generator=g)
    data = torch.zeros(SAMPLES, MAX_LEN, 1)
    for i in range(SAMPLES):
        n = int(lengths[i])
        if labels[i] == 1:
            start = float(torch.randint(0, MAX_LEN, (1,), generator=g))
            values = (start + torch.arange(n, dtype=torch.float32)) / MAX_LEN
        else:
            values = torch.randint(0, MAX_LEN, (n,), generator=g).float() / MAX_LEN
        data[i, :n, 0] = values
    return data, lengths, labels


def build() -> Job:
    import torch
    from torch import nn
    from torch.nn.utils.rnn import pack_padded_sequence

    data, lengths, labels = sequences()

    class DynamicRNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.LSTM(1, 64, batch_first=True)
            self.out = nn.Linear(64, 2)

        def forward(self, batch, batch_lengths):  # type: ignore[no-untyped-def]
            packed = pack_padded_sequence(batch, batch_lengths, batch_first=True,
                                          enforce_sorted=False)
            _, (h, _) = self.rnn(packed)
            return self.out(h[-1])

    model = DynamicRNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

    return classifier(model, optimizer, lambda idx: model(data[idx], lengths[idx]), labels,
                      SAMPLES, 64)


def main(argv: list[str] | None = None) -> None:
    run("dynrnn", __doc__ or "", ITERATIONS, build, argv)


if __name__ == "__main__":
    main()
