# Concurrency: many sessions hammering one key never admit more than the
# limit.  pgbench runs 8 clients that each try 150 times to take one unit of
# a limit of 500 per day and record every admission in a table; the count of
# admissions is then exact.  Then decisions on existing keys, which take a
# partition's spinlock only (#9), run against calls that hold the
# partition's LWLock (new keys, logs, resets, listings, adjustments) on the
# same partitions: every key still admits exactly its limit.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $LIMIT   = 500;
my $CLIENTS = 8;
my $TRIES   = 150;    # per client: 1200 attempts in all

my @ALGOS = qw(fixed_window sliding_window_log sliding_window_counter
  token_bucket leaky_bucket);

my $node = PostgreSQL::Test::Cluster->new('concurrency');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
max_connections = 40
log_statement = none
});
$node->start;
$node->safe_psql('postgres',
	'CREATE EXTENSION ratelimit; CREATE TABLE admitted (n int)');

my $dir = PostgreSQL::Test::Utils::tempdir;

# Run pgbench with one statement as the transaction; return how many rows
# it put into "admitted".
sub hammer
{
	my ($name, $sql) = @_;
	(my $file = "$dir/$name.sql") =~ s/[^\w\/.-]+/_/g;
	PostgreSQL::Test::Utils::append_to_file($file, "$sql\n");
	$node->safe_psql('postgres', 'TRUNCATE admitted');
	$node->command_ok(
		[
			'pgbench', '-n', '-c', $CLIENTS, '-j', 2,
			'-t', $TRIES, '-f', $file, 'postgres'
		],
		"pgbench: $name");
	return $node->safe_psql('postgres', 'SELECT count(*) FROM admitted');
}

# A fixed time: nothing refills or drains, every algorithm admits exactly L.
my $at = "'2026-01-01 00:00:00+00'";
for my $algo (@ALGOS)
{
	my $n = hammer("fixed $algo",
		"INSERT INTO admitted SELECT 1 WHERE rl_allow('hot', '$algo', $LIMIT, "
		  . "'1 day', at => $at);");
	is($n, $LIMIT, "$algo, fixed time: exactly $LIMIT of "
		  . $CLIENTS * $TRIES
		  . " admitted");
	is( $node->safe_psql(
			'postgres',
			"SELECT remaining FROM rl_check('hot', '$algo', $LIMIT, '1 day', "
			  . "cost => 0, at => $at)"),
		0,
		"$algo, fixed time: nothing remains");
}

# The real clock.  A day's window: the buckets refill or drain one unit per
# 172.8 s, so at most one more call fits; the windows must not cross a UTC
# day boundary during the run.
my $secs_of_day = time() % 86400;
my $near_midnight = $secs_of_day < 60 || $secs_of_day > 86400 - 60;
for my $algo (@ALGOS)
{
  SKIP:
	{
		skip "$algo, real clock: too close to a UTC day boundary", 2
		  if $near_midnight && $algo =~ /window/;
		my $n = hammer("real $algo",
			"INSERT INTO admitted SELECT 1 WHERE rl_allow('hot-real', '$algo', "
			  . "$LIMIT, '1 day');");
		my $max = $algo =~ /bucket/ ? $LIMIT + 1 : $LIMIT;
		cmp_ok($n, '>=', $LIMIT, "$algo, real clock: at least $LIMIT admitted");
		cmp_ok($n, '<=', $max, "$algo, real clock: at most $max admitted");
	}
}

# Fast and slow paths together.  16 hot keys (a fixed window and a token
# bucket each, at a fixed time) decided by 3 of 4 transactions; the 4th
# creates, charges, lists and resets keys of its own (sliding logs too)
# under the LWLocks of the same partitions, 128 partitions being covered
# by its 2,000 keys.
$node->safe_psql('postgres', 'CREATE TABLE mixed (algo text, k int)');
my $HOT = 16;
my $MIXED_LIMIT = 40;
my $fast = "$dir/mixed_fast.sql";
PostgreSQL::Test::Utils::append_to_file(
	$fast, qq{\\set k random(1, $HOT)
INSERT INTO mixed SELECT 'fixed_window', :k WHERE rl_allow('mix:' || :k, 'fixed_window', $MIXED_LIMIT, '1 day', at => $at);
INSERT INTO mixed SELECT 'token_bucket', :k WHERE rl_allow('mix:' || :k, 'token_bucket', $MIXED_LIMIT, '1 day', at => $at);
SELECT count(*) FROM generate_series(1, 200) i WHERE rl_allow('mix:one', 'fixed_window', 1000000, '1 day', at => $at) AND rl_allow('mix:one', 'token_bucket', 1000000, '1 day', at => $at);
});
my $slow = "$dir/mixed_slow.sql";
PostgreSQL::Test::Utils::append_to_file(
	$slow, qq{\\set j random(1, 2000)
SELECT rl_allow('slow:' || :j, 'sliding_window_log', 3, '1 hour');
SELECT rl_allow('slow:' || :j, 'fixed_window', 3, '1 hour', cost => 2);
SELECT count(*) FROM rl_keys() WHERE key LIKE 'slow:%';
SELECT rl_reset('slow:' || (:j % 7));
});
$node->command_ok(
	[
		'pgbench', '-n', '-c', $CLIENTS, '-j', 2, '-t', 400,
		'-f', "$fast\@3", '-f', "$slow\@1", 'postgres'
	],
	'pgbench: decisions on hot keys beside calls holding the LWLocks');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM (SELECT algo, k, count(*) AS n FROM mixed "
		  . "GROUP BY 1, 2) s WHERE n = $MIXED_LIMIT"),
	2 * $HOT,
	"every hot key of both algorithms admitted exactly $MIXED_LIMIT");
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM generate_series(1, $HOT) k, "
		  . "unnest(ARRAY['fixed_window', 'token_bucket']) a, "
		  . "LATERAL rl_check('mix:' || k, a, $MIXED_LIMIT, '1 day', "
		  . "cost => 0, at => $at) r WHERE r.remaining = 0"),
	2 * $HOT,
	'nothing remains of any hot key');
# 3 transactions of 4 decide 200 times on one key with both algorithms,
# back to back from every client: no decision is lost
my $one = $node->safe_psql(
	'postgres',
	"SELECT string_agg(r.remaining::text, ' ' ORDER BY a) "
	  . "FROM unnest(ARRAY['fixed_window', 'token_bucket']) a, "
	  . "LATERAL rl_check('mix:one', a, 1000000, '1 day', cost => 0, "
	  . "at => $at) r");
my ($fw, $tb) = split / /, $one;
is($fw, $tb, 'one key decided back to back: both algorithms counted the same');
is((1000000 - $fw) % 200, 0, 'one key decided back to back: whole statements of 200 counted');
cmp_ok(1000000 - $fw, '>=', 200 * 100, 'one key decided back to back: many statements ran');

$node->stop;
done_testing();
