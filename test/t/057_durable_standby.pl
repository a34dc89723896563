# Durable policies on a streaming standby (#10): the standby replays the
# primary's durable keys (keys idle since before its base backup too),
# reports their usage, refuses consuming calls with SQLSTATE 25006, keeps
# them across its own crash, and after promotion goes on from exactly the
# primary's usage; the promoted server keeps it across a crash.  The old
# primary, diverged after the promotion, is rewound (pg_rewind) and follows
# the new one: its own consumption since is gone.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $primary = PostgreSQL::Test::Cluster->new('dprimary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.durable = on
wal_log_hints = on
});
$primary->start;

sub wait_ready
{
	my ($node) = @_;
	$node->poll_query_until('postgres',
		'SELECT durable_ready FROM rl_durable_info()')
	  or die 'durable keys never became ready';
}

$primary->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policy (name, algo, "limit", per, durable)
	VALUES ('orders', 'fixed_window', 1000, '3650 days', true),
		   ('bucket', 'token_bucket', 1000, '3650 days', true);
	CREATE TABLE orders (id bigserial PRIMARY KEY, tenant int NOT NULL);
	CREATE TRIGGER orders_quota BEFORE INSERT ON orders FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('orders', 'tenant');
});
wait_ready($primary);

my $usage_sql = q{
	SELECT string_agg(t || ':' || (1000 - (rl_check(t::text, 'orders', cost => 0)).remaining)
		|| ':' || (1000 - (rl_check(t::text, 'bucket', cost => 0)).remaining), ' ' ORDER BY t)
	FROM generate_series(1, 4) t};

# tenant 1 consumes before the base backup only, and is idle after it
$primary->safe_psql('postgres', q{
	INSERT INTO orders (tenant) SELECT 1 FROM generate_series(1, 11);
	SELECT rl_allow('1', 'bucket', cost => 5);
	CHECKPOINT;
});
$primary->backup('backup');
$primary->safe_psql('postgres', q{
	INSERT INTO orders (tenant) SELECT 2 FROM generate_series(1, 22);
	INSERT INTO orders (tenant) SELECT 3 FROM generate_series(1, 33);
	SELECT rl_allow('3', 'bucket', cost => 7);
});

my $standby = PostgreSQL::Test::Cluster->new('dstandby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

my $expected = '1:11:5 2:22:0 3:33:7 4:0:0';
is($primary->safe_psql('postgres', $usage_sql), $expected, 'usage on the primary');
is($standby->safe_psql('postgres', $usage_sql), $expected,
	'the standby reports the same usage, of keys idle since before its backup too');

# consuming calls are refused on the standby; non-durable ones still work
my ($ret, $out, $err) = $standby->psql('postgres', q{
	DO $$
	BEGIN
		PERFORM rl_allow('2', 'orders');
	EXCEPTION WHEN read_only_sql_transaction THEN
		RAISE NOTICE 'refused: %', SQLERRM;
	END $$});
like($err, qr/refused: cannot consume from a durable policy during recovery/,
	'a consuming call of a durable policy is refused with 25006 on the standby');
is($standby->safe_psql('postgres', "SELECT rl_allow('x', 'fixed_window', 1, '1 day')"),
	't', 'a direct call still decides on the standby');
is($standby->safe_psql('postgres', $usage_sql), $expected, 'the refused call consumed nothing');

# more traffic, a checkpoint (a restartpoint on the standby), a reset, and a
# crash of the standby
$primary->safe_psql('postgres', q{
	INSERT INTO orders (tenant) SELECT 4 FROM generate_series(1, 4);
	CHECKPOINT;
	INSERT INTO orders (tenant) SELECT 2 FROM generate_series(1, 2);
	SELECT rl_reset('3', policy => 'bucket');
});
$primary->wait_for_catchup($standby);
$standby->safe_psql('postgres', 'CHECKPOINT');
$expected = '1:11:5 2:24:0 3:33:0 4:4:0';
is($standby->safe_psql('postgres', $usage_sql), $expected, 'the standby follows, resets too');
$standby->stop('immediate');
$standby->start;
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', $usage_sql), $expected, 'and keeps it across its own crash');

# promotion: consumption goes on from exactly the primary's usage
$primary->stop;
$standby->promote;
wait_ready($standby);
is($standby->safe_psql('postgres', $usage_sql), $expected,
	'the promoted standby starts from the primary\'s usage');
$standby->safe_psql('postgres', q{
	INSERT INTO orders (tenant) SELECT 1 FROM generate_series(1, 3);
	SELECT rl_allow('4', 'bucket', cost => 9);
});
$expected = '1:14:5 2:24:0 3:33:0 4:4:9';
is($standby->safe_psql('postgres', $usage_sql), $expected, 'and consumes on');
$standby->stop('immediate');
$standby->start;
wait_ready($standby);
is($standby->safe_psql('postgres', $usage_sql), $expected,
	'the promoted server keeps its usage across a crash');
$standby->safe_psql('postgres', 'CHECKPOINT');
$standby->stop('immediate');
$standby->start;
wait_ready($standby);
is($standby->safe_psql('postgres', $usage_sql), $expected,
	'and across a crash after its first checkpoint');

# the old primary, started again on its own, diverges (its own consumption,
# a checkpoint), is stopped and rewound to the new primary, and follows it
$primary->start;
wait_ready($primary);
$primary->safe_psql('postgres', q{
	INSERT INTO orders (tenant) SELECT 2 FROM generate_series(1, 50);
	CHECKPOINT;
	INSERT INTO orders (tenant) SELECT 3 FROM generate_series(1, 60);
});
$primary->stop;
$standby->safe_psql('postgres', q{
	INSERT INTO orders (tenant) SELECT 4 FROM generate_series(1, 2);
	CHECKPOINT;});
$expected = '1:14:5 2:24:0 3:33:0 4:6:9';
# pg_rewind copies the configuration files too: the old primary keeps its own
my $conf = slurp_file($primary->data_dir . '/postgresql.conf');
command_ok(
	[ 'pg_rewind', '--target-pgdata', $primary->data_dir,
	  '--source-server', $standby->connstr('postgres') ],
	'pg_rewind of the old primary');
append_to_file($primary->data_dir . '/postgresql.conf.new', $conf);
rename($primary->data_dir . '/postgresql.conf.new', $primary->data_dir . '/postgresql.conf')
  or die "rename: $!";
$primary->enable_streaming($standby);
$primary->start;
$standby->wait_for_catchup($primary);
is($primary->safe_psql('postgres', $usage_sql), $expected,
	'the rewound old primary reports the new primary\'s usage, not its own since');
$standby->safe_psql('postgres',
	'INSERT INTO orders (tenant) SELECT 1 FROM generate_series(1, 1)');
$standby->wait_for_catchup($primary);
is($primary->safe_psql('postgres', $usage_sql), '1:15:5 2:24:0 3:33:0 4:6:9',
	'and replays it on');

$primary->stop;
$standby->stop;
done_testing();
