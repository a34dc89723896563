# Refunds on the Redis backend apply only to the incarnation of the state
# they consumed from.  A transaction consumes (a direct call with
# ratelimit.refund_on_rollback, a quota trigger, an all-or-nothing check),
# then the key's state goes (rl_reset by an administrator, or its TTL) and
# is created again by others who use the full limit; the first transaction
# then rolls back: nothing may be given back to the new state, so exactly
# the limit is admitted.  Also: the all-or-nothing script's own refunds, a
# state written before incarnations (0.2.0), and leases replaced by
# newer ones.

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
my $node = RlRedis::pg_node('redis_incarnation', qq{
ratelimit.backend = redis
ratelimit.redis_nodes = '${\ $redis->addr}'
ratelimit.redis_command_timeout = 2000
ratelimit.refund_on_rollback = on
ratelimit.fail_mode = closed
log_statement = none
});
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
my $dboid = $node->safe_psql('postgres',
	"SELECT oid FROM pg_database WHERE datname = 'postgres'");

sub sql { return $node->safe_psql('postgres', $_[0]); }
sub info { return sql("SELECT $_[0] FROM rl_redis_info()"); }

my %code = (
	fixed_window           => 'fw',
	sliding_window_log     => 'swl',
	sliding_window_counter => 'swc',
	token_bucket           => 'tb',
	leaky_bucket           => 'lb');

# the state's keys in Redis
sub keys_of
{
	my ($key, $algo) = @_;
	my $h = "rl:{$dboid:$code{$algo}:$key}";
	return $algo eq 'sliding_window_log' ? ($h, "$h:log") : ($h);
}

# Let the state's keys expire now (PEXPIRE 1 ms), and wait until they are
# gone.
sub expire
{
	my ($key, $algo) = @_;
	my @k = keys_of($key, $algo);
	$redis->cli('PEXPIRE', $_, 1) for @k;
	for (1 .. 1000)
	{
		return if $redis->cli('EXISTS', @k) eq '0';
	}
	die "@k did not expire";
}

# ---- direct calls: reset, or expiry, between the call and the rollback ----

# every call at one explicit time: windows and buckets stay where they are,
# so only the incarnation tells the states apart
my $at = "at => '2030-01-01 00:00:00 UTC'";
for my $algo (sort keys %code)
{
	for my $how ('reset', 'expiry')
	{
		my $key = "$how:$algo";
		my $call = "rl_allow('$key', '$algo', 3, '1 hour', $at)";
		my $bg = $node->background_psql('postgres');
		$bg->query_safe('BEGIN');
		is($bg->query_safe("SELECT $call"), 't',
			"$algo, $how: a transaction consumes");
		if ($how eq 'reset')
		{
			is(sql("SELECT rl_reset('$key', '$algo')"), '1',
				"$algo, $how: an administrator resets the key");
		}
		else
		{
			expire($key, $algo);
		}
		is(sql("SELECT string_agg(${call}::text, ',') FROM generate_series(1, 4)"),
			'true,true,true,false', "$algo, $how: others use the full limit");
		$bg->query_safe('ROLLBACK');
		$bg->quit;
		is(sql("SELECT $call"), 'f',
			"$algo, $how: the rollback gave nothing to the new state");
		is(sql("SELECT remaining FROM rl_check('$key', '$algo', 3, '1 hour', cost => 0, $at)"),
			'0', "$algo, $how: which has nothing left");
	}
}

# the refund of an untouched state still works (same incarnation)
is( (split /\n/, sql(qq{
	BEGIN;
	SELECT rl_allow('same', 'token_bucket', 3, '1 hour', $at);
	ROLLBACK;
	SELECT remaining FROM rl_check('same', 'token_bucket', 3, '1 hour', cost => 0, $at);
}))[-1], '3', 'a rollback still gives back to the state it consumed from');

# ---- a quota trigger ----

sql(q{
	INSERT INTO rl_policy (name, algo, "limit", per, backend)
	VALUES ('orders_redis', 'token_bucket', 3, '1 day', 'redis');
	CREATE TABLE orders (id serial, tenant int);
	CREATE TRIGGER quota BEFORE INSERT ON orders FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('orders_redis', 'tenant');
});
{
	my $bg = $node->background_psql('postgres');
	$bg->query_safe('BEGIN; INSERT INTO orders (tenant) VALUES (1)');
	is(sql("SELECT rl_reset('1', policy => 'orders_redis')"), '1',
		'trigger: an administrator resets the tenant');
	sql('INSERT INTO orders (tenant) VALUES (1)') for 1 .. 3;
	my ($ret, $out, $err) =
	  $node->psql('postgres', 'INSERT INTO orders (tenant) VALUES (1)');
	like($err, qr/rate limit exceeded/, 'trigger: others used the full quota');
	$bg->query_safe('ROLLBACK');
	$bg->quit;
	($ret, $out, $err) =
	  $node->psql('postgres', 'INSERT INTO orders (tenant) VALUES (1)');
	like($err, qr/rate limit exceeded/,
		'trigger: after the rollback the quota is still used up');
	is(sql('SELECT count(*) FROM orders'), '3',
		'trigger: exactly the quota committed');
}

# ---- all or nothing ----

sql(q{
	INSERT INTO rl_policy (name, algo, "limit", per, backend) VALUES
		('aon_fw', 'fixed_window', 2, '1 hour', 'redis'),
		('aon_swl', 'sliding_window_log', 2, '1 hour', 'redis');
});
{
	my $check = "rl_allow_all(ARRAY['a', 'b'], ARRAY['aon_fw', 'aon_swl'], at => '2030-01-01 00:00:00 UTC')";
	my $bg = $node->background_psql('postgres');
	$bg->query_safe('BEGIN');
	is($bg->query_safe("SELECT $check"), 't', 'all or nothing: both consume');
	is(sql("SELECT rl_reset('a', policy => 'aon_fw')"), '1',
		'all or nothing: an administrator resets one key');
	is(sql("SELECT string_agg(rl_allow('a', policy => 'aon_fw', $at)::text, ',') "
			  . "FROM generate_series(1, 3)"),
		'true,true,false', 'all or nothing: others use its full limit');
	$bg->query_safe('ROLLBACK');
	$bg->quit;
	is(sql("SELECT remaining FROM rl_check('a', policy => 'aon_fw', cost => 0, $at)"),
		'0', 'all or nothing: the reset key got nothing back');
	is(sql("SELECT remaining FROM rl_check('b', policy => 'aon_swl', cost => 0, $at)"),
		'2', 'all or nothing: the other key got its unit back');

	# the script's own refunds: b admits, a is denied, b gets its unit back
	is(sql("SELECT $check"), 'f', 'all or nothing: one key denied');
	is(sql("SELECT remaining FROM rl_check('b', policy => 'aon_swl', cost => 0, $at)"),
		'2', "all or nothing: the script's own refund still reaches the admitted key");
}

# ---- states written before incarnations ----

{
	my ($h) = keys_of('old', 'fixed_window');
	my $call = "rl_allow('old', 'fixed_window', 3, '1 hour', $at)";
	sql("SELECT $call");
	$redis->cli('HDEL', $h, 'i');    # as 0.2.0 left it
	is( (split /\n/, sql(qq{
		BEGIN;
		SELECT $call;
		ROLLBACK;
		SELECT remaining FROM rl_check('old', 'fixed_window', 3, '1 hour', cost => 0, $at);
	}))[-1], '2',
		'a state from 0.2.0 keeps its count and, given an incarnation by the call, takes its refund');
	like($redis->cli('HGET', $h, 'i'), qr/^\d{16}$/,
		'its incarnation is Redis TIME in microseconds');

	my $bg = $node->background_psql('postgres');
	$bg->query_safe('BEGIN');
	$bg->query_safe("SELECT $call");
	$redis->cli('HDEL', $h, 'i');    # written again by a 0.2.0 server
	$bg->query_safe('ROLLBACK');
	$bg->quit;
	is(sql("SELECT remaining FROM rl_check('old', 'fixed_window', 3, '1 hour', cost => 0, $at)"),
		'1', 'a refund to a state of unknown incarnation gives nothing back');
}

# ---- leases: a lease replaced by a newer one is another incarnation ----

{
	# 6 calls in a transaction: 5 from the first lease of 5, the 6th takes
	# a second; after the rollback only the 6th goes back, to the second
	my $calls = info('calls');
	my $out = (split /\n/, sql(q{
		SET ratelimit.redis_batch = 5;
		BEGIN;
		SELECT count(*) FROM generate_series(1, 6)
		WHERE rl_allow('lease', 'token_bucket', 100, '1 hour');
		ROLLBACK;
		SELECT count(*) FROM generate_series(1, 6)
		WHERE rl_allow('lease', 'token_bucket', 100, '1 hour');
	}))[-1];
	is($out, '6', 'leases: the calls after the rollback are admitted');
	is(info('calls') - $calls, 3,
		'leases: the second lease got back only its own call (5 local calls, then a third lease)');
}

is(info('failures'), '0', 'no call failed');

$node->stop;
$redis->stop;
done_testing();
