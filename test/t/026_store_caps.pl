# The store's caps (ratelimit.role_share, ratelimit.database_share) and no
# eviction of live keys (red-team finding f05).  A tenant held to a quota
# by a trigger cannot reset the quota by flooding the store with keys of
# its own: its quota key is never evicted.  An ordinary role cannot take
# another role's live state by showing up.  A role over its share is
# refused as fail_mode says (closed denies, open admits untracked), with a
# WARNING naming the cap, at most once a minute per session; a role's
# keys count across databases; the shares change at a reload.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('caps');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.max_keys = 2000
ratelimit.pool_size = 64kB
ratelimit.fail_mode = open
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE DATABASE other;
	CREATE EXTENSION ratelimit;
	CREATE ROLE tenant LOGIN;
	CREATE ROLE neighbour LOGIN;
	CREATE ROLE victim LOGIN;
	GRANT pg_monitor TO neighbour;
	INSERT INTO rl_policy (name, algo, "limit", per)
		VALUES ('daily', 'fixed_window', 3, '1 day');
	CREATE TABLE orders (tenant text, item text);
	GRANT INSERT, SELECT ON orders TO tenant;
	CREATE TRIGGER quota BEFORE INSERT ON orders
		FOR EACH ROW EXECUTE FUNCTION rl_enforce('daily', 'tenant');
});
$node->safe_psql('other', 'CREATE EXTENSION ratelimit');

sub sql { my ($q, $db) = @_; return $node->safe_psql($db // 'postgres', $q); }

# a statement as a role, in its own session: (stdout, stderr)
sub as
{
	my ($role, $q, $db) = @_;
	my ($rc, $out, $err) = $node->psql($db // 'postgres', $q,
		extra_params => [ '-U', $role ]);
	die "as $role: $err" if $rc != 0;
	return ($out, $err);
}

# keys whose call is admitted, of n new keys "prefix:i" (a century each)
sub flood
{
	my ($role, $prefix, $n, $db) = @_;
	return as($role, qq{
		SELECT count(*) FILTER (WHERE rl_allow('$prefix:' || i, 'fixed_window', 1, '36525 days'))
		FROM generate_series(1, $n) i}, $db);
}

sub owner
{
	my ($role, $what) = @_;
	return sql(qq{SELECT coalesce(sum($what), 0) FROM rl_owners WHERE rolname = '$role'});
}

is(sql('SELECT capacity, role_keys_cap, database_keys_cap FROM rl_store_info(), rl_store_shares()'),
	'2000|1000|1500', 'the caps: half the keys for a role, three quarters for a database');

# ---- a tenant cannot reset its own quota by flooding the store ----

my ($out, $err);
($out, $err) = as('tenant', q{INSERT INTO orders SELECT 't1', 'a' FROM generate_series(1, 3)});
my ($rc, $ignored);
($rc, $ignored, $err) = $node->psql('postgres', q{INSERT INTO orders VALUES ('t1', 'b')},
	extra_params => [ '-U', 'tenant' ]);
like($err, qr/rate limit exceeded/, 'the tenant\'s fourth row of the day is refused');

# the tenant floods the store with keys that idle in 100 years
($out, $err) = flood('tenant', 'junk', 2500);
is($out, '2500', 'the flood is admitted (fail_mode open) ...');
is(owner('tenant', 'keys'), 1000, '... but the tenant holds its share, 1000 keys, no more');
my @warnings = $err =~ /WARNING:  ratelimit: role "tenant" holds its share of the store's keys/g;
is(scalar @warnings, 1, 'one warning for the 1501 refusals, naming the role and the cap');
like($err, qr/DETAIL:  One role may hold 50% of them across databases \(1000\), set by "ratelimit.role_share"/,
	'its detail gives the share');

# someone else does ordinary work, needing room
($out, $err) = as('neighbour', q{SELECT count(*) FROM generate_series(1, 300) i,
	LATERAL rl_allow('other:' || i, 'token_bucket', 10, '1 minute') a WHERE a});
is($out, '300', 'a neighbour\'s 300 new keys are all admitted');
is(owner('neighbour', 'keys'), 300, 'and tracked');

($rc, $out, $err) = $node->psql('postgres',
	q{INSERT INTO orders SELECT 't1', 'again' FROM generate_series(1, 3)},
	extra_params => [ '-U', 'tenant' ]);
like($err, qr/rate limit exceeded/, 'the tenant is still held to 3 rows a day after its flood');
is(sql('SELECT count(*) FROM orders'), '3', '3 rows in the table (the quota)');
is(sql('SELECT refused FROM rl_owners WHERE rolname = \'neighbour\''), '0',
	'the neighbour was never refused');

# ---- a role's live keys are not taken by another that shows up ----

sql('SELECT rl_reset_all()');
my $refused_role = sql('SELECT refused_role FROM rl_store_shares()');
# the victim holds 900 live keys (45% of the store), each used once
($out) = flood('victim', 'v', 900);
is($out, '900', 'the victim\'s 900 keys');
# an ordinary role starts using keys: the database's share (1500) leaves
# it 600, and the victim keeps all of its state
($out, $err) = flood('neighbour', 'o', 900);
is(owner('neighbour', 'keys'), 600, 'the newcomer gets what is left of the database\'s share');
like($err, qr/WARNING:  ratelimit: database "postgres" holds its share of the store's keys/,
	'a warning names the database\'s cap');
($out) = as('victim', q{SELECT count(*) FROM generate_series(1, 900) i,
	LATERAL rl_allow('v:' || i, 'fixed_window', 1, '36525 days') a WHERE a});
is($out, '0', 'the victim\'s keys kept their state: a second call on each is denied');
is(sql("SELECT refused_role - $refused_role, refused_database FROM rl_store_shares()"), '0|300',
	'rl_store_shares counts the refusals by cap');

# ---- fail_mode decides for a role over its share ----

sql('SELECT rl_reset_all()');
flood('tenant', 'fill', 1000);
is(owner('tenant', 'keys'), 1000, 'the tenant holds its share');
$out = sql(q{
	SET ratelimit.fail_mode = closed;
	SET ROLE tenant;
	SELECT allowed, remaining, retry_after FROM rl_check('closed:1', 'fixed_window', 5, '1 hour')});
is($out, 'f|0|3600', 'fail_mode closed: a new key over the share is denied, retry after one window');
($out) = as('tenant', q{
	SELECT allowed, remaining FROM rl_check('open:1', 'fixed_window', 5, '1 hour')});
is($out, 't|4', 'fail_mode open: admitted, untracked');
($out) = as('tenant', q{SELECT rl_allow('fill:1', 'fixed_window', 1, '36525 days')});
is($out, 'f', 'the tenant\'s own tracked keys are still decided exactly');
# a policy's fail_mode decides for its keys
sql(q{INSERT INTO rl_policy (name, algo, "limit", per, fail_mode)
	VALUES ('strict', 'token_bucket', 5, '1 minute', 'closed')});
($out) = as('tenant', q{SELECT rl_allow('k', 'strict')});
is($out, 'f', 'a policy with fail_mode closed denies a key that has no room');

# ---- a role's keys count across databases ----

($out) = flood('tenant', 'elsewhere', 100, 'other');
is($out, '100', 'the tenant\'s calls in another database are admitted (fail_mode open)');
is(sql(q{SELECT keys, role_keys, refused FROM rl_owners WHERE rolname = 'tenant' AND datname = 'other'}),
	'0|1000|100', 'but not tracked: the role holds its share in the first database');
sql('SELECT rl_reset_all()');
flood('tenant', 'here', 600);
flood('tenant', 'there', 600, 'other');
is(sql(q{SELECT string_agg(datname || '=' || keys, ' ' ORDER BY datname) FROM rl_owners WHERE rolname = 'tenant'}),
	'other=400 postgres=600', '600 keys in one database and 400 in the other: 1000 for the role');

# ---- keys that are idle do not hold a role's share ----

# the tenant's share is taken by keys that are idle already (used in 2020
# with a window of one second); the store is far from full, so nothing
# has reclaimed them: a new key of the tenant reclaims them first
sql('SELECT rl_reset_all()');
sql('CREATE ROLE ratelimit_admin; GRANT ratelimit_admin TO tenant');
is(sql(q{SET ROLE tenant;
	SELECT count(*) FILTER (WHERE rl_allow('past:' || i, 'fixed_window', 1, '1 second',
		at => '2020-01-01 00:00:00+00'))
	FROM generate_series(1, 1000) i}), '1000', 'the tenant\'s share taken by keys of 2020');
is(owner('tenant', 'keys'), 1000, 'held, but idle');
my $refused = sql(q{SELECT sum(refused) FROM rl_owners WHERE rolname = 'tenant'});
flood('tenant', 'now', 100);
($out) = flood('tenant', 'now', 100);
is($out, '0', 'the tenant\'s 100 new keys are tracked: a second call on each is denied');
is(sql(q{SELECT sum(refused) FROM rl_owners WHERE rolname = 'tenant'}), $refused,
	'none was refused: idle keys were reclaimed to make room under the cap');
sql('REVOKE ratelimit_admin FROM tenant');

# ---- the shares change at a reload ----

sql('SELECT rl_reset_all(true)');
flood('tenant', 'start', 1000);

sql('ALTER SYSTEM SET ratelimit.role_share = 60');
sql('SELECT pg_reload_conf()');
$node->poll_query_until('postgres', 'SHOW ratelimit.role_share', '60')
  or die 'role_share did not change';
is(sql('SELECT s.role_share, h.role_keys_cap FROM rl_status s, rl_store_shares() h'), '60|1200',
	'rl_status and rl_store_shares show the new share');
flood('tenant', 'more', 500);
is(owner('tenant', 'keys'), 1200, 'the tenant may now hold 1200 keys');
sql('ALTER SYSTEM SET ratelimit.role_share = 10');
sql('SELECT pg_reload_conf()');
$node->poll_query_until('postgres', 'SHOW ratelimit.role_share', '10')
  or die 'role_share did not change';
($out) = flood('tenant', 'again', 10);
is(owner('tenant', 'keys'), 1200, 'a lower share takes no key away, and gives no new one');
sql('ALTER SYSTEM RESET ratelimit.role_share');
sql('SELECT pg_reload_conf()');
foreach my $bad ('0', '101')
{
	($rc, $out, $err) = $node->psql('postgres', "ALTER SYSTEM SET ratelimit.database_share = $bad");
	like($err, qr/$bad is outside the valid range for parameter "ratelimit.database_share" \(1 \.\. 100\)/,
		"database_share = $bad is refused");
}
($rc, $out, $err) = $node->psql('postgres', 'SET ratelimit.role_share = 90',
	extra_params => [ '-U', 'tenant' ]);
like($err, qr/parameter "ratelimit.role_share" cannot be changed now/,
	'a session cannot change its share');

$node->stop;
done_testing();
