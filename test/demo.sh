#!/usr/bin/env bash
# Show the main job on the embedded default, as root on a fresh Debian
# machine: build and install ratelimit, start a throwaway PostgreSQL with
# the extension preloaded (loopback only, a free port), enforce quotas from
# SQL (test/demo.sql), then stop the server and remove it.
set -euo pipefail
cd "$(dirname "$0")"
. ./common.sh

rl_require_root
rl_install_packages
rl_build_install

data="$RL_WORK/data"
port=$(rl_free_port)
stop() {
	runuser -u postgres -- "$RL_BINDIR/pg_ctl" -D "$data" -m fast stop >/dev/null 2>&1 || true
	rm -rf "$RL_WORK"
}
trap stop EXIT

echo "== starting a throwaway server on 127.0.0.1:$port"
runuser -u postgres -- "$RL_BINDIR/initdb" -D "$data" -A trust >/dev/null
cat >> "$data/postgresql.conf" <<CONF
shared_preload_libraries = 'ratelimit'
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$RL_WORK'
CONF
runuser -u postgres -- "$RL_BINDIR/pg_ctl" -D "$data" -l "$RL_WORK/server.log" -w start >/dev/null

echo "== demo.sql"
runuser -u postgres -- "$RL_BINDIR/psql" -X -h 127.0.0.1 -p "$port" -d postgres \
	-v ON_ERROR_STOP=1 -f "$RL_TREE/test/demo.sql"
