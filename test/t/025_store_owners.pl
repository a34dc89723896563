# The table of owners when it fills up: roles past it share their
# database's overflow owner, which is an owner like the others and counts
# as one role for ratelimit.role_share (overflowing escapes no cap); slots
# of owners that hold nothing any more, and that no session has cached, are
# given to new owners.
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

# 16 slots: the store's overflow owner, the database's record, and for
# each role its record and its owner slot, while more than 2 (an eighth)
# stay free: 6 roles get their own slot
as_role('postgres', "r$_", "SELECT rl_allow('own:r$_', 'fixed_window', 1, '36525 days')")
  foreach 1 .. 15;
is(sql('postgres', q{
	SELECT count(*) FILTER (WHERE rolname IS NOT NULL) || ' roles, overflow '
		|| coalesce(max(keys) FILTER (WHERE rolname IS NULL), 0)
	FROM rl_owners}),
	'6 roles, overflow 9', 'six roles have their own slot, nine share the overflow owner');

# an overflowed role floods the store: the overflow owner, one role, takes
# the role's share (128 of 256 keys), no more
is(as_role('postgres', 'r15', q{
	SELECT count(*) FILTER (WHERE rl_allow('flood:' || i, 'fixed_window', 1, '36525 days'))
	FROM generate_series(1, 1000) i}),
	'1000', 'an overflowed role floods (fail_mode open)');
is(sql('postgres', q{SELECT keys || ' ' || refused FROM rl_owners WHERE datname = 'postgres' AND rolname IS NULL}),
	'128 881', 'the overflow owner holds the role\'s share; the rest of the flood was refused');

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
is(sql('postgres', q{SELECT keys FROM rl_owners WHERE datname = 'postgres' AND rolname IS NULL}),
	'128', 'and the overflow owner lost nothing');

# owners that hold nothing, with no session caching them, give their slots
# to new owners
sql('postgres', 'SELECT rl_reset_all()');
is(as_role('postgres', 'r16', "SELECT rl_allow('own:r16', 'fixed_window', 1, '36525 days')"),
	't', 'a new role after the reset');
is(sql('postgres', q{SELECT keys FROM rl_owners WHERE rolname = 'r16'}), '1',
	'it has a slot of its own');

$node->stop;
done_testing();
