#!/bin/bash
#
# test/bench/cost.sh: the cost of one decision (issue 9).
#
# Where many decisions happen inside one statement the limiter's own cost
# shows; this measures it in four parts, on one throwaway server (and its
# data directory, for the single-user runs), against the floors of
# test/bench/floor: rl_floor, a no-op C function with rl_allow's signature,
# and rl_floor_trigger, a no-op C row trigger.
#
#   instructions  callgrind on a single-user backend (postgres --single):
#                 figures that do not move with machine noise.  Each case is
#                 one statement making many calls, run with N1 and with N2
#                 calls in the same backend, callgrind dumping its counts
#                 before each statement (--dump-before=ReadyForQuery): the
#                 statement's fixed costs cancel in
#                 (I(N2) - I(N1)) / (N2 - N1), the instructions per call.
#                 Cases: rl_allow with token_bucket, fixed_window,
#                 sliding_window_log and a policy, on 10,000 keys that exist
#                 already, against rl_floor; INSERT ... SELECT into an
#                 UNLOGGED table with no trigger, the no-op C trigger, a
#                 no-op PL/pgSQL trigger and rl_enforce quota triggers
#                 (policy, token bucket; with and without a cost= expression).
#                 Then the breakdown by function inside ratelimit.so
#                 (callgrind_annotate, inclusive and self, by the same
#                 difference) for the cases in RL_BENCH_COST_PROFILE.
#   cache         the cache lines one call or row reads from beyond the
#                 first level and from beyond a 1 MB last level (this
#                 machine's per-core L2), by callgrind's cache simulation,
#                 measured as the instructions are (the same difference):
#                 the misses of 10,000 keys' state, which the instructions
#                 do not show and the wall clock shows only with its
#                 noise.  Cases: RL_BENCH_COST_CACHE_CASES.
#   wall          one million rl_allow calls in one statement against one
#                 million rl_floor calls; a 1,000,000-row INSERT ... SELECT
#                 into an UNLOGGED table with the rl_enforce trigger, the
#                 no-op C trigger, no trigger and the no-op PL/pgSQL trigger.
#                 Rounds, cases interleaved; median times and the median of
#                 the per-round ratios.
#   memory        the same 1,000,000-row INSERT through the quota trigger in
#                 one transaction, on one key and on 10,000 keys (and
#                 100,000 rows on one key, to tell growth with rows from
#                 growth with keys): the backend's memory contexts
#                 (pg_backend_memory_contexts) at the end of the INSERT,
#                 read inside the transaction, and its peak resident size
#                 (VmHWM), against the same INSERT through the no-op C
#                 trigger.
#   latency       p50 and p99 of one rl_allow per statement (pgbench,
#                 prepared, one client, per-transaction log), local and
#                 through Redis (a throwaway redis-server on loopback), and
#                 the floor's, beside the 1-2 ms a limiter may add (the
#                 design notes' budget).
#
# Prints the figures and writes a report (markdown, its title a level-1
# heading, its parts level 2); all.sh makes it a section of
# test/bench/report.md (phase "cost").
#
# Run as root: it builds this tree's extension and the floor module into a
# private copy of PG_CONFIG's installation, as the test command does
# (test/common.sh), unless all.sh passes its own copy in RL_BENCH_PG.
# Needs valgrind (installed with apt-get when missing), and redis-server for
# the latency part.
#
# Settings (environment):
#   RL_BENCH_COST_PARTS   parts to run
#                             (instructions cache wall memory latency)
#   RL_BENCH_COST_N1, RL_BENCH_COST_N2   calls per statement of the two
#                         callgrind runs                    (20000, 120000)
#   RL_BENCH_COST_KEYS    distinct keys of the cases                (10000)
#                         (ratelimit.max_keys: six times as many, at
#                         least 100,000: the server holds two sets of
#                         them, rl_allow's and the quota trigger's, of one
#                         role, which may hold half of the store; for
#                         "nothing slower at 1M keys", #9)
#   RL_BENCH_COST_CASES   callgrind cases        (all: see case_stmt below)
#   RL_BENCH_COST_CACHE_CASES   cases of the cache part
#                                   (floor token_bucket trigger_floor enforce)
#   RL_BENCH_COST_PROFILE cases broken down by function
#                                                (token_bucket enforce)
#   RL_BENCH_COST_TOP     functions listed per breakdown               (20)
#   RL_BENCH_COST_KEEP    a directory to keep the callgrind files in, for
#                         callgrind_annotate or kcachegrind (the cache
#                         part's as CASE.cache.N1 and .N2)             (none)
#   RL_BENCH_COST_ROWS    calls and rows of the wall and memory parts
#                                                                (1000000)
#   RL_BENCH_ROUNDS       rounds of the wall part, median kept          (5)
#   RL_BENCH_SECONDS      seconds of each latency run                  (10)
#   RL_BENCH_REPORT       where to write the report
#                                  ($TMPDIR or /tmp, ratelimit-cost.md)
#   RL_BENCH_DATA         a directory to receive the raw figures and the
#                         target rows (for all.sh)                   (none)
#   PG_CONFIG             pg_config of the installation to copy
#                                           (Debian's PostgreSQL 15)
#
# To profile one case by hand after a change:
#   RL_BENCH_COST_PARTS=instructions RL_BENCH_COST_CASES="floor token_bucket" \
#   RL_BENCH_COST_PROFILE=token_bucket RL_BENCH_COST_KEEP=/tmp/cg \
#       bash test/bench/cost.sh
# then callgrind_annotate --inclusive=yes /tmp/cg/token_bucket.N2 (the
# statement of N2 calls; .N1 has N1).

set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"

parts=${RL_BENCH_COST_PARTS:-instructions cache wall memory latency}
n1=${RL_BENCH_COST_N1:-20000}
n2=${RL_BENCH_COST_N2:-120000}
nkeys=${RL_BENCH_COST_KEYS:-10000}
all_cases="floor token_bucket fixed_window sliding_window_log policy_floor policy"
all_cases="$all_cases insert trigger_floor trigger_plpgsql enforce enforce_cost"
cases=${RL_BENCH_COST_CASES:-$all_cases}
cache_cases=${RL_BENCH_COST_CACHE_CASES:-floor token_bucket trigger_floor enforce}
profile=${RL_BENCH_COST_PROFILE:-token_bucket enforce}
top=${RL_BENCH_COST_TOP:-20}
keep=${RL_BENCH_COST_KEEP:-}
rows=${RL_BENCH_COST_ROWS:-1000000}
rounds=${RL_BENCH_ROUNDS:-5}
seconds=${RL_BENCH_SECONDS:-10}
report=${RL_BENCH_REPORT:-${TMPDIR:-/tmp}/ratelimit-cost.md}
datadir=${RL_BENCH_DATA:-}

die() { echo "cost.sh: $*" >&2; exit 1; }
has_part() { [[ " $parts " == *" $1 "* ]]; }
as_pg() { runuser -u postgres -- "$@"; }

[ "$n2" -gt "$n1" ] || die "RL_BENCH_COST_N2 ($n2) must be larger than RL_BENCH_COST_N1 ($n1)"
for p in $parts; do
	case $p in
	instructions | cache | wall | memory | latency) ;;
	*) die "unknown part \"$p\"" ;;
	esac
done

busy_share=$(bench_busy_share)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started_at=$(date -u '+%Y-%m-%d %H:%M UTC')
port=
started=
bench_workspace rl_cost valgrind
for cmd in valgrind callgrind_annotate; do
	command -v "$cmd" >/dev/null || die "no $cmd: install valgrind"
done
if has_part latency; then
	command -v redis-server >/dev/null || die "no redis-server: install redis-server"
fi

cp "$here"/*.sql "$tmp"/
chmod a+r "$tmp"/*.sql

# ---- the server ----

# Redis, for the latency part: loopback, no persistence.
rport=
if has_part latency; then
	rport=$(rl_free_port)
	bench_redis_start "$rport" || die "redis-server did not start"
fi

echo "== initdb in $tmp"
bench_initdb --no-sync
# No TCP: clients come through the socket in $tmp.  shared_buffers holds a
# million-row table; work_mem the rows of generate_series (materialized
# before the first call: with too little, the larger statements would spill
# them to disk and cost more per call than the smaller ones); the store
# holds every key with room to spare (one role may hold only half of it,
# ratelimit.role_share: with less room the calls of the larger key counts
# would be refused for want of it, and look for idle entries to take).
cat >>"$data/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$tmp'
shared_preload_libraries = 'ratelimit'
shared_buffers = 256MB
work_mem = 256MB
fsync = off
ratelimit.max_keys = $((6 * nkeys > 100000 ? 6 * nkeys : 100000))
EOF
if [ -n "$rport" ]; then
	cat >>"$data/postgresql.conf" <<EOF
ratelimit.redis_nodes = '127.0.0.1:$rport'
ratelimit.redis_command_timeout = 1000
EOF
fi

start_server() {
	port=$(rl_free_port)
	as_pg "$bindir/pg_ctl" -D "$data" -l "$tmp/server.log" -w -t 60 \
		-o "-p $port" start >/dev/null ||
		{ tail -n 20 "$tmp/server.log" >&2; die "the server did not start"; }
	started=1
}
stop_server() {
	as_pg "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null
	started=
}

# psql on the bench database; PGOPTIONS from the environment.
psql_bench() {
	as_pg env PGOPTIONS="${PGOPTIONS:-}" \
		"$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$tmp" -p "$port" -d bench "$@"
}

start_server
as_pg "$bindir/psql" -X -q -h "$tmp" -p "$port" -d postgres -c 'CREATE DATABASE bench'
psql_bench -c 'CREATE EXTENSION ratelimit' -f "$tmp/setup.sql" -f "$tmp/cost_setup.sql"
pg_version=$(psql_bench -At -c 'SHOW server_version')
rl_version=$(psql_bench -At -c "SELECT extversion FROM pg_extension WHERE extname = 'ratelimit'")
stop_server

# ---- the cases ----

# The key of call i: one of $nkeys, each called in turn.
key="'k' || (i % $nkeys)"

# A statement of @N@ calls of the condition $1, counting the admitted ones.
select_stmt() {
	echo "SELECT count(*) FROM generate_series(1, @N@) i WHERE $1"
}
# A statement inserting @N@ rows into table $1 (tenant $2, quantity 1).
insert_stmt() {
	echo "INSERT INTO $1 SELECT $2, 1 FROM generate_series(1, @N@) i"
}

# A callgrind case's statement, with @N@ for its number of calls or rows.
case_stmt() {
	case $1 in
	floor) select_stmt "rl_floor($key, 'token_bucket', 1000, '1 second')" ;;
	token_bucket | fixed_window) select_stmt "rl_allow($key, '$1', 1000, '1 second')" ;;
	sliding_window_log) select_stmt "rl_allow($key, 'sliding_window_log', 100, '1 minute')" ;;
	policy_floor) select_stmt "rl_floor($key, policy => 'bench_tb')" ;;
	policy) select_stmt "rl_allow($key, policy => 'bench_tb')" ;;
	insert) insert_stmt bench_plain "i % $nkeys" ;;
	trigger_floor) insert_stmt bench_floor "i % $nkeys" ;;
	trigger_plpgsql) insert_stmt bench_plpgsql "i % $nkeys" ;;
	enforce) insert_stmt bench_enforce "i % $nkeys" ;;
	enforce_cost) insert_stmt bench_enforce_cost "i % $nkeys" ;;
	*) return 1 ;;
	esac
}

# Its table, for an INSERT case (emptied before each statement).
case_table() {
	case_stmt "$1" | sed -n 's/^INSERT INTO \([a-z_]*\) .*/\1/p'
}

# What a case is, in the report.
case_label() {
	case $1 in
	floor) echo "rl_floor (no-op C function), algorithm form" ;;
	token_bucket | fixed_window) echo "rl_allow $1, 1000 per second" ;;
	sliding_window_log) echo "rl_allow sliding_window_log, 100 per minute" ;;
	policy_floor) echo "rl_floor, policy form" ;;
	policy) echo "rl_allow(key, policy => ...), token_bucket, 1000 per second" ;;
	insert) echo "INSERT, no trigger" ;;
	trigger_floor) echo "INSERT, no-op C trigger" ;;
	trigger_plpgsql) echo "INSERT, no-op PL/pgSQL trigger" ;;
	enforce) echo "INSERT, rl_enforce (policy, token bucket)" ;;
	enforce_cost) echo "INSERT, rl_enforce with 'cost=qty'" ;;
	esac
}

# The case a case is measured against ("" for none).
case_floor() {
	case $1 in
	token_bucket | fixed_window | sliding_window_log) echo floor ;;
	policy) echo policy_floor ;;
	trigger_floor | trigger_plpgsql) echo insert ;;
	enforce | enforce_cost) echo trigger_floor ;;
	esac
}

# The case $1 is measured against if the list $2 has it, else "".
floor_in() {
	local f
	f=$(case_floor "$1")
	if [ -n "$f" ] && [[ " $2 " == *" $f "* ]]; then
		echo "$f"
	fi
}

for c in $cases $cache_cases; do
	case_stmt "$c" >/dev/null || die "unknown case \"$c\""
done

# ---- instructions ----

# One case under callgrind in a single-user backend.  The script: a check
# that the store starts empty, the statement on $nkeys calls (every key
# created), N1 (warm-up), then N1 and N2, the two measured; an INSERT case
# empties its table before each statement.  callgrind dumps its counts
# before each statement is read, so dump k + 1 holds statement k.  Writes
# $cg/CASE.N1 and $cg/CASE.N2 (the two measured statements' dumps) and
# "CASE I(N1) I(N2) admitted(N1) admitted(N2)" to $cg/counts.
callgrind_case() {
	local c=$1 stmt table lines=0 m1 m2 out
	local -a vals
	stmt=$(case_stmt "$c")
	table=$(case_table "$c")
	: >"$cg/$c.sql"
	emit() {
		echo "$1" >>"$cg/$c.sql"
		lines=$((lines + 1))
	}
	run_stmt() {
		if [ -n "$table" ]; then emit "TRUNCATE $table"; fi
		emit "${stmt//@N@/$1}"
	}
	emit "SELECT used FROM rl_store_info()"
	run_stmt "$nkeys"
	run_stmt "$n1"
	run_stmt "$n1"
	m1=$lines
	run_stmt "$n2"
	m2=$lines
	# the state saved by the last clean shutdown: every case starts with
	# an empty store (checked by the script's first line)
	rm -f "$data"/pg_stat/ratelimit.state
	out=$cg/$c.out
	# shellcheck disable=SC2086 # vg_extra: options, split on purpose
	as_pg valgrind --tool=callgrind ${vg_extra:-} --dump-before=ReadyForQuery \
		--callgrind-out-file="$cg/$c.cg" \
		"$bindir/postgres" --single -D "$data" bench <"$cg/$c.sql" >"$out" 2>&1 ||
		{ tail -n 20 "$out" >&2; die "the single-user backend failed on case $c"; }
	if grep -Eq '(ERROR|FATAL|PANIC):' "$out"; then
		grep -E '(ERROR|FATAL|PANIC):' "$out" >&2
		die "case $c failed"
	fi
	if [ ! -f "$cg/$c.cg.$((lines + 1))" ] || [ -f "$cg/$c.cg.$((lines + 2))" ]; then
		die "case $c: $lines statements but not $((lines + 1)) callgrind dumps"
	fi
	mapfile -t vals < <(sed -n 's/^[[:space:]]*1: [a-z]* = "\([0-9]*\)".*/\1/p' "$out")
	[ "${vals[0]:-}" = 0 ] ||
		die "case $c: the store held ${vals[0]:-?} keys at the start, not 0"
	cp "$cg/$c.cg.$((m1 + 1))" "$cg/$c.N1"
	cp "$cg/$c.cg.$((m2 + 1))" "$cg/$c.N2"
	rm -f "$cg/$c.cg"*
	echo "$c $(sed -n 's/^totals: //p' "$cg/$c.N1") $(sed -n 's/^totals: //p' "$cg/$c.N2")" \
		"${vals[3]:-$n1} ${vals[4]:-$n2}" >>"$cg/counts"
}

# Instructions per call of a case: (I(N2) - I(N1)) / (N2 - N1).
per_call() {
	awk -v c="$1" -v n1="$n1" -v n2="$n2" \
		'$1 == c { printf "%.0f", ($3 - $2) / (n2 - n1) }' "$cg/counts"
}

# A callgrind dump's costs by function, read from the file itself (its
# format: valgrind's "Callgrind Format Specification"), as tab-separated
# lines: "F function object self" for each function, "A caller callee
# callee-object calls cost" for each call arc (cost: what the calls cost,
# with all they called).  Functions are "file:function" (the file without
# its directories), objects the ELF object's file name.  Costs are
# instructions (the one event collected).
profile_lines() {
	awk -v OFS='\t' '
		# a name, compressed or not: "(id) name" defines id, "(id)" uses it
		function name(s, kind,   id, rest) {
			if (s !~ /^\([0-9]+\)/)
				return s
			id = substr(s, 2, index(s, ")") - 2)
			rest = substr(s, index(s, ")") + 1)
			sub(/^ /, "", rest)
			if (rest != "")
				names[kind, id] = rest
			return names[kind, id]
		}
		function base(path) {
			sub(/^.*\//, "", path)
			return path
		}
		/^ob=/ { ob = base(name(substr($0, 4), "ob")); next }
		/^cob=/ { cob = base(name(substr($0, 5), "ob")); next }
		/^fl=/ { fl = cur = base(name(substr($0, 4), "fl")); next }
		/^(fi|fe)=/ { cur = base(name(substr($0, 4), "fl")); next }
		/^(cfi|cfl)=/ { cfl = base(name(substr($0, 5), "fl")); next }
		/^fn=/ {
			fn = fl ":" name(substr($0, 4), "fn")
			obj[fn] = ob
			next
		}
		/^cfn=/ { cfn = name(substr($0, 5), "fn"); next }
		/^calls=/ { split(substr($0, 7), a, " "); calls = a[1]; incall = 1; next }
		/^[0-9+*-]/ {
			if (incall) {
				# the callee is in the current object and file unless
				# cob= and cfi= said otherwise
				k = fn SUBSEP (cfl != "" ? cfl : cur) ":" cfn SUBSEP (cob != "" ? cob : ob)
				arc[k] += $NF
				narc[k] += calls
				incall = 0
				cob = cfl = ""
			} else
				self[fn] += $NF
		}
		END {
			for (f in obj)
				print "F", f, obj[f], self[f] + 0
			for (k in arc) {
				split(k, p, SUBSEP)
				print "A", p[1], p[2], p[3], narc[k], arc[k]
			}
		}' "$1"
}

# The breakdown of a case, per call, by the same difference as per_call:
# $cg/CASE.own, the functions of ratelimit.so ("function inclusive self
# calls", the largest inclusive first), and $cg/CASE.ext, the functions
# outside it that it calls directly, PostgreSQL's and libc's ("function
# inclusive calls": what those calls cost, with all they called, and how
# many there are).  A callee outside ratelimit.so is named by its function
# alone (PostgreSQL's binary has no file names).
breakdown() {
	local c=$1
	profile_lines "$cg/$c.N1" >"$cg/$c.p1"
	profile_lines "$cg/$c.N2" >"$cg/$c.p2"
	awk -F '\t' -v n="$((n2 - n1))" -v own="$cg/$c.own" -v ext="$cg/$c.ext" '
		{ sign = (FILENAME ~ /p1$/) ? -1 : 1 }
		$1 == "F" && $3 == "ratelimit.so" { mine[$2] = 1; self[$2] += sign * $4 }
		$1 == "A" { arcs[++na] = sign SUBSEP $0 }
		END {
			for (i = 1; i <= na; i++) {
				split(arcs[i], q, SUBSEP)
				split(q[2], a, "\t")
				if (a[4] == "ratelimit.so")
					calls[a[3]] += q[1] * a[5]
				if (!(a[2] in mine))
					continue
				inc[a[2]] += q[1] * a[6]
				if (a[4] != "ratelimit.so") {
					callee = a[3]
					sub(/^.*:/, "", callee)
					xinc[callee] += q[1] * a[6]
					xcalls[callee] += q[1] * a[5]
				}
			}
			for (f in mine)
				if (inc[f] + self[f] != 0)
					printf "%s %.0f %.0f %.2f\n", f, (inc[f] + self[f]) / n,
						self[f] / n, calls[f] / n > own
			for (f in xinc)
				printf "%s %.0f %.2f\n", f, xinc[f] / n, xcalls[f] / n > ext
		}' "$cg/$c.p1" "$cg/$c.p2"
	sort -k2,2nr -k1,1 "$cg/$c.own" | head -n "$top" >"$cg/$c.own.top"
	sort -k2,2nr -k1,1 "$cg/$c.ext" | head -n "$top" >"$cg/$c.ext.top"
}

cg=$tmp/callgrind
mkdir -p "$cg"
chown postgres: "$cg"
if has_part instructions; then
	: >"$cg/counts"
	for c in $cases; do
		echo "== instructions: $c ($(case_label "$c"))"
		callgrind_case "$c"
		printf "   %s instructions per call\n" "$(per_call "$c")"
	done
	for c in $profile; do
		[[ " $cases " == *" $c "* ]] || continue
		breakdown "$c"
	done
	if [ -n "$keep" ]; then
		mkdir -p "$keep"
		cp "$cg"/*.N1 "$cg"/*.N2 "$cg/counts" "$keep"/
		echo "== callgrind files kept in $keep"
	fi
fi

# ---- cache ----

# The simulated caches: a first level of 32 kB and a last level of 1 MB
# (one core's L2 here; the L3 a miss of it reaches is shared, and its
# latency is the wall clock's noise), 64-byte lines; set, not detected, so
# that the figures are alike on every machine.
cache_sim="--cache-sim=yes --I1=32768,8,64 --D1=32768,8,64 --LL=1048576,16,64"

# A simulated event per call of a case, by the same difference as
# per_call: D1mr (data lines read from beyond the first level) or DLmr
# (from beyond the last).
per_call_event() {
	awk -v ev="$2" -v n="$((n2 - n1))" '
		/^events:/ { for (i = 2; i <= NF; i++) if ($i == ev) k = i }
		/^totals:/ { v[FILENAME ~ /N1$/] = $k }
		END { printf "%.1f", (v[0] - v[1]) / n }' "$cc/$1.N1" "$cc/$1.N2"
}

cc=$tmp/cache
mkdir -p "$cc"
chown postgres: "$cc"
if has_part cache; then
	for c in $cache_cases; do
		echo "== cache lines: $c ($(case_label "$c"))"
		cg=$cc vg_extra=$cache_sim callgrind_case "$c"
		printf "   %s lines past the first level, %s past the last, per call\n" \
			"$(per_call_event "$c" D1mr)" "$(per_call_event "$c" DLmr)"
		if [ -n "$keep" ]; then
			mkdir -p "$keep"
			cp "$cc/$c.N1" "$keep/$c.cache.N1"
			cp "$cc/$c.N2" "$keep/$c.cache.N2"
		fi
	done
fi

# ---- wall clock ----

# Median of numbers on stdin.
median() {
	sort -n | awk '{ v[NR] = $1 }
		END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# Milliseconds a statement takes (psql's \timing: the server's time and
# the socket round trip, no connection set-up).
timed() {
	psql_bench -c '\timing on' -c "$1" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p'
}

# The wall cases: "name statement" (the statement's table is emptied first).
wall_cases="calls_floor calls_allow insert_plain insert_floor insert_plpgsql insert_enforce insert_enforce_one"
wall_stmt() {
	local s
	case $1 in
	calls_floor) s=$(case_stmt floor) ;;
	calls_allow) s=$(case_stmt token_bucket) ;;
	insert_plain) s=$(case_stmt insert) ;;
	insert_floor) s=$(case_stmt trigger_floor) ;;
	insert_plpgsql) s=$(case_stmt trigger_plpgsql) ;;
	insert_enforce) s=$(case_stmt enforce) ;;
	insert_enforce_one) s="INSERT INTO bench_enforce SELECT 0, 1 FROM generate_series(1, @N@) i" ;;
	esac
	echo "${s//@N@/$rows}"
}
wall_label() {
	case $1 in
	calls_floor) echo "$(thousands "$rows") rl_floor calls in one statement" ;;
	calls_allow) echo "$(thousands "$rows") rl_allow token_bucket calls in one statement" ;;
	insert_plain) echo "$(thousands "$rows")-row INSERT, no trigger" ;;
	insert_floor) echo "$(thousands "$rows")-row INSERT, no-op C trigger" ;;
	insert_plpgsql) echo "$(thousands "$rows")-row INSERT, no-op PL/pgSQL trigger" ;;
	insert_enforce) echo "$(thousands "$rows")-row INSERT, rl_enforce quota trigger" ;;
	insert_enforce_one) echo "$(thousands "$rows")-row INSERT, rl_enforce quota trigger, every row of one tenant" ;;
	esac
}

# One run of a wall case: its milliseconds.
wall_one() {
	local s t
	s=$(wall_stmt "$1")
	case $s in
	INSERT*)
		t=${s#INSERT INTO }
		psql_bench -c "TRUNCATE ${t%% *}" ;;
	esac
	timed "$s"
}

# A ratio's median over rounds of the per-round ratio: "value".
wall_ratio() {
	awk -v a="$1" -v b="$2" '$2 == a { x[$1] = $3 } $2 == b { y[$1] = $3 }
		END { for (r in x) if (y[r] > 0) print x[r] / y[r] }' "$tmp/wall" | median
}

needs_server=
for p in wall memory latency; do has_part "$p" && needs_server=1; done
[ -n "$needs_server" ] && start_server

if has_part wall; then
	: >"$tmp/wall"
	echo "== wall clock: warm-up round (not counted)"
	for w in $wall_cases; do wall_one "$w" >/dev/null; done
	for r in $(seq "$rounds"); do
		for w in $wall_cases; do
			ms=$(wall_one "$w")
			[ -n "$ms" ] || die "no time for $w"
			echo "$r $w $ms" >>"$tmp/wall"
			printf "round %d  %-16s %10.1f ms\n" "$r" "$w" "$ms"
		done
	done
	psql_bench -c 'TRUNCATE bench_plain, bench_floor, bench_plpgsql, bench_enforce'
fi

# ---- memory ----

# One INSERT of $2 rows into table $1, tenant $3, in one transaction, in a
# fresh session: "total_bytes used_bytes vmhwm_kB largest-contexts" at its
# end, read inside the transaction (total: the memory contexts' blocks;
# used: what is allocated in them).
memory_one() {
	psql_bench -At -F ' ' <<EOF
BEGIN;
INSERT INTO $1 SELECT $3, 1 FROM generate_series(1, $2) i;
SELECT (SELECT sum(total_bytes) FROM pg_backend_memory_contexts),
       (SELECT sum(used_bytes) FROM pg_backend_memory_contexts),
       substring(pg_read_file('/proc/self/status') FROM 'VmHWM:\s*([0-9]+) kB'),
       (SELECT string_agg(format('%s %s MB', name, round(total_bytes / 1048576.0, 1)), ', '
                          ORDER BY total_bytes DESC)
        FROM (SELECT name, total_bytes FROM pg_backend_memory_contexts
              ORDER BY total_bytes DESC LIMIT 3) t);
COMMIT;
TRUNCATE $1;
EOF
}

# The memory cases: "name table rows tenant".
memory_cases="floor_many:bench_floor:$rows:i%$nkeys
enforce_one_small:bench_enforce:$((rows / 10)):0
enforce_one:bench_enforce:$rows:0
enforce_many:bench_enforce:$rows:i%$nkeys"

if has_part memory; then
	: >"$tmp/memory"
	for m in $memory_cases; do
		IFS=: read -r name table n tenant <<<"$m"
		echo "== memory: $name ($n rows into $table, tenant $tenant)"
		line=$(memory_one "$table" "$n" "$tenant")
		echo "$name $line" >>"$tmp/memory"
		echo "   $line"
	done
fi

# ---- latency ----

# One pgbench run of case $1 (one call per transaction, one client), round
# $2: its tps; its per-transaction log in $tmp/lat_CASE_rROUND.*.
latency_one() {
	local script opts='' out
	case $1 in
	floor) script=floor.sql ;;
	local) script=token_bucket.sql ;;
	redis)
		script=redis_token_bucket.sql
		opts="-c ratelimit.backend=redis" ;;
	esac
	out=$(cd "$tmp" && as_pg env PGOPTIONS="$opts" "$bindir/pgbench" -n -M prepared \
		-c 1 -j 1 -T "$seconds" -D nkeys="$nkeys" -f "$tmp/$script" -l \
		--log-prefix="$tmp/lat_$1_r$2" -h "$tmp" -p "$port" bench 2>&1) ||
		{ echo "$out" >&2; die "pgbench failed on $1"; }
	sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$out" | tail -n 1
}

# Three rounds of each case, interleaved, so that a busy spell of the
# machine does not fall on one case only; "case tps p50 p99" lines (the
# median tps, the percentiles of every round's calls; microseconds).
lat_rounds=3
if has_part latency; then
	: >"$tmp/latency_runs"
	: >"$tmp/latency"
	for r in $(seq "$lat_rounds"); do
		for l in floor local redis; do
			tps=$(latency_one "$l" "$r")
			echo "$l $r $tps" >>"$tmp/latency_runs"
			echo "== latency: $l, round $r: $tps calls/s"
		done
	done
	for l in floor local redis; do
		echo "$l $(awk -v l="$l" '$1 == l { print $3 }' "$tmp/latency_runs" | median)" \
			"$(cat "$tmp/lat_${l}"_r*.* | awk '{ print $3 }' | percentiles)" >>"$tmp/latency"
	done
	redis_undecided=$(psql_bench -At -c 'SELECT failures + skipped FROM rl_redis_info()')
fi

if [ -n "$started" ]; then
	undecided=$(psql_bench -At -c 'SELECT refused FROM rl_store_info()')
	stop_server
else
	undecided=0
fi
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- the figures ----

# The figures the report and all.sh use, by name, in $tmp/figures:
# "name value" lines.
: >"$tmp/figures"
fig() { echo "$1 $2" >>"$tmp/figures"; }
get() { awk -v k="$1" '$1 == k { print $2 }' "$tmp/figures"; }

if has_part instructions; then
	for c in $cases; do
		fig "instr_$c" "$(per_call "$c")"
		f=$(floor_in "$c" "$cases")
		if [ -n "$f" ]; then
			fig "above_$c" "$(($(per_call "$c") - $(per_call "$f")))"
		fi
	done
fi
if has_part cache; then
	for c in $cache_cases; do
		fig "l1_$c" "$(per_call_event "$c" D1mr)"
		fig "ll_$c" "$(per_call_event "$c" DLmr)"
	done
fi
if has_part wall; then
	for w in $wall_cases; do
		fig "ms_$w" "$(awk -v w="$w" '$2 == w { print $3 }' "$tmp/wall" | median)"
	done
	fig ratio_calls "$(wall_ratio calls_allow calls_floor)"
	fig ratio_insert "$(wall_ratio insert_enforce insert_floor)"
	fig ratio_insert_one "$(wall_ratio insert_enforce_one insert_floor)"
	fig ratio_insert_plain "$(wall_ratio insert_enforce insert_plain)"
	fig ratio_floor_plain "$(wall_ratio insert_floor insert_plain)"
	fig ratio_plpgsql_plain "$(wall_ratio insert_plpgsql insert_plain)"
fi
if has_part memory; then
	while read -r name bytes used hwm _; do
		fig "mem_$name" "$bytes"
		fig "used_$name" "$used"
		fig "hwm_$name" "$hwm"
	done <"$tmp/memory"
	# growth per row on one key, between 1/10 and all the rows; per key
	# between one key and $nkeys, on all the rows
	fig per_row "$(awk -v a="$(get used_enforce_one)" -v b="$(get used_enforce_one_small)" \
		-v n="$((rows - rows / 10))" 'BEGIN { printf "%.1f", (a - b) / n }')"
	fig per_key "$(awk -v a="$(get used_enforce_many)" -v b="$(get used_enforce_one)" \
		-v n="$((nkeys - 1))" 'BEGIN { printf "%.0f", (a - b) / n }')"
fi
if has_part latency; then
	while read -r name tps p50 p99; do
		fig "tps_lat_$name" "$tps"
		fig "p50_$name" "$p50"
		fig "p99_$name" "$p99"
	done <"$tmp/latency"
fi

mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1048576 }'; }
kb_mb() { awk -v k="$1" 'BEGIN { printf "%.1f MB", k / 1024 }'; }
us_ms() { awk -v u="$1" 'BEGIN { printf "%.3f ms", u / 1000 }'; }

# Issue 9's targets: "what|measured|target|verdict" lines.
targets() {
	local v
	if has_part instructions && [ -n "$(get above_token_bucket)" ]; then
		v=$(get above_token_bucket)
		echo "rl_allow token_bucket, instructions per call above the floor function, $(keys_label "$nkeys")|$v|<= 600|$([ "$v" -le 600 ] && echo met || echo "NOT MET")"
	fi
	if has_part instructions && [ -n "$(get above_enforce)" ]; then
		v=$(get above_enforce)
		echo "rl_enforce, instructions per row above a no-op C trigger, $(keys_label "$nkeys")|$v|<= 900|$([ "$v" -le 900 ] && echo met || echo "NOT MET")"
	fi
	if has_part wall; then
		v=$(printf "%.2f" "$(get ratio_calls)")
		echo "$(thousands "$rows") rl_allow calls in one statement, wall time / the floor's|$v|<= 1.5|$(awk -v v="$v" 'BEGIN { print (v <= 1.5 ? "met" : "NOT MET") }')"
		v=$(printf "%.2f" "$(get ratio_insert)")
		echo "$(thousands "$rows")-row INSERT with rl_enforce, wall time / with a no-op C trigger ($(keys_label "$nkeys"))|$v|<= 1.3|$(awk -v v="$v" 'BEGIN { print (v <= 1.3 ? "met" : "NOT MET") }')"
		v=$(printf "%.2f" "$(get ratio_insert_one)")
		echo "the same, every row of one tenant (one key)|$v|<= 1.3|$(awk -v v="$v" 'BEGIN { print (v <= 1.3 ? "met" : "NOT MET") }')"
	fi
	if has_part memory; then
		v=$(get per_row)
		echo "memory per row of a transaction through rl_enforce, one key (grows with keys, not rows)|$v bytes|about 0|$(awk -v v="$v" 'BEGIN { print (v < 1 ? "met" : "NOT MET") }')"
	fi
	if has_part latency; then
		for l in local redis; do
			v=$(get "p99_$l")
			echo "p99 latency of one rl_allow per statement, $l, 1 client (p50 $(us_ms "$(get "p50_$l")"))|$(us_ms "$v")|< 1-2 ms|$(awk -v v="$v" 'BEGIN { print (v < 1000 ? "met" : v < 2000 ? "within 2 ms" : "NOT MET") }')"
		done
	fi
}

commit=$(git -c safe.directory="$root" -C "$root" describe --always --dirty 2>/dev/null ||
	echo "no commit")
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
mem=$(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
busy=$(bench_is_busy "$busy_share")
cc=$(${CC:-gcc} --version 2>/dev/null | head -n 1)

# The instruction table: "case | per call | measured against | above it".
instructions_table() {
	local c f a
	echo "| case | instructions per call or row | against | above it | admitted (N1, N2) |"
	echo "|---|---:|---|---:|---|"
	for c in $cases; do
		f=$(case_floor "$c")
		a=$(get "above_$c")
		echo "| $(case_label "$c") | $(get "instr_$c") | ${a:+$(case_label "$f")} | $a | $(awk -v c="$c" -v t="$(case_table "$c")" \
			'$1 == c { print (t != "" ? "-" : $4 ", " $5) }' "$cg/counts") |"
	done
}

# The breakdown of case $1 as two markdown tables.
breakdown_table() {
	echo "| function in ratelimit.so | inclusive | self | calls |"
	echo "|---|---:|---:|---:|"
	while read -r f i s n; do
		echo "| \`$f\` | $i | $s | $n |"
	done <"$cg/$1.own.top"
	echo
	echo "| called from ratelimit.so | inclusive | calls |"
	echo "|---|---:|---:|"
	while read -r f i n; do
		echo "| \`$f\` | $i | $n |"
	done <"$cg/$1.ext.top"
}

{
	echo "# The cost of one decision"
	echo
	echo "Written by \`test/bench/cost.sh\` on $started_at."
	echo
	echo "| | |"
	echo "|---|---|"
	echo "| machine | $(nproc) CPUs (${cpu:-unknown}), $mem, Linux $(uname -r) |"
	bench_busy_row "$busy_share"
	echo "| load average | $load_before before, $load_after after |"
	echo "| server | PostgreSQL $pg_version, ratelimit $rl_version, built with $cc and PGXS's flags; fsync off, shared_buffers 256MB, work_mem 256MB |"
	echo "| source | $commit |"
	echo "| parts | $parts |"
	echo
	if [ -n "$busy" ]; then
		echo "**The machine was busy with other work when this run started (its"
		echo "CPUs' time above): the wall-clock and latency figures are noisy; the"
		echo "instruction counts are not affected.**"
		echo
	fi
	if [ "$undecided" != 0 ] || [ "${redis_undecided:-0}" != 0 ]; then
		echo "**$undecided calls found no room in the store and ${redis_undecided:-0} failed"
		echo "or skipped Redis: the figures do not count.**"
		echo
	fi
	echo "## Targets"
	echo
	echo "| ratio or figure | measured | target | |"
	echo "|---|---:|---:|---|"
	targets | while IFS='|' read -r what value target verdict; do
		echo "| $what | $value | $target | $verdict |"
	done
	if has_part instructions; then
		echo
		echo "## Instructions per call (callgrind)"
		echo
		echo "\`valgrind --tool=callgrind\` on a single-user backend (\`postgres --single\`),"
		echo "one backend per case, the store empty at its start. Each case is one"
		echo "statement making many calls: \`$(case_stmt token_bucket)\`, or"
		echo "\`$(case_stmt enforce)\` into an UNLOGGED table"
		echo "(\`test/bench/cost_setup.sql\`), run on $(keys_label "$nkeys") first (every key"
		echo "created), then with N1 = $(thousands "$n1") (warm-up), N1 and N2 = $(thousands "$n2") calls"
		echo "in the same backend; callgrind dumps its counts before each statement,"
		echo "and a call costs (I(N2) - I(N1)) / (N2 - N1) instructions: the"
		echo "statement's fixed costs (parse, plan, start-up) cancel, what is left is"
		echo "one call with everything the executor does around it (the key's"
		echo "concatenation, the function call, the row) or one row. \"Above it\" is the"
		echo "difference with the case measured the same way around a no-op C function"
		echo "or trigger (\`test/bench/floor\`): the limiter's own cost. Counts do not"
		echo "depend on the machine's load; they change with the compiler and the"
		echo "PostgreSQL build."
		echo
		instructions_table
		echo
		echo "The quota triggers' policy (\`bench_quota\`) is a token bucket whose limit"
		echo "no run reaches; its key is the integer column \`tenant\`."
		for c in $profile; do
			[ -f "$cg/$c.own.top" ] || continue
			echo
			echo "### Where the instructions go: $(case_label "$c")"
			echo
			echo "Per call (or row), by the same difference (callgrind_annotate on the two"
			echo "dumps): first the functions of ratelimit.so (inclusive: with all they"
			echo "call; self: their own code, with what the compiler inlined into them;"
			echo "calls: how many times per call), then the functions outside it that"
			echo "ratelimit.so calls directly (PostgreSQL's, libc's), with the cost of those"
			echo "calls. The $top largest of each; names of PostgreSQL's static functions"
			echo "are not in its stripped binary (their cost shows in their callers)."
			echo
			breakdown_table "$c"
		done
	fi
	if has_part cache; then
		echo
		echo "## Cache lines per call (callgrind's cache simulation)"
		echo
		echo "The same cases and the same difference as the instructions, under"
		echo "\`valgrind --tool=callgrind $cache_sim\`:"
		echo "the data lines one call or row reads from beyond a first level of 32 kB,"
		echo "and from beyond a last level of 1 MB (one core's L2 on the machine these"
		echo "figures were first taken on; a line from beyond it comes from the shared"
		echo "L3 or memory, whose latency varies with the other work on the machine)."
		echo "The simulation counts what a layout costs in lines; it runs no prefetch,"
		echo "so a line asked for ahead counts as a miss all the same."
		echo
		echo "| case | lines past 32 kB | lines past 1 MB | past 1 MB, above the floor |"
		echo "|---|---:|---:|---:|"
		for c in $cache_cases; do
			f=$(floor_in "$c" "$cache_cases")
			a=
			if [ -n "$f" ]; then
				a=$(awk -v x="$(get "ll_$c")" -v y="$(get "ll_$f")" 'BEGIN { printf "%.1f", x - y }')
			fi
			echo "| $(case_label "$c") | $(get "l1_$c") | $(get "ll_$c") | $a |"
		done
	fi
	if has_part wall; then
		echo
		echo "## Wall clock"
		echo
		printf '%s\n' "$rounds rounds after a warm-up round, cases interleaved; psql's \`\\timing\`"
		echo "(the server's time and the socket round trip); the tables emptied"
		echo "(TRUNCATE, not timed) before each INSERT. Median times, and the median of"
		echo "the per-round ratios. Ratios are reported, never asserted."
		echo
		echo "| case | median ms |"
		echo "|---|---:|"
		for w in $wall_cases; do
			echo "| $(wall_label "$w") | $(printf %.0f "$(get "ms_$w")") |"
		done
		echo
		echo "| ratio | median |"
		echo "|---|---:|"
		echo "| rl_allow / rl_floor, $(thousands "$rows") calls | $(printf %.2f "$(get ratio_calls)") |"
		echo "| INSERT with rl_enforce / with the no-op C trigger | $(printf %.2f "$(get ratio_insert)") |"
		echo "| the same, every row of one tenant | $(printf %.2f "$(get ratio_insert_one)") |"
		echo "| INSERT with rl_enforce / no trigger | $(printf %.2f "$(get ratio_insert_plain)") |"
		echo "| INSERT with the no-op C trigger / no trigger | $(printf %.2f "$(get ratio_floor_plain)") |"
		echo "| INSERT with the no-op PL/pgSQL trigger / no trigger | $(printf %.2f "$(get ratio_plpgsql_plain)") |"
	fi
	if has_part memory; then
		echo
		echo "## Memory per transaction"
		echo
		echo "One INSERT ... SELECT in one transaction, in a fresh session. Held and"
		echo "used: the sums of \`pg_backend_memory_contexts.total_bytes\` and"
		echo "\`used_bytes\`, read after the INSERT, inside the transaction (what the"
		echo "transaction still holds); peak RSS: the backend's VmHWM"
		echo "(\`/proc/self/status\`), which also counts the shared buffers it touched and"
		echo "generate_series's rows, held in memory during the INSERT: compare it with"
		echo "the no-op C trigger's."
		echo
		echo "| INSERT | held | used | peak RSS | largest contexts |"
		echo "|---|---:|---:|---:|---|"
		while read -r name bytes used hwm largest; do
			case $name in
			floor_many) what="$(thousands "$rows") rows, no-op C trigger" ;;
			enforce_one_small) what="$(thousands $((rows / 10))) rows, rl_enforce, one key" ;;
			enforce_one) what="$(thousands "$rows") rows, rl_enforce, one key" ;;
			enforce_many) what="$(thousands "$rows") rows, rl_enforce, $(keys_label "$nkeys")" ;;
			esac
			echo "| $what | $(mb "$bytes") | $(mb "$used") | $(kb_mb "$hwm") | $largest |"
		done <"$tmp/memory"
		echo
		echo "Used memory's growth per row (one key, between $(thousands $((rows / 10))) and"
		echo "$(thousands "$rows") rows): $(get per_row) bytes; per key (between one key and"
		echo "$(keys_label "$nkeys"), $(thousands "$rows") rows): $(get per_key) bytes."
	fi
	if has_part latency; then
		echo
		echo "## Latency of one call per statement"
		echo
		echo "pgbench \`-M prepared\`, 1 client, $lat_rounds rounds of ${seconds} s per case, cases"
		echo "interleaved, one \`SELECT\` per transaction on a random key of"
		echo "$(keys_label "$nkeys"); median calls/s, and percentiles of every call of"
		echo "the rounds (pgbench's per-transaction log), the client's round trip"
		echo "through the unix socket included. Redis: a redis-server on loopback (no"
		echo "persistence); a key of 1000 per second expires about a second after its"
		echo "last call, so most calls create their key. The design notes give a"
		echo "limiter 1-2 ms of added latency."
		echo
		echo "| case | calls/s | p50 | p99 |"
		echo "|---|---:|---:|---:|"
		while read -r name tps p50 p99; do
			case $name in
			floor) what="rl_floor (no-op C function): the round trip alone" ;;
			local) what="rl_allow token_bucket, local" ;;
			redis) what="rl_allow token_bucket, through Redis" ;;
			esac
			echo "| $what | $(printf %.0f "$tps") | $(us_ms "$p50") | $(us_ms "$p99") |"
		done <"$tmp/latency"
	fi
} >"$tmp/report.md"
cp "$tmp/report.md" "$report"

if [ -n "$datadir" ]; then
	mkdir -p "$datadir"
	cp "$tmp/figures" "$datadir"/
	targets >"$datadir/targets"
	# a line of the before-and-after table (all.sh): tab-separated
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$started_at" "$commit" \
		"$(get above_token_bucket)" "$(get above_enforce)" "$(get above_enforce_cost)" \
		"$(get ratio_calls)" "$(get ratio_insert)" \
		"$(get mem_enforce_one)" "$(get mem_enforce_many)" \
		"$(get p99_local)" "$(get p99_redis)" >"$datadir/history"
	echo "${busy:+busy}" >"$datadir/busy"
fi

echo
echo "== targets (issue 9)"
targets | while IFS='|' read -r what value target verdict; do
	printf "%-90s %12s  %-9s %s\n" "$what" "$value" "$target" "$verdict"
done
echo "== report: $report"
