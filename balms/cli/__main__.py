"""`python -m balms.cli ...`: the `balms` command."""

import sys

from balms.cli import main

sys.exit(main())
