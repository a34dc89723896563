# Per-key overrides and the penalty box on the Redis backend: an override's
# limit applies to the state in Redis and keeps its usage; a block and an
# unlimited key are answered without Redis; the penalty box is kept in
# Redis (so another server's session sees it) and rl_reset empties it
# there; rl_adjust charges Redis.

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
my $conf = qq{
ratelimit.redis_nodes = '${\ $redis->addr}'
ratelimit.redis_command_timeout = 5000
ratelimit.fail_mode = closed
ratelimit.redis_namespace = 'shared'
};
my $node = RlRedis::pg_node('overrides_redis', $conf);
my $other = RlRedis::pg_node('overrides_redis_other', $conf);
for my $n ($node, $other)
{
	$n->safe_psql('postgres', q{
		CREATE EXTENSION ratelimit;
		INSERT INTO rl_policy (name, algo, "limit", per, backend, block_duration)
		VALUES ('orders', 'fixed_window', 3, '1 hour', 'redis', '2 hours');
	});
}

sub sql
{
	my ($n, $sql) = @_;
	return $n->safe_psql('postgres', "SET timezone = 'UTC'; $sql");
}

my $at = "at => '2026-03-02 09:00:00+00'";

# an override raises the limit of the state in Redis; lowering it keeps
# the usage
sql($node, q{INSERT INTO rl_override (policy, key, "limit") VALUES ('orders', 'tenant:42', 5)});
is(sql($node, "SELECT string_agg(rl_allow('tenant:42', 'orders', $at)::text, ',') FROM generate_series(1, 4)"),
	'true,true,true,true', 'raised to 5: four admitted');
is(sql($other, "SELECT remaining FROM rl_check('tenant:42', 'orders', $at, cost => 0)"),
	'0', 'the other server, without the override: 4 used of its 3');
sql($node, q{UPDATE rl_override SET "limit" = 10 WHERE key = 'tenant:42'});
is(sql($node, "SELECT remaining FROM rl_check('tenant:42', 'orders', $at, cost => 0)"),
	'6', 'raised to 10: the 4 used are kept');

# blocked and unlimited keys do not reach Redis
my $calls = sql($node, 'SELECT calls FROM rl_redis_info()');
sql($node, "SELECT rl_block('tenant:7', 'orders')");
sql($node, q{INSERT INTO rl_override (policy, key, unlimited) VALUES ('orders', 'monitor', true)});
is(sql($node, "SELECT allowed FROM rl_check('tenant:7', 'orders', $at)") . ' '
	  . sql($node, "SELECT allowed FROM rl_check('monitor', 'orders', $at)"),
	'f t', 'blocked: denied; unlimited: admitted');
is(sql($node, 'SELECT calls FROM rl_redis_info()'), $calls,
	'neither asked Redis');

# the penalty box is in Redis: a denial on one server boxes the key on
# the other; rl_reset there empties it
is(sql($node, "SELECT string_agg(rl_allow('u', 'orders', $at)::text, ',') FROM generate_series(1, 4)"),
	'true,true,true,false', 'the fourth call denied');
is(sql($other, "SELECT allowed, retry_after FROM rl_check('u', 'orders', at => '2026-03-02 10:00:00+00')"),
	'f|3600', 'the next window: still in the box, on the other server too');
is(sql($other, "SELECT rl_reset('u', policy => 'orders')"), '2',
	'rl_reset drops the state and the box in Redis');
is(sql($node, "SELECT allowed FROM rl_check('u', 'orders', at => '2026-03-02 10:00:00+00')"),
	't', 'out of the box');

# rl_adjust charges the state in Redis, seen from the other server
is(sql($node, "SELECT remaining FROM rl_adjust('v', 'orders', 2, $at)"), '1',
	'charged 2 of 3');
is(sql($other, "SELECT allowed, remaining FROM rl_check('v', 'orders', $at, cost => 0)"),
	't|1', 'the other server sees the charge');
# several limits in one policy, all or nothing in Redis
for my $n ($node, $other)
{
	sql($n, q{
		INSERT INTO rl_policy (name, algo, "limit", per, burst, backend)
		VALUES ('search', 'token_bucket', 10, '1 second', 20, 'redis');
		INSERT INTO rl_policy_limit (policy, name, algo, "limit", per)
		VALUES ('search', 'daily', 'fixed_window', 25, '1 day');
	});
}
is(sql($node, "SELECT count(*) FILTER (WHERE rl_allow('s', 'search', $at, cost => 10)) FROM generate_series(1, 2)"),
	'2', 'two calls of 10: the burst of 20 spent');
is(sql($other, "SELECT allowed, \"limit\", remaining FROM rl_check('s', 'search', at => '2026-03-02 09:00:01+00', cost => 6)"),
	'f|25|5', 'a second later: the day binds, 5 left, on the other server');
is(sql($node, "SELECT \"limit\", remaining FROM rl_check('s', 'search', at => '2026-03-02 09:00:01+00', cost => 0)"),
	'25|5', 'the denial took nothing from the day');
is(sql($node, "SELECT remaining FROM rl_check('s', 'search', at => '2026-03-02 09:00:01+00', cost => 5)"),
	'0', 'five more: the day spent');
is(sql($node, "SELECT rl_reset('s', policy => 'search')"), '2',
	'rl_reset drops both limits in Redis');

is(sql($node, 'SELECT failures FROM rl_redis_info()'), '0', 'no Redis call failed');

done_testing();
