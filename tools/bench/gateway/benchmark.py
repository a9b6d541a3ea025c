"""One benchmark run: start Triton and the gateway (and infinity-emb when installed), check
that they compute the same embeddings, then measure every target at every level, interleaved."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict

from tools.bench.gateway.client import Texts, closed_loop
from tools.bench.gateway.endpoints import gateway_target, infinity_target, parity, triton_target
from tools.bench.gateway.infinity_server import InfinityServer
from tools.bench.gateway.report import fmt
from tools.bench.gateway.settings import GatewayBenchSettings
from tools.machine import cpu_description
from tools.ports import free_ports
from tools.serve.gateway_process import GatewayProcess
from tools.serve.server_session import triton_endpoints

log = logging.getLogger("bench.gateway")


def measure(settings: GatewayBenchSettings) -> dict:
    """The report document (rendered by report.render)."""
    settings.out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    left_out: dict[str, str] = {}
    with triton_endpoints(None) as endpoints:
        gateway = GatewayProcess(endpoints.grpc_url, port=free_ports(1)[0], log_path=settings.out / "gateway.log").start()
        infinity = (
            InfinityServer(settings.infinity_venv, settings.infinity_engine, settings.out / "infinity.log") if settings.infinity else None
        )
        try:
            if not gateway.wait_ready(60):
                raise RuntimeError(f"the gateway never saw Triton ready{gateway.log_tail()}")
            targets = [gateway_target(gateway.url), triton_target(endpoints.http_url)]
            if infinity is not None:
                problem = infinity.start(timeout_s=300)
                if problem:
                    left_out[infinity_target("").name] = problem
                    log.warning("infinity-emb left out: %s", problem)
                else:
                    targets.append(infinity_target(infinity.url))
            cosines = parity(targets)
            log.info("min cosine to the gateway's embeddings: %s", cosines)
            texts = Texts(settings.texts_per_request)
            rows = []
            for level in settings.concurrency:
                order = targets[level % len(targets) :] + targets[: level % len(targets)]  # who goes first varies
                for target in order:
                    row = closed_loop(target, level, texts, settings.warmup_s, settings.seconds)
                    log.info(
                        "%-32s c=%-3d %7.1f req/s  p50 %s ms  p99 %s ms  max %s ms  errors %d",
                        row.target,
                        level,
                        row.rps,
                        fmt(row.p50_ms),
                        fmt(row.p99_ms),
                        fmt(row.max_ms),
                        row.errors,
                    )
                    rows.append(row)
        finally:
            if infinity is not None:
                infinity.stop()
            gateway.stop()
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cpu": cpu_description(),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "concurrency": settings.concurrency,
        "seconds": settings.seconds,
        "warmup_s": settings.warmup_s,
        "texts_per_request": settings.texts_per_request,
        "targets": [t.name for t in targets],
        "left_out": left_out,
        "min_cosine_to_first": cosines,
        "rows": [asdict(row) for row in rows],
    }
