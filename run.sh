#!/usr/bin/env bash
# Starts the CodeForge MCP server on http://127.0.0.1:8080/mcp with the
# embedded default backend (a local Deno sandbox, no Docker needed).
# Installs Deno from npm when missing. Extra arguments go to `codeforge serve`.
set -euo pipefail
cd "$(dirname "$0")"

deno_bin="$(deploy/install-deno.sh)"
export DENO_BIN="$deno_bin"
CGO_ENABLED=0 go build -o bin/codeforge ./cmd/codeforge
exec bin/codeforge serve "$@"
