#!/usr/bin/env bash
# Runs the whole CodeForge test suite on a fresh Debian 12 machine (as root):
# installs what the tests drive (Deno from npm; the Docker engine, iptables,
# debootstrap and Compose v2), then runs every Go test, the Docker
# end-to-end tests included, under the race detector, in strict mode: a
# test whose dependency (root, Deno, Docker, Node) is missing fails instead
# of skipping. Extra arguments go to `go test`.
set -euo pipefail
cd "$(dirname "$0")"

deno_bin="$(deploy/install-deno.sh)"
export DENO_BIN="$deno_bin"
deploy/install-docker.sh

# The binary must keep building for macOS (transparent mode is Linux-only there).
GOOS=darwin CGO_ENABLED=0 go build -o /dev/null ./cmd/codeforge
go vet ./...
export CODEFORGE_TEST_STRICT=1
go test -race -count=1 -timeout 75m "$@" ./...
