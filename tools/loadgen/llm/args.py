"""The `--model llm` options of loadgen, and the typed settings they become.

The traffic options stay loadgen's own (--concurrency, --rate with --distribution or
--burst-rate, --trace); --burstiness turns --rate into gamma arrivals as `vllm bench serve`
draws them. What is new for a generative model: which streaming API to drive, the workload
(seeded random lengths, the shipped prompt set, or one shared system prompt), how long a level
lasts and the SLO that goodput counts against. Code below the entry point reads only
`LlmLoadSettings`, never the argparse namespace.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

from tools.load.llm.figures import Slo
from tools.load.llm.workload import LengthRange, PromptSetWorkload, SharedPrefixWorkload, Workload
from tools.load.schedules import ClosedLoop, Gamma, Phase, Poisson, Schedule, Trace
from tools.loadgen.traffic import Traffic

APIS = ("grpc", "generate-stream", "openai")
WORKLOADS = ("random", "prompts", "shared-prefix")
DEFAULT_SECONDS = 20.0
LONGEST_LEVEL_S = 3600.0  # a level bounded by --num-prompts alone still ends

LlmWorkload = Workload | PromptSetWorkload | SharedPrefixWorkload


def add_llm_arguments(parser: argparse.ArgumentParser) -> None:
    llm = parser.add_argument_group("generative models (a decoupled model such as --model llm)")
    llm.add_argument(
        "--llm-api",
        choices=APIS,
        default=None,
        help="grpc: bidirectional streaming; generate-stream: Triton's SSE endpoint; openai: /v1/completions "
        "at --openai-url (default: grpc, or generate-stream with --protocol http)",
    )
    llm.add_argument("--openai-url", default=None, help="host:port of the OpenAI-compatible server (--llm-api openai)")
    llm.add_argument("--openai-model", default=None, help="the model name sent to the OpenAI endpoint (default: --model)")
    llm.add_argument("--workload", choices=WORKLOADS, default="random", help="default %(default)s")
    llm.add_argument("--prompt-tokens", default="32-512", help="random: prompt tokens, N or LOW-HIGH, log-uniform (default %(default)s)")
    llm.add_argument(
        "--output-tokens", default="16-128", help="output tokens, N or LOW-HIGH, log-uniform, EOS ignored (default %(default)s)"
    )
    llm.add_argument("--prefix-tokens", type=int, default=512, help="shared-prefix: tokens of the system prompt (default %(default)s)")
    llm.add_argument("--num-prompts", type=int, default=None, help="requests per level (default: as many as --duration allows)")
    llm.add_argument("--duration", type=float, default=None, help=f"seconds of sending per level (default {DEFAULT_SECONDS:g})")
    llm.add_argument("--burstiness", type=float, default=None, help="with --rate: gamma arrivals, 1/CV^2 of the gaps (1: Poisson)")
    llm.add_argument(
        "--goodput",
        nargs="+",
        default=["ttft:1000", "tpot:100"],
        help="SLO objectives in ms as vllm bench serve: ttft:MS tpot:MS e2el:MS (default: ttft:1000 tpot:100)",
    )
    llm.add_argument("--request-deadline", type=float, default=120.0, help="seconds before a stream is cancelled (default %(default)s)")
    llm.add_argument("--seed", type=int, default=0, help="the workload's and the arrivals' seed (default %(default)s)")


@dataclass(frozen=True)
class LlmLoadSettings:
    levels: tuple[Phase, ...]  # one load level each
    workload: LlmWorkload
    api: str
    openai_url: str | None
    openai_model: str
    slo: Slo
    deadline_s: float
    seed: int

    def describe_api(self) -> str:
        return {
            "grpc": "gRPC streaming",
            "generate-stream": "generate_stream (SSE)",
            "openai": f"OpenAI /v1/completions at {self.openai_url}",
        }[self.api]

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace, traffics: list[Traffic]) -> LlmLoadSettings:
        """The settings, or a ValueError naming the option at fault."""
        api = args.llm_api or ("generate-stream" if args.protocol == "http" else "grpc")
        if api == "openai" and not args.openai_url:
            raise ValueError("--llm-api openai needs --openai-url HOST:PORT")
        if args.num_prompts is not None and args.num_prompts < 1:
            raise ValueError(f"--num-prompts must be at least 1, got {args.num_prompts}")
        if args.duration is not None and not args.duration > 0:
            raise ValueError(f"--duration must be above 0 s, got {args.duration:g}")
        if args.burstiness is not None and not args.rate:
            raise ValueError("--burstiness shapes open-loop arrivals: give --rate too")
        if args.burstiness is not None and args.burst_rate:
            raise ValueError("give --burstiness (gamma arrivals) or --burst-rate (alternating rates), not both")
        if not args.request_deadline > 0:
            raise ValueError(f"--request-deadline must be above 0 s, got {args.request_deadline:g}")
        try:
            slo = Slo.parse_goodput(args.goodput)
        except ValueError as exc:
            raise ValueError(f"--goodput: {exc}") from None
        levels = tuple(_phase(_schedule(traffic, args.burstiness), args.duration, args.num_prompts, args.seed) for traffic in traffics)
        return cls(
            levels,
            cls.workload_from_cli_args(args),
            api,
            args.openai_url,
            args.openai_model or args.model,
            slo,
            args.request_deadline,
            args.seed,
        )

    @staticmethod
    def workload_from_cli_args(args: argparse.Namespace) -> LlmWorkload:
        """The workload the options name, or a ValueError naming the option at fault."""
        count = args.num_prompts or 1000  # enough distinct requests for a level; a longer level cycles them
        try:
            outputs = LengthRange.parse(args.output_tokens)
        except ValueError as exc:
            raise ValueError(f"--output-tokens: {exc}") from None
        if args.workload == "prompts":
            return PromptSetWorkload(outputs, count, args.seed)
        if args.workload == "shared-prefix":
            if args.prefix_tokens < 1:
                raise ValueError(f"--prefix-tokens must be at least 1, got {args.prefix_tokens}")
            return SharedPrefixWorkload(args.prefix_tokens, outputs, count, args.seed)
        try:
            prompts = LengthRange.parse(args.prompt_tokens)
        except ValueError as exc:
            raise ValueError(f"--prompt-tokens: {exc}") from None
        return Workload(prompts, outputs, count, args.seed)


def _schedule(traffic: Traffic, burstiness: float | None) -> Schedule:
    schedule = traffic.schedule()
    if burstiness is not None and isinstance(schedule, Poisson):
        return Gamma(schedule.rate, burstiness)
    if burstiness is not None:
        raise ValueError("--burstiness draws gamma arrivals around --rate: it does not combine with --distribution constant")
    return schedule


def _phase(schedule: Schedule, seconds: float | None, count: int | None, seed: int) -> Phase:
    """A level of `seconds` of sending, or of `count` requests (whichever ends first when both
    are given). An open loop of `count` requests sends the schedule's first `count` arrivals,
    as `vllm bench serve --num-prompts` does."""
    if count is None:
        return Phase(schedule, seconds or DEFAULT_SECONDS)
    if isinstance(schedule, ClosedLoop):
        return Phase(ClosedLoop(schedule.concurrency, count), seconds or LONGEST_LEVEL_S)
    if isinstance(schedule, Trace):
        arrivals = sorted(schedule.arrivals)[:count]
    else:
        arrivals = schedule.offsets(seconds or LONGEST_LEVEL_S, np.random.default_rng(seed))[:count].tolist()
    if not arrivals:
        raise ValueError("no arrival falls within --duration: lengthen it or raise --rate")
    trace = Trace(tuple(arrivals), cycle=False)
    return Phase(trace, max(arrivals) + 1e-3, name=f"{schedule.label()}, {len(arrivals)} requests")
