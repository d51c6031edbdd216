#!/usr/bin/env bash
# The differential campaign of docs/vllm.md (issue 25): random model runs of every point
# of every spec in specs/, played into vLLM's own scheduler and aggregator by
# `kvcc confirm`. Every point, not only a matrix's first: a knob's other values are
# where the model and vLLM are most likely to part.
#
#   bash scripts/vllm-campaign.sh [OUT_DIR] [RUNS_PER_POINT]
#
# Needs vLLM (bash scripts/install-vllm.sh) and a release build of kvcc (KVCC names
# another binary). Exit status is `kvcc confirm`'s: 1 when any run parts unexplained.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-camp}
runs=${2:-60}
kvcc=${KVCC:-target/release/kvcc}
mkdir -p "$out"

start=$SECONDS
points=0
for spec in specs/*.toml; do
    name=$(basename "$spec" .toml)
    # One line per point: its --point flags, from check's JSON lines (the checks are
    # tiny; this is the one place the point list is read).
    "$kvcc" check "$spec" --format json 2>/dev/null | python3 -c '
import json, sys
def toml(value):  # a JSON scalar or list is a TOML value; no spaces in it
    return json.dumps(value, separators=(",", ":"))
for line in sys.stdin:
    point = json.loads(line)["point"]
    print(" ".join(f"--point={k}={toml(v)}" for k, v in sorted(point.items())))
' | {
        i=0
        while IFS= read -r flags; do
            # shellcheck disable=SC2086 # the flags are words by construction
            "$kvcc" simulate "$spec" $flags --seed 25 --runs "$runs" \
                --out "$out/$name/point-$i" >/dev/null
            i=$((i + 1))
        done
        echo "$i"
    } >"$out/$name.points"
    points=$((points + $(cat "$out/$name.points")))
    rm "$out/$name.points"
done
printf 'simulated %d points x %d runs in %ds\n' "$points" "$runs" $((SECONDS - start)) >&2
"$kvcc" confirm "$out"/*/point-*/run-*
