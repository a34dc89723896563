# The durable file (pg_stat/ratelimit.durable), read back at start (#10):
# an image no call could have made (a bucket with a window of 0, a time
# past the accepted range, an algorithm this build does not have, a
# sliding log whose entries run backwards), under a header and a CRC that
# match, makes the whole file ignored with a WARNING saying why, as a file
# failing its CRC is; the untouched file is loaded.  The checks are the
# state file's (each algorithm's image_valid).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use RlStateFile qw(crc32c);

my $node = PostgreSQL::Test::Cluster->new('durable_file');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.durable = on
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policy (name, algo, "limit", per, durable)
	VALUES ('uploads', 'token_bucket', 1000, '1 day', true),
		   ('calls', 'sliding_window_log', 1000, '1 day', true);
});
$node->poll_query_until('postgres',
	'SELECT durable_ready FROM rl_durable_info()')
  or die 'durable keys never became ready';

my $used_sql = q{
	SELECT (1000 - (rl_check('t1', 'uploads', cost => 0)).remaining) || ' ' ||
		   (1000 - (rl_check('t1', 'calls', cost => 0)).remaining)};
$node->safe_psql('postgres', q{
	SELECT rl_allow('t1', 'uploads', cost => 3);
	SELECT rl_allow('t1', 'calls', cost => 2);
	SELECT rl_allow('t1', 'calls', cost => 1);
});
is($node->safe_psql('postgres', $used_sql), '3 3', 'used before the stop');
$node->stop;

my $file = $node->data_dir . '/pg_stat/ratelimit.durable';
open my $fh, '<:raw', $file or die "$file: $!";
my $orig = do { local $/; <$fh> };
close $fh;

# The layout (docs/design.md): a 32-byte header (magic, format, system
# identifier, end, count), images of 56 bytes (dbid, owner's database and
# role, key length, algorithm, format, last, idle_at, 24 bytes of state)
# each followed by its key and a log's entries (16 bytes each), a CRC-32C
# of the images then of the header.
my ($count) = unpack 'Q', substr($orig, 24, 8);
is($count, 2, 'the durable file holds both keys');
my @images;
my $p = 32;
for (1 .. $count)
{
	my ($keylen, $algo) = unpack 'S C', substr($orig, $p + 12, 3);
	my $nlog = $algo == 1 ? unpack('L', substr($orig, $p + 32 + 20, 4)) : 0;
	push @images, { at => $p, algo => $algo, nlog => $nlog };
	$p += 56 + $keylen + 16 * $nlog;
}
my ($bucket) = grep { $_->{algo} == 3 } @images;
my ($log) = grep { $_->{algo} == 1 } @images;
is($log->{nlog}, 2, 'the log image holds its two entries');

# Write the file with one change, its CRC made again; start and read the
# log from the start on.
sub forge_and_start
{
	my ($offset, $bytes) = @_;
	my $data = $orig;
	substr($data, $offset, length $bytes) = $bytes;
	my $header = substr($data, 0, 32);
	my $body = substr($data, 32, length($data) - 36);
	open my $out, '>:raw', $file or die "$file: $!";
	print $out $header . $body . pack('L', crc32c($body . $header));
	close $out;
	my $log_at = -s $node->logfile;
	$node->start;
	return $log_at;
}

my @cases = (
	[ 'a token bucket with a window of 0', $bucket->{at} + 32 + 16,
		pack('q', 0) ],
	[ 'a time past the accepted range', $bucket->{at} + 16,
		pack('q', 1 << 62) ],
	[ 'an algorithm this build does not have', $bucket->{at} + 14,
		pack('C', 77) ],
	[ 'a sliding log whose entries run backwards',
		$log->{at} + 56 + 2 + 16, pack('q', -1 << 40) ],
);
for my $case (@cases)
{
	my ($what, $offset, $bytes) = @$case;
	my $log_at = forge_and_start($offset, $bytes);
	ok( $node->log_contains(
			qr/WARNING:\s+ignoring file "pg_stat\/ratelimit\.durable"\n.*DETAIL:\s+An image holds a state, times or an algorithm no call could have made/,
			$log_at),
		"$what: the file is ignored, and the WARNING says why");
	ok(!$node->log_contains(qr/ratelimit loaded \d+ durable keys/, $log_at),
		"$what: nothing is loaded from it");
	$node->stop('immediate');
}

# the untouched file: loaded, and the usage is back
my $log_at = forge_and_start(0, '');
ok($node->log_contains(qr/ratelimit loaded 2 durable keys/, $log_at),
	'the untouched file is loaded');
is($node->safe_psql('postgres', $used_sql), '3 3', 'and the usage is back');

$node->stop;
done_testing();
