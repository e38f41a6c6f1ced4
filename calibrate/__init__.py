"""Model/GPU catalog, latency models and the calibration harness."""

import kvcore  # noqa: F401  # first: its guard decides whether compiled modules load
