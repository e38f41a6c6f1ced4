"""Fit the roofline's efficiency factors to a real server's measured request times
(``kvsim calibrate --from-trace``): replay the trace through kvcore, express each
request's measured times as sums of step times, solve for the factors, repeat."""
