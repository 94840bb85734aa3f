"""Convolutional image classifier on generated 32x32x3 images: 3 conv layers (64/64/128),
batch 64, SGD with momentum. Its training step scales with cores (docs/examples.md)."""

from __future__ import annotations

from typing import Any

from specon_examples._common import Job, classifier, run

ITERATIONS = 600
CLASSES = 10
IMAGES = 2048
#: The data set is fixed (its own generator): `--seed` changes weights and minibatch order only.
DATA_SEED = 1234


def images(n: int = IMAGES, classes: int = CLASSES) -> tuple[Any, Any]:
    """``n`` noisy 32x32 RGB images of ``classes`` smooth random patterns, randomly shifted."""
    import torch
    from torch.nn import functional as F

    g = torch.Generator().manual_seed(DATA_SEED)
    # One low-frequency pattern per class: 8x8 noise upsampled to 40x40, then 32x32 crops.
    coarse = torch.randn(classes, 3, 8, 8, generator=g)
    patterns = F.interpolate(coarse, size=(40, 40), mode="bilinear", align_corners=False)
    y = torch.randint(0, classes, (n,), generator=g)
    dx = torch.randint(0, 9, (n,), generator=g).tolist()
    dy = torch.randint(0, 9, (n,), generator=g).tolist()
    x = torch.stack([patterns[int(c), :, i:i + 32, j:j + 32]
                     for c, i, j in zip(y.tolist(), dy, dx, strict=True)])
    x = x + 4.0 * torch.randn(x.shape, generator=g)
    return x, y


def build() -> Job:
    import torch
    from torch import nn

    x, y = images()
    # The architecture measured on 16 cores (docs/examples.md, "Speed-up beyond two cores").
    model = nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(128 * 8 * 8, CLASSES),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    return classifier(model, optimizer, lambda idx: model(x[idx]), y, len(x), 64)


def main(argv: list[str] | None = None) -> None:
    run("cnn", __doc__ or "", ITERATIONS, build, argv)


if __name__ == "__main__":
    main()
