# Key flooding by an unprivileged role: far more keys than max_keys, keys of
# 4096 bytes, sliding logs with large limits.  Shared memory stays what it
# was at start, the flooder holds no more than its role's share of the
# keys and of the pool (ratelimit.role_share, 50%), every call that cannot
# be tracked follows fail_mode and is counted, and keys tracked before the
# flood keep their exact decisions.
# No timing assertions: latencies are only noted.
use strict;
use warnings;
use IPC::Run;
use Time::HiRes qw(time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('flood');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.max_keys = 2000
ratelimit.pool_size = 256kB
timezone = 'UTC'
restart_after_crash = off
});
$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION ratelimit;
CREATE ROLE flooder LOGIN;
CREATE ROLE tenant LOGIN;
});

sub sql { return $node->safe_psql('postgres', $_[0]); }
sub as_role { my ($role, $q) = @_; return sql("SET ROLE $role;\n$q"); }

sub info
{
	my %i;
	@i{qw(capacity used pool_blocks pool_used reclaimed refused)} =
	  split /\|/, sql('SELECT capacity, used, pool_blocks, pool_used, reclaimed, refused FROM rl_store_info()');
	return \%i;
}

# every shared-memory allocation of the extension, with its size
my $shmem_query = q{SELECT string_agg(name || '=' || size || '/' || allocated_size, ',' ORDER BY name)
	FROM pg_shmem_allocations WHERE name LIKE 'ratelimit%'};
my $shmem_at_start = sql($shmem_query);
like($shmem_at_start, qr/ratelimit store=\d+/, "store segment: $shmem_at_start");

# ---- keys tracked before the flood ----
# Five "other tenants" with a limit of 4 per hour, one per algorithm, on
# explicit times in 2100 (never idle by the real clock, so never reclaimed),
# and one tenant on the real clock with a 100-year window.  Each gets one
# call now, one during the flood, one after it, one under fail_mode =
# closed; the fifth is denied: exactly 4 admitted.
my @algos = qw(fixed_window sliding_window_log sliding_window_counter
  token_bucket leaky_bucket);
my $step = 0;

sub tenant_round
{
	my $at = sprintf("'2100-01-01 00:00:%02d+00'", $step++);
	my $calls = join ",\n", map {
		"rl_allow('other:$_', '$_', 4, '1 hour', at => $at)"
	} @algos;
	my $super = sql("SELECT concat_ws(' ', $calls)");
	my $own = as_role('tenant',
		"SELECT rl_allow('tenant:own', 'fixed_window', 4, '36525 days')");
	return "$super $own";
}

sub tenants_ok
{
	my ($want, $when) = @_;
	is(tenant_round(), join(' ', ($want) x 6),
		"tracked keys: " . ($want eq 't' ? 'admitted' : 'denied') . " $when");
}

tenants_ok('t', 'before the flood');
my $before = info();
is($before->{used}, 6, 'six keys tracked before the flood');
is($before->{refused}, 0, 'nothing refused yet');

# ---- the flood, fail_mode = open (the default) ----

# sliding logs with a huge limit, from the real clock: every call adds a
# log entry (distinct microseconds) until the pool runs out
my $t0 = time;
is(as_role('flooder', q{
	SELECT count(*) FILTER (WHERE rl_allow('log:' || (i % 20), 'sliding_window_log',
		1000000000, '36525 days'))
	FROM generate_series(1, 20000) i}),
	'20000', 'fail_mode = open: 20,000 sliding-log calls admitted');
my $i = info();
note(sprintf("sliding logs: %.2f s, pool %d/%d blocks, refused %d",
	time - $t0, $i->{pool_used}, $i->{pool_blocks}, $i->{refused}));
# the flooder may hold half of the pool (ratelimit.role_share)
my $cap_blocks = int($i->{pool_blocks} / 2);
is($i->{pool_used} - $before->{pool_used}, $cap_blocks,
	'the flood took its role\'s share of the pool, no more');
cmp_ok($i->{refused}, '>', 0, 'log appends past the pool were refused and counted');

# keys of 4096 bytes: each needs 64 pool blocks, and the pool is spent
is(as_role('flooder', q{
	SELECT count(*) FILTER (WHERE rl_allow(repeat('h', 4088) || lpad(i::text, 8, '0'),
		'token_bucket', 10, '36525 days'))
	FROM generate_series(1, 500) i}),
	'500', 'fail_mode = open: 500 keys of 4096 bytes admitted');
my $refused_huge = info()->{refused} - $i->{refused};
is($refused_huge, 500, 'and all 500 refused for want of pool blocks');
my ($ret, $out, $err) = $node->psql('postgres',
	"SET ROLE flooder; SELECT rl_allow(repeat('h', 4097), 'token_bucket', 10)");
like($err, qr/"key" is too long \(4097 bytes\)/, 'a key of 4097 bytes is an error');

# 50,000 distinct short keys in two statements; between them, on a full
# store, the tenants are called while pgbench floods random keys from two
# more sessions of the same role
my $flood = q{
	SELECT count(*) FILTER (WHERE rl_allow('flood:' || i, 'token_bucket', 10, '36525 days'))
	FROM generate_series(%d, %d) i};
$i = info();
$t0 = time;
is(as_role('flooder', sprintf($flood, 1, 25000)), '25000',
	'fail_mode = open: the first 25,000 new keys admitted');
note(sprintf("25,000 keys: %.2f s", time - $t0));

my $pgbench_script = $node->basedir . '/flood.sql';
PostgreSQL::Test::Utils::append_to_file($pgbench_script, q{
\set k random(1, 9000000000000000000)
SELECT rl_allow('pgbench:' || :k, 'token_bucket', 10, '36525 days');
});
my ($pgb_out, $pgb_err) = ('', '');
my $pgbench = IPC::Run::start(
	[
		'pgbench', '-n', '-M', 'prepared', '-c', '2', '-j', '2',
		'-t', '5000', '-f', $pgbench_script, '-h', $node->host,
		'-p', $node->port, '-U', 'flooder', 'postgres'
	],
	'>', \$pgb_out, '2>', \$pgb_err);
tenants_ok('t', 'during the flood');

# how long a tracked key's decision takes on a full, flooded store
my $us = sql(q{
	WITH t0 AS MATERIALIZED (SELECT clock_timestamp() AS t),
	calls AS MATERIALIZED (
		SELECT count(*) AS n FROM t0, generate_series(1, 1000) j
		WHERE rl_allow('other:token_bucket', 'token_bucket', 4, '1 hour', cost => 0,
			at => '2100-01-01'))
	SELECT round(extract(epoch FROM clock_timestamp() - t) * 1000, 2)
	FROM t0, calls});
note("a tracked key's decision during the flood: $us us");

is(as_role('flooder', sprintf($flood, 25001, 50000)), '25000',
	'fail_mode = open: the next 25,000 admitted');
ok($pgbench->finish, 'pgbench flood of 10,000 random keys ran')
  or diag($pgb_err);
my ($tps) = $pgb_out =~ /tps = ([\d.]+)/;
my ($lat) = $pgb_out =~ /latency average = ([\d.]+ ms)/;
note("pgbench flood: " . ($tps // '?') . " tps, latency " . ($lat // '?'));

my $after = info();
is($after->{used}, 6 + int($after->{capacity} / 2),
	"the flooder took its role's share of the keys: $after->{used} of $after->{capacity} used");
is($after->{pool_used} - $before->{pool_used}, $cap_blocks, 'and of the pool, no more');
is($after->{reclaimed}, 0, 'no live key was reclaimed');
# each new key either took a free entry or was refused; the tenants add
# nothing (they were tracked already)
is($after->{refused} - $i->{refused},
	50000 + 10000 - ($after->{used} - $i->{used}),
	'every new key that found no room was refused and counted');
is(sql($shmem_query), $shmem_at_start, 'shared memory unchanged by the flood');
# every refusal is the flooder's, for its role's cap
is(sql('SELECT owners, refused_role = (SELECT refused FROM rl_store_info()), refused_database FROM rl_store_shares()'),
	'3|t|0', 'rl_store_shares: three owners, every refusal for the role\'s cap');
is(sql(q{SELECT refused FROM rl_owners WHERE rolname = 'flooder'}), $after->{refused},
	'every refusal was the flooder\'s');
tenants_ok('t', 'after the flood');

# a flood key that was tracked (cost 0 looks without consuming, and
# answers a new key's remaining, 10, for an untracked one)
my $tracked = sql(q{
	SELECT min(i) FROM generate_series(1, 100) i
	WHERE (SELECT remaining FROM rl_check('flood:' || i, 'token_bucket', 10,
		'36525 days', 0)) = 9});
ok($tracked, "flood:$tracked is tracked");

# ---- fail_mode = closed ----

sql("ALTER SYSTEM SET ratelimit.fail_mode = 'closed'");
sql('SELECT pg_reload_conf()');
$node->poll_query_until('postgres', 'SHOW ratelimit.fail_mode', 'closed')
  or die 'fail_mode did not change';
my $refused = info()->{refused};
is(as_role('flooder', q{
	SELECT count(*) FILTER (WHERE rl_allow('closed:' || i, 'fixed_window', 10, '36525 days'))
	FROM generate_series(1, 1000) i}),
	'0', 'fail_mode = closed: new keys denied');
is(as_role('flooder', q{
	SELECT allowed, remaining, retry_after
	FROM rl_check('closed:x', 'token_bucket', 10, '1 minute')}),
	'f|0|60', 'denied with retry_after = one window');
is(as_role('flooder', q{
	SELECT rl_allow('log:1', 'sliding_window_log', 1000000000, '36525 days')}),
	'f', 'a tracked log that needs a block it cannot get is denied');
is(info()->{refused} - $refused, 1002, 'each refusal counted');
is(as_role('flooder', "SELECT allowed, remaining FROM rl_check('flood:$tracked',
	'token_bucket', 10, '36525 days')"),
	't|8', "fail_mode = closed: tracked flood:$tracked decided exactly");
tenants_ok('t', 'under fail_mode = closed');
tenants_ok('f', 'past their limit');
($ret, $out, $err) = $node->psql('postgres',
	"SET ROLE flooder; SET ratelimit.fail_mode = 'open'");
like($err, qr/permission denied to set parameter "ratelimit.fail_mode"/,
	'the flooder cannot switch fail_mode back');

# ---- the server is unharmed ----
is(sql($shmem_query), $shmem_at_start, 'shared memory unchanged at the end');
my $log = slurp_file($node->logfile);
unlike($log,
	qr/terminated by signal|server process .* (was terminated|exited with exit code)|PANIC:|TRAP:/,
	'no backend crashed');
is(sql('SELECT 1'), '1', 'a fresh connection works');

$node->stop;
done_testing();
