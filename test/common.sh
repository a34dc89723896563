# Shared by test/run.sh, test/sanitize.sh, test/package.sh and test/demo.sh
# (sourced, not run): install what a fresh Debian machine lacks, and build
# and install the extension into a private copy of a PostgreSQL
# installation, so that the system's files are never changed and several
# runs (other versions, other checkouts) can go on side by side.
#
# PG_CONFIG picks the PostgreSQL installation (default: Debian's 15).  Any
# installation works whose bindir, pkglibdir and sharedir may be copied
# elsewhere (PostgreSQL finds its libraries and share files relative to its
# binaries): Debian's packages, and the relocatable trees of
# ../shared/pg/ (see its README).

rl_require_root() {
	if [ "$(id -u)" != 0 ]; then
		echo "run as root (it installs packages and the extension): sudo $0" >&2
		exit 1
	fi
}

# Debian packages: PostgreSQL 15 with PGXS, hiredis, Redis, TAP modules.
# Sets PG_CONFIG to Debian's PostgreSQL 15 unless it is set already.
rl_install_packages() {
	local want=(make gcc postgresql-15 postgresql-server-dev-15 libhiredis-dev
		redis-server redis-tools libipc-run-perl)
	local missing=()
	local p
	for p in "${want[@]}" "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
			missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		echo "== installing: ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends "${missing[@]}" >/dev/null
	fi
	export PG_CONFIG="${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}"
	if [ ! -x "$PG_CONFIG" ]; then
		echo "PG_CONFIG=$PG_CONFIG is not an executable pg_config" >&2
		exit 1
	fi
	RL_PG_VERSION=$("$PG_CONFIG" --version)
	RL_PG_MAJOR=$(echo "$RL_PG_VERSION" | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
	# a tree outside the system's library path finds its own libpq
	export LD_LIBRARY_PATH="$("$PG_CONFIG" --libdir)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# A copy of the installation's bindir, pkglibdir and sharedir under $1, at
# the same paths below it.  Prints nothing; $1 must not exist yet.
rl_copy_installation() {
	local dest="$1" d
	for d in "$("$PG_CONFIG" --bindir)" "$("$PG_CONFIG" --pkglibdir)" \
		"$("$PG_CONFIG" --sharedir)"; do
		mkdir -p "$dest$(dirname "$d")"
		cp -a "$d" "$dest$d"
	done
}

# Copy the tree (without .git) into a fresh folder owned by postgres, make
# a private copy of the PostgreSQL installation there, build the extension
# as postgres (warnings are errors; $1, if given, is more COPT) and install
# it into the private copy.  Sets RL_WORK, RL_TREE, RL_PG (the private
# copy's root) and RL_BINDIR (its bindir, first on PATH).
rl_build_install() {
	local src
	src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	RL_WORK=$(mktemp -d /tmp/ratelimit.XXXXXX)
	RL_TREE="$RL_WORK/tree"
	RL_PG="$RL_WORK/pg"
	RL_BINDIR="$RL_PG$("$PG_CONFIG" --bindir)"
	mkdir "$RL_TREE"
	(cd "$src" && tar --exclude=.git -cf - .) | tar -C "$RL_TREE" -xf -
	rl_copy_installation "$RL_PG"
	chown -R postgres:postgres "$RL_WORK"
	chmod 755 "$RL_WORK"
	echo "== building in $RL_TREE against $RL_PG_VERSION"
	rl_build "-Werror ${1:-}"
	export PATH="$RL_BINDIR:$PATH"
}

# (Re)build the tree with COPT=$1 and install it into the private copy.
rl_build() {
	runuser -u postgres -- make -s -C "$RL_TREE" PG_CONFIG="$PG_CONFIG" clean >/dev/null
	runuser -u postgres -- make -s -C "$RL_TREE" PG_CONFIG="$PG_CONFIG" COPT="$1"
	make -s -C "$RL_TREE" PG_CONFIG="$PG_CONFIG" install DESTDIR="$RL_PG" >/dev/null
	chown -R postgres:postgres "$RL_PG"
}

# Run "make installcheck" in the tree as postgres against the private copy;
# the arguments are make variables.
rl_installcheck() {
	runuser -u postgres -- env PATH="$PATH" LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
		PGCTLTIMEOUT="${PGCTLTIMEOUT:-180}" \
		make -C "$RL_TREE" PG_CONFIG="$PG_CONFIG" installcheck \
		bindir="$RL_BINDIR" "$@"
}

# A free TCP port on the loopback interface.
rl_free_port() {
	perl -MIO::Socket::INET -e \
		'print IO::Socket::INET->new(Listen => 1, LocalAddr => "127.0.0.1", LocalPort => 0)->sockport'
}
