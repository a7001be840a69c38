#!/usr/bin/env bash
# rebuild.sh [--no-cache] [--offline] [--transparent] — build and (re)start the CodeForge
# Docker stack, wait until the server is ready, print the line that connects
# Claude Code.
#
#   1. builds the codeforge and codeforge-run binaries on the host
#      (CGO_ENABLED=0; the images copy them: see deploy/codeforge/Dockerfile
#      for why);
#   2. makes sure the base images exist: uses debian:bookworm-slim and
#      denoland/deno:bin-2.9.6 when present or pullable, otherwise (or always
#      with --offline) builds local stand-ins with deploy/build-base-images.sh
#      (debootstrap + Deno from npm; no registry needed);
#   3. makes sure .env exists (an empty one, mode 0640, when missing): the
#      proxy container mounts it and reads it again on every reload;
#      docker compose build (--no-cache passes through), docker compose up -d;
#   4. waits for http://127.0.0.1:${CODEFORGE_PORT:-8080}/health (up to
#      ${CODEFORGE_READY_TIMEOUT:-120} s), showing the logs if it never gets ready.
# --transparent adds deploy/transparent/compose.transparent.yml (the proxy in
# transparent mode; README); later compose commands need the same files:
#   COMPOSE_FILE=docker-compose.yml:deploy/transparent/compose.transparent.yml
# Needs Go, a Docker engine and Compose v2 (deploy/install-docker.sh).
set -euo pipefail
cd "$(dirname "$0")"

no_cache=()
offline=0
for arg in "$@"; do
	case $arg in
	--no-cache) no_cache=(--no-cache) ;;
	--offline) offline=1 ;;
	--transparent) export COMPOSE_FILE=docker-compose.yml:deploy/transparent/compose.transparent.yml ;;
	-h | --help)
		sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "rebuild.sh: unknown argument $arg (use --no-cache, --offline, --transparent)" >&2
		exit 2
		;;
	esac
done

die() {
	echo "rebuild.sh: $*" >&2
	exit 1
}

command -v go >/dev/null || die "Go is needed to build the codeforge binary (install Go 1.26)"
docker info >/dev/null 2>&1 || die "no Docker engine answers: run deploy/install-docker.sh (as root)"
docker compose version >/dev/null 2>&1 || die "Docker Compose v2 is missing: run deploy/install-docker.sh (as root)"

# .env: the proxy's secrets (and compose's variables). The proxy container
# mounts it read-only and reads it again on every reload (docker-compose.yml),
# so it must exist before compose starts (a missing bind source would be
# refused); new ones are 0640, readable by their owner's group, through which
# the proxy (uid 10001) reads it: CODEFORGE_ENV_GID, recorded in .env itself
# when it is not root's group 0 (compose's default), so that later plain
# docker compose commands agree.
if [ -e .env ] && [ ! -f .env ]; then
	die ".env is not a regular file (a directory, made by an older bind mount of a missing file?): remove it and run rebuild.sh again, or make it a file of NAME=value lines"
fi
if [ ! -e .env ]; then
	(umask 027 && : >.env) || die "cannot create .env"
	echo "rebuild.sh: created an empty .env (mode 0640): put API secrets there (README: Adding an API)" >&2
fi
env_gid=$(stat -c %g .env 2>/dev/null || stat -f %g .env) || die "cannot stat .env"
if [ -z "$(find .env -perm -g+r)" ]; then
	chmod g+r .env || die "cannot make .env readable by its group (the proxy container reads it through that group)"
	echo "rebuild.sh: made .env readable by its group ($env_gid): the proxy container reads it through that group" >&2
fi
if [ -n "${CODEFORGE_ENV_GID:-}" ] && [ "$CODEFORGE_ENV_GID" != "$env_gid" ]; then
	echo "rebuild.sh: CODEFORGE_ENV_GID=$CODEFORGE_ENV_GID is not the group of .env ($env_gid): the proxy may be unable to read it" >&2
fi
if [ -z "${CODEFORGE_ENV_GID:-}" ] && [ "$env_gid" != 0 ] && ! grep -q '^[[:space:]]*CODEFORGE_ENV_GID[[:space:]]*=' .env; then
	printf '# the group through which the proxy container reads this file (rebuild.sh)\nCODEFORGE_ENV_GID=%s\n' "$env_gid" >>.env
fi
export CODEFORGE_ENV_GID=${CODEFORGE_ENV_GID:-$env_gid}

# the published port, as compose sees it: the shell, then .env
port=${CODEFORGE_PORT:-}
if [ -z "$port" ] && [ -f .env ]; then
	port=$(sed -n 's/^[[:space:]]*CODEFORGE_PORT[[:space:]]*=[[:space:]]*["'\'']\{0,1\}\([0-9]*\).*/\1/p' .env | tail -n 1)
fi
port=${port:-8080}

# 1. the binary the images copy
CGO_ENABLED=0 go build -trimpath -o bin/codeforge ./cmd/codeforge || die "go build ./cmd/codeforge failed"
# the sandbox image's run wrapper (deploy/sandbox/Dockerfile copies it)
CGO_ENABLED=0 GOOS=linux go build -trimpath -o bin/codeforge-run ./cmd/codeforge-run || die "go build ./cmd/codeforge-run failed"

# 2. base images
have_image() { docker image inspect "$1" >/dev/null 2>&1; }
usable() { have_image "$1" || { [ "$offline" = 0 ] && docker pull -q "$1" >/dev/null 2>&1; }; }
debian=${CODEFORGE_DEBIAN_BASE:-debian:bookworm-slim}
deno=${CODEFORGE_DENO_IMAGE:-denoland/deno:bin-2.9.6}
if [ "$offline" = 1 ] || ! usable "$debian" || ! usable "$deno"; then
	if [ "$offline" = 1 ]; then
		echo "rebuild.sh: --offline: using local base images (deploy/build-base-images.sh, about a minute the first time)" >&2
	else
		echo "rebuild.sh: $debian or $deno cannot be pulled; building local base images (deploy/build-base-images.sh, about a minute)" >&2
	fi
	deploy/build-base-images.sh
	debian=codeforge/debian-base:bookworm
	deno=codeforge/deno:bin-2.9.6
fi
export CODEFORGE_DEBIAN_BASE=$debian CODEFORGE_DENO_IMAGE=$deno

# 3. images and containers
docker compose build "${no_cache[@]}" || die "docker compose build failed"
docker compose up -d --remove-orphans || die "docker compose up failed"

# 4. readiness
health() {
	local url="http://127.0.0.1:$port/health"
	if command -v curl >/dev/null; then
		curl -fsS -m 5 -o /dev/null "$url" 2>/dev/null
	else
		# bash's /dev/tcp: enough for one GET on loopback.
		local status
		{ exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || return 1
		printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1:%s\r\n\r\n' "$port" >&3
		read -r -t 5 _ status _ <&3 || status=""
		exec 3<&- 3>&-
		[ "$status" = 200 ]
	fi
}
deadline=$((SECONDS + ${CODEFORGE_READY_TIMEOUT:-120}))
until health; do
	if [ "$SECONDS" -ge "$deadline" ]; then
		docker compose ps -a >&2 || true
		docker compose logs --tail 40 >&2 || true
		die "the server did not report ready on http://127.0.0.1:$port/health (logs above)"
	fi
	sleep 1
done

if [ -n "${COMPOSE_FILE:-}" ]; then
	echo "Transparent proxy mode: run later compose commands with COMPOSE_FILE=$COMPOSE_FILE"
fi
echo "CodeForge is up on http://localhost:$port/mcp. Connect Claude Code with:"
echo "  claude mcp add --transport http codeforge http://localhost:$port/mcp"
