"""What a run writes and concludes: the records and what is read from them.

- :mod:`sim.records.recorders`: ``steps.csv``, and :mod:`sim.records.request_recorder`
  ``requests.csv``, as the engines record them (a step's row typed in
  :mod:`sim.records.step_row`, its text in :mod:`sim.records.step_rows`; the thin and
  Parquet forms in :mod:`sim.records.step_thin`, :mod:`sim.records.step_parquet`; P/D's
  columns in
  :mod:`sim.records.pd`), ``decisions.jsonl``'s line in :mod:`sim.records.decision_line`.
- :mod:`sim.records.summary`: ``summary.json``; :mod:`sim.records.client_side` its
  client-side block, :mod:`sim.records.goodput` goodput.
- :mod:`sim.records.window`: the steady-state window; :mod:`sim.records.verdict`:
  whether the run holds its load.
"""
