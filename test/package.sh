#!/usr/bin/env bash
# The Debian package, as root: built from a copy of the tree with
# "dpkg-buildpackage -us -uc" (pg_buildext, debian/), checked for the files
# it must hold, installed with "dpkg -i", tested with debian/tests/smoke (a
# throwaway server from the installed files: CREATE EXTENSION ratelimit and
# decisions), and removed again with "dpkg -r", so the machine is left as
# found: files the package replaced that no package owned (a ratelimit
# installed with "make install") are put back.  Builds for the PostgreSQL
# majors whose server headers Debian installed (15 on bookworm), whatever
# PG_CONFIG says.  Prints "ok"/"not ok" lines and a closing
# "package: N passed, M failed" line; exits non-zero on a failure.
#
#   bash test/package.sh
#
# Runs from test/run.sh as the suite "package" (by default on PostgreSQL 15).
# Two runs on one machine take turns (a lock) for the install and removal.
set -uo pipefail
cd "$(dirname "$0")"
. ./common.sh

rl_require_root
rl_install_packages dpkg-dev debhelper postgresql-server-dev-all

src=$(cd .. && pwd)
version=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$src/ratelimit.control")
work=$(mktemp -d /tmp/ratelimit-package.XXXXXX)
build="$work/ratelimit-$version"
installed=()
trap 'uninstall >/dev/null; rm -rf "$work"' EXIT

passed=0
failed=0
ok() {
	echo "ok - $1"
	passed=$((passed + 1))
}
not_ok() {
	echo "not ok - $1"
	[ -n "${2:-}" ] && [ -f "$2" ] && tail -n 40 "$2" | sed 's/^/#   /'
	failed=$((failed + 1))
}
finish() {
	uninstall
	echo "package: $passed passed, $failed failed"
	[ "$failed" -eq 0 ]
	exit
}

# Remove what this run installed, and put back the unowned files the
# package had replaced.  Called by finish, and on any other exit.
uninstall() {
	[ ${#installed[@]} -gt 0 ] || return 0
	if dpkg -r "${installed[@]}" >"$work/remove.log" 2>&1; then
		ok "dpkg -r ${installed[*]}"
	else
		not_ok "dpkg -r ${installed[*]}" "$work/remove.log"
	fi
	local p left=()
	for p in "${installed[@]}"; do
		dpkg-query -W -f '${db:Status-Status}' "$p" 2>/dev/null |
			grep -q '^installed' && left+=("$p")
	done
	installed=()
	[ ${#left[@]} -eq 0 ] || not_ok "still installed: ${left[*]}"
	if [ -s "$work/replaced.list" ]; then
		if tar -C / -xpf "$work/replaced.tar" && tar -C / -df "$work/replaced.tar"; then
			ok "the $(wc -l <"$work/replaced.list") unowned file(s) the package replaced are back"
		else
			not_ok "the unowned files the package replaced are not all back"
		fi
	fi
}

# Build from a copy of the tree, outside the checkout: dpkg-buildpackage
# writes its results into the parent folder, and the copy is cleaned first.
mkdir "$build"
(cd "$src" && tar --exclude=.git -cf - .) | tar -C "$build" -xf -
echo "== dpkg-buildpackage -us -uc in $build"
if (cd "$build" && dpkg-buildpackage -us -uc) >"$work/build.log" 2>&1; then
	ok "dpkg-buildpackage -us -uc"
else
	not_ok "dpkg-buildpackage -us -uc" "$work/build.log"
	finish
fi

# One package per PostgreSQL major, each with the library, the control file,
# every install and upgrade script, and the documentation.
debs=()
for v in $(cd "$build" && pg_buildext supported-versions); do
	deb="$work/postgresql-$v-ratelimit_${version}_$(dpkg-architecture -qDEB_HOST_ARCH).deb"
	if [ ! -f "$deb" ]; then
		not_ok "postgresql-$v-ratelimit was built"
		continue
	fi
	debs+=("$deb")
	dpkg-deb -c "$deb" | awk '{ print $6 }' | sed 's|^\./|/|' >"$work/contents"
	missing=()
	for f in "/usr/lib/postgresql/$v/lib/ratelimit.so" \
		"/usr/share/postgresql/$v/extension/ratelimit.control" \
		$(cd "$src" && ls sql/*.sql | sed "s|^sql/|/usr/share/postgresql/$v/extension/|") \
		"/usr/share/doc/postgresql-$v-ratelimit/README.md.gz" \
		"/usr/share/doc/postgresql-$v-ratelimit/reference.md.gz"; do
		grep -qx "$f" "$work/contents" || missing+=("$f")
	done
	if [ ${#missing[@]} -eq 0 ]; then
		ok "postgresql-$v-ratelimit holds the library, control file, SQL scripts and docs"
	else
		printf '%s\n' "${missing[@]}" >"$work/missing"
		not_ok "postgresql-$v-ratelimit lacks files" "$work/missing"
	fi
done
[ ${#debs[@]} -gt 0 ] || { not_ok "no package to install"; finish; }

# Install, test, remove: one run at a time on this machine.
exec 9>/run/lock/ratelimit-package.lock
flock 9
names=()
for deb in "${debs[@]}"; do
	names+=("$(dpkg-deb -f "$deb" Package)")
done
for p in "${names[@]}"; do
	if dpkg-query -W -f '${db:Status-Status}' "$p" 2>/dev/null | grep -q installed; then
		not_ok "$p is installed on this machine already: remove it first (dpkg -r $p), this test removes what it installs"
		finish
	fi
done
# the files the packages will replace that no package owns
: >"$work/replaced.list"
for deb in "${debs[@]}"; do
	dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { print $6 }' | sed 's|^\./||' |
		while read -r f; do
			[ -e "/$f" ] && ! dpkg-query -S "/$f" >/dev/null 2>&1 && echo "$f"
		done >>"$work/replaced.list"
done
if [ -s "$work/replaced.list" ]; then
	echo "== keeping $(wc -l <"$work/replaced.list") unowned file(s) the package replaces, to put back"
	tar -C / -cpf "$work/replaced.tar" -T "$work/replaced.list"
fi

installed=("${names[@]}")
if dpkg -i "${debs[@]}" >"$work/install.log" 2>&1; then
	ok "dpkg -i ${names[*]}"
else
	not_ok "dpkg -i ${names[*]}" "$work/install.log"
	finish
fi

# debian/tests/smoke, the autopkgtest, against the installed files
if (cd "$build" && sh debian/tests/smoke) >"$work/smoke.log" 2>&1; then
	ok "a server from the installed package: $(grep -c '^smoke: PostgreSQL' "$work/smoke.log") major(s), CREATE EXTENSION ratelimit and decisions work"
	sed 's/^/# /' "$work/smoke.log"
else
	not_ok "a server from the installed package" "$work/smoke.log"
fi

finish
