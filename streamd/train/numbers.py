"""Numbers spelled out in the spoken form: :mod:`streamd.text.numbers` (shared with the runtime's second
pass), re-exported here for training code."""

from streamd.text.numbers import *  # noqa: F401,F403
from streamd.text.numbers import __all__  # noqa: F401
