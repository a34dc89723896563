# Durable keys under store pressure (#10): live ordinary keys cannot crowd
# durable ones out (ratelimit.durable_reserve keeps part of each partition's
# entries and of the pool for them), and WAL replay on a standby whose own
# ordinary calls filled its store (entries and pool) evicts ordinary keys
# rather than stop.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

# one partition of 256 entries, a pool of 963 blocks; one role fills it
# (no share caps here, 026 tests those)
my $primary = PostgreSQL::Test::Cluster->new('room');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.durable = on
ratelimit.max_keys = 256
ratelimit.pool_size = 64
ratelimit.role_share = 100
ratelimit.database_share = 100
});
$primary->start;
$primary->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policy (name, algo, "limit", per, durable)
	VALUES ('q', 'fixed_window', 10, '1 day', true),
		   ('qlog', 'sliding_window_log', 1000, '1 day', true);
});
$primary->poll_query_until('postgres', 'SELECT durable_ready FROM rl_durable_info()')
  or die 'durable keys never became ready';
$primary->backup('backup');

# the pool filled by an ordinary sliding log, live (times ahead)
$primary->safe_psql('postgres', q{
	SELECT count(rl_allow('big', 'sliding_window_log', 100000, '1 day',
		at => timestamptz '2030-01-01' + i * interval '1 ms'))
	FROM generate_series(1, 5000) i});
is($primary->safe_psql('postgres', 'SELECT pool_blocks - pool_used FROM rl_store_info()'),
	'96', 'an ordinary log leaves 10% of the pool free (ratelimit.durable_reserve)');
is($primary->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE rl_allow('d0', 'qlog',
		at => timestamptz '2030-01-01' + i * interval '1 ms'))
	FROM generate_series(1, 200) i}),
	'200', 'a durable log takes blocks of the room kept for durable keys');

# the entries filled by live ordinary keys
$primary->safe_psql('postgres', q{
	SELECT count(rl_allow(i::text, 'fixed_window', 10, '1 day', at => '2030-01-01'))
	FROM generate_series(1, 300) i});
is($primary->safe_psql('postgres', 'SELECT used FROM rl_store_info()'),
	'231', 'ordinary keys leave 10% of the entries free');
is($primary->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE rl_allow('k' || i, 'q', at => '2030-01-01'))
	FROM generate_series(1, 25) i}),
	'25', 'new durable keys take the entries kept for them');
my ($ret, $out, $err) = $primary->psql('postgres',
	"SELECT rl_allow('one more', 'q')", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/53400: no room in the ratelimit store for a key of durable policy "q"/,
	'once those are taken too, a new durable key fails with 53400');

# a standby whose own ordinary calls fill its store, a log the pool and keys
# the entries (no room kept): replay evicts ordinary keys for the primary's
# durable ones, and drops the ordinary log for a durable log's blocks
my $standby = PostgreSQL::Test::Cluster->new('room_standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->append_conf('postgresql.conf', 'ratelimit.durable_reserve = 0');
$standby->start;
$primary->wait_for_catchup($standby);
$standby->safe_psql('postgres', q{
	SELECT count(rl_allow('sbig', 'sliding_window_log', 100000, '1 day',
		at => timestamptz '2030-01-01' + i * interval '1 ms'))
	FROM generate_series(1, 5000) i;
	SELECT count(rl_allow('s' || i, 'fixed_window', 10, '1 day', at => '2030-01-01'))
	FROM generate_series(1, 400) i});
is($standby->safe_psql('postgres', 'SELECT pool_blocks - pool_used FROM rl_store_info()'),
	'0', 'the standby\'s pool is full of its own ordinary log');
is($standby->safe_psql('postgres', 'SELECT used FROM rl_store_info()'), '256',
	'the standby\'s store is full of its own live ordinary keys');
$primary->safe_psql('postgres', q{
	SELECT rl_reset('k' || i, policy => 'q') FROM generate_series(1, 25) i;
	SELECT rl_reset(i::text, algo => 'fixed_window') FROM generate_series(1, 300) i;
	SELECT rl_reset('big', algo => 'sliding_window_log');
	SELECT count(rl_allow('d1', 'qlog',
		at => timestamptz '2030-01-01' + i * interval '1 ms'))
	FROM generate_series(1, 200) i;
	SELECT count(rl_allow('r' || i, 'q', at => '2030-01-01'))
	FROM generate_series(1, 100) i});
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', q{
	SELECT (rl_check('d1', 'qlog', at => '2030-01-01 00:00:01', cost => 0)).remaining}),
	'800', 'the standby replays a durable log of 200 entries, its ordinary log dropped for the blocks');
is($standby->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE (rl_check('r' || i, 'q', at => '2030-01-01', cost => 0)).remaining = 9)
	FROM generate_series(1, 100) i}),
	'100', 'the standby replays every durable key, evicting its ordinary ones');
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't',
	'and is still a standby');

$standby->stop;
$primary->stop;
done_testing();
