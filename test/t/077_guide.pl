# The examples of docs/guide.md that need a Redis server, each verbatim
# and in the guide's order after a comment "# guide: SECTION"
# (test/guide_check.pl, run by the regression suite, checks that), with
# the results the guide shows.  One Redis server and a PostgreSQL node:
# failing open or closed while Redis is down, a restart that loses the
# state, hybrid's pre-check and batching.  A Redis Cluster of three
# masters and a second node: a key split over the masters, an
# all-or-nothing check refused, and the one-by-one check that gives back.
# The rest of the guide runs in test/sql/guide.sql.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlRedis;
use RlHarness;

my $redis = RlRedis->new;
my $node = RlRedis::pg_node('guide', qq{
ratelimit.redis_nodes = '${\ $redis->addr}'
timezone = 'UTC'
log_statement = none
});
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

# Run an example on a node: its output lines (psql -At), and its stderr.
sub example
{
	my ($on, $sql) = @_;
	my ($ret, $out, $err) = $on->psql('postgres', $sql);
	return ($out, $err);
}

# Append an example's settings to a node's postgresql.conf, reload, and
# wait until new sessions see them.
sub settings
{
	my ($on, $conf) = @_;
	$on->append_conf('postgresql.conf', $conf);
	$on->reload;
	for my $line (split /\n/, $conf)
	{
		my ($name, $value) = $line =~ /^(\S+) = (\S+)$/ or die "$line";
		$on->poll_query_until('postgres',
			"SELECT current_setting('$name') = '$value'")
		  or die "$name did not reach new sessions";
	}
	return;
}

# a policy that only Redis can admit, to tell when Redis decides again
$node->safe_psql('postgres', q{
	INSERT INTO rl_policy (name, algo, "limit", per, backend, fail_mode)
	VALUES ('redis_decides', 'fixed_window', 1000000, '1 hour', 'redis', 'closed')});

my ($out, $err);

# guide: Failing open or closed
my $fail_policies = <<'SQL';
INSERT INTO rl_policy (name, algo, "limit", per, backend, fail_mode) VALUES
    ('payouts', 'sliding_window_log', 10, '1 hour', 'redis', 'closed'),
    ('catalog_reads', 'token_bucket', 600, '1 minute', 'redis', 'open'),
    ('search', 'sliding_window_counter', 100, '1 minute', 'redis', 'local');
SQL
my $redis_down = <<'SQL';
-- Redis is down
SELECT policy, r.allowed, r.remaining, r.retry_after
FROM unnest(ARRAY['payouts', 'catalog_reads', 'search']) AS policy,
     LATERAL rl_check('user:7', policy, at => '2026-03-02 09:00:00+00') AS r;
-- payouts       | f |   0 | 3600
-- catalog_reads | t | 599 |    0
-- search        | t |  99 |    0
-- WARNING:  ratelimit: Redis is unavailable: could not connect to Redis at ...
SQL
my $watch = <<'SQL';
SELECT policy, allowed, denied, failed_open, failed_closed FROM rl_stats
WHERE datname = current_database() AND policy IN ('payouts', 'catalog_reads', 'search')
ORDER BY policy;
-- catalog_reads | 1 | 0 | 1 | 0
-- payouts       | 0 | 1 | 0 | 1
-- search        | 1 | 0 | 0 | 0
SELECT breaker_open, failures > 0 AS failed, last_error FROM rl_redis_info();
-- t | t | could not connect to Redis at ...
SQL

$node->safe_psql('postgres', $fail_policies);
$redis->stop;
($out, $err) = example($node, $redis_down);
is( $out,
	"payouts|f|0|3600\ncatalog_reads|t|599|0\nsearch|t|99|0",
	'Redis down: closed refuses for one window, open admits, local decides here');
like(
	$err,
	qr/WARNING:  ratelimit: Redis is unavailable: could not connect to Redis at /,
	'with the warning the guide shows');
my $port = $redis->port;
($out, $err) = example($node, $watch);
is( $out,
	"catalog_reads|1|0|1|0\npayouts|0|1|0|1\nsearch|1|0|0|0\n"
	  . "t|t|could not connect to Redis at 127.0.0.1:$port: Connection refused",
	'rl_stats counts what each fail mode decided; rl_redis_info says why');

$redis->start;
$node->poll_query_until('postgres',
	"SELECT rl_allow('probe', 'redis_decides')")
  or die 'Redis does not decide again';

# guide: What a Redis failover can lose
my $exports_used = <<'SQL';
INSERT INTO rl_policy (name, algo, "limit", per, backend)
VALUES ('exports_shared', 'fixed_window', 3, '1 day', 'redis');

SELECT rl_allow('tenant:9', 'exports_shared', at => '2026-03-02 09:00:00+00')
FROM generate_series(1, 4);
-- t, t, t, f
SQL
my $exports_after = <<'SQL';
SELECT remaining FROM rl_check('tenant:9', 'exports_shared', at => '2026-03-02 10:00:00+00', cost => 0);
-- 3: the day's quota is whole again
SQL

is($node->safe_psql('postgres', $exports_used), "t\nt\nt\nf",
	'three exports, the fourth refused');
is($node->safe_psql('postgres', $exports_after), '0',
	'(before the restart: nothing left)');
$redis->stop;
$redis->start;
is($node->safe_psql('postgres', $exports_after), '3',
	'after a restart without persistence the day\'s quota is whole again');

# guide: Hot keys on one Redis Cluster shard
my $flood = <<'SQL';
INSERT INTO rl_policy (name, algo, "limit", per, backend)
VALUES ('partner_feed', 'fixed_window', 5, '1 minute', 'hybrid');

CREATE TEMP TABLE before_flood AS SELECT calls FROM rl_redis_info();
SELECT count(*) FILTER (WHERE rl_allow('partner:3', 'partner_feed', at => '2026-03-02 09:00:00+00'))
       AS admitted
FROM generate_series(1, 1000);
-- 5
SELECT r.calls - b.calls AS sent_to_redis FROM rl_redis_info() r, before_flood b;
-- 10
SQL
my $batch_settings = <<'CONF';
ratelimit.backend = redis
ratelimit.redis_batch = 10
CONF
my $batch = <<'SQL';
CREATE TEMP TABLE before_batch AS SELECT calls, batched FROM rl_redis_info();
SELECT count(*) FILTER (WHERE rl_allow('tenant:42', 'token_bucket', 1000, '1 hour')) AS admitted
FROM generate_series(1, 100);
-- 100
SELECT r.calls - b.calls AS sent_to_redis, r.batched - b.batched AS decided_here
FROM rl_redis_info() r, before_batch b;
-- 10 | 90
SQL

is($node->safe_psql('postgres', $flood), "5\n10",
	'hybrid: a flood of 1,000 calls sends Redis twice the limit');
settings($node, $batch_settings);
is($node->safe_psql('postgres', $batch), "100\n10|90",
	'batching: 100 calls from 10 round trips');

# The rest of the section on a Redis Cluster, with the settings the guide
# has given so far.
my @masters = RlRedis::cluster(3);
my $cnode = RlRedis::pg_node('guide_cluster', qq{
ratelimit.redis_nodes = '${\ join(',', map { $_->addr } @masters)}'
timezone = 'UTC'
log_statement = none
});
$cnode->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
settings($cnode, $batch_settings);

my $split = <<'SQL';
-- tenant 42's 1,000 calls a second as 4 keys of 250, by user
SELECT 'tenant:42:part:' || user_id % 4 AS key,
       count(*) FILTER (WHERE rl_allow('tenant:42:part:' || user_id % 4, 'token_bucket', 250, '1 second',
                                       at => '2026-03-02 09:00:00+00')) AS admitted
FROM generate_series(1, 1200) AS user_id
GROUP BY 1 ORDER BY 1;
-- tenant:42:part:0 | 250   (and 250 for each of the other three)
SQL
my $cluster_all = <<'SQL';
INSERT INTO rl_policy (name, algo, "limit", per, backend) VALUES
    ('uploads_per_user', 'token_bucket', 10, '1 minute', 'redis'),
    ('uploads_per_tenant', 'token_bucket', 2, '1 minute', 'redis');

SELECT rl_allow_all(ARRAY['user:7', 'tenant:42'], ARRAY['uploads_per_user', 'uploads_per_tenant']);
-- ERROR:  all-or-nothing checks on a Redis Cluster need every key in one hash slot
SQL
my $refund_settings = <<'CONF';
ratelimit.refund_on_rollback = on
CONF
my $allow_each = <<'SQL';
CREATE FUNCTION allow_each(keys text[], policies text[], at timestamptz DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1 .. cardinality(keys) LOOP
		IF NOT rl_allow(keys[i], policies[i], at => at) THEN
			RAISE SQLSTATE 'RL000';		-- roll the block back
		END IF;
	END LOOP;
	RETURN true;
EXCEPTION WHEN SQLSTATE 'RL000' THEN
	RETURN false;
END $$;

SELECT allow_each(ARRAY['user:7', 'tenant:42'], ARRAY['uploads_per_user', 'uploads_per_tenant'],
                  '2026-03-02 09:00:00+00')
FROM generate_series(1, 3);
-- t, t, f
SELECT remaining FROM rl_check('user:7', 'uploads_per_user', at => '2026-03-02 09:00:00+00', cost => 0);
-- 8: the third call's unit went back to user 7
SQL

is( $cnode->safe_psql('postgres', $split),
	join("\n", map { "tenant:42:part:$_|250" } 0 .. 3),
	'a key split in four on the cluster: 250 each');
my @holding = grep { ($_->cli('--scan', '--pattern', 'rl:*part*') // '') ne '' }
  @masters;
ok(@holding >= 2,
	scalar(@holding) . ' of the 3 masters hold parts of the split key');
($out, $err) = example($cnode, $cluster_all);
like(
	$err,
	qr/ERROR:  all-or-nothing checks on a Redis Cluster need every key in one hash slot$/m,
	'rl_allow_all is refused on a cluster');
settings($cnode, $refund_settings);
is($cnode->safe_psql('postgres', $allow_each), "t\nt\nf\n8",
	'one by one: the refused check gives the first key its unit back');
is( $cnode->safe_psql(
		'postgres',
		"SELECT remaining FROM rl_check('tenant:42', 'uploads_per_tenant', "
		  . "at => '2026-03-02 09:00:00+00', cost => 0)"),
	'0',
	'and the tenant\'s limit is used up');

# and the guide agrees with this file and test/sql/guide.sql
my $check = `$^X $FindBin::RealBin/../guide_check.pl`;
is($?, 0, 'test/guide_check.pl finds every example') or diag($check);

done_testing();
