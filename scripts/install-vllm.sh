#!/usr/bin/env bash
# Installs vLLM (pinned) into a virtual environment cached at ~/.cache/kvcc/vllm-venv, for
# `kvcc confirm` and its tests (issue 25). A second run with the venv present does
# nothing. vLLM 0.34.0 pins flashinfer-python==0.7.3, which the registry lacks, so the
# pin is overridden to 0.7.4 (plain `pip install vllm==0.34.0` fails).
set -euo pipefail
VLLM_VERSION=0.34.0
venv=${KVCC_VLLM_VENV:-$HOME/.cache/kvcc/vllm-venv}
# uv installs vLLM, and the recorder plugin's test (tests/e2e/recorder_plugin.rs) installs
# ./recorder with it, so it is installed even when the venv is cached.
if ! python3 -m uv --version >/dev/null 2>&1; then
    python3 -m pip install --quiet --user uv==0.9.* 2>/dev/null || python3 -m pip install --quiet uv
fi
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import importlib.metadata as m; assert m.version('vllm') == '$VLLM_VERSION'" 2>/dev/null; then
    echo "vLLM $VLLM_VERSION already in $venv"
    exit 0
fi
start=$SECONDS
mkdir -p "$(dirname "$venv")"
python3 -m uv venv -q -p python3.11 "$venv"
overrides=$(mktemp)
echo "flashinfer-python==0.7.4" > "$overrides"
# --python, not VIRTUAL_ENV: uv run as `python3 -m uv` (0.9.30) installs into the
# interpreter that ran it even with VIRTUAL_ENV set, which left the venv empty on a fresh
# machine while the install reported success.
python3 -m uv pip install -q --python "$venv/bin/python" --override "$overrides" "vllm==$VLLM_VERSION"
rm -f "$overrides"
if ! "$venv/bin/python" -c "import vllm.v1.core.sched.scheduler" 2>/dev/null; then
    echo "error: vLLM $VLLM_VERSION was installed, but $venv/bin/python cannot import its scheduler" >&2
    exit 1
fi
echo "vLLM $VLLM_VERSION installed in $venv in $((SECONDS - start)) s ($(du -sh "$venv" | cut -f1))"
