"""Code that runs inside Triton: our Python-based backends, one folder per backend.

Each folder holds a `model.py` and the sibling modules it imports; tools.serve copies the
folder into the server's `--backend-directory`. Triton's Python stub imports these modules
by their bare names, so nothing here imports the tools (an import contract checks it).
"""
