#!/usr/bin/perl
# Validate a META.json against the PGXN Meta Spec 1.0.0
# (https://pgxn.org/meta/spec.txt), since the PGXN client and its validator
# are not packaged here, plus what this repository adds: the versions that
# state the release (META.json's, each provided extension's, the control
# file's default_version and debian/changelog's) agree, and the files named
# exist.
#
#   perl test/meta.pl [META.json [ROOT]]
#
# ROOT (default: the folder of META.json) is where the paths it names are
# looked for: the repository, or an extracted release archive.  Prints
# "META.json: OK" and exits 0, or prints one line per problem and exits 1.
use strict;
use warnings;

use File::Basename qw(dirname);
use JSON::PP;

my $file = $ARGV[0] // 'META.json';
my $root = $ARGV[1] // dirname($file);
my @problems;

sub problem { push @problems, join('', @_); return; }

# SemVer 2.0.0, as the spec's "Version" requires
my $num = qr/(?:0|[1-9][0-9]*)/;
my $ident = qr/(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)/;
my $semver =
  qr/$num\.$num\.$num(?:-$ident(?:\.$ident)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?/;

my %licenses = map { $_ => 1 } qw(agpl_3 apache_1_1 apache_2_0 artistic_1
  artistic_2 bsd freebsd gfdl_1_2 gfdl_1_3 gpl_1 gpl_2 gpl_3 lgpl_2_1
  lgpl_3_0 mit mozilla_1_0 mozilla_1_1 openssl perl_5 postgresql qpl_1_0
  ssleay sun zlib open_source restricted unrestricted unknown);

sub is_map { return ref $_[0] eq 'HASH'; }
sub is_string { return defined $_[0] && !ref $_[0]; }
sub custom_key { return $_[0] =~ /^[xX]_./; }

# A Term: two characters or more, no slash, backslash, space or control.
sub check_term
{
	my ($what, $v) = @_;
	problem("$what must be a term (2+ characters, no /, \\, space or control character)")
	  unless is_string($v) && $v =~ m{^[^/\\\s[:cntrl:]]{2,}$};
	return;
}

sub check_version
{
	my ($what, $v) = @_;
	problem("$what \"", $v // 'null', "\" is not a semantic version (X.Y.Z)")
	  unless is_string($v) && $v =~ /^$semver$/;
	return;
}

# A Path: relative, with Unix separators, naming a file under $root.
sub check_path
{
	my ($what, $v) = @_;
	if (!is_string($v) || length($v) < 2)
	{
		problem("$what must be a path of 2 characters or more");
	}
	elsif ($v =~ m{^/|\\|(^|/)\.\.(/|$)})
	{
		problem("$what \"$v\" must be relative, below the root, with / separators");
	}
	elsif (!-f "$root/$v")
	{
		problem("$what \"$v\" does not exist");
	}
	return;
}

sub check_keys
{
	my ($what, $map, @allowed) = @_;
	my %ok = map { $_ => 1 } @allowed;
	foreach my $k (sort keys %$map)
	{
		problem("$what has an unknown key \"$k\"") unless $ok{$k} || custom_key($k);
	}
	return;
}

# default_version of NAME.control under $root, or undef
sub control_version
{
	my ($name) = @_;
	open my $fh, '<', "$root/$name.control" or return undef;
	while (<$fh>)
	{
		return $1 if /^\s*default_version\s*=\s*'([^']*)'/;
	}
	return undef;
}

open my $fh, '<:raw', $file or die "$file: $!\n";
my $text = do { local $/; <$fh> };
close $fh;
my $meta = eval { JSON::PP->new->utf8->decode($text) };
if (!is_map($meta))
{
	print "$file: not a JSON object", ($@ ? ": $@" : "\n");
	exit 1;
}

foreach my $k (qw(name version abstract maintainer license provides meta-spec))
{
	problem("the required key \"$k\" is missing") unless exists $meta->{$k};
}
check_keys('the top level', $meta,
	qw(name version abstract maintainer license provides meta-spec
	  description generated_by tags no_index prereqs release_status resources));

check_term('name', $meta->{name}) if exists $meta->{name};
check_version('version', $meta->{version}) if exists $meta->{version};
foreach my $k (qw(abstract description generated_by))
{
	next unless exists $meta->{$k};
	problem("$k must be a non-empty string")
	  unless is_string($meta->{$k}) && length $meta->{$k};
}

if (exists $meta->{maintainer})
{
	my $m = $meta->{maintainer};
	my @list = ref $m eq 'ARRAY' ? @$m : ($m);
	problem('maintainer must be a non-empty string or list of them')
	  if !@list || grep { !is_string($_) || !length $_ } @list;
}

if (exists $meta->{license})
{
	my $l = $meta->{license};
	if (is_map($l))
	{
		problem('license must name one license or more') unless %$l;
		foreach my $name (sort keys %$l)
		{
			problem("license \"$name\" must map to the URL of its text")
			  unless is_string($l->{$name}) && $l->{$name} =~ m{^https?://\S+$};
		}
	}
	else
	{
		my @list = ref $l eq 'ARRAY' ? @$l : ($l);
		problem('license must not be an empty list') unless @list;
		foreach my $name (@list)
		{
			problem('license "', $name // 'null', '" is not one the spec knows')
			  unless is_string($name) && $licenses{$name};
		}
	}
}

if (exists $meta->{'meta-spec'})
{
	my $ms = $meta->{'meta-spec'};
	if (!is_map($ms))
	{
		problem('meta-spec must be an object');
	}
	else
	{
		check_keys('meta-spec', $ms, qw(version url));
		problem('meta-spec.version must be 1.0.x')
		  unless is_string($ms->{version}) && $ms->{version} =~ /^1\.0\.[0-9]+$/;
		problem('meta-spec.url must be https://pgxn.org/meta/spec.txt')
		  if exists $ms->{url}
		  && !(is_string($ms->{url}) && $ms->{url} =~ m{^https?://pgxn\.org/meta/spec\.txt$});
	}
}

if (exists $meta->{provides})
{
	my $p = $meta->{provides};
	if (!is_map($p) || !%$p)
	{
		problem('provides must be an object naming one extension or more');
	}
	else
	{
		foreach my $ext (sort keys %$p)
		{
			my $e = $p->{$ext};
			check_term("provides key \"$ext\"", $ext);
			if (!is_map($e))
			{
				problem("provides.$ext must be an object");
				next;
			}
			check_keys("provides.$ext", $e, qw(file version abstract docfile));
			problem("provides.$ext.file is missing") unless exists $e->{file};
			problem("provides.$ext.version is missing") unless exists $e->{version};
			check_path("provides.$ext.file", $e->{file}) if exists $e->{file};
			check_path("provides.$ext.docfile", $e->{docfile}) if exists $e->{docfile};
			check_version("provides.$ext.version", $e->{version}) if exists $e->{version};
			problem("provides.$ext.abstract must be a non-empty string")
			  if exists $e->{abstract} && !(is_string($e->{abstract}) && length $e->{abstract});

			# the extension's control file states the version it installs
			my $default = control_version($ext);
			if (!defined $default)
			{
				problem("$ext.control (with a default_version) does not exist");
			}
			elsif (is_string($e->{version}) && $e->{version} ne $default)
			{
				problem("provides.$ext.version \"$e->{version}\" differs from ",
					"default_version \"$default\" in $ext.control");
			}
		}
	}
}

if (exists $meta->{prereqs})
{
	my $pr = $meta->{prereqs};
	my $range_one = qr/(?:(?:[=!]=|[<>]=?)\s*)?$semver/;
	if (!is_map($pr) || !%$pr)
	{
		problem('prereqs must be a non-empty object');
	}
	else
	{
		check_keys('prereqs', $pr, qw(configure build test runtime develop));
		foreach my $phase (sort grep { !custom_key($_) } keys %$pr)
		{
			my $ph = $pr->{$phase};
			if (!is_map($ph) || !%$ph)
			{
				problem("prereqs.$phase must be a non-empty object");
				next;
			}
			check_keys("prereqs.$phase", $ph, qw(requires recommends suggests conflicts));
			foreach my $rel (sort grep { !custom_key($_) } keys %$ph)
			{
				my $r = $ph->{$rel};
				if (!is_map($r) || !%$r)
				{
					problem("prereqs.$phase.$rel must map names to versions");
					next;
				}
				foreach my $name (sort keys %$r)
				{
					my $v = $r->{$name};
					check_term("prereqs.$phase.$rel key \"$name\"", $name);
					problem("prereqs.$phase.$rel.$name \"", $v // 'null',
						'" is not 0 or a version range')
					  unless defined $v
					  && !ref $v
					  && ($v =~ /^0$/ || $v =~ /^$range_one(?:,\s*$range_one)*$/);
				}
			}
		}
	}
}

if (exists $meta->{tags})
{
	my $t = $meta->{tags};
	if (ref $t ne 'ARRAY' || !@$t)
	{
		problem('tags must be a non-empty list');
	}
	else
	{
		foreach my $tag (@$t)
		{
			problem('tag "', $tag // 'null', '" must be 2 to 255 characters without /, \\ or control characters')
			  unless is_string($tag) && $tag =~ m{^[^/\\[:cntrl:]]{2,255}$};
		}
	}
}

problem('release_status must be stable, testing or unstable')
  if exists $meta->{release_status}
  && !(is_string($meta->{release_status})
	&& $meta->{release_status} =~ /^(stable|testing|unstable)$/);
foreach my $k (qw(no_index resources))
{
	problem("$k must be an object") if exists $meta->{$k} && !is_map($meta->{$k});
}

# The release is stated in several places; they must agree.
if (is_string($meta->{name}) && is_string($meta->{version}))
{
	my $default = control_version($meta->{name});
	problem("version \"$meta->{version}\" differs from default_version ",
		"\"$default\" in $meta->{name}.control")
	  if defined $default && $default ne $meta->{version};
	if (open my $cl, '<', "$root/debian/changelog")
	{
		my ($deb) = (<$cl> // '') =~ /^\S+ \(([^)]*)\)/;
		problem("version \"$meta->{version}\" differs from debian/changelog's \"",
			$deb // '?', '"')
		  unless defined $deb && $deb eq $meta->{version};
	}
}

if (@problems)
{
	print "$file: $_\n" foreach @problems;
	exit 1;
}
print "$file: OK\n";
exit 0;
