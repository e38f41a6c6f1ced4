"""Fits of the roofline's size-dependent efficiency curves and all-reduce costs to
public A100-80GB measurements (Vidur's profiling data, microsoft/vidur, MIT licence;
excerpts in ``tests/data/vidur_a100``), each with its error on held-out sizes.

``python scripts/fit_roofline.py`` prints every fit and its holdout errors; the
defaults in :mod:`calibrate.efficiency_curves` and :mod:`calibrate.allreduce` are
these fits' results (``tests/test_roofline_fit.py`` refits and compares).
"""
