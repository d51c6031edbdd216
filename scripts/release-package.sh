#!/usr/bin/env bash
# Packages a kvcc binary as a release asset, under the names that the release workflow
# (.github/workflows/release.yml) attaches and the Action (scripts/action-install.sh)
# downloads:
#
#   DIST/kvcc-TARGET.tar.gz         kvcc-TARGET/: kvcc, README.md, man/ (kvcc.1 and a page
#                                   per subcommand), completions/ (bash, zsh, fish)
#   DIST/kvcc-TARGET.tar.gz.sha256  its SHA-256, as `sha256sum -c` reads it
#
# Usage: bash scripts/release-package.sh BINARY TARGET DIST
# The man pages and completions are written by BINARY, so it must run here:
# scripts/release-build.sh builds it for this machine and calls this.
set -euo pipefail
if [ "$#" -ne 3 ]; then
    echo "usage: bash scripts/release-package.sh BINARY TARGET DIST" >&2
    exit 2
fi
bin=$1
name="kvcc-$2"
dist=$3
readme="$(dirname "$0")/../README.md"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$name/man" "$stage/$name/completions"
cp "$bin" "$stage/$name/kvcc"
cp "$readme" "$stage/$name/"
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
