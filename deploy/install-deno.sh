#!/bin/sh
# install-deno.sh [PREFIX] — make Deno 2.9.6 available and print its path.
#
# Uses a deno 2.9.6 already on PATH or under PREFIX (default: .cache/deno in
# the repository); otherwise installs it from npm (@deno/linux-x64-glibc ships
# the binary itself, so nothing is downloaded at install time). Idempotent,
# quiet unless it fails. Used by build-base-images.sh, the README, .ci/run.
set -eu

DENO_VERSION=2.9.6
ROOT=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)
PREFIX=${1:-$ROOT/.cache/deno}
BIN=$PREFIX/node_modules/@deno/linux-x64-glibc/deno

has_version() {
	[ -x "$1" ] && "$1" --version 2>/dev/null | head -n 1 | grep -q "^deno $DENO_VERSION "
}

if p=$(command -v deno 2>/dev/null) && has_version "$p"; then
	readlink -f "$p"
	exit 0
fi
if has_version "$BIN"; then
	echo "$BIN"
	exit 0
fi

command -v npm >/dev/null 2>&1 || {
	echo "install-deno.sh: npm is needed to install Deno $DENO_VERSION: apt-get install -y npm" >&2
	exit 1
}
mkdir -p "$PREFIX"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! npm install --no-audit --no-fund --prefix "$PREFIX" "@deno/linux-x64-glibc@$DENO_VERSION" >"$log" 2>&1; then
	cat "$log" >&2
	echo "install-deno.sh: npm install @deno/linux-x64-glibc@$DENO_VERSION into $PREFIX failed (output above)" >&2
	exit 1
fi
chmod 0755 "$BIN"
if ! has_version "$BIN"; then
	echo "install-deno.sh: $BIN does not report deno $DENO_VERSION after install" >&2
	exit 1
fi
echo "$BIN"
