"""Turn a parsed command line into a typed settings dataclass at the entry point.

Code below an entry point reads its settings object, never an `argparse.Namespace`: the
Namespace's fields are untyped and any module could read any of them. A settings field
named like an argument's `dest` takes that argument's value; the entry point computes the
rest (units, defaults that depend on other options, keys read from files).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, TypeVar

Settings = TypeVar("Settings")


def settings_from(settings_type: type[Settings], args: argparse.Namespace, **computed: Any) -> Settings:
    """`settings_type` filled from the arguments whose dest matches a field, then `computed`."""
    names = {field.name for field in dataclasses.fields(settings_type)}  # type: ignore[arg-type]
    unknown = set(computed) - names
    if unknown:
        raise TypeError(f"{settings_type.__name__} has no field(s) {sorted(unknown)}")
    given = {name: value for name, value in vars(args).items() if name in names and name not in computed}
    return settings_type(**given, **computed)
