#!/usr/bin/env bash
# The whole kvcc test suite, as CI runs it: formatting and lints, every unit, property,
# model and end-to-end test, the loom suite (the `loom` feature) and the shuttle suite
# (the `shuttle` feature). All share one target directory, so the loom and shuttle
# builds reuse every dependency the test build compiled. Each step prints how long it
# took. Run from anywhere: bash scripts/test-all.sh
set -euo pipefail
cd "$(dirname "$0")/.."

start=$SECONDS
step_name=""
step() {
    if [ -n "$step_name" ]; then
        printf '    (%ds)\n' $((SECONDS - step_start))
    fi
    step_name=$1
    step_start=$SECONDS
    printf '\n==> %s\n' "$1"
}

step "format"
cargo fmt --all -- --check

step "lints"
cargo clippy --workspace --all-targets --locked -- -D warnings

if [ -n "${CI:-}" ]; then
    export KVCC_REQUIRE_VLLM=1
fi
if [ ! -x "${KVCC_VLLM_PYTHON:-$HOME/.cache/kvcc/vllm-venv/bin/python}" ]; then
    if [ -n "${KVCC_REQUIRE_VLLM:-}" ]; then
        echo "error: vLLM is required (CI) but not installed: bash scripts/install-vllm.sh" >&2
        exit 1
    fi
    printf '\n*** vLLM is not installed: the vLLM tests (kvcc confirm, the recorder plugin) will SKIP (bash scripts/install-vllm.sh) ***\n'
fi

step "unit, proptest, model and end-to-end tests (with vLLM when installed)"
cargo test --workspace --locked

step "loom: the concurrent front, exhaustive up to a preemption bound"
cargo test -p kvcc-aggregator --locked --features loom --test 'loom_*'

step "shuttle: 16 rank threads, PCT and random schedules with fixed seeds"
cargo test -p kvcc-aggregator --locked --features shuttle --test 'shuttle_*'

printf '    (%ds)\n\nall suites passed in %ds\n' $((SECONDS - step_start)) $((SECONDS - start))
