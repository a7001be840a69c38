#!/usr/bin/env bash
# Runs the whole CodeForge test suite on a fresh Debian 12 machine (as root):
# installs what the tests drive (Deno from npm; the Docker engine, iptables,
# debootstrap and Compose v2), then runs every Go test, the Docker
# end-to-end tests included, under the race detector. Extra arguments go
# to `go test`.
set -euo pipefail
cd "$(dirname "$0")"

deno_bin="$(deploy/install-deno.sh)"
export DENO_BIN="$deno_bin"
deploy/install-docker.sh

go vet ./...
go test -race -count=1 -timeout 75m "$@" ./...
