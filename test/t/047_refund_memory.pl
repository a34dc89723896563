# Memory of refund tracking: what a transaction keeps to give back on
# rollback grows with the keys it consumed from (and its savepoint levels),
# not with its rows.  Each case inserts through a quota trigger inside a
# transaction, reads the backend's own memory contexts
# (pg_backend_memory_contexts: TopTransactionContext and "ratelimit
# refunds" with its hash table) before rolling back, then checks that the
# rollback gave everything back.  The bounds are on memory, far below what
# one record per row took (about 290 bytes a row: 58 MB for 200,000 rows);
# the figures are printed for the record.  A sliding_window_log key is the
# documented exception: 16 bytes per distinct microsecond.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $rows = 200_000;

my $node = PostgreSQL::Test::Cluster->new('refund_memory');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.pool_size = 32MB
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policy (name, algo, "limit", per)
	SELECT 'mem_' || a, a, 1000000000, '10000 days'
	FROM unnest(ARRAY['fixed_window', 'sliding_window_log',
		'sliding_window_counter', 'token_bucket', 'leaky_bucket']) a;
	CREATE TABLE tb (k int);
	CREATE TRIGGER q BEFORE INSERT ON tb FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('mem_token_bucket', 'k');
	CREATE TABLE fw (k int);
	CREATE TRIGGER q BEFORE INSERT ON fw FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('mem_fixed_window', 'k');
	CREATE TABLE mixed (k int);
	CREATE TRIGGER q1 BEFORE INSERT ON mixed FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('mem_sliding_window_counter', 'k');
	CREATE TRIGGER q2 AFTER INSERT ON mixed FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('mem_leaky_bucket', 'k');
	CREATE TABLE log (k int);
	CREATE TRIGGER q BEFORE INSERT ON log FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('mem_sliding_window_log', 'k');
	-- the transaction's memory and the refund tracking's part of it
	CREATE VIEW tracking AS
	SELECT coalesce(sum(total_bytes) FILTER (
			WHERE name IN ('TopTransactionContext', 'ratelimit refunds')
			   OR name = 'ratelimit refund targets'), 0) AS total,
		   coalesce(sum(total_bytes) FILTER (
			WHERE name = 'ratelimit refunds'
			   OR name = 'ratelimit refund targets'), 0) AS refunds
	FROM pg_backend_memory_contexts;
	-- what a policy's keys 0 .. n - 1 have used
	CREATE FUNCTION used(policy text, n int) RETURNS numeric
	LANGUAGE sql AS $$
		SELECT sum(1000000000 - r.remaining)
		FROM generate_series(0, n - 1) k,
			LATERAL rl_check(k::text, policy, cost => 0) r
	$$;
});

# Run the statements in a transaction, then roll back.  Returns the
# transaction's memory and the tracking's, read before the rollback.
sub tracked
{
	my ($sql) = @_;
	my $out = $node->safe_psql('postgres', qq{
		BEGIN;
		$sql;
		SELECT total, refunds FROM tracking;
		ROLLBACK;
	});
	return split /\|/, (split /\n/, $out)[-1];
}

sub mb { return sprintf('%.2f MB', $_[0] / 1048576); }

# ---- one key, many rows ----

my ($total, $refunds) =
  tracked("INSERT INTO tb SELECT 0 FROM generate_series(1, $rows)");
diag(sprintf('token_bucket, %d rows on 1 key: transaction %s, tracking %s',
	$rows, mb($total), mb($refunds)));
cmp_ok($refunds, '>', 0, 'the tracking has its own memory context');
cmp_ok($total, '<', 512 * 1024,
	"$rows rows on one key: the transaction stays under 0.5 MB");
is($node->safe_psql('postgres', "SELECT used('mem_token_bucket', 1)"),
	'0', 'the rollback gave back every row');

($total, $refunds) =
  tracked("INSERT INTO fw SELECT 0 FROM generate_series(1, $rows)");
diag(sprintf('fixed_window, %d rows on 1 key: transaction %s, tracking %s',
	$rows, mb($total), mb($refunds)));
cmp_ok($total, '<', 512 * 1024,
	'fixed_window: the same (one window, one pair)');
is($node->safe_psql('postgres', "SELECT used('mem_fixed_window', 1)"),
	'0', 'fixed_window: the rollback gave back every row');

# ---- a thousand keys ----

($total, $refunds) =
  tracked("INSERT INTO tb SELECT i % 1000 FROM generate_series(1, $rows) i");
diag(sprintf(
	'token_bucket, %d rows on 1000 keys: transaction %s, tracking %s (%d bytes per key)',
	$rows, mb($total), mb($refunds), $refunds / 1000));
cmp_ok($total, '<', 2 * 1024 * 1024,
	"$rows rows on 1000 keys: the transaction stays under 2 MB");
is($node->safe_psql('postgres', "SELECT used('mem_token_bucket', 1000)"),
	'0', '1000 keys: the rollback gave back every row');

# two policies per row (a BEFORE and an AFTER trigger), savepoints released
# and rolled back
($total, $refunds) = tracked(qq{
	INSERT INTO mixed SELECT i % 1000 FROM generate_series(1, $rows / 2) i;
	SAVEPOINT a;
	INSERT INTO mixed SELECT i % 1000 FROM generate_series(1, $rows / 4) i;
	SAVEPOINT b;
	INSERT INTO mixed SELECT i % 1000 FROM generate_series(1, $rows / 8) i;
	ROLLBACK TO SAVEPOINT b;
	RELEASE SAVEPOINT a;
	INSERT INTO mixed SELECT i % 1000 FROM generate_series(1, $rows / 4) i
});
diag(sprintf(
	'two policies, %d rows on 1000 keys with savepoints: transaction %s, tracking %s',
	$rows, mb($total), mb($refunds)));
cmp_ok($total, '<', 4 * 1024 * 1024,
	'2 policies x 1000 keys with savepoints: under 4 MB');
is( $node->safe_psql('postgres',
		"SELECT used('mem_sliding_window_counter', 1000) + used('mem_leaky_bucket', 1000)"),
	'0', 'both policies got every row back');

# ---- a savepoint per row (a PL/pgSQL exception block per insert) ----

my $loops = 20_000;
($total, $refunds) = tracked(qq{
	DO \$\$
	BEGIN
		FOR i IN 1 .. $loops LOOP
			BEGIN
				INSERT INTO tb VALUES (i % 10);
				IF i % 2 = 0 THEN
					RAISE EXCEPTION 'undo';
				END IF;
			EXCEPTION WHEN raise_exception THEN
				NULL;
			END;
		END LOOP;
	END \$\$
});
diag(sprintf('%d subtransactions on 10 keys, half rolled back: transaction %s, tracking %s',
	$loops, mb($total), mb($refunds)));
cmp_ok($total, '<', 1024 * 1024,
	"$loops subtransactions on 10 keys: the transaction stays under 1 MB");
is($node->safe_psql('postgres', "SELECT used('mem_token_bucket', 10)"),
	'0', 'subtransactions: the rollback gave back every row');

# ---- a key's parameters alternating between rows ----
# A limit computed per row (a CASE, per-row plans) used to start an amount
# per row, about 210 bytes a row; amounts are now per parameter class (a
# window's W, nothing for the others), a bucket's bounds composed.

for my $algo (qw(token_bucket fixed_window sliding_window_counter
	leaky_bucket sliding_window_log))
{
	($total, $refunds) = tracked(qq{
		SET LOCAL ratelimit.refund_on_rollback = on;
		SELECT count(*) FROM generate_series(1, $rows) i,
			LATERAL rl_allow('alt', '$algo', 1000000000 + i % 2,
				'10000 days', at => '2026-01-01'::timestamptz) a});
	diag(sprintf('%s, %d rows on 1 key, two alternating limits: tracking %s',
		$algo, $rows, mb($refunds)));
	cmp_ok($refunds, '<', 100 * 1024,
		"$algo: $rows rows on one key with alternating limits: tracking under 100 kB");
	is( $node->safe_psql('postgres', qq{
			SELECT remaining FROM rl_check('alt', '$algo', 1000000000,
				'10000 days', cost => 0, at => '2026-01-01'::timestamptz)}),
		'1000000000', "$algo: the rollback gave back every row");
}

# three windows, alternating: one amount each
($total, $refunds) = tracked(qq{
	SET LOCAL ratelimit.refund_on_rollback = on;
	SELECT count(*) FROM generate_series(1, $rows) i,
		LATERAL rl_allow('altper', 'fixed_window', 1000000000,
			make_interval(days => 10000 + i % 3),
			at => '2026-01-01'::timestamptz) a});
diag(sprintf('fixed_window, %d rows on 1 key, three alternating windows: tracking %s',
	$rows, mb($refunds)));
cmp_ok($refunds, '<', 100 * 1024,
	'three alternating windows: tracking under 100 kB');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(remaining::text, ',' ORDER BY d)
		FROM generate_series(0, 2) d,
			LATERAL rl_check('altper', 'fixed_window', 1000000000,
				make_interval(days => 10000 + d), cost => 0,
				at => '2026-01-01'::timestamptz)}),
	'1000000000,1000000000,1000000000',
	'three alternating windows: the rollback gave back every row');

# ---- the exception: a sliding log keeps one entry per microsecond ----

($total, $refunds) =
  tracked("INSERT INTO log SELECT 0 FROM generate_series(1, $rows)");
diag(sprintf('sliding_window_log, %d rows on 1 key: transaction %s, tracking %s (%.1f bytes per row)',
	$rows, mb($total), mb($refunds), $refunds / $rows));
cmp_ok($total, '<', 2 * 16 * $rows + 512 * 1024,
	'sliding_window_log: at most 16 bytes per distinct time (an array that doubles)');
is($node->safe_psql('postgres', "SELECT used('mem_sliding_window_log', 1)"),
	'0', 'sliding_window_log: the rollback gave back every row');

$node->stop;
done_testing();
