"""The `lra` command line: lra/cli/entry.py builds the parser from one module per command, each
adding its own; a command's work lives in the room below it (runs/, training/, report/, bench/).
May import any room of lra/; no room imports it (it is the top)."""
from lra.cli.entry import main  # noqa: F401 (the `lra` console script: lra.cli:main)
