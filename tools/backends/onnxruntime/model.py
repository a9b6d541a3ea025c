"""A Python-based Triton backend named `onnxruntime` (CPU ONNX Runtime).

The nvidia-pytriton wheel ships no native ONNX Runtime backend, so this module stands
in for it: models keep `platform: "onnxruntime_onnx"` and run unchanged on NVIDIA's
container, where the native backend takes over. Each execute() joins every request
of the batch into one session run (padding the sequence axis to the longest request,
so ragged batches work too) and splits the outputs back per request.

One bad request must not fail its batch-mates: ids that index an embedding table are
checked against the table's size before the run (a 400 naming the input and value),
and when a joined run still fails, each request is run alone so only the offending
one gets the error.

With the config parameter `ragged_split: "cost"` (the ragged padding policy, inputs with
`allow_ragged_batch`), an execution's rows are sorted by real length and split into the
sub-runs a fitted cost curve says are cheapest (ragged.py), shortest first, and each
request's response is sent as soon as its rows are done (a non-decoupled model may use
the response sender on Triton 2.51, verified live). Real and padding tokens computed are
Triton custom metrics (padding_metrics.py).
"""

import json
import os
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils
from padding_metrics import PaddingCounters
from ragged import CostModel, CostTracker, SplitExecution, calibrate

_NUMPY_TYPES = {
    "TYPE_FP32": np.float32,
    "TYPE_FP16": np.float16,
    "TYPE_FP64": np.float64,
    "TYPE_INT64": np.int64,
    "TYPE_INT32": np.int32,
    "TYPE_INT8": np.int8,
    "TYPE_UINT8": np.uint8,
    "TYPE_BOOL": np.bool_,
}


def _error(message: str, invalid_argument: bool = False):
    """A per-request error; bad input is INVALID_ARG (HTTP 400), not an internal error (500)."""
    code = getattr(pb_utils.TritonError, "INVALID_ARG" if invalid_argument else "INTERNAL", None)
    return pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)


def _lookup_bounds(path: Path) -> dict[str, int]:
    """Graph inputs used directly as Gather indices into an initializer (an embedding
    table): input name -> number of rows. ONNX Runtime reads a negative index from the
    end of the table and refuses one past it mid-batch, so both are checked up front."""
    try:
        import onnx
    except ImportError:  # optional: without it, only the run-time isolation applies
        return {}
    graph = onnx.load(str(path), load_external_data=False).graph
    inputs = {item.name for item in graph.input}
    tables = {init.name: int(init.dims[0]) for init in graph.initializer if init.dims}
    bounds: dict[str, int] = {}
    for node in graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] in inputs and node.input[0] in tables:
            rows = tables[node.input[0]]
            bounds[node.input[1]] = min(rows, bounds.get(node.input[1], rows))
    return bounds


def _cpu_instances(config: dict) -> int:
    return sum(int(group.get("count", 1) or 1) for group in config.get("instance_group", []) if group.get("kind") != "KIND_GPU") or 1


def _session_options(config: dict) -> ort.SessionOptions:
    """Threads per session: `intra_op_thread_count` if set, else the core budget
    (OMP_NUM_THREADS, or every core) shared out among the CPU instances: each instance
    taking the whole budget would have two instances fight over the same cores."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    explicit = config.get("parameters", {}).get("intra_op_thread_count", {}).get("string_value")
    budget = int(os.environ.get("OMP_NUM_THREADS") or 0) or os.cpu_count() or 1
    options.intra_op_num_threads = int(explicit) if explicit else max(1, budget // _cpu_instances(config))
    return options


def _providers(args: dict) -> list:
    """CUDA for KIND_GPU instances when onnxruntime-gpu is installed (requirements-gpu.txt), else CPU."""
    if args.get("model_instance_kind") == "GPU":
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise pb_utils.TritonModelException(
                "KIND_GPU instance, but this onnxruntime has no CUDA provider (pip install -r requirements-gpu.txt)"
            )
        return [("CUDAExecutionProvider", {"device_id": int(args.get("model_instance_device_id", 0))}), "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def _stack(arrays: list[np.ndarray], dtype: np.dtype) -> np.ndarray:
    """Concatenate along the batch axis, padding trailing axes with zeros when shapes differ."""
    if all(array.shape[1:] == arrays[0].shape[1:] for array in arrays):
        return np.concatenate(arrays, axis=0).astype(dtype, copy=False)
    trailing = tuple(max(sizes) for sizes in zip(*(array.shape[1:] for array in arrays)))
    joined = np.zeros((sum(len(array) for array in arrays), *trailing), dtype=dtype)
    row = 0
    for array in arrays:
        joined[(slice(row, row + len(array)), *(slice(0, size) for size in array.shape[1:]))] = array
        row += len(array)
    return joined


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        filename = config.get("default_model_filename") or "model.onnx"
        path = Path(args["model_repository"]) / args["model_version"] / filename
        if not path.is_file():
            raise pb_utils.TritonModelException(f"ONNX model file not found: {path}")
        try:
            self.session = ort.InferenceSession(str(path), _session_options(config), providers=_providers(args))
        except Exception as exc:  # ONNX Runtime raises its own exception types
            raise pb_utils.TritonModelException(f"cannot load {path}: {exc}") from exc
        self.inputs = [(item["name"], _NUMPY_TYPES[item["data_type"]]) for item in config["input"]]
        self.outputs = [item["name"] for item in config["output"]]
        session_inputs = {item.name for item in self.session.get_inputs()}
        unknown = [name for name, _ in self.inputs if name not in session_inputs]
        if unknown:
            raise pb_utils.TritonModelException(f"config inputs {unknown} are not inputs of {path.name}: {sorted(session_inputs)}")
        self.bounds = _lookup_bounds(path)
        self.mask_input = next((name for name, _ in self.inputs if "MASK" in name.upper()), None)
        self.counters = PaddingCounters(pb_utils, {"model": args["model_name"], "version": args["model_version"]})
        self.split_cost, self.split_max_rows = self._split_settings(config)

    def _split_settings(self, config: dict) -> tuple[CostTracker | None, int]:
        """The cost curve for splitting executions (None: one run per execution): pinned by
        config parameters, or fitted here from a few timed runs (about a second on a 2-core
        CPU) and then refitted from the served runs."""
        parameters = {key: value.get("string_value", "") for key, value in config.get("parameters", {}).items()}
        mode = parameters.get("ragged_split", "none")
        if mode == "none":
            return None, 0
        if mode != "cost":
            raise pb_utils.TritonModelException(f"ragged_split {mode!r} is not 'none' or 'cost'")
        if self.mask_input is None or any(len(item.get("dims", [])) != 1 for item in config["input"]):
            raise pb_utils.TritonModelException("ragged_split needs [length] inputs and an attention-mask input (a name with MASK)")
        try:
            cost = CostModel.from_parameters(parameters)
            max_rows = int(parameters.get("split_max_rows", "0"))
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"ragged_split: {exc}") from exc
        pinned = cost is not None
        source = "pinned by the config"
        if cost is None:
            cost, samples = calibrate(self._run_shape)
            source = "calibrated on " + ", ".join(f"{rows}x{length}: {seconds * 1000:.1f} ms" for rows, length, seconds in samples)
            source += "; refitted from served runs"
        pb_utils.Logger.log_info(f"ragged_split: cost curve {cost.describe()} ({source})")
        self._logged_break_even = cost.break_even_tokens
        return CostTracker(cost, adaptive=not pinned), max_rows

    def _log_refit(self) -> None:
        """Log a refitted curve when it moves the break-even by more than 2x (rare), else only verbosely."""
        model = self.split_cost.model
        moved = not 0.5 <= model.break_even_tokens / max(self._logged_break_even, 1e-9) <= 2.0
        log = pb_utils.Logger.log_info if moved else pb_utils.Logger.log_verbose
        log(f"ragged_split: cost curve refitted from served runs: {model.describe()}")
        if moved:
            self._logged_break_even = model.break_even_tokens

    def _run_shape(self, rows: int, length: int) -> None:
        self.session.run(self.outputs, {name: np.ones((rows, length), dtype=dtype) for name, dtype in self.inputs})

    def _check(self, arrays: dict[str, np.ndarray]) -> str | None:
        """Why one request's inputs cannot run (None when they can)."""
        for name, rows in self.bounds.items():
            array = arrays[name]
            if array.size and (array.min() < 0 or array.max() >= rows):
                bad = int(array.min()) if array.min() < 0 else int(array.max())
                return f"{name} holds {bad}, outside the embedding table's range 0..{rows - 1}"
        return None

    def _run(self, arrays: list[dict[str, np.ndarray]]) -> list:
        """One session run for these requests' inputs; the outputs split per request."""
        joined = {name: _stack([item[name] for item in arrays], dtype) for name, dtype in self.inputs}
        results = self.session.run(self.outputs, joined)
        if self.mask_input:
            self.counters.record_run(joined[self.mask_input])
        sizes = [len(item[self.inputs[0][0]]) for item in arrays]
        total = sum(sizes)
        if any(len(result) != total for result in results):
            raise RuntimeError(f"model returned {[len(r) for r in results]} rows for {total} inputs")
        responses, start = [], 0
        for size in sizes:
            tensors = [pb_utils.Tensor(name, result[start : start + size]) for name, result in zip(self.outputs, results)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start += size
        return responses

    def execute(self, requests: list) -> list | None:
        responses: list = [None] * len(requests)
        runnable: list[tuple[int, dict[str, np.ndarray]]] = []
        for index, request in enumerate(requests):
            arrays = {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name, _ in self.inputs}
            problem = self._check(arrays)
            if problem:
                responses[index] = pb_utils.InferenceResponse(error=_error(problem, invalid_argument=True))
            else:
                runnable.append((index, arrays))
        if not runnable:
            return responses
        self.counters.record_execution([arrays[self.inputs[0][0]].shape[1:] for _, arrays in runnable])
        if self.split_cost is not None:
            return self._execute_split(requests, responses, runnable)
        try:
            for (index, _), response in zip(runnable, self._run([arrays for _, arrays in runnable])):
                responses[index] = response
        except Exception:  # ONNX Runtime raises its own types; find the request(s) at fault
            for index, arrays in runnable:
                responses[index] = self._run_alone(arrays)
        return responses

    def _run_alone(self, arrays: dict[str, np.ndarray]):
        try:
            return self._run([arrays])[0]
        except Exception as exc:
            text = str(exc)
            return pb_utils.InferenceResponse(error=_error(f"ONNX Runtime failed: {text}", invalid_argument="INVALID_ARGUMENT" in text))

    def _execute_split(self, requests: list, responses: list, runnable: list[tuple[int, dict[str, np.ndarray]]]) -> None:
        """Sub-runs shortest first; each request's response leaves when its last row is done.
        A failed sub-run's requests are retried alone at the end, so only a faulty one fails."""

        def send(index: int, response) -> None:
            requests[index].get_response_sender().send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

        for index, response in enumerate(responses):
            if response is not None:  # refused before running
                send(index, response)
        plan = SplitExecution([arrays for _, arrays in runnable], self.mask_input, self.split_cost.model, self.split_max_rows)
        failed: set[int] = {position for position, (_, arrays) in enumerate(runnable) if len(arrays[self.mask_input]) == 0}
        for run in plan.runs:
            feeds = plan.feeds(run, self.inputs)
            try:
                started = time.perf_counter()
                results = self.session.run(self.outputs, feeds)
                if self.split_cost.observe(len(run), feeds[self.mask_input].shape[1], time.perf_counter() - started):
                    self._log_refit()
                if any(len(result) != len(run) for result in results):
                    raise RuntimeError(f"model returned {[len(r) for r in results]} rows for {len(run)} inputs")
            except Exception:
                failed |= plan.requests_in(run)
                continue
            self.counters.record_run(feeds[self.mask_input])
            for position in plan.store(run, results):
                if position not in failed:
                    tensors = [pb_utils.Tensor(name, output) for name, output in zip(self.outputs, plan.outputs(position))]
                    send(runnable[position][0], pb_utils.InferenceResponse(output_tensors=tensors))
        for position in sorted(failed):
            index, arrays = runnable[position]
            send(index, self._run_alone(arrays))
        return None
