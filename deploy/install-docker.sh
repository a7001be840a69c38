#!/bin/sh
# install-docker.sh — make a Docker engine and Compose v2 available on a
# Debian 12 machine (run as root). Idempotent and quiet unless it fails:
#   1. apt-get install docker.io iptables debootstrap iproute2 (when missing);
#   2. start dockerd in the background when `docker info` fails
#      (log: /var/log/dockerd.log; waits up to 60 s);
#   3. build Docker Compose v2 from the Go module proxy when
#      `docker compose version` fails (Debian 12 ships no Compose v2 and
#      this host may have no other source than the Go module proxy), and
#      install it as /usr/libexec/docker/cli-plugins/docker-compose.
# COMPOSE_PLUGIN_DIR overrides the install directory (used to test step 3).
set -eu

COMPOSE_VERSION=v2.40.3
PLUGIN_DIR=${COMPOSE_PLUGIN_DIR:-/usr/libexec/docker/cli-plugins}

log=$(mktemp)
cleanup() { rm -f "$log"; }
trap cleanup EXIT

fail() {
	[ -s "$log" ] && cat "$log" >&2
	echo "install-docker.sh: $*" >&2
	exit 1
}

# 1. packages
missing=""
# dockerd, not docker: these machines ship a docker client without an engine.
command -v dockerd >/dev/null 2>&1 || [ -x /usr/sbin/dockerd ] || missing="$missing docker.io"
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || missing="$missing iptables"
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || missing="$missing debootstrap"
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || missing="$missing iproute2"
if [ -n "$missing" ]; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update >"$log" 2>&1 || fail "apt-get update failed"
	# shellcheck disable=SC2086 # word splitting of the package list is wanted
	apt-get install -y --no-install-recommends $missing >"$log" 2>&1 || fail "apt-get install$missing failed"
fi

# 2. engine
if ! docker info >/dev/null 2>&1; then
	command -v dockerd >/dev/null 2>&1 || fail "dockerd not found (is docker.io installed?)"
	nohup dockerd >>/var/log/dockerd.log 2>&1 &
	i=0
	until docker info >/dev/null 2>&1; do
		i=$((i + 1))
		if [ "$i" -ge 60 ]; then
			tail -n 30 /var/log/dockerd.log >&2 || true
			fail "dockerd did not answer within 60 s (log: /var/log/dockerd.log)"
		fi
		sleep 1
	done
fi

# 3. Compose v2
if [ -n "${COMPOSE_PLUGIN_DIR:-}" ] || ! docker compose version >/dev/null 2>&1; then
	command -v go >/dev/null 2>&1 || fail "Go is needed to build Docker Compose $COMPOSE_VERSION (install Go 1.26 first)"
	json=$(GOFLAGS=-mod=mod go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" 2>"$log") ||
		fail "go mod download github.com/docker/compose/v2@$COMPOSE_VERSION failed"
	dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -d "$dir" ] || fail "could not find the downloaded module directory in: $json"
	work=$(mktemp -d)
	cleanup() { rm -f "$log"; rm -rf "$work"; }
	cp -R "$dir/." "$work/"
	chmod -R u+w "$work"
	(cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
		-ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" \
		-o docker-compose ./cmd) >"$log" 2>&1 || fail "go build of Docker Compose $COMPOSE_VERSION failed"
	mkdir -p "$PLUGIN_DIR"
	install -m 0755 "$work/docker-compose" "$PLUGIN_DIR/docker-compose"
	if [ -z "${COMPOSE_PLUGIN_DIR:-}" ]; then
		docker compose version >/dev/null 2>&1 || fail "docker compose version fails after installing $PLUGIN_DIR/docker-compose"
	fi
fi
