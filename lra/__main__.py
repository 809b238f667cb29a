"""`python -m lra` is the `lra` command."""
import sys

from lra.cli import main

sys.exit(main())
