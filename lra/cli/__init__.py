"""The `lra` command line: one module per command, each adding its own parser.

May import every other room of lra/ (it is the top); nothing in lra/ imports it.
"""
from lra.cli.entry import build_parser, main, run_config, split_overrides  # noqa: F401
