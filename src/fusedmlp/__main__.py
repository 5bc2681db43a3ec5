"""``python -m fusedmlp ...``: the same as the ``fusedmlp`` command."""

import sys

from .cli import main

sys.exit(main())
