"""Measuring recognition, shared by training (validation, calibration) and evaluation, below both.

* :mod:`.metrics`: word alignment and error counts, confidence quality (AUC, NCE), reliability bins.
* :mod:`.recording`: a Recognizer that records what the engine computed (confidence measures, KWS tracks).
* :mod:`.reliability`: reliability diagrams (matplotlib).
"""
