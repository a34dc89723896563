#!/usr/bin/perl
# docs/guide.md and the tests that run its examples must not drift apart.
# Every ```sql block of the guide must appear verbatim, as whole lines, in
# test/sql/guide.sql (the regression suite) or in test/t/077_guide.pl (the
# examples that need a Redis server), and every ```conf block (settings) in
# the latter, which applies them.  In each file the examples come in the
# guide's order, and the nearest comment "-- guide: SECTION" (SQL) or
# "# guide: SECTION" (Perl) above an example names the heading of the
# guide's section it is in.  Every such comment names a heading of the
# guide.  Fenced blocks without a language are output, not examples.
#
#   perl test/guide_check.pl     # from anywhere; exits 1 on a difference
#
# test/sql/guide.sql runs it and shows its one line of output, so the
# regression suite fails when the guide and its tests differ.

use strict;
use warnings;

use FindBin;

my $root = "$FindBin::RealBin/..";
my $guide_path = 'docs/guide.md';
my @tests = ('test/sql/guide.sql', 'test/t/077_guide.pl');
my %where = (sql => [@tests], conf => [ $tests[1] ]);

sub slurp
{
	my ($path) = @_;
	open my $fh, '<', "$root/$path" or die "cannot read $path: $!\n";
	local $/;
	return scalar <$fh>;
}

# the guide's examples: language, text (lines without their last newline),
# section heading, line number
my (@examples, %headings, @problems);
{
	my ($section, $lang, @lines, $start) = ('(before the first heading)');
	my $n = 0;
	for my $line (split /\n/, slurp($guide_path), -1)
	{
		$n++;
		if (defined $lang)
		{
			if ($line =~ /^```\s*$/)
			{
				push @examples, { lang => $lang, text => join("\n", @lines),
					section => $section, line => $start }
				  if $lang ne '';
				undef $lang;
			}
			else
			{
				push @lines, $line;
			}
		}
		elsif ($line =~ /^```(\S*)\s*$/)
		{
			($lang, $start, @lines) = ($1, $n);
			push @problems, "$guide_path:$n: a ```$lang block: "
			  . "examples are ```sql or ```conf, output has no language"
			  if $lang ne '' && !$where{$lang};
			$lang = '' unless $where{$lang};
		}
		elsif ($line =~ /^#{1,6}\s+(.*?)\s*$/)
		{
			$section = $1;
			$headings{$section} = 1;
		}
	}
	push @problems, "$guide_path: a code block is not closed" if defined $lang;
}

# Where $text starts in $file at or after $from, as whole lines; -1 if not.
sub find_lines
{
	my ($file, $text, $from) = @_;
	for (my $at = index($file, $text, $from); $at >= 0;
		$at = index($file, $text, $at + 1))
	{
		my $after = substr($file, $at + length($text), 1);
		return $at
		  if ($at == 0 || substr($file, $at - 1, 1) eq "\n")
		  && ($after eq '' || $after eq "\n");
	}
	return -1;
}

my %file = map { $_ => slurp($_) } @tests;
my %cursor = map { $_ => 0 } @tests;
for my $test (@tests)
{
	while ($file{$test} =~ /^\s*(?:--|#) guide: (.*?)\s*$/mg)
	{
		push @problems, "$test: \"guide: $1\" names no heading of $guide_path"
		  unless $headings{$1};
	}
}
for my $ex (@examples)
{
	my $found = 0;
	my $what = "the ```$ex->{lang} block at $guide_path:$ex->{line}"
	  . " (section \"$ex->{section}\")";
	for my $test (@{ $where{ $ex->{lang} } })
	{
		my $at = find_lines($file{$test}, $ex->{text}, $cursor{$test});
		if ($at < 0)
		{
			next if find_lines($file{$test}, $ex->{text}, 0) < 0;
			push @problems, "$what comes before the previous example in $test";
			$found = 1;
			next;
		}
		$found = 1;
		$cursor{$test} = $at + length($ex->{text});
		my @marks = substr($file{$test}, 0, $at) =~ /^\s*(?:--|#) guide: (.*?)\s*$/mg;
		my $mark = $marks[-1] // '(none)';
		push @problems, "$what is under \"guide: $mark\" in $test"
		  if $mark ne $ex->{section};
	}
	push @problems, "$what is in none of: @{ $where{ $ex->{lang} } }"
	  unless $found;
}

if (@problems)
{
	print join("\n", @problems), "\n";
	exit 1;
}
print "every example of $guide_path runs, in order, under its section\n";
exit 0;
