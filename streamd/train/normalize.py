"""Written English -> the model's spoken form: :func:`normalize_text`, which lives in
:mod:`streamd.text.normalize` (the runtime's second pass uses it too); re-exported here for training code."""

from streamd.text.normalize import *  # noqa: F401,F403
from streamd.text.normalize import __all__  # noqa: F401
