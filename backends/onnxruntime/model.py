"""A Python-based Triton backend named `onnxruntime` (CPU ONNX Runtime).

The nvidia-pytriton wheel ships no native ONNX Runtime backend, so this module stands
in for it: models keep `platform: "onnxruntime_onnx"` and run unchanged on NVIDIA's
container, where the native backend takes over. Each execute() joins every request
of the batch into one session run (padding the sequence axis to the longest request,
so ragged batches work too) and splits the outputs back per request.

One bad request must not fail its batch-mates: ids that index an embedding table are
checked against the table's size, and the sequence length against the position table's,
before the run (a 400 naming the input and the limit); when a joined run still fails,
each request is run alone so only the offending one gets the error. The same checks
apply on the ragged split path below.

Threads follow the native backend's parameters (`intra_op_thread_count`,
`inter_op_thread_count`; unset or 0 is ONNX Runtime's default, every core), so one config
runs the same here and in NVIDIA's container; configs set them explicitly.

With the config parameter `ragged_split: "cost"` (the ragged padding policy, inputs with
`allow_ragged_batch`), an execution's rows are sorted by real length and split into the
sub-runs a fitted cost curve says are cheapest (ragged.py), shortest first, and each
request's response is sent as soon as its rows are done (a non-decoupled model may use
the response sender on Triton 2.51, verified live). Real and padding tokens computed are
Triton custom metrics (padding_metrics.py).
"""

import json
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils
from padding_metrics import PaddingCounters
from ragged import CALIBRATION_SHAPES, CostTracker, RunCostModel, SplitExecution, calibrate_run_cost

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


def _constant(name: str, graph, producers: dict) -> np.ndarray | None:
    """The value of an initializer or a Constant node's output (None when computed)."""
    from onnx import numpy_helper

    for init in graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    node = producers.get(name)
    if node is not None and node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
        return numpy_helper.to_array(node.attribute[0].t)
    return None


def _lookup_bounds(graph) -> dict[str, int]:
    """Graph inputs used directly as Gather indices into an initializer (an embedding
    table): input name -> number of rows. ONNX Runtime reads a negative index from the
    end of the table and refuses one past it mid-batch, so both are checked up front."""
    inputs = {item.name for item in graph.input}
    tables = {init.name: int(init.dims[0]) for init in graph.initializer if init.dims}
    bounds: dict[str, int] = {}
    for node in graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] in inputs and node.input[0] in tables:
            rows = tables[node.input[0]]
            bounds[node.input[1]] = min(rows, bounds.get(node.input[1], rows))
    return bounds


_PASS_THROUGH = {"Unsqueeze", "Squeeze", "Cast", "Identity", "Reshape"}


def _input_axis(name: str, graph, producers: dict) -> tuple[str, int] | None:
    """The graph input and axis whose size the value `name` carries: `Gather(Shape(input), axis)`,
    seen through reshaping and casts (how exporters turn a sequence length into a tensor)."""
    inputs = {item.name for item in graph.input}
    node = producers.get(name)
    while node is not None and node.op_type in _PASS_THROUGH:
        node = producers.get(node.input[0])
    if node is None or node.op_type != "Gather" or len(node.input) != 2:
        return None
    shape = producers.get(node.input[0])
    index = _constant(node.input[1], graph, producers)
    if shape is None or shape.op_type != "Shape" or shape.input[0] not in inputs or index is None or index.size != 1:
        return None
    start = next((int(a.i) for a in shape.attribute if a.name == "start"), 0)
    return shape.input[0], start + int(index.reshape(-1)[0])


def _position_limit(graph) -> tuple[str, int, int] | None:
    """(input, axis, positions) for a position-embedding table: a Gather from an initializer
    whose indices are a Range, or a Slice of a constant position-id buffer, ending at an
    input's dimension. A longer sequence would index past the table and fail inside ONNX
    Runtime as an internal error (a broadcast mismatch), so it is checked up front."""
    producers = {output: node for node in graph.node for output in node.output}
    tables = {init.name: int(init.dims[0]) for init in graph.initializer if init.dims}
    found: tuple[str, int, int] | None = None
    for node in graph.node:
        if node.op_type != "Gather" or len(node.input) != 2 or node.input[0] not in tables:
            continue
        source = producers.get(node.input[1])
        if source is None or source.op_type not in ("Slice", "Range") or len(source.input) < 3:
            continue
        limit = tables[node.input[0]]
        if source.op_type == "Slice":  # positions[:, :length]: the buffer can be shorter than the table
            buffer = _constant(source.input[0], graph, producers)
            if buffer is None:
                continue
            limit = min(limit, int(buffer.shape[-1]))
        axis = _input_axis(source.input[2] if source.op_type == "Slice" else source.input[1], graph, producers)
        if axis is not None and (found is None or limit < found[2]):
            found = (*axis, limit)
    return found


def _inspect(path: Path) -> tuple[dict[str, int], tuple[str, int, int] | None]:
    """Lookup bounds and the position limit of the graph at `path` (read once, weights left out)."""
    try:
        import onnx
    except ImportError:  # optional: without it, only the run-time isolation applies
        return {}, None
    graph = onnx.load(str(path), load_external_data=False).graph
    return _lookup_bounds(graph), _position_limit(graph)


def _thread_count(config: dict, key: str) -> int:
    """A thread-count parameter as the native backend reads it; unset means 0 (ONNX Runtime's default)."""
    text = config.get("parameters", {}).get(key, {}).get("string_value", "0")
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise pb_utils.TritonModelException(f"parameter {key} must be a whole number >= 0 (0: every core), got {text!r}")
    return value


def _session_options(config: dict) -> ort.SessionOptions:
    """Threads per session exactly as NVIDIA's native backend sets them from the same config:
    `intra_op_thread_count` / `inter_op_thread_count`, 0 or unset leaving ONNX Runtime's
    default (every core, per instance). The committed and tuned configs set them."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = _thread_count(config, "intra_op_thread_count")
    options.inter_op_num_threads = _thread_count(config, "inter_op_thread_count")
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
        bounds, positions = _inspect(path)
        names = {name for name, _ in self.inputs}  # only what requests carry can be checked
        self.bounds = {name: rows for name, rows in bounds.items() if name in names}
        self.positions = positions if positions and positions[0] in names else None
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
            cost = RunCostModel.from_parameters(parameters)
            max_rows = int(parameters.get("split_max_rows", "0"))
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"ragged_split: {exc}") from exc
        pinned = cost is not None
        source = "pinned by the config"
        if cost is None:
            cost, samples = calibrate_run_cost(self._run_shape, self._calibration_shapes())
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

    def _calibration_shapes(self) -> tuple[tuple[int, int], ...]:
        """The calibration shapes cut to the model's position table: a longer run would fail
        (the exported MiniLM's 512 positions hold them all)."""
        limit = self.positions[2] if self.positions else None
        shapes = CALIBRATION_SHAPES if limit is None else [(rows, min(length, limit)) for rows, length in CALIBRATION_SHAPES]
        return tuple(dict.fromkeys(shapes))

    def _run_shape(self, rows: int, length: int) -> None:
        self.session.run(self.outputs, {name: np.ones((rows, length), dtype=dtype) for name, dtype in self.inputs})

    def _check(self, arrays: dict[str, np.ndarray]) -> str | None:
        """Why one request's inputs cannot run (None when they can)."""
        if self.positions:
            name, axis, limit = self.positions
            shape = arrays[name].shape
            if len(shape) > axis and shape[axis] > limit:
                return f"{name} holds {shape[axis]} tokens, more than the model's {limit} positions (its maximum sequence length)"
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
