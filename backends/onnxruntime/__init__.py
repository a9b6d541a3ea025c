"""The Python-based `onnxruntime` backend: configs that say `platform: "onnxruntime_onnx"` run here unchanged."""
