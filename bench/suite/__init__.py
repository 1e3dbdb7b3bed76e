"""The llmaz benchmark suite: scenarios that run our manager and its Go counterparts against a local control
plane, each subject in its own process, and a report of medians and Python/Go ratios.

Entry point: `bench/run.py` (`make bench`). Modules:
- `settings`: sizes, repetitions and durations from the environment (BENCH_*).
- `procstat`: CPU seconds and resident memory of a process, from /proc.
- `golang`: builds the Go subjects into the cache, only when missing.
- `cluster`: one fresh control plane per run, set up for a subject's API flavour; API server request counts.
- `workload`, `tracker`: the objects a run creates, and a watch that sees when they have converged.
- `subjects`: how each subject process is started and stopped.
- `controllers_bench`, `runtime_bench`, `admission_bench`, `limit_bench`, `memory_bench`, `serving_bench`,
  `gateway_bench`, `autoscale_bench`: the scenarios (`gateway_engine` and `gateway_launcher` are the gateway
  scenario's fake engine and gateway processes).
- `report`: the Markdown table, the plots and the stdout summary.
"""
