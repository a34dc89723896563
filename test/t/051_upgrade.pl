# The upgrade path: a database created with an earlier release (0.1.0,
# 0.2.0) and updated with ALTER EXTENSION ratelimit UPDATE has exactly the
# objects of a fresh install, and works.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# every release a database may be updated from
my @releases = ('0.1.0', '0.2.0');

my $node = PostgreSQL::Test::Cluster->new('upgrade');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE fresh');

my $default = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'ratelimit'");
$node->safe_psql('fresh', 'CREATE EXTENSION ratelimit');

# every object of the extension, with its definition and privileges
my $objects = q{
	SELECT string_agg(d, E'\n' ORDER BY d) FROM (
		SELECT pg_describe_object(classid, objid, objsubid) || ' ' ||
			coalesce(CASE classid
				WHEN 'pg_proc'::regclass THEN
					pg_get_function_identity_arguments(objid) || ' -> ' ||
					pg_get_function_result(objid) || ' ' ||
					md5(pg_get_functiondef(objid)) || ' ' ||
					coalesce((SELECT proacl::text FROM pg_proc WHERE oid = objid), '')
				WHEN 'pg_class'::regclass THEN
					coalesce((SELECT relacl::text FROM pg_class WHERE oid = objid), '') || ' ' ||
					(SELECT string_agg(attname || ':' || format_type(atttypid, atttypmod) ||
						coalesce(':' || pg_get_expr(adbin, adrelid), ''), ',' ORDER BY attnum)
					 FROM pg_attribute LEFT JOIN pg_attrdef ON adrelid = attrelid AND adnum = attnum
					 WHERE attrelid = objid AND attnum > 0 AND NOT attisdropped)
				ELSE '' END, '') AS d
		FROM pg_depend
		WHERE refclassid = 'pg_extension'::regclass
			AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ratelimit')
			AND deptype = 'e') s};
my $fresh = $node->safe_psql('fresh', $objects);
my $triggers = q{SELECT string_agg(tgname || ' ' || pg_get_triggerdef(oid), E'\n' ORDER BY tgname)
	FROM pg_trigger WHERE tgrelid = 'rl_policy'::regclass};
my $fresh_triggers = $node->safe_psql('fresh', $triggers);

# Install release $from in a database of its own, update it to the default
# version, and compare it with the fresh install; then use it.
sub upgrade_from
{
	my ($from) = @_;
	my $db = 'from_' . ($from =~ tr/./_/r);

	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, "CREATE EXTENSION ratelimit VERSION '$from'");
	is($node->safe_psql($db, "SELECT rl_allow('k', 'token_bucket', 2)"), 't', "$from works");
	$node->safe_psql($db, 'ALTER EXTENSION ratelimit UPDATE');
	is($node->safe_psql($db, "SELECT extversion FROM pg_extension WHERE extname = 'ratelimit'"),
		$default, "$from updated to $default");

	is($node->safe_psql($db, $objects), $fresh,
		"$from updated has exactly the objects of a fresh install");
	is($node->safe_psql($db, $triggers), $fresh_triggers,
		"$from updated: the same policy-table triggers");

	# the updated extension works: policies, triggers, stats
	$node->safe_psql($db, q{
		INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('p', 'fixed_window', 1, '1 day');
		CREATE TABLE t (k int);
		CREATE TRIGGER q BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION rl_enforce('p', 'k');
		INSERT INTO t VALUES (1);
	});
	my ($ret, $out, $err) = $node->psql($db, 'INSERT INTO t VALUES (1)');
	like($err, qr/rate limit exceeded for policy "p"/,
		"$from updated: a quota trigger works");
	is($node->safe_psql($db, "SELECT rl_allow('x', 'p'), rl_allow('x', 'p')"), 't|f',
		"$from updated: policy calls work");
	is($node->safe_psql($db, "SELECT rl_reset('x', policy => 'p')"), '1',
		"$from updated: rl_reset works");
	is($node->safe_psql($db,
			"SELECT allowed > 0 FROM rl_stats WHERE policy = 'p' AND datname = '$db'"),
		't', "$from updated: stats work");
	return;
}

upgrade_from($_) foreach @releases;

$node->stop;
done_testing();
