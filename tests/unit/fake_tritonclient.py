"""Stands in for a tritonclient module (grpc, http or their aio variants) in unit tests:
tensors keep the array each input was given, so a test can read what would be sent."""

from __future__ import annotations


class InferInput:
    def __init__(self, name: str, shape: list[int], datatype: str) -> None:
        self.name, self.shape, self.datatype = name, shape, datatype

    def set_data_from_numpy(self, array) -> None:
        self.array = array


class InferRequestedOutput:
    def __init__(self, name: str) -> None:
        self.name = name
