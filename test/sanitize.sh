#!/usr/bin/env bash
# Run the suites with undefined-behaviour and memory checking, as root (like
# test/run.sh): installs what is missing, builds, runs, prints one closing
# PASS or FAIL line, and exits non-zero on any report.
#
# Two passes, both on a private copy of the PostgreSQL installation under
# the work folder, so the system's ratelimit.so is never replaced by a
# checking build (other suites may be running on this machine):
#
#  1. UBSan.  ratelimit built with -fsanitize=undefined
#     -fno-sanitize-recover=all, then the regression, isolation and TAP
#     suites.  The UBSan runtime is a shared library that ratelimit.so
#     pulls in itself, so the uninstrumented postgres needs no change.  The
#     first signed overflow (with -fno-wrapv), bad shift, misaligned
#     access or out-of-range float conversion in our code aborts the
#     backend and leaves a report: the
#     algorithms' 64- and 128-bit arithmetic on extreme arguments (020_fuzz)
#     is what this is for.
#  2. Valgrind memcheck.  The normal build, with the server run under
#     valgrind (the private copy's bin/postgres is a wrapper that starts
#     the real binary under it, so pg_regress's temporary instance needs no
#     change), on the regression and isolation suites and a short fuzz run;
#     the longer TAP suites would take too long under valgrind.  It catches
#     reads of uninitialised stack and heap memory and invalid accesses to
#     malloc'd memory.  Only reports whose stack or origin lies in
#     ratelimit fail the run; PostgreSQL's own (Debian builds it without
#     valgrind support) are counted and suppressed by test/valgrind.supp.
#
# Neither tool sees inside shared memory: the store's own bounds are
# checked by its tests (002_store_full, 021_flood).  AddressSanitizer is not
# used: it needs its runtime preloaded into the uninstrumented postgres,
# and Debian's postgres 15 hangs at start with it (even "postgres -V").
#
# Both passes take about 6 minutes on 2 cores.  RL_SANITIZE=ubsan or
# RL_SANITIZE=valgrind runs one pass only.
set -euo pipefail
cd "$(dirname "$0")"
. ./common.sh

rl_require_root
rl_install_packages valgrind
rl_build_install

PG_BIN="$RL_BINDIR"
VALGRIND_LOGS="$RL_WORK/valgrind"
LOG="$RL_WORK/suites.log"
SUPP="$RL_TREE/test/valgrind.supp"
passes="${RL_SANITIZE:-ubsan valgrind}"

# Stop every server still running from the private installation (the
# suites stop their own; this is for an interrupted run), by the pid in
# its postmaster.pid, then remove the work folder.
cleanup() {
	local pidfile pid
	for pidfile in $(find "$RL_WORK" -name postmaster.pid 2>/dev/null); do
		pid=$(head -n 1 "$pidfile")
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
			echo "== stopping the server $pid of $(dirname "$pidfile")"
			kill -QUIT "$pid" 2>/dev/null || true
		fi
	done
	rm -rf "$RL_WORK"
}
trap cleanup EXIT

# In the private installation (rl_build_install made it), bin/postgres
# becomes a wrapper that runs the real binary under $RL_SAN_SERVER, except
# for initdb's bootstrap and the version and setting probes.
wrap_postgres() {
	mv "$PG_BIN/postgres" "$PG_BIN/postgres.real"
	cat >"$PG_BIN/postgres" <<'EOF'
#!/bin/sh
case "$1" in
--boot | --single | --check | -V | --version | -C | --describe-config)
	exec "$0.real" "$@" ;;
esac
exec $RL_SAN_SERVER "$0.real" "$@"
EOF
	chmod 755 "$PG_BIN/postgres"
	mkdir -p "$VALGRIND_LOGS"
	chown -R postgres:postgres "$PG_BIN" "$VALGRIND_LOGS"
}

# Build the tree with COPT=$1 and install it into the private copy only.
build_private() {
	echo "== building with COPT='$1'"
	rl_build "$1"
}

# Run "make installcheck" on the private installation; the arguments are
# make variables.  Failures are recorded, the next suite still runs.  The
# server logs are read before the next suite replaces them: a UBSan report
# (it goes to the server's stderr, and the backend exits), or a backend
# killed by SIGABRT, SIGSEGV, SIGBUS, SIGILL or SIGFPE, fails the run even
# if no test noticed.  (Tests may kill backends with SIGKILL or SIGTERM on
# purpose.)
failures=()
suite() {
	local name="$1" f logs
	shift
	echo "== $name"
	if ! PGCTLTIMEOUT=600 rl_installcheck "$@" 2>&1 | tee -a "$LOG"; then
		failures+=("$name: a test failed")
		for f in "$RL_TREE/regression.diffs" "$RL_TREE/output_iso/regression.diffs"; do
			[ -f "$f" ] && tail -n 60 "$f"
		done
	fi
	logs=$(find "$RL_TREE" \( -name postmaster.log -o -path '*/tmp_check/log/*.log' \) \
		-type f -newer "$LOG.start" 2>/dev/null || true)
	touch "$LOG.start"
	[ -n "$logs" ] || return 0
	if grep -h -E 'runtime error:' $logs >"$RL_WORK/reports.new"; then
		failures+=("$name: undefined behaviour reported")
		head -n 20 "$RL_WORK/reports.new"
		cat "$RL_WORK/reports.new" >>"$RL_WORK/reports"
	fi
	if grep -h -E 'terminated by signal (4|6|7|8|11)\b' $logs >"$RL_WORK/crashes"; then
		failures+=("$name: a server process crashed")
		head -n 20 "$RL_WORK/crashes"
	fi
	return 0
}

ubsan_pass() {
	# PostgreSQL compiles with -fwrapv, which makes signed overflow defined
	# and turns its check off: -fno-wrapv turns it back on for our code.
	# float-cast-overflow is not part of "undefined" in gcc.  The runtime
	# cannot read UBSAN_OPTIONS (the postmaster has overwritten its
	# environment for its process title by the time ratelimit.so loads
	# it), so reports go to the server logs, which suite() reads.
	build_private "-Werror -fsanitize=undefined,float-cast-overflow -fno-sanitize-recover=all -fno-wrapv -fno-omit-frame-pointer"
	: >"$RL_WORK/reports"
	suite "ubsan: regression" ISOLATION= TAP_TESTS=
	suite "ubsan: isolation" REGRESS= TAP_TESTS=
	suite "ubsan: TAP" REGRESS= ISOLATION=
	echo "== ubsan: $(wc -l <"$RL_WORK/reports") report(s)"
}

valgrind_pass() {
	build_private "-Werror"
	# JIT would make valgrind crawl (and reports from inside LLVM)
	echo "jit = off" >"$RL_WORK/valgrind.conf"
	chown postgres "$RL_WORK/valgrind.conf"
	export RL_SAN_SERVER="valgrind --quiet --trace-children=yes
		--track-origins=yes --num-callers=40 --read-var-info=no
		--error-limit=no --fullpath-after= --suppressions=$SUPP
		--log-file=$VALGRIND_LOGS/%p.log"
	suite "valgrind: regression" ISOLATION= TAP_TESTS= \
		EXTRA_REGRESS_OPTS="--temp-config=$RL_WORK/valgrind.conf"
	suite "valgrind: isolation" REGRESS= TAP_TESTS= \
		EXTRA_REGRESS_OPTS="--temp-config=$RL_WORK/valgrind.conf"
	RL_FUZZ_CALLS=500 suite "valgrind: fuzz" REGRESS= ISOLATION= \
		PROVE_TESTS=test/t/020_fuzz.pl
	unset RL_SAN_SERVER
	# An error is ours when its stack or its origin has a frame in
	# ratelimit: in its sources (full paths, --fullpath-after=) or, for a
	# frame without debug information, in ratelimit.so.
	local summary
	summary=$(perl -e '
		my ($tree, $dir) = @ARGV;
		my ($ours, $theirs) = (0, 0);
		foreach my $f (glob("$dir/*.log")) {
			open my $fh, "<", $f or next;
			local $/;
			my $text = <$fh>;
			# blocks are separated by a line holding only "==pid== "
			foreach my $block (split /^==\d+==\s*\n/m, $text) {
				next unless $block =~ /^==\d+== \S/m;
				if ($block =~ m{\Q$tree\E/src/|ratelimit\.so}) {
					$ours++;
					print STDERR $block, "\n" if $ours <= 5;
				} else {
					$theirs++;
				}
			}
		}
		print "$ours $theirs\n";
	' "$RL_TREE" "$VALGRIND_LOGS")
	local ours=${summary% *} theirs=${summary#* }
	local logs
	logs=$(find "$VALGRIND_LOGS" -name '*.log' -type f | wc -l)
	echo "== valgrind: $logs processes, $ours error(s) in ratelimit, $theirs elsewhere (not ours)"
	[ "$ours" -eq 0 ] || failures+=("valgrind: $ours error(s) in ratelimit")
	[ "$logs" -gt 0 ] || failures+=("valgrind: no server ran under valgrind")
}

wrap_postgres
touch "$LOG.start"
for pass in $passes; do
	"${pass}_pass"
done

if [ ${#failures[@]} -eq 0 ]; then
	echo "sanitize: PASS ($passes)"
	exit 0
fi
echo "sanitize: FAIL"
printf '  %s\n' "${failures[@]}"
exit 1
