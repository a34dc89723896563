# Load shedding by priority on the Redis backend (docs/quotas.md, "Load
# shedding"): with a 20% reserve of a limit of 10, sheddable calls stop at
# 80% and critical calls reach 100%, normal ones stopping at 90%, for every
# rate algorithm, decided by the scripts (their headroom argument): with
# backend redis and hybrid, with batching on (a call with a headroom is
# never batched), under a policy and under a policy of several limits (the
# all-or-nothing script).  What remains for a caller is what is left above
# its headroom, as on the local store (test/sql/priority.sql); rl_stats
# counts the shed denials, a concurrency limit's leases' too.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use RlRedis;
use RlShed;

my $redis = RlRedis->new;
my $node = RlRedis::pg_node('redis_priority', qq{
ratelimit.redis_nodes = '${\ $redis->addr}'
ratelimit.redis_command_timeout = 5000
ratelimit.fail_mode = closed
log_statement = none
});
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	-- admitted calls of n in a row at one time, limit 10, reserve 20%
	CREATE FUNCTION admitted(k text, algo text, prio text, n int)
	RETURNS bigint LANGUAGE sql AS $$
		SELECT count(*) FILTER (WHERE rl_allow(k, algo, 10, '1 hour',
			at => '2026-01-01 00:00:00+00', priority => prio, reserve => 0.2))
		FROM generate_series(1, n)
	$$;
	CREATE FUNCTION admitted_policy(k text, pol text, prio text, n int)
	RETURNS bigint LANGUAGE sql AS $$
		SELECT count(*) FILTER (WHERE rl_allow(k, pol,
			at => '2026-01-01 00:00:00+00', priority => prio))
		FROM generate_series(1, n)
	$$;
});

my @algos = qw(fixed_window sliding_window_log sliding_window_counter
  token_bucket leaky_bucket);

# sheddable, then normal, then critical calls on one key: 8, 1, 1, then
# nothing more; and critical calls alone reach 10
sub ladder
{
	my ($setup, $tag) = @_;
	for my $algo (@algos)
	{
		my $k = "$tag:$algo";
		is( $node->safe_psql(
				'postgres', qq{$setup
			SELECT admitted('$k', '$algo', 'sheddable', 12),
				admitted('$k', '$algo', 'normal', 12),
				admitted('$k', '$algo', 'critical', 12),
				admitted('$k', '$algo', NULL, 1),
				admitted('$k:c', '$algo', 'critical', 12)}),
			'8|1|1|0|10',
			"$tag, $algo: sheddable calls stop at 80%, normal ones at 90%, critical ones reach 100%"
		);
	}
	return;
}

ladder("SET ratelimit.backend = redis;", 'redis');
# hybrid's local pre-check counts every attempt (37 here) against its
# multiple of the limit: room for them all, so that Redis decides
ladder("SET ratelimit.backend = hybrid; SET ratelimit.hybrid_multiple = 10;",
	'hybrid');
ladder("SET ratelimit.backend = redis; SET ratelimit.redis_batch = 5;",
	'batched');

# the decisions were Redis's: the keys are there, nothing failed
ok($redis->cli('EXISTS', "rl:{${\ $node->safe_psql('postgres',
	q{SELECT oid FROM pg_database WHERE datname = 'postgres'})}:fw:redis:fixed_window}") == 1,
	'the fixed window of the first ladder is in Redis');

# under a policy (its reserve column), and what remains for each caller
$node->safe_psql('postgres', q{
	INSERT INTO rl_policy (name, algo, "limit", per, reserve, backend)
	SELECT 'p_' || a, a, 10, '1 hour', 0.2, 'redis'
	FROM unnest(ARRAY['fixed_window', 'sliding_window_log',
		'sliding_window_counter', 'token_bucket', 'leaky_bucket']) a;
});
for my $algo (@algos)
{
	is( $node->safe_psql(
			'postgres', qq{
		SELECT admitted_policy('k', 'p_$algo', 'sheddable', 12),
			(SELECT remaining FROM rl_check('k', 'p_$algo', cost => 0,
				at => '2026-01-01 00:00:00+00', priority => 'critical')),
			admitted_policy('k', 'p_$algo', 'critical', 12)}),
		'8|2|2',
		"policy on Redis, $algo: 8 sheddable, 2 left for critical calls, which take them"
	);
}

# shed denials are counted apart, from what Redis reports left: per
# policy 8 sheddable calls and a look admitted, 4 shed; 2 critical calls
# admitted, 10 denied by the limit itself (not shed)
is( $node->safe_psql(
		'postgres', q{
	SELECT string_agg(format('%s %s/%s/%s', algo, allowed, denied, shed),
		', ' ORDER BY algo)
	FROM rl_stats WHERE policy LIKE 'p\_%'}),
	join(', ', map { "$_ 11/14/4" } sort @algos),
	'rl_stats counts the shed denials on Redis (allowed/denied/shed)');

# several limits (the all-or-nothing script): the reserve applies to each,
# here the hourly 10 binds
$node->safe_psql('postgres', q{
	INSERT INTO rl_policy (name, algo, "limit", per, reserve, backend)
	VALUES ('multi', 'sliding_window_counter', 100, '1 day', 0.2, 'redis');
	INSERT INTO rl_policy_limit (policy, name, algo, "limit", per)
	VALUES ('multi', 'hourly', 'token_bucket', 10, '1 hour');
});
is( $node->safe_psql(
		'postgres', q{
	SELECT admitted_policy('m', 'multi', 'sheddable', 12),
		(SELECT remaining FROM rl_check('m', 'multi', cost => 0,
			at => '2026-01-01 00:00:00+00', priority => 'sheddable')),
		admitted_policy('m', 'multi', 'critical', 12)}),
	'8|0|2',
	'a policy of several limits on Redis: each keeps its reserve');

# a concurrency limit's leases: a call its headroom alone refused (a slot
# free under the limit, nobody waiting ahead) is counted as shed, whether
# it waited for the slot or not; one refused with every slot held is not
$node->safe_psql('postgres', q{
	INSERT INTO rl_policy (name, algo, "limit", reserve, backend)
	VALUES ('ps', 'concurrency', 2, 0.5, 'redis');
});

RlShed::slot_shed_counts($node, 'ps', 'lease');

is($node->safe_psql('postgres', 'SELECT failures FROM rl_redis_info()'),
	'0', 'no Redis call failed');

$node->stop;
$redis->stop;
done_testing();
