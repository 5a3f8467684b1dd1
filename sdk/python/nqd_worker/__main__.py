"""python -m nqd_worker: the same as the nqd-worker-py command."""

import sys

from .cli import main

sys.exit(main())
