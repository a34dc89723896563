# A quota trigger's key and cost follow the row, never the session or a
# stale definition.
#
# Keys (red-team finding 6): a key built from the key columns' text output
# followed the session's settings (DateStyle, TimeZone, IntervalStyle,
# bytea_output, extra_float_digits, lc_monetary), which any role may SET:
# the same row was charged to a different key, each with a fresh quota, in
# each setting.  Every key column's type has one canonical text
# (docs/reference.md): the rows below are charged to that key whatever the
# inserting session set.
#
# Types (red-team finding 7): after ALTER TYPE of a composite column's type,
# a session that had fired the trigger kept its prepared cost expression,
# read the dropped attribute (NULL) and charged 0.  The trigger's cache
# follows the types its table is made of: composites (through their
# relation), domains and arrays.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('trigger_key_types');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	CREATE ROLE tenant LOGIN;
	INSERT INTO rl_policy (name, algo, "limit", per)
		VALUES ('daily', 'fixed_window', 2, '1 day'),
			   ('units', 'fixed_window', 1000, '1 day'),
			   ('many', 'fixed_window', 1000, '1 day');
	CREATE TABLE uploads (tenant int, day date, at timestamptz);
	GRANT INSERT ON uploads TO tenant;
	CREATE TRIGGER q1 BEFORE INSERT ON uploads FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('daily', 'tenant', 'day');
	CREATE TABLE events (tenant int, hour timestamptz);
	GRANT INSERT ON events TO tenant;
	CREATE TRIGGER q2 BEFORE INSERT ON events FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('daily', 'tenant', 'hour');
});

# ---- finding 6: a date key, five DateStyles ----
my $rows = 0;
for my $style ('ISO', 'German', 'SQL, DMY', 'SQL, MDY', 'Postgres, DMY')
{
	my ($rc) = $node->psql('postgres', qq{SET DateStyle = '$style';
		INSERT INTO uploads VALUES (1, '2030-01-02'), (1, '2030-01-02')},
		extra_params => [ '-U', 'tenant' ]);
	$rows += 2 if $rc == 0;
}
is($rows, 2, "a date key: 2 rows a day whatever DateStyle ($rows admitted)");
is($node->safe_psql('postgres',
		q{SELECT remaining FROM rl_check('1:2030-01-02', 'daily', cost => 0)}),
	'0', 'the date key is written YYYY-MM-DD');

# ---- finding 6: a timestamptz key, seven time zones ----
$rows = 0;
for my $tz ('UTC', 'Europe/Paris', 'Asia/Tokyo', 'America/New_York',
	'Australia/Sydney', 'Etc/GMT+5', 'Pacific/Auckland')
{
	my ($rc) = $node->psql('postgres', qq{SET TimeZone = '$tz';
		INSERT INTO events VALUES (1, '2030-01-02 10:00Z'), (1, '2030-01-02 10:00Z')},
		extra_params => [ '-U', 'tenant' ]);
	$rows += 2 if $rc == 0;
}
is($rows, 2,
	"a timestamptz key: 2 rows a day whatever TimeZone ($rows admitted)");
is($node->safe_psql('postgres',
		q{SELECT remaining FROM rl_check('1:2030-01-02 10:00:00+00', 'daily', cost => 0)}),
	'0', 'the timestamptz key is written in UTC');

# ---- every canonical form, under settings far from the defaults ----
# One table with a column of each type; a key column at a time, through a
# trigger per column, each row costing 1 under policy "many": rl_keys then
# lists exactly the canonical keys.
$node->safe_psql('postgres', q{
	CREATE DOMAIN posint AS int CHECK (VALUE > 0);
	CREATE TYPE mood AS ENUM ('calm', 'busy');
	CREATE TABLE typed (
		i2 smallint, i4 int, i8 bigint, o oid, b boolean, t text,
		vc varchar(10), c char(4), n name, u uuid, f4 real, f8 float8,
		num numeric, d date, ts timestamp, tstz timestamptz, by bytea,
		iv interval, m money, dom posint, e mood, arr timestamptz[],
		tm time);
});
my @cols = qw(i2 i4 i8 o b t vc c n u f4 f8 num d ts tstz by iv m dom e arr tm);
for my $col (@cols)
{
	$node->safe_psql('postgres', qq{
		CREATE TRIGGER k_$col BEFORE INSERT ON typed FOR EACH ROW
			EXECUTE FUNCTION rl_enforce('many', '$col');
	});
}
my $row = q{(-7, 42, -9000000000, 4000000000, true, 'a:b', 'vé', 'ab',
	'nm', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', 0.1, 1.0/3,
	12.50, '2030-01-02', '2030-01-02 03:04:05.5', '2030-01-02 03:04:05+02',
	'\x00ff'::bytea, '1 day 02:03:04', 12.34, 5, 'busy',
	ARRAY['2030-01-02 03:04:05+02'::timestamptz], '03:04:05')};
my $odd = q{SET DateStyle = 'German, DMY'; SET TimeZone = 'Asia/Kolkata';
	SET IntervalStyle = 'sql_standard'; SET bytea_output = 'escape';
	SET extra_float_digits = -3; SET search_path = public, pg_catalog;};
$node->safe_psql('postgres', "$odd INSERT INTO typed VALUES $row");
my $keys = $node->safe_psql('postgres',
	q{SELECT string_agg(key, E'\n' ORDER BY key COLLATE "C") FROM rl_keys()
	  WHERE policy = 'many'});
my @expected = sort { $a cmp $b } (
	'-7', '42', '-9000000000', '4000000000', 't', 'a:b', 'vé', 'ab  ',
	'nm', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '0.1',
	'0.3333333333333333', '12.50', '2030-01-02', '2030-01-02 03:04:05.5',
	'2030-01-02 01:04:05+00', '\x00ff', '1 day 02:03:04', '$12.34', '5',
	'busy', '{"2030-01-02 01:04:05+00"}', '03:04:05');
is($keys, join("\n", sort { $a cmp $b } @expected),
	'each type has its canonical key, whatever the session set');

# the same row from a session with the defaults: the same keys, charged again
$node->safe_psql('postgres', "INSERT INTO typed VALUES $row");
is($node->safe_psql('postgres',
		q{SELECT count(*) FILTER (WHERE remaining = 998), count(*) FROM rl_keys()
		  WHERE policy = 'many'}),
	scalar(@expected) . '|' . scalar(@expected),
	'a session with the default settings charges the same keys');

# ---- finding 7: ALTER TYPE of a composite column ----
$node->safe_psql('postgres', q{
	CREATE TYPE oline AS (amount int, note text);
	CREATE TABLE orders (tenant int, l oline);
	CREATE TRIGGER q BEFORE INSERT ON orders FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('units', 'tenant',
									'cost=coalesce((l).amount, 0)');
});

my $old = $node->background_psql('postgres');
$old->query_safe(q{INSERT INTO orders VALUES (1, ROW(10, 'x'))});
is($node->safe_psql('postgres',
		q{SELECT remaining FROM rl_check('1', 'units', cost => 0)}),
	'990', 'a row of amount 10 costs 10');

$node->safe_psql('postgres',
	'ALTER TYPE oline DROP ATTRIBUTE amount, ADD ATTRIBUTE amount int');
$old->query_safe(q{INSERT INTO orders VALUES (1, ROW('y', 10)::oline)});
is($node->safe_psql('postgres',
		q{SELECT remaining FROM rl_check('1', 'units', cost => 0)}),
	'980', 'after ALTER TYPE, the session that fired the trigger charges 10 too');

# a composite inside a composite: the inner type's change reaches the trigger
$node->safe_psql('postgres', q{
	CREATE TYPE inner_t AS (qty int, pad int);
	CREATE TYPE outer_t AS (i inner_t);
	CREATE TABLE nested (tenant int, o outer_t);
	CREATE TRIGGER q BEFORE INSERT ON nested FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('units', 'tenant',
									'cost=coalesce(((o).i).qty, 0)');
});
$old->query_safe(q{INSERT INTO nested VALUES (2, ROW(ROW(5, 0)))});
$node->safe_psql('postgres',
	'ALTER TYPE inner_t DROP ATTRIBUTE qty, ADD ATTRIBUTE qty int');
$old->query_safe(q{INSERT INTO nested VALUES (2, ROW(ROW(0, 5)))});
is($node->safe_psql('postgres',
		q{SELECT remaining FROM rl_check('2', 'units', cost => 0)}),
	'990', 'after ALTER TYPE of a nested composite, the old session charges 5 too');

# a key column of a composite type: its key follows the new attributes
$node->safe_psql('postgres', q{
	CREATE TYPE pair AS (a int, b int);
	CREATE TABLE paired (p pair);
	CREATE TRIGGER q BEFORE INSERT ON paired FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('units', 'p');
});
$old->query_safe(q{INSERT INTO paired VALUES (ROW(1, 2))});
$node->safe_psql('postgres', 'ALTER TYPE pair ADD ATTRIBUTE c int');
$old->query_safe(q{INSERT INTO paired VALUES (ROW(1, 2, 3))});
is($node->safe_psql('postgres',
		q{SELECT string_agg(key, ' ' ORDER BY key) FROM rl_keys() WHERE policy = 'units'
		  AND key LIKE '(%'}),
	'(1,2) (1,2,3)', 'a composite key column follows ALTER TYPE in the old session');
$old->quit;

done_testing();
