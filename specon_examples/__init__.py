"""Real example training jobs (PyTorch on the CPU) that use the SpeCon SDK.

Run one with `python -m specon_examples.<model> --iterations N --threads K`; the models are
listed in `MODELS`. PyTorch is optional for the rest of the project, needed here."""

MODELS = ("vae", "mlp", "rnn", "gru", "birnn", "dynrnn", "cnn", "charlm")
