"""One logging setup for every command-line tool (`-q` / `-v`)."""

import argparse
import logging


def add_verbosity_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", action="store_true", help="debug output")
    group.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")


def configure_logging(args: argparse.Namespace) -> None:
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
