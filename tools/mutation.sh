#!/usr/bin/env bash
# Mutation testing of CodeForge's security-critical code with gremlins
# (github.com/go-gremlins/gremlins): each mutant is a small change to the
# code (a condition negated, a boundary moved, && turned into ||, a break
# turned into a continue, ...); the package's tests run against it, and a
# mutant the tests do not notice ("LIVED") is a promise no test pins.
#
#   tools/mutation.sh [TARGET...]
#
# TARGETs (default: rewrite guards dockerfilter proxy):
#   rewrite       proxy/rewrite (streaming substitution)
#   guards        the HTTP guards of server/ (Host/Origin, bearer token,
#                 body cap): server/http.go, with the tests that claim them
#   dockerfilter  the Docker socket filter, with its tests that need no
#                 engine (every refusal is decided before the engine is
#                 asked): minutes
#   dockerfilter-docker
#                 the same with every test against the real engine but
#                 the Compose one: each mutant starts the test containers
#                 again, one to two minutes a mutant on 2 cores
#   proxy         the egress proxy package (proxy/*.go, not its subfolders)
#
# Settings (environment):
#   CHANGED_SINCE=REV  mutate only the files of a target that changed since
#                      git revision REV (for a quick run after a change)
#   FILES="a.go b.go"  mutate only these files of the target's folder
#   WORKERS=N          parallel mutants (default 1: the machine is small and
#                      the Docker tests share one engine)
#   OUT=DIR            where reports go (default mutation-out/)
#
# Per target, gremlins gives each mutant's test run the time the coverage
# run took times a coefficient (below); a slower mutant counts as TIMED
# OUT (e.g. a loop that no longer ends), which is a kill.
#
# Every LIVED mutant must be killed by a test or listed in docs/MUTATION.md
# as equivalent, by its "TYPE at path:line:col" key, with one line saying
# why. The script exits 1 when a survivor is neither.
#
# Not part of ./test.sh: a full run takes hours on 2 cores (see
# docs/MUTATION.md for the last figures).
set -euo pipefail
cd "$(dirname "$0")/.."

GREMLINS_VERSION=v0.6.0
WORKERS=${WORKERS:-1}
OUT=${OUT:-mutation-out}
gobin="$(go env GOPATH)/bin"
gremlins="$gobin/gremlins"
if ! go version -m "$gremlins" 2>/dev/null | grep -q "github.com/go-gremlins/gremlins[[:space:]]*$GREMLINS_VERSION"; then
	echo "mutation: installing gremlins $GREMLINS_VERSION" >&2
	GOFLAGS= go install "github.com/go-gremlins/gremlins/cmd/gremlins@$GREMLINS_VERSION"
fi
if [ -z "${DENO_BIN:-}" ]; then
	DENO_BIN="$(command -v deno || true)"
fi
if [ -z "$DENO_BIN" ]; then
	echo "mutation: deno not found: run deploy/install-deno.sh (or ./test.sh once) and set DENO_BIN" >&2
	exit 2
fi
export DENO_BIN
mkdir -p "$OUT"

# Extra mutators on top of gremlins' defaults (arithmetic, boundaries,
# negated conditions, ++/--, negatives): && <-> || and break <-> continue
# are exactly the slips that open a security check.
mutators=(--invert-logical --invert-loopctrl)

# target_config NAME sets: dir, tests (a -run regexp; empty = all),
# skip (a -skip regexp), coef (timeout coefficient), keep (files to
# mutate, relative to dir; empty = every non-test file of the package
# itself, not of its subfolders).
target_config() {
	dir= tests= skip= coef=3 keep=
	case "$1" in
	rewrite)
		dir=proxy/rewrite
		;;
	guards)
		dir=server
		keep="http.go"
		tests='^(TestHostAndOriginChecks|TestConfiguredHostsAndOrigins|TestBearerToken|TestRequestBodyCap|TestHealth|TestHostAndOriginLookalikes|TestConfiguredLookalikes|TestBearerTokenSpellings)$'
		;;
	dockerfilter)
		dir=dockerfilter
		tests='^(TestRefusedWithoutAnEngine|TestRunTimeoutBounds|TestExecRegistry|TestCommandRejectsBadFlags)$'
		;;
	dockerfilter-docker)
		dir=dockerfilter
		# TestComposeDiscovery (40 s of Compose per mutant) is left out;
		# the discovery code it covers (sandbox.go) shows as NOT COVERED.
		skip='^TestComposeDiscovery$'
		coef=4
		;;
	proxy)
		dir=proxy
		# The flat-memory test measures memory, not a defence; 8 s a mutant.
		skip='^TestLargeBodiesStreamInFlatMemory$'
		;;
	*)
		echo "mutation: unknown target $1 (want rewrite, guards, dockerfilter, dockerfilter-docker or proxy)" >&2
		exit 2
		;;
	esac
}

run_target() {
	local name=$1
	target_config "$name"
	local excludes=() f base
	# Only the package's own files: never its subfolders (their own targets).
	excludes+=(-E '/')
	for f in "$dir"/*.go; do
		base=${f##*/}
		case "$base" in *_test.go) continue ;; esac
		if [ -n "${FILES:-}" ] && ! grep -qwF -- "$base" <<<"$FILES"; then
			excludes+=(-E "^${base//./\\.}\$")
			continue
		fi
		if [ -n "$keep" ] && ! grep -qwF -- "$base" <<<"$keep"; then
			excludes+=(-E "^${base//./\\.}\$")
			continue
		fi
		if [ -n "${CHANGED_SINCE:-}" ] && git diff --quiet "$CHANGED_SINCE" -- "$f"; then
			excludes+=(-E "^${base//./\\.}\$")
		fi
	done
	# -count=1: a cached coverage run would make every timeout tiny.
	local goflags="${GOFLAGS:-} -count=1"
	[ -n "$tests" ] && goflags="$goflags -run=$tests"
	[ -n "$skip" ] && goflags="$goflags -skip=$skip"
	local log="$OUT/$name.txt"
	echo "mutation: $name: gremlins unleash ./$dir (GOFLAGS=$goflags, timeout coefficient $coef, $WORKERS worker(s))" >&2
	local start=$SECONDS
	GOFLAGS="$goflags" "$gremlins" unleash "./$dir" "${mutators[@]}" "${excludes[@]}" \
		--workers "$WORKERS" --timeout-coefficient "$coef" -o "$OUT/$name.json" >"$log" 2>&1 || {
		echo "mutation: $name: gremlins failed; see $log" >&2
		tail -20 "$log" >&2
		return 1
	}
	echo "mutation: $name: done in $((SECONDS - start)) s" >&2
}

# summarize NAME prints the counts and checks every survivor against
# docs/MUTATION.md.
summarize() {
	local name=$1 log="$OUT/$1.txt" key unexplained=0
	target_config "$name"
	local killed lived timed notcov notviable equivalent=0
	killed=$(grep -c '^ *KILLED ' "$log" || true)
	lived=$(grep -c '^ *LIVED ' "$log" || true)
	timed=$(grep -c '^ *TIMED OUT ' "$log" || true)
	notcov=$(grep -c '^ *NOT COVERED ' "$log" || true)
	notviable=$(grep -c '^ *NOT VIABLE ' "$log" || true)
	while read -r key; do
		[ -z "$key" ] && continue
		if grep -qF -- "$key" docs/MUTATION.md; then
			equivalent=$((equivalent + 1))
		else
			echo "  LIVED, not explained: $key"
			unexplained=$((unexplained + 1))
		fi
	done < <(grep '^ *LIVED ' "$log" | sed -E "s#^ *LIVED ([A-Z_]+) at (.*)#\1 at $dir/\2#")
	printf '%-13s killed %4d  lived %4d (equivalent %d, unexplained %d)  timed out %3d  not covered %3d  not viable %d\n' \
		"$name" "$killed" "$lived" "$equivalent" "$unexplained" "$timed" "$notcov" "$notviable"
	return $((unexplained > 0))
}

# main is one function, read whole before it runs: a run takes hours, and
# bash would otherwise read an edited script from the old offset.
main() {
	local targets=("$@") t failed=0
	[ ${#targets[@]} -eq 0 ] && targets=(rewrite guards dockerfilter proxy)
	for t in "${targets[@]}"; do target_config "$t"; done # fail early on a typo
	for t in "${targets[@]}"; do
		run_target "$t" || failed=1
	done
	echo
	echo "mutation summary (reports in $OUT/):"
	for t in "${targets[@]}"; do
		[ -f "$OUT/$t.txt" ] || continue
		summarize "$t" || failed=1
	done
	exit $failed
}
main "$@"
