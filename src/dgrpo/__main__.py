"""``python -m dgrpo`` (what ``torchrun -m dgrpo`` launches)."""

import sys

from dgrpo.cli import main

sys.exit(main())
