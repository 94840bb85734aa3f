"""Recurrent classifiers that read each 8x8 digit as a sequence of 8 rows (as the research's
RNN, GRU and Bi-RNN jobs read MNIST row by row)."""

from __future__ import annotations

from specon_examples._common import Job, digits, minibatch


def build_rows(cell: str, hidden: int, bidirectional: bool = False, lr: float = 3e-3) -> Job:
    import torch
    from torch import nn
    from torch.nn import functional as F

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

    def step() -> tuple[float, dict[str, float]]:
        idx = minibatch(len(rows), 64)
        logits = model(rows[idx])
        loss = F.cross_entropy(logits, y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        accuracy = float((logits.argmax(1) == y[idx]).float().mean())
        return float(loss), {"accuracy": accuracy}

    return Job(model, optimizer, step)
