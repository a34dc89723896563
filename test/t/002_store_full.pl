# A full store: idle state is reclaimed to make room, and when nothing can
# be reclaimed the call follows ratelimit.fail_mode and is counted.  The
# sliding-log pool likewise.  The role and database shares are 100% here
# (one role may fill the store): 026_store_caps.pl tests them.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('full');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.max_keys = 16
ratelimit.pool_size = 64kB
ratelimit.role_share = 100
ratelimit.database_share = 100
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

sub sql { return $node->safe_psql('postgres', $_[0]); }

is(sql("SELECT capacity, partitions FROM rl_store_info()"), '16|1', 'sixteen keys in one partition');

# 16 live keys (one per day each, real clock): the store is full
is(sql("SELECT count(*) FILTER (WHERE rl_allow('live:' || i, 'fixed_window', 1, '1 day')) FROM generate_series(1, 16) i"),
	'16', 'sixteen keys admitted');
is(sql("SELECT used, refused FROM rl_store_info()"), '16|0', 'store full, nothing refused yet');

# a 17th key cannot be tracked: fail_mode decides and the refusal is counted
my $open = sql("SELECT allowed, remaining, retry_after FROM rl_check('new:1', 'fixed_window', 5, '1 day')");
is($open, 't|4|0', 'fail_mode = open allows an untracked key');
is(sql("SELECT allowed, remaining, retry_after FROM rl_check('new:1', 'fixed_window', 5, '1 day')"),
	't|4|0', 'and keeps allowing it: nothing was recorded');
my $closed = $node->safe_psql('postgres', qq{
SET ratelimit.fail_mode = 'closed';
SELECT allowed, remaining, retry_after FROM rl_check('new:2', 'token_bucket', 5, '1 minute');
});
is($closed, 'f|0|60', 'fail_mode = closed denies and asks to retry after one window');
is(sql("SELECT refused FROM rl_store_info()"), '3', 'every refusal is counted');
# existing keys keep working while the store is full
is(sql("SELECT rl_allow('live:1', 'fixed_window', 1, '1 day')"), 'f', 'tracked key still limited');
# a call that consumes nothing needs no room
is(sql("SELECT rl_allow('new:3', 'fixed_window', 1, '1 day', cost => 0)"), 't', 'a look needs no room');

# idle state (back to a new key's) is reclaimed to make room
sql("SELECT rl_reset_all()");
sql("SELECT rl_allow('old:' || i, 'token_bucket', 1, '1 second', at => '2020-01-01') FROM generate_series(1, 16) i");
is(sql("SELECT used FROM rl_store_info()"), '16', 'full of idle keys');
is(sql("SELECT count(*) FILTER (WHERE rl_allow('fresh:' || i, 'fixed_window', 1, '1 day')) FROM generate_series(1, 16) i"),
	'16', 'idle keys make room for new ones');
is(sql("SELECT used, reclaimed >= 16, refused FROM rl_store_info()"), '16|t|3', 'reclaimed, not refused');

# long keys take pool blocks; the pool has a bound too
sql("SELECT rl_reset_all()");
my $blocks = sql("SELECT pool_blocks FROM rl_store_info()");
ok($blocks > 0 && $blocks < 1000, "pool of $blocks blocks");
is(sql("SELECT rl_allow(repeat('k', 4096), 'fixed_window', 1, '1 day')"), 't', 'a 4 kB key');
ok(sql("SELECT pool_used FROM rl_store_info()") > 60, 'a 4 kB key takes pool blocks');
sql("SELECT rl_reset_all()");
is(sql("SELECT pool_used FROM rl_store_info()"), '0', 'and gives them back');

# sliding_window_log: exhaust the pool, then fail_mode applies
my $n = $blocks * 4 + 100;
is(sql("SELECT count(*) FILTER (WHERE rl_allow('log', 'sliding_window_log', 1000000, '1 day', at => '2026-01-01'::timestamptz + i * interval '1 microsecond')) FROM generate_series(1, $n) i"),
	$n, 'fail_mode = open: calls past the pool are allowed');
is(sql("SELECT pool_used = pool_blocks FROM rl_store_info()"), 't', 'pool exhausted');
my $log_closed = $node->safe_psql('postgres', qq{
SET ratelimit.fail_mode = 'closed';
SELECT rl_allow('log', 'sliding_window_log', 1000000, '1 day', at => '2026-01-01 00:00:01');
});
is($log_closed, 'f', 'fail_mode = closed: denied when the log cannot grow');
is(sql("SELECT rl_allow('log', 'sliding_window_log', 1000000, '1 day', cost => 0, at => '2026-01-01 00:00:01')"),
	't', 'a look at a full log still works');
sql("SELECT rl_reset('log')");
is(sql("SELECT pool_used FROM rl_store_info()"), '0', 'reset frees the log');
# with shares of 100%, one role alone may use the whole store and pool
is(sql("SELECT refused_role, refused_database FROM rl_store_shares()"), '0|0',
	'no call refused by a cap');

$node->stop;
done_testing();
