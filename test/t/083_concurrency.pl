# Concurrency limits between backends: waiters get a freed slot in the
# order they came (first come, first served), woken when it frees; a call
# that does not wait is refused while others wait; a slot held for the
# session lasts across transactions until the session ends; a backend
# ended by pg_terminate_backend gives back its slots and leaves the queue;
# a backend killed with SIGKILL makes the postmaster reinitialize shared
# memory, after which no slot is held.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('concurrency');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
restart_after_crash = on
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

$node->stop;
done_testing();
