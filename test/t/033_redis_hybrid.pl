# Two PostgreSQL servers sharing one Redis: the redis backend enforces one
# global limit across them; hybrid puts a local pre-check of
# ratelimit.hybrid_multiple times the limit in front of Redis, so a flood
# stops reaching Redis; with Redis down, hybrid and fail_mode local keep the
# pre-check's answer.

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

my @pg;
for my $name (qw(hybrid_a hybrid_b))
{
	my $node = RlRedis::pg_node($name, qq{
ratelimit.backend = hybrid
ratelimit.hybrid_multiple = 2
ratelimit.redis_nodes = '${\ $redis->addr}'
ratelimit.redis_namespace = 'shared'
ratelimit.redis_command_timeout = 2000
ratelimit.redis_probe_interval = 100
});
	$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
	push @pg, $node;
}
my ($a, $b) = @pg;

sub calls
{
	my ($node, $n, $key, $limit) = @_;
	return $node->safe_psql('postgres',
		"SELECT string_agg(rl_allow('$key', 'fixed_window', $limit, '1 hour')::text, ',') "
		  . "FROM generate_series(1, $n)");
}

sub redis_calls
{
	my ($node) = @_;
	return $node->safe_psql('postgres', 'SELECT calls FROM rl_redis_info()');
}

# one global limit: 6 per hour over two servers
is(calls($a, 4, 'global', 6), 'true,true,true,true', 'server a: 4 of 6');
is(calls($b, 4, 'global', 6), 'true,true,false,false',
	'server b: the last 2 of the global 6 (namespace shared)');

# a flood on one server: Redis sees only up to twice the limit
my $before = redis_calls($a);
is(calls($a, 20, 'flood', 5),
	join(',', ('true') x 5, ('false') x 15),
	'hybrid admits exactly what Redis admits');
is(redis_calls($a) - $before, 10,
	'the local pre-check (2 x 5) keeps the other 10 calls away from Redis');

# the remaining decisions come from Redis while the pre-check admits
is( $a->safe_psql(
		'postgres',
		"SELECT remaining FROM rl_check('rem', 'token_bucket', 10, '1 hour', cost => 3)"),
	'7',
	'what an admitted call reports comes from Redis');

# Redis down, fail_mode local: the pre-check's answer stands
$redis->kill9;
is( $a->safe_psql(
		'postgres',
		"SET ratelimit.fail_mode = local; "
		  . "SELECT string_agg(rl_allow('down', 'fixed_window', 2, '1 hour')::text, ',') "
		  . "FROM generate_series(1, 5)"),
	'true,true,true,true,false',
	'Redis down: fail_mode local keeps the pre-check (2 x 2)');
is( $a->safe_psql(
		'postgres',
		"SET ratelimit.fail_mode = closed; "
		  . "SELECT rl_allow('down2', 'fixed_window', 2, '1 hour')"),
	'f',
	'Redis down: fail_mode closed denies what the pre-check admitted');

$_->stop for @pg;
$redis->stop;
done_testing();
