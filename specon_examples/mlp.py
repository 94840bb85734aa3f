"""Multi-layer perceptron classifying scikit-learn's 8x8 digits (SGD with a step schedule)."""

from __future__ import annotations

from specon_examples._common import Job, classifier, digits, run

ITERATIONS = 7000


def build() -> Job:
    import torch
    from torch import nn

    x, y = digits()
    model = nn.Sequential(
        nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1000, gamma=0.5)

    return classifier(model, optimizer, lambda idx: model(x[idx]), y, len(x), 128, scheduler)


def main(argv: list[str] | None = None) -> None:
    run("mlp", __doc__ or "", ITERATIONS, build, argv)


if __name__ == "__main__":
    main()
