"""The calibration harness: what measures a real GPU (torch, and Triton's kernel) to
write the calibration files every run can use.

:mod:`calibrate.harness.measure` runs ``kvsim calibrate`` (:mod:`calibrate.harness.cli`
is its command line), timing steps of a (reduced) model built by
:mod:`calibrate.harness.torch_model` and :mod:`calibrate.harness.torch_runner` with the
paged attention of :mod:`calibrate.harness.paged_attention` (torch) or
:mod:`calibrate.harness.triton_attention` (Triton), over the grid of
:mod:`calibrate.harness.profile_sweep`; memory through
:mod:`calibrate.harness.memory_backend`; outputs checked and written by
:mod:`calibrate.harness.output_files`; :mod:`calibrate.harness.gpu_check` (run by
``calibrate/gpu_check.sh``) checks the CUDA paths on hardware. Importing this package
imports no torch (``tests/test_calibrate_no_torch.py``): ``paged_attention`` and
``torch_model`` import it at their top, the others in the functions that use it.

The hardware model every run uses (catalog, roofline, KV budget, all-reduce, front
end, fits) is the rest of :mod:`calibrate`.
"""
