# The upgrade path: a database created with the previous release (0.1.0)
# and updated with ALTER EXTENSION ratelimit UPDATE has exactly the objects
# of a fresh install, and works.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('upgrade');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('postgres', 'CREATE DATABASE upgraded');

my $default = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'ratelimit'");
$node->safe_psql('fresh', 'CREATE EXTENSION ratelimit');
$node->safe_psql('upgraded', "CREATE EXTENSION ratelimit VERSION '0.1.0'");
is($node->safe_psql('upgraded', "SELECT rl_allow('k', 'token_bucket', 2)"), 't', '0.1.0 works');
$node->safe_psql('upgraded', 'ALTER EXTENSION ratelimit UPDATE');
is($node->safe_psql('upgraded', "SELECT extversion FROM pg_extension WHERE extname = 'ratelimit'"),
	$default, "updated to $default");

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
my $upgraded = $node->safe_psql('upgraded', $objects);
is($upgraded, $fresh, 'the updated extension has exactly the objects of a fresh install');
my $triggers = q{SELECT string_agg(tgname || ' ' || pg_get_triggerdef(oid), E'\n' ORDER BY tgname)
	FROM pg_trigger WHERE tgrelid = 'rl_policy'::regclass};
is($node->safe_psql('upgraded', $triggers), $node->safe_psql('fresh', $triggers),
	'and the same policy-table triggers');

# the updated extension works: policies, triggers, stats
$node->safe_psql('upgraded', q{
	INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('p', 'fixed_window', 1, '1 day');
	CREATE TABLE t (k int);
	CREATE TRIGGER q BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION rl_enforce('p', 'k');
	INSERT INTO t VALUES (1);
});
my ($ret, $out, $err) = $node->psql('upgraded', 'INSERT INTO t VALUES (1)');
like($err, qr/rate limit exceeded for policy "p"/, 'a quota trigger works after the update');
is($node->safe_psql('upgraded', "SELECT rl_allow('x', 'p'), rl_allow('x', 'p')"), 't|f',
	'policy calls work after the update');
is($node->safe_psql('upgraded', "SELECT rl_reset('x', policy => 'p')"), '1',
	'the replaced rl_reset works');
is($node->safe_psql('upgraded', "SELECT allowed > 0 FROM rl_stats WHERE policy = 'p' AND datname = 'upgraded'"),
	't', 'stats work after the update');

$node->stop;
done_testing();
