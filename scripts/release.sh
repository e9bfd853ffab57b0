#!/usr/bin/env bash
# scripts/release.sh OUTDIR: cross-builds gmailrelay's static binaries
# (CGO_ENABLED=0, -trimpath: the Dockerfile's build, per platform) into
# OUTDIR as gmailrelay-GOOS-GOARCH[.exe], and writes OUTDIR/SHA256SUMS
# (sha256sum's format: check with `cd OUTDIR && sha256sum -c SHA256SUMS`).
#
# `gmailrelay version` of each binary prints VERSION (default: the tag at
# HEAD, else "devel") and the commit of HEAD (+modified for a dirty tree).
# Platforms: linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
# windows/amd64, or PLATFORMS="os/arch …" for fewer.
set -euo pipefail
if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: scripts/release.sh OUTDIR" >&2
  exit 2
fi
out="$1"
cd "$(dirname "$0")/.."
mkdir -p "$out"
out="$(cd "$out" && pwd)"

platforms="${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64}"
version="${VERSION:-$(git describe --tags --exact-match 2>/dev/null || echo devel)}"
commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [ "$commit" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  commit="$commit+modified"
fi
ldflags="-s -w -X main.version=$version -X main.commit=$commit"

names=()
for p in $platforms; do
  os="${p%/*}" arch="${p#*/}"
  name="gmailrelay-$os-$arch"
  [ "$os" = windows ] && name="$name.exe"
  CGO_ENABLED=0 GOOS="$os" GOARCH="$arch" go build -trimpath -ldflags "$ldflags" -o "$out/$name" ./cmd/gmailrelay
  names+=("$name")
done

if command -v sha256sum >/dev/null 2>&1; then sum() { sha256sum "$@"; }; else sum() { shasum -a 256 "$@"; }; fi
(cd "$out" && sum "${names[@]}" >SHA256SUMS)
echo "gmailrelay $version ($commit): ${#names[@]} binaries and SHA256SUMS in $out"
