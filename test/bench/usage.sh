#!/bin/bash
#
# test/bench/usage.sh: rl_usage over a million keys (issue 11).
#
# One throwaway server whose store holds 1,100,000 keys; a million keys of
# a monthly fixed_window policy are filled (one call each), then timed:
# rl_usage over all of them (the store's scan and a look at each key,
# three runs) and rl_usage of one named key (10,000 calls in one
# statement).  Prints a Markdown table
# for test/bench/report.md.  Needs root (it makes its own copy of the
# installation, as the test command does).
#
#   bash test/bench/usage.sh
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

die() { echo "usage.sh: $*" >&2; exit 1; }
as_pg() { runuser -u postgres -- "$@"; }

bench_workspace rl_usage
bench_initdb --no-sync
cat >>"$data/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$tmp'
shared_preload_libraries = 'ratelimit'
fsync = off
work_mem = 256MB
ratelimit.max_keys = 1100000
ratelimit.role_share = 100
ratelimit.database_share = 100
EOF
# (one role fills the store: the shares' caps, 50% and 75% by default,
# would refuse it the second half of its keys)
port=$(rl_free_port)
as_pg "$bindir/pg_ctl" -D "$data" -l "$tmp/server.log" -w -t 60 \
	-o "-p $port" start >/dev/null ||
	{ tail -n 20 "$tmp/server.log" >&2; die "the server did not start"; }

psql_q() {
	as_pg "$bindir/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$tmp" -p "$port" \
		-d postgres "$@"
}

# the milliseconds a statement takes, from psql's \timing
timed() {
	psql_q -c '\timing on' -c "$1" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p'
}

psql_q -c 'CREATE EXTENSION ratelimit' -c "INSERT INTO rl_policy
	(name, algo, \"limit\", per, time_zone)
	VALUES ('monthly', 'fixed_window', 1000, '1 month', 'Europe/Paris')"
fill=$(timed "SELECT count(*) FILTER (WHERE rl_allow('tenant:' || i, 'monthly',
	'2026-03-05 12:00:00+00', 1 + i % 7)) FROM generate_series(1, 1000000) i")
check=$(psql_q -c "SELECT count(*), sum(used) FROM rl_usage('monthly',
	at => '2026-03-05 12:00:01+00')")
[ "${check%%|*}" = 1000000 ] ||
	die "rl_usage saw $check, not a million keys"

all=()
for _ in 1 2 3; do
	all+=("$(timed "SELECT count(*), sum(used) FROM rl_usage('monthly',
		at => '2026-03-05 12:00:01+00')")")
done
one=$(timed "SELECT count(u.*) FROM generate_series(1, 10000) i,
	LATERAL rl_usage('monthly', 'tenant:' || i, '2026-03-05 12:00:01+00') u")
load=$(cut -d' ' -f1-3 /proc/loadavg)

median=$(printf '%s\n' "${all[@]}" | sort -n | sed -n 2p)
cat <<EOF
| what | time |
|---|---|
| filling 1,000,000 keys (one rl_allow each, one statement) | $(printf '%.0f' "$fill") ms |
| rl_usage('monthly') over 1,000,000 keys: runs | $(printf '%.0f ms, ' "${all[@]}" | sed 's/, $//') |
| rl_usage('monthly') over 1,000,000 keys: median | $(printf '%.0f' "$median") ms ($(awk -v m="$median" 'BEGIN { printf "%.2f", m * 1000 / 1000000 }') us per key) |
| rl_usage('monthly', key), 10,000 calls in one statement | $(printf '%.0f' "$one") ms ($(awk -v m="$one" 'BEGIN { printf "%.1f", m * 1000 / 10000 }') us per call) |

Load average (1, 5, 15 min) at the end: $load; $(nproc) cores.
EOF
