#!/usr/bin/env bash
# The source's structure (docs/design.md, "The picture"): no file of src/
# longer than 800 lines, no cycle between files, neither through #include
# nor through calls (or uses of a variable), and src/typedefs.list (the
# typedef names pgindent needs besides PostgreSQL's) naming exactly the
# typedefs of src/; and every TAP test loading RlHarness.  Prints the
# dependencies between files, the longest files, and a closing line
# "structure: N passed, M failed" (test/run.sh counts it).
#
#   bash test/structure.sh [TREE]
#
# TREE (default: this checkout) must have been built: the calls are read
# from its object files (nm: each symbol a file uses that another file
# defines is a dependency on that file).  Includes are read from the
# sources.  A header belongs to the .c file of its name (store.h to
# store.c); a header without one (an interface such as engine.h and algo.h,
# a family's internal header such as store_int.h, compat.h) is not a file
# of its own here: what it includes counts for every file that includes
# it.  Generated files (src/lua_scripts.*) and the tables' rows of
# functions count like any other file.
set -euo pipefail

tree=$(cd "${1:-$(dirname "$0")/..}" && pwd)
max_lines=${RL_MAX_LINES:-800}

objs=$(ls "$tree"/src/*.o 2>/dev/null || true)
if [ -z "$objs" ]; then
	echo "structure: no object files in $tree/src: build the tree first" >&2
	exit 1
fi

perl - "$tree" "$max_lines" <<'EOF'
use strict;
use warnings;

my ($tree, $max_lines) = @ARGV;
my $src = "$tree/src";
my ($passed, $failed) = (0, 0);

sub check
{
	my ($ok, $what) = @_;
	if ($ok) { $passed++; print "ok - $what\n"; }
	else { $failed++; print "not ok - $what\n"; }
}

# ---- sizes ----
my @files = grep { !/lua_scripts\.[ch]$/ } (glob("$src/*.[ch]"), glob("$src/lua/*.lua"),
	glob("$src/*.pl"));
my %lines;
for my $f (@files)
{
	open my $fh, '<', $f or die "$f: $!";
	my $n = 0;
	$n++ while <$fh>;
	(my $name = $f) =~ s{^\Q$src\E/}{};
	$lines{$name} = $n;
}
my @longest = sort { $lines{$b} <=> $lines{$a} } keys %lines;
print "== longest files\n";
printf "  %5d  %s\n", $lines{$_}, $_ for @longest[0 .. 4];
my @over = grep { $lines{$_} > $max_lines } @longest;
check(!@over, "no file of src/ above $max_lines lines"
	  . (@over ? ": " . join(', ', map { "$_ ($lines{$_})" } @over) : ''));

# ---- the TAP tests ----
# Each loads RlHarness, which makes the harnesses of every supported
# PostgreSQL behave alike (a test without it passes on 17 and fails on
# 16.2, whose BackgroundPsql keeps a query's trailing newline).
my @bare;
for my $t (glob("$tree/test/t/*.pl"))
{
	open my $fh, '<', $t or die "$t: $!";
	my $text = do { local $/; <$fh> };
	(my $name = $t) =~ s{^.*/}{};
	push @bare, $name unless $text =~ /^use RlHarness;$/m;
}
check(!@bare, 'every TAP test loads RlHarness'
	  . (@bare ? ': not ' . join(', ', @bare) : ''));

# ---- the files and their dependencies ----
my %module;		# a .c file's name without .c
for my $c (glob("$src/*.c"))
{
	(my $m = $c) =~ s{^.*/|\.c$}{}g;
	$module{$m} = 1;
}

# the headers each file or header includes directly ("..." only: ours)
my %includes;
for my $f (glob("$src/*.[ch]"))
{
	(my $name = $f) =~ s{^.*/}{};
	open my $fh, '<', $f or die "$f: $!";
	while (<$fh>)
	{
		push @{ $includes{$name} }, $1 if /^\s*#\s*include\s+"([^"]+)"/;
	}
}

# the files a file depends on through its includes: a header of a file
# (X.h with X.c) is that file; another header is followed
my %deps;
sub include_deps
{
	my ($from, $header, $seen) = @_;
	return if $seen->{$header}++;
	(my $m = $header) =~ s/\.h$//;
	if ($module{$m})
	{
		$deps{$from}{$m}{include} = 1 if $m ne $from;
		return;
	}
	include_deps($from, $_, $seen) for @{ $includes{$header} // [] };
}
for my $m (keys %module)
{
	my %seen;
	include_deps($m, $_, \%seen) for @{ $includes{"$m.c"} // [] };
}

# calls and uses of variables: what a file's object uses that another's
# defines
my (%defines, %uses);
for my $m (keys %module)
{
	my $o = "$src/$m.o";
	next unless -f $o;
	for (`nm -g --defined-only "$o"`)
	{
		$defines{$1} = $m if /\s[TDBRCV]\s+(\S+)$/;
	}
	for (`nm -u "$o"`)
	{
		push @{ $uses{$m} }, $1 if /\sU\s+(\S+)$/;
	}
}
my $calls = 0;
for my $m (keys %uses)
{
	for my $sym (@{ $uses{$m} })
	{
		my $d = $defines{$sym};
		next unless defined $d && $d ne $m;
		$deps{$m}{$d}{call}++ or $calls++;
	}
}

print "== dependencies (file: files it includes or calls)\n";
my $edges = 0;
for my $m (sort keys %module)
{
	my @to = sort keys %{ $deps{$m} // {} };
	$edges += @to;
	printf "  %-18s %s\n", "$m:", join(' ', @to);
}
print "  ($edges dependencies between " . scalar(keys %module)
  . " files, $calls of them through calls)\n";

# ---- cycles: strongly connected components (Tarjan) ----
my ($index, @stack, %idx, %low, %on, @cycles) = (0);
sub strong
{
	my ($v) = @_;
	$idx{$v} = $low{$v} = $index++;
	push @stack, $v;
	$on{$v} = 1;
	for my $w (sort keys %{ $deps{$v} // {} })
	{
		if (!defined $idx{$w})
		{
			strong($w);
			$low{$v} = $low{$w} if $low{$w} < $low{$v};
		}
		elsif ($on{$w})
		{
			$low{$v} = $idx{$w} if $idx{$w} < $low{$v};
		}
	}
	if ($low{$v} == $idx{$v})
	{
		my @c;
		my $w;
		do { $w = pop @stack; $on{$w} = 0; push @c, $w; } while ($w ne $v);
		push @cycles, [ sort @c ] if @c > 1;
	}
}
strong($_) for grep { !defined $idx{$_} } sort keys %module;
for my $c (@cycles)
{
	print "  cycle: " . join(' <-> ', @$c) . "\n";
	for my $a (@$c)
	{
		for my $b (@$c)
		{
			next unless $deps{$a}{$b};
			printf "    %s -> %s (%s)\n", $a, $b, join(', ', sort keys %{ $deps{$a}{$b} });
		}
	}
}
check(!@cycles, 'no cycle of includes or calls between files');

# ---- the typedefs list ----
my %typedefs;
for my $f (grep { !/lua_scripts\.[ch]$/ } glob("$src/*.[ch]"))
{
	open my $fh, '<', $f or die "$f: $!";
	local $/;
	my $text = <$fh>;
	$text =~ s{/\*.*?\*/}{}gs;
	while ($text =~ /\btypedef\b/g)
	{
		my $rest = substr($text, pos($text));
		if ($rest =~ /^\s*(?:struct|union|enum)\s*\w*\s*\{/)
		{
			# the name follows the braces
			my ($depth, $j) = (0, index($rest, '{'));
			for (; $j < length $rest; $j++)
			{
				my $c = substr($rest, $j, 1);
				$depth++ if $c eq '{';
				last if $c eq '}' && --$depth == 0;
			}
			$typedefs{$1} = 1 if substr($rest, $j + 1) =~ /^\s*(\w+)\s*;/;
		}
		elsif ($rest =~ /^[^;]*?\(\s*\*\s*(\w+)\s*\)/s)
		{
			$typedefs{$1} = 1;	# a pointer to a function
		}
		elsif ($rest =~ /^[^;]*?(\w+)\s*;/s)
		{
			$typedefs{$1} = 1;
		}
	}
}
my %listed;
if (open my $fh, '<', "$src/typedefs.list")
{
	chomp(my @l = <$fh>);
	%listed = map { $_ => 1 } grep { /\S/ } @l;
}
my @missing = grep { !$listed{$_} } sort keys %typedefs;
my @stale = grep { !$typedefs{$_} } sort keys %listed;
check(!@missing && !@stale,
	'src/typedefs.list names every typedef of src/ and nothing else'
	  . (@missing ? '; missing: ' . join(' ', @missing) : '')
	  . (@stale ? '; not in src/: ' . join(' ', @stale) : ''));

print "structure: $passed passed, $failed failed\n";
exit($failed ? 1 : 0);
EOF
