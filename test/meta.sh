#!/usr/bin/env bash
# The PGXN release: META.json validates against the PGXN Meta Spec
# (test/meta.pl), the validator refuses what the spec refuses, and
# "make dist" makes the archive META.json describes, or refuses outside a
# git checkout.  Needs perl, git and unzip; changes nothing in the
# checkout (the archive is written to a temporary folder).  Prints TAP-like
# "ok"/"not ok" lines and a closing "meta: N passed, M failed" line, and
# exits non-zero on a failure.
#
#   bash test/meta.sh
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
export PG_CONFIG="${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}"
work=$(mktemp -d /tmp/ratelimit-meta.XXXXXX)
trap 'rm -rf "$work"' EXIT

passed=0
failed=0
check() {
	local name="$1"
	shift
	if "$@" >"$work/out" 2>&1; then
		echo "ok - $name"
		passed=$((passed + 1))
	else
		echo "not ok - $name"
		sed 's/^/#   /' "$work/out"
		failed=$((failed + 1))
	fi
}
fails() { ! "$@"; }

version=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$src/ratelimit.control")

check "META.json validates" perl "$src/test/meta.pl" "$src/META.json"

# The validator can fail: each broken copy of META.json is refused.
# mutate NAME PERL-CODE: $m is the decoded META.json.
mutate() {
	local name="$1" code="$2"
	perl -MJSON::PP -e '
		my ($in, $out) = @ARGV;
		open my $f, "<", $in or die; local $/; my $m = decode_json(<$f>);
		'"$code"';
		open my $o, ">", $out or die; print $o encode_json($m);
	' "$src/META.json" "$work/$name.json"
	check "refused: $name" fails perl "$src/test/meta.pl" "$work/$name.json" "$src"
}
mutate "no license" 'delete $m->{license}'
mutate "unknown license" '$m->{license} = "gpl"'
mutate "version not semver" '$m->{version} = "0.3"'
mutate "version not the control file's" '$m->{version} = "9.9.9"'
mutate "provides without file" 'delete $m->{provides}{ratelimit}{file}'
mutate "provides file missing" '$m->{provides}{ratelimit}{file} = "sql/none.sql"'
mutate "provides version not semver" '$m->{provides}{ratelimit}{version} = "v1"'
mutate "unknown top-level key" '$m->{homepage} = "x"'
mutate "prereqs phase unknown" '$m->{prereqs}{install} = { requires => { PostgreSQL => "15.0.0" } }'
mutate "prereqs version range" '$m->{prereqs}{runtime}{requires}{PostgreSQL} = "15"'
mutate "meta-spec 2" '$m->{"meta-spec"}{version} = "2.0.0"'

# make dist, from a git checkout: ratelimit-X.Y.Z.zip, every entry under
# ratelimit-X.Y.Z/, the files of HEAD, and a META.json that validates
# against the archive's own files.
if [ "$(git -C "$src" rev-parse --show-toplevel 2>/dev/null)" = "$src" ]; then
	zip="$work/dist/ratelimit-$version.zip"
	mkdir "$work/dist"
	check "make dist writes ratelimit-$version.zip" \
		make -s -C "$src" dist DISTDIR="$work/dist"
	dist_files() {
		unzip -Z1 "$zip" | grep -v '/$' | sort >"$work/zip.list"
		git -C "$src" ls-tree -r --name-only HEAD | sed "s|^|ratelimit-$version/|" |
			sort >"$work/head.list"
		diff "$work/head.list" "$work/zip.list"
	}
	check "the archive holds HEAD's files under ratelimit-$version/" dist_files
	dist_meta() {
		unzip -q "$zip" -d "$work/x" &&
			perl "$src/test/meta.pl" "$work/x/ratelimit-$version/META.json"
	}
	check "the archive's META.json validates against its files" dist_meta
else
	echo "ok - make dist # SKIP not a git checkout"
fi

# Outside git, make dist refuses and writes nothing.
nogit() {
	mkdir "$work/nogit" "$work/nogit-out" &&
		cp "$src/Makefile" "$src/ratelimit.control" "$src/META.json" "$work/nogit/" &&
		! make -s -C "$work/nogit" dist DISTDIR="$work/nogit-out" 2>"$work/nogit.err" &&
		grep -q 'not a git checkout' "$work/nogit.err" &&
		[ -z "$(ls -A "$work/nogit-out")" ]
}
check "outside git, make dist refuses and writes nothing" nogit

echo "meta: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
