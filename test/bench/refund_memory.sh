#!/bin/bash
#
# test/bench/refund_memory.sh: memory of refund tracking per row (issues 6
# and 9: it must grow with distinct keys, parameters and savepoint levels,
# not with rows).
#
# One throwaway server; each case makes RL_BENCH_REFUND_ROWS (1,000,000)
# tracked rl_allow calls in one transaction (ratelimit.refund_on_rollback
# on, token_bucket, explicit times), reads the "ratelimit refunds" memory
# context (pg_backend_memory_contexts, total_bytes, with its hash table's)
# before rolling back, and prints bytes per row:
#
#   same key          every call on one key, one limit
#   alternating       one key, the limit alternating between two values
#                     per row (a limit computed per row)
#   alternating x 3   one key, three limits in turn
#   10,000 keys       rows spread over 10,000 keys
#   distinct keys     every row its own key (the tracking's cost per key)
#
# Run as root.  RL_BENCH_PG: the root of a private installation with this
# tree's extension (as test/common.sh makes one); without it one is built
# here, as the test command does, and removed afterwards.
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck source=../common.sh
. ../common.sh

rows=${RL_BENCH_REFUND_ROWS:-1000000}

rl_require_root
rl_install_packages bc
work=
if [ -z "${RL_BENCH_PG:-}" ]; then
	rl_build_install ""
	RL_BENCH_PG=$RL_PG
	work=$RL_WORK
fi
bindir=$RL_BENCH_PG$("$PG_CONFIG" --bindir)
data=$(mktemp -d /tmp/rl_refund_memory.XXXXXX)
chown postgres:postgres "$data"
port=$(rl_free_port)
cleanup() {
	runuser -u postgres -- "$bindir/pg_ctl" -D "$data/db" -m immediate \
		stop >/dev/null 2>&1 || true
	rm -rf "$data"
	[ -n "$work" ] && rm -rf "$work"
	return 0
}
trap cleanup EXIT

pg() {
	local cmd=$1
	shift
	runuser -u postgres -- env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
		"$bindir/$cmd" "$@"
}
pg initdb -D "$data/db" >/dev/null
cat >>"$data/db/postgresql.conf" <<EOF
shared_preload_libraries = 'ratelimit'
ratelimit.max_keys = 2000000
port = $port
listen_addresses = ''
unix_socket_directories = '$data'
EOF
pg pg_ctl -D "$data/db" -l "$data/log" -w start >/dev/null
psql_() { pg psql -X -q -A -t -h "$data" -p "$port" -d postgres "$@"; }
psql_ -c 'CREATE EXTENSION ratelimit'

# bytes of tracking for $rows calls of rl_allow(key expr, limit expr)
measure() {
	psql_ <<EOF | tail -1
BEGIN;
SET LOCAL ratelimit.refund_on_rollback = on;
SELECT count(*) FROM generate_series(1, $rows) i,
	LATERAL rl_allow($1, 'token_bucket', $2, '10000 days',
		at => '2026-01-01'::timestamptz) a;
SELECT sum(total_bytes) FROM pg_backend_memory_contexts
	WHERE name IN ('ratelimit refunds', 'ratelimit refund targets');
ROLLBACK;
EOF
}

printf '%-16s %14s %14s\n' case tracking bytes/row
while IFS='|' read -r name key limit; do
	b=$(measure "$key" "$limit")
	printf '%-16s %14s %14.1f\n' "$name" "$b" "$(echo "$b / $rows" | bc -l)"
done <<'EOF'
same key|'k'|1000000000
alternating|'k'|1000000000 + i % 2
alternating x 3|'k'|1000000000 + i % 3
10,000 keys|(i % 10000)::text|1000000000
distinct keys|i::text|1000000000
EOF
