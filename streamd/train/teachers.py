"""Real-speech "teacher" recognizers that label untranscribed audio (``streamd label``, ``bench/peers.py``).

The models, their loaders and the registry live in :mod:`streamd.second_pass.models`, shared with the
runtime's second pass over finished segments; this module re-exports them for training code.
"""

from streamd.second_pass.models import *  # noqa: F401,F403
from streamd.second_pass.models import __all__  # noqa: F401
from streamd.second_pass.models import _check_audio, _need  # noqa: F401  (used by tests and tools)
