"""From argv to checked arguments, the same way for every command: argparse's own usage
error (exit 2) names an out-of-range option before anything starts, then logging is set up."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

from tools.cli.logsetup import configure_logging

Settings = TypeVar("Settings")


def parse_checked(
    parser: argparse.ArgumentParser, argv: list[str] | None, check: Callable[[argparse.Namespace], None]
) -> argparse.Namespace:
    """`check` raises ValueError naming the option it refuses."""
    args = parser.parse_args(argv)
    try:
        check(args)
    except ValueError as exc:
        parser.error(str(exc))
    configure_logging(args)
    return args


def parse_settings(
    parser: argparse.ArgumentParser, argv: list[str] | None, settings_of: Callable[[argparse.Namespace], Settings]
) -> Settings:
    """argv straight to a command's typed settings (usually its `Settings.from_cli_args`): a
    ValueError it raises is argparse's usage error (exit 2), then logging is set up."""
    args = parser.parse_args(argv)
    try:
        settings = settings_of(args)
    except ValueError as exc:
        parser.error(str(exc))
    configure_logging(args)
    return settings


class ListError(argparse.ArgumentTypeError, ValueError):
    """A malformed comma list: argparse shows it as a usage error when it parses the option,
    and run_reporting_errors (a ValueError) when code below an entry point parses it."""


def number_list(text: str | None, kind: type, option: str | None = None) -> list:
    """`1,4,16` -> [1, 4, 16]; None or empty -> []. The one parser of every comma list of numbers."""
    if not text:
        return []
    try:
        return [kind(item) for item in str(text).split(",") if item.strip()]
    except ValueError:
        subject = f"{option} must be" if option else "the value must be"
        raise ListError(f"{subject} a comma-separated list of numbers, got {text!r}") from None
