# Local batching (ratelimit.redis_batch): a backend takes a lease of N units
# from Redis and admits the next calls from it.  Checks that most calls stay
# local, the precision bounds of docs/redis.md under 4 concurrent sessions
# for each algorithm it applies to (printed: the figures the docs quote),
# that the other algorithms and explicit times stay exact, and that a lease
# keeps admitting while Redis is down.

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
my $N = 10;    # the batch

my $node = RlRedis::pg_node('redis_batch', qq{
ratelimit.backend = redis
ratelimit.redis_nodes = '${\ $redis->addr}'
ratelimit.redis_batch = $N
ratelimit.redis_command_timeout = 5000
ratelimit.fail_mode = closed
ratelimit.redis_probe_interval = 1
max_connections = 40
log_statement = none
});
$node->safe_psql('postgres',
	'CREATE EXTENSION ratelimit; CREATE TABLE admitted (algo text)');

sub info
{
	my ($col) = @_;
	return $node->safe_psql('postgres', "SELECT $col FROM rl_redis_info()");
}

# ---- one session: one Redis call per N units ----

my $calls = info('calls');
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg((rl_check('one', 'fixed_window', 100, '1 hour')).remaining::text, ',') "
		  . "FROM generate_series(1, 25)"),
	join(',', map { 100 - $_ } 1 .. 25),
	'25 calls, remaining as exact mode reports it in a single session');
is(info('calls') - $calls, 3, 'three leases of 10 reached Redis');
is(info('batched'), 22, 'the other 22 calls were admitted locally');

# ---- precision under 4 concurrent sessions ----

my %bounds = (
	fixed_window           => [ 150 - 4 * ($N - 1), 150 ],
	sliding_window_counter => [ 150 - 4 * ($N - 1), 150 ],
	token_bucket           => [ 150 - 4 * $N, 150 + 4 * $N ]);
for my $algo (sort keys %bounds)
{
	my $script = "$PostgreSQL::Test::Utils::tmp_check/$algo.sql";
	open my $fh, '>', $script or die $!;
	print $fh "INSERT INTO admitted SELECT '$algo' "
	  . "WHERE rl_allow('hot', '$algo', 150, '1 hour');\n";
	close $fh;
	my $before = info('calls');
	my ($out, $err) = ('', '');
	IPC::Run::run(
		[ 'pgbench', '-n', '-c', '4', '-j', '2', '-t', '100', '-f', $script,
			'-p', $node->port, '-h', $node->host, 'postgres' ],
		'>', \$out, '2>', \$err) or diag($err);
	my $n = $node->safe_psql('postgres',
		"SELECT count(*) FROM admitted WHERE algo = '$algo'");
	my ($lo, $hi) = @{ $bounds{$algo} };
	ok($n >= $lo && $n <= $hi,
		"$algo, limit 150, batch $N, 4 sessions x 100 calls: $n admitted "
		  . "(exact: 150; bounds $lo..$hi), "
		  . (info('calls') - $before)
		  . ' calls reached Redis');
}

# ---- precision over many windows: leases left unspent at a window's end ----

# 4 sessions for 3 s (12 windows) on a limit of 40 per 250 ms, exact and
# batched, at full speed and at 200 calls/s (50 per window): how many are
# admitted and how many calls reach Redis.
my $script = "$PostgreSQL::Test::Utils::tmp_check/windows.sql";
open my $fh, '>', $script or die $!;
print $fh "INSERT INTO admitted SELECT 'windows-' || :run "
  . "WHERE rl_allow('win' || :run, 'fixed_window', 40, '250 ms');\n";
close $fh;
my %admitted;
my $run = 0;
for my $rate (undef, 200)
{
	for my $batch (0, $N)
	{
		$run++;
		my $before = info('calls');
		my ($out, $err) = ('', '');
		IPC::Run::run(
			[ 'pgbench', '-n', '-c', '4', '-j', '2', '-T', '3',
				(defined $rate ? ('-R', $rate) : ()), '-f', $script,
				'-D', "run=$run", '-p', $node->port, '-h', $node->host,
				'postgres' ],
			'>', \$out, '2>', \$err,
			init => sub { $ENV{PGOPTIONS} = "-c ratelimit.redis_batch=$batch" })
		  or diag($err);
		my ($tx) = $out =~ /number of transactions actually processed: (\d+)/;
		my $n = $node->safe_psql('postgres',
			"SELECT count(*) FROM admitted WHERE algo = 'windows-$run'");
		$admitted{ $rate // 'full' }{$batch} = $n;
		ok($tx > 0,
			sprintf('fixed_window 40 per 250 ms, 4 sessions, 3 s, %s, batch %d: '
				  . '%d calls, %d admitted, %d reached Redis',
				defined $rate ? "$rate calls/s" : 'full speed',
				$batch, $tx, $n, info('calls') - $before));
	}
}
for my $rate (sort keys %admitted)
{
	my ($exact, $batched) = @{ $admitted{$rate} }{ 0, $N };
	ok($batched <= $exact + 40 && $batched >= $exact - 13 * 4 * ($N - 1),
		"$rate: batching admits $batched where exact admits $exact "
		  . '(at most 4 x (batch - 1) fewer per window)');
}

# ---- what stays exact ----

$calls = info('calls');
$node->safe_psql('postgres',
	"SELECT rl_allow('log', 'sliding_window_log', 100) FROM generate_series(1, 5)");
is(info('calls') - $calls, 5, 'sliding_window_log is always exact');
$calls = info('calls');
$node->safe_psql('postgres',
	"SELECT rl_allow('at', 'fixed_window', 100, at => '2030-01-01 00:00:00+00') "
	  . "FROM generate_series(1, 5)");
is(info('calls') - $calls, 5, 'calls with an explicit "at" are exact');
$calls = info('calls');
$node->safe_psql('postgres',
	"SELECT rl_allow('big', 'fixed_window', 100, cost => 20) FROM generate_series(1, 3)");
is(info('calls') - $calls, 3, 'calls costing more than the batch are exact');

# ---- a lease outlives Redis ----

my $bg = $node->background_psql('postgres');
is($bg->query_safe("SELECT rl_allow('down', 'token_bucket', 100, '1 hour')"),
	't', 'a lease of 10 taken');
$redis->kill9;
is( scalar $bg->query(
		"SELECT string_agg(rl_allow('down', 'token_bucket', 100, '1 hour')::text, ',') "
		  . "FROM generate_series(1, 10)"),
	join(',', ('true') x 9, 'false'),
	'Redis down: the lease admits its 9 units left, then fail_mode decides');
$bg->quit;

$node->stop;
done_testing();
