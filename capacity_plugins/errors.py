"""Errors shared by every command.

`UserError` is bad input (a scenario, corpus, flag or results folder): the CLI prints its message
as one line and exits 2, never a traceback. `RunError` means the run could not be done (target
unreachable after preflight): exit 1. Exit codes are fixed in DESIGN.md ("Exit codes").
"""

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_GATE_FAILED = 3


class UserError(Exception):
    """Bad input. The message names the file / field / line and is printed as is."""


class RunError(Exception):
    """The run could not be done (e.g. target unreachable); exit 1."""
