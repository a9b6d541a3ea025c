"""The search space of a sweep from the settings, the served config and, unless given, the measured batch curve."""

from __future__ import annotations

import logging

from tools.load.requests import TOKEN_IDS, input_kind
from tools.loadgen.curve import encoder_batch, knee, measure_curve
from tools.paths import MODEL_REPOSITORY
from tools.repo.artifacts import ensemble_batch_floor
from tools.repo.model_config import (
    ModelConfig,
    has_priority_queues,
)
from tools.tune import guided
from tools.tune.settings import PREFERRED_DEFAULT, TuneSettings
from tools.tune.space import SearchSpace

log = logging.getLogger("tune")


def search_space(settings: TuneSettings, http_url: str, base: ModelConfig) -> SearchSpace:
    styles = tuple(s.strip() for s in settings.preferred.split(",") if s.strip())
    if settings.space:
        import yaml

        values = yaml.safe_load(settings.space.read_text()) or {}
        values.setdefault("preferred_styles", styles)
        values["preferred_styles"] = tuple(values["preferred_styles"])
        return SearchSpace(**values)
    sizes, delays = settings.max_batch_sizes, settings.delays_us
    if settings.strategy == "model-guided":  # simulating is cheap: a fine space, no live batch curve
        sizes = sizes or [size for size in guided.FINE_MAX_BATCH_SIZES if size <= base.max_batch_size] or [base.max_batch_size]
        delays = delays or guided.FINE_DELAYS_US
        styles = styles if settings.preferred != PREFERRED_DEFAULT else tuple(guided.FINE_PREFERRED.split(","))
    if sizes is None or delays is None:
        derived_sizes, derived_delays, knee_size = derive_space(settings, http_url, base)
        sizes, delays = sizes or derived_sizes, delays or derived_delays
        if knee_size and settings.preferred == PREFERRED_DEFAULT:
            styles = (*styles, str(knee_size), f"{knee_size}+{knee_size * 2}")
    floor, ensembles = ensemble_batch_floor(MODEL_REPOSITORY, settings.model)
    allowed = [size for size in sizes if size >= floor]
    if len(allowed) < len(sizes):
        log.info(
            "max_batch_size below %d left out: ensemble(s) %s send up to that many rows per request to %s; "
            "smaller executed batches are explored through preferred sizes",
            floor,
            ", ".join(ensembles),
            settings.model,
        )
    if not allowed:
        allowed = [floor]
    return SearchSpace(
        allowed, delays, styles, settings.instances, priority_queue_options(settings) if has_priority_queues(base) else [False]
    )


def priority_queue_options(settings: TuneSettings) -> list[bool]:
    """Which priority-queue settings candidates may take; see --priority-queues."""
    if settings.priority_queues == "keep":
        return [True]
    if settings.priority_queues == "try-without":
        return [False, True]
    needed = bool(settings.priority_mix) or settings.objective == "mixed"
    return [True] if needed else [False, True]


def derive_space(settings: TuneSettings, http_url: str, base: ModelConfig) -> tuple[list[int], list[int], int]:
    """Batch sizes around the knee of the measured curve; delays as fractions of one
    knee-sized execution (waiting longer than a batch takes rarely pays)."""
    base_max_batch = base.max_batch_size
    if input_kind(base) != TOKEN_IDS:  # a text model: no token-id curve to measure
        return [4, 8, 16, 32], [0, 1000, 4000, 10000], 0
    sizes = [b for b in (1, 2, 4, 8, 16, 32, 64) if b <= base_max_batch]
    log.info("measuring the batch curve of %s at %d tokens (batch sizes %s)", settings.model, settings.seq_len, sizes)
    point = knee(measure_curve(http_url, settings.model, encoder_batch(settings.seq_len), sizes))
    log.info("knee: batch %d (%.1f ms per execution)", point.batch_size, point.execution_ms)
    candidates = sorted({max(1, point.batch_size // 2), point.batch_size, point.batch_size * 2, base_max_batch})
    execution_us = point.execution_ms * 1000
    delays = sorted({0, *(round(execution_us * f / 100.0) * 100 for f in (0.1, 0.25, 0.5, 1.0))})
    return candidates, delays, point.batch_size
