#!/usr/bin/env bash
# Installs the ward binary of this action's version for the runner: the
# release `v<version>` of the action's own repository, its tarball for the
# runner's target verified against the release's SHA256SUMS (and against
# the `sha256` input when the user pins one). A checksum that does not match
# is refused: an `::error` annotation names the file and both hashes, the
# script exits 1 and installs nothing.
#
# When there is no binary to download (no release of this version, no
# tarball for this platform, the action used from a local path), it installs
# nothing, writes `build=true` to $GITHUB_OUTPUT and exits 0: the composite's
# next steps build ward from the action's source.
#
# Environment (action.yml passes the inputs here, never into the script):
#   GITHUB_ACTION_PATH  the action's checkout (Cargo.toml, Cargo.lock)
#   WARD_REPOSITORY     owner/name the action comes from (github.action_repository)
#   WARD_INSTALL_TOKEN  token for the API (optional: public releases answer without)
#   WARD_SHA256         optional pinned SHA-256 of the tarball
#   WARD_INSTALL_DIR    where `ward` goes (default $RUNNER_TEMP/ward/bin)
#   GITHUB_API_URL      default https://api.github.com
#   RUNNER_OS, RUNNER_ARCH  the platform (default: uname)
#   GITHUB_OUTPUT       receives version, bin, lock-hash, build
set -euo pipefail
umask 077

source_dir="${GITHUB_ACTION_PATH:-$(cd "$(dirname "$0")/.." && pwd)}"
repository="${WARD_REPOSITORY:-}"
api="${GITHUB_API_URL:-https://api.github.com}"
api="${api%/}"
pinned="${WARD_SHA256:-}"
install_dir="${WARD_INSTALL_DIR:-${RUNNER_TEMP:?RUNNER_TEMP or WARD_INSTALL_DIR must say where to install}/ward/bin}"
outputs="${GITHUB_OUTPUT:-/dev/null}"

# A workflow command's data: %, CR and LF escaped so a value cannot start another command.
escape() { local s="${1//%/%25}"; s="${s//$'\r'/%0D}"; printf '%s' "${s//$'\n'/%0A}"; }
fail() {
  printf '::error title=ward install::%s\n' "$(escape "$1")"
  exit 1
}
output() { printf '%s=%s\n' "$1" "$2" >>"$outputs"; }

# --- what to install ---------------------------------------------------------

[ -f "$source_dir/Cargo.toml" ] || fail "no Cargo.toml in the action's folder $source_dir"
version="$(awk '/^\[/ { in_package = ($0 == "[package]") }
  in_package && /^version *= *"/ { sub(/^version *= *"/, ""); sub(/".*$/, ""); print; exit }' "$source_dir/Cargo.toml")"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]+)?$ ]] \
  || fail "cannot read the package version from $source_dir/Cargo.toml (found '$version')"
tag="v$version"
lock_hash="$(sha256sum "$source_dir/Cargo.lock" | cut -c1-64)"
output version "$version"
output bin "$install_dir/ward"
output lock-hash "$lock_hash"

if [ -n "$pinned" ]; then
  pinned="${pinned,,}"
  [[ "$pinned" =~ ^[0-9a-f]{64}$ ]] || fail "input sha256 must be the 64 hexadecimal digits of a SHA-256, not '$pinned'"
fi

# No binary to download: with a pinned checksum that is an error (the user
# asked for one exact binary), otherwise the next steps build from source.
build_from_source() {
  if [ -n "$pinned" ]; then
    fail "input sha256 pins a release binary, but $1; remove the pin to build ward $version from source"
  fi
  printf '::notice title=ward install::%s\n' "$(escape "$1"): building ward $version from the action's source"
  output build true
  exit 0
}

case "${RUNNER_OS:-$(uname -s)}/${RUNNER_ARCH:-$(uname -m)}" in
  Linux/X64 | Linux/x86_64) target=x86_64-unknown-linux-musl ;;
  Linux/ARM64 | Linux/aarch64) target=aarch64-unknown-linux-musl ;;
  *) build_from_source "releases have binaries for Linux x86_64 and aarch64 only, not ${RUNNER_OS:-$(uname -s)} ${RUNNER_ARCH:-$(uname -m)}" ;;
esac
[ -n "$repository" ] || build_from_source "the action runs from a local path, which has no releases"
tarball="ward-$version-$target.tar.gz"

# --- the release -------------------------------------------------------------

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Headers in a file, so the token is not on a command line (`ps` shows those).
{
  printf 'X-GitHub-Api-Version: 2022-11-28\n'
  if [ -n "${WARD_INSTALL_TOKEN:-}" ]; then printf 'Authorization: Bearer %s\n' "$WARD_INSTALL_TOKEN"; fi
} >"$work/headers"

# GET URL into FILE with ACCEPT; prints the HTTP status. A download redirects
# to a storage host; curl sends the Authorization header to the API host only.
get() {
  curl --silent --show-error --location --retry 3 --connect-timeout 20 --max-time 600 \
    --header @"$work/headers" --header "Accept: $3" \
    --output "$2" --write-out '%{http_code}' "$1"
}
# What the server said, for an error message: GitHub's JSON `message`, or
# the start of any other body (object storage answers XML).
said() {
  jq -r '.message? // empty' "$1" 2>/dev/null | head -c 300 && return
  LC_ALL=C tr -c '[:print:]' ' ' <"$1" 2>/dev/null | head -c 300 || true
}

release_url="$api/repos/$repository/releases/tags/$tag"
status="$(get "$release_url" "$work/release.json" application/vnd.github+json)" \
  || fail "could not reach $release_url (curl failed, see above)"
case "$status" in
  200) ;;
  404) build_from_source "$repository has no release $tag" ;;
  *) fail "GitHub answered $status to $release_url: $(said "$work/release.json")" ;;
esac
release_id="$(jq -er '.id' "$work/release.json")" || fail "the answer of $release_url names no release id"

assets_url="$api/repos/$repository/releases/$release_id/assets?per_page=100"
status="$(get "$assets_url" "$work/assets.json" application/vnd.github+json)" \
  || fail "could not reach $assets_url (curl failed, see above)"
[ "$status" = 200 ] || fail "GitHub answered $status to $assets_url: $(said "$work/assets.json")"
asset_id() { jq -r --arg name "$1" '[.[] | select(.name == $name) | .id] | first // empty' "$work/assets.json"; }
tarball_id="$(asset_id "$tarball")" || fail "the answer of $assets_url is not a list of assets"
sums_id="$(asset_id SHA256SUMS)" || fail "the answer of $assets_url is not a list of assets"
[ -n "$tarball_id" ] || build_from_source "release $tag of $repository has no $tarball"
[ -n "$sums_id" ] || fail "release $tag of $repository has $tarball but no SHA256SUMS to check it against; refusing an unverified binary"

download() { # ASSET_ID FILE NAME
  local url="$api/repos/$repository/releases/assets/$1" code
  code="$(get "$url" "$2" application/octet-stream)" || fail "could not download $3 from $url (curl failed, see above)"
  [ "$code" = 200 ] || fail "GitHub answered $code to the download of $3 ($url): $(said "$2")"
}
download "$sums_id" "$work/SHA256SUMS" SHA256SUMS
download "$tarball_id" "$work/$tarball" "$tarball"

# --- the checks --------------------------------------------------------------

actual="$(sha256sum "$work/$tarball" | cut -c1-64)"
# `<hex>  <name>` lines as sha256sum writes them (`*<name>` in binary mode).
expected="$(awk -v name="$tarball" '$2 == name || $2 == "*" name { print tolower($1) }' "$work/SHA256SUMS")"
[ -n "$expected" ] || fail "SHA256SUMS of release $tag ($repository) has no line for $tarball; refusing an unverified binary"
[ "$(printf '%s\n' "$expected" | wc -l)" -eq 1 ] || fail "SHA256SUMS of release $tag ($repository) has several lines for $tarball"
if [ -n "$pinned" ] && [ "$actual" != "$pinned" ]; then
  fail "$tarball: SHA-256 is $actual, but input sha256 pins $pinned. Refusing to install it: the release changed since you pinned it, or the pin is for another platform. Nothing was installed."
fi
if [ "$actual" != "$expected" ]; then
  fail "$tarball: SHA-256 is $actual, but SHA256SUMS of release $tag ($repository) says $expected. Refusing to install it: the download is corrupt or truncated, or the release was changed. Nothing was installed."
fi

mkdir "$work/unpacked"
tar -xzf "$work/$tarball" -C "$work/unpacked" --no-same-owner "ward-$version-$target/ward" \
  || fail "$tarball (checksum verified) holds no ward-$version-$target/ward"
candidate="$work/unpacked/ward-$version-$target/ward"
said_version="$("$candidate" --version 2>&1 || true)"
[ "$said_version" = "ward $version" ] \
  || fail "the ward in $tarball says '$said_version', not 'ward $version'; refusing to install it"

mkdir -p "$install_dir"
install -m 0755 "$candidate" "$install_dir/.ward.$$"
mv -f "$install_dir/.ward.$$" "$install_dir/ward"
output build false
echo "installed ward $version ($target) from release $tag of $repository, SHA-256 $actual, at $install_dir/ward"
