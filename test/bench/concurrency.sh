#!/bin/bash
#
# test/bench/concurrency.sh: what a concurrency limit costs (issue 12).
#
# On one throwaway server (a private copy of PG_CONFIG's installation, as
# run.sh makes):
#
#   cost        rl_acquire and its release at commit, one transaction per
#               call, against rl_allow (token_bucket) in the same kind of
#               transaction: pgbench -M prepared, 4 clients, 10,000 keys,
#               never full; cases interleaved in rounds, the median of the
#               per-round ratios (issue 12's target: at most 2x, i.e. a
#               throughput ratio of at least 0.5).
#   contention  16 clients on one key of 4 slots, each transaction taking a
#               slot (waiting up to 10 s for one) and giving it back at
#               commit: throughput, against the same transaction without
#               the limit.
#   handoff     the time from a holder's rl_release to the waiter's return
#               from rl_acquire (clock_timestamp() on both sides, one
#               machine), over 500 handoffs through dblink: median and
#               99th percentile (target: a median under 1 ms); and, for
#               reference, the same handoff of an advisory lock
#               (PostgreSQL's own wake-up of a waiting backend).
#
# Run as root.  Prints the figures and writes them, as a Markdown section,
# to RL_BENCH_REPORT (default $TMPDIR or /tmp, ratelimit-concurrency.md).
#
#   RL_BENCH_SECONDS   seconds per pgbench run       (10)
#   RL_BENCH_ROUNDS    rounds of the cost cases      (3)
#   RL_BENCH_HANDOFFS  handoffs measured             (500)
#   PG_CONFIG          the installation to copy      (Debian's PostgreSQL 15)

set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"

seconds=${RL_BENCH_SECONDS:-10}
rounds=${RL_BENCH_ROUNDS:-3}
handoffs=${RL_BENCH_HANDOFFS:-500}
report=${RL_BENCH_REPORT:-${TMPDIR:-/tmp}/ratelimit-concurrency.md}

as_pg() { runuser -u postgres -- "$@"; }

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
bench_workspace rl_bench_cc
port=$((20000 + RANDOM % 20000))
bench_initdb --no-sync
cat >>"$data/postgresql.conf" <<CONF
shared_preload_libraries = 'ratelimit'
ratelimit.max_keys = 100000
port = $port
listen_addresses = ''
unix_socket_directories = '$tmp'
max_connections = 60
CONF
as_pg "$bindir/pg_ctl" -D "$data" -l "$tmp/server.log" -w start >/dev/null
psql() { as_pg "$bindir/psql" -X -q -A -t -h "$tmp" -p "$port" -d postgres "$@"; }
psql -c 'CREATE EXTENSION ratelimit' -c 'CREATE EXTENSION dblink'

cat >"$tmp/allow.sql" <<'SQL'
\set k random(1, 10000)
SELECT rl_allow('a' || :k, 'token_bucket', 1000000000, '1 second');
SQL
cat >"$tmp/acquire.sql" <<'SQL'
\set k random(1, 10000)
SELECT rl_acquire('c' || :k, 1000000);
SQL
cat >"$tmp/contend.sql" <<'SQL'
BEGIN;
SELECT rl_acquire('hot', 4, max_wait => '10 s');
SELECT pg_sleep(0.001);
COMMIT;
SQL
cat >"$tmp/plain.sql" <<'SQL'
BEGIN;
SELECT pg_sleep(0.001);
COMMIT;
SQL
chmod a+r "$tmp"/*.sql

# tps of a script: bench CLIENTS SCRIPT
bench() {
	as_pg "$bindir/pgbench" -n -M prepared -c "$1" -j 2 -T "$seconds" \
		-h "$tmp" -p "$port" -f "$tmp/$2.sql" postgres 2>&1 |
		sed -n 's/^tps = \([0-9]*\).*/\1/p'
}

echo "== cost: $rounds rounds of ${seconds} s, 4 clients, 10,000 keys"
ratios=()
for r in $(seq "$rounds"); do
	a=$(bench 4 allow)
	c=$(bench 4 acquire)
	ratio=$(awk -v a="$a" -v c="$c" 'BEGIN { printf "%.2f", c / a }')
	echo "round $r: rl_allow $a tps, rl_acquire $c tps, ratio $ratio"
	ratios+=("$ratio")
	allows+=("$a")
	acquires+=("$c")
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio=$(median "${ratios[@]}")
allow_tps=$(median "${allows[@]}")
acquire_tps=$(median "${acquires[@]}")

echo "== contention: 16 clients, one key of 4 slots"
plain_tps=$(bench 16 plain)
contend_tps=$(bench 16 contend)
leaked=$(psql -c "SELECT count(*) FROM rl_slots()")
echo "without the limit $plain_tps tps, with it $contend_tps tps; keys with slots after: $leaked"

echo "== handoff: $handoffs times"
psql >"$tmp/handoff.txt" <<SQL
SELECT dblink_connect('w', 'host=$tmp port=$port dbname=postgres');
CREATE TEMP TABLE handoff (us float8);
DO \$\$
DECLARE
	t0 timestamptz;
	t1 timestamptz;
	i int;
BEGIN
	FOR i IN 1 .. $handoffs LOOP
		PERFORM rl_acquire('h', 1, 'session');
		PERFORM dblink_send_query('w',
			'SELECT clock_timestamp() FROM (SELECT rl_acquire(''h'', 1, max_wait => ''10 s'') AS ok) s WHERE ok');
		WHILE coalesce((SELECT waiting FROM rl_slots() WHERE key = 'h'), 0) < 1 LOOP
			PERFORM pg_sleep(0.0001);
		END LOOP;
		t0 := clock_timestamp();
		PERFORM rl_release('h');
		SELECT r INTO t1 FROM dblink_get_result('w') AS (r timestamptz);
		PERFORM * FROM dblink_get_result('w') AS (r timestamptz);
		INSERT INTO handoff VALUES (extract(epoch FROM t1 - t0) * 1e6);
	END LOOP;
END \$\$;
SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY us)) || ' ' ||
	   round(percentile_cont(0.99) WITHIN GROUP (ORDER BY us)) || ' ' || count(*)
FROM handoff;
-- the same handoff of a heavyweight lock (pg_advisory_lock), PostgreSQL's
-- own: what waking a waiting backend costs on this machine
TRUNCATE handoff;
DO \$\$
DECLARE
	t0 timestamptz;
	t1 timestamptz;
	i int;
BEGIN
	FOR i IN 1 .. $handoffs LOOP
		PERFORM pg_advisory_lock(12);
		PERFORM dblink_send_query('w',
			'SELECT clock_timestamp() FROM (SELECT pg_advisory_xact_lock(12)) s');
		WHILE NOT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND NOT granted) LOOP
			PERFORM pg_sleep(0.0001);
		END LOOP;
		t0 := clock_timestamp();
		PERFORM pg_advisory_unlock(12);
		SELECT r INTO t1 FROM dblink_get_result('w') AS (r timestamptz);
		PERFORM * FROM dblink_get_result('w') AS (r timestamptz);
		INSERT INTO handoff VALUES (extract(epoch FROM t1 - t0) * 1e6);
	END LOOP;
END \$\$;
SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY us)) || ' ' ||
	   round(percentile_cont(0.99) WITHIN GROUP (ORDER BY us)) || ' ' || count(*)
FROM handoff;
SQL
read -r p50 p99 n < <(tail -2 "$tmp/handoff.txt" | head -1)
read -r lk50 lk99 lkn < <(tail -1 "$tmp/handoff.txt")
echo "handoff: median $p50 us, p99 $p99 us over $n; an advisory lock's: median $lk50 us, p99 $lk99 us"

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
cat >"$report" <<MD
## Concurrency limits (#12)

\`test/bench/concurrency.sh\`, $(date -u '+%Y-%m-%d %H:%M') UTC, source
$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown), $("$bindir/postgres" --version);
load average $load_before before, $load_after after (2 CPUs shared with other work: noisy).

| figure | measured | target | |
|---|---:|---:|---|
| rl_acquire + release at commit / rl_allow, throughput, 4 clients, 10,000 keys (median of $rounds rounds of ${seconds} s) | $ratio ($acquire_tps / $allow_tps tps) | >= 0.5 (at most 2x the cost) | $(awk -v r="$ratio" 'BEGIN { print (r >= 0.5 ? "met" : "NOT MET") }') |
| a freed slot reaches the waiter (rl_release to rl_acquire's return), median / p99 of $n | $p50 us / $p99 us | median < 1000 us | $(awk -v p="$p50" 'BEGIN { print (p < 1000 ? "met" : "NOT MET") }') |
| the same handoff of an advisory lock (PostgreSQL's own wake-up, for reference), median / p99 of $lkn | $lk50 us / $lk99 us | - | reported |
| 16 clients on one key of 4 slots, transactions of 1 ms held in a slot (waiting up to 10 s) / the same without the limit | $contend_tps / $plain_tps tps | - | reported |
| keys with slots held after the contention run | $leaked | 0 | $([ "$leaked" = 0 ] && echo met || echo NOT MET) |

With 4 slots and 1 ms of work (pg_sleep) per transaction, at most about
4,000 transactions a second can pass the limit; without it 16 clients
each sleep their own millisecond.
MD
echo "== report: $report"
