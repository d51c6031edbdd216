#!/usr/bin/env bash
# Builds kvcc's release binary for the machine it runs on and packages it as the release
# workflow (.github/workflows/release.yml) attaches it:
#
#   dist/kvcc-TARGET.tar.gz         kvcc-TARGET/: kvcc, README.md, man/ (kvcc.1 and a page
#                                   per subcommand), completions/ (bash, zsh, fish)
#   dist/kvcc-TARGET.tar.gz.sha256  its SHA-256, as `sha256sum -c` reads it
#
# Usage: bash scripts/release-build.sh [TARGET]   (TARGET defaults to this machine's)
# The man pages and completions are written by the binary just built, so TARGET must be
# this machine's: the workflow builds each target on a runner of its own. With
# KVCC_EXPECT_COMMIT set, the binary must say it is that commit, built from a clean tree.
# KVCC_DIST_DIR overrides dist/; CARGO_TARGET_DIR is cargo's.
set -euo pipefail
cd "$(dirname "$0")/.."

host=$(rustc -vV | sed -n 's/^host: //p')
target=${1:-$host}
if [ "$target" != "$host" ]; then
    echo "error: this builds for the machine it runs on ($host), not $target: run it on a $target machine" >&2
    exit 2
fi
dist=${KVCC_DIST_DIR:-dist}
name="kvcc-$target"

cargo build --release --locked -p kvcc --target "$target"
bin="${CARGO_TARGET_DIR:-target}/$target/release/kvcc"
version=$("$bin" --version)
echo "built $version"
if [ -n "${KVCC_EXPECT_COMMIT:-}" ] && [[ "$version" != *"(commit $KVCC_EXPECT_COMMIT, clean)" ]]; then
    echo "error: the release must be commit $KVCC_EXPECT_COMMIT from a clean tree, and the binary says: $version" >&2
    exit 1
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$name/man" "$stage/$name/completions"
cp "$bin" README.md "$stage/$name/"
"$bin" man --dir "$stage/$name/man"
"$bin" completions bash > "$stage/$name/completions/kvcc.bash"
"$bin" completions zsh > "$stage/$name/completions/_kvcc"
"$bin" completions fish > "$stage/$name/completions/kvcc.fish"

mkdir -p "$dist"
tar -C "$stage" -czf "$dist/$name.tar.gz" "$name"
# GNU coreutils on Linux, shasum on macOS: the same line either way.
if command -v sha256sum >/dev/null; then
    (cd "$dist" && sha256sum "$name.tar.gz" > "$name.tar.gz.sha256")
else
    (cd "$dist" && shasum -a 256 "$name.tar.gz" > "$name.tar.gz.sha256")
fi
echo "wrote $dist/$name.tar.gz ($(du -h "$dist/$name.tar.gz" | cut -f1)) and $name.tar.gz.sha256"
