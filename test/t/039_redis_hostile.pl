# The Redis backend against a hostile Redis: a fake server (RlFakeRedis), on
# a free loopback port, answers the handshake as a standalone Redis would
# and then sends a reply meant to exhaust the backend: an array or a bulk
# string announcing 2^31 - 1 elements or bytes (with and without data
# flooding in), a 50,000,000-element array streamed, arrays nested deeper
# than hiredis allows, lines that never end, bounded arrays adding up to
# too many elements, too many bytes of strings, a reply trickling in past
# the deadline, a slot range starting at -2^63.  Each call must come back
# within the timeouts, decided by fail_mode, counted as a failure with a
# clear last_error; administrators' commands raise their error; the
# backend's memory stays small and nothing crashes.  Large replies within
# the bounds (CLUSTER SLOTS of 16384 ranges, SCAN of 1000 keys of 4.2 kB)
# still work, and so does a real Redis afterwards.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use Time::HiRes qw(time usleep);
use RlFakeRedis qw(reply hold flood trickle decision);
use RlRedis;

my $node = RlRedis::pg_node('redis_hostile', q{
ratelimit.backend = redis
ratelimit.redis_connect_timeout = 500
ratelimit.redis_command_timeout = 2000
ratelimit.redis_probe_interval = 1
log_statement = none
});
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
my $started = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');

# ---- one session for every hostile call, to watch its memory ----

my $bg = $node->background_psql('postgres', on_error_stop => 0);
my $pid = $bg->query_safe('SELECT pg_backend_pid()');

# run SQL in that session: its output and its messages
sub bgq
{
	my ($sql) = @_;
	my $out = $bg->query($sql);
	my $err = $bg->{stderr};
	$bg->{stderr} = '';
	return ($out, $err);
}

sub info
{
	return $node->safe_psql('postgres', "SELECT $_[0] FROM rl_redis_info()");
}

# peak resident memory of the session's backend, in kB
sub peak_kb
{
	my $status = slurp_file("/proc/$pid/status");
	return $status =~ /^VmHWM:\s+(\d+) kB/m ? $1 : die "no VmHWM";
}
my $peak_before = peak_kb();

# point the session at a Redis, fake or real
sub use_port
{
	my ($port) = @_;
	bgq("SET ratelimit.redis_nodes = '127.0.0.1:$port'");
	return;
}

# a call once the breaker lets calls through again: its output and time
sub timed_call
{
	my ($sql) = @_;
	$node->poll_query_until('postgres',
		'SELECT coalesce(breaker_until < clock_timestamp(), true) FROM rl_redis_info()')
	  or die 'the breaker stays open';
	my $t0 = time;
	my ($out, $err) = bgq($sql);
	return ($out, time - $t0, $err);
}

# ---- hostile replies to a decision ----

my $line = 'x' x 65536;
my @cases = (
	[ 'an array header of 2^31 - 1 elements',
		{ evalsha => hold("*2147483647\r\n") },
		qr/out of bounds: an array of 2147483647 elements \(at most 1000000 elements in one reply\)/ ],
	[ 'the same answering CLUSTER SLOTS',
		{ cluster => hold("*2147483647\r\n") },
		qr/out of bounds: an array of 2147483647 elements/ ],
	[ 'a 50,000,000-element array streamed',
		{ evalsha => flood("*50000000\r\n", ":1\r\n" x 16384) },
		qr/out of bounds: an array of 50000000 elements/ ],
	[ 'a bulk string header of 2^31 - 1 bytes, no data',
		{ evalsha => hold("\$2147483647\r\n") },
		qr/out of bounds: a bulk string of more than 1048576 bytes/ ],
	[ 'a bulk string header of 2^31 - 1 bytes, data flooding in',
		{ evalsha => flood("\$2147483647\r\n", $line) },
		qr/out of bounds: a bulk string of more than 1048576 bytes/ ],
	[ 'the same inside the decision array',
		{ evalsha => flood("*9\r\n:1\r\n\$2147483647\r\n", $line) },
		qr/out of bounds: a bulk string of more than 1048576 bytes/ ],
	[ 'a bulk string length line that never ends',
		{ evalsha => flood('$', '9' x 65536) },
		qr/out of bounds: a bulk string of more than 1048576 bytes/ ],
	[ 'arrays nested 20 deep',
		{ evalsha => hold(("*1\r\n" x 20) . ":1\r\n") },
		qr/out of bounds: arrays nested more than 6 deep/ ],
	[ 'an error line that never ends',
		{ evalsha => flood('-ERR ', $line) },
		qr/out of bounds: a line of more than 65536 bytes/ ],
	[ 'an array header that never ends',
		{ evalsha => flood('*', '1' x 65536) },
		qr/out of bounds: a line of more than 65536 bytes/ ],
	[ '1001 arrays of 1000 elements',
		{ evalsha => hold("*1001\r\n" . ("*1000\r\n" . (":1\r\n" x 1000)) x 1001) },
		qr/out of bounds: an array of 1000 elements \(at most 1000000 elements in one reply\)/ ],
	[ '40 strings of 1,000,000 bytes',
		{ evalsha => hold("*40\r\n" . ("\$1000000\r\n" . ('x' x 1_000_000) . "\r\n") x 40) },
		qr/out of bounds: more than 33554432 bytes of strings in one reply/ ],
	[ 'a decision trickling in one byte per 50 ms',
		{ evalsha => trickle(decision(1, 4), 0.05) },
		qr/did not answer in time/ ],
	[ 'a decision with a string of 1 MB (within the bounds)',
		{ evalsha => reply("*9\r\n:1\r\n\$1048576\r\n" . ('7' x 1048576) . "\r\n"
			  . ("\$1\r\n1\r\n" x 7)) },
		qr/unexpected reply to the decision script/ ],
	[ 'an array of 200,000 strings (within the bounds)',
		{ evalsha => reply("*200000\r\n" . ("\$5\r\nhello\r\n" x 200_000)) },
		qr/unexpected reply to the decision script/ ],
	# error text that is not valid text: written \xNN, in every encoding
	[ 'an error reply with bytes that are not UTF-8',
		{ evalsha => reply("-ERR bad \xff\xfe value\r\n") },
		qr/refused the decision script: ERR bad \\xFF\\xFE value$/ ],
	[ 'an error reply of two-byte characters, cut by truncation',
		{ evalsha => reply("-ERR x" . ("\xc3\xa9" x 200) . "\r\n") },
		qr/refused the decision script: ERR x(\\xC3\\xA9)+(\\xC3)?$/ ],
	# numbers in a decision's reply: at most 38 digits, which any int128
	# holds (40 nines overflowed it: undefined behaviour)
	[ 'a decision whose remaining has 40 digits (past 2^127)',
		{ evalsha => reply(decision(1, '9' x 40)) },
		qr/unexpected reply to the decision script/ ],
	[ 'a decision whose remaining has 39 digits (past 2^127)',
		{ evalsha => reply(decision(1, '9' x 39)) },
		qr/unexpected reply to the decision script/ ],
	[ 'a decision whose time has 40 digits',
		{ evalsha => reply(decision(1, 4, 1_800_000_000_000_000, 0, 1, 0, 1,
			'9' x 40, 1_700_000_000_000_000)) },
		qr/unexpected reply to the decision script/ ],
);

for my $case (@cases)
{
	my ($what, $writers, $error) = @$case;
	my $f = RlFakeRedis::start(%$writers);
	use_port($f->{port});
	for my $mode (qw(closed open))
	{
		my $failures = info('failures');
		my ($out, $took) = timed_call("SET ratelimit.fail_mode = $mode; "
			  . "SELECT allowed FROM rl_check('hostile', 'token_bucket', 5)");
		is($out, $mode eq 'open' ? 't' : 'f', "$what: fail_mode $mode decides");
		cmp_ok($took, '<', 5, sprintf("$what: the call came back (%.2f s)", $took));
		is(info('failures'), $failures + 1, "$what: counted as a failure");
		like(info('last_error'), $error, "$what: last_error says why");
		unlike(info('last_error'), qr/[^\x20-\x7e]/,
			"$what: last_error is printable ASCII");
	}
	RlFakeRedis::stop($f);
}

# a number of 38 digits is read (any fits 128 bits), and clamped
{
	my $f = RlFakeRedis::start(evalsha => reply(decision(1, '9' x 38)));
	use_port($f->{port});
	my ($out) = timed_call("SET ratelimit.fail_mode = closed; "
		  . "SELECT remaining FROM rl_check('hostile', 'token_bucket', 5)");
	is($out, '9223372036854775807',
		'a remaining of 38 digits is read, and clamped to bigint');
	RlFakeRedis::stop($f);
}

# Error text Redis sends, as SQL sees it: last_error is valid text (escaped,
# never cut inside a character), so convert_to takes it and a table made
# from it dumps and restores; rl_reset under a LATIN1 client raises its
# 08006 error, saying why (not 22021, invalid byte sequence)
for my $case ([ 'bytes that are not UTF-8', "-ERR \xff\xfe bad \xc3\r\n" ],
	[ 'two-byte characters cut at the end', "-ERR " . ('a' x 155) . ("\xc3\xa9" x 20) . "\r\n" ])
{
	my ($what, $error) = @$case;
	my $f = RlFakeRedis::start(evalsha => reply($error), del => reply($error));
	use_port($f->{port});
	timed_call("SELECT allowed FROM rl_check('hostile', 'token_bucket', 5)");
	my ($rc, $out, $err) = $node->psql('postgres',
		q{SELECT convert_to(last_error, 'UTF8') IS NOT NULL FROM rl_redis_info()});
	is($out, 't', "$what: convert_to takes last_error");
	is($err, '', "$what: without an error");

	$node->safe_psql('postgres', 'DROP TABLE IF EXISTS saved; '
		  . 'CREATE TABLE saved AS SELECT last_error FROM rl_redis_info()');
	my $dump = $node->basedir . '/saved.sql';
	$node->command_ok([ 'pg_dump', '-t', 'saved', '-f', $dump,
			'-d', $node->connstr('postgres') ], "$what: a table of it dumps");
	$node->safe_psql('postgres', 'DROP DATABASE IF EXISTS restored');
	$node->safe_psql('postgres', 'CREATE DATABASE restored');
	($rc, $out, $err) = $node->psql('restored', slurp_file($dump));
	unlike($err, qr/ERROR/, "$what: and restores");

	local $ENV{PGCLIENTENCODING} = 'LATIN1';
	($rc, $out, $err) = $node->psql('postgres', qq{
		\\set VERBOSITY verbose
		SET ratelimit.redis_nodes = '127.0.0.1:$f->{port}';
		SELECT rl_reset('hostile', 'token_bucket')});
	like($err, qr/08006: could not reset the key in Redis: Redis at [^:]+:\d+ refused DEL: ERR /,
		"$what: rl_reset under a LATIN1 client raises 08006, saying why");
	unlike($err, qr/22021/, "$what: not 22021");
	RlFakeRedis::stop($f);
}
$node->safe_psql('postgres', 'DROP TABLE saved; DROP DATABASE restored');

# statement_timeout and cancel hold while a reply trickles in
{
	my $f = RlFakeRedis::start(evalsha => trickle(decision(1, 4), 0.05));
	use_port($f->{port});
	my ($out, $took, $err) = timed_call("SET ratelimit.redis_command_timeout = '60s'; "
		  . "SET statement_timeout = '300ms'; "
		  . "SELECT allowed FROM rl_check('hostile', 'token_bucket', 5)");
	like($err, qr/canceling statement due to statement timeout/,
		'statement_timeout stops a call while its reply trickles in');
	cmp_ok($took, '<', 5, sprintf('promptly (%.2f s)', $took));
	bgq('RESET statement_timeout; RESET ratelimit.redis_command_timeout');
	RlFakeRedis::stop($f);
}

# ---- CLUSTER SLOTS: a range from -2^63, and a large valid map ----

{
	my $f = RlFakeRedis::start(
		cluster => [
			sub {
				reply("*1\r\n*3\r\n:-9223372036854775808\r\n:16383\r\n"
					  . "*2\r\n\$9\r\n127.0.0.1\r\n:$_[0]\r\n");
			} ],
		evalsha => reply(decision(1, 42)));
	use_port($f->{port});
	my ($out, $took) = timed_call(
		"SELECT remaining FROM rl_check('hostile', 'token_bucket', 50)");
	is($out, '42', 'a slot range from -2^63: the slots that exist are used');
	cmp_ok($took, '<', 5, sprintf('without walking the others (%.2f s)', $took));
	RlFakeRedis::stop($f);
}

{
	# 16384 one-slot ranges, each a master and two replicas with Redis 7's
	# metadata: 410,000 elements, 4 levels (what a fully fragmented slot
	# map of a large cluster would send)
	my $slots = sub {
		my ($port) = @_;
		my $node = sub {
			my ($p, $id) = @_;
			return "*4\r\n\$9\r\n127.0.0.1\r\n:$p\r\n\$40\r\n" . sprintf('%040d', $id)
			  . "\r\n*2\r\n\$8\r\nhostname\r\n\$4\r\nhost\r\n";
		};
		return reply("*16384\r\n"
			  . join('', map {
				  "*5\r\n:$_\r\n:$_\r\n" . $node->($port, 1)
				  . $node->(1, 2) . $node->(2, 3)
			  } 0 .. 16383));
	};
	my $f = RlFakeRedis::start(cluster => [$slots], evalsha => reply(decision(1, 41)));
	use_port($f->{port});
	my $failures = info('failures');
	my ($out, $took) = timed_call(
		"SELECT remaining FROM rl_check('hostile', 'token_bucket', 50)");
	is($out, '41', 'CLUSTER SLOTS of 16384 ranges is within the bounds');
	cmp_ok($took, '<', 5, sprintf('and read promptly (%.2f s)', $took));
	is(info('failures'), $failures, 'no failure');
	RlFakeRedis::stop($f);
}

# ---- administrators' commands raise their error ----

# an admin command in a DO block: the SQLSTATE and message it raised
sub admin
{
	my ($call) = @_;
	my ($out, $took, $err) = timed_call(qq{DO \$\$ BEGIN PERFORM $call;
		EXCEPTION WHEN OTHERS THEN
			RAISE NOTICE 'raised %: %', SQLSTATE, SQLERRM; END \$\$});
	return ($err, $took);
}

{
	my $f = RlFakeRedis::start(del => hold("*2147483647\r\n"));
	use_port($f->{port});
	my ($err, $took) = admin("rl_reset('hostile', 'token_bucket')");
	like($err,
		qr/raised 08006: could not reset the key in Redis: Redis at 127\.0\.0\.1:\d+ sent a reply out of bounds: an array of 2147483647 elements/,
		'rl_reset: a hostile DEL reply raises 08006, saying why');
	cmp_ok($took, '<', 5, sprintf('promptly (%.2f s)', $took));
	RlFakeRedis::stop($f);

	$f = RlFakeRedis::start(scan => flood("\$2147483647\r\n", $line));
	use_port($f->{port});
	($err, $took) = admin('rl_reset_all()');
	like($err,
		qr/raised 08006: could not reset every state in Redis: Redis at 127\.0\.0\.1:\d+ sent a reply out of bounds: a bulk string of more than 1048576 bytes/,
		'rl_reset_all: a hostile SCAN reply raises 08006, saying why');
	cmp_ok($took, '<', 5, sprintf('promptly (%.2f s)', $took));
	RlFakeRedis::stop($f);

	# SCAN with COUNT 1000 over keys of 4.2 kB: within the bounds
	my $key = 'rl:{5:fw:' . ('k' x 4200) . '}';
	$f = RlFakeRedis::start(
		scan => reply("*2\r\n\$1\r\n0\r\n*1000\r\n"
			  . ('$' . length($key) . "\r\n$key\r\n") x 1000),
		unlink => reply(":1\r\n"));
	use_port($f->{port});
	my ($out) = bgq('SELECT rl_reset_all()');
	is($out, '1000', 'rl_reset_all: SCAN of 1000 keys of 4.2 kB is within the bounds');
	RlFakeRedis::stop($f);
}

# ---- the backend and the server came through ----

my $peak = peak_kb();
cmp_ok($peak, '<', 256 * 1024,
	"the backend's peak memory stayed small ($peak_before kB before, $peak kB after)");
is($bg->query_safe('SELECT pg_backend_pid()'), $pid,
	'the session is still there (its backend was never killed)');
is($node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'),
	$started, 'the server never restarted');
unlike(slurp_file($node->logfile), qr/terminated by signal|out of memory/,
	'no backend was killed');

# a real Redis works at once
my $redis = RlRedis->new;
use_port($redis->port);
my $failures = info('failures');
my ($out) = timed_call("SET ratelimit.fail_mode = closed; "
	  . "SELECT remaining FROM rl_check('healthy', 'token_bucket', 5)");
is($out, '4', 'a real Redis decides the next call');
is(info('failures'), $failures, 'without a failure');
my $dboid = $node->safe_psql('postgres',
	"SELECT oid FROM pg_database WHERE datname = 'postgres'");
is($redis->cli('EXISTS', "rl:{$dboid:tb:healthy}"), '1', 'the state is in Redis');

$bg->quit;
$node->stop;
$redis->stop;
done_testing();
