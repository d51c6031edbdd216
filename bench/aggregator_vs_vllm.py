#!/usr/bin/env python3
"""kvcc's aggregator core against vLLM's own, on the same string-id reports.

Times vLLM's `KVOutputAggregator` (vllm/distributed/kv_transfer/kv_connector/utils.py,
imported from an installed vLLM, never copied) on the schedule `kvcc-bench` measures the
Rust core on: `kvcc-bench --aggregator-workload FILE` writes it, so both sides count the
same reports from one source. Then runs `kvcc-bench --aggregator --format json` and prints
the string-id setups' rank-reports per second next to vLLM's, and their ratios.

vLLM is optional: where `import vllm` fails this prints `skipped: ...` and exits 0, so CI
never depends on it. Usage, from the repository root after
`cargo build --release -p kvcc-bench`:

    python3 bench/aggregator_vs_vllm.py [--runs 3] [--passes 32]

Exit 0 when measured or skipped, 1 when an aggregator emitted the wrong ids, 2 on a
usage error (no kvcc-bench binary).
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BENCH = ROOT / "target" / "release" / "kvcc-bench"


def import_vllm_aggregator():
    """vLLM's aggregator and output types, or the reason they cannot be imported."""
    try:
        from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator
        from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
    except Exception as e:  # vLLM absent, or present without what it imports
        return None, f"{type(e).__name__}: {e}"
    return (KVOutputAggregator, KVConnectorOutput, ModelRunnerOutput), None


def time_vllm(classes, workload, passes):
    """Rank-reports per second through vLLM's aggregator: one warm-up pass, then
    `passes` timed ones, each of which must emit every id of the ring once."""
    aggregator_class, kv_output_class, runner_output_class = classes
    output_rank = workload["output_rank"]
    # Built before the clock: kvcc's bench hands its core prebuilt outputs too.
    steps = []
    for ranks in workload["finished_sending"]:
        kv_outputs = [kv_output_class(finished_sending=set(ids)) for ids in ranks]
        outputs = [runner_output_class(req_ids=[], kv_connector_output=kv) for kv in kv_outputs]
        steps.append((outputs, kv_outputs[output_rank]))
    aggregator = aggregator_class(workload["expected_finished_count"])

    def one_pass():
        emitted = 0
        for outputs, own in steps:
            # aggregate() replaces the output rank's connector output with the aggregate:
            # put the rank's own back (one attribute store a step, inside the timing).
            outputs[output_rank].kv_connector_output = own
            result = aggregator.aggregate(outputs, output_rank)
            emitted += len(result.kv_connector_output.finished_sending or ())
        return emitted

    one_pass()
    start = time.perf_counter()
    emitted = sum(one_pass() for _ in range(passes))
    seconds = time.perf_counter() - start
    want = passes * workload["emitted_per_pass"]
    if emitted != want:
        raise SystemExit(f"error: vLLM's aggregator emitted {emitted} ids, want {want}")
    return passes * workload["reports_per_pass"] / seconds


def rust_figures(bench, runs):
    """The countdown core setups' median rank-reports per second, by (id kind, map)."""
    lines = subprocess.run(
        [str(bench), "--aggregator", "--format", "json", "--runs", str(runs)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    figures = {}
    for line in lines:
        record = json.loads(line)
        if record["bench"] == "core" and record["policy"] == "countdown":
            figures[(record["ids"], record["map"])] = record["reports_per_second"]
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kvcc-bench", type=Path, default=DEFAULT_BENCH, help="the kvcc-bench binary")
    parser.add_argument("--runs", type=int, default=3, help="runs per side; figures are medians")
    parser.add_argument("--passes", type=int, default=32, help="timed passes over the ring per vLLM run")
    args = parser.parse_args()

    classes, why = import_vllm_aggregator()
    if classes is None:
        print(f"skipped: vLLM not importable ({why})")
        return 0
    if not args.kvcc_bench.is_file():
        print(
            f"error: no kvcc-bench at {args.kvcc_bench}: run `cargo build --release -p kvcc-bench`",
            file=sys.stderr,
        )
        return 2

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "workload.json"
        subprocess.run([str(args.kvcc_bench), "--aggregator-workload", str(path)], check=True)
        workload = json.loads(path.read_text())

    import vllm

    vllm_rates = [time_vllm(classes, workload, args.passes) for _ in range(args.runs)]
    vllm_rate = statistics.median(vllm_rates)
    rust = rust_figures(args.kvcc_bench, args.runs)

    print(
        f"vLLM {vllm.__version__} KVOutputAggregator, Python {sys.version.split()[0]}: "
        f"{vllm_rate:,.0f} rank-reports/s (median of {args.runs}: "
        + ", ".join(f"{r:,.0f}" for r in vllm_rates)
        + ")"
    )
    for (ids, map_), rate in rust.items():
        print(
            f"kvcc core, countdown, {ids:>12} ids, {map_:>7} map: {rate:>14,.0f} rank-reports/s"
            f" = {rate / vllm_rate:5.1f}x vLLM"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
