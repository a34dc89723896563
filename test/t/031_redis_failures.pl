# The Redis backend when Redis misbehaves: NOSCRIPT after SCRIPT FLUSH, a
# restart under an idle connection, Redis killed or stopped (SIGSTOP) with
# each fail_mode, the circuit breaker and its probe, warnings at a bounded
# rate, cancel and statement_timeout while Redis hangs, and a load run in
# which Redis is killed, restarted, stopped and resumed for each fail_mode.
# Also keys with odd bytes.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use Time::HiRes qw(time usleep);
use RlRedis;

my $redis = RlRedis->new;

my $node = RlRedis::pg_node('redis_failures', qq{
ratelimit.backend = redis
ratelimit.redis_nodes = '${\ $redis->addr}'
ratelimit.redis_connect_timeout = 100
ratelimit.redis_command_timeout = 100
ratelimit.redis_probe_interval = 500
max_connections = 40
});
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

sub info
{
	my ($col) = @_;
	return $node->safe_psql('postgres', "SELECT $col FROM rl_redis_info()");
}

# seconds taken by a statement, and its output
sub timed
{
	my ($sql) = @_;
	my $t0 = time;
	my $out = $node->safe_psql('postgres', $sql);
	return (time - $t0, $out);
}

# ---- NOSCRIPT ----

# per 1 hour: no token comes back between the two calls, however slow
$node->safe_psql('postgres', "SELECT rl_allow('ns', 'token_bucket', 5, '1 hour')");
my $loads = info('script_loads');
$redis->cli('SCRIPT', 'FLUSH');
is( $node->safe_psql(
		'postgres',
		"SELECT remaining FROM rl_check('ns', 'token_bucket', 5, '1 hour')"),
	'3',
	'after SCRIPT FLUSH the decision is still made (state kept)');
is(info('script_loads'), $loads + 1, 'NOSCRIPT answered by one EVAL');
is(info('failures'), '0', 'NOSCRIPT is not a failure');

# ---- odd keys ----

my @odd = ("o'brien", 'a"b', '{', '}', '{}', '}{', 'x{y}z', "{tag}",
	"line1\nline2", "tab\there", "back\\slash", "\x{43a}\x{43b}\x{44e}\x{447}",
	' ', 'x' x 1000, "nul-free \x01\x02\x7f bytes", 'rl:{5:fw:k}', '');
my $i = 0;
for my $k (@odd)
{
	(my $lit = $k) =~ s/'/''/g;
	my $got = $node->safe_psql('postgres',
		"SELECT string_agg(rl_allow(E'" . ($lit =~ s/\\/\\\\/gr)
		  . "', 'fixed_window', 2, '1 hour')::text, ',') FROM generate_series(1, 3)");
	is($got, 'true,true,false', "odd key " . ++$i . " has its own state");
}
# keys that differ only in odd bytes do not share state
is( $node->safe_psql(
		'postgres',
		"SELECT rl_allow(E'line1\\nline2 ', 'fixed_window', 2, '1 hour')"),
	't',
	'a key one byte longer is another key');

# ---- a restart under an idle connection ----

my $bg = $node->background_psql('postgres', on_error_stop => 0);
$bg->query_safe("SELECT rl_allow('idle', 'fixed_window', 5)");
$redis->stop;
$redis->start;
is($bg->query_safe("SELECT rl_allow('idle', 'fixed_window', 5)"),
	't', 'a connection Redis closed while idle is reopened transparently');
is(info('failures'), '0', 'and that is not a failure');

# ---- cancel and statement_timeout while Redis hangs ----

my $pid = $bg->query_safe('SELECT pg_backend_pid()');
$bg->query_safe("SET ratelimit.redis_command_timeout = '60s'");
$bg->query_safe("SELECT rl_allow('hang', 'fixed_window', 5)");
$redis->signal('STOP');
my $t0 = time;
$bg->{stdin} .= "SELECT rl_allow('hang', 'fixed_window', 5);\n";
$bg->{run}->pump_nb;
ok( $node->poll_query_until(
		'postgres',
		"SELECT wait_event_type = 'Extension' FROM pg_stat_activity WHERE pid = $pid"),
	'the call waits on Redis');
$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
$bg->query('SELECT 1');
my $took = time - $t0;
like($bg->{stderr}, qr/canceling statement due to user request/,
	'pg_cancel_backend cancels a call waiting on a hung Redis');
ok($took < 10, sprintf('promptly (%.2f s, command timeout 60 s)', $took));
$bg->{stderr} = '';

$t0 = time;
$bg->query("SET statement_timeout = '300ms'; "
	  . "SELECT rl_allow('hang', 'fixed_window', 5)");
$took = time - $t0;
like($bg->{stderr}, qr/canceling statement due to statement timeout/,
	'statement_timeout stops a call waiting on a hung Redis');
ok($took < 5, sprintf('promptly (%.2f s)', $took));
$bg->{stderr} = '';
$bg->query_safe('RESET statement_timeout');
is(info('failures'), '0', 'a cancelled call is not a Redis failure');
$redis->signal('CONT');
is($bg->query_safe("SELECT rl_allow('after', 'fixed_window', 5)"),
	't', 'the cancelled connection is replaced');
$bg->quit;

# ---- Redis stopped: each call waits at most the command timeout ----

$redis->signal('STOP');
my ($dt, $out) = timed("SET ratelimit.fail_mode = closed; "
	  . "SET ratelimit.redis_probe_interval = '3s'; "
	  . "SELECT allowed, retry_after FROM rl_check('stop', 'fixed_window', 5, '2 s')");
is($out, 'f|2', 'fail_mode closed denies, retry after one window');
ok($dt < 1.5, sprintf('a hung Redis costs one command timeout (%.3f s)', $dt));
is(info('breaker_open'), 't', 'the breaker is open');
my $skipped = info('skipped');
($dt, $out) = timed("SET ratelimit.fail_mode = open; "
	  . "SELECT allowed, remaining FROM rl_check('stop', 'fixed_window', 5)");
is($out, 't|4', 'fail_mode open allows, as a new key would');
ok($dt < 0.5, sprintf('while the breaker is open calls skip Redis (%.3f s)', $dt));
is(info('skipped'), $skipped + 1, 'skipped calls are counted');
$out = $node->safe_psql('postgres',
	"SET ratelimit.fail_mode = local; "
	  . "SELECT string_agg(rl_allow('stop', 'fixed_window', 2, '1 hour')::text, ',') "
	  . "FROM generate_series(1, 3)");
is($out, 'true,true,false', 'fail_mode local decides in shared memory');
$redis->signal('CONT');

# the probe: after the interval one call tries Redis again and closes it
$node->poll_query_until('postgres',
	'SELECT breaker_until < clock_timestamp() FROM rl_redis_info()');
is($node->safe_psql('postgres', "SELECT rl_allow('probe', 'fixed_window', 5)"),
	't', 'a call after the probe interval reaches Redis');
is(info('breaker_open'), 'f', 'a successful probe closes the breaker');
ok($node->wait_for_log(qr/ratelimit: Redis is reachable again/),
	'the recovery is logged');

# ---- Redis killed ----

$redis->kill9;
($dt, $out) = timed("SET ratelimit.fail_mode = closed; "
	  . "SELECT allowed FROM rl_check('kill', 'token_bucket', 5)");
is($out, 'f', 'Redis killed: fail_mode closed denies');
ok($dt < 1, sprintf('a refused connection fails at once (%.3f s)', $dt));
like(info('last_error'), qr/could not connect to Redis at 127\.0\.0\.1:\d+/,
	'the last error is readable from SQL');
$redis->start;
usleep(600_000);
is($node->safe_psql('postgres', "SELECT rl_allow('kill', 'token_bucket', 5)"),
	't', 'Redis restarted: decisions come from Redis again');

# warnings are bounded: at most one per 10 s (and the first one)
my $log = slurp_file($node->logfile);
my $warnings = () = $log =~ /WARNING:  ratelimit: Redis is unavailable/g;
ok($warnings >= 1 && $warnings <= 2,
	"failures are logged at a bounded rate ($warnings warnings)");

# ---- under load, each fail_mode ----

my $script = "$PostgreSQL::Test::Utils::tmp_check/load.sql";
open my $fh, '>', $script or die $!;
print $fh "SELECT rl_allow('load:' || (random() * 50)::int, 'token_bucket', 1000);\n";
close $fh;

for my $mode (qw(open closed local))
{
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET ratelimit.fail_mode = $mode; SELECT pg_reload_conf()");
	my $prefix = "$PostgreSQL::Test::Utils::tmp_check/pgb_$mode";
	my ($stdout, $stderr) = ('', '');
	my $h = IPC::Run::start(
		[ 'pgbench', '-n', '-c', '4', '-j', '2', '-T', '8', '-f', $script,
			'-l', "--log-prefix=$prefix", '-p', $node->port, '-h',
			$node->host, 'postgres' ],
		'>', \$stdout, '2>', \$stderr);
	usleep(1_000_000);
	$redis->kill9;
	usleep(1_000_000);
	$redis->start;
	usleep(1_000_000);
	# stopped for 3 s: a call that waited for Redis rather than for its
	# timeouts would take seconds; one bounded by them takes a fraction of
	# one, even under the sanitizers on a loaded machine
	$redis->signal('STOP');
	usleep(3_000_000);
	$redis->signal('CONT');
	$h->finish;
	is($h->result(0), 0, "load with fail_mode $mode: pgbench succeeded")
	  or diag($stderr);
	my ($n, $max) = (0, 0);
	for my $f (glob "$prefix.*")
	{
		for (split /\n/, slurp_file($f))
		{
			my @f = split / /;
			$n++;
			$max = $f[2] if $f[2] > $max;
		}
	}
	ok($n > 100, "load with fail_mode $mode: $n calls");
	ok($max < 2_000_000,
		"load with fail_mode $mode: slowest call $max us (timeouts 100 + 100 ms; Redis stopped 3 s)");
}
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server is up');
unlike(slurp_file($node->logfile), qr/terminated by signal|PANIC/,
	'no backend crashed');
ok(info('calls') > 0 && info('failures') > 0,
	'calls and failures are counted: ' . info('calls || \' calls, \' || failures || \' failures, \' || skipped || \' skipped, \' || breaker_trips || \' trips\''));

$node->stop;
$redis->stop;
done_testing();
