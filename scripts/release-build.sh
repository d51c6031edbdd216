#!/usr/bin/env bash
# Builds kvcc's release binary for the machine it runs on and packages it as the release
# workflow (.github/workflows/release.yml) attaches it: dist/kvcc-TARGET.tar.gz and its
# .sha256 (scripts/release-package.sh names and fills them).
#
# Usage: bash scripts/release-build.sh [TARGET]   (TARGET defaults to this machine's)
# The man pages and completions are written by the binary just built, so TARGET must be
# this machine's: the workflow builds each target on a runner of its own. With
# KVCC_EXPECT_COMMIT set, the binary must say it is that commit, built from a clean tree;
# with KVCC_EXPECT_TAG (vX.Y.Z), that it is version X.Y.Z, which the Action checks a
# downloaded release against. KVCC_DIST_DIR overrides dist/; CARGO_TARGET_DIR is cargo's.
set -euo pipefail
cd "$(dirname "$0")/.."

host=$(rustc -vV | sed -n 's/^host: //p')
target=${1:-$host}
if [ "$target" != "$host" ]; then
    echo "error: this builds for the machine it runs on ($host), not $target: run it on a $target machine" >&2
    exit 2
fi
dist=${KVCC_DIST_DIR:-dist}

cargo build --release --locked -p kvcc --target "$target"
bin="${CARGO_TARGET_DIR:-target}/$target/release/kvcc"
version=$("$bin" --version)
echo "built $version"
if [ -n "${KVCC_EXPECT_COMMIT:-}" ] && [[ "$version" != *"(commit $KVCC_EXPECT_COMMIT, clean)" ]]; then
    echo "error: the release must be commit $KVCC_EXPECT_COMMIT from a clean tree, and the binary says: $version" >&2
    exit 1
fi
if [ -n "${KVCC_EXPECT_TAG:-}" ] && [[ "$version" != "kvcc ${KVCC_EXPECT_TAG#v} ("* ]]; then
    echo "error: the release $KVCC_EXPECT_TAG must be kvcc ${KVCC_EXPECT_TAG#v} (the version in Cargo.toml), and the binary says: $version" >&2
    exit 1
fi

bash scripts/release-package.sh "$bin" "$target" "$dist"
