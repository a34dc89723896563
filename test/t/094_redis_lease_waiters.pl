# Waiting for a slot of a concurrency limit on Redis (max_wait): a queue of
# tickets in Redis beside the leases, first come first served, woken by a
# wake-up list (BLPOP) that every release pushes on.  Two PostgreSQL
# servers share one Redis (one namespace):
#  - three waiters, on both servers, take the slot in the order they came;
#  - a waiter on one server is woken when the other releases (the median
#    wake-up is noted in the output: no timing assertion);
#  - max_wait passes: false, and the ticket is gone;
#  - a waiter cancelled (pg_cancel_backend) leaves the queue;
#  - a call without max_wait does not jump over a live ticket, and a
#    ticket nobody renews stops holding the queue up once it expires;
#  - waiters on two keys of one policy wait in two queues;
#  - a waiter killed (SIGKILL; its server shuts down) does not hold up the
#    next waiter beyond its ticket's expiry.
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

my $redis = RlRedis->new;
my ($na, $nb) = RlRedis::pg_pair($redis, 'wait', '2s');

my $lua = "$FindBin::RealBin/../../src/lua/lease.lua";

# how many tickets the key's queue holds
sub queued
{
	my ($key) = @_;
	return $redis->cli('ZCARD', "rl:{shared:cc:$key}:q");
}

# wait until the key's queue holds n tickets
sub wait_queued
{
	my ($key, $n) = @_;
	my $t0 = time;
	while (time - $t0 < 60)
	{
		return 1 if queued($key) == $n;
		usleep(20_000);
	}
	return 0;
}

# a psql running sql in the background on node; its output in $$out
sub start_psql
{
	my ($node, $sql, $out) = @_;
	my $err = '';
	return IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=0',
		  '-h', $node->host, '-p', $node->port, '-d', 'postgres',
		  '-c', $sql ],
		'>', $out, '2>', \$err);
}

# run the lease script by hand on the key (4 keys: leases, queue, ticket
# expiries, wake-ups)
sub script
{
	my ($key, @args) = @_;
	my $k = "rl:{shared:cc:$key}";
	my $r = `redis-cli -h 127.0.0.1 -p ${\ $redis->port} --eval $lua $k $k:q $k:qt $k:w , @args`;
	return (split /\n/, $r)[0];
}

# ---- FIFO: three waiters on two servers ----
my $h = $na->background_psql('postgres');
is($h->query_safe("SELECT rl_acquire('fifo', 1, hold => 'session')"), 't',
	'a holds fifo');
my @outs = ('', '', '');
my @w;
my @order = ($na, $nb, $na);
foreach my $i (0 .. 2)
{
	push @w, start_psql($order[$i],
		"SELECT rl_acquire('fifo', 1, hold => 'session', max_wait => '60 s'), "
		  . "extract(epoch from clock_timestamp()); SELECT pg_sleep(0.2); "
		  . "SELECT rl_release('fifo')", \$outs[$i]);
	ok(wait_queued('fifo', $i + 1), "waiter $i is in the queue");
}
is($nb->safe_psql('postgres', "SELECT rl_acquire('fifo', 2)"), 'f',
	'a call without max_wait does not jump over the waiters (even with a higher limit)');
$h->query_safe("SELECT rl_release('fifo')");
$_->finish for @w;
my @got = map { [ split /\|/, (split /\n/, $_)[0] ] } @outs;
is_deeply([ map { $_->[0] } @got ], [ 't', 't', 't' ], 'each waiter took the slot');
ok($got[0][1] < $got[1][1] && $got[1][1] < $got[2][1],
	'in the order they came (first come, first served)');
is(queued('fifo'), '0', 'the queue is empty after');

# ---- a waiter woken by a release on the other server ----
my @lat;
foreach my $round (1 .. 7)
{
	is($h->query_safe("SELECT rl_acquire('wake', 1, hold => 'session')"), 't',
		"round $round: a holds wake");
	my $out = '';
	my $w = start_psql($nb,
		"SELECT rl_acquire('wake', 1, max_wait => '60 s'), "
		  . "extract(epoch from clock_timestamp())", \$out);
	wait_queued('wake', 1);
	usleep(150_000);    # the waiter blocks in BLPOP
	# the time is read before the release (a target list runs in order)
	my ($t0) = split /\|/, $h->query_safe(
		"SELECT extract(epoch from clock_timestamp()), rl_release('wake')");
	$w->finish;
	my ($ok, $t1) = split /\|/, (split /\n/, $out)[0];
	is($ok, 't', "round $round: the waiter on b took the slot a released");
	push @lat, ($t1 - $t0) * 1000;
}
@lat = sort { $a <=> $b } @lat;
diag(sprintf("wake-up after a release on the other server: median %.2f ms "
	  . "(min %.2f, max %.2f, %d rounds; from before the release's round trip)",
	  $lat[@lat / 2], $lat[0], $lat[-1], scalar @lat));

# ---- max_wait passes ----
is($h->query_safe("SELECT rl_acquire('dl', 1, hold => 'session')"), 't',
	'a holds dl');
is($nb->safe_psql('postgres',
	"SELECT rl_acquire('dl', 1, max_wait => '300 ms')"), 'f',
	'max_wait passed: false');
is(queued('dl'), '0', 'and its ticket is gone');

# the pid of the node's other backend whose query is LIKE $pattern (an SQL
# literal's contents), checked to be one
sub backend_of
{
	my ($node, $pattern) = @_;
	my $pid = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE query LIKE '$pattern' AND pid <> pg_backend_pid()");
	like($pid, qr/^\d+$/, 'its backend is found');
	return $pid;
}

# ---- a waiter cancelled leaves the queue ----
my $cout = '';
my $c = start_psql($nb,
	"SELECT rl_acquire('dl', 1, max_wait => '60 s')", \$cout);
ok(wait_queued('dl', 1), 'a waiter queues on b');
my $cpid = backend_of($nb, q{%max_wait => ''60 s''%});
$nb->safe_psql('postgres', "SELECT pg_cancel_backend($cpid)");
$c->finish;
is($cout, '', 'the cancelled waiter returned nothing');
ok(wait_queued('dl', 0), 'its ticket left the queue');
$h->query_safe("SELECT rl_release('dl')");
is($nb->safe_psql('postgres', "SELECT rl_acquire('dl', 1)"), 't',
	'the slot goes to a new call: nobody waits');

# ---- a ticket nobody renews: live, it holds back others; then expires ----
is(script('ghost', qw(acquire x 30000 1 0 3000)), '1', 'x takes ghost by hand');
is(script('ghost', qw(queue g 30000 1 0 3000)), '0', 'g queues behind it');
is(script('ghost', qw(release x 30000)), '1', 'x gives it back');
is($na->safe_psql('postgres', "SELECT rl_acquire('ghost', 1)"), 'f',
	'a call without max_wait does not take the slot from a live ticket');
ok($na->poll_query_until('postgres', "SELECT rl_acquire('ghost', 1)"),
	'the unrenewed ticket expires and the slot is taken');

# ---- headroom for a waiter, in the script ----
is(script('hr', qw(acquire y 30000 3 0 3000)), '1', 'y takes one of 3');
is(script('hr', qw(queue z 30000 3 1 3000)), '1',
	'a queue with a headroom of 1 takes the second slot at once');
is(script('hr', qw(queue v 30000 3 1 3000)), '0',
	'a third with headroom 1 queues');
is(script('hr', qw(poll v 30000 3 1 3000)), '0', 'and a poll keeps it waiting');
is(script('hr', qw(poll v 30000 3 0 3000)), '1',
	'without headroom, the first ticket takes the last slot');

# ---- waiters under a policy: each key its own queue ----
# A policy's key holds a NUL between the policy's name and the caller's
# key: the queue's names are bytes, so that keys a and b of one policy do
# not share (nor break, a queue and a wake-up list under one name) a queue.
$_->safe_psql('postgres', q{
	INSERT INTO rl_policy (name, algo, "limit") VALUES ('pq', 'concurrency', 1)})
  for ($na, $nb);
is($h->query_safe(q{SELECT rl_acquire('a', 'pq', hold => 'session')
	AND rl_acquire('b', 'pq', hold => 'session')}), 't', 'a holds keys a and b of pq');
my ($pa, $pb) = ('', '');
my $wa = start_psql($nb, q{SELECT rl_acquire('a', 'pq', max_wait => '60 s')}, \$pa);
my $wb = start_psql($nb, q{SELECT rl_acquire('b', 'pq', max_wait => '60 s')}, \$pb);
my $queues = sub {
	return $redis->cli('EVAL',
		q{local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do n = n + redis.call('ZCARD', k) end return #redis.call('KEYS', ARGV[1]) .. '/' .. n},
		0, 'rl:{shared:cc:pq*}:q');
};
my $t0 = time;
usleep(20_000) while $queues->() ne '2/2' && time - $t0 < 60;
is($queues->(), '2/2', 'two queues of pq, one ticket each');
$h->query_safe(q{SELECT rl_release('a', 'pq')});
$wa->finish;
is((split /\n/, $pa)[0], 't', 'the waiter on a takes the slot a released');
is($queues->(), '1/1', 'the waiter on b still waits, in its own queue');
$h->query_safe(q{SELECT rl_release('b', 'pq')});
$wb->finish;
is((split /\n/, $pb)[0], 't', 'then the waiter on b takes b');
is($nb->safe_psql('postgres', 'SELECT failures FROM rl_redis_info()'), '0',
	'no Redis call failed');

# ---- a killed waiter does not hold the queue beyond its ticket ----
my $hb = $nb->background_psql('postgres');
is($hb->query_safe("SELECT rl_acquire('dead', 1, hold => 'session')"), 't',
	'b holds dead');
my $kout = '';
my $k = start_psql($na,
	"SELECT rl_acquire('dead', 1, max_wait => '60 s')", \$kout);
ok(wait_queued('dead', 1), 'a waiter on a queues');
my $kpid = backend_of($na, q{%''dead'', 1, max_wait%});
my $nout = '';
my $n = start_psql($nb,
	"SELECT rl_acquire('dead', 1, max_wait => '60 s'), "
	  . "extract(epoch from clock_timestamp())", \$nout);
ok(wait_queued('dead', 2), 'a waiter on b queues behind it');
kill 'KILL', $kpid;
eval { $k->finish };
# a shuts down (the tests' servers do not restart after a crash): its
# waiter's ticket is renewed by nobody
my ($t0) = split /\|/, $hb->query_safe(
	"SELECT extract(epoch from clock_timestamp()), rl_release('dead')");
$n->finish;
my ($nok, $t1) = split /\|/, (split /\n/, $nout)[0];
is($nok, 't', 'the waiter behind a killed one takes the slot');
diag(sprintf("behind a killed waiter: the slot came %.0f ms after the release "
	  . "(its ticket lives 3 s without renewal)", ($t1 - $t0) * 1000));
is(queued('dead'), '0', 'no ticket left');

$hb->quit;
eval { $h->quit };
$na->{_pid} = undef;
done_testing();
