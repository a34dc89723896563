#!/usr/bin/perl
#
# lua_embed.pl: the Redis scripts of src/lua/*.lua as C strings, for the
# Makefile.  With -h it writes the header (declarations), otherwise the
# definitions: const char rl_lua_<file name>[] = "<the file's text>".
#
#   perl src/lua_embed.pl [-h] src/lua/*.lua > out
#
use strict;
use warnings;

my $header = @ARGV && $ARGV[0] eq '-h' ? shift @ARGV : undef;

print "/* generated from the files of src/lua by src/lua_embed.pl: do not edit */\n";
for my $file (@ARGV)
{
	my ($name) = $file =~ m{([^/]+)\.lua$}
	  or die "lua_embed.pl: $file is not a .lua file\n";
	$name =~ /^[a-z_][a-z0-9_]*$/
	  or die "lua_embed.pl: $name is not a C identifier\n";
	if ($header)
	{
		print "extern const char rl_lua_$name\[\];\n";
		next;
	}
	open my $in, '<', $file or die "lua_embed.pl: cannot read $file: $!\n";
	print "\nconst char rl_lua_$name\[\] =";
	my $lines = 0;
	while (my $line = <$in>)
	{
		$line =~ s/\\/\\\\/g;
		$line =~ s/"/\\"/g;
		$line =~ s/\?/\\?/g;	# no trigraphs
		$line =~ s/\t/\\t/g;
		$line =~ s/\n/\\n/;
		$line =~ /^[\x20-\x7e]*$/
		  or die "lua_embed.pl: $file has a byte that is not printable ASCII\n";
		print "\n\t\"$line\"";
		$lines++;
	}
	print "\n\t\"\"" if $lines == 0;
	print ";\n";
	close $in;
}
