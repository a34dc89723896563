=pod

=head1 NAME

RlStateFile - a server whose saved state file (pg_stat/ratelimit.state)
tests forge, in the format docs/design.md describes

=head1 SYNOPSIS

  use RlStateFile;

  my $sf = RlStateFile->new('statefile', role => 'app',
      setup => 'CREATE ROLE app');
  my $node = $sf->node;
  my $offset = $sf->forge(
      $sf->entry(key => 'k', algo => 'fixed_window', last => $now,
                 idle_at => $now + 1, state => window_state(0, 3, 0)));
  ok($node->log_contains(qr/restored the state of 1 keys/, $offset));

=head1 DESCRIPTION

The server preloads ratelimit, runs in UTC, and has the extension and
whatever C<setup> creates.  Entries belong to its database and to the role
C<role> unless they say otherwise.  Everything is in this machine's byte
order, as the server writes it.

=cut

package RlStateFile;

use strict;
use warnings;

use Exporter 'import';
use Math::BigInt;
use PostgreSQL::Test::Cluster;
use RlHarness;

our @EXPORT = qw(window_state bucket_state log_state);
our @EXPORT_OK = qw(crc32c);

my %ALGO = (fixed_window => 0, sliding_window_log => 1,
	sliding_window_counter => 2, token_bucket => 3, leaky_bucket => 4);

=pod

=head2 RlStateFile->new($name, role => ..., setup => SQL, conf => TEXT)

A started server named $name (C<conf> added to its postgresql.conf), with
the extension created and C<setup> run in database postgres.

=cut

sub new
{
	my ($class, $name, %o) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
timezone = 'UTC'
} . ($o{conf} // ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit; ' . ($o{setup} // ''));
	my ($pg_version, $dbid, $roleid) = split /\|/, $node->safe_psql('postgres', qq{
		SELECT current_setting('server_version_num'),
			(SELECT oid FROM pg_database WHERE datname = current_database()),
			'$o{role}'::regrole::oid});
	return bless {
		node       => $node,
		path       => $node->data_dir . '/pg_stat/ratelimit.state',
		pg_version => $pg_version,
		dbid       => $dbid,
		roleid     => $roleid,
		written_by => undef,
	}, $class;
}

=pod

=head2 $sf->node, $sf->path, $sf->pg_version, $sf->dbid

The server, the state file's path, its server_version_num, the OID of
database postgres.

=cut

sub node       { return $_[0]{node}; }
sub path       { return $_[0]{path}; }
sub pg_version { return $_[0]{pg_version}; }
sub dbid       { return $_[0]{dbid}; }

=pod

=head2 $sf->written_by($server_version_num)

The release the next files claim to be written by (undef: the server's).

=cut

sub written_by { $_[0]{written_by} = $_[1]; return; }

my @crc_table = map {
	my $c = $_;
	$c = ($c & 1) ? (($c >> 1) ^ 0x82F63B78) : ($c >> 1) for 1 .. 8;
	$c;
} 0 .. 255;

# CRC-32C of a string of bytes (also for the durable file's tests)
sub crc32c
{
	my $crc = 0xFFFFFFFF;
	$crc = $crc_table[ ($crc ^ $_) & 0xFF ] ^ ($crc >> 8) for unpack 'C*', $_[0];
	return $crc ^ 0xFFFFFFFF;
}

=pod

=head2 $sf->entry(key, algo, last, idle_at, state, log, ...)

One saved entry: key, algorithm, times, 24 bytes of state, log entries
([time, cost], ...).  What the file claims may be forged apart: dbid,
algo_no (for algo), keylen, nlog, owner_db (the entry's dbid), owner_role.

=cut

sub entry
{
	my ($self, %e) = @_;
	my @log = @{ $e{log} // [] };
	my $dbid = $e{dbid} // $self->{dbid};
	return pack('L l l l L L q q',
		$dbid, $e{algo_no} // $ALGO{ $e{algo} },
		$e{keylen} // length($e{key}), $e{nlog} // scalar(@log),
		$e{owner_db} // $dbid, $e{owner_role} // $self->{roleid},
		$e{last}, $e{idle_at})
	  . $e{state} . $e{key} . join('', map { pack('q q', @$_) } @log);
}

=pod

=head2 window_state($start, $cur, $prev), bucket_state($scaled, $per), log_state($sum)

The 24 bytes of a window's, a bucket's (an int128 content, units times the
window, of any size and sign given as a decimal string or a number, and
its window) and a log's state.

=cut

sub window_state { return pack('q q q', @_); }

sub bucket_state
{
	my ($scaled, $per) = @_;
	my $v = Math::BigInt->new("$scaled");
	$v += Math::BigInt->new(2)**128 if $v < 0;    # two's complement
	my $hex = substr($v->as_hex, 2);
	return scalar(reverse(pack('H32', ('0' x (32 - length $hex)) . $hex)))
	  . pack('q', $per);
}

sub log_state { return pack('q', $_[0]) . ("\0" x 16); }

=pod

=head2 $sf->write_state(@entries)

Write the file: its header, the entries, the CRC-32C of the entries then
the header.

=cut

sub write_state
{
	my ($self, @entries) = @_;
	my $body = join '', @entries;
	my $header = pack('L L L L Q', 0x524C5354, 2,
		$self->{written_by} // $self->{pg_version}, 0, scalar @entries);
	open my $fh, '>', $self->{path} or die "$self->{path}: $!";
	binmode $fh;
	print $fh $header . $body . pack('L', crc32c($body . $header));
	close $fh;
	return;
}

=pod

=head2 $sf->forge(@entries)

Restart the server with a file of these entries; returns the offset of its
log before the start (for log_contains).

=cut

sub forge
{
	my ($self, @entries) = @_;
	$self->{node}->stop;
	$self->write_state(@entries);
	my $offset = -s $self->{node}->logfile;
	$self->{node}->start;
	return $offset;
}

1;
