"""streamd: streaming real-time speech recognizer daemon."""

__version__ = "0.1.0"
