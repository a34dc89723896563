# State across restarts: a clean restart keeps every key's state; an
# immediate shutdown or a crash (a backend killed inside rl_allow) starts
# afresh with a working server and no stuck lock; a corrupt state file or
# one from another version is ignored with a log line.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('restart');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
restart_after_crash = on
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('p', 'sliding_window_log', 5, '1 day');
});
my $state_file = $node->data_dir . '/pg_stat/ratelimit.state';

# use up some quota with each algorithm, and a long key
sub use_quota
{
	$node->safe_psql('postgres', q{
		SELECT rl_allow('k:' || a, a, 5, '1 day', cost => 3)
		FROM unnest(ARRAY['fixed_window', 'sliding_window_log', 'sliding_window_counter',
			'token_bucket', 'leaky_bucket']) a;
		SELECT rl_allow(repeat('long', 300), 'fixed_window', 5, '1 day', cost => 4);
		SELECT rl_allow('tenant:1', 'p'), rl_allow('tenant:1', 'p');
	});
}
my $remaining_sql = q{
	SELECT string_agg(a || '=' || (SELECT remaining FROM rl_check('k:' || a, a, 5, '1 day', cost => 0)), ' ' ORDER BY a)
	FROM unnest(ARRAY['fixed_window', 'sliding_window_log', 'sliding_window_counter',
		'token_bucket', 'leaky_bucket']) a};
my $expected = 'fixed_window=2 leaky_bucket=2 sliding_window_counter=2 sliding_window_log=2 token_bucket=2';
use_quota();
is($node->safe_psql('postgres', $remaining_sql), $expected, 'quota used before the restart');

# a clean restart keeps it
$node->restart;
ok(!-e $state_file, 'the state file is consumed at start');
is($node->safe_psql('postgres', $remaining_sql), $expected, 'a clean restart keeps every algorithm\'s state');
is($node->safe_psql('postgres',
	"SELECT remaining FROM rl_check(repeat('long', 300), 'fixed_window', 5, '1 day', 0)"),
	'1', 'a long key keeps its state');
is($node->safe_psql('postgres', "SELECT remaining FROM rl_check('tenant:1', 'p', cost => 0)"),
	'3', 'a policy key keeps its state');
ok($node->log_contains(qr/ratelimit restored the state of 7 keys/), 'the restore is logged');

# an immediate shutdown saves nothing
$node->stop('immediate');
$node->start;
is($node->safe_psql('postgres', $remaining_sql),
	'fixed_window=5 leaky_bucket=5 sliding_window_counter=5 sliding_window_log=5 token_bucket=5',
	'an immediate shutdown starts afresh');

# a corrupt file, or one from another version, is ignored with a log line
use_quota();
$node->stop;
ok(-e $state_file, 'a clean shutdown writes the state file');
{
	open my $fh, '+<', $state_file or die $!;
	binmode $fh;
	seek $fh, 40, 0;
	print $fh "\xff\xfe\xfd";
	close $fh;
}
my $log_offset = -s $node->logfile;
$node->start;
ok($node->log_contains(qr/ignoring invalid data in file "pg_stat\/ratelimit.state"\n.*DETAIL:\s+Its checksum does not match/, $log_offset),
	'a corrupt state file is ignored with a log line');
is($node->safe_psql('postgres', "SELECT used FROM rl_store_info()"), '0', 'and nothing is loaded');

use_quota();
$node->stop;
{
	open my $fh, '+<', $state_file or die $!;
	binmode $fh;
	seek $fh, 4, 0;
	print $fh pack('L', 99);
	close $fh;
}
$log_offset = -s $node->logfile;
$node->start;
ok($node->log_contains(qr/ignoring invalid data in file .*\n.*DETAIL:\s+It was written by another version/, $log_offset),
	'a state file from another version is ignored with a log line');

# crash: kill a backend with SIGKILL while it runs rl_allow in a loop
my $victim = $node->background_psql('postgres', on_error_stop => 0);
my $pid = $victim->query_safe('SELECT pg_backend_pid()');
$victim->query_until(qr/looping/, q{
\echo looping
SELECT count(*) FROM generate_series(1, 100000000) i WHERE rl_allow('crash:' || (i % 1000), 'token_bucket', 5);
});
usleep(300_000);
kill 'KILL', $pid;
$victim->{run}->finish;
# the postmaster reinitializes shared memory and accepts connections again
my $ok = 0;
foreach (1 .. 100)
{
	my $ret = $node->psql('postgres', 'SELECT 1');
	if ($ret == 0) { $ok = 1; last; }
	usleep(200_000);
}
ok($ok, 'the server accepts connections again after the crash');
ok($node->log_contains(qr/all server processes terminated; reinitializing/), 'crash reinitialization happened');
is($node->safe_psql('postgres', "SELECT used FROM rl_store_info()"), '0', 'the store starts afresh after a crash');
# no lock was left held: every partition can be taken again
is($node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE rl_allow('after:' || i, 'fixed_window', 1, '1 day')) FROM generate_series(1, 5000) i}),
	'5000', 'every partition works after the crash');
is($node->safe_psql('postgres', 'SELECT rl_reset_all(true) >= 5000'), 't', 'reset takes every partition lock');

$node->stop;
done_testing();
