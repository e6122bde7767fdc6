"""`python -m balms.cli ...`: the `balms` command."""

import sys

from balms.cli import console

sys.exit(console())
