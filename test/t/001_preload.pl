# Without shared_preload_libraries every function fails with SQLSTATE 55000
# and a hint, never a silent allow; with it, the functions work.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('nopreload');
$node->init;
$node->start;
# CREATE EXTENSION succeeds, and says at once what is missing
my ($ret, $out, $err) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nCREATE EXTENSION ratelimit");
is($ret, 0, 'CREATE EXTENSION succeeds without preload');
like($err, qr/WARNING:\s+01000: ratelimit must be loaded via "shared_preload_libraries"/,
	'with a warning that the library is not preloaded');
like($err, qr/HINT:\s+Add ratelimit to shared_preload_libraries in postgresql.conf and restart the server\./,
	'whose hint says what to set');
is($node->safe_psql('postgres', "SELECT extversion FROM pg_extension WHERE extname = 'ratelimit'"),
	$node->safe_psql('postgres', "SELECT default_version FROM pg_available_extensions WHERE name = 'ratelimit'"),
	'the extension is installed');

foreach my $call (
	"SELECT rl_allow('k', 'token_bucket', 10)",
	"SELECT * FROM rl_check('k', 'fixed_window', 10)",
	"SELECT rl_reset('k')",
	"SELECT rl_reset_all()",
	"SELECT * FROM rl_store_info()")
{
	($ret, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\n$call");
	isnt($ret, 0, "fails without preload: $call");
	like($err, qr/ERROR:\s+55000: ratelimit must be loaded via "shared_preload_libraries"/,
		"SQLSTATE 55000: $call");
	like($err, qr/HINT:\s+Add ratelimit to shared_preload_libraries/,
		"hint says what to set: $call");
}

$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$node->restart;
is($node->safe_psql('postgres', "SELECT rl_allow('k', 'token_bucket', 10)"),
	't', 'works once preloaded');
$node->safe_psql('postgres', 'CREATE DATABASE preloaded');
($ret, $out, $err) = $node->psql('preloaded', 'CREATE EXTENSION ratelimit');
is($ret, 0, 'CREATE EXTENSION once preloaded');
is($err, '', 'without a warning');
is($node->safe_psql('postgres', "SHOW ratelimit.max_keys"),
	'100000', 'settings are defined');

# memory per key: the store's segment less the pool, over its capacity
my ($size, $per_key) = split /\|/, $node->safe_psql('postgres', q{
	SELECT a.size, round((a.size - s.pool_blocks * 68)::numeric / s.capacity, 1)
	FROM pg_shmem_allocations a, rl_store_info() s
	WHERE a.name = 'ratelimit store'});
note("ratelimit store: $size bytes, $per_key bytes per key");
cmp_ok($per_key, '<', 128, 'under 128 bytes per key, hash table included');

# the prefix is reserved: a typo in a setting is an error, not silence
($ret, $out, $err) = $node->psql('postgres', "SET ratelimit.fail_mod = 'open'");
isnt($ret, 0, 'unknown ratelimit.* setting is refused');

$node->stop;
done_testing();
