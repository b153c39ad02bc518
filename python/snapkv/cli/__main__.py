"""``python -m snapkv.cli``: the ``snapkv`` command."""

import sys

from . import main

sys.exit(main())
