# Durable policies across crashes (#10): after an immediate shutdown or a
# SIGKILL of the postmaster, every durable key reports exactly the
# consumption of the transactions that committed (rolled-back ones give
# theirs back), whether the crash comes during traffic, right after a
# CHECKPOINT, with keys idle since before it, again with no traffic since
# the last restart, or after a clean restart; a reset key stays reset; many
# keys come back; non-durable policies still start afresh.  A sliding log
# (whose image holds its entries) is kept alike.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('durable');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.durable = on
restart_after_crash = on
});
$node->start;

# Wait until the sweeper holds checkpoints back (after each start).
sub wait_ready
{
	$node->poll_query_until('postgres',
		'SELECT durable_ready FROM rl_durable_info()')
	  or die 'durable keys never became ready';
}

# Crash: SIGKILL the postmaster (its children die of its death; the start
# is retried while they still hold the shared memory) or stop it
# immediately; then start again.
sub crash_and_start
{
	my ($how) = @_;
	if ($how eq 'kill')
	{
		$node->kill9;
		my $started = 0;
		for my $try (1 .. 100)
		{
			last if ($started = $node->start(fail_ok => 1));
			$node->{_pid} = undef;
			select(undef, undef, undef, 0.2);
		}
		die 'could not start after SIGKILL' unless $started;
	}
	else
	{
		$node->stop('immediate');
		$node->start;
	}
	wait_ready();
}

$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policy (name, algo, "limit", per, durable)
	VALUES ('orders', 'fixed_window', 1000000, '3650 days', true),
		   ('uploads', 'token_bucket', 1000000, '3650 days', true),
		   ('calls', 'sliding_window_log', 1000000, '3650 days', true),
		   ('plain', 'fixed_window', 1000000, '3650 days', false);
	CREATE TABLE orders (id bigserial PRIMARY KEY, tenant int NOT NULL);
	CREATE TRIGGER orders_quota BEFORE INSERT ON orders FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('orders', 'tenant');
	CREATE TABLE uploads (id bigserial PRIMARY KEY, tenant int NOT NULL, bytes bigint NOT NULL);
	CREATE TRIGGER uploads_quota BEFORE INSERT ON uploads FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('uploads', 'tenant', 'cost=bytes');
	CREATE TABLE calls (id bigserial PRIMARY KEY, tenant int NOT NULL);
	CREATE TRIGGER calls_quota BEFORE INSERT ON calls FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('calls', 'tenant');
});
wait_ready();

# What each tenant used, as the limiter reports it and as the tables say.
my $usage_sql = q{
	SELECT coalesce(string_agg(t || ':' || o || ':' || u || ':' || c, ' ' ORDER BY t), '')
	FROM (SELECT t,
		 1000000 - (rl_check(t::text, 'orders', cost => 0)).remaining AS o,
		 1000000 - (rl_check(t::text, 'uploads', cost => 0)).remaining AS u,
		 1000000 - (rl_check(t::text, 'calls', cost => 0)).remaining AS c
		 FROM generate_series(1, 6) t) s};
my $rows_sql = q{
	SELECT coalesce(string_agg(t || ':' || o || ':' || u || ':' || c, ' ' ORDER BY t), '')
	FROM (SELECT t,
		 (SELECT count(*) FROM orders WHERE tenant = t) AS o,
		 (SELECT coalesce(sum(bytes), 0) FROM uploads WHERE tenant = t) AS u,
		 (SELECT count(*) FROM calls WHERE tenant = t) AS c
		 FROM generate_series(1, 6) t) s};

# pgbench: inserts for tenants lo..hi, a third of the transactions rolled back
sub traffic
{
	my ($lo, $hi, $n) = @_;
	my $script = $node->basedir . "/traffic_$lo.sql";
	open my $fh, '>', $script or die $!;
	print $fh <<"SQL";
\\set tenant random($lo, $hi)
\\set rollback random(1, 3)
BEGIN;
INSERT INTO orders (tenant) VALUES (:tenant);
INSERT INTO uploads (tenant, bytes) VALUES (:tenant, :tenant * 10 + :rollback);
INSERT INTO calls (tenant) VALUES (:tenant);
\\if :rollback = 1
ROLLBACK;
\\else
COMMIT;
\\endif
SQL
	close $fh;
	$node->command_ok(
		[ 'pgbench', '-n', '-c', '4', '-j', '2', '-t', $n, '-f', $script,
		  '-h', $node->host, '-p', $node->port, 'postgres' ],
		"pgbench: tenants $lo to $hi");
}

traffic(1, 6, 50);
my $before = $node->safe_psql('postgres', $rows_sql);
is($node->safe_psql('postgres', $usage_sql), $before, 'usage equals the committed rows');
crash_and_start('immediate');
is($node->safe_psql('postgres', $usage_sql), $before,
	'an immediate shutdown during traffic keeps exactly the committed usage');

# a checkpoint in the middle, tenants 1-3 idle after it, then a crash
traffic(1, 6, 30);
$node->safe_psql('postgres', 'CHECKPOINT');
traffic(4, 6, 30);
$before = $node->safe_psql('postgres', $rows_sql);
crash_and_start('kill');
is($node->safe_psql('postgres', $usage_sql), $before,
	'SIGKILL after a CHECKPOINT in the middle: keys idle since it keep their usage');

# right after a CHECKPOINT, no traffic since
$node->safe_psql('postgres', 'CHECKPOINT');
crash_and_start('kill');
is($node->safe_psql('postgres', $usage_sql), $before, 'SIGKILL right after a CHECKPOINT');

# again with no traffic since the last restart (its end-of-recovery
# checkpoint allows no WAL after it: the durable file covers it)
crash_and_start('immediate');
is($node->safe_psql('postgres', $usage_sql), $before,
	'a second crash with no traffic since the restart');

# a clean restart, a checkpoint, then a crash
$node->restart;
wait_ready();
is($node->safe_psql('postgres', $usage_sql), $before, 'a clean restart keeps the usage');
$node->safe_psql('postgres', 'CHECKPOINT');
crash_and_start('immediate');
is($node->safe_psql('postgres', $usage_sql), $before, 'a crash after a clean restart');

# direct calls under a durable policy, outside any transaction block (no
# transaction id: durable_commit = flush flushes them at commit)
$node->safe_psql('postgres', q{
	SELECT rl_allow('direct', 'orders', cost => 7);
	SELECT rl_allow('direct', 'orders', cost => 5);
});
crash_and_start('immediate');
is($node->safe_psql('postgres',
	"SELECT 1000000 - remaining FROM rl_check('direct', 'orders', cost => 0)"),
	'12', 'committed direct calls survive a crash');

# a sliding log of 2,000 entries (longer than any image so far: the image
# buffer grows between locks), in one transaction, then across a
# checkpoint's sweep, a clean restart (the durable file) and crashes; its
# entries keep their times (the oldest 501 expire together; a look at a
# later time expires entries, so that one comes last)
my $log_sql = q{
	SELECT (rl_check('long', 'calls', cost => 0, at => '2026-06-01')).remaining};
$node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE rl_allow('long', 'calls',
			at => timestamptz '2026-01-01' + i * interval '1 ms'))
	FROM generate_series(0, 1999) i});
my $log_before = $node->safe_psql('postgres', $log_sql);
is($log_before, '998000', 'a sliding log of 2,000 entries');
crash_and_start('kill');
is($node->safe_psql('postgres', $log_sql), $log_before,
	'a long sliding log survives a crash (its image from the commit)');
$node->safe_psql('postgres', 'CHECKPOINT');
crash_and_start('immediate');
is($node->safe_psql('postgres', $log_sql), $log_before,
	'and a crash after a checkpoint (its image from the sweep)');
$node->restart;
wait_ready();
is($node->safe_psql('postgres', $log_sql), $log_before,
	'and a clean restart (the durable file)');
is($node->safe_psql('postgres', q{
	SELECT (rl_check('long', 'calls', cost => 0,
		at => timestamptz '2026-01-01 00:00:00.5' + interval '315360000 s')).remaining}),
	'998501', 'its entries kept their times: the oldest 501 expire together');

# a rolled-back insert gives back, and the crash does not bring it back
$node->safe_psql('postgres', q{
	BEGIN;
	INSERT INTO orders (tenant) SELECT 6 FROM generate_series(1, 100);
	INSERT INTO calls (tenant) SELECT 6 FROM generate_series(1, 100);
	ROLLBACK;
});
crash_and_start('immediate');
is($node->safe_psql('postgres', $usage_sql), $before, 'rolled-back rows are not kept');

# a rollback while another session's commit logged an image holding the
# rolled-back consumption: the refund is flushed with the rollback, so the
# crash right after it does not bring the consumption back
my $inflight = $node->background_psql('postgres');
$inflight->query_safe(q{
	SET ratelimit.refund_on_rollback = on;
	BEGIN;
	SELECT rl_allow('shared', 'orders', cost => 40);
});
$node->safe_psql('postgres', "SELECT rl_allow('shared', 'orders', cost => 2)");
$inflight->query_safe('ROLLBACK');
$node->stop('immediate');
$inflight->quit;
$node->start;
wait_ready();
is($node->safe_psql('postgres',
	"SELECT 1000000 - remaining FROM rl_check('shared', 'orders', cost => 0)"),
	'2', 'a rollback just before a crash stays rolled back');

# the sweeper terminated by hand while a transaction holds durable
# consumption: the transaction cannot log its images, so it must not commit
# (and its rows are given back), or a crash would lose committed usage
my $late = $node->background_psql('postgres', on_error_stop => 0);
$late->query_safe(q{
	BEGIN;
	INSERT INTO orders (tenant) SELECT 5 FROM generate_series(1, 30);
});
$node->safe_psql('postgres', q{
	SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
	WHERE backend_type = 'ratelimit sweeper'});
my ($late_out, $late_ret) = $late->query('COMMIT');
like($late->{stderr}, qr/durable policies are not available yet/,
	'a commit after the sweeper stopped fails');
$late->quit;
wait_ready();
crash_and_start('immediate');
is($node->safe_psql('postgres', $usage_sql), $before,
	'and neither its rows nor its usage are kept');

# a reset key stays reset, before and after a checkpoint
$node->safe_psql('postgres', "SELECT rl_reset('direct', policy => 'orders')");
crash_and_start('immediate');
is($node->safe_psql('postgres',
	"SELECT remaining FROM rl_check('direct', 'orders', cost => 0)"),
	'1000000', 'a reset durable key stays reset after a crash');
$node->safe_psql('postgres', "SELECT rl_allow('direct', 'orders', cost => 3)");
$node->safe_psql('postgres', 'CHECKPOINT');
$node->safe_psql('postgres', "SELECT rl_reset('direct', policy => 'orders')");
$node->safe_psql('postgres', 'CHECKPOINT');
crash_and_start('kill');
is($node->safe_psql('postgres',
	"SELECT remaining FROM rl_check('direct', 'orders', cost => 0)"),
	'1000000', 'also when the reset is older than the last checkpoint');

# many keys: one statement, 20,000 tenants, a checkpoint, then a crash
$node->safe_psql('postgres',
	'INSERT INTO orders (tenant) SELECT 1000 + i % 20000 FROM generate_series(1, 40000) i');
$node->safe_psql('postgres', 'CHECKPOINT');
$node->safe_psql('postgres',
	'INSERT INTO orders (tenant) SELECT 1000 + i FROM generate_series(0, 99) i');
crash_and_start('immediate');
is($node->safe_psql('postgres', q{
	SELECT count(*), sum(1000000 - (rl_check(t::text, 'orders', cost => 0)).remaining)
	FROM generate_series(1000, 20999) t}),
	'20000|40100', '20,000 durable keys come back exactly');
is($node->safe_psql('postgres', $usage_sql), $before, 'and the others with them');
ok($node->safe_psql('postgres', 'SELECT durable_keys FROM rl_durable_info()') >= 20006,
	'rl_durable_info counts them');

# one IMAGE record per transaction and key, whatever the rows (and none
# for a non-durable policy): read back with pg_walinspect, where the
# installation has it (the prebuilt trees of 16 to 18 have no contrib)
SKIP:
{
	skip 'pg_walinspect is not installed with this PostgreSQL', 1
	  unless $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_walinspect'")
	  eq '1';
	$node->safe_psql('postgres', 'CREATE EXTENSION pg_walinspect');
	my @out = split /\n/, $node->safe_psql('postgres', q{
		CREATE TEMP TABLE lsn AS SELECT pg_current_wal_insert_lsn() AS l;
		INSERT INTO orders (tenant) SELECT 1 + i % 2 FROM generate_series(1, 50) i;
		SELECT rl_allow('p', 'plain');
		SELECT rl_reset('direct', policy => 'orders');
		SELECT rl_allow('direct', 'orders');
		SELECT string_agg(record_type, ',' ORDER BY start_lsn)
		FROM pg_get_wal_records_info((SELECT l FROM lsn), pg_current_wal_flush_lsn())
		WHERE resource_manager = 'ratelimit'});
	is($out[-1], 'IMAGE,IMAGE,IMAGE', 'one image per transaction and durable key');
}

# pg_upgrade's carry-over (docs/quotas.md): the usage saved in a table, the
# keys started afresh (as in the upgraded cluster), the usage charged back
# (the fixed window and the sliding log: a bucket refills meanwhile)
my $carry_sql = q{
	SELECT string_agg(t || ':' ||
		(1000000 - (rl_check(t::text, 'orders', cost => 0)).remaining) || ':' ||
		(1000000 - (rl_check(t::text, 'calls', cost => 0)).remaining), ' ' ORDER BY t)
	FROM generate_series(1, 6) t};
my $carry_before = $node->safe_psql('postgres', $carry_sql);
$node->safe_psql('postgres', q{
	CREATE TABLE rl_carry AS SELECT p.name AS policy, u.key, u.used
	FROM rl_policy p, rl_usage(p.name) u WHERE p.durable AND u.used > 0;
	SELECT count(rl_reset(t::text, policy => p))
	FROM generate_series(1, 6) t, unnest(ARRAY['orders', 'calls']) p;
});
is($node->safe_psql('postgres', $carry_sql), '1:0:0 2:0:0 3:0:0 4:0:0 5:0:0 6:0:0',
	'the keys started afresh');
$node->safe_psql('postgres', q{
	SELECT count(rl_adjust(key, policy, used)) FROM rl_carry
	WHERE policy IN ('orders', 'calls') AND key ~ '^[1-6]$'});
is($node->safe_psql('postgres', $carry_sql), $carry_before,
	'the usage carried over by rl_usage and rl_adjust');

# a non-durable policy is as before: a crash starts it afresh
$node->safe_psql('postgres', "SELECT rl_allow('p', 'plain', cost => 9)");
crash_and_start('immediate');
is($node->safe_psql('postgres',
	"SELECT remaining FROM rl_check('p', 'plain', cost => 0)"),
	'1000000', 'a non-durable policy starts afresh after a crash');

$node->stop;

# a store full of durable keys: a new durable key fails with 53400
# (fail_mode does not apply), an ordinary call follows fail_mode, and the
# durable keys are neither reclaimed nor evicted (one role fills it: no
# share caps here, 026 tests those); its records are logged and replayed
# under another resource manager id (ratelimit.wal_rmgr_id)
my $tiny = PostgreSQL::Test::Cluster->new('tiny');
$tiny->init;
$tiny->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.durable = on
ratelimit.max_keys = 256
ratelimit.role_share = 100
ratelimit.database_share = 100
ratelimit.wal_rmgr_id = 201
});
$tiny->start;
$tiny->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policy (name, algo, "limit", per, durable)
	VALUES ('q', 'fixed_window', 10, '1 second', true);
});
$tiny->poll_query_until('postgres', 'SELECT durable_ready FROM rl_durable_info()')
  or die 'durable keys never became ready';
is($tiny->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE rl_allow(i::text, 'q', at => '2026-01-01'))
	FROM generate_series(1, 256) i}), '256', 'the store filled with durable keys');
my ($ret, $out, $err) = $tiny->psql('postgres',
	"SELECT rl_allow('one more', 'q')", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/53400: no room in the ratelimit store for a key of durable policy "q"/,
	'a new durable key without room fails with 53400');
is($tiny->safe_psql('postgres', q{
	SELECT rl_allow('ordinary', 'fixed_window', 1, '1 second');
	SELECT refused FROM rl_store_info()}), "t\n2",
	'an ordinary key without room follows fail_mode (the durable keys are not evicted, though idle); both calls count as refused');
$tiny->stop('immediate');
$tiny->start;
is($tiny->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE (rl_check(i::text, 'q', at => '2026-01-01', cost => 0)).remaining = 9)
	FROM generate_series(1, 256) i}), '256', 'and all of them survive a crash');
like(slurp_file($tiny->logfile), qr/registered custom resource manager "ratelimit" with ID 201/,
	'under resource manager id 201');
$tiny->stop;

done_testing();
