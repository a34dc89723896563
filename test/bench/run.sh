#!/bin/bash
#
# test/bench/run.sh: the ratelimit benchmark (pgbench, prepared mode).
#
# Compares, in one run and on one throwaway server, rl_allow against
#   - the floor: rl_floor, a no-op C function with rl_allow's signature
#     (test/bench/floor), i.e. what the server costs before any limiting;
#   - the peer: tb_allow, a token bucket written in plpgsql over an UNLOGGED
#     table (test/bench/setup.sql), the limiter a user would write by hand.
# Each case is a pgbench script here (floor, token_bucket, fixed_window,
# sliding_window_log, table, redis_token_bucket) run over each key count
# (1 = one hot key) and each client count.  Cases are interleaved and
# repeated in rounds; each case's median tps is kept, and each target ratio
# is the median of its per-round ratios.  Prints the ratios and writes a
# report.  test/bench/all.sh runs the full sweep with it, and writes
# test/bench/report.md and the plot.
#
# The redis_* cases run with ratelimit.backend = redis against a throwaway
# redis-server started here (loopback, no persistence) when one of them is
# selected.
#
# Before the first run every key of the largest key count gets one call of
# each case that keeps state (token_bucket, fixed_window, table), so that
# the runs measure keys that exist, not their creation.  Redis state is not
# warmed: it expires about a second after a key's last call.
#
# Run as root (the server runs as user postgres).  It runs against a
# private copy of PG_CONFIG's installation with this tree's extension and
# the floor module built into it (lib.sh's bench_install, as the test
# command does), or against all.sh's copy; the system's files are never
# changed.
#
# Settings (environment):
#   RL_BENCH_CLIENTS   client counts to run, e.g. "1 2 4 8 16"   (4)
#   RL_BENCH_KEYS      key counts, 1 = one hot key               ("10000 1")
#   RL_BENCH_SECONDS   seconds per pgbench run                   (10)
#   RL_BENCH_ROUNDS    repetitions of every case, median kept    (3)
#   RL_BENCH_THREADS   pgbench threads (at most the clients)     (2)
#   RL_BENCH_CASES     cases to run           (the five local cases)
#   RL_BENCH_PREFILL_MAX  largest key count whose sliding_window_log logs
#                      are filled before each run; above it they start
#                      with what earlier runs left         (no limit)
#   RL_BENCH_WARM      1: call every key once before the runs        (1)
#   RL_BENCH_MAX_KEYS  ratelimit.max_keys        (4 x largest key count,
#                                                 at least 200000)
#   RL_BENCH_POOL_KB   ratelimit.pool_size in kB   (room for a full log
#                      on every prefilled key, 4 blocks on every other
#                      key, plus 64 MB)
#   RL_BENCH_CONF      extra postgresql.conf lines
#   RL_BENCH_REPORT    where to write the report
#                                  ($TMPDIR or /tmp, ratelimit-bench.md)
#   RL_BENCH_DATA      a directory to receive the raw figures: results,
#                      medians, ratios (for all.sh)              (none)
#   PG_CONFIG          pg_config of the installation to copy
#                                           (Debian's PostgreSQL 15)

set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"

clients=${RL_BENCH_CLIENTS:-4}
keycounts=${RL_BENCH_KEYS:-10000 1}
seconds=${RL_BENCH_SECONDS:-10}
rounds=${RL_BENCH_ROUNDS:-3}
threads=${RL_BENCH_THREADS:-2}
cases=${RL_BENCH_CASES:-floor token_bucket fixed_window sliding_window_log table}
report=${RL_BENCH_REPORT:-${TMPDIR:-/tmp}/ratelimit-bench.md}
warm=${RL_BENCH_WARM:-1}
datadir=${RL_BENCH_DATA:-}

die() { echo "run.sh: $*" >&2; exit 1; }

# Run a command as the server's owner.
as_pg() { runuser -u postgres -- "$@"; }

for c in $cases; do
	[ -f "$here/$c.sql" ] || die "unknown case \"$c\" (no $here/$c.sql)"
done

largest=1
for n in $keycounts; do
	if [ "$n" -gt "$largest" ]; then largest=$n; fi
done
prefill_max=${RL_BENCH_PREFILL_MAX:-$largest}
prefilled=0
for n in $keycounts; do
	if [ "$n" -le "$prefill_max" ] && [ "$n" -gt "$prefilled" ]; then prefilled=$n; fi
done
max_keys=${RL_BENCH_MAX_KEYS:-$((4 * largest > 200000 ? 4 * largest : 200000))}
# sliding_window_log at limit 100 keeps 25 blocks of 64 bytes per key (plus
# its chain links, 68 bytes in all): room for every prefilled key with a
# margin, and 4 blocks (16 entries) for every other key, so that no call is
# waved through for want of a block.
pool_kb=${RL_BENCH_POOL_KB:-$(((prefilled * 26 + (largest - prefilled) * 4) * 68 * 5 / 4 / 1024 + 65536))}
redis=
case " $cases" in
*" redis_"*) redis=1 ;;
esac
if [ -n "$redis" ]; then
	command -v redis-server >/dev/null ||
		die "the redis_* cases need redis-server (Debian: apt-get install redis-server)"
fi
max_clients=1
for c in $clients; do
	if [ "$c" -gt "$max_clients" ]; then max_clients=$c; fi
done

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
bench_workspace rl_bench
cp "$here"/*.sql "$tmp"/
chmod a+r "$tmp"/*.sql

echo "== initdb in $tmp"
bench_initdb --no-sync
started=

# A free loopback port: nothing answers on it.  Callers retry if another
# process takes it between the check and their start.
port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# The redis_* cases' server: loopback, no persistence, its pid in
# $tmp/redis.pid for cleanup.  A generous command timeout, so that a Redis
# descheduled for a while on a busy machine is not counted as a failure.
redis_conf=
if [ -n "$redis" ]; then
	for _ in 1 2 3 4 5; do
		rport=$((20000 + RANDOM % 30000))
		port_free "$rport" || continue
		bench_redis_start "$rport" && break
		rport=
	done
	[ -n "$rport" ] || { tail -n 20 "$tmp/redis.log" >&2; die "redis-server did not start"; }
	redis_version=$(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')
	echo "== redis-server $redis_version on 127.0.0.1:$rport"
	redis_conf="ratelimit.redis_nodes = '127.0.0.1:$rport'
ratelimit.redis_command_timeout = 1000"
fi

cat >>"$data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$tmp'
max_connections = $((max_clients + 10))
shared_preload_libraries = 'ratelimit'
ratelimit.max_keys = $max_keys
ratelimit.pool_size = $pool_kb
fsync = off
$redis_conf
${RL_BENCH_CONF:-}
EOF
for _ in 1 2 3 4 5; do
	port=$((20000 + RANDOM % 30000))
	port_free "$port" || continue
	if as_pg "$bindir/pg_ctl" -D "$data" -l "$tmp/server.log" -w -t 60 \
		-o "-p $port" start >/dev/null 2>&1; then
		started=1
		break
	fi
done
[ -n "$started" ] || { tail -n 20 "$tmp/server.log" >&2; die "the server did not start"; }
echo "== server on 127.0.0.1:$port (pgbench connects through the unix socket)"
if awk -v l="${load_before%% *}" -v p="$(nproc)" 'BEGIN { exit !(l > p / 4) }'; then
	echo "run.sh: warning: load average $load_before at the start: other work" \
		"shares the CPUs and will make the figures noisy" >&2
fi

# Session options of a case's connections: the redis_* cases decide
# through Redis.
case_options() {
	case $1 in
	redis_*) echo "-c ratelimit.backend=redis" ;;
	esac
}

# psql on the bench database as the server's owner; PGOPTIONS from the
# environment ("PGOPTIONS=... psql_bench ...").
psql_bench() {
	as_pg env PGOPTIONS="${PGOPTIONS:-}" \
		"$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$tmp" -p "$port" "$@"
}
psql_bench -d postgres -c 'CREATE DATABASE bench'
psql_bench -d bench -c 'CREATE EXTENSION ratelimit' -f "$tmp/setup.sql"

# A case's call as an expression of a column k: its script's SELECT with
# the key number :k taken from k.
case_call() {
	sed -n -e 's/:k/k/' -e 's/@PER@/1 minute/' -e 's/^SELECT \(.*\);$/\1/p' \
		"$tmp/$1.sql"
}

# Fail early if any case's call is refused, before minutes of pgbench.
for c in $cases; do
	PGOPTIONS=$(case_options "$c") psql_bench -d bench -o /dev/null \
		-c "SELECT $(case_call "$c") FROM (SELECT 0 AS k) s" ||
		die "case \"$c\" fails on its first call"
done
pg_version=$(psql_bench -d bench -At -c 'SHOW server_version')
rl_version=$(psql_bench -d bench -At -c \
	"SELECT extversion FROM pg_extension WHERE extname = 'ratelimit'")

# Warm-up: one call of each case that keeps state on every key of the
# largest key count (the smaller counts' keys are among them).  Not the
# floor (no state), sliding_window_log (filled before each run) nor Redis
# (its state expires a second after a key's last call).
warmed=
if [ "$warm" = 1 ] && [ "$largest" -gt 1 ]; then
	for c in $cases; do
		case $c in floor | sliding_window_log | redis_*) continue ;; esac
		echo "== warm-up: $c on $(keys_label "$largest")"
		psql_bench -d bench -o /dev/null -c "SELECT count($(case_call "$c"))
			FROM generate_series(1, $largest) k"
		warmed="${warmed:+$warmed, }$c"
	done
	psql_bench -d bench -c 'VACUUM ANALYZE tb_bucket' -c 'CHECKPOINT'
fi

runs=0
for _ in $(seq "$rounds"); do for _ in $clients; do for _ in $keycounts; do
	for _ in $cases; do runs=$((runs + 1)); done
done; done; done
echo "== $runs pgbench runs of ${seconds}s: about $((runs * (seconds + 2) / 60 + 1)) min"

# Calls no backend decided so far: the store had no room, or Redis failed
# or was skipped (breaker open).  Such a call is waved through or denied by
# fail_mode and would flatter the figures.
undecided_so_far() {
	psql_bench -d bench -At -c 'SELECT s.refused + r.failures + r.skipped
		FROM rl_store_info() s, rl_redis_info() r'
}

# Between runs: clean up after the table case now rather than let
# autovacuum and the checkpointer do it during the next case's run.
settle() {
	psql_bench -d bench -c 'VACUUM tb_bucket' -c 'CHECKPOINT'
}

# One pgbench run of a case's script, with @PER@ replaced by $per, for
# $seconds or the seconds given; prints its tps (excluding connection time).
bench_one() {
	local case=$1 c=$2 n=$3 per=$4 t=${5:-$seconds} j out tps
	j=$((threads < c ? threads : c))
	sed "s/@PER@/$per/" "$tmp/$case.sql" >"$tmp/run.sql"
	out=$(as_pg env PGOPTIONS="$(case_options "$case")" \
		"$bindir/pgbench" -n -M prepared -c "$c" -j "$j" -T "$t" \
		-D nkeys="$n" -f "$tmp/run.sql" -h "$tmp" -p "$port" bench 2>&1) ||
		{ echo "$out" >&2; die "pgbench failed on $case"; }
	tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' <<<"$out")
	[ -n "$tps" ] || { echo "$out" >&2; die "no tps in pgbench output"; }
	if grep -q '^number of failed transactions: [1-9]' <<<"$out"; then
		echo "$out" >&2
		die "failed transactions in $case"
	fi
	echo "$tps"
}

# Not measured: the server's first seconds of load (caches, CPU frequency).
first_case=${cases%% *}
echo "== warm-up run: $first_case, $max_clients clients, 2 s (not measured)"
bench_one "$first_case" "$max_clients" "$largest" "1 minute" 2 >/dev/null
settle

# results: one line per run,
# "round clients keys case tps window_us undecided prefilled".
# sliding_window_log's window is chosen so that a key sees 200 calls in it
# at the floor's throughput of this round (the last run's, without a floor):
# the log stays full and about half the calls are admitted.  Every log is
# filled beforehand (prefill.sql) so the run starts in that steady state,
# up to RL_BENCH_PREFILL_MAX keys; with more keys the logs hold what the
# earlier runs left: few entries, every call admitted.
: >"$tmp/results"
undecided=$(undecided_so_far)
ref_tps=
for r in $(seq "$rounds"); do
	for c in $clients; do
		for n in $keycounts; do
			for case in $cases; do
				per_us=0
				per=
				filled=0
				if [ "$case" = sliding_window_log ]; then
					per_us=$(awk -v n="$n" -v t="${ref_tps:-0}" 'BEGIN {
						printf "%d", (t > 0 ? 200 * n * 1e6 / t : 60e6) }')
					per="$per_us microseconds"
				fi
				if [ -n "$per" ] && [ "$n" -le "$prefill_max" ]; then
					filled=$(psql_bench -d bench -At -v n="$n" -v per="$per" \
						-f "$tmp/prefill.sql")
					[ "$filled" = $((100 * n)) ] ||
						die "prefill logged $filled entries, not $((100 * n))"
					filled=1
				fi
				tps=$(bench_one "$case" "$c" "$n" "$per")
				settle
				before=$undecided
				undecided=$(undecided_so_far)
				echo "$r $c $n $case $tps $per_us $((undecided - before)) $filled" \
					>>"$tmp/results"
				printf "round %d  clients %-3d %-14s %-20s %12.0f tps\n" \
					"$r" "$c" "$(keys_label "$n")" "$case" "$tps"
				if [ "$case" = floor ] || [ -z "$ref_tps" ]; then
					ref_tps=$tps
				fi
			done
		done
	done
done

store=$(psql_bench -d bench -At -F ' ' -c \
	'SELECT capacity, used, pool_blocks, pool_used, reclaimed, refused FROM rl_store_info()')
read -r st_capacity st_used st_pool st_pool_used st_reclaimed st_refused <<<"$store"
rstat=$(psql_bench -d bench -At -F ' ' -c \
	'SELECT calls, failures, skipped FROM rl_redis_info()')
read -r rd_calls rd_failures rd_skipped <<<"$rstat"
as_pg "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null
started=
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
if [ "$st_refused" != 0 ] || [ "$rd_failures" != 0 ] || [ "$rd_skipped" != 0 ]; then
	echo "run.sh: warning: $st_refused calls found no room in the store," \
		"$rd_failures failed in Redis, $rd_skipped skipped it (see" \
		"\"undecided\" in the report): those runs' figures do not count" >&2
fi

# The median of a[1..n], for awk programs.
awk_median='
function median(a, n,   i, j, t) {
	for (i = 2; i <= n; i++)	# insertion sort: n is the number of rounds
		for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
			t = a[j]; a[j] = a[j - 1]; a[j - 1] = t
		}
	return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}'

# Median tps of each case: "clients keys case tps" per line.
awk "$awk_median"'
	{ k = $2 " " $3 " " $4; v[k, ++cnt[k]] = $5 + 0 }
	END {
		for (k in cnt) {
			for (i = 1; i <= cnt[k]; i++)
				a[i] = v[k, i]
			print k, median(a, cnt[k])
		}
	}' "$tmp/results" >"$tmp/medians"

median() {
	awk -v k="$1 $2 $3" '$1 " " $2 " " $3 == k { print $4 }' "$tmp/medians"
}

# The target ratios, one line each: "clients keys name value target verdict".
# A ratio is the median over rounds of the ratio within each round: the two
# runs of a round are close in time, so a slow drift of the machine's load
# (other work on it) cancels out.
: >"$tmp/ratios"
ratio() {
	local c=$1 n=$2 name=$3 num=$4 den=$5 target=$6
	awk -v c="$c" -v n="$n" -v num="$num" -v den="$den" -v name="$name" \
		-v t="$target" "$awk_median"'
		$2 == c && $3 == n && $4 == num { x[$1] = $5 + 0 }
		$2 == c && $3 == n && $4 == den { y[$1] = $5 + 0 }
		END {
			for (r in x)
				if (y[r] > 0)
					a[++k] = x[r] / y[r]
			if (k == 0)
				exit
			m = median(a, k)
			printf "%s %s %s %.2f %s %s\n", c, n, name, m, t,
				(m >= t ? "met" : "NOT_MET")
		}' "$tmp/results" >>"$tmp/ratios"
}
for c in $clients; do
	for n in $keycounts; do
		if [ "$n" = 1 ]; then floor_target=0.8; else floor_target=0.9; fi
		ratio "$c" "$n" token_bucket/floor token_bucket floor "$floor_target"
		ratio "$c" "$n" fixed_window/floor fixed_window floor "$floor_target"
		ratio "$c" "$n" sliding_window_log/floor sliding_window_log floor 0.8
		ratio "$c" "$n" token_bucket/table token_bucket table 3
	done
done

# What a case runs, for the report.
describe_case() {
	case $1 in
	floor)
		echo "- floor: \`rl_floor(key, 'token_bucket', 1000, '1 second')\`, a C function with"
		echo "  rl_allow's signature that returns true (\`test/bench/floor\`)" ;;
	token_bucket | fixed_window)
		echo "- $1: \`rl_allow(key, '$1', 1000, '1 second')\`" ;;
	sliding_window_log)
		echo "- sliding_window_log: \`rl_allow(key, 'sliding_window_log', 100, W)\`, W"
		echo "  such that a key sees 200 calls per W at the floor's rate, every log filled"
		echo "  first: logs stay full (100 entries) and about half the calls are admitted"
		if [ "$prefill_max" -lt "$largest" ]; then
			echo "  (logs filled up to $(keys_label "$prefill_max"); with more keys they"
			echo "  hold what earlier runs left, a few entries, and every call is admitted)"
		fi ;;
	table)
		echo "- table: \`tb_allow(key, 1000, '1 second')\`, a plpgsql token bucket doing one"
		echo "  \`INSERT ... ON CONFLICT DO UPDATE ... RETURNING\` on an UNLOGGED table"
		echo "  (\`test/bench/setup.sql\`)" ;;
	redis_token_bucket)
		echo "- redis_token_bucket: token_bucket's call with \`ratelimit.backend = redis\`,"
		echo "  one \`EVALSHA\` round trip per call to a redis-server $redis_version on"
		echo "  loopback (no persistence); its keys expire about 1 s after their last"
		echo "  call, so with many keys most calls create their key" ;;
	*)
		echo "- $1: \`test/bench/$1.sql\`" ;;
	esac
}

# The raw figures, for all.sh.
if [ -n "$datadir" ]; then
	mkdir -p "$datadir"
	cp "$tmp/results" "$tmp/medians" "$tmp/ratios" "$datadir"/
fi

# The report.
commit=$(git -c safe.directory="$root" -C "$root" describe --always --dirty 2>/dev/null ||
	echo "no commit")
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
mem=$(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
{
	echo "# ratelimit benchmark"
	echo
	echo "Written by \`test/bench/run.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC')."
	echo
	echo "| | |"
	echo "|---|---|"
	echo "| machine | $(nproc) CPUs (${cpu:-unknown}), $mem, Linux $(uname -r) |"
	echo "| load average | $load_before before, $load_after after (the benchmark itself adds about $max_clients) |"
	echo "| server | PostgreSQL $pg_version, fsync off, ratelimit $rl_version (\`ratelimit.max_keys = $max_keys\`, \`ratelimit.pool_size = ${pool_kb}kB\`) |"
	echo "| store at the end | $st_used of $st_capacity entries, $st_pool_used of $st_pool pool blocks, $st_reclaimed reclaimed, **$st_refused refused** |"
	if [ -n "$redis" ]; then
		echo "| Redis at the end | redis-server $redis_version, $rd_calls calls, **$rd_failures failed**, **$rd_skipped skipped** |"
	fi
	echo "| source | $commit |"
	echo "| pgbench | \`-n -M prepared -c C -j $threads -T $seconds\`, unix socket, on the same machine |"
	echo "| runs | $rounds round(s), cases interleaved; median tps of each case, and for each ratio the median of its per-round ratios |"
	if [ -n "$warmed" ]; then
		echo "| warm-up | one call of $warmed on each of the $(keys_label "$largest") before the runs, which measure existing keys; 2 s of $first_case, not measured |"
	else
		echo "| warm-up | 2 s of $first_case, not measured; no key created beforehand |"
	fi
	echo
	echo "Cases (one \`SELECT\` per transaction, key \`'k' || random(1, N)\`):"
	echo
	for case in $cases; do describe_case "$case"; done
	echo
	echo "## Ratios to the targets"
	echo
	if awk -v l="${load_before%% *}" -v p="$(nproc)" 'BEGIN { exit !(l > p / 4) }'; then
		echo "**The machine was busy with other work (load average above): these"
		echo "figures are noisy; rerun on a quiet machine before quoting them.**"
		echo
	fi
	echo "| clients | keys | ratio | measured | target | |"
	echo "|---:|---|---|---:|---:|---|"
	while read -r c n name value target verdict; do
		echo "| $c | $(keys_label "$n") | $name | $value | >= $target | ${verdict/_/ } |"
	done <"$tmp/ratios"
	echo
	echo "## Throughput (median tps)"
	for n in $keycounts; do
		echo
		echo "$(keys_label "$n"), by clients:"
		echo
		printf "| case |"
		for c in $clients; do printf " %s |" "$c"; done
		printf "\n|---|"
		for c in $clients; do printf -- "---:|"; done
		echo
		for case in $cases; do
			printf "| %s |" "$case"
			for c in $clients; do
				printf " %.0f |" "$(median "$c" "$n" "$case")"
			done
			echo
		done
	done
	echo
	echo "## Every run"
	echo
	echo "The window of sliding_window_log is chosen per run (see \`run.sh\`); a key"
	echo "called at a steady rate of tps / N per second admits about"
	echo "min(1, 100 N / (tps W)) of its calls once its log is full (\"not filled\":"
	echo "the log started with what earlier runs left).  Undecided: calls that no"
	echo "backend decided (store full, Redis failed or skipped), left to"
	echo "\`ratelimit.fail_mode\`; it must be 0 for the figures to count."
	echo
	echo "| round | clients | keys | case | tps | window | admitted (est.) | undecided |"
	echo "|---:|---:|---|---|---:|---:|---:|---:|"
	while read -r r c n case tps per_us undecided filled; do
		awk -v r="$r" -v c="$c" -v k="$(keys_label "$n")" -v case="$case" \
			-v n="$n" -v tps="$tps" -v w="$per_us" -v f="$undecided" \
			-v filled="$filled" 'BEGIN {
			win = adm = ""
			if (w > 0) {
				s = 100 * n * 1e6 / (tps * w)
				win = sprintf("%.4g s", w / 1e6)
				adm = filled ? sprintf("%.0f%%", 100 * (s > 1 ? 1 : s)) : "not filled"
			}
			printf "| %s | %s | %s | %s | %.0f | %s | %s | %s |\n",
				r, c, k, case, tps, win, adm, f }'
	done <"$tmp/results"
} >"$tmp/report.md"
cp "$tmp/report.md" "$report"

echo
echo "== ratios (median of the per-round ratios), report in $report"
while read -r c n name value target verdict; do
	printf "clients %-3s %-14s %-26s %6s  target >= %-4s %s\n" \
		"$c" "$(keys_label "$n")" "$name" "$value" "$target" "${verdict/_/ }"
done <"$tmp/ratios"
