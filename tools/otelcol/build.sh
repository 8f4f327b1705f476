#!/usr/bin/env bash
# Build (once per machine) the minimal OpenTelemetry Collector used by agentledger's tests and
# print the absolute path of the binary on stdout. Progress goes to stderr, so
#
#   OTELCOL=$(tools/otelcol/build.sh)
#
# works. The binary has the core `otlp` receiver and the contrib `file` exporter; see README.md.
#
#   tools/otelcol/build.sh            build if needed, print the binary's path
#   tools/otelcol/build.sh --force    rebuild even if the cached binary is up to date
#
# Sources: main.go, go.mod, go.sum beside this script (all collector modules at one release).
# Output:  ${AGENTLEDGER_TOOLS_CACHE:-$HOME/.cache/agentledger}/otelcol-<version>/otelcol
#
# The cached binary is reused when it is newer than every source file, or when the sha256 of the
# sources matches the stamp written beside it at build time (so a fresh clone, whose files are
# all newer than the binary, does not rebuild). Concurrent callers serialise on a flock; the
# binary is written to a temporary name and renamed into place, so it is never seen half-written.
#
# Needs Go >= the version in go.mod (1.26) and the Go module proxy (or a warm module cache).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
SOURCES=("$SCRIPT_DIR/main.go" "$SCRIPT_DIR/go.mod" "$SCRIPT_DIR/go.sum" "$SCRIPT_DIR/build.sh")

log() { printf 'otelcol/build.sh: %s\n' "$*" >&2; }
die() {
  printf 'otelcol/build.sh: error: %s\n' "$*" >&2
  exit 1
}

FORCE=0
case "${1:-}" in
  "") ;;
  --force) FORCE=1 ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
    exit 0
    ;;
  *) die "unknown argument: $1 (try --help)" ;;
esac

for f in "${SOURCES[@]}"; do
  [[ -f "$f" ]] || die "missing source file $f"
done

# The collector core release named in go.mod, e.g. v0.161.0 -> 0.161.0.
VERSION="$(awk '$1 == "go.opentelemetry.io/collector/otelcol" { sub(/^v/, "", $2); print $2; exit }' "$SCRIPT_DIR/go.mod")"
[[ -n "$VERSION" ]] || die "cannot find go.opentelemetry.io/collector/otelcol in $SCRIPT_DIR/go.mod"

CACHE_ROOT="${AGENTLEDGER_TOOLS_CACHE:-${HOME:?HOME is not set}/.cache/agentledger}"
OUT_DIR="$CACHE_ROOT/otelcol-$VERSION"
BIN="$OUT_DIR/otelcol"
STAMP="$OUT_DIR/otelcol.sources.sha256"

sources_hash() { cat "${SOURCES[@]}" | sha256sum | awk '{ print $1 }'; }

# 0 if the cached binary can be used as it is.
up_to_date() {
  [[ $FORCE -eq 0 && -x "$BIN" ]] || return 1
  local f newer=1
  for f in "${SOURCES[@]}"; do
    [[ "$BIN" -nt "$f" ]] || newer=0
  done
  [[ $newer -eq 1 ]] && return 0
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(sources_hash)" ]]
}

if up_to_date; then
  printf '%s\n' "$BIN"
  exit 0
fi

mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd -P)"
BIN="$OUT_DIR/otelcol"
STAMP="$OUT_DIR/otelcol.sources.sha256"

# One builder at a time; whoever waited re-checks, since the other may have just built it.
exec 9>"$OUT_DIR/.build.lock"
flock 9
if up_to_date; then
  printf '%s\n' "$BIN"
  exit 0
fi

command -v go >/dev/null 2>&1 || die "go is not installed (need Go 1.26+)"

export GOTOOLCHAIN=local # never download another toolchain
export GOFLAGS=-mod=readonly # go.mod/go.sum are committed: fail rather than edit them
export GOWORK=off
export CGO_ENABLED=0

log "building OpenTelemetry Collector $VERSION (otlp receiver + file exporter) into $BIN"
log "$(go version); a cold build takes a few minutes on 2 cores, later runs reuse the binary"
start=$(date +%s)
tmp="$BIN.tmp.$$"
trap 'rm -f "$tmp"' EXIT
(
  cd "$SCRIPT_DIR"
  go build -trimpath -buildvcs=false -ldflags='-s -w' -o "$tmp" .
) >&2 || die "go build failed"
"$tmp" --version >&2 || die "the built binary does not run"
mv -f "$tmp" "$BIN"
sources_hash >"$STAMP.tmp.$$" && mv -f "$STAMP.tmp.$$" "$STAMP"
trap - EXIT
log "built in $(($(date +%s) - start))s ($(du -h "$BIN" | cut -f1))"
printf '%s\n' "$BIN"
