#!/usr/bin/env bash
# The whole kvcc test suite, as CI runs it: formatting and lints, every unit, property,
# model and end-to-end test, the loom suite (its own --cfg loom build and target dir) and
# the shuttle suite (its own feature build). Run from anywhere: bash scripts/test-all.sh
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "format"
cargo fmt --all -- --check

step "lints"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "unit, proptest, model and end-to-end tests"
cargo test --workspace --locked

step "loom: the concurrent front, exhaustive up to a preemption bound"
RUSTFLAGS="--cfg loom" cargo test -p kvcc-aggregator --locked --target-dir target/loom --test 'loom_*'

step "shuttle: 16 rank threads, PCT and random schedules with fixed seeds"
cargo test -p kvcc-aggregator --locked --features shuttle --test 'shuttle_*'
