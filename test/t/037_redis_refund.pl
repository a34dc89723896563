# Refunds on the Redis backend: what an aborted transaction or savepoint
# consumed in Redis is given back by the algorithm's refund script, in
# hybrid mode the local pre-check's share too, and with local batching the
# units go back to the backend's lease.  A differential test runs random
# call sequences, some inside rolled-back savepoints, on both backends: the
# local backend's refunds are the reference, every output must match.  A
# refund Redis cannot take (Redis stopped) costs at most the command
# timeout and never turns the rollback into an error.  RL_SEED replays a
# run.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use Time::HiRes qw(time);
use RlRedis;

my $seed = $ENV{RL_SEED} // 20261130;
my $ncalls = $ENV{RL_CALLS} // 400;
diag("RL_SEED=$seed ($ncalls calls per algorithm)");
srand($seed);

my $redis = RlRedis->new;
my $node = RlRedis::pg_node('redis_refund', qq{
ratelimit.backend = redis
ratelimit.redis_nodes = '${\ $redis->addr}'
ratelimit.redis_command_timeout = 300
ratelimit.redis_probe_interval = 500
ratelimit.refund_on_rollback = on
ratelimit.fail_mode = closed
log_statement = none
});
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

my @algos = qw(fixed_window sliding_window_log sliding_window_counter
  token_bucket leaky_bucket);

sub sql { return $node->safe_psql('postgres', $_[0]); }
# the last line of a script's output: its final query's result
sub last_of { return (split /\n/, sql($_[0]))[-1]; }
sub info { return sql("SELECT $_[0] FROM rl_redis_info()"); }

# ---- a rolled-back transaction gives everything back ----

for my $algo (@algos)
{
	my $call = "'tx:$algo', '$algo', 5, '1 hour'";
	is( last_of(qq{
		BEGIN;
		SELECT rl_allow($call) FROM generate_series(1, 3);
		ROLLBACK;
		SELECT (rl_check($call, cost => 0)).remaining;
	}), '5', "$algo: a rolled-back transaction's 3 units are back in Redis");
	is( last_of(qq{
		BEGIN;
		SELECT rl_allow($call) FROM generate_series(1, 2);
		SAVEPOINT s;
		SELECT rl_allow($call) FROM generate_series(1, 2);
		ROLLBACK TO SAVEPOINT s;
		COMMIT;
		SELECT (rl_check($call, cost => 0)).remaining;
	}), '3', "$algo: only the rolled-back savepoint's 2 units come back");
}

# the state in Redis itself: fixed_window's count
my $dboid = sql("SELECT oid FROM pg_database WHERE datname = 'postgres'");
is($redis->cli('HGET', "rl:{$dboid:fw:tx:fixed_window}", 'c'),
	'2', 'the count stored in Redis is the committed calls only');
# a sliding log entry emptied by the refund is removed, not left at cost 0
sql(q{
	BEGIN;
	SELECT rl_allow('log1', 'sliding_window_log', 5, '1 hour');
	ROLLBACK;
});
is($redis->cli('LLEN', "rl:{$dboid:swl:log1}:log"),
	'0', 'a refunded newest log entry leaves the list');

# denied calls, cost 0, and committed work are not refunded
is( last_of(q{
	BEGIN;
	SELECT rl_allow('deny', 'fixed_window', 2, '1 hour') FROM generate_series(1, 4);
	COMMIT;
	BEGIN;
	SELECT rl_allow('deny', 'fixed_window', 2, '1 hour');
	ROLLBACK;
	SELECT (rl_check('deny', 'fixed_window', 2, '1 hour', cost => 0)).remaining;
}), '0', 'a denied call gives nothing back');

# ---- quota triggers with a Redis policy ----

sql(q{
	INSERT INTO rl_policy (name, algo, "limit", per, backend)
	VALUES ('orders_redis', 'token_bucket', 5, '1 day', 'redis');
	CREATE TABLE orders (id serial, tenant int);
	CREATE TRIGGER quota BEFORE INSERT ON orders FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('orders_redis', 'tenant');
});
my ($ret, $out, $err) = $node->psql(
	'postgres', q{
	SET ratelimit.refund_on_rollback = off;
	BEGIN;
	INSERT INTO orders (tenant) SELECT 1 FROM generate_series(1, 4);
	ROLLBACK;
	DO $$
	BEGIN
		FOR i IN 1 .. 10 LOOP
			INSERT INTO orders (tenant) VALUES (1);
		END LOOP;
	EXCEPTION WHEN SQLSTATE 'PT429' THEN
		RAISE NOTICE 'denied';
	END $$;
});
is(sql('SELECT count(*) FROM orders'), '0',
	'the loop hit the quota and rolled back its inserts');
is( sql(q{
	SELECT count(*) FROM generate_series(1, 10)
	WHERE rl_allow('1', policy => 'orders_redis')
}), '5', 'trigger refunds (always on): the whole quota is still there');

# ---- hybrid: Redis and the local pre-check both get the units back ----

is( last_of(q{
	SET ratelimit.backend = hybrid;
	SET ratelimit.hybrid_multiple = 1;
	BEGIN;
	SELECT rl_allow('hy', 'fixed_window', 3, '1 hour') FROM generate_series(1, 3);
	ROLLBACK;
	SELECT count(*) FROM generate_series(1, 5)
	WHERE rl_allow('hy', 'fixed_window', 3, '1 hour');
}), '3', 'hybrid: after the rollback both layers admit the full limit again');
is($redis->cli('HGET', "rl:{$dboid:fw:hy}", 'c'), '3', 'hybrid: Redis counts 3');

# ---- batching: the units go back to the lease ----

my $calls = info('calls');
is( last_of(q{
	SET ratelimit.redis_batch = 10;
	BEGIN;
	SELECT rl_allow('lease', 'fixed_window', 100, '1 hour') FROM generate_series(1, 4);
	ROLLBACK;
	SELECT count(*) FROM generate_series(1, 10)
	WHERE rl_allow('lease', 'fixed_window', 100, '1 hour');
}), '10', 'batching: 10 calls admitted after the rollback');
is(info('calls') - $calls, 1,
	'the 4 refunded units went back to the lease: one Redis call for 14 calls');

# ---- Redis stopped at the rollback ----

my $bg = $node->background_psql('postgres', on_error_stop => 0);
$bg->query_safe('BEGIN');
$bg->query_safe("SELECT rl_allow('stop', 'token_bucket', 5, '1 hour')");
$redis->signal('STOP');
my $t0 = time;
$bg->query('ROLLBACK');
my $took = time - $t0;
$redis->signal('CONT');
like($bg->{stderr}, qr/Redis is unavailable/,
	'a refund Redis cannot take: a warning says why');
unlike($bg->{stderr}, qr/ERROR/, 'and the rollback raises no error');
cmp_ok($took, '<', 5,
	sprintf('the refund gave up within the command timeout (%.2f s)', $took));
$bg->{stderr} = '';
is($bg->query_safe('SELECT 1'), '1', 'the session goes on');
$bg->quit;

# wait for the breaker to close again
$node->poll_query_until('postgres',
	"SELECT rl_allow('probe', 'fixed_window', 1000000)") or die;
# Redis still had the refund in its socket buffer when the connection was
# dropped: it may run it once resumed, but nothing sends it twice
like(sql("SELECT (rl_check('stop', 'token_bucket', 5, '1 hour', cost => 0)).remaining"),
	qr/^[45]$/, 'a refund that timed out is given at most once');

# ---- differential: random sequences, refunds included, both backends ----

my @sql = ("SET extra_float_digits = 3;", "SET timezone = 'UTC';", 'BEGIN;');
my @described;
my $t = 1_800_000_000_000_000;
for my $algo (@algos)
{
	my %keys;
	my $made = 0;
	while ($made < $ncalls)
	{
		# a block of 1 to 4 calls, rolled back together 40% of the time: a
		# refund then meets a state later calls moved on (a window rolled,
		# a bucket refilled)
		my $rollback = rand() < 0.4;
		push @sql, 'SAVEPOINT s;' if $rollback;
		for (1 .. 1 + int(rand(4)))
		{
			$made++;
			my $k = "d:$algo:" . int(rand(3));
			my $s = $keys{$k} //= {
				L => 1 + int(rand(rand() < 0.5 ? 5 : 1000)),
				W => (1000, 250_000, 1_000_000, 3_600_000_000)[ int(rand(4)) ],
			};
			$s->{B} = 1 + int(rand(2 * $s->{L}))
			  if $algo =~ /bucket/ && rand() < 0.3;
			my $cap = $s->{B} // $s->{L};
			my $c = rand() < 0.1 ? 0 : 1 + int(rand(rand() < 0.8 ? 2 : $cap));
			$c = $cap if $c > $cap;
			my $y = rand;
			$t += $y < 0.3 ? 0
			  : $y < 0.7 ? int(rand($s->{W} / 3))
			  : $y < 0.8 ? -int(rand($s->{W}))
			  : int(rand(2 * $s->{W}));
			my $args = sprintf(
				"'%s', '%s', %d, per => interval '%d microseconds', cost => %d%s, "
				  . "at => to_timestamp(0) + interval '%d microseconds'",
				$k, $algo, $s->{L}, $s->{W}, $c,
				defined $s->{B} ? ", burst => $s->{B}" : '', $t);
			push @described, ($rollback ? 'rolled back: ' : '') . "rl_check($args)";
			for my $backend (qw(local redis))
			{
				push @sql, "SET ratelimit.backend = $backend;",
				  "SELECT allowed, remaining, retry_after, "
				  . "(extract(epoch from reset_at) * 1000000)::numeric, delay "
				  . "FROM rl_check($args);";
			}
		}
		push @sql, 'ROLLBACK TO SAVEPOINT s; RELEASE SAVEPOINT s;' if $rollback;
	}
}
push @sql, 'COMMIT;';
($ret, $out, $err) =
  $node->psql('postgres', join("\n", @sql, ''), on_error_stop => 1);
is($ret, 0, 'every call ran on both backends') or diag($err);
my @lines = grep { /\|/ } split /\n/, $out;
is(scalar @lines, 2 * scalar @described, 'one row per call and backend');
my $mismatch = RlRedis::mismatches(\@described, \@lines);
is($mismatch, 0,
	scalar(@described) . ' calls, 40% of blocks of them rolled back: both backends answer identically');
my $allowed_rolled = 0;
for my $i (0 .. $#described)
{
	$allowed_rolled++ if $described[$i] =~ /^rolled back/ && $lines[ 2 * $i ] =~ /^t\|/;
}
ok($allowed_rolled > $ncalls / 2, "$allowed_rolled admitted calls were refunded");

$node->stop;
$redis->stop;
done_testing();
