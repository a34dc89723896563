# Store isolation: an ordinary role that tries to pin the whole store (keys
# with a window of a century) and the whole pool (one sliding log with a
# huge limit) gets its role's share (ratelimit.role_share, 50%), counted
# across databases, and its database no more than ratelimit.database_share
# (75%).  A victim role in another database, and a neighbour role in the
# flooder's own database, keep exact decisions for new keys, keys longer
# than an entry's inline part and sliding logs, under fail_mode closed and
# open, while the flood goes on, and after a clean restart.  rl_owners,
# rl_store_shares and rl_status show who holds what.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('isolation');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.max_keys = 1024
ratelimit.pool_size = 128kB
timezone = 'UTC'
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE DATABASE a;
	CREATE DATABASE b;
	CREATE ROLE flooder LOGIN;
	CREATE ROLE neighbour;
	CREATE ROLE victim;
});
$node->safe_psql($_, 'CREATE EXTENSION ratelimit') foreach qw(a b);

sub sql { my ($db, $q) = @_; return $node->safe_psql($db, $q); }

# a statement run as an ordinary role, under a fail_mode (set by the
# superuser session before it switches role)
sub as_role
{
	my ($db, $role, $mode, $q) = @_;
	return sql($db, "SET ratelimit.fail_mode = '$mode';\nSET ROLE $role;\n$q");
}

sub store
{
	my %s;
	@s{qw(capacity used pool_blocks pool_used refused owners refused_role top_role_keys)} =
	  split /\|/, sql('a',
		'SELECT capacity, used, pool_blocks, pool_used, refused, owners, refused_role, top_role_keys FROM rl_status');
	return \%s;
}

# what each owner holds: "db/role" => {keys, pool_blocks, refused,
# role_keys, database_keys}
sub owners
{
	my %o;
	foreach my $row (split /\n/, sql('a', q{
		SELECT datname, rolname, keys, pool_blocks, refused, role_keys, database_keys
		FROM rl_owners}))
	{
		my ($db, $role, @n) = split /\|/, $row;
		@{ $o{"$db/$role"} }{qw(keys pool_blocks refused role_keys database_keys)} = @n;
	}
	return \%o;
}

my @algos = qw(fixed_window sliding_window_log sliding_window_counter
  token_bucket leaky_bucket);

# Four calls on each of ten new keys (every algorithm, a short key and one
# of 300 bytes: longer than the inline part, so it needs pool blocks) with
# a limit of 3 per century: exactly three admitted, remaining 2, 1, 0.
# Untracked calls would show: fail_mode open admits a fourth, closed
# denies the first.
sub exact
{
	my ($db, $role, $mode, $tag) = @_;
	my @calls;
	foreach my $algo (@algos)
	{
		foreach my $key ("$tag:$algo", ('L' x 300) . ":$tag:$algo")
		{
			push @calls, qq{SELECT string_agg(CASE WHEN r.allowed THEN r.remaining::text ELSE 'denied' END, ',' ORDER BY i)
				FROM generate_series(1, 4) i,
					LATERAL rl_check('$key', '$algo', 3, '36525 days', 1 + 0 * i) r;};
		}
	}
	is(as_role($db, $role, $mode, join("\n", @calls)),
		join("\n", ('2,1,0,denied') x 10),
		"$role in $db, fail_mode $mode: new keys, long keys and sliding logs exact ($tag)");
}

# A sliding log with a huge limit grows by an entry per microsecond in which
# calls are admitted (4 per block): call it until the pool gives it no
# more blocks.
sub flood_log
{
	my ($key) = @_;
	my ($calls, $admitted, $used) = (0, 0, -1);
	for (1 .. 50)
	{
		$admitted += as_role('a', 'flooder', 'open', qq{
			SELECT count(*) FILTER (WHERE rl_allow('$key', 'sliding_window_log', 1000000000000, '36525 days'))
			FROM generate_series(1, 50000)});
		$calls += 50000;
		my $now = store()->{pool_used};
		last if $now == $used;
		$used = $now;
	}
	is($admitted, $calls, "the flooder's sliding log $key: every call admitted (fail_mode open)");
}

# ---- the flood ----

# a second log, for later: at its share the flooder could not create it
is(as_role('a', 'flooder', 'open',
	"SELECT rl_allow('pin2', 'sliding_window_log', 1000000000000, '36525 days')"),
	't', 'the flooder keeps a second sliding log');
flood_log('pin');
my $s = store();
my $cap_blocks = int($s->{pool_blocks} / 2);
my $cap_keys = int($s->{capacity} / 2);
is($s->{pool_used}, $cap_blocks,
	"one sliding log took the role's share of the pool, $cap_blocks of $s->{pool_blocks} blocks");

# keys that stay live for a century take every entry
is(as_role('a', 'flooder', 'open', q{
	SELECT count(*) FILTER (WHERE rl_allow('century:' || i, 'fixed_window', 1, '36525 days'))
	FROM generate_series(1, 3000) i}),
	'3000', 'the flooder\'s century keys: every call admitted (fail_mode open)');
$s = store();
is($s->{used}, $cap_keys, "the flooder holds its role's share of the keys, $cap_keys of $s->{capacity}");
is($s->{top_role_keys}, $cap_keys, 'rl_status: the most a role holds');
my $o = owners();
is($o->{'a/flooder'}{keys}, $cap_keys, 'rl_owners: the flooder holds half the keys');
is($o->{'a/flooder'}{pool_blocks}, $cap_blocks, 'rl_owners: and half the pool');
cmp_ok($o->{'a/flooder'}{refused}, '>', 0, 'rl_owners: the flooder\'s calls past its share were refused');
is($s->{refused_role}, $s->{refused}, 'rl_status: every refusal was for the role\'s cap');

# ---- the victims ----

exact('b', 'victim', 'closed', 'v1');
exact('a', 'neighbour', 'closed', 'n1');
exact('b', 'victim', 'open', 'v2');
exact('a', 'neighbour', 'open', 'n2');

$s = store();
$o = owners();
is($s->{owners}, 3, 'rl_status: three owners hold entries or blocks');
is($o->{'a/flooder'}{keys}, $cap_keys, 'rl_owners: the flooder lost no key');
is($o->{'b/victim'}{keys}, 20, 'rl_owners: the victim holds its 20 keys');
cmp_ok($o->{'b/victim'}{pool_blocks}, '>=', 30, 'rl_owners: and pool blocks for its long keys and logs');
is($o->{'a/neighbour'}{database_keys}, $cap_keys + 20,
	'rl_owners: database a holds the flooder\'s and the neighbour\'s keys');
is(join(' ', map { $o->{$_}{refused} } qw(b/victim a/neighbour)),
	'0 0', 'rl_owners: neither the victim nor the neighbour was refused');
# the keys used before stay exact
is(as_role('b', 'victim', 'closed', q{
	SELECT string_agg(allowed::text || remaining, ' ' ORDER BY a)
	FROM unnest(ARRAY['fixed_window', 'sliding_window_log', 'sliding_window_counter',
		'token_bucket', 'leaky_bucket']) a,
		LATERAL rl_check('v1:' || a, a, 3, '36525 days') r}),
	join(' ', ('false0') x 5), 'the victim\'s keys are still at their limit');

# ---- the flood goes on: at its share, the flooder takes no more ----

my $refused = owners()->{'a/flooder'}{refused};
is(as_role('a', 'flooder', 'open',
	"SELECT rl_allow('pin3', 'sliding_window_log', 1000000000000, '36525 days')"),
	't', 'a new key of the flooder: admitted (fail_mode open) ...');
is(owners()->{'a/flooder'}{refused}, $refused + 1,
	'... but refused: at its share, the flooder takes nothing from anyone');

is(as_role('a', 'flooder', 'open', q{
	SELECT count(*) FILTER (WHERE rl_allow('century2:' || i, 'token_bucket', 1, '36525 days'))
	FROM generate_series(1, 3000) i}),
	'3000', 'more century keys: admitted (fail_mode open)');
# the same flood from the flooder's session in the victim's database: the
# role's share is counted across databases, so it gets nothing there
is(as_role('b', 'flooder', 'open', q{
	SELECT count(*) FILTER (WHERE rl_allow(repeat('x', 200) || i, 'leaky_bucket', 1, '36525 days'))
	FROM generate_series(1, 3000) i}),
	'3000', 'long century keys in the victim\'s database: admitted (fail_mode open)');
$o = owners();
is($o->{'b/flooder'}{keys} // 0, 0, 'rl_owners: but none tracked: the role holds its share already');
is($o->{'b/flooder'}{refused}, 3000, 'rl_owners: each refused');
is($o->{'b/flooder'}{role_keys}, $cap_keys, 'rl_owners: the role\'s keys, across databases');
flood_log('pin2');
is(owners()->{'a/flooder'}{pool_blocks}, $cap_blocks,
	'the flooder still holds its share of the pool, no more');

# while two sessions of the flooder go on calling new keys and its log
my $script = $node->basedir . '/flood.sql';
append_to_file($script, q{
\set k random(1, 1000000000)
SELECT rl_allow('bench:' || :k, 'fixed_window', 1, '36525 days');
SELECT rl_allow('pin2', 'sliding_window_log', 1000000000000, '36525 days');
});
my ($out, $err) = ('', '');
my $pgbench = IPC::Run::start(
	[
		'pgbench', '-n', '-c', '2', '-j', '2', '-t', '3000', '-f', $script,
		'-h', $node->host, '-p', $node->port, '-U', 'flooder', 'a'
	],
	'>', \$out, '2>', \$err);
exact('b', 'victim', 'closed', 'v3');
exact('a', 'neighbour', 'closed', 'n3');
exact('b', 'victim', 'open', 'v4');
ok($pgbench->finish, 'the concurrent flood ran') or diag($err);

# ---- a clean restart keeps the owners with their keys ----

$o = owners();
my $before = join(' ', map { "$_=$o->{$_}{keys}" } grep { $o->{$_}{keys} > 0 } sort keys %$o);
$node->restart;
ok($node->log_contains(qr/ratelimit restored the state of \d+ keys/), 'the state was restored');
$o = owners();
is(join(' ', map { "$_=$o->{$_}{keys}" } grep { $o->{$_}{keys} > 0 } sort keys %$o), $before,
	'rl_owners: every owner holds the same keys after a clean restart');
is(as_role('b', 'victim', 'closed', q{
	SELECT string_agg(allowed::text || remaining, ' ' ORDER BY a)
	FROM unnest(ARRAY['fixed_window', 'sliding_window_log', 'sliding_window_counter',
		'token_bucket', 'leaky_bucket']) a,
		LATERAL rl_check('v3:' || a, a, 3, '36525 days') r}),
	join(' ', ('false0') x 5), 'the victim\'s keys kept their state');
exact('b', 'victim', 'closed', 'v5');
exact('a', 'neighbour', 'closed', 'n5');
exact('a', 'neighbour', 'open', 'n6');
is(owners()->{'b/victim'}{refused}, 0, 'rl_owners: the victim was never refused');

# ---- many roles of one database ----
# Seven more flooding roles in the flooder's database (made by whoever may
# create roles there) take no more than the database's share together
# (ratelimit.database_share, 75%): the victim's database keeps the rest.
foreach my $n (2 .. 8)
{
	sql('postgres', "CREATE ROLE flooder$n");
	as_role('a', "flooder$n", 'open', qq{
		SELECT count(*) FROM generate_series(1, 1000) i
		WHERE rl_allow('f$n:' || i, 'fixed_window', 1, '36525 days')});
}
$o = owners();
is($o->{'a/flooder2'}{database_keys}, int(store()->{capacity} * 3 / 4),
	'database a holds its share of the keys, no more');
is(as_role('b', 'victim', 'closed', q{
	SELECT count(*) FILTER (WHERE rl_allow('many:' || i, 'fixed_window', 1, '36525 days'))
	FROM generate_series(1, 100) i}),
	'100', 'ten roles, two databases: the victim\'s 100 new keys are all tracked');
is(owners()->{'b/victim'}{refused}, 0, 'rl_owners: and none was refused');

$node->stop;
done_testing();
