"""Serving, client and statistics tools around the Triton model repository."""
