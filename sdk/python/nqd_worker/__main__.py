"""python -m nqd_worker <module or file>... --url <nqd> [--token <t>]"""

import sys

from .cli import main

sys.exit(main())
