# Refunds apply only to the incarnation of the state they consumed from:
# a key that was reclaimed once idle (live keys are never evicted), and
# then created again, receives nothing of an older transaction's rollback;
# nor does the state of hybrid's local pre-check once reset and created
# again.  Each case rolls back a savepoint whose call was tracked
# (ratelimit.refund_on_rollback) after the key's new state was used up.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('incarnation');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.max_keys = 16
ratelimit.role_share = 100
ratelimit.database_share = 100
timezone = 'UTC'
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
});

sub sql { return $node->safe_psql('postgres', $_[0]); }

is(sql('SELECT capacity, partitions FROM rl_store_info()'), '16|1',
	'sixteen keys in one partition');

# ---- reclaim, then re-creation ----
# 'k' consumes in a savepoint at a time long past (so it is idle at once),
# the store fills with live keys, a new key reclaims 'k', 'k' is created
# again and used up; the savepoint's rollback must give it nothing.
is(sql(q{
	SET ratelimit.refund_on_rollback = on;
	BEGIN;
	SAVEPOINT s;
	SELECT rl_allow('k', 'fixed_window', 2, '1 second', at => '2020-01-01 00:00:00');
	SET LOCAL ratelimit.refund_on_rollback = off;
	SELECT count(*) FILTER (WHERE rl_allow('live:' || i, 'fixed_window', 1, '1 day'))
	FROM generate_series(1, 15) i;
	SELECT rl_allow('other', 'fixed_window', 1, '1 day');
	SELECT reclaimed FROM rl_store_info();
	SELECT rl_reset('other');
	SELECT rl_allow('k', 'fixed_window', 2, '1 second', cost => 2, at => '2020-01-01 00:00:00');
	ROLLBACK TO SAVEPOINT s;
	COMMIT;
	SELECT remaining FROM rl_check('k', 'fixed_window', 2, '1 second', 0, at => '2020-01-01 00:00:00');
}), "t\n15\nt\n1\n1\nt\n0", 'reclaimed and created again: the old refund lands nowhere');

# ---- hybrid's pre-check, reset and created again ----
# With Redis unreachable and fail_mode local, hybrid's local pre-check
# (hybrid_multiple 1: the call's own limit) decides; its refund must go to
# the pre-check state it consumed from only.
sql('SELECT rl_reset_all()');
my $closed_port = PostgreSQL::Test::Cluster::get_free_port();
is(sql(qq{
	SET client_min_messages = error;
	SET ratelimit.backend = hybrid;
	SET ratelimit.redis_nodes = '127.0.0.1:$closed_port';
	SET ratelimit.fail_mode = local;
	SET ratelimit.hybrid_multiple = 1;
	SET ratelimit.refund_on_rollback = on;
	BEGIN;
	SAVEPOINT s;
	SELECT rl_allow('h', 'token_bucket', 2, '1 hour', at => '2026-01-01 00:00:00');
	SET LOCAL ratelimit.refund_on_rollback = off;
	SET LOCAL ratelimit.backend = local;
	SELECT rl_reset('h', 'token_bucket');
	SET LOCAL ratelimit.backend = hybrid;
	SELECT rl_allow('h', 'token_bucket', 2, '1 hour', cost => 2, at => '2026-01-01 00:00:00');
	ROLLBACK TO SAVEPOINT s;
	COMMIT;
	SELECT rl_allow('h', 'token_bucket', 2, '1 hour', at => '2026-01-01 00:00:00');
}), "t\n1\nt\nf", 'the pre-check\'s state reset and created again: its old refund lands nowhere');
# and without the reset the pre-check's unit does come back
is(sql(qq{
	SET client_min_messages = error;
	SET ratelimit.backend = hybrid;
	SET ratelimit.redis_nodes = '127.0.0.1:$closed_port';
	SET ratelimit.fail_mode = local;
	SET ratelimit.hybrid_multiple = 1;
	SET ratelimit.refund_on_rollback = on;
	BEGIN;
	SELECT rl_allow('h2', 'token_bucket', 1, '1 hour', at => '2026-01-01 00:00:00');
	ROLLBACK;
	SELECT rl_allow('h2', 'token_bucket', 1, '1 hour', at => '2026-01-01 00:00:00');
}), "t\nt", 'without a reset the pre-check\'s unit comes back');

$node->stop;
done_testing();
