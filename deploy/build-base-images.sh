#!/bin/sh
# build-base-images.sh [--force] — build, without any container registry,
# the base images the Dockerfiles take as build arguments:
#
#   codeforge/debian-base:bookworm  (stands in for debian:bookworm-slim)
#       debootstrap --variant=minbase bookworm from this machine's own Debian
#       mirror, with ca-certificates and iptables, apt lists and docs
#       stripped, then `docker import`.
#   codeforge/deno:bin-2.9.6        (stands in for denoland/deno:bin-2.9.6)
#       just /deno, the binary npm's @deno/linux-x64-glibc ships
#       (install-deno.sh), imported from a tar.
#
# An image that already exists is kept unless --force is given. Run as root
# (debootstrap). Quiet unless it fails; about a minute on a fresh machine.
set -eu

DEBIAN_IMAGE=codeforge/debian-base:bookworm
DENO_IMAGE=codeforge/deno:bin-2.9.6
HERE=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)

force=0
for arg in "$@"; do
	case $arg in
	--force) force=1 ;;
	-h | --help)
		sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "build-base-images.sh: unknown argument $arg (only --force)" >&2
		exit 2
		;;
	esac
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$work/log

fail() {
	[ -s "$log" ] && tail -n 40 "$log" >&2
	echo "build-base-images.sh: $*" >&2
	exit 1
}

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

# mirror prints the first Debian mirror URI of this machine's apt sources.
mirror() {
	m=""
	if [ -f /etc/apt/sources.list.d/debian.sources ]; then
		m=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources | grep -v -- '-security' | head -n 1)
	fi
	if [ -z "$m" ] && [ -f /etc/apt/sources.list ]; then
		m=$(sed -n 's/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]\{1,\}\)\{0,1\}\([^[:space:]]*\)[[:space:]].*/\2/p' /etc/apt/sources.list | grep -v -- '-security' | head -n 1)
	fi
	[ -n "$m" ] || m=http://deb.debian.org/debian
	echo "$m"
}

if [ "$force" = 1 ] || ! have_image "$DEBIAN_IMAGE"; then
	command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] ||
		fail "debootstrap is missing: run deploy/install-docker.sh (or apt-get install -y debootstrap)"
	[ "$(id -u)" = 0 ] || fail "debootstrap needs root"
	root=$work/rootfs
	PATH=$PATH:/usr/sbin:/sbin debootstrap --variant=minbase --include=ca-certificates,iptables \
		bookworm "$root" "$(mirror)" >"$log" 2>&1 || fail "debootstrap bookworm from $(mirror) failed"
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
		"$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
		"$root"/usr/share/locale/* "$root"/var/log/* "$root"/tmp/* "$root"/root/.cache
	tar -C "$root" -c . | docker import -c 'CMD ["/bin/bash"]' - "$DEBIAN_IMAGE" >"$log" 2>&1 ||
		fail "docker import $DEBIAN_IMAGE failed"
	rm -rf "$root"
fi

if [ "$force" = 1 ] || ! have_image "$DENO_IMAGE"; then
	deno=$("$HERE/install-deno.sh") || fail "could not get Deno (install-deno.sh failed)"
	mkdir -p "$work/deno"
	cp "$deno" "$work/deno/deno"
	chmod 0755 "$work/deno/deno"
	tar -C "$work/deno" -c deno | docker import - "$DENO_IMAGE" >"$log" 2>&1 ||
		fail "docker import $DENO_IMAGE failed"
fi
