#!/usr/bin/env bash
# The Action's install step (action.yml, "Install kvcc"): puts the kvcc asked for in
# ~/.kvcc/bin and that directory first on PATH. Whatever kvcc is on PATH is never looked
# at; the one in ~/.kvcc is used only when its `kvcc --version` says it is the one asked
# for. In order:
#
# 1. the kvcc the cache restored, when it names the version and commit asked for; when
#    the commit is unknown (the action's source has no git: a release tag or a branch),
#    only on an exact cache hit, under a key that hashed the action's source;
# 2. at a release tag (KVCC_RELEASE=vX.Y.Z), the release's prebuilt archive for this
#    runner (RUNNER_OS, RUNNER_ARCH), as .github/workflows/release.yml attaches it and
#    scripts/release-package.sh names it, checked against its .sha256, and its binary's
#    `--version` against the tag; a release with no archive for this runner is built
#    from source instead, and the log says so;
# 3. else kvcc built from the action's source with cargo, and checked.
#
# Environment: KVCC_SOURCE (the action's source), KVCC_WANT_VERSION, KVCC_WANT_COMMIT
# (40 hex digits or `unknown`), KVCC_GIVEN_COMMIT (handed to the build as KVCC_COMMIT,
# for a source without git), KVCC_CACHE_HIT (`true` on an exact hit), KVCC_RELEASE (the
# tag, or empty) and KVCC_RELEASE_BASE_URL (under which `TAG/kvcc-TARGET.tar.gz` lies:
# the action repository's GitHub releases; tests/e2e/action_install.rs, a file:// URL).
set -euo pipefail

root="$HOME/.kvcc"
want="kvcc $KVCC_WANT_VERSION (commit $KVCC_WANT_COMMIT"

# What the kvcc at $1 says it is, or nothing.
version_of() { "$1" --version 2>/dev/null || true; }

# The commit a version line of the version asked for names (40 hex digits, or
# `unknown`); fails for another version.
commit_of() {
    local rest=${1#"kvcc $KVCC_WANT_VERSION (commit "}
    [ "$rest" != "$1" ] || return 1
    echo "${rest%%[,:]*}"
}

is_sha() { [[ "$1" =~ ^[0-9a-f]{40}$ ]]; }

# Whether the restored kvcc (version line $1) is the one asked for.
cached_is_wanted() {
    local commit
    commit=$(commit_of "$1") || return 1
    if [ "$KVCC_WANT_COMMIT" != unknown ]; then
        [ "$commit" = "$KVCC_WANT_COMMIT" ]
    elif [ "${KVCC_CACHE_HIT:-}" != true ]; then
        return 1
    elif [ -n "${KVCC_RELEASE:-}" ]; then
        # The release's own binary names the tagged commit; a build of the tag, none.
        [ "$commit" = unknown ] || is_sha "$commit"
    else
        [ "$commit" = unknown ]
    fi
}

# The Rust target of this runner's release archive, or nothing when release.yml builds
# none for it.
runner_target() {
    case "${RUNNER_OS:-}/${RUNNER_ARCH:-}" in
        Linux/X64) echo x86_64-unknown-linux-gnu ;;
        Linux/ARM64) echo aarch64-unknown-linux-gnu ;;
        macOS/X64) echo x86_64-apple-darwin ;;
        macOS/ARM64) echo aarch64-apple-darwin ;;
    esac
}

sha256_of() {
    if command -v sha256sum >/dev/null; then
        sha256sum "$1" | cut -d' ' -f1
    else
        shasum -a 256 "$1" | cut -d' ' -f1
    fi
}

# Downloads URL $1 to $2. Returns 1 when there is nothing there (HTTP 404; a file:// URL
# to no file); any other failure ends the step.
fetch() {
    local status=0 code
    code=$(curl --silent --show-error --location --retry 3 --output "$2" \
        --write-out '%{http_code}' "$1") || status=$?
    case "$status/$code" in
        0/200 | 0/000) return 0 ;;
        0/404 | 37/*) return 1 ;;
    esac
    echo "::error title=kvcc::cannot download $1 (curl exit $status, HTTP $code)"
    exit 1
}

# Installs the release's archive for this runner into ~/.kvcc/bin, checked; sets
# `downloaded` when it did, and says why not when there is no archive for this runner.
downloaded=""
download() {
    local target archive url expected actual have commit
    target=$(runner_target)
    if [ -z "$target" ]; then
        echo "release $KVCC_RELEASE has no kvcc for a ${RUNNER_OS:-?} ${RUNNER_ARCH:-?} runner: building from source"
        return 0
    fi
    archive="kvcc-$target.tar.gz"
    url="$KVCC_RELEASE_BASE_URL/$KVCC_RELEASE/$archive"
    dir=$(mktemp -d)   # global: the EXIT trap removes it
    trap 'rm -rf "$dir"' EXIT
    if ! fetch "$url.sha256" "$dir/$archive.sha256" || ! fetch "$url" "$dir/$archive"; then
        echo "release $KVCC_RELEASE has no $archive ($url): building from source"
        return 0
    fi
    expected=$(cut -d' ' -f1 "$dir/$archive.sha256")
    actual=$(sha256_of "$dir/$archive")
    if [ "$expected" != "$actual" ]; then
        echo "::error title=kvcc::checksum mismatch: $archive of release $KVCC_RELEASE has SHA-256 $actual, but $archive.sha256 says $expected; not installed"
        exit 1
    fi
    tar -xzf "$dir/$archive" -C "$dir"
    have=$(version_of "$dir/kvcc-$target/kvcc")
    commit=$(commit_of "$have") || commit=""
    if ! is_sha "$commit"; then
        echo "::error title=kvcc::$archive of release $KVCC_RELEASE holds ${have:-no kvcc that runs here}, not kvcc $KVCC_WANT_VERSION with the commit it was built from; not installed"
        exit 1
    fi
    mkdir -p "$root/bin"
    cp "$dir/kvcc-$target/kvcc" "$root/bin/kvcc.tmp"
    mv -f "$root/bin/kvcc.tmp" "$root/bin/kvcc"
    echo "$have (downloaded $archive of release $KVCC_RELEASE, SHA-256 $actual)"
    downloaded=yes
}

have=$(version_of "$root/bin/kvcc")
if cached_is_wanted "$have"; then
    echo "$have (cached)"
else
    if [ -n "${KVCC_RELEASE:-}" ]; then
        download
    fi
    if [ -z "$downloaded" ]; then
        echo "building kvcc: wanted $want), found ${have:-none} in $root"
        KVCC_COMMIT=$KVCC_GIVEN_COMMIT cargo install --locked --force --root "$root" \
            --path "$KVCC_SOURCE/harness"
        have=$(version_of "$root/bin/kvcc")
        if [[ "$have" != "$want"[,:]* ]]; then
            echo "::error title=kvcc::built ${have:-nothing}, not $want)"
            exit 1
        fi
        echo "$have (built)"
    fi
fi
echo "$root/bin" >> "$GITHUB_PATH"
