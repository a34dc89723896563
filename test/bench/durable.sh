#!/bin/bash
#
# test/bench/durable.sh: the figures of durable policies (issue 10), side by
# side with the same workload on a non-durable policy, on one throwaway
# server with fsync on (a durable decision is about what reaches disk).
#
#   wal        bytes of WAL per decision above the non-durable policy's
#              (pg_current_wal_lsn deltas): one direct decision per
#              transaction, and transactions of 100 quota-trigger rows on
#              a logged table
#   pgbench    one decision per transaction, 4 clients, 10,000 keys:
#              durable (ratelimit.durable_commit = flush and async) against
#              non-durable, rounds interleaved, median tps
#   insert     a 1,000,000-row INSERT through a quota trigger on a logged
#              table, 1,000 tenants: durable against non-durable
#   restart    1,000,000 durable keys, a CHECKPOINT, an immediate shutdown:
#              the time pg_ctl start -w takes, and until durable keys are
#              ready; the same after a second crash with no traffic
#
# Run as root (it builds this tree into a private copy of PG_CONFIG's
# installation, as the test command does, unless all.sh gives it one:
# RL_BENCH_PG).  Prints markdown, or writes it to RL_BENCH_REPORT (the
# parts' progress then goes to stderr); writes issue 10's targets as
# "what|measured|target|verdict" lines to RL_BENCH_TARGETS if set (all.sh's
# durable phase).
#
# Settings (environment): RL_BENCH_DURABLE_PARTS (wal pgbench insert
# restart), RL_BENCH_SECONDS (pgbench run, 10), RL_BENCH_ROUNDS (3),
# RL_BENCH_DURABLE_KEYS (restart part, 1000000), RL_BENCH_REPORT,
# RL_BENCH_TARGETS.

set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"

seconds=${RL_BENCH_SECONDS:-10}
rounds=${RL_BENCH_ROUNDS:-3}
nkeys=${RL_BENCH_DURABLE_KEYS:-1000000}
parts=${RL_BENCH_DURABLE_PARTS:-wal pgbench insert restart}
targets_file=${RL_BENCH_TARGETS:-/dev/null}
has_part() { [[ " $parts " == *" $1 "* ]]; }
progress() { echo "== durable: $*" >&2; }
# a target's line: what, the measured value, the target, and the verdict
# of "value op limit" (op: <= or <)
target() {
	awk -v w="$1" -v v="$2" -v t="$3" -v op="$4" -v l="$5" -v why="${6:-}" 'BEGIN {
		ok = (op == "<=") ? (v + 0 <= l + 0) : (v + 0 < l + 0)
		printf "%s|%s|%s|%s\n", w, v, t, ok ? "met" : "NOT MET" (why == "" ? "" : ": " why)
	}' >>"$targets_file"
}
as_pg() { runuser -u postgres -- "$@"; }

bench_workspace rl_durable
if [ -n "${RL_BENCH_REPORT:-}" ]; then
	exec >"$RL_BENCH_REPORT"
fi
: >"$targets_file"

bench_initdb
cat >>"$data/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$tmp'
shared_preload_libraries = 'ratelimit'
shared_buffers = 256MB
max_wal_size = 4GB
checkpoint_timeout = 1h
ratelimit.durable = on
ratelimit.max_keys = $((nkeys + nkeys / 4))
ratelimit.role_share = 100
ratelimit.database_share = 100
EOF

start() {
	as_pg "$bindir/pg_ctl" -D "$data" -l "$tmp/server.log" -w -t 300 start >/dev/null
}
psql_q() { as_pg "$bindir/psql" -h "$tmp" -d postgres -XAtq -v ON_ERROR_STOP=1 -c "$1"; }
wait_ready() {
	until [ "$(psql_q 'SELECT durable_ready FROM rl_durable_info()')" = t ]; do
		sleep 0.01
	done
}
start
psql_q "CREATE EXTENSION ratelimit"
wait_ready
psql_q "INSERT INTO rl_policy (name, algo, \"limit\", per, durable) VALUES
	('d', 'token_bucket', 1000000000, '3650 days', true),
	('n', 'token_bucket', 1000000000, '3650 days', false),
	('f', 'fixed_window', 1000000000, '3650 days', true)"
psql_q "CREATE TABLE orders_d (tenant int NOT NULL, note text);
	CREATE TRIGGER q BEFORE INSERT ON orders_d FOR EACH ROW EXECUTE FUNCTION rl_enforce('d', 'tenant');
	CREATE TABLE orders_n (tenant int NOT NULL, note text);
	CREATE TRIGGER q BEFORE INSERT ON orders_n FOR EACH ROW EXECUTE FUNCTION rl_enforce('n', 'tenant')"

echo "# Durable policies (issue 10)"
echo
echo "Written by \`test/bench/durable.sh\`, $(date -u '+%Y-%m-%d %H:%M') UTC, source $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown),"
echo "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), fsync on."
echo

# ---- wal ----
# WAL of a pgbench script run n times, by one client
wal_of() {
	local script=$1 n=$2 before after
	before=$(psql_q "SELECT pg_current_wal_insert_lsn()")
	as_pg "$bindir/pgbench" -h "$tmp" -n -c 1 -t "$n" -f "$script" postgres >/dev/null
	after=$(psql_q "SELECT pg_current_wal_insert_lsn()")
	psql_q "SELECT pg_wal_lsn_diff('$after', '$before')"
}
for p in d n; do
	cat >"$tmp/one_$p.sql" <<EOF
\\set k random(1, 10000)
SELECT rl_allow(:k::text, '$p');
EOF
	cat >"$tmp/rows_$p.sql" <<EOF
\\set k random(1, 10000)
INSERT INTO orders_$p SELECT :k FROM generate_series(1, 100);
EOF
done
chmod a+r "$tmp"/*.sql
has_part wal && {
progress wal
psql_q "CHECKPOINT"
one_d=$(wal_of "$tmp/one_d.sql" 2000)
one_n=$(wal_of "$tmp/one_n.sql" 2000)
rows_d=$(wal_of "$tmp/rows_d.sql" 500)
rows_n=$(wal_of "$tmp/rows_n.sql" 500)
echo "## WAL per decision"
echo
echo "| workload | non-durable | durable | durable - non-durable, per decision |"
echo "|---|---:|---:|---:|"
awk -v d="$one_d" -v n="$one_n" 'BEGIN { printf "| one direct decision per transaction (2,000 transactions) | %.1f B | %.1f B | **%.1f B** |\n", n / 2000, d / 2000, (d - n) / 2000 }'
awk -v d="$rows_d" -v n="$rows_n" 'BEGIN { printf "| 100 trigger rows on one key per transaction (500 transactions) | %.0f B per transaction | %.0f B per transaction | **%.2f B** |\n", n / 500, d / 500, (d - n) / 50000 }'
echo
target "WAL per durable decision above a non-durable policy's, transactions of 100 trigger rows on one key" \
	"$(awk -v d="$rows_d" -v n="$rows_n" 'BEGIN { printf "%.2f B", (d - n) / 50000 }')" "<= 64 B" "<=" 64
echo "WAL per durable decision above a non-durable policy's, one direct decision per transaction|$(awk -v d="$one_d" -v n="$one_n" 'BEGIN { printf "%.1f B", (d - n) / 2000 }')|-|reported" >>"$targets_file"
}

# ---- pgbench ----
tps() {
	as_pg env PGOPTIONS="$2" "$bindir/pgbench" -h "$tmp" -n -c 4 -j 2 -T "$seconds" -f "$1" postgres 2>/dev/null |
		sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
declare -A runs
median() { tr ' ' '\n' | grep . | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
has_part pgbench && {
progress pgbench
for r in $(seq "$rounds"); do
	runs[n]+="$(tps "$tmp/one_n.sql" "") "
	runs[flush]+="$(tps "$tmp/one_d.sql" "") "
	runs[async]+="$(tps "$tmp/one_d.sql" "-c ratelimit.durable_commit=async") "
done
mn=$(median <<<"${runs[n]}")
mf=$(median <<<"${runs[flush]}")
ma=$(median <<<"${runs[async]}")
echo "## One decision per transaction (pgbench, 4 clients, 10,000 keys, $rounds rounds of $seconds s, interleaved)"
echo
echo "| policy | tps per round | median | non-durable / this |"
echo "|---|---|---:|---:|"
echo "| non-durable | ${runs[n]}| $mn | 1 |"
awk -v a="$mn" -v b="$mf" -v r="${runs[flush]}" 'BEGIN { printf "| durable, durable_commit = flush (the default: no XID, so it flushes) | %s| %s | **%.2f** |\n", r, b, a / b }'
awk -v a="$mn" -v b="$ma" -v r="${runs[async]}" 'BEGIN { printf "| durable, durable_commit = async | %s| %s | **%.2f** |\n", r, b, a / b }'
echo
echo "The flush figure is the price of \"nothing committed is lost\" for a call"
echo "that writes nothing else: such a transaction has no XID and no commit"
echo "record, so its durable image is flushed at commit, one WAL fsync per"
echo "decision (shared by concurrent commits, as PostgreSQL's own are), where a"
echo "non-durable call writes nothing; on this machine's shared disk the"
echo "rounds vary by 2x. The journal table pays the same fsync (17.9x in the"
echo "prototype). Quota triggers on tables pay nothing for it (their"
echo "transaction flushes at commit anyway: the INSERT figure below), and"
echo "\`durable_commit = async\` meets the target at the risk of the last few"
echo "hundred milliseconds of such calls, as \`synchronous_commit = off\` does."
echo
target "one decision per transaction (pgbench, 4 clients, 10,000 keys), non-durable tps / durable tps, \`durable_commit = flush\` (the default)" \
	"$(awk -v a="$mn" -v b="$mf" 'BEGIN { printf "%.2f", a / b }')" "<= 1.5" "<=" 1.5 \
	"a transaction without an XID flushes WAL at commit (one fsync per decision, as any durable write)"
target "the same, \`durable_commit = async\`" \
	"$(awk -v a="$mn" -v b="$ma" 'BEGIN { printf "%.2f", a / b }')" "<= 1.5" "<=" 1.5
}

# ---- insert ----
insert_time() {
	psql_q "TRUNCATE orders_$1; SELECT rl_reset_all(); CHECKPOINT" >/dev/null
	as_pg "$bindir/psql" -h "$tmp" -d postgres -XAtq -c '\timing on' \
		-c "INSERT INTO orders_$1 SELECT i % 1000 FROM generate_series(1, 1000000) i" |
		sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p'
}
has_part insert && {
progress insert
ins_n=""
ins_d=""
for r in $(seq "$rounds"); do
	ins_n+="$(insert_time n) "
	ins_d+="$(insert_time d) "
done
mi_n=$(median <<<"$ins_n")
mi_d=$(median <<<"$ins_d")
echo "## 1,000,000-row INSERT through a quota trigger, logged table, 1,000 tenants"
echo
echo "| policy | ms per round | median | this / non-durable |"
echo "|---|---|---:|---:|"
echo "| non-durable | $ins_n| $mi_n | 1 |"
awk -v a="$mi_d" -v b="$mi_n" -v r="$ins_d" 'BEGIN { printf "| durable | %s| %s | **%.2f** |\n", r, a, a / b }'
echo
target "1,000,000-row INSERT through a quota trigger on a logged table, 1,000 tenants, durable / non-durable" \
	"$(awk -v a="$mi_d" -v b="$mi_n" 'BEGIN { printf "%.2f", a / b }')" "<= 1.3" "<=" 1.3
}

# ---- restart ----
has_part restart || exit 0
progress restart
psql_q "TRUNCATE orders_d, orders_n; SELECT rl_reset_all()" >/dev/null
psql_q "SELECT count(rl_allow(i::text, 'f')) FROM generate_series(1, $nkeys) i" >/dev/null
psql_q "CHECKPOINT"
keys=$(psql_q "SELECT durable_keys FROM rl_durable_info()")
wal_before=$(psql_q "SELECT pg_current_wal_insert_lsn()")
t0=$(date +%s.%N)
psql_q "CHECKPOINT"
t1=$(date +%s.%N)
wal_after=$(psql_q "SELECT pg_current_wal_insert_lsn()")
sweep_wal=$(psql_q "SELECT pg_wal_lsn_diff('$wal_after', '$wal_before')")
as_pg "$bindir/pg_ctl" -D "$data" -m immediate -w stop >/dev/null
t2=$(date +%s.%N)
start
t3=$(date +%s.%N)
wait_ready
t4=$(date +%s.%N)
back=$(psql_q "SELECT count(*) FROM generate_series(1, $nkeys, 1000) i WHERE (rl_check(i::text, 'f', cost => 0)).remaining = 999999999")
as_pg "$bindir/pg_ctl" -D "$data" -m immediate -w stop >/dev/null
t5=$(date +%s.%N)
start
t6=$(date +%s.%N)
wait_ready
t7=$(date +%s.%N)
echo "## Restart with $(thousands "$keys") durable keys"
echo
echo "| | figure |"
echo "|---|---:|"
awk -v a="$t0" -v b="$t1" -v w="$sweep_wal" -v k="$keys" 'BEGIN { printf "| a CHECKPOINT with its sweep (every key imaged) | %.2f s, %.0f MB of WAL (%.0f B per key) |\n", b - a, w / 1048576, w / k }'
awk -v a="$t2" -v b="$t3" -v c="$t4" 'BEGIN { printf "| after an immediate shutdown: pg_ctl start -w (redo of the sweep, the durable file written at the end of redo) | **%.2f s** |\n| ... until durable calls are accepted (the sweeper holds its flag) | %.2f s |\n", b - a, c - a }'
echo "| sampled keys with their consumption after the restart | $back of $(( (nkeys + 999) / 1000 )) |"
target "restart after an immediate shutdown with $(thousands "$keys") durable keys, \`pg_ctl start -w\`" \
	"$(awk -v a="$t2" -v b="$t3" 'BEGIN { printf "%.2f s", b - a }')" "< 5 s" "<" 5
awk -v a="$t5" -v b="$t6" -v c="$t7" 'BEGIN { printf "| a second crash with no traffic since (the durable file only) | %.2f s, ready after %.2f s |\n", b - a, c - a }'
echo
grep -h "ratelimit \(loaded\|saved\)\|redo done\|ready to accept" "$tmp/server.log" | tail -8 | sed 's/^/    /'
