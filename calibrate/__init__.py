"""Model/GPU catalog, latency models and the calibration harness."""

import kvsim_native  # noqa: F401  # first: its guard decides whether compiled modules load
