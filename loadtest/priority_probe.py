"""`python -m loadtest.priority_probe`: does request priority (and the queue timeout) reach
the models inside the `embed` ensemble?

Identical requests, half at priority 1 and half at priority 2, keep a model saturated
from closed-loop threads. If the scheduler that holds the queue honours the priority,
priority-1 requests overtake and their latency stays far below priority 2's. Run it
against `encoder` directly (the control: priority certainly applies there) and against
`embed` (the ensemble: applies only if it is passed on). `--timeout-us` adds a queue
timeout to the priority-2 requests; a "Request timeout expired" rejection shows it
reached a composing model's queue policy.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

import numpy as np

from loadtest.corpus import load_corpus
from tools.contract import ATTENTION_MASK, DEFAULT_HTTP_URL, INPUT_IDS, TEXT_INPUT

ENCODER_TOKENS = 32  # the encoder is sent ready token ids of this length


@dataclass
class Outcome:
    latencies_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)


def request_body(model: str, text: str, priority: int, timeout_us: int) -> bytes:
    if model == "encoder":
        ids = [101] + [random.randint(1000, 20000) for _ in range(ENCODER_TOKENS - 2)] + [102]
        inputs = [
            {"name": INPUT_IDS, "shape": [1, ENCODER_TOKENS], "datatype": "INT64", "data": ids},
            {"name": ATTENTION_MASK, "shape": [1, ENCODER_TOKENS], "datatype": "INT64", "data": [1] * ENCODER_TOKENS},
        ]
    else:
        inputs = [{"name": TEXT_INPUT, "shape": [1, 1], "datatype": "BYTES", "data": [text]}]
    parameters: dict[str, int] = {"priority": priority}
    if timeout_us:
        parameters["timeout"] = timeout_us
    return json.dumps({"inputs": inputs, "parameters": parameters}).encode()


def worker(url: str, model: str, priority: int, timeout_us: int, texts: list[str], stop: threading.Event, outcome: Outcome) -> None:
    counter = 0
    while not stop.is_set():
        counter += 1
        text = f"{random.choice(texts)} [{threading.get_ident()}-{counter}]"  # unique: no cache hits
        request = urllib.request.Request(
            f"http://{url}/v2/models/{model}/infer", data=request_body(model, text, priority, timeout_us), method="POST"
        )
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                response.read()
            outcome.latencies_ms.append((time.perf_counter() - start) * 1000)
        except urllib.error.HTTPError as exc:
            message = json.loads(exc.read() or b"{}").get("error", str(exc))
            outcome.errors[message] = outcome.errors.get(message, 0) + 1
        except OSError as exc:
            outcome.errors[str(exc)] = outcome.errors.get(str(exc), 0) + 1


def probe(url: str, model: str, threads: int, seconds: float, priorities: tuple[int, int], timeout_us: int) -> dict[str, Outcome]:
    texts = [p.text for p in load_corpus() if p.length == "short"]
    stop = threading.Event()
    outcomes = {f"priority {priorities[0]} (A)": Outcome(), f"priority {priorities[1]} (B)": Outcome()}
    pool = []
    for index in range(threads):
        label, priority = (list(outcomes)[index % 2], priorities[index % 2])
        timeout = timeout_us if index % 2 == 1 else 0
        thread = threading.Thread(target=worker, args=(url, model, priority, timeout, texts, stop, outcomes[label]), daemon=True)
        pool.append(thread)
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in pool:
        thread.join(timeout=70)
    return outcomes


def format_outcomes(model: str, outcomes: dict[str, Outcome], seconds: float) -> str:
    lines = [f"model {model}: {'class':16} {'ok':>6} {'req/s':>6} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7}  failures"]
    for label, outcome in outcomes.items():
        data = np.asarray(outcome.latencies_ms or [float("nan")])
        p50, p95, p99 = (np.percentile(data, q) for q in (50, 95, 99))
        errors = "; ".join(f"{count} x {message}" for message, count in outcome.errors.items()) or "-"
        lines.append(
            f"{'':{len(model) + 7}} {label:16} {len(outcome.latencies_ms):6d} {len(outcome.latencies_ms) / seconds:6.1f}"
            f" {p50:7.0f} {p95:7.0f} {p99:7.0f}  {errors}"
        )
    return "\n".join(lines)


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.priority_probe", description=__doc__)
    parser.add_argument("--url", default=DEFAULT_HTTP_URL, help="Triton HTTP host:port (default: %(default)s)")
    parser.add_argument("--models", nargs="+", default=["encoder", "embed"], choices=("encoder", "embed"))
    parser.add_argument("--threads", type=int, default=32, help="closed-loop clients, half per class (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=15.0, help="per model (default: %(default)s)")
    parser.add_argument("--priorities", type=int, nargs=2, default=(1, 2), help="class A and class B (default: 1 2)")
    parser.add_argument("--timeout-us", type=int, default=0, help="queue timeout on class B requests (default: none)")
    args = parser.parse_args(argv)
    for model in args.models:
        outcomes = probe(args.url, model, args.threads, args.seconds, tuple(args.priorities), args.timeout_us)
        print(format_outcomes(model, outcomes, args.seconds), flush=True)
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
