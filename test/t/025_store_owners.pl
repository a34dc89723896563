# The table of owners when it fills up: roles past it share their
# database's overflow owner, which is an owner like the others (it holds a
# share, and what it holds over that share can be evicted: overflowing
# escapes nothing); slots of owners that hold nothing any more, and that no
# session has cached, are given to new owners.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('owners');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.max_keys = 256
ratelimit.max_owners = 16
});
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql($_, 'CREATE EXTENSION ratelimit') foreach qw(postgres other);
$node->safe_psql('postgres', join '', map { "CREATE ROLE r$_;" } 1 .. 16);
$node->safe_psql('postgres', 'CREATE ROLE victim');

sub sql { my ($db, $q) = @_; return $node->safe_psql($db, $q); }
sub as_role { my ($db, $role, $q) = @_; return sql($db, "SET ROLE $role;\n$q"); }

# 16 slots: the store's overflow owner, the database's record, and roles
# while more than 2 (an eighth) stay free: 12 roles get their own slot
as_role('postgres', "r$_", "SELECT rl_allow('own:r$_', 'fixed_window', 1, '36525 days')")
  foreach 1 .. 15;
is(sql('postgres', q{
	SELECT count(*) FILTER (WHERE rolname IS NOT NULL) || ' roles, overflow '
		|| coalesce(max(keys) FILTER (WHERE rolname IS NULL), 0)
	FROM rl_owners}),
	'12 roles, overflow 3', 'twelve roles have their own slot, three share the overflow owner');

# the overflowed roles flood the store; their owner is then over its share
is(as_role('postgres', 'r15', q{
	SELECT count(*) FILTER (WHERE rl_allow('flood:' || i, 'fixed_window', 1, '36525 days'))
	FROM generate_series(1, 1000) i}),
	'1000', 'an overflowed role floods (fail_mode open)');
is(sql('postgres', 'SELECT used = capacity FROM rl_store_info()'), 't', 'the store is full');

# a victim in another database (counted under that database's record: the
# table has no free slot for its role) still gets exact decisions
is(sql('other', q{
	SET ratelimit.fail_mode = closed;
	SET ROLE victim;
	SELECT count(*) FILTER (WHERE rl_allow('v:' || i, 'fixed_window', 1, '36525 days'))
	FROM generate_series(1, 40) i}),
	'40', 'a victim in another database: 40 new keys tracked');
is(sql('other', q{
	SET ratelimit.fail_mode = closed;
	SET ROLE victim;
	SELECT count(*) FILTER (WHERE rl_allow('v:' || i, 'fixed_window', 1, '36525 days'))
	FROM generate_series(1, 40) i}),
	'0', 'and limited exactly');
is(sql('postgres', q{
	SELECT coalesce(datname, '-') || '/' || coalesce(rolname, '-') || ' ' || evicted
	FROM rl_owners WHERE evicted > 0}),
	'postgres/- 40', 'the evicted entries were the overflow owner\'s');

# owners that hold nothing, with no session caching them, give their slots
# to new owners
sql('postgres', 'SELECT rl_reset_all()');
is(as_role('postgres', 'r16', "SELECT rl_allow('own:r16', 'fixed_window', 1, '36525 days')"),
	't', 'a new role after the reset');
is(sql('postgres', q{SELECT keys FROM rl_owners WHERE rolname = 'r16'}), '1',
	'it has a slot of its own');

$node->stop;
done_testing();
