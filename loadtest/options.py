"""The load options, declared once: locust reads them as its own custom arguments (so they
appear in `locust --help` and in the web UI), and `python -m loadtest.run` forwards them."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from tools.embed import DEFAULT_URLS

SHAPES = ("steady", "step", "burst", "wave")


@dataclass(frozen=True)
class LoadOption:
    flag: str
    default: object
    help: str
    type: type = str
    choices: tuple[str, ...] | None = None

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


LOAD_OPTIONS = (
    LoadOption("--triton-http-url", DEFAULT_URLS["http"], "Triton HTTP endpoint host:port"),
    LoadOption("--triton-grpc-url", DEFAULT_URLS["grpc"], "Triton gRPC endpoint host:port"),
    LoadOption("--model", "embed", "model every user calls (TEXT -> EMBEDDING)"),
    LoadOption("--shape", "steady", "load shape; --users is its peak, --run-time its length", choices=SHAPES),
    LoadOption("--interactive-weight", 3, "relative share of interactive users", int),
    LoadOption("--bulk-weight", 1, "relative share of bulk users", int),
    LoadOption("--interactive-timeout-ms", 0, "queue timeout of interactive requests; lowers the model's (0 = the model's)", int),
    LoadOption("--bulk-texts", 4, "texts per bulk request", int),
    LoadOption("--repeat-share", 0.2, "share of requests repeated verbatim (response cache hits)", float),
    LoadOption("--wait-ms", 100.0, "mean think time per user, exponentially distributed (0 = closed loop)", float),
    LoadOption("--client-timeout-s", 30.0, "client-side deadline of every request", float),
    LoadOption("--burst-every-s", 15.0, "burst shape: seconds from one spike to the next", float),
    LoadOption("--burst-length-s", 5.0, "burst shape: seconds each spike lasts", float),
    LoadOption("--wave-period-s", 0.0, "wave shape: period (0 = the whole --run-time, or 60 s without one)", float),
    LoadOption("--llm-model", "llm", "model the LLM users stream from (text_input -> text_output, generate_stream)"),
    LoadOption("--llm-max-tokens", 32, "LLM users: max_tokens of every request (greedy; EOS may end it sooner)", int),
    LoadOption("--llm-prompts", "short", "LLM users: which corpus texts make the prompts", choices=("short", "long")),
)


def add_load_options(parser: argparse.ArgumentParser) -> None:
    """Works on argparse and on locust's configargparse parser alike."""
    group = parser.add_argument_group("Triton load options (loadtest/)")
    for option in LOAD_OPTIONS:
        group.add_argument(
            option.flag, type=option.type, default=option.default, choices=option.choices, help=f"{option.help} (default: %(default)s)"
        )


def graceful_stop_timeout(requested_s: float | None, client_timeout_s: float) -> float:
    """How long a stopping user may finish its call in flight (locust's `--stop-timeout`).
    Locust's default (0) kills a user mid-call, which cancels its gRPC call, and a cancel that
    races Triton 2.51's own completion of the call is a known server segfault (Triton server
    issues #7368 and #8034, fixed in 2.53): it took down the shared server of a test run as a
    run ended. Users therefore finish their call, for at most its client deadline, unless the
    run asks for another stop timeout."""
    return requested_s if requested_s else client_timeout_s


@dataclass(frozen=True)
class LoadValues:
    """The load options' values, read once at the entry point (`python -m loadtest.run`) and
    forwarded to locust as its own arguments."""

    values: tuple[object, ...]  # one per LOAD_OPTIONS, in its order

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> LoadValues:
        return cls(tuple(getattr(args, option.dest) for option in LOAD_OPTIONS))

    def __getitem__(self, flag: str) -> object:
        """The value of one option, by its flag (`--model`)."""
        return self.values[[option.flag for option in LOAD_OPTIONS].index(flag)]

    def locust_arguments(self) -> list[str]:
        """These values as locust command-line arguments."""
        forwarded = []
        for option, value in zip(LOAD_OPTIONS, self.values, strict=True):
            forwarded += [option.flag, str(value)]
        return forwarded
