"""python -m kvcc_confirm [--quiet-steps N] [--jobs-from-stdin]
    [--kv-load-failure-policy fail|recompute] RUN_DIR...

Plays each engine directory (a recorded run's `prefill/` or `decode/`) into vLLM and
prints one JSON object per directory, in order, on stdout. With --jobs-from-stdin, each
line of stdin is one more directory as a JSON object with its own settings,
`{"dir": ..., "quiet_steps": N, "failure_policy": "fail"}`: kvcc sends every trace's and
every run's engines so, to pay vLLM's import (15-20 s) once. The first line is
`{"vllm_version": ...}`. Exit 0 when every directory was played (vLLM raising is a
result, not a failure), 2 when vLLM cannot be imported or a directory cannot be read.
"""

import argparse
import json
import logging
import os
import sys
import warnings


def main(argv=None):
    parser = argparse.ArgumentParser(prog="kvcc_confirm")
    parser.add_argument("--quiet-steps", type=int, default=0)
    parser.add_argument("--jobs-from-stdin", action="store_true")
    parser.add_argument(
        "--kv-load-failure-policy", choices=["fail", "recompute"], default="fail"
    )
    parser.add_argument("runs", nargs="*")
    args = parser.parse_args(argv)
    jobs = [(run, args.quiet_steps, args.kv_load_failure_policy) for run in args.runs]
    if args.jobs_from_stdin:
        for line in sys.stdin:
            if line.strip():
                job = json.loads(line)
                jobs.append((job["dir"], job["quiet_steps"], job["failure_policy"]))
    # vLLM logs to stdout; kvcc reads stdout as JSON lines.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    out = sys.stdout
    sys.stdout = sys.stderr
    try:
        import vllm

        from . import play
    except Exception as e:  # noqa: BLE001 - any import failure means "no usable vLLM"
        print(f"kvcc_confirm: cannot import vLLM: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    play.register()
    model_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model")
    out.write(json.dumps({"vllm_version": vllm.__version__}) + "\n")
    out.flush()
    for run, quiet_steps, failure_policy in jobs:
        try:
            player = play.Player(run, model_dir, quiet_steps, failure_policy)
        except play.RunError as e:
            print(f"kvcc_confirm: {e}", file=sys.stderr)
            return 2
        player.play()
        out.write(json.dumps(player.report()) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
