"""Errors shared by every command.

`UserError` is bad input (a scenario, corpus, flag or results folder): the CLI prints its message
as one line and exits 2, never a traceback. `RunError` means the run could not be done (target
unreachable after preflight): exit 1. Exit codes are listed in docs/exit-codes.md.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable
from typing import Any, NoReturn

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_GATE_FAILED = 3


class UserError(Exception):
    """Bad input. The message names the file / field / line and is printed as is."""


class RunError(Exception):
    """The run could not be done (e.g. target unreachable); exit 1."""


def did_you_mean(key: object, known: Iterable[str]) -> str:
    """The hint ` (did you mean step_s?)` for the known key closest to a misspelt one; "" if none is close.

    Every "unknown key" error at any depth (scenario, simulator settings, matrix file) appends it,
    so a typo names its own fix."""
    close = difflib.get_close_matches(str(key), [k for k in known if k != key], n=1)
    return f" (did you mean {close[0]}?)" if close else ""


class _ShowDefaults(argparse.HelpFormatter):
    """Appends "(default: X)" to an option's help when it has a real default (not None / False)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


class CommandParser(argparse.ArgumentParser):
    """argparse for every `capacity` command: a usage error is one line and exit 2 (UserError),
    not argparse's usage block; --help shows each option's default."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _ShowDefaults)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UserError(message)
