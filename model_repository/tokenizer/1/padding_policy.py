"""How wide the tokenizer pads each request (pure functions; imported by model.py).

Triton's dynamic batcher joins only requests of equal shape (unless the next model's
inputs allow ragged batches), so the width each request is padded to decides which
requests can share an encoder execution, and how many padding tokens it computes:

- `batch`: every request of one tokenizer execution is padded to the
  longest text in it, rounded up to `pad_to_multiple_of`. Requests of one tokenizer
  batch travel on together, but a short query pays for the passage it was batched with.
- `buckets`: each request is padded to the smallest `length_buckets` boundary that
  holds its longest text, so same-bucket requests share a shape whichever tokenizer
  batch they came from, and a query never pays for a passage.
- `request` (the `ragged` policy, committed): each request is padded to its own longest
  text only (no rounding); meant
  for an encoder whose inputs allow ragged batches (its backend pads and splits what it
  receives).

Chosen by the tokenizer's config parameters `padding`, `length_buckets` and
`pad_to_multiple_of` (tools/repo/length_policy.py writes them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

MODES = ("batch", "buckets", "request")
DEFAULT_BUCKETS = (16, 32, 64, 128, 256)


def round_up(length: int, multiple: int) -> int:
    return -(-length // multiple) * multiple


def bucket_for(length: int, buckets: Sequence[int]) -> int:
    """The smallest boundary >= length; past the largest, the length rounded up to it
    (the tokenizer truncates to the model's limit, so that only happens with buckets
    below the limit)."""
    for boundary in buckets:
        if length <= boundary:
            return boundary
    return round_up(length, buckets[-1])


def parse_buckets(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(item) for item in text.split(",") if item.strip())
    except ValueError:
        raise ValueError(f"length_buckets {text!r} is not a comma-separated list of integers") from None
    if not values or any(v < 1 for v in values) or list(values) != sorted(set(values)):
        raise ValueError(f"length_buckets {text!r} must be distinct positive integers in ascending order")
    return values


@dataclass(frozen=True)
class PaddingPolicy:
    mode: str = "batch"
    multiple: int = 16
    buckets: tuple[int, ...] = DEFAULT_BUCKETS

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"padding {self.mode!r} is not one of {', '.join(MODES)}")
        if self.multiple < 1:
            raise ValueError(f"pad_to_multiple_of must be >= 1, got {self.multiple}")

    @classmethod
    def from_parameters(cls, parameters: dict[str, str]) -> PaddingPolicy:
        """From the config's string parameters (absent ones keep the committed defaults)."""
        try:
            multiple = int(parameters.get("pad_to_multiple_of", "16"))
        except ValueError:
            raise ValueError(f"pad_to_multiple_of {parameters['pad_to_multiple_of']!r} is not an integer") from None
        buckets = parse_buckets(parameters["length_buckets"]) if parameters.get("length_buckets") else DEFAULT_BUCKETS
        return cls(parameters.get("padding", "batch"), multiple, buckets)

    def widths(self, longest: Sequence[int]) -> list[int]:
        """Padded width for each request of one execution, given each request's longest text."""
        if not longest:
            return []
        if self.mode == "batch":
            return [round_up(max(longest), self.multiple)] * len(longest)
        if self.mode == "buckets":
            return [bucket_for(length, self.buckets) for length in longest]
        return list(longest)

    @property
    def sends_by_width(self) -> bool:
        """Whether responses should leave narrowest first: the encoder's batcher joins only
        consecutive requests of one shape (a different shape closes the pending batch), so
        grouping widths keeps same-shape requests together, and cheap ones go first."""
        return self.mode != "batch"


def longest_per_request(lengths: np.ndarray, counts: Sequence[int]) -> list[int]:
    """Each request's longest text (0 for a request without texts), from every text's token
    count in request order and each request's text count: one vectorised reduction."""
    if not counts:
        return []
    starts = np.concatenate(([0], np.cumsum(counts[:-1], dtype=np.int64)))
    # a trailing 0 keeps the start of an empty last request in range; empty requests are masked
    longest = np.maximum.reduceat(np.append(lengths, 0), starts)
    return np.where(np.asarray(counts) > 0, longest, 0).tolist()


def pad_rows(rows: Sequence[Sequence[int]], width: int, pad_id: int, lengths: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """INPUT_IDS and ATTENTION_MASK (INT64, [len(rows), width]) for unpadded token id rows no
    longer than `width`, right-padded with `pad_id` (what the library's `enable_padding` gives),
    filled in one vectorised step: the library's own padding built a Python list per row for
    ids and again for masks, and a per-row loop here would cost as much."""
    if lengths is None:
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    real = np.arange(width) < lengths[:, None]
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    ids[real] = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
    return ids, real.astype(np.int64)
