"""Character-level Transformer language model on generated text: a 4-layer causal encoder
(d=256, 4 heads, feed-forward 1024), sequences of 64 characters, batch 16, Adam."""

from __future__ import annotations

import random
from typing import Any

from specon_examples._common import Job, minibatch, run

ITERATIONS = 1200
SEQ = 64
BATCH = 16
#: The text is fixed (its own generator): `--seed` changes weights and minibatch order only.
TEXT_SEED = 99
TEXT_CHARS = 60_000

_SUBJECTS = ("the cat", "a dog", "my friend", "the old man", "our teacher", "a small bird",
             "the farmer", "her brother")
_VERBS = ("sees", "likes", "finds", "follows", "paints", "calls", "feeds", "watches")
_OBJECTS = ("the river", "a red ball", "the tall tree", "some bread", "the moon",
            "a green box", "the market", "two apples")
_TAILS = ("", " today", " at night", " in the garden", " again", " every morning")


def text(chars: int = TEXT_CHARS) -> str:
    """Sentences from a small grammar: a language with structure for the model to learn."""
    rng = random.Random(TEXT_SEED)
    out: list[str] = []
    size = 0
    while size < chars:
        sentence = (f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} "
                    f"{rng.choice(_OBJECTS)}{rng.choice(_TAILS)}. ")
        out.append(sentence)
        size += len(sentence)
    return "".join(out)[:chars]


def build() -> Job:
    import torch
    from torch import nn
    from torch.nn import functional as F

    corpus = text()
    vocab = sorted(set(corpus))
    data = torch.tensor([vocab.index(c) for c in corpus], dtype=torch.long)
    d = 256

    class CharLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(len(vocab), d)
            self.position = nn.Parameter(torch.zeros(1, SEQ, d))
            # The encoder measured on 16 cores (docs/examples.md, "Speed-up beyond two cores").
            layer = nn.TransformerEncoderLayer(d, 4, 1024, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 4)
            self.head = nn.Linear(d, len(vocab))
            self.register_buffer(
                "mask", torch.triu(torch.full((SEQ, SEQ), float("-inf")), diagonal=1))

        def forward(self, tokens: Any) -> Any:
            h = self.embed(tokens) + self.position[:, : tokens.shape[1]]
            return self.head(self.encoder(h, mask=self.mask))

    model = CharLM()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)

    def step() -> tuple[float, dict[str, float]]:
        starts = minibatch(len(data) - SEQ - 1, BATCH)
        window = torch.stack([data[s: s + SEQ + 1] for s in starts.tolist()])
        logits = model(window[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, len(vocab)), window[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return float(loss), {}

    return Job(model, optimizer, step)


def main(argv: list[str] | None = None) -> None:
    run("charlm", __doc__ or "", ITERATIONS, build, argv)


if __name__ == "__main__":
    main()
