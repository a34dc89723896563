# A refund finds its state by the entry its receipt names (#9: the refund
# tracker keeps no key for a store's receipt), so an entry taken by another
# key in the meantime must get nothing of the first key's refund.  In a
# store of 16 entries in one partition, a freed entry is the next one
# taken: a key consumes in a transaction (its receipts pending, or added
# to their tallies by more receipts than the pending hold), is reset, and
# another key is created in its entry and consumes; the rollback gives
# back to the second key what it consumed tracked, and nothing of the
# first key's.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('refund_entry');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.max_keys = 16
ratelimit.role_share = 100
ratelimit.database_share = 100
ratelimit.refund_on_rollback = on
timezone = 'UTC'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

sub sql { return $node->safe_psql('postgres', $_[0]); }

is(sql('SELECT capacity, partitions FROM rl_store_info()'), '16|1',
	'sixteen entries in one partition');

# The remaining of a key of 10 an hour (a look, at the time of its calls).
sub remaining
{
	my ($k, $algo) = @_;
	return sql("SELECT remaining FROM rl_check('$k', '$algo', 10, '1 hour', 0,
		at => '2026-06-01 00:00:00+00')");
}

for my $algo ('fixed_window', 'sliding_window_counter', 'token_bucket',
	'leaky_bucket', 'sliding_window_log')
{
	for my $many (0, 1)
	{
		my $case = "$algo, " . ($many ? 'tallied' : 'pending');
		sql('SELECT rl_reset_all()');
		# 70 receipts of other keys pass the bound of pending receipts
		# (64): the first key's are then added to their tally
		my $more = $many ? "SELECT count(*) FROM generate_series(1, 70) i,
			LATERAL rl_check('other' || (i % 5), '$algo', 1000, '1 hour', 1,
				at => '2026-06-01 00:00:00+00') r;" : '';
		my $out = sql(qq{
			BEGIN;
			SELECT rl_allow('first', '$algo', 10, '1 hour', cost => 4,
				at => '2026-06-01 00:00:00+00');
			$more
			SELECT rl_reset('first', '$algo');
			SELECT rl_allow('second', '$algo', 10, '1 hour', cost => 3,
				at => '2026-06-01 00:00:00+00');
			SET LOCAL ratelimit.refund_on_rollback = off;
			SELECT rl_allow('second', '$algo', 10, '1 hour', cost => 5,
				at => '2026-06-01 00:00:00+00');
			SELECT remaining FROM rl_check('second', '$algo', 10, '1 hour', 0,
				at => '2026-06-01 00:00:00+00');
			ROLLBACK;
		});
		like($out, qr/\n2$/, "$case: the second key holds 3 + 5 in the transaction");
		is(remaining('second', $algo), '5',
			"$case: the rollback gives the second key its tracked 3, nothing of the first key's 4");
		is(remaining('first', $algo), '10', "$case: the first key is new");
	}
}

$node->stop;
done_testing();
