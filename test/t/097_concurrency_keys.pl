# rl_keys shows a concurrency limit's backends waiting for a slot (the
# regression test concurrency_keys covers in_flight and longest_hold from
# one session): one session holds the only slot, two wait; rl_keys
# reports 1 in flight and 2 waiting, then 1 and 1 once the holder commits
# and the first waiter has the slot, then nothing once all are done.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('concurrency_keys');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

my $keys = q{SELECT coalesce((SELECT in_flight || '/' || waiting || '/' || (longest_hold >= '0')
	FROM rl_keys() WHERE algo = 'concurrency' AND key = 'obs'), 'none')};

my $holder = $node->background_psql('postgres');
$holder->query_safe("BEGIN; SELECT rl_acquire('obs', 1)");
is($node->safe_psql('postgres', $keys), '1/0/true', 'one slot held, nobody waiting');

my @waiters;
foreach my $i (1 .. 2)
{
	my $w = $node->background_psql('postgres');
	$w->query_until(qr/queued/, qq{\\echo queued
BEGIN;
SELECT rl_acquire('obs', 1, max_wait => '5 min') AS got;
\\echo took $i
});
	ok($node->poll_query_until('postgres', $keys, "1/$i/true"),
		"waiter $i counted in rl_keys");
	push @waiters, $w;
}
$holder->query_safe('COMMIT');
ok($node->poll_query_until('postgres', $keys, '1/1/true'),
	'the first waiter holds the slot, the second still waits');
$waiters[0]->query_safe('COMMIT');
ok($node->poll_query_until('postgres', $keys, '1/0/true'),
	'the second waiter holds it');
$waiters[1]->query_safe('COMMIT');
is($node->safe_psql('postgres', $keys), 'none', 'nothing held: not listed');
$_->quit for $holder, @waiters;

done_testing();
