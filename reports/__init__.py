"""Plots and HTML reports (not yet built)."""
