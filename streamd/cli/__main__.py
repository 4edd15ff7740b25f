"""``python -m streamd.cli ...``: the same as ``python -m streamd ...`` (the ``streamd`` command), whose
entry point, :mod:`streamd.__main__`, is the one module that imports the command line."""

import streamd.__main__  # noqa: F401 - runs the command and exits
