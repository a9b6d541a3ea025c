"""The step cost model fitted on vLLM's own engine: its executed steps, recorded, then fitted here.

vLLM runs in .venv-vllm, so the measurement is a child process: llm.vllm_engine.step_recorder
builds vLLM's engine (the engine core and its worker in processes of their own, as served) from
the vLLM config's knobs, drives it through the scenarios of a VllmDesign and records every
executed step's composition and time from inside vLLM's scheduler. This module builds the
scenarios, runs the recorder, and fits the same StepCostModel as the native calibration
(tools/simulate/llm/step_cost.py) on the recorded steps:

- a step's seconds are its whole cycle in the engine core: from the start of schedule() to the
  start of the next one when the engine had more work (scheduling, the model, sampling, the
  scheduler's update, sending the outputs), else to the end of update_from_output();
- steps of the same shape (repeated rounds) count once, at their median (or fastest);
- a step's features come from vLLM's own counts: per request the tokens scheduled and the
  tokens already computed, a decode being a request past its prompt.

The calibration engine takes the config's knobs (the compiled graph depends on
max_num_batched_tokens, so the served budget finds torch.compile's cache warm) with
max_num_seqs raised to the design's largest batch, and the fit reports how the recorded times
compare with vLLM's own iteration details (elapsed_ms: the model's execution alone).
"""

from __future__ import annotations

import json
import logging
import shutil
import statistics
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tools.machine import describe_cpu
from tools.paths import BUILD_DIR, VLLM_PYTHON
from tools.simulate.llm.step_cost import StepCostModel, StepShape

log = logging.getLogger(__name__)

RECORD_TIMEOUT_S = 1800.0  # an engine start compiles the model (~30-75 s on 2 cores), then the scenarios


@dataclass(frozen=True)
class VllmDesign:
    """The scenarios the engine is driven through (token counts; see step_recorder's format)."""

    prefills: tuple[int, ...] = (16, 64, 128, 256, 384, 512)  # one prompt alone, from an empty cache
    long_prompts: tuple[int, ...] = (1536,)  # chunked by the budget: later chunks after computed context
    cached: tuple[tuple[int, int], ...] = ((512, 128), (1024, 256), (256, 512))  # (cached prefix, new tokens)
    decode_batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    decode_contexts: tuple[int, ...] = (64, 256, 768)
    decode_steps: int = 10  # tokens each decode batch generates
    # decodes at a context, then a prompt joining them (a long one joins in budget-sized chunks)
    mixed: tuple[tuple[int, int, int], ...] = ((4, 256, 128), (8, 256, 384), (16, 128, 512), (8, 512, 1200))
    rounds: int = 2
    statistic: str = "median"  # of a shape's samples: median (the typical step) or min (the undisturbed one)

    @classmethod
    def quick(cls) -> VllmDesign:
        return cls(
            prefills=(32, 128, 512),
            long_prompts=(1200,),
            cached=((512, 128),),
            decode_batches=(1, 4, 16, 32),
            decode_contexts=(64, 512),
            decode_steps=8,
            mixed=((8, 256, 384), (8, 512, 1200)),
            rounds=1,
        )

    @classmethod
    def tiny(cls) -> VllmDesign:
        """A few shapes of each kind, for a test that runs the real engine."""
        return cls(
            prefills=(32, 256),
            long_prompts=(),
            cached=((256, 64),),
            decode_batches=(1, 4),
            decode_contexts=(64,),
            decode_steps=4,
            mixed=((4, 64, 128),),
            rounds=1,
        )

    @property
    def max_batch(self) -> int:
        return max([*self.decode_batches, *(decodes + 1 for decodes, _, _ in self.mixed), 1])

    def scenarios(self) -> Iterator[dict]:
        def request(prompt: int, max_tokens: int, seed: str | None = None) -> dict:
            return {"prompt": prompt, "max_tokens": max_tokens, **({"seed": seed} if seed else {})}

        for length in (*self.prefills, *self.long_prompts):
            yield {"name": f"prefill {length}", "waves": [[request(length, 1)]]}
        for number, (cached, new) in enumerate(self.cached):
            seed = f"cached-{number}"
            yield {"name": f"{new} after {cached} cached", "waves": [[request(cached, 1, seed)], [request(cached + new, 1, seed)]]}
        for batch in self.decode_batches:
            for context in self.decode_contexts:
                yield {"name": f"{batch} decodes at {context}", "waves": [[request(context, self.decode_steps)] * batch]}
        for decodes, context, prompt in self.mixed:
            # the decodes last until the prompt's chunks have run beside them
            steps = self.decode_steps + 4 + prompt // 128
            yield {
                "name": f"{decodes} decodes at {context} + a {prompt}-token prompt",
                "waves": [[request(context, steps)] * decodes, [request(prompt, 2)]],
            }


def calibration_parameters(parameters: Mapping[str, str], design: VllmDesign) -> dict[str, str]:
    """The config's knobs, with room for the design's largest batch and vLLM's logging of steps on."""
    seqs = max(int(parameters.get("max_num_seqs", "16")), design.max_batch)
    return {**parameters, "max_num_seqs": str(seqs)}


def record(checkpoint: Path, parameters: Mapping[str, str], design: VllmDesign) -> dict:
    """Run llm.vllm_engine.step_recorder in .venv-vllm; its result (steps, vLLM version, knobs).
    Its files go to a folder of its own under build/simulate/ (two calibrations may run at
    once), removed after a success and kept, with vLLM's log, after a failure."""
    if not VLLM_PYTHON.is_file():
        raise FileNotFoundError(f"no vLLM environment at {VLLM_PYTHON}; run `make vllm-venv`")
    (BUILD_DIR / "simulate").mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="vllm-steps-", dir=BUILD_DIR / "simulate"))
    out, log_path = workdir / "steps.json", workdir / "recorder.log"
    request = {"parameters": calibration_parameters(parameters, design), "scenarios": list(design.scenarios()), "rounds": design.rounds}
    command = [str(VLLM_PYTHON), "-m", "llm.vllm_engine.step_recorder", "--model", str(checkpoint), "--out", str(out)]
    scenarios = len(request["scenarios"])
    log.info("recording vLLM's steps: %d scenarios x %d round(s) (the engine's log: %s)", scenarios, design.rounds, log_path)
    with open(log_path, "wb") as output:
        finished = subprocess.run(
            command, input=json.dumps(request).encode(), stdout=output, stderr=subprocess.STDOUT, timeout=RECORD_TIMEOUT_S, check=False
        )
    if finished.returncode != 0 or not out.is_file():
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-25:])
        raise RuntimeError(f"vLLM's step recorder failed (exit status {finished.returncode}; its files: {workdir}):\n{tail}")
    result = json.loads(out.read_text())
    shutil.rmtree(workdir, ignore_errors=True)
    return result


def step_shape(step: Mapping) -> StepShape:
    """A recorded step's shape: per request [tokens scheduled, tokens computed before, prompt length]."""
    return StepShape.of_pieces((count, start, start >= prompt) for count, start, prompt in step["chunks"])


def step_seconds(steps: Sequence[Mapping]) -> list[float]:
    """Each step's cycle: to the next step's start when the engine went straight on, else to its
    update's end (the engine then waited for work, which is not the step's cost)."""
    seconds = []
    for index, step in enumerate(steps):
        following = steps[index + 1] if index + 1 < len(steps) else None
        if step.get("busy_after") and following is not None and following["started"] >= step["ended"]:
            seconds.append(following["started"] - step["started"])
        else:
            seconds.append(step["ended"] - step["started"])
    return seconds


def kind_of(shape: StepShape) -> str:
    if shape.prefill_tokens and shape.decode_seqs:
        return "mixed"
    return "prefill" if shape.prefill_tokens else "decode"


def elapsed_check(steps: Sequence[Mapping]) -> dict | None:
    """The recorded steps against vLLM's own iteration details (elapsed_ms covers the model's
    execution and sampling; the recorder's span adds the scheduler's own work around it)."""
    pairs = [((step["ended"] - step["started"]) * 1000.0, step["vllm_elapsed_ms"]) for step in steps if step.get("vllm_elapsed_ms")]
    if not pairs:
        return None
    extra = [recorded - elapsed for recorded, elapsed in pairs]
    ratios = [recorded / elapsed for recorded, elapsed in pairs]
    return {
        "steps": len(pairs),
        "median_ratio": round(statistics.median(ratios), 4),
        "median_extra_ms": round(statistics.median(extra), 3),
        "max_extra_ms": round(max(extra), 3),
        "composition_agrees": all(
            step.get("vllm_ctx_tokens") is None or step["vllm_ctx_tokens"] == step_shape(step).prefill_tokens for step in steps
        ),
    }


def fit_recorded(result: Mapping, statistic: str = "median", checkpoint: Path | None = None) -> StepCostModel:
    """The step cost model of a recorder result (steps of one shape reduced by `statistic`)."""
    if statistic not in ("median", "min"):
        raise ValueError(f"statistic must be median or min, got {statistic!r}")
    steps = list(result["steps"])
    if not steps:
        raise ValueError("the recorder recorded no step")
    samples: dict[StepShape, list[float]] = defaultdict(list)
    for step, seconds in zip(steps, step_seconds(steps)):
        samples[step_shape(step)].append(seconds)
    pick = statistics.median if statistic == "median" else min
    shapes = list(samples)
    seconds = [pick(samples[shape]) for shape in shapes]
    knobs = result.get("knobs", {})
    engine = {
        "engine": "vllm",
        "vllm": result.get("vllm"),
        "checkpoint": str(checkpoint) if checkpoint else None,
        "dtype": knobs.get("dtype"),
        "block_size": knobs.get("block_size"),
        "enforce_eager": knobs.get("enforce_eager"),
        "max_num_batched_tokens": knobs.get("max_num_batched_tokens"),  # the compiled graph's budget when measured
        "kv_blocks": result.get("kv_blocks"),
        "statistic": statistic,
        "step_time": "the engine core's cycle, schedule() to the next schedule()",
    }
    model = StepCostModel.fitted(shapes, seconds, machine=describe_cpu(), engine=engine)
    by_kind: dict[str, list[float]] = defaultdict(list)
    for shape, measured in zip(shapes, seconds):
        by_kind[kind_of(shape)].append(abs(model.seconds(shape) - measured) / measured)
    quality = {
        "recorded_steps": len(steps),
        "median_rel_error_by_kind": {kind: round(statistics.median(errors), 4) for kind, errors in sorted(by_kind.items())},
        "shapes_by_kind": {kind: len(errors) for kind, errors in sorted(by_kind.items())},
        "vllm_elapsed_check": elapsed_check(steps),
        "engine_start_s": result.get("engine_start_s"),
        "record_s": result.get("seconds"),
    }
    samples_out = [{**vars(s), "seconds": round(t, 6), "predicted": round(model.seconds(s), 6)} for s, t in zip(shapes, seconds)]
    return StepCostModel(model.coefficients, model.machine, model.engine, {**model.fit, **quality, "steps": samples_out})


def measure_vllm(
    config: Path, design: VllmDesign, checkpoint: Path | None = None, overrides: Mapping[str, str] | None = None
) -> StepCostModel:
    """Record vLLM's steps under `config`'s knobs (with `overrides`) and fit the step cost model."""
    from llm.artifacts import HF_FOLDER
    from llm.serving.knobs import parameters_from_pbtxt
    from tools.simulate.llm.setup import DEFAULT_CHECKPOINT

    checkpoint = checkpoint or DEFAULT_CHECKPOINT / HF_FOLDER
    parameters = {**parameters_from_pbtxt(config), **(overrides or {})}
    result = record(checkpoint, parameters, design)
    return fit_recorded(result, design.statistic, checkpoint)
