"""Recurrent classifiers that read each 8x8 digit as a sequence of 8 rows (as the research's
RNN, GRU and Bi-RNN jobs read MNIST row by row)."""

from __future__ import annotations

from specon_examples._common import Job, classifier, digits


def build_rows(cell: str, hidden: int, bidirectional: bool = False, lr: float = 3e-3) -> Job:
    import torch
    from torch import nn

    x, y = digits()
    rows = x.view(-1, 8, 8)
    layer = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}[cell]

    class RowClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = layer(8, hidden, batch_first=True, bidirectional=bidirectional)
            self.out = nn.Linear(hidden * (2 if bidirectional else 1), 10)

        def forward(self, batch):  # type: ignore[no-untyped-def]
            seq, _ = self.rnn(batch)
            if bidirectional:
                # forward direction's last step, backward direction's first step
                last = torch.cat([seq[:, -1, :hidden], seq[:, 0, hidden:]], dim=1)
            else:
                last = seq[:, -1]
            return self.out(last)

    model = RowClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)

    return classifier(model, optimizer, lambda idx: model(rows[idx]), y, len(rows), 64)
