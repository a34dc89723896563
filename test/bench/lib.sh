# test/bench/lib.sh: helpers shared by run.sh, redis.sh, cost.sh and all.sh
# (sourced).
# shellcheck shell=bash

# shellcheck source-path=SCRIPTDIR source=../common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

# A whole number with thousands separators: 1000000 is "1,000,000".
thousands() {
	sed -e ':a' -e 's/\([0-9]\)\([0-9]\{3\}\)\(,\|$\)/\1,\2\3/' -e 'ta' <<<"$1"
}

# A label for a key count: "hot key" for 1, else "10,000 keys".
keys_label() {
	if [ "$1" = 1 ]; then
		echo "hot key"
	else
		echo "$(thousands "$1") keys"
	fi
}

# How busy the machine is with other work: the share of its CPUs' time
# spent outside idle and I/O wait over the next two seconds (/proc/stat),
# printed as a fraction.  Called before a benchmark starts anything of its
# own.  The load average is not judged by: it counts tasks in
# uninterruptible sleep, and on a virtual machine kernel threads keep it
# near 1 on an idle machine.
bench_busy_share() {
	local a b
	a=$(bench_cpu_times)
	sleep 2
	b=$(bench_cpu_times)
	awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " ");
		t = y[2] - x[2]; printf "%.2f", (t > 0 ? (y[1] - x[1]) / t : 0) }'
}

# The CPUs' busy time and total time so far (/proc/stat's "cpu" line, in
# ticks: user, nice, system, irq, softirq and steal; then with idle and
# iowait too).
bench_cpu_times() {
	awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat
}

# Is a busy share (bench_busy_share) busy: above a quarter of the CPUs?
bench_is_busy() {
	awk -v s="$1" 'BEGIN { print (s > 0.25) ? 1 : "" }'
}

# A report's table row for a busy share (bench_busy_share).
bench_busy_row() {
	awk -v s="$1" 'BEGIN { printf "| other work before the run | %.0f%% of the CPUs'"'"' time over 2 s (busy above 25%%) |\n", 100 * s }'
}

# The installation a benchmark runs against, never the system's own: all.sh
# makes one private copy for all its phases and passes its root in
# RL_BENCH_PG; a script run on its own makes its own copy here, as the test
# command does (test/common.sh): this tree's extension (warnings as errors)
# and the floor module (test/bench/floor) built and installed into a copy of
# PG_CONFIG's installation.  The arguments are Debian packages the caller
# needs besides the test command's.  Needs root.  Sets bindir and libdir
# (the copy's), and bench_work when the copy was made here: bench_uninstall
# removes it.
# shellcheck disable=SC2034,SC2120  # bindir and libdir are for the callers
bench_install() {
	local root_dir
	rl_require_root
	if [ -n "${RL_BENCH_PG:-}" ]; then
		root_dir=$RL_BENCH_PG
		bench_work=
		: "${PG_CONFIG:?RL_BENCH_PG needs the PG_CONFIG its copy was made from}"
	else
		rl_install_packages "$@"
		rl_build_install ""
		echo "== building the floor module"
		runuser -u postgres -- make -s -C "$RL_TREE/test/bench/floor" \
			PG_CONFIG="$PG_CONFIG" COPT=-Werror
		make -s -C "$RL_TREE/test/bench/floor" PG_CONFIG="$PG_CONFIG" \
			install DESTDIR="$RL_PG" >/dev/null
		root_dir=$RL_PG
		bench_work=$RL_WORK
	fi
	bindir=$root_dir$("$PG_CONFIG" --bindir)
	libdir=$root_dir$("$PG_CONFIG" --pkglibdir)
	RL_BENCH_PG=$root_dir
	if [ ! -f "$libdir/ratelimit.so" ] || [ ! -f "$libdir/rl_floor.so" ]; then
		echo "no ratelimit.so or rl_floor.so in $libdir" >&2
		exit 1
	fi
}

# Remove the copy bench_install made (nothing when it was given one).
bench_uninstall() {
	if [ -n "${bench_work:-}" ]; then
		rm -rf "$bench_work"
		bench_work=
	fi
}

# A benchmark's workspace: bench_install (the arguments are its packages),
# then a throwaway folder $tmp owned by postgres, with $data for a server's
# data directory (bench_initdb makes it), and traps that at exit stop that
# server if it runs, kill a Redis server whose pid is in $tmp/redis.pid,
# and remove $tmp and the installation's copy.  $1 names the folder.
bench_workspace() {
	local name=$1
	shift
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")
	data=$tmp/data
	trap bench_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	bench_install "$@"
	chown postgres: "$tmp"
}

# The exit trap of bench_workspace; keeps the script's exit status.
bench_cleanup() {
	local status=$?
	trap - EXIT INT TERM
	if [ -n "${bindir:-}" ] && [ -f "$data/postmaster.pid" ]; then
		runuser -u postgres -- "$bindir/pg_ctl" -D "$data" -m immediate -w \
			stop >/dev/null 2>&1 || true
	fi
	if [ -s "$tmp/redis.pid" ]; then
		kill -9 "$(cat "$tmp/redis.pid")" 2>/dev/null || true
	fi
	rm -rf "$tmp"
	bench_uninstall
	exit "$status"
}

# A Redis server for a benchmark on loopback port $1, as postgres, without
# persistence, its pid in $tmp/redis.pid (bench_cleanup kills it) and its
# log in $tmp/redis.log; the other arguments go before the command (a
# taskset).  Returns once it answers, or fails (and kills it) if it does
# not within 5 s.
bench_redis_start() {
	local port=$1
	shift
	rm -f "$tmp/redis.pid"
	runuser -u postgres -- "$@" redis-server --port "$port" --bind 127.0.0.1 \
		--save '' --appendonly no --dir "$tmp" --daemonize yes \
		--pidfile "$tmp/redis.pid" --logfile "$tmp/redis.log" >/dev/null
	for _ in $(seq 100); do
		[ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ] && return 0
		sleep 0.05
	done
	[ -s "$tmp/redis.pid" ] && kill -9 "$(cat "$tmp/redis.pid")" 2>/dev/null
	rm -f "$tmp/redis.pid"
	return 1
}

# initdb of $data as postgres (trust, UTF8, and the arguments), its output
# in $tmp/initdb.log, shown if it fails.
bench_initdb() {
	runuser -u postgres -- "$bindir/initdb" -D "$data" -A trust -E UTF8 "$@" \
		>"$tmp/initdb.log" 2>&1 ||
		{ cat "$tmp/initdb.log" >&2; echo "initdb failed" >&2; exit 1; }
}

# The 50th and 99th percentiles of the numbers on stdin, one a line, as
# "p50 p99" (nearest rank).
percentiles() {
	sort -n | awk '{ v[NR] = $1 }
		END {
			if (NR == 0)
				exit 1
			print v[int((NR - 1) * 0.50) + 1], v[int((NR - 1) * 0.99) + 1]
		}'
}
