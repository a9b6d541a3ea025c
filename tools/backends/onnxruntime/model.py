"""A Python-based Triton backend named `onnxruntime` (CPU ONNX Runtime).

The nvidia-pytriton wheel ships no native ONNX Runtime backend, so this module stands
in for it: models keep `platform: "onnxruntime_onnx"` and run unchanged on NVIDIA's
container, where the native backend takes over. Each execute() joins every request
of the batch into one session run (padding the sequence axis to the longest request,
so ragged batches work too) and splits the outputs back per request.
"""

import json
import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

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


def _session_options(config: dict) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    parameters = config.get("parameters", {})
    intra = parameters.get("intra_op_thread_count", {}).get("string_value")
    options.intra_op_num_threads = int(intra) if intra else int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
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

    def execute(self, requests: list) -> list:
        feeds: dict[str, list[np.ndarray]] = {name: [] for name, _ in self.inputs}
        sizes = []
        for request in requests:
            first = None
            for name, _ in self.inputs:
                array = pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                feeds[name].append(array)
                first = len(array) if first is None else first
            sizes.append(first)
        joined = {name: _stack(feeds[name], dtype) for name, dtype in self.inputs}
        try:
            results = self.session.run(self.outputs, joined)
        except Exception as exc:  # a bad value in one request fails the batch with ORT's message
            error = pb_utils.TritonError(f"ONNX Runtime failed: {exc}")
            return [pb_utils.InferenceResponse(error=error) for _ in requests]
        total = sum(sizes)
        if any(len(result) != total for result in results):
            error = pb_utils.TritonError(f"model returned {[len(r) for r in results]} rows for {total} inputs")
            return [pb_utils.InferenceResponse(error=error) for _ in requests]
        responses = []
        start = 0
        for size in sizes:
            tensors = [pb_utils.Tensor(name, result[start : start + size]) for name, result in zip(self.outputs, results)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start += size
        return responses
