"""kvcc_confirm: plays kvcc recorded runs into vLLM's own scheduler and aggregator.

`kvcc confirm` and the differential tests write a model run as recorded runs
(docs/recorded-run.md) and run `python -m kvcc_confirm RUN_DIR...` with the Python of a
virtual environment that has vLLM. For each engine directory this package builds vLLM's
real `Scheduler` (v1/core/sched/scheduler.py) with vLLM's real NixlConnector scheduler
side, feeds every step's per-rank connector outputs through vLLM's real
`KVOutputAggregator` into `Scheduler.update_from_output`, applies the run's scheduler
inputs (a request finishing prefill, a request admitted to wait for remote KV, a client
abort) through vLLM's own paths, and writes what vLLM's scheduler did as one JSON line.
It decides nothing: kvcc (Rust) compares vLLM's events with the model's.
"""

FORMAT_VERSION = 1
