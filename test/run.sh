#!/usr/bin/env bash
# Run every suite from a clean checkout on a fresh Debian machine, as root:
# installs what is missing, builds and installs the extension, then runs the
# regression, isolation and TAP suites as the postgres user, and once more
# under UBSan and valgrind.  Every server
# (PostgreSQL, Redis) is started on loopback by its suite and stopped by it.
set -euo pipefail
cd "$(dirname "$0")"
. ./common.sh

rl_require_root
rl_install_packages
rl_build_install
trap 'rm -rf "$RL_WORK"' EXIT

# Each suite runs even when another failed; the closing line counts them.
log="$RL_WORK/installcheck.log"
status=0
suite() {
	echo "== $1"
	shift
	runuser -u postgres -- make -C "$RL_TREE" installcheck "$@" 2>&1 |
		tee -a "$log" || status=1
}
suite "regression" ISOLATION= TAP_TESTS=
suite "isolation" REGRESS= TAP_TESTS=
suite "TAP" REGRESS= ISOLATION=

# The same suites under UBSan and valgrind (test/sanitize.sh), counted as
# one test.
echo "== sanitizers"
sanitized=pass
bash ./sanitize.sh || { status=1; sanitized=fail; }

passed=$(perl -ne '$n += $1 if /All (\d+) tests passed/;
	$n += $1 if /^Files=\d+, Tests=(\d+)/;
	$n -= $1 if /Failed (\d+)\/\d+ subtests/; END { print $n + 0 }' "$log")
failed=$(perl -ne '$n += $1 if /(\d+) of \d+ tests failed/;
	$n += $1 if /Failed (\d+)\/\d+ subtests/; END { print $n + 0 }' "$log")
if [ $sanitized = pass ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
if [ $status -ne 0 ]; then
	for f in "$RL_TREE/regression.diffs" "$RL_TREE"/tmp_check/log/regress_log_*; do
		[ -f "$f" ] || continue
		echo "== $f"
		tail -n 200 "$f"
	done
	[ "$failed" -gt 0 ] || failed=1
fi
echo "tests: $passed passed, $failed failed"
exit $status
