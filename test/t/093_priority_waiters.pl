# Load shedding on a concurrency limit with waiters (test/specs/
# priority_slots.spec has the calls that do not wait): a sheddable waiter,
# which must leave the reserve free, holds back neither a critical call
# that does not wait (it takes the slot the sheddable waiter may not) nor
# a critical waiter queued behind it (served first when a slot frees); it
# gets its slot once the reserve is free again.  rl_stats counts a call
# refused by its headroom alone as shed, waiting or not.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use RlShed;

my $node = PostgreSQL::Test::Cluster->new('priority_waiters');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	-- 2 slots, half of them kept: a sheddable call takes one only while
	-- none is held
	INSERT INTO rl_policy (name, algo, "limit", reserve)
	VALUES ('pw', 'concurrency', 2, 0.5);
});

sub wait_slots
{
	my ($want, $what) = @_;
	ok($node->poll_query_until('postgres', q{
		SELECT coalesce((SELECT in_flight || '/' || waiting FROM rl_slots() WHERE key = 'k'), '0/0')},
		$want), $what);
}

# a session taking a slot of k under pw with a priority, waiting up to
# 5 minutes if asked; prints "took" when the call returns
sub waiter
{
	my ($priority) = @_;
	my $w = $node->background_psql('postgres');
	$w->query_until(qr/asking/, qq{\\echo asking
BEGIN;
SELECT rl_acquire('k', 'pw', max_wait => '5 min', priority => '$priority') AS got;
\\echo took
});
	return $w;
}

my $holder = $node->background_psql('postgres');
is($holder->query_safe(
		"BEGIN; SELECT rl_acquire('k', 'pw', priority => 'sheddable')"),
	't', 'a sheddable call takes the first slot');
my $shed = waiter('sheddable');
wait_slots('1/1', 'a second sheddable call waits: the other slot is the reserve');

is($node->safe_psql('postgres',
		"SELECT rl_acquire('k', 'pw', priority => 'critical')"),
	't', 'a critical call that does not wait takes the reserved slot past the sheddable waiter');
wait_slots('1/1', 'given back at its statement\'s end, the reserve stays free for critical calls');

my $second = $node->background_psql('postgres');
is($second->query_safe(
		"BEGIN; SELECT rl_acquire('k', 'pw', priority => 'critical')"),
	't', 'a critical holder takes the second slot');
wait_slots('2/1', 'both slots held, the sheddable call still waits');
my $crit = waiter('critical');
wait_slots('2/2', 'a critical call waits behind the sheddable one');

$second->query_safe('COMMIT');
like($crit->query_until(qr/took/, ''), qr/\bt\b/,
	'the freed slot goes to the critical waiter, passing the sheddable one');
wait_slots('2/1', 'the sheddable call still waits');

$holder->query_safe('COMMIT');
wait_slots('1/1', 'one slot free, but it is the reserve: the sheddable call waits on');
$crit->query_safe('COMMIT');
like($shed->query_until(qr/took/, ''), qr/\bt\b/,
	'the sheddable waiter gets its slot once the reserve is free again');
wait_slots('1/0', 'nobody waits');
$shed->query_safe('COMMIT');
wait_slots('0/0', 'every slot given back');

$_->quit foreach ($holder, $second, $shed, $crit);

# ---- rl_stats counts a call its headroom alone refused as shed ----
# Policy ps: 2 slots, half of them kept.  A sheddable call refused while
# a slot is free under the limit is shed, whether it waited for the slot
# or not; one refused because every slot is held is denied, not shed.
$node->safe_psql('postgres', q{
	INSERT INTO rl_policy (name, algo, "limit", reserve)
	VALUES ('ps', 'concurrency', 2, 0.5);
});

RlShed::slot_shed_counts($node, 'ps', 'slot');

$node->stop;
done_testing();
