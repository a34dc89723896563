# Refunds of many calls on the Redis backend.  A transaction's consumption
# is tracked per key and level, calls a refund cannot tell apart added up,
# so a rollback queues one refund script per key and window (per distinct
# microsecond for a sliding log) instead of one per row, sent after the
# transaction (here: as the session exits), and gives back exactly what one
# refund per call did: in Redis, in hybrid's pre-check (with the
# pre-check's own limit), and in a lease (only the calls of the lease that
# is still the key's).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use RlRedis;

my $redis = RlRedis->new;
my $node = RlRedis::pg_node('redis_refund_rows', qq{
ratelimit.backend = redis
ratelimit.redis_nodes = '${\ $redis->addr}'
ratelimit.refund_on_rollback = on
ratelimit.fail_mode = closed
log_statement = none
});
my @algos = qw(fixed_window sliding_window_log sliding_window_counter
  token_bucket leaky_bucket);
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policy (name, algo, "limit", per, backend)
	SELECT 'r_' || a, a, 1000000, '10000 days', 'redis'
	FROM unnest(ARRAY['fixed_window', 'sliding_window_log',
		'sliding_window_counter', 'token_bucket', 'leaky_bucket']) a;
	CREATE TABLE rows_of (algo text, k int);
	-- what key k has used under each policy
	CREATE FUNCTION used(k int) RETURNS TABLE (algo text, used bigint)
	LANGUAGE sql AS $$
		SELECT p.algo, 1000000 - r.remaining FROM rl_policy p,
			LATERAL rl_check(k::text, p.name, cost => 0) r
		WHERE p.name LIKE 'r\_%' ORDER BY p.algo
	$$;
});
for my $algo (@algos)
{
	$node->safe_psql('postgres', qq{
		CREATE TRIGGER q_$algo BEFORE INSERT ON rows_of FOR EACH ROW
		WHEN (NEW.algo = '$algo')
		EXECUTE FUNCTION rl_enforce('r_$algo', 'k');
	});
}

sub sql { return $node->safe_psql('postgres', $_[0]); }
sub last_of { return (split /\n/, sql($_[0]))[-1]; }

# scripts Redis has run (EVALSHA, and EVAL after a NOSCRIPT)
sub scripts
{
	my $stats = $redis->cli('INFO', 'commandstats');
	my $n = 0;
	$n += $1 while $stats =~ /^cmdstat_eval(?:sha)?:calls=(\d+)/mg;
	return $n;
}

# ---- quota triggers: many rows, savepoints, one refund per key ----

# three committed rows per policy on key 1; a rollback first, so that Redis
# has every refund script before they are counted
sql(q{
	INSERT INTO rows_of SELECT a, 1 FROM unnest(ARRAY['fixed_window',
		'sliding_window_log', 'sliding_window_counter', 'token_bucket',
		'leaky_bucket']) a, generate_series(1, 3);
	BEGIN;
	INSERT INTO rows_of SELECT algo, 9 FROM rows_of;
	ROLLBACK;
});
my $s = $node->background_psql('postgres', on_error_stop => 1);
$s->query_safe('BEGIN');
for my $algo (@algos)
{
	$s->query_safe(qq{
		INSERT INTO rows_of SELECT '$algo', i % 2 FROM generate_series(1, 400) i;
		SAVEPOINT a;
		INSERT INTO rows_of SELECT '$algo', 1 FROM generate_series(1, 100) i;
		SAVEPOINT b;
		INSERT INTO rows_of SELECT '$algo', 1 FROM generate_series(1, 50) i;
		RELEASE SAVEPOINT b;
		ROLLBACK TO SAVEPOINT a;
		INSERT INTO rows_of SELECT '$algo', 1 FROM generate_series(1, 20) i;
	});
}
is($s->query_safe(q{SELECT string_agg(algo || ' ' || used, ', ') FROM used(1)}),
	join(', ', map { "$_ 223" } sort @algos),
	'inside: key 1 has its 3 committed rows, 200 rows and 20 after the rolled-back savepoint');
my $before = scripts();
my $counted = sql('SELECT refunds_sent FROM rl_redis_info()');
$s->query_safe('ROLLBACK');
$s->quit;
RlRedis::refunds_settled($node);
my $sent = scripts() - $before;
is(sql('SELECT refunds_sent FROM rl_redis_info()') - $counted, $sent,
	'rl_redis_info counts the refunds sent');
is(last_of(q{SELECT string_agg(algo || ' ' || used, ', ') FROM used(1)}),
	join(', ', map { "$_ 3" } sort @algos),
	'after the rollback, Redis counts the committed rows only');
is(last_of(q{SELECT string_agg(algo || ' ' || used, ', ') FROM used(0)}),
	join(', ', map { "$_ 0" } sort @algos), 'and nothing for key 0');
# per key and level (key 0: the transaction's; key 1: the transaction's and
# savepoint a's, open again after its rollback) one script for each of the
# four other algorithms; for the log one per distinct microsecond of its
# 420 rows
cmp_ok($sent, '>=', 3 * 4 + 2, "the rollback sent $sent refund scripts");
cmp_ok($sent, '<=', 3 * 4 + 420,
	'one per key for four algorithms, at most one per row for the sliding log');

# the same without the sliding log: exactly one script per key
$s = $node->background_psql('postgres', on_error_stop => 1);
$s->query_safe(q{
	BEGIN;
	INSERT INTO rows_of SELECT 'token_bucket', i % 3 FROM generate_series(1, 600) i;
	SAVEPOINT a;
	INSERT INTO rows_of SELECT 'fixed_window', 5 FROM generate_series(1, 300) i;
	RELEASE SAVEPOINT a;
});
$before = scripts();
$s->query_safe('ROLLBACK');
$s->quit;
RlRedis::refunds_settled($node);
is(scripts() - $before, 4, '900 rows on 4 keys: the rollback sends 4 refund scripts');
is(last_of(q{SELECT used FROM used(5) WHERE algo = 'fixed_window'}),
	'0', 'and gives every row back');

# ---- the same calls on both backends, window boundaries included ----

my @calls;
my $t = 1_800_000_000_000_000;
push @calls, 'BEGIN;';
for my $block (0 .. 9)
{
	my $sp = $block % 3;
	push @calls, 'SAVEPOINT s;' if $sp;
	for my $i (0 .. 9)
	{
		$t += ($i * 7919 + $block * 104729) % 300_000;
		for my $algo (@algos)
		{
			my $cost = 1 + ($i + $block) % 3;
			push @calls, "SELECT '$algo', * FROM rl_check('diff:$algo:' || "
			  . ($i % 2)
			  . ", '$algo', 60, '1 second', $cost, "
			  . "at => to_timestamp(0) + interval '$t microseconds');";
		}
	}
	push @calls,
	  $sp == 1 ? 'ROLLBACK TO SAVEPOINT s;'
	  : $sp == 2 ? 'RELEASE SAVEPOINT s;'
	  : ();
}
push @calls, 'ROLLBACK;';
for my $k (0, 1)
{
	push @calls, map {
		"SELECT '$_', * FROM rl_check('diff:$_:$k', '$_', 60, '1 second', 0, "
		  . "at => to_timestamp(0) + interval '${\ ($t + 1)} microseconds');"
	} @algos;
}
my %out;
for my $backend (qw(local redis))
{
	$out{$backend} = sql(join("\n",
		"SET ratelimit.backend = $backend;", "SET timezone = 'UTC';", @calls));
}
my $rows = () = $out{local} =~ /\n/g;
cmp_ok($rows, '>', 500, 'the differential made its calls');
is($out{redis}, $out{local},
	'calls across windows with savepoints: Redis and the store give back the same');

# ---- hybrid: Redis, and the pre-check with its own burst ----

# With hybrid_multiple = 2 the pre-check's bucket holds 60 tokens: the
# refund must put its 30 back up to 60, not up to the request's 30.
is( last_of(q{
	SET ratelimit.backend = hybrid;
	SET ratelimit.hybrid_multiple = 2;
	BEGIN;
	SELECT count(*) FROM generate_series(1, 20)
	WHERE rl_allow('hy', 'token_bucket', 30, '1 hour');
	SAVEPOINT a;
	SELECT count(*) FROM generate_series(1, 10)
	WHERE rl_allow('hy', 'token_bucket', 30, '1 hour');
	RELEASE SAVEPOINT a;
	SELECT (rl_check('hy', 'token_bucket', 30, '1 hour', 0)).remaining;
	ROLLBACK;
	SET ratelimit.backend = redis;
	SELECT (rl_check('hy', 'token_bucket', 30, '1 hour', 0)).remaining;
}), '30', 'hybrid: Redis has its 30 tokens back');
is( last_of(q{
	SET ratelimit.backend = local;
	SELECT (rl_check('hy', 'token_bucket', 60, '1 hour', 0)).remaining;
}), '60', 'and the pre-check its 60');

# ---- leases: the units go back to the lease that is still the key's ----

my $dboid = sql("SELECT oid FROM pg_database WHERE datname = 'postgres'");
my $calls = sql('SELECT calls FROM rl_redis_info()');
is( last_of(q{
	SET ratelimit.redis_batch = 10;
	BEGIN;
	SELECT count(*) FROM generate_series(1, 25)
	WHERE rl_allow('lease', 'fixed_window', 1000, '10000 days');
	ROLLBACK;
	SELECT count(*) FROM generate_series(1, 10)
	WHERE rl_allow('lease', 'fixed_window', 1000, '10000 days');
}), '10', '35 calls admitted');
is(sql('SELECT calls FROM rl_redis_info()') - $calls, 3,
	'three leases: the last one got its 5 calls back and admitted the next 10');
is($redis->cli('HGET', "rl:{$dboid:fw:lease}", 'c'), '30',
	'Redis counts the three leases: units of replaced leases went with them');

# Parameters alternating between calls take a lease per call (a lease of
# other parameters is replaced): what the transaction keeps for them stays
# bounded, a newer lease voiding what was kept for the older ones (whose
# units went with them); one record per lease took 130 bytes a call.
my $tracked = last_of(q{
	SET ratelimit.redis_batch = 2;
	BEGIN;
	SELECT count(*) FROM generate_series(1, 20000) i
	WHERE rl_allow('alt_lease', 'fixed_window', 1000000 + i % 2, '10000 days');
	SELECT sum(total_bytes) FROM pg_backend_memory_contexts
	WHERE name IN ('ratelimit refunds', 'ratelimit refund targets');
	ROLLBACK;
});
cmp_ok($tracked, '<', 100 * 1024,
	"20,000 calls, a lease each: tracking under 100 kB ($tracked bytes)");
is($redis->cli('HGET', "rl:{$dboid:fw:alt_lease}", 'c'), '40000',
	'Redis counts every lease: their units went with them');

# ---- the queue of refunds is bounded ----

# 10,001 calls at distinct microseconds on one sliding log: as many refund
# scripts, one more than the queue holds.  The oldest call's is dropped
# (the newest are sent first), and counted; the rest are sent at the
# session's next call, all within one deadline: 10,000 refunds on a log of
# 10,000 entries take Redis seconds, far more than the default 100 ms
# (those not answered in time would be dropped), hence the timeout here.
my ($queued0, $sent0, $dropped0) =
  split /\|/, sql('SELECT refunds_queued, refunds_sent, refunds_dropped FROM rl_redis_info()');
is( last_of(q{
	SET ratelimit.redis_command_timeout = '60s';
	BEGIN;
	SELECT count(*) FROM generate_series(1, 10001) i
	WHERE rl_allow('bounded', 'sliding_window_log', 100000, '1 hour',
		at => '2030-01-01 00:00:00 UTC'::timestamptz + i * interval '1 microsecond');
	ROLLBACK;
	SELECT remaining FROM rl_check('bounded', 'sliding_window_log', 100000, '1 hour',
		cost => 0, at => '2030-01-01 00:00:01 UTC');
}), '99999', 'the refunds the queue held were sent at the next call; one was dropped');
is(sql('SELECT refunds_queued FROM rl_redis_info()') - $queued0, 10000,
	'10,000 refunds queued');
is(sql('SELECT refunds_dropped FROM rl_redis_info()') - $dropped0, 1,
	'the one past the bound is counted as dropped');
is(sql('SELECT refunds_sent FROM rl_redis_info()') - $sent0, 10000,
	'and the others as sent');

$node->stop;
$redis->stop;
done_testing();
