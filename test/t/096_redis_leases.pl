# Concurrency limits on Redis: slots are leases (lua/lease.lua) that each
# server's lease worker renews while their holders live.  Two PostgreSQL
# servers share one Redis (one namespace) with a lease time of 2 s:
#  - exactness while both live: under pgbench on both servers, holders
#    (counted apart from the limiter, by application_name) and live leases
#    never exceed the limit, sampled;
#  - a slot comes back at commit at once (a round trip before the commit),
#    at rollback through the worker (polled), and a session that rolled
#    back takes the key again at once;
#  - renewal: an idle holder keeps its slot over several lease times;
#  - a holder ended by pg_terminate_backend gives its slot back;
#  - SIGSTOP of a server holding slots: they are free for the other within
#    the lease time (polled, with a margin); after SIGCONT the stopped
#    server's leases are lost, not brought back (the other keeps its
#    slots);
#  - SIGKILL of a server's postmaster holding slots: freed within the lease
#    time;
#  - headroom: the script takes a slot only if in_flight + 1 + headroom <=
#    limit;
#  - Redis unreachable: fail_mode (waiting: 094_redis_lease_waiters.pl).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RlHarness;
use RlRedis;

my $LEASE = 2;        # s
my $MARGIN = 10;      # s, on top of the lease time, for a loaded machine

my $redis = RlRedis->new;
my ($na, $nb) = RlRedis::pg_pair($redis, 'lease', "${LEASE}s");

# live leases of a key in Redis (expiry after Redis TIME)
sub live
{
	my ($key) = @_;
	return $redis->cli('EVAL',
		q{local t = redis.call('TIME') return redis.call('ZCOUNT', KEYS[1], '(' .. (t[1] * 1000 + math.floor(t[2] / 1000)), '+inf')},
		1, "rl:{shared:cc:$key}");
}

sub try_acquire
{
	my ($node, $key, $max) = @_;
	return $node->safe_psql('postgres', "SELECT rl_acquire('$key', $max)");
}

# every process of a server: the postmaster and its children
sub server_pids
{
	my ($node) = @_;
	my $pm = $node->{_pid};
	my @kids = split /\s+/, `pgrep -P $pm`;
	return ($pm, grep { /^\d+$/ } @kids);
}

# ---- exactness while both servers live ----
my $script = "$PostgreSQL::Test::Utils::tmp_check/lease_bench.sql";
open my $fh, '>', $script or die $!;
print $fh q{\set r random(1, 1000000000)
BEGIN;
SELECT rl_acquire('exact', 3) AS got \gset
\if :got
SELECT set_config('application_name', 'holding:' || :r, false);
SELECT pg_sleep(random() * 0.02);
SELECT set_config('application_name', 'done', false);
\endif
COMMIT;
};
close $fh;

my @bench;
foreach my $node ($na, $nb)
{
	my ($out, $err) = ('', '');
	push @bench, IPC::Run::start(
		[ 'pgbench', '-n', '-c', '6', '-T', '10', '-f', $script,
		  '-h', $node->host, '-p', $node->port, 'postgres' ],
		'>', \$out, '2>', \$err);
}
my $holders_sql = q{SELECT string_agg(application_name, ',') FROM pg_stat_activity WHERE application_name LIKE 'holding:%'};
my ($samples, $over, $seen_max, $leases_over) = (0, 0, 0, 0);
my $until = time + 8;
while (time < $until)
{
	# holders of b present before and after a's sample held through it
	my %b1 = map { $_ => 1 } split /,/, $nb->safe_psql('postgres', $holders_sql);
	my @ha = split /,/, $na->safe_psql('postgres', $holders_sql);
	my @b2 = grep { $b1{$_} } split /,/, $nb->safe_psql('postgres', $holders_sql);
	my $n = @ha + @b2;
	$samples++;
	$over++ if $n > 3;
	$seen_max = $n if $n > $seen_max;
	$leases_over++ if live('exact') > 3;
}
$_->finish for @bench;
diag("exactness: $samples samples, at most $seen_max holders seen at once");
ok($samples >= 5, 'holders sampled while pgbench ran on both servers');
is($over, 0, 'holders on both servers never exceed the limit');
is($leases_over, 0, 'live leases in Redis never exceed the limit');
ok($seen_max >= 1, 'holders were seen');
$_->poll_query_until('postgres', q{SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name LIKE 'holding:%'}) for ($na, $nb);
ok($na->poll_query_until('postgres', "SELECT rl_acquire('exact', 1)"),
	'no slot left held after the run');

# ---- commit, rollback, the same session again ----
my $s = $na->background_psql('postgres');
$s->query_safe("BEGIN; SELECT rl_acquire('xact', 1)");
is(try_acquire($nb, 'xact', 1), 'f', 'a slot held in a transaction on a is busy on b');
$s->query_safe('COMMIT');
is(try_acquire($nb, 'xact', 1), 't', 'given back at commit, before it returns');

$s->query_safe("BEGIN; SELECT rl_acquire('xact', 1)");
$s->query_safe('ROLLBACK');
is($s->query_safe("SELECT rl_acquire('xact', 1, hold => 'session')"), 't',
	'the session that rolled back takes the key again at once');
is(try_acquire($nb, 'xact', 1), 'f', 'held for the session');
is($s->query_safe("SELECT rl_release('xact')"), 't', 'rl_release gives it back');
is(try_acquire($nb, 'xact', 1), 't', 'free after rl_release');

$s->query_safe("BEGIN; SELECT rl_acquire('xact', 1)");
$s->query_safe('ROLLBACK');
ok($nb->poll_query_until('postgres', "SELECT rl_acquire('xact', 1)"),
	'given back after a rollback by the lease worker');
is(live('xact'), '0', 'no lease left');

# ---- the local backend still waits locally ----
my ($ret, $out, $err) = $na->psql('postgres',
	"SET ratelimit.backend = local; SELECT rl_acquire('w', 1, max_wait => '10 ms')");
is($out, 't', 'a wait on the local backend');

# ---- renewal: an idle holder keeps its slot ----
$s->query_safe("SELECT rl_acquire('renew', 1, hold => 'session')");
sleep(3 * $LEASE + 1);
is(try_acquire($nb, 'renew', 1), 'f',
	'an idle holder still holds its slot after three lease times');
is(live('renew'), '1', 'its lease is live in Redis');
$s->query_safe("SELECT rl_release('renew')");
is(try_acquire($nb, 'renew', 1), 't', 'free once released');

# ---- a holder terminated: its exit leaves the lease to the worker ----
my $t = $na->background_psql('postgres');
is($t->query_safe("SELECT rl_acquire('term', 1, hold => 'session')"), 't',
	'a holds term');
my $tpid = $t->query_safe('SELECT pg_backend_pid()');
is(try_acquire($nb, 'term', 1), 'f', 'b finds term full');
$na->safe_psql('postgres', "SELECT pg_terminate_backend($tpid, 10000)");
ok($nb->poll_query_until('postgres', "SELECT rl_acquire('term', 1)"),
	'a terminated holder\'s slot comes back');
eval { $t->quit };

# ---- SIGSTOP a server that holds slots ----
my @held = map { $na->background_psql('postgres') } 1 .. 2;
is($_->query_safe("SELECT rl_acquire('stop', 2, hold => 'session')"), 't',
	'a holds a slot of stop') for @held;
is(try_acquire($nb, 'stop', 2), 'f', 'b finds stop full');
my @stopped = server_pids($na);
kill 'STOP', @stopped;
my $t0 = time;
my $freed = 0;
while (time - $t0 < $LEASE + $MARGIN)
{
	last if ($freed = try_acquire($nb, 'stop', 2) eq 't');
	usleep(100_000);
}
ok($freed, 'the stopped server\'s slots are free within the lease time');
my @taken = map { $nb->background_psql('postgres') } 1 .. 2;
is($_->query_safe("SELECT rl_acquire('stop', 2, hold => 'session')"), 't',
	'b takes a slot of stop') for @taken;
kill 'CONT', @stopped;
# a's worker renews once it runs again: its leases are gone, not renewed
ok($na->poll_query_until('postgres', 'SELECT true'), 'a runs again');
sleep($LEASE);
is(live('stop'), '2', 'after SIGCONT, only b\'s two leases are live');
is(try_acquire($na, 'stop', 2), 'f', 'and a cannot take a third');
$_->query_safe("SELECT rl_release('stop')") for @held;
is(live('stop'), '2', 'a\'s releases of its lost leases take nothing of b\'s');
$_->quit for @held, @taken;

# ---- SIGKILL a server's postmaster that holds slots ----
my $k = $na->background_psql('postgres');
is($k->query_safe("SELECT rl_acquire('kill', 1, hold => 'session')"), 't',
	'a holds kill');
is(try_acquire($nb, 'kill', 1), 'f', 'b finds kill full');
$na->kill9;
$t0 = time;
$freed = 0;
while (time - $t0 < $LEASE + $MARGIN)
{
	last if ($freed = try_acquire($nb, 'kill', 1) eq 't');
	usleep(100_000);
}
ok($freed, 'a killed server\'s slots are free within the lease time');
eval { $k->quit };
$na->{_pid} = undef;

# ---- headroom, in the script itself ----
my $lua = "$FindBin::RealBin/../../src/lua/lease.lua";
my @took;
foreach my $i (1 .. 3)
{
	push @took, scalar `redis-cli -h 127.0.0.1 -p ${\ $redis->port} --eval $lua 'rl:{t:cc:head}' 'rl:{t:cc:head}:q' 'rl:{t:cc:head}:qt' 'rl:{t:cc:head}:w' , acquire h$i 30000 3 1 3000`;
}
my @got = map { (split /\n/)[0] } @took;
is_deeply(\@got, [ '1', '1', '0' ],
	'with a headroom of 1 and a limit of 3, two slots are taken, not three');

# ---- Redis unreachable: fail_mode ----
($ret, $out, $err) = $nb->psql('postgres', q{
	SET ratelimit.redis_nodes = '127.0.0.1:1';
	SET ratelimit.fail_mode = closed;
	SELECT rl_acquire('down', 1);
	SET ratelimit.fail_mode = open;
	SELECT rl_acquire('down', 1);
});
is($out, "f\nt", 'Redis unreachable: closed refuses, open admits');

done_testing();
