"""``summary.json``'s ``client`` block: latencies as a benchmark client measures them
(:class:`calibrate.frontend.FrontendModel` added to the engine-side times)."""

from __future__ import annotations

from typing import Any

import numpy as np

from calibrate.frontend import FrontendModel
from sim.records.request_recorder import RequestRecorder


def client_summary(requests: RequestRecorder, frontend: FrontendModel, dist: Any) -> dict[str, Any]:
    """``{frontend, ttft_s, tpot_s, e2e_s}``: ``dist`` (the summary's ``{mean, p50, p90,
    p99}``) of client-side TTFT, TPOT and E2E over every finished request."""
    n = requests.num_finished
    if not n:
        empty = np.zeros(0)
        return {"frontend": frontend.describe(), "ttft_s": dist(empty), "tpot_s": dist(empty),
                "e2e_s": dist(empty)}  # fmt: skip
    delay = frontend.delay_s(np.frombuffer(requests.prompt_len, dtype=np.int64))
    ttft = np.frombuffer(requests.ttft_s) + delay
    e2e = np.frombuffer(requests.finish_s) - np.frombuffer(requests.arrival_s) + delay
    return {
        "frontend": frontend.describe(),
        "ttft_s": dist(ttft),
        "tpot_s": dist(np.frombuffer(requests.tpot_s)),
        "e2e_s": dist(e2e),
    }
