# Concurrency limits between backends: waiters get a freed slot in the
# order they came (first come, first served), woken when it frees; a call
# that does not wait is refused while others wait; a slot held for the
# session lasts across transactions until the session ends; a backend
# ended by pg_terminate_backend gives back its slots and leaves the queue;
# a backend killed with SIGKILL makes the postmaster reinitialize shared
# memory, after which no slot is held.  Under 32 pgbench clients holding
# slots of one key for random times, the holders never exceed the limit,
# counted apart from the limiter (each holder holds a shared advisory lock
# while it has its slot), and no slot is left held after the run, after
# clients are terminated mid-run, or after a backend is killed.  (The lock
# is let go before COMMIT: a slot is given back at commit, before the
# transaction's locks are.)
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('concurrency');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
restart_after_crash = on
max_connections = 60
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

# in-flight and waiting counts of a key, as "held/waiting" ("0/0": none)
sub slots
{
	my ($key) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT coalesce((SELECT in_flight || '/' || waiting FROM rl_slots() WHERE key = '$key'), '0/0')});
}

sub wait_slots
{
	my ($key, $want, $what) = @_;
	ok($node->poll_query_until('postgres', qq{
		SELECT coalesce((SELECT in_flight || '/' || waiting FROM rl_slots() WHERE key = '$key'), '0/0')},
		$want), $what);
}

# ---- first come, first served ----
my $holder = $node->background_psql('postgres');
$holder->query_safe("BEGIN; SELECT rl_acquire('fifo', 1)");
my @waiters;
foreach my $i (1 .. 3)
{
	my $w = $node->background_psql('postgres');
	$w->query_until(qr/queued/, qq{\\echo queued
BEGIN;
SELECT rl_acquire('fifo', 1, max_wait => '5 min') AS got;
\\echo took $i
});
	wait_slots('fifo', "1/$i", "waiter $i queued");
	push @waiters, $w;
}
is($node->safe_psql('postgres', "SELECT rl_acquire('fifo', 5)"), 'f',
	'a newcomer that does not wait is refused while others wait, even under a higher limit');

$holder->query_safe('COMMIT');
foreach my $i (1 .. 3)
{
	my $w = $waiters[ $i - 1 ];
	my $out = $w->query_until(qr/took $i/, '');
	like($out, qr/\bt\b/, "waiter $i takes the slot when it frees");
	wait_slots('fifo', '1/' . (3 - $i), "the others still wait after waiter $i took it");
	$w->query_safe('COMMIT');
}
wait_slots('fifo', '0/0', 'every slot given back');
$_->quit foreach @waiters;

# ---- a session's slot lasts across transactions, until the session ends ----
my $sess = $node->background_psql('postgres');
$sess->query_safe("SELECT rl_acquire('sess', 1, 'session')");
$sess->query_safe('BEGIN; SELECT 1; COMMIT');
$sess->query_safe('BEGIN; SELECT 1; ROLLBACK');
is(slots('sess'), '1/0', 'a session slot outlives its transactions');
is($node->safe_psql('postgres', "SELECT rl_acquire('sess', 1)"), 'f', 'and others are refused');
$sess->quit;
wait_slots('sess', '0/0', 'the session\'s exit gives it back');

# ---- pg_terminate_backend: holders give back, waiters leave the queue ----
my $h1 = $node->background_psql('postgres', on_error_stop => 0);
my $h1_pid = $h1->query_safe('SELECT pg_backend_pid()');
$h1->query_safe("SELECT rl_acquire('term', 2, 'session')");
my $h2 = $node->background_psql('postgres', on_error_stop => 0);
my $h2_pid = $h2->query_safe('SELECT pg_backend_pid()');
$h2->query_safe("BEGIN; SELECT rl_acquire('term', 2)");
my $w = $node->background_psql('postgres', on_error_stop => 0);
my $w_pid = $w->query_safe('SELECT pg_backend_pid()');
$w->query_until(qr/queued/, qq{\\echo queued
SELECT rl_acquire('term', 2, max_wait => '5 min');
});
wait_slots('term', '2/1', 'two holders and a waiter');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($w_pid)");
wait_slots('term', '2/0', 'a terminated waiter leaves the queue');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($h1_pid)");
wait_slots('term', '1/0', 'a terminated session holder gives its slot back');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($h2_pid)");
wait_slots('term', '0/0', 'a terminated transaction holder gives its slot back');
$_->{run}->finish foreach ($h1, $h2, $w);

# ---- SIGKILL: the postmaster reinitializes shared memory ----
my $k = $node->background_psql('postgres', on_error_stop => 0);
my $k_pid = $k->query_safe('SELECT pg_backend_pid()');
$k->query_safe("SELECT rl_acquire('kill', 1, 'session')");
my $kw = $node->background_psql('postgres', on_error_stop => 0);
$kw->query_until(qr/queued/, qq{\\echo queued
SELECT rl_acquire('kill', 1, max_wait => '5 min');
});
wait_slots('kill', '1/1', 'a holder and a waiter before the kill');
kill 'KILL', $k_pid;
$k->{run}->finish;
$kw->{run}->finish;
ok($node->poll_query_until('postgres', 'SELECT 1', '1'), 'the server accepts connections after the crash');
is(slots('kill'), '0/0', 'no slot is held after the crash');
is($node->safe_psql('postgres', "SELECT rl_acquire('kill', 1)"), 't', 'and the key\'s slot can be taken');

# ---- 32 clients holding slots for random times ----
my $limit = 5;
my $hold = $node->basedir . '/hold.sql';
PostgreSQL::Test::Utils::append_to_file($hold, qq{
\\set us random(0, 3000)
BEGIN;
SELECT pg_advisory_lock_shared(83)
	FROM (SELECT rl_acquire('stress', $limit, max_wait => '5 min') AS ok) s WHERE ok;
SELECT pg_sleep(:us / 1000000.0);
SELECT pg_advisory_unlock_all();
COMMIT;
});
$node->safe_psql('postgres', q{
	CREATE FUNCTION sample(n int, OUT most_locks bigint, OUT most_slots bigint,
						   OUT samples int)
	LANGUAGE plpgsql AS $$
	DECLARE
		l bigint;
		h bigint;
	BEGIN
		most_locks := 0;
		most_slots := 0;
		samples := n;
		FOR i IN 1 .. n LOOP
			SELECT count(*) INTO l FROM pg_locks
				WHERE locktype = 'advisory' AND objid = 83 AND granted;
			SELECT coalesce(max(in_flight), 0) INTO h FROM rl_slots() WHERE key = 'stress';
			most_locks := greatest(most_locks, l);
			most_slots := greatest(most_slots, h);
			PERFORM pg_sleep(0.001);
		END LOOP;
	END $$});

# pgbench's clients holding slots, for the given time (or transactions)
sub stress
{
	my (@limit) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[
			'pgbench', '-n', '-c', '32', '-j', '2', @limit, '-f', $hold,
			'-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', \$out, '2>', \$err);
	return ($h, \$out, \$err);
}

# every slot held and clients waiting
sub wait_full
{
	my ($what) = @_;
	ok($node->poll_query_until('postgres', qq{
		SELECT EXISTS (SELECT FROM rl_slots()
					   WHERE key = 'stress' AND in_flight = $limit AND waiting > 0)}),
		$what);
}

my ($pgb, $out, $err) = stress('-t', '100');
wait_full('every slot held, clients waiting');
my ($locks, $held, $samples) = split /\|/,
  $node->safe_psql('postgres', 'SELECT * FROM sample(1000)');
ok($locks >= 1 && $locks <= $limit,
	"at most $limit holders at once, by their advisory locks ($locks, in $samples samples)");
ok($held >= 1 && $held <= $limit, "and by rl_slots ($held)");
ok($pgb->finish, 'pgbench ran') or diag($$err);
like($$out, qr/number of transactions actually processed: 3200\b/, 'every transaction ran');
wait_slots('stress', '0/0', 'no slot held after the run');

# clients terminated mid-run give their slots back; the others go on
($pgb, $out, $err) = stress('-T', '5');
wait_full('a second run under way');
# (a holder may have ended by itself meanwhile: at least one is terminated)
# (one between its slot and its advisory lock shows none: look again)
my $terminated = 0;
for (my $try = 0; $try < 600 && !$terminated; $try++)
{
	$terminated = $node->safe_psql('postgres', q{
		SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM (
			SELECT pid FROM pg_locks
			WHERE locktype = 'advisory' AND objid = 83 AND granted
			LIMIT 3) h});
	Time::HiRes::sleep(0.05) unless $terminated;
}
ok($terminated >= 1, "holders terminated ($terminated)");
($locks, $held) = split /\|/, $node->safe_psql('postgres', 'SELECT * FROM sample(300)');
ok($locks <= $limit && $held <= $limit, "still at most $limit holders ($locks, $held)");
$pgb->finish;
wait_slots('stress', '0/0', 'no slot held after clients were terminated');

# a backend killed mid-run: the postmaster reinitializes shared memory
($pgb, $out, $err) = stress('-T', '60');
wait_full('a third run under way');
# (a holder between its slot and its advisory lock shows no lock: look
# again; an empty pid would make kill signal this test's process group)
my $victim = '';
for (my $try = 0; $try < 600 && $victim !~ /^[1-9]\d*$/; $try++)
{
	$victim = $node->safe_psql('postgres', q{
		SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND objid = 83 AND granted LIMIT 1});
	Time::HiRes::sleep(0.05) if $victim eq '';
}
BAIL_OUT("no holder to kill") unless $victim =~ /^[1-9]\d*$/;
kill 'KILL', $victim;
$pgb->finish;
ok($node->poll_query_until('postgres', 'SELECT 1', '1'), 'the server is back after the kill');
is(slots('stress'), '0/0', 'no slot held after the crash');

$node->stop;
done_testing();
