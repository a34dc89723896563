#!/bin/bash
#
# test/bench/redis.sh: the Redis backend benchmark.
#
# In one run, on a throwaway PostgreSQL server and a throwaway redis-server
# (both on loopback, stopped at the end):
#   1. rl_allow(token_bucket) through Redis, RL_BENCH_CLIENTS sessions each
#      calling it back to back (1,000 calls per statement, random keys among
#      RL_BENCH_KEYS): like redis-benchmark, one request in flight per
#      connection, and no client round trip per call;
#   1a. the same, one call per statement (pgbench, prepared mode): what an
#      application making one call per request sees, PostgreSQL's client
#      round trip included;
#   1b. (1a) with ratelimit.redis_batch = 100 (local batching);
#   2. redis-benchmark running the very same EVALSHA (the script rl_allow
#      uses, same arguments shape, random keys among as many) at the same
#      concurrency: the ceiling for (1) and (1a);
#   3. rl_allow with Redis down and the circuit breaker open, and, for
#      reference, rl_allow on the local backend: latency percentiles from
#      pgbench's per-transaction log, at RL_BENCH_DOWN_CLIENTS.
# Prints the figures and the ratios (1) / (2), the target, and (1a) / (2);
# writes test/bench/redis.md.
# With 2 CPUs or more, redis-server runs pinned to CPU 0 and everything
# else (PostgreSQL, pgbench, redis-benchmark) to the others, as if Redis had
# a machine of its own: both sides of the comparison run that way.
#
# Run as root (servers run as user postgres).  It runs against a private
# copy of PG_CONFIG's installation with this tree's extension built into it
# (lib.sh's bench_install), or against all.sh's copy.
#
# Settings (environment):
#   RL_BENCH_CLIENTS   concurrency of both clients            (8)
#   RL_BENCH_KEYS      distinct keys                          (10000)
#   RL_BENCH_SECONDS   seconds of each pgbench run            (10)
#   RL_BENCH_DOWN_CLIENTS  concurrency of the latency runs     (2)
#   RL_BENCH_REPORT    report file                            (test/bench/redis.md)
#   RL_BENCH_PIN       1: redis-server on CPU 0, everything else on the
#                      other CPUs, as if Redis had its own machine (1 when
#                      there are 2 CPUs or more; 0: no pinning)
#   PG_CONFIG          pg_config of the installation to copy
#                                           (Debian's PostgreSQL 15)

set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
clients=${RL_BENCH_CLIENTS:-8}
nkeys=${RL_BENCH_KEYS:-10000}
seconds=${RL_BENCH_SECONDS:-10}
report=${RL_BENCH_REPORT:-$here/redis.md}
down_clients=${RL_BENCH_DOWN_CLIENTS:-2}
ncpu=$(nproc)
pin=${RL_BENCH_PIN:-$([ "$ncpu" -ge 2 ] && echo 1 || echo 0)}
# command prefixes pinning to Redis's CPU, or to the others
on_redis=()
on_clients=()
if [ "$pin" = 1 ]; then
	on_redis=(taskset -c 0)
	on_clients=(taskset -c "1-$((ncpu - 1))")
fi

as_pg() { runuser -u postgres -- "$@"; }

rport=$(rl_free_port)
pport=$(rl_free_port)
bench_workspace rl_redis_bench

start_redis() {
	bench_redis_start "$rport" "${on_redis[@]}" ||
		{ echo "redis-server did not start" >&2; exit 1; }
}
start_redis

bench_initdb --no-sync
cat >>"$data/postgresql.conf" <<EOF
shared_preload_libraries = 'ratelimit'
listen_addresses = ''
unix_socket_directories = '$tmp'
max_connections = 100
ratelimit.backend = redis
ratelimit.redis_nodes = '127.0.0.1:$rport'
ratelimit.redis_probe_interval = 3600000
EOF
as_pg "${on_clients[@]}" "$bindir/pg_ctl" -D "$data" -l "$tmp/server.log" -w -o "-p $pport" start >/dev/null
psql_b() { as_pg "$bindir/psql" -X -q -At -h "$tmp" -p "$pport" -d postgres "$@"; }
psql_b -c 'CREATE EXTENSION ratelimit'

cat >"$tmp/allow.sql" <<'EOF'
\set id random(1, :nkeys)
SELECT rl_allow('k' || :id, 'token_bucket', 1000000);
EOF
# 1,000 calls per statement: pgbench's tps times 1,000 is calls/s
cat >"$tmp/loop.sql" <<'EOF'
SELECT count(*) FILTER (WHERE rl_allow('k' || (1 + floor(random() * :nkeys)::int),
                                       'token_bucket', 1000000))
FROM generate_series(1, 1000);
EOF
chmod a+r "$tmp/allow.sql" "$tmp/loop.sql"

pgb() {
	local c=$1
	shift
	as_pg "${on_clients[@]}" "$bindir/pgbench" -n -M prepared -c "$c" -j "$((c < 2 ? c : 2))" \
		-T "$seconds" -D nkeys="$nkeys" -h "$tmp" -p "$pport" "$@" postgres
}

# pgbench with a per-transaction log: "tps p50 p99" (latencies in us)
latency_run() {
	local name=$1
	shift
	(cd "$tmp" && pgb "$down_clients" -f "$tmp/allow.sql" -l \
		--log-prefix="$tmp/$name" "$@" >"$tmp/$name.out" 2>&1)
	echo "$(awk '/^tps = /{print int($3)}' "$tmp/$name.out" | tail -1)" \
		"$(cat "$tmp/$name".[0-9]* | awk '{print $3}' | percentiles)"
}

echo "== 1. rl_allow through Redis, back to back ($clients sessions, $nkeys keys, ${seconds}s)"
pgb "$clients" -f "$tmp/loop.sql" >"$tmp/pgb1.out" 2>&1
tps_loop=$(awk '/^tps = /{print int($3 * 1000)}' "$tmp/pgb1.out" | tail -1)
echo "   $tps_loop calls/s"

echo "== 1a. rl_allow through Redis, one call per statement ($clients clients)"
pgb "$clients" -f "$tmp/allow.sql" >"$tmp/pgb1a.out" 2>&1
tps_pg=$(awk '/^tps = /{print int($3)}' "$tmp/pgb1a.out" | tail -1)
echo "   $tps_pg calls/s"

echo "== 1b. (1a) with ratelimit.redis_batch = 100"
PGOPTIONS='-c ratelimit.redis_batch=100' pgb "$clients" -f "$tmp/allow.sql" >"$tmp/pgb1b.out" 2>&1
tps_batch=$(awk '/^tps = /{print int($3)}' "$tmp/pgb1b.out" | tail -1)
echo "   $tps_batch calls/s"

# the SHA1 of the token_bucket script, as rl_allow sends it
dboid=$(psql_b -c "SELECT oid FROM pg_database WHERE datname = 'postgres'")
timeout 5 redis-cli -p "$rport" MONITOR >"$tmp/monitor" 2>/dev/null &
sleep 0.3
psql_b -c "SELECT rl_allow('sha', 'token_bucket', 1000000)" >/dev/null
sleep 0.3
sha=$(grep -o '"EVALSHA" "[0-9a-f]*"' "$tmp/monitor" | head -1 | cut -d'"' -f4)
kill %1 2>/dev/null || true
[ -n "$sha" ] || { echo "could not capture the script's SHA1" >&2; exit 1; }

echo "== 2. redis-benchmark, the same EVALSHA ($clients clients, $nkeys keys)"
n=$(((tps_loop > tps_pg ? tps_loop : tps_pg) * seconds))
[ "$n" -ge 100000 ] || n=100000
"${on_clients[@]}" redis-benchmark -p "$rport" -c "$clients" -n "$n" -r "$nkeys" -q \
	EVALSHA "$sha" 1 "rl:{$dboid:tb:k__rand_int__}" "" 1000000 1000000 1 \
	1000000 1000 >"$tmp/rb.out" 2>&1
tps_rb=$(tr '\r' '\n' <"$tmp/rb.out" | awk '/requests per second/{v=$(NF-5)} END{print int(v)}')
echo "   $tps_rb calls/s"

echo "== 3. rl_allow with Redis down, breaker open ($down_clients clients)"
kill -9 "$(cat "$tmp/redis.pid")"
rm -f "$tmp/redis.pid"
psql_b -c "SELECT rl_allow('trip', 'token_bucket', 10)" >/dev/null 2>&1 || true
read -r tps_down p50 p99 < <(latency_run down)
echo "   $tps_down calls/s, latency p50 ${p50} us, p99 ${p99} us"
skipped=$(psql_b -c 'SELECT skipped FROM rl_redis_info()')

echo "== 4. rl_allow on the local backend, for reference ($down_clients clients)"
read -r tps_local l50 l99 < <(PGOPTIONS='-c ratelimit.backend=local' latency_run local)
echo "   $tps_local calls/s, latency p50 ${l50} us, p99 ${l99} us"

ratio=$(awk -v a="$tps_loop" -v b="$tps_rb" 'BEGIN{printf "%.3f", a / b}')
ratio_stmt=$(awk -v a="$tps_pg" -v b="$tps_rb" 'BEGIN{printf "%.3f", a / b}')
cpus=$(nproc)
cat >"$report" <<EOF
# Redis backend benchmark

\`test/bench/redis.sh\`, $(date -u +%Y-%m-%d), $cpus CPUs, PostgreSQL
$("$bindir/postgres" --version | awk '{print $3}'), $(redis-server --version | awk '{print $3}'),
$clients clients, $nkeys keys, ${seconds} s per run; PostgreSQL, Redis and
both clients on the same machine.

| case | calls/s |
|---|---|
| rl_allow(token_bucket) through Redis, back to back (1,000 calls per statement) | $tps_loop |
| rl_allow(token_bucket) through Redis, one call per statement (pgbench -M prepared) | $tps_pg |
| redis-benchmark, the same EVALSHA | $tps_rb |
| ratio back to back / redis-benchmark (target >= 0.8) | $ratio |
| ratio one call per statement / redis-benchmark | $ratio_stmt |
| one call per statement, ratelimit.redis_batch = 100 | $tps_batch |

Both rl_allow runs and redis-benchmark have $clients connections to Redis with
one request in flight on each. Back to back, each session calls rl_allow
1,000 times per statement: what is measured is the limiter's own path (the
call, the script through hiredis, the reply), the target's subject. One call
per statement adds PostgreSQL's client round trip to every call (parse-free
execute, protocol, the backend's sleep and wake-up around it), which the local
backend pays as well; with $(if [ "$pin" = 1 ]; then echo "PostgreSQL and pgbench on $((ncpu - 1)) CPU(s), Redis on its own"; else echo "everything sharing the CPUs"; fi),
that is what limits the per-statement figure.

Latency at $down_clients clients (pgbench per-transaction log, round trip
from the client included):

| case | calls/s | p50 (us) | p99 (us) |
|---|---|---|---|
| rl_allow, Redis down, breaker open (target p99 < 1 ms) | $tps_down | $p50 | $p99 |
| rl_allow, local backend (reference) | $tps_local | $l50 | $l99 |

$skipped calls skipped Redis while the breaker was open.
EOF
echo "== ratio rl_allow / redis-benchmark: $ratio (target >= 0.8); breaker-open p99: ${p99} us (target < 1000)"
echo "== ratio one call per statement / redis-benchmark: $ratio_stmt"
echo "== report: $report"
