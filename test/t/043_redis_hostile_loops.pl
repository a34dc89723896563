# The Redis backend's loops and waits against a hostile Redis (a fake,
# RlFakeRedis), each bounded by one deadline or one bound:
#  - the refunds an abort queued are sent together after the transaction,
#    within one call's deadline for all of them (pipelined): a Redis
#    answering each refund just within the command timeout no longer holds
#    the session's next call, or its exit, for refunds x timeout;
#    statement_timeout and pg_terminate_backend act during that flush;
#    what was not sent is counted as dropped;
#  - rl_reset_all against a SCAN that never ends (the same cursor again, or
#    new cursors forever) ends on its own with 08006;
#  - a slot map (and MOVED redirects) naming 1000 masters: the session keeps
#    at most 64 connections, every call is decided, no ERROR from running
#    out of descriptors, none inside an abort.
# Timings are asserted loosely (seconds where the unbounded loops took
# tens of seconds or forever).

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use Time::HiRes qw(time usleep);
use RlFakeRedis qw(reply decision bulk);
use RlRedis;

my $node = RlRedis::pg_node('redis_loops', q{
ratelimit.backend = redis
ratelimit.redis_connect_timeout = 200
ratelimit.redis_command_timeout = 100
ratelimit.redis_probe_interval = 1
ratelimit.fail_mode = open
log_statement = none
});
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

sub info
{
	return $node->safe_psql('postgres', "SELECT $_[0] FROM rl_redis_info()");
}

# wait until the breaker lets calls through
sub breaker_closed
{
	$node->poll_query_until('postgres',
		'SELECT coalesce(breaker_until < clock_timestamp(), true) FROM rl_redis_info()')
	  or die 'the breaker stays open';
	return;
}

# Is the command a refund script (seven arguments after its keys)?
sub is_refund
{
	my ($cmd) = @_;
	return @$cmd - 3 - $cmd->[2] == 7;
}

# ---- refunds: one deadline for the whole flush ----

# refunds answered after 500 ms each (within the command timeout the
# sessions set, 1 s), decisions at once
my $slow = RlFakeRedis::start(
	evalsha => sub {
		my ($c, $cmd) = @_;
		usleep(500_000) if is_refund($cmd);
		return RlFakeRedis::send_all($c,
			is_refund($cmd) ? ":1\r\n" : decision(1, 4));
	});
my $rollback = qq{
SET ratelimit.redis_nodes = '127.0.0.1:$slow->{port}';
SET ratelimit.refund_on_rollback = on;
SET ratelimit.redis_command_timeout = '1s';
BEGIN;
SELECT count(*) FILTER (WHERE rl_allow('slow:' || i, 'token_bucket', 5))
	FROM generate_series(1, 100) i;
ROLLBACK;
};

{
	my $bg = $node->background_psql('postgres', on_error_stop => 0);
	my $dropped = info('refunds_dropped');
	my $t0 = time;
	$bg->query_safe($rollback);
	my $took = time - $t0;
	cmp_ok($took, '<', 10, sprintf('100 decisions and a ROLLBACK (%.2f s)', $took));
	is(info('refunds_queued - refunds_sent - refunds_dropped'), '100',
		'the ROLLBACK queued 100 refunds, sending none');

	# the next call sends them first: 100 x 500 ms one after another, each
	# within the command timeout, but one deadline (connect + command
	# timeout: 1.2 s) bounds them all
	$t0 = time;
	is($bg->query("SELECT rl_allow('next', 'token_bucket', 5)"), 't',
		'the next call is decided');
	like($bg->{stderr}, qr/WARNING:  ratelimit: Redis is unavailable: Redis at [^ ]+ did not answer in time/,
		'a warning says why refunds were dropped');
	$bg->{stderr} = '';
	$took = time - $t0;
	cmp_ok($took, '<', 8, sprintf('after a flush bounded by one deadline (%.2f s, 50 s one by one)', $took));
	RlRedis::refunds_settled($node);
	cmp_ok(info('refunds_dropped') - $dropped, '>=', 90,
		'refunds not answered in time are counted as dropped');

	# statement_timeout and cancel act during a flush
	breaker_closed();
	$bg->query_safe($rollback);
	$bg->query_safe("SET ratelimit.redis_command_timeout = '60s'");
	$bg->query_safe("SET statement_timeout = '300ms'");
	$t0 = time;
	$bg->query("SELECT rl_allow('next', 'token_bucket', 5)");
	$took = time - $t0;
	like($bg->{stderr}, qr/canceling statement due to statement timeout/,
		'statement_timeout stops a flush of slow refunds');
	$bg->{stderr} = '';
	cmp_ok($took, '<', 5, sprintf('promptly (%.2f s)', $took));
	RlRedis::refunds_settled($node);
	pass('the refunds it did not send are counted as dropped');
	$bg->query_safe('RESET statement_timeout; RESET ratelimit.redis_command_timeout');
	$bg->quit;
}

# pg_terminate_backend with 100 slow refunds queued: the exit sends them
# within one deadline too
{
	breaker_closed();
	my $bg = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $bg->query_safe('SELECT pg_backend_pid()');
	$bg->query_safe($rollback);
	my $t0 = time;
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid")
	  or die 'the backend did not exit';
	my $took = time - $t0;
	cmp_ok($took, '<', 8, sprintf('pg_terminate_backend: the session exits promptly (%.2f s)', $took));
	RlRedis::refunds_settled($node);
	pass('its refunds are sent or counted as dropped');
	eval { $bg->quit };
}
RlFakeRedis::stop($slow);

# a healthy Redis takes every refund of a large flush (pipelined)
{
	my $redis = RlRedis->new;
	breaker_closed();
	my $sent = info('refunds_sent');
	my $out = $node->safe_psql('postgres', qq{
		SET ratelimit.redis_nodes = '${\ $redis->addr }';
		SET ratelimit.redis_command_timeout = '2s';
		SET ratelimit.refund_on_rollback = on;
		BEGIN;
		SELECT count(*) FILTER (WHERE rl_allow('many:' || i, 'fixed_window', 5, '1 hour'))
			FROM generate_series(1, 5000) i;
		ROLLBACK;
		SELECT rl_allow('many:1', 'fixed_window', 5, '1 hour');
		SELECT remaining FROM rl_check('many:4999', 'fixed_window', 5, '1 hour');});
	is($out, "5000\nt\n4", 'a healthy Redis took all 5000 refunds at the next call');
	is(info('refunds_sent') - $sent, 5000, 'counted as sent');
	$redis->stop;
}

# ---- rl_reset_all: a SCAN that never ends ----

# the admin command's SQLSTATE and message, and how long it took
sub reset_all
{
	my ($port, $sql) = @_;
	my $t0 = time;
	my ($rc, $out, $err) = $node->psql('postgres', qq{
		\\set VERBOSITY verbose
		SET ratelimit.redis_nodes = '127.0.0.1:$port';
		SET statement_timeout = '60s';
		$sql
		SELECT rl_reset_all()});
	return ($err, time - $t0);
}

{
	my $f = RlFakeRedis::start(scan => reply("*2\r\n\$1\r\n7\r\n*0\r\n"));
	my ($err, $took) = reset_all($f->{port}, '');
	like($err,
		qr/08006: could not reset every state in Redis: Redis at 127\.0\.0\.1:\d+ returned the SCAN cursor 7 twice/,
		'rl_reset_all: a SCAN answering the same cursor forever is 08006');
	cmp_ok($took, '<', 30, sprintf('on its own (%.2f s)', $took));
	RlFakeRedis::stop($f);

	# new cursors forever, each with a key to unlink
	$f = RlFakeRedis::start(
		scan => sub {
			my ($c, $cmd, $st) = @_;
			my $cursor = ++$st->{cursor};
			return RlFakeRedis::send_all($c,
				"*2\r\n" . bulk($cursor) . "*1\r\n" . bulk("rl:{5:tb:k$cursor}"));
		},
		unlink => reply(":1\r\n"));
	($err, $took) = reset_all($f->{port},
		"SET ratelimit.redis_reset_timeout = '1s';");
	like($err,
		qr/08006: could not reset every state in Redis: scanning Redis at 127\.0\.0\.1:\d+ took longer than "ratelimit\.redis_reset_timeout" \(1000 ms\)/,
		'rl_reset_all: a SCAN going on forever ends at ratelimit.redis_reset_timeout');
	cmp_ok($took, '<', 30, sprintf('on its own (%.2f s)', $took));
	RlFakeRedis::stop($f);

	# a malformed cursor
	$f = RlFakeRedis::start(scan => reply("*2\r\n\$3\r\n1x2\r\n*0\r\n"));
	($err) = reset_all($f->{port}, '');
	like($err, qr/08006: could not reset every state in Redis: unexpected reply to SCAN/,
		'rl_reset_all: a cursor that is not a number is 08006');
	RlFakeRedis::stop($f);
}

# ---- a slot map of 1000 masters ----

# CRC16 (XMODEM) of a key's hash tag, as Redis Cluster computes slots
sub key_slot
{
	my ($key) = @_;
	$key = $1 if $key =~ /\{([^}]+)\}/;
	my $crc = 0;
	for my $byte (unpack 'C*', $key)
	{
		$crc ^= $byte << 8;
		for (1 .. 8)
		{
			$crc = $crc & 0x8000 ? (($crc << 1) ^ 0x1021) & 0xFFFF : ($crc << 1) & 0xFFFF;
		}
	}
	return $crc & 16383;
}

# the i-th spelling of 127.0.0.1 (leading zeros): 1000 "different" masters
sub spelling
{
	my ($i) = @_;
	return '127.' . ('0' x ($i % 10)) . '0.' . ('0' x (int($i / 10) % 10))
	  . '0.' . ('0' x (int($i / 100) % 10)) . '1';
}

sub many_masters
{
	my ($n) = @_;
	return RlFakeRedis::start(
		cluster => [
			sub {
				my ($port) = @_;
				my $per = int(16384 / $n) + 1;
				my @ranges = map {
					my ($lo, $hi) = ($_ * $per, $_ * $per + $per - 1);
					$hi = 16383 if $hi > 16383;
					$lo > 16383 ? () : ("*3\r\n:$lo\r\n:$hi\r\n*2\r\n"
						  . bulk(spelling($_)) . ":$port\r\n")
				} 0 .. $n - 1;
				return reply('*' . scalar(@ranges) . "\r\n" . join('', @ranges));
			} ],
		evalsha => [
			sub {
				my ($port) = @_;
				return sub {
					my ($c, $cmd, $st, $conn) = @_;
					if (is_refund($cmd) && $st->{decided})
					{
						# refunds are redirected to yet another master
						my $to = spelling($conn * 7 + ++$st->{moved});
						return RlFakeRedis::send_all($c,
							'-MOVED ' . key_slot($cmd->[3]) . " $to:$port\r\n");
					}
					$st->{decided} = 1 unless is_refund($cmd);
					return RlFakeRedis::send_all($c,
						is_refund($cmd) ? ":1\r\n" : decision(1, 4));
				};
			} ]);
}

{
	my $f = many_masters(1000);
	breaker_closed();
	my $bg = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $bg->query_safe('SELECT pg_backend_pid()');
	my $connects = info('connects');
	$bg->query_safe("SET ratelimit.redis_nodes = '127.0.0.1:$f->{port}'");
	$bg->query_safe("SET ratelimit.redis_connect_timeout = '2s'");
	$bg->query_safe("SET ratelimit.redis_command_timeout = '2s'");
	my $out = $bg->query(q{\set VERBOSITY verbose
		SELECT count(*) FILTER (WHERE rl_allow('many:' || i, 'token_bucket', 5))
		FROM generate_series(1, 2000) i});
	is($out, '2000', 'a slot map of 1000 masters: every call is decided');
	unlike($bg->{stderr}, qr/XX000|epoll_create1|Too many open files/,
		'no error from running out of descriptors');
	$bg->{stderr} = '';
	cmp_ok(info('connects') - $connects, '>', 64,
		'the session connected to more masters than it keeps');
	my @fds = glob("/proc/$pid/fd/*");
	cmp_ok(scalar(@fds), '<', 2 * 64 + 40,
		sprintf('its descriptors stay bounded: at most 64 connections (%d open)', scalar @fds));

	# refunds of a rolled-back savepoint, redirected to new masters: the
	# transaction goes on, no ERROR inside the abort
	$bg->query_safe("RESET ratelimit.redis_connect_timeout; RESET ratelimit.redis_command_timeout");
	$out = $bg->query(q{SET ratelimit.refund_on_rollback = on;
		BEGIN;
		SAVEPOINT a;
		SELECT count(*) FILTER (WHERE rl_allow('many:' || i, 'token_bucket', 5))
		FROM generate_series(1, 400) i;
		ROLLBACK TO a;
		SELECT rl_allow('after', 'token_bucket', 5);
		SELECT 'still in the transaction';
		COMMIT;});
	like($out, qr/still in the transaction/,
		'ROLLBACK TO SAVEPOINT with refunds redirected keeps the transaction');
	unlike($bg->{stderr}, qr/ABORT state|XX000|ERROR/, 'no ERROR, none inside the abort');
	$bg->quit;
	RlRedis::refunds_settled($node);
	pass('the redirected refunds are sent or counted as dropped');
	RlFakeRedis::stop($f);
}

$node->stop;
done_testing();
