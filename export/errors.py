"""Export failures a user can act on; kept apart from the heavy modules (torch, ONNX)
so the command can report them without importing those."""


class ExportError(RuntimeError):
    """The export cannot run here or with these arguments."""


class ParityError(RuntimeError):
    """The exported graph disagrees with the reference; nothing is written."""
