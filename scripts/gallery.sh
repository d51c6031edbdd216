#!/usr/bin/env bash
# Regenerates the reviewer's gallery in docs/traces/: the Markdown traces (and their ITF
# JSON, for `kvcc replay`) of the #59325 seed regression, the #53903 MultiConnector hang
# and one failure of #59325's alternative fix. tests/e2e/traces.rs fails when they drift.
# Run from anywhere: bash scripts/gallery.sh
set -euo pipefail
cd "$(dirname "$0")/.."
kvcc=${KVCC:-target/release/kvcc}
[ -x "$kvcc" ] || cargo build --release --locked -p kvcc
out=${OUT:-docs/traces}
rm -rf "$out"
mkdir -p "$out"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# spec | matrix point flags | clause file suffix
while IFS='|' read -r spec points clause; do
    # shellcheck disable=SC2086
    "$kvcc" check "$spec" $points --trace-dir "$out" --all-traces >/dev/null || true
    for f in "$out"/*; do
        case "$f" in
            *"$clause".md | *"$clause".itf.json) mv "$f" "$scratch/" ;;
            *) rm -f "$f" ;;
        esac
    done
done <<'LIST'
specs/pr59325-regression.toml|--point prefill.pcp=2 --point prefill.tp=1 --point decode.tp=1 --point producer.lease=true|eventually-freed__delay-freed-request-never-freed
specs/pr53903-multiconnector-hang.toml|--point prefill.pcp=2|eventually-freed__delay-freed-request-never-freed
specs/pr59325-alternative-fix.toml|--point connector=nixl --point prefill.loads-kv=true|quorum-sound__load-emitted-before-workers-done
LIST
mv "$scratch"/* "$out"/
ls "$out"
