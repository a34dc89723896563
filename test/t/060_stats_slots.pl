# The decision counters' table of slots (1023 identities and "(other)"):
# what does not fit is counted as overflow and shown in rl_status and the
# exporter's queries; slots come back when policies or databases are
# dropped and at rl_stats_reset(), and sessions already connected use them
# without a reconnect; a session whose slot changed hands never counts into
# the new identity's.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('stats_slots');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policy (name, algo, "limit", per)
	SELECT format('p%s', lpad(i::text, 4, '0')), 'fixed_window', 1000000000, '1 hour'
	FROM generate_series(1, 1200) i;
});

# one decision under each policy p<from> .. p<to>, in a new session
sub calls
{
	my ($db, $from, $to) = @_;
	return $node->safe_psql($db, qq{
		SELECT count(*) FROM generate_series($from, $to) i
		WHERE rl_allow('k', format('p%s', lpad(i::text, 4, '0')))});
}

sub info
{
	return $node->safe_psql('postgres',
		'SELECT slots, slots_used, overflow FROM rl_stats_info()');
}

# decisions counted for a policy of this database, or the (other) row
sub allowed
{
	my ($policy) = @_;
	my $where = $policy eq '(other)' ? 'algo IS NULL' :
		"datname = 'postgres' AND policy = '$policy'";
	return $node->safe_psql('postgres',
		"SELECT coalesce(sum(allowed), 0) FROM rl_stats WHERE $where");
}

# the exporter's queries (docs/reference.md)
my $exporter_decisions = q{
	SELECT coalesce(datname, '') AS datname, coalesce(algo, '') AS algo,
		   coalesce(policy, '') AS policy, sum(allowed)::bigint AS allowed,
		   sum(denied)::bigint AS denied, sum(near_limit)::bigint AS near_limit,
		   sum(failed_open)::bigint AS failed_open,
		   sum(failed_closed)::bigint AS failed_closed,
		   sum(shadow_denied)::bigint AS shadow_denied
	FROM rl_stats GROUP BY 1, 2, 3};
my $exporter_store = q{
	SELECT capacity, used, pool_blocks, pool_used, reclaimed, refused,
		   breaker_open::int AS redis_breaker_open, redis_failures,
		   stats_slots, stats_slots_used, stats_overflow
	FROM rl_status};

is(info(), '1023|0|0', 'a fresh server: 1023 slots, none used');

# ---- overflow: counted and visible ----
my $a = $node->background_psql('postgres', on_error_stop => 0);
is($a->query_safe("SELECT rl_allow('k', 'p0001')"), 't', 'session A counts under p0001');
is(calls('postgres', 2, 1023), '1022', '1022 more policies');
is(info(), '1023|1023|0', 'every slot is held, no overflow');
is(calls('postgres', 1024, 1030), '7', 'seven policies beyond the table');
is(info(), '1023|1023|7', 'their seven decisions are the overflow');
is($node->safe_psql('postgres', 'SELECT stats_slots_used, stats_overflow FROM rl_status'),
	'1023|7', 'rl_status shows it');
is(allowed('(other)'), '7', 'they count under (other)');
is(allowed('p1024'), '0', 'p1024 has no row of its own');
is($node->safe_psql('postgres',
		"SELECT allowed FROM ($exporter_decisions) q WHERE policy = '(other)'"),
	'7', 'the exporter query for decisions has the (other) row');
is($node->safe_psql('postgres',
		"SELECT stats_slots, stats_slots_used, stats_overflow FROM ($exporter_store) q"),
	'1023|1023|7', 'the exporter query for the store has the overflow');
is($node->safe_psql('postgres',
		"SELECT count(*) = count(DISTINCT (datname, algo, policy)) FROM ($exporter_decisions) q"),
	't', 'the exporter sees each label set once');

# ---- dropped policies give their slots back, to connected sessions too ----
my $b = $node->background_psql('postgres', on_error_stop => 0);
is($b->query_safe("SELECT rl_allow('k', 'p1031')"), 't', 'session B counts under p1031');
is(info(), '1023|1023|8', 'under (other)');
$node->safe_psql('postgres',
	"DELETE FROM rl_policy WHERE name BETWEEN 'p0002' AND 'p0101'");
is($b->query_safe("SELECT rl_allow('k', 'p1031')"), 't', 'session B again, after 100 policies were dropped');
is(allowed('p1031'), '1', 'p1031 now has its own slot, in the same session');
is(info(), '1023|924|8', 'the 100 dropped policies gave their slots back');
is(calls('postgres', 1024, 1030), '7', 'the policies that overflowed, in a new session');
is($node->safe_psql('postgres', q{
		SELECT count(*) FROM rl_stats
		WHERE datname = 'postgres' AND policy BETWEEN 'p1024' AND 'p1030' AND allowed = 1}),
	'7', 'each has its own slot');
is(info(), '1023|931|8', 'the overflow stays what it was');

# ---- rl_stats_reset frees every slot; a cached slot that changed hands ----
$node->safe_psql('postgres', 'SELECT rl_stats_reset()');
is(info(), '1023|0|0', 'rl_stats_reset frees every slot and zeroes the overflow');
is($node->safe_psql('postgres', 'SELECT count(*), sum(allowed) FROM rl_stats(true)'),
	'1|0', 'only (other) is left, at zero');
# session A still remembers p0001's old slot; others take every slot
is(calls('postgres', 102, 1124), '1023', '1023 other policies');
is(info(), '1023|1023|0', 'the table is full again');
is($a->query_safe("SELECT rl_allow('k', 'p0001')"), 't', 'session A counts under p0001 again');
is($node->safe_psql('postgres', q{
		SELECT max(allowed), sum(allowed), count(*) FROM rl_stats
		WHERE datname = 'postgres'}),
	'1|1023|1023', "A's decision went to no other policy's slot");
is(info(), '1023|1023|1', 'A claimed again: the table is full, so (other)');

# ---- a policy dropped while a session holds its slot ----
my $c = $node->background_psql('postgres', on_error_stop => 0);
is($c->query_safe("SELECT rl_allow('k', 'p0500')"), 't', 'session C counts under p0500');
is(allowed('p0500'), '2', 'in its slot');
$node->safe_psql('postgres', "UPDATE rl_policy SET name = 'p0500x' WHERE name = 'p0500'");
is(calls('postgres', 1125, 1125), '1', 'p1125, with p0500 renamed away');
is(allowed('p1125'), '1', "p1125 reclaimed p0500's slot");
is(allowed('p0500'), '0', 'p0500 has no row any more');
$node->safe_psql('postgres', "UPDATE rl_policy SET name = 'p0500' WHERE name = 'p0500x'");
is($c->query_safe("SELECT rl_allow('k', 'p0500')"), 't', 'session C counts under p0500 again');
is(allowed('p1125'), '1', "C's decision did not go to p1125, which holds its old slot");
is(info(), '1023|1023|2', 'C claimed again: the table is full, so (other)');

# ---- a dropped database gives its slots back ----
$node->safe_psql('postgres', 'SELECT rl_stats_reset()');
$node->safe_psql('postgres', 'CREATE DATABASE gone');
$node->safe_psql('gone', q{
	CREATE EXTENSION ratelimit;
	SELECT rl_allow('k', 'fixed_window', 10, '1 hour');
});
is(calls('postgres', 102, 1123), '1022', '1022 policies in postgres');
is(info(), '1023|1023|0', 'full: 1022 in postgres, one in database gone');
is(calls('postgres', 1124, 1124), '1', 'one more policy');
is(info(), '1023|1023|1', "overflows: database gone's slot is not reclaimed while it exists");
$node->safe_psql('postgres', 'DROP DATABASE gone');
is(calls('postgres', 1124, 1124), '1', 'the same policy, once gone is dropped');
is(allowed('p1124'), '1', "it took the dropped database's slot");
is(info(), '1023|1023|1', 'nothing more overflowed');

# ---- another database's dropped policies give their slots back ----
# A backend cannot read another database's policies: a transaction that
# drops policies marks their slots as it commits (a rolled-back one marks
# nothing), and a claim from any database frees marked slots once the
# table is full (finding 10).
$node->safe_psql('postgres', 'SELECT rl_stats_reset()');
$node->safe_psql('postgres', 'CREATE DATABASE sa');
$node->safe_psql('sa', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policy (name, algo, "limit", per)
	SELECT 'q' || i, 'token_bucket', 10, '1 hour' FROM generate_series(1, 1030) i;
	SELECT count(*) FROM rl_policy p, LATERAL rl_allow('k', p.name) a;
});
is(info(), '1023|1023|7', "database sa's policies take every slot");
$node->safe_psql('sa', q{
	BEGIN;
	DELETE FROM rl_policy WHERE name <> 'q1';
	ROLLBACK;
});
is(calls('postgres', 1150, 1150), '1', 'a policy of postgres, after sa rolled back a DELETE');
is(info(), '1023|1023|8', 'overflows: a rolled-back DELETE frees nothing');
$node->safe_psql('sa', q{DELETE FROM rl_policy WHERE name <> 'q1'});
is(info(), '1023|1023|8', "sa's dropped policies keep their slots while there is room");
is(calls('postgres', 1151, 1151), '1', 'another policy of postgres, once sa dropped its policies');
is(allowed('p1151'), '1', "it took a slot of one of sa's dropped policies");
is(info(), '1023|2|8', "sa's dropped policies' slots are free, nothing more overflowed");
is($node->safe_psql('sa', q{SELECT allowed FROM rl_stats WHERE policy = 'q1'}), '1',
	"sa's remaining policy keeps its slot and its count");
is($node->safe_psql('postgres', q{
		SELECT stats_slots, stats_slots_used, stats_overflow FROM rl_status}),
	'1023|2|8', 'rl_status: the freed slots are free, the overflow as it was');

$a->quit;
$b->quit;
$c->quit;
$node->stop;
done_testing();
