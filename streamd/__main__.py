"""``python -m streamd ...`` is the ``streamd`` command."""

import sys

from .cli import main

sys.exit(main())
