"""From argv to checked arguments, the same way for every command: argparse's own usage
error (exit 2) names an out-of-range option before anything starts, then logging is set up."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from tools.cli.logsetup import configure_logging


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
