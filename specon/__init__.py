"""SpeCon: progress-aware scheduling of deep-learning training (shared core)."""

__version__ = "0.1.0"
