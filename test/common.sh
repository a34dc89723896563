# Shared by test/run.sh and test/demo.sh (sourced, not run): install what a
# fresh Debian machine lacks, and build and install the extension from a
# copy of the tree that the postgres user can read and write.

rl_require_root() {
	if [ "$(id -u)" != 0 ]; then
		echo "run as root (it installs packages and the extension): sudo $0" >&2
		exit 1
	fi
}

# Debian packages: PostgreSQL 15 with PGXS, hiredis, Redis, TAP modules.
rl_install_packages() {
	local want=(make gcc postgresql-15 postgresql-server-dev-15 libhiredis-dev
		redis-server redis-tools libipc-run-perl)
	local missing=()
	local p
	for p in "${want[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
			missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		echo "== installing: ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends "${missing[@]}" >/dev/null
	fi
	export PATH="/usr/lib/postgresql/15/bin:$PATH"
}

# Copy the tree (without .git) into a fresh folder owned by postgres, build
# it there as postgres and install it as root.  Sets RL_WORK and RL_TREE.
rl_build_install() {
	local src
	src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	RL_WORK=$(mktemp -d /tmp/ratelimit.XXXXXX)
	RL_TREE="$RL_WORK/tree"
	mkdir "$RL_TREE"
	(cd "$src" && tar --exclude=.git -cf - .) | tar -C "$RL_TREE" -xf -
	chown -R postgres:postgres "$RL_WORK"
	echo "== building in $RL_TREE"
	runuser -u postgres -- make -s -C "$RL_TREE" clean >/dev/null
	runuser -u postgres -- make -s -C "$RL_TREE"
	make -s -C "$RL_TREE" install >/dev/null
}

# A free TCP port on the loopback interface.
rl_free_port() {
	perl -MIO::Socket::INET -e \
		'print IO::Socket::INET->new(Listen => 1, LocalAddr => "127.0.0.1", LocalPort => 0)->sockport'
}
