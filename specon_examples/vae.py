"""Variational auto-encoder on scikit-learn's 8x8 digits (the research's VAE, made small)."""

from __future__ import annotations

from specon_examples._common import Job, digits, minibatch, run

ITERATIONS = 10000


def build() -> Job:
    import torch
    from torch import nn
    from torch.nn import functional as F

    x, _ = digits()

    class VAE(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc = nn.Linear(64, 400)
            self.mu = nn.Linear(400, 20)
            self.logvar = nn.Linear(400, 20)
            self.dec1 = nn.Linear(20, 400)
            self.dec2 = nn.Linear(400, 64)

        def forward(self, batch):  # type: ignore[no-untyped-def]
            h = F.relu(self.enc(batch))
            mu, logvar = self.mu(h), self.logvar(h)
            z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
            return self.dec2(F.relu(self.dec1(z))), mu, logvar

    model = VAE()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step() -> tuple[float, dict[str, float]]:
        batch = x[minibatch(len(x), 128)]
        logits, mu, logvar = model(batch)
        recon = F.binary_cross_entropy_with_logits(logits, batch, reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        loss = (recon + kld) / len(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return float(loss), {"kld": float(kld) / len(batch)}

    return Job(model, optimizer, step)


def main(argv: list[str] | None = None) -> None:
    run("vae", __doc__ or "", ITERATIONS, build, argv)


if __name__ == "__main__":
    main()
