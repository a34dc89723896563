# Concurrency: many sessions hammering one key never admit more than the
# limit.  pgbench runs 8 clients that each try 150 times to take one unit of
# a limit of 500 per day and record every admission in a table; the count of
# admissions is then exact.

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

$node->stop;
done_testing();
