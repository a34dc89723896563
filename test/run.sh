#!/usr/bin/env bash
# Run every suite from a clean checkout on a fresh Debian machine, as root:
# installs what is missing, builds the extension with warnings as errors,
# installs it into a private copy of the PostgreSQL installation (the
# system's files are never touched), then runs the regression, isolation
# and TAP suites as the postgres user, and once more under UBSan and
# valgrind; then builds the Debian package, installs it with dpkg, tests it
# and removes it again, putting back any file it replaced (test/package.sh),
# and checks the PGXN release (test/meta.sh).  Every server (PostgreSQL,
# Redis) is started on loopback by its suite and stopped by it.
#
#   PG_CONFIG=/path/to/pg_config bash test/run.sh   # any installation
#   RL_SUITES="regression tap" bash test/run.sh     # some suites only
#   PROVE_TESTS=test/t/031_redis_failures.pl RL_SUITES=tap bash test/run.sh
#   RL_KEEP=1 bash test/run.sh                      # keep results and logs
#   RL_TAP_FULL=1 PG_CONFIG=... bash test/run.sh   # every TAP test on 16-18 too
#
# RL_SUITES lists what to run, from: structure regression isolation tap
# sanitize package meta (default: all of them).  structure checks the
# source's shape (test/structure.sh: no file above 800 lines, no cycle of
# includes or calls between files) on the build just made.  sanitize and package run on
# PostgreSQL 15 only: sanitize because Debian's build of the server is what
# the pass was made for, package because it builds the Debian package
# (test/package.sh) for Debian's PostgreSQL, whatever PG_CONFIG says.  meta
# checks META.json and "make dist" (test/meta.sh).
set -euo pipefail
cd "$(dirname "$0")"
. ./common.sh

suites="${RL_SUITES:-structure regression isolation tap sanitize package meta}"
has() { [[ " $suites " == *" $1 "* ]]; }

rl_require_root
rl_install_packages \
	$(has package && echo dpkg-dev debhelper postgresql-server-dev-all) \
	$(has meta && echo unzip)
rl_build_install
# Servers a test left running (its process killed before it could stop
# them: Redis servers, postmasters) are killed by their working folder,
# which is under the work folder.
stop_leftovers() {
	local p cwd
	for p in /proc/[0-9]*; do
		cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
		cwd=${cwd% (deleted)}
		case "$cwd" in
		"$RL_WORK"/*)
			[ "${p#/proc/}" != "$$" ] && kill -9 "${p#/proc/}" 2>/dev/null
			;;
		esac
	done
	return 0
}
# RL_KEEP=1 keeps the work folder (results, logs) for a look afterwards
trap 'stop_leftovers; [ -n "${RL_KEEP:-}" ] && echo "== kept $RL_WORK" || rm -rf "$RL_WORK"' EXIT

# Each suite runs even when another failed; the closing line counts them.
log="$RL_WORK/installcheck.log"
: >"$log"
status=0
suite() {
	echo "== $1"
	shift
	rl_installcheck "$@" 2>&1 | tee -a "$log" || status=1
}
if has structure; then
	echo "== structure"
	bash ./structure.sh "$RL_TREE" 2>&1 | tee -a "$log" || status=1
fi
has regression && suite "regression" ISOLATION= TAP_TESTS=
has isolation && suite "isolation" REGRESS= TAP_TESTS=
# On a major other than 15 the TAP suite leaves out the long tests whose
# code is the same on every major (the algorithms' and Redis replies'
# conformance, hostile servers, the guide's examples, memory accounting):
# 15 runs them, and every other test still covers what differs between
# majors (compat.h).  RL_TAP_FULL=1 runs them all (CI time, #9).
tap_long="010_conformance 030_redis_conformance 039_redis_hostile"
tap_long="$tap_long 043_redis_hostile_loops 047_refund_memory 077_guide"
if has tap; then
	if [ -z "${PROVE_TESTS:-}" ] && [ "$RL_PG_MAJOR" != 15 ] &&
		[ -z "${RL_TAP_FULL:-}" ]; then
		PROVE_TESTS=
		for t in "$RL_TREE"/test/t/*.pl; do
			t=$(basename "$t" .pl)
			[[ " $tap_long " == *" $t "* ]] ||
				PROVE_TESTS="$PROVE_TESTS test/t/$t.pl"
		done
		echo "== TAP: left out on $RL_PG_MAJOR (RL_TAP_FULL=1 runs them): $tap_long"
	fi
	if [ -n "${PROVE_TESTS:-}" ]; then
		suite "TAP" REGRESS= ISOLATION= PROVE_TESTS="${PROVE_TESTS# }"
	else
		suite "TAP" REGRESS= ISOLATION=
	fi
fi

# The same suites under UBSan and valgrind (test/sanitize.sh), counted as
# one test.
sanitized=skipped
if has sanitize && [ "$RL_PG_MAJOR" = 15 ]; then
	echo "== sanitizers"
	sanitized=pass
	bash ./sanitize.sh || { status=1; sanitized=fail; }
fi

# The Debian package and the PGXN release: each closes with a line
# "NAME: N passed, M failed", counted below.
if has package && [ "$RL_PG_MAJOR" = 15 ]; then
	echo "== package"
	bash ./package.sh 2>&1 | tee -a "$log" || status=1
fi
if has meta; then
	echo "== meta"
	bash ./meta.sh 2>&1 | tee -a "$log" || status=1
fi

passed=$(perl -ne '$n += $1 if /All (\d+) tests passed/;
	$n += $1 if /^Files=\d+, Tests=(\d+)/;
	$n -= $1 if /Failed (\d+)\/\d+ subtests/;
	$n += $1 if /^(?:structure|package|meta): (\d+) passed, \d+ failed$/;
	END { print $n + 0 }' "$log")
failed=$(perl -ne '$n += $1 if /(\d+) of \d+ tests failed/;
	$n += $1 if /Failed (\d+)\/\d+ subtests/;
	$n += $1 if /^(?:structure|package|meta): \d+ passed, (\d+) failed$/;
	END { print $n + 0 }' "$log")
case $sanitized in
pass) passed=$((passed + 1)) ;;
fail) failed=$((failed + 1)) ;;
esac
if [ $status -ne 0 ]; then
	for f in "$RL_TREE/regression.diffs" "$RL_TREE/output_iso/regression.diffs" \
		"$RL_TREE"/tmp_check/log/regress_log_*; do
		[ -f "$f" ] || continue
		echo "== $f"
		tail -n 200 "$f"
	done
	[ "$failed" -gt 0 ] || failed=1
fi
echo "tests ($RL_PG_VERSION): $passed passed, $failed failed"
exit $status
