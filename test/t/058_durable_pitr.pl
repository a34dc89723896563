# Durable policies and point-in-time recovery (#10): a base backup and the
# archived WAL, recovered to a restore point between two batches, give the
# durable keys the usage of that point, equal to the rows committed by then
# (keys idle since before the backup too, and a reset after the point undone).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $primary = PostgreSQL::Test::Cluster->new('pitr_primary');
$primary->init(has_archiving => 1, allows_streaming => 1);
$primary->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.durable = on
});
$primary->start;
$primary->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policy (name, algo, "limit", per, durable)
	VALUES ('orders', 'token_bucket', 1000, '3650 days', true);
	CREATE TABLE orders (id bigserial PRIMARY KEY, tenant int NOT NULL);
	CREATE TRIGGER orders_quota BEFORE INSERT ON orders FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('orders', 'tenant');
});
$primary->poll_query_until('postgres', 'SELECT durable_ready FROM rl_durable_info()')
  or die 'durable keys never became ready';

my $usage_sql = q{
	SELECT string_agg(t || ':' || (1000 - (rl_check(t::text, 'orders', cost => 0)).remaining)
		|| ':' || (SELECT count(*) FROM orders WHERE tenant = t), ' ' ORDER BY t)
	FROM generate_series(1, 3) t};

# tenant 1 before the backup only; tenant 2 after it; then the restore point
$primary->safe_psql('postgres',
	'INSERT INTO orders (tenant) SELECT 1 FROM generate_series(1, 10)');
$primary->backup('backup');
$primary->safe_psql('postgres', q{
	INSERT INTO orders (tenant) SELECT 2 FROM generate_series(1, 7);
	CHECKPOINT;
	INSERT INTO orders (tenant) SELECT 3 FROM generate_series(1, 5);
	SELECT pg_create_restore_point('between');
});
my $at_point = $primary->safe_psql('postgres', $usage_sql);
is($at_point, '1:10:10 2:7:7 3:5:5', 'usage at the restore point');

# the second batch, a reset, then the WAL is archived
$primary->safe_psql('postgres', q{
	INSERT INTO orders (tenant) SELECT 1 FROM generate_series(1, 20);
	INSERT INTO orders (tenant) SELECT 3 FROM generate_series(1, 20);
	SELECT rl_reset('2', policy => 'orders');
	CHECKPOINT;
});
my $walfile = $primary->safe_psql('postgres',
	'SELECT pg_walfile_name(pg_switch_wal())');
$primary->poll_query_until('postgres',
	"SELECT last_archived_wal >= '$walfile' FROM pg_stat_archiver")
  or die 'the WAL was not archived';
$primary->stop;
ok(!$primary->log_contains(qr/PANIC/),
	'the sweeper stops cleanly right after a WAL switch (its flush stays within the WAL written)');

my $restored = PostgreSQL::Test::Cluster->new('pitr_restored');
$restored->init_from_backup($primary, 'backup', has_restoring => 1);
$restored->append_conf('postgresql.conf', q{
recovery_target_name = 'between'
recovery_target_action = 'promote'
});
$restored->start;
$restored->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'recovery did not end';
is($restored->safe_psql('postgres', $usage_sql), $at_point,
	'point-in-time recovery gives the usage of the restore point');
$restored->poll_query_until('postgres', 'SELECT durable_ready FROM rl_durable_info()')
  or die 'durable keys never became ready';
$restored->safe_psql('postgres',
	'INSERT INTO orders (tenant) SELECT 2 FROM generate_series(1, 3)');
is($restored->safe_psql('postgres', $usage_sql), '1:10:10 2:10:10 3:5:5',
	'and consumption goes on from it');

$restored->stop;
done_testing();
