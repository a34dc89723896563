# Keys and policy names written in databases of other encodings (UTF8,
# LATIN1, SQL_ASCII, and a dropped database) come back from rl_keys(true)
# and rl_stats(true) as text valid in the reader's encoding: converted
# where the reader's encoding can represent them, NULL where not; the bytes
# as stored are in key_bytes and policy_bytes.  A table made from the
# listing dumps and restores.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('keys_encodings');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$node->start;

# database => [encoding, policy name, direct key, key under the policy],
# the names and keys as bytes (hex) in the database's encoding
my %written = (
	u8 => [ 'UTF8', '70c3a9e282ac', '64c3a9e282ac', '6bc3a9' ],    # "pé€", "dé€", "ké"
	l1 => [ 'LATIN1', '70e9', '64e9', '6bff' ],    # "pé", "dé", "kÿ"
	sa => [ 'SQL_ASCII', '70ff', '64c3a9', '6bff' ],    # bytes, one valid UTF8
	gone => [ 'LATIN1', undef, '67e9', undef ],    # "gé", then dropped
);
foreach my $db (sort keys %written)
{
	my ($encoding, $policy, $direct, $key) = @{ $written{$db} };
	$node->safe_psql('postgres', qq{
		CREATE DATABASE $db TEMPLATE template0 ENCODING '$encoding'
		LC_COLLATE 'C' LC_CTYPE 'C'});
	$node->safe_psql($db, 'CREATE EXTENSION ratelimit');
	my $text = sub { "convert_from('\\x$_[0]'::bytea, getdatabaseencoding())" };
	$node->safe_psql($db, 'SELECT rl_allow(' . $text->($direct) . ", 'fixed_window', 10, '1 hour')");
	next unless defined $policy;
	$node->safe_psql($db, 'INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('
		  . $text->($policy) . ", 'fixed_window', 10, '1 hour')");
	$node->safe_psql($db, 'SELECT rl_allow(' . $text->($key) . ', ' . $text->($policy) . ')');
}
$node->safe_psql('postgres', 'DROP DATABASE gone');

# What each reader gets: database, key_bytes, key as bytes in the reader's
# encoding, policy_bytes, policy likewise ('-' and NULL: a direct call).
my %expected = (
	u8 => [
		'gone 67e9 NULL - NULL',    # encoding unknown, not valid UTF8
		'l1 64e9 64c3a9 - NULL',    # converted
		'l1 6bff 6bc3bf 70e9 70c3a9',
		'sa 64c3a9 64c3a9 - NULL',    # valid UTF8: as is
		'sa 6bff NULL 70ff NULL',     # not valid UTF8
		'u8 64c3a9e282ac 64c3a9e282ac - NULL',
		'u8 6bc3a9 6bc3a9 70c3a9e282ac 70c3a9e282ac',
	],
	l1 => [
		'gone 67e9 67e9 - NULL',
		'l1 64e9 64e9 - NULL',
		'l1 6bff 6bff 70e9 70e9',
		'sa 64c3a9 64c3a9 - NULL',
		'sa 6bff 6bff 70ff 70ff',
		'u8 64c3a9e282ac NULL - NULL',    # no euro sign in LATIN1
		'u8 6bc3a9 6be9 70c3a9e282ac NULL',
	],
	sa => [    # SQL_ASCII takes every byte as it is
		'gone 67e9 67e9 - NULL',
		'l1 64e9 64e9 - NULL',
		'l1 6bff 6bff 70e9 70e9',
		'sa 64c3a9 64c3a9 - NULL',
		'sa 6bff 6bff 70ff 70ff',
		'u8 64c3a9e282ac 64c3a9e282ac - NULL',
		'u8 6bc3a9 6bc3a9 70c3a9e282ac 70c3a9e282ac',
	],
);
# convert_to checks that its argument is valid in the database's encoding
my $listing = q{
	SELECT coalesce(d.datname, 'gone') || ' ' || encode(k.key_bytes, 'hex') || ' ' ||
		   coalesce(encode(convert_to(k.key, getdatabaseencoding()), 'hex'), 'NULL') || ' ' ||
		   coalesce(encode(k.policy_bytes, 'hex'), '-') || ' ' ||
		   coalesce(encode(convert_to(k.policy, getdatabaseencoding()), 'hex'), 'NULL')
	FROM rl_keys(true) k LEFT JOIN pg_database d ON d.oid = k.dbid};
my $stats = q{
	SELECT coalesce(encode(convert_to(policy, getdatabaseencoding()), 'hex'), 'NULL')
	FROM rl_stats(true) WHERE algo IS NOT NULL};
# sorted; the NULLs are the four direct-call rows and a name not
# representable here
my %stats_expected = (
	u8 => '70c3a9 70c3a9e282ac NULL NULL NULL NULL NULL',
	l1 => '70e9 70ff NULL NULL NULL NULL NULL',
	sa => '70c3a9e282ac 70e9 70ff NULL NULL NULL NULL',
);
foreach my $reader ('u8', 'l1', 'sa')
{
	my ($ret, $out, $err) = $node->psql($reader, $listing);
	is($err, '', "$reader: every key and policy from rl_keys(true) is valid text here");
	is_deeply([ sort split /\n/, $out ], $expected{$reader},
		"$reader: converted where possible, NULL elsewhere, the bytes as stored");
	($ret, $out, $err) = $node->psql($reader, $stats);
	is($err, '', "$reader: every policy from rl_stats(true) is valid text here");
	is(join(' ', sort split /\n/, $out), $stats_expected{$reader},
		"$reader: rl_stats converts policy names the same way");
}

# the listing, kept in a table, dumps and restores
$node->safe_psql('u8',
	'CREATE TABLE snap AS SELECT dbid, algo, policy, key, key_bytes FROM rl_keys(true)');
$node->safe_psql('postgres',
	"CREATE DATABASE u8copy TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'");
my $dump = $node->basedir . '/snap.sql';
command_ok([ 'pg_dump', '-d', $node->connstr('u8'), '-t', 'snap', '-f', $dump ],
	'the table dumps');
command_ok(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('u8copy'), '-f', $dump ],
	'and restores');
is($node->safe_psql('u8copy', 'SELECT count(*), count(key) FROM snap'), '7|5',
	'every row, and the keys that could be represented');

$node->stop;
done_testing();
