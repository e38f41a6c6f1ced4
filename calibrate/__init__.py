"""Model/GPU catalog, latency models and the calibration harness (not yet built)."""
