# The upgrade path: a database created with an earlier release (0.1.0,
# 0.2.0) and updated with ALTER EXTENSION ratelimit UPDATE has exactly the
# objects of a fresh install, and works.  A database left at 0.2.0 works
# with this library, and updating it keeps stored decisions, views and
# privileges.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

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
	FROM pg_trigger WHERE tgrelid = 'rl_policy'::regclass AND NOT tgisinternal};
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
	# the library's entry point for the frozen script's rl_reset ((key,
	# algo) in 0.1.0, (key, algo, policy) in 0.2.0)
	is($node->safe_psql($db, "SELECT rl_reset('k', 'token_bucket'), rl_reset('k')"),
		'1|0', "$from: rl_reset works with this library");
	is($node->safe_psql($db, "SELECT rl_allow('k', 'token_bucket', 2)"), 't',
		"$from: again after the reset");
	is($node->safe_psql($db, "SELECT breaker_open, calls FROM rl_redis_info()"), 'f|0',
		"$from: rl_redis_info works with this library, its columns by name")
	  if $from ne '0.1.0';
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
	is($node->safe_psql($db, "SELECT prosrc FROM pg_proc WHERE proname = 'rl_reset'"),
		'rl_reset_0_3', "$from updated: rl_reset is the 0.3.0 entry point");
	is($node->safe_psql($db, q{SELECT refunds_queued, refunds_sent, refunds_dropped
		FROM rl_redis_info()}), '0|0|0', "$from updated: rl_redis_info has the refund counters");
	is($node->safe_psql($db,
			"SELECT allowed > 0 FROM rl_stats WHERE policy = 'p' AND datname = '$db'"),
		't', "$from updated: stats work");
	return;
}

upgrade_from($_) foreach @releases;

# A database left at 0.2.0 keeps working with this library: results are
# filled by column name, so its six-column rl_decision and eight-column
# rl_check_all get what they define.
$node->safe_psql('postgres', 'CREATE DATABASE at020');
$node->safe_psql('at020', "CREATE EXTENSION ratelimit VERSION '0.2.0'");
$node->safe_psql('at020', q{
	INSERT INTO rl_policy (name, algo, "limit", per, burst) VALUES ('b', 'token_bucket', 5, '1 day', 10);
	CREATE ROLE app;
	REVOKE EXECUTE ON FUNCTION rl_check_all(text[], text[], bigint[], timestamptz) FROM PUBLIC;
	GRANT EXECUTE ON FUNCTION rl_check_all(text[], text[], bigint[], timestamptz) TO app;
	CREATE TABLE kept (d rl_decision);
	INSERT INTO kept SELECT rl_check('kept', 'b');
	CREATE VIEW looks AS SELECT * FROM rl_check('look', 'b', cost => 0);
	GRANT SELECT ON rl_status TO app;
	GRANT EXECUTE ON FUNCTION rl_store_info() TO app;
	CREATE VIEW dashboard AS SELECT capacity, used, redis_calls FROM rl_status;
	CREATE VIEW store_use AS SELECT capacity, used FROM rl_store_info();
});
is($node->safe_psql('at020', q{SELECT string_agg(attname, ',' ORDER BY attnum)
	FROM pg_attribute WHERE attrelid = 'rl_decision'::regclass AND attnum > 0}),
	'allowed,limit,remaining,retry_after,reset_at,delay', 'at 0.2.0: six columns');
is($node->safe_psql('at020', q{SELECT allowed, "limit", remaining, retry_after, delay
	FROM rl_check('d', 'token_bucket', 5, '1 day', burst => 10)}),
	't|5|9|0|0', 'at 0.2.0: rl_check works with this library');
is($node->safe_psql('at020', q{SELECT allowed, "limit", remaining FROM rl_check('p', 'b')}),
	't|5|9', 'at 0.2.0: rl_check under a policy works');
is($node->safe_psql('at020', q{SELECT * FROM rl_check_all(ARRAY['a'], ARRAY['b'])}) =~ s/\|[^|]*\|0$/|0/r,
	'a|b|t|5|9|0|0', 'at 0.2.0: rl_check_all works, eight columns');
is($node->safe_psql('at020', q{SELECT rl_headers(d) ->> 'X-RateLimit-Limit' FROM rl_check('h', 'b') d}),
	'5', "at 0.2.0: rl_headers keeps 0.2.0's definition");

# Updated: the decision gains capacity and per; what was stored, views and
# the privileges on rl_check_all (created anew) are kept.
$node->safe_psql('at020', 'ALTER EXTENSION ratelimit UPDATE');
is($node->safe_psql('at020', q{SELECT allowed, "limit", remaining, capacity, extract(epoch FROM per)
	FROM rl_check('d', 'token_bucket', 5, '1 day', burst => 10)}),
	't|5|8|10|86400.000000', 'updated: rl_check reports capacity and per');
is($node->safe_psql('at020', q{SELECT key, "limit", remaining, capacity, extract(epoch FROM per)
	FROM rl_check_all(ARRAY['a'], ARRAY['b'])}),
	'a|5|8|10|86400.000000', 'updated: rl_check_all too');
is($node->safe_psql('at020', q{SELECT rl_headers(d) ->> 'X-RateLimit-Limit' FROM rl_check('h', 'b') d}),
	'10', 'updated: X-RateLimit-Limit is the capacity');
is($node->safe_psql('at020', 'SELECT (d).remaining, (d).capacity IS NULL FROM kept'),
	'9|t', 'updated: a stored decision is kept, without a capacity');
is($node->safe_psql('at020', 'SELECT remaining FROM looks'), '10',
	'updated: a view over rl_check still works');
is($node->safe_psql('at020', q{SELECT proacl FROM pg_proc WHERE proname = 'rl_check_all'}),
	'{postgres=X/postgres,app=X/postgres}',
	'updated: privileges on rl_check_all are kept');
# rl_status and rl_store_info are never dropped by the update: the
# privileges granted on them, and views over them, stay
is($node->safe_psql('at020', q{
	SELECT string_agg(a.grantee::regrole || ':' || a.privilege_type, ',' ORDER BY a.grantee::regrole::text)
	FROM pg_class c, aclexplode(c.relacl) a
	WHERE c.relname = 'rl_status' AND a.grantee <> c.relowner}),
	'app:SELECT,pg_monitor:SELECT', 'updated: privileges on rl_status are kept');
is($node->safe_psql('at020', q{SELECT proacl FROM pg_proc WHERE proname = 'rl_store_info'}),
	'{postgres=X/postgres,pg_monitor=X/postgres,app=X/postgres}',
	'updated: privileges on rl_store_info are kept');
is($node->safe_psql('at020', q{SELECT capacity > 0, redis_calls FROM dashboard}), 't|0',
	'updated: a view over rl_status still works');
is($node->safe_psql('at020', q{SELECT capacity > 0 FROM store_use}), 't',
	'updated: a view over rl_store_info still works');
is($node->safe_psql('at020', q{SELECT role_share, database_share FROM rl_status}),
	'50|75', 'updated: rl_status has the shares, new columns at its end');
my ($dump, $dump_err) = run_command([ 'pg_dump', '--schema-only', '-d', $node->connstr('at020') ]);
like($dump, qr/REVOKE ALL ON FUNCTION public\.rl_check_all\(.*\) FROM PUBLIC;\nGRANT ALL ON FUNCTION public\.rl_check_all\(.*\) TO app;/,
	'and pg_dump dumps them, as for a new install');

# Privileges granted on the extension's functions, views and tables are
# kept by the update, whatever it does to an object (replaced, created
# anew): a role is granted every one of them in a database at each
# release, and after the update holds them on every one still there.
$node->safe_psql('postgres', 'CREATE ROLE watcher');
my $kept_grants = q{
	SELECT coalesce(string_agg(b.ident, ', ' ORDER BY b.ident), '')
	FROM granted b
	WHERE NOT coalesce(CASE b.kind
		WHEN 'f' THEN (SELECT bool_or(a.grantee = 'watcher'::regrole)
			FROM pg_proc p, aclexplode(p.proacl) a
			WHERE p.oid = to_regprocedure(b.ident))
		ELSE (SELECT bool_or(a.grantee = 'watcher'::regrole)
			FROM pg_class c, aclexplode(c.relacl) a
			WHERE c.oid = to_regclass(b.ident)) END, false)
		AND CASE b.kind WHEN 'f' THEN to_regprocedure(b.ident) IS NOT NULL
			ELSE to_regclass(b.ident) IS NOT NULL END
		-- the store isolation section's (rl_status, rl_store_info) is
		-- reworked apart (test 023)
		AND b.ident NOT IN ('rl_status', 'rl_store_info()')};
foreach my $from (@releases)
{
	my $db = 'grants_' . ($from =~ tr/./_/r);
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, qq{
		CREATE EXTENSION ratelimit VERSION '$from';
		CREATE TABLE granted AS
		SELECT CASE classid WHEN 'pg_proc'::regclass THEN 'f' ELSE 'r' END AS kind,
			CASE classid WHEN 'pg_proc'::regclass THEN objid::regprocedure::text
				ELSE objid::regclass::text END AS ident
		FROM pg_depend
		WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
			AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'ratelimit')
			AND (classid = 'pg_proc'::regclass
				OR (classid = 'pg_class'::regclass
					AND (SELECT relkind IN ('r', 'v') FROM pg_class WHERE oid = objid)));
		DO \$\$
		DECLARE
			o record;
		BEGIN
			FOR o IN SELECT * FROM granted LOOP
				EXECUTE format(CASE o.kind WHEN 'f'
					THEN 'GRANT EXECUTE ON FUNCTION %s TO watcher'
					ELSE 'GRANT SELECT ON %s TO watcher' END, o.ident);
			END LOOP;
		END \$\$;
	});
	cmp_ok($node->safe_psql($db, 'SELECT count(*) FROM granted'), '>=', 5,
		"$from: a role is granted every function, view and table");
	is($node->safe_psql($db, $kept_grants), '', "$from: granted, checked before");
	$node->safe_psql($db, 'ALTER EXTENSION ratelimit UPDATE');
	is($node->safe_psql($db, $kept_grants), '',
		"$from updated: the role keeps its privileges on every object still there");
	is($node->safe_psql($db, q{SELECT has_function_privilege('watcher',
		'rl_keys(boolean)', 'EXECUTE')}), 't',
		"$from updated: rl_keys (created anew) among them")
	  if $from ne '0.1.0';
}

# What an administrator built on a function the update creates anew (a
# view over rl_keys, rl_check_all or rl_redis_info) does not stop it: the
# old definition is kept for it, under its name with _0_2_0, and a
# WARNING says so; once the view is made again over the new function, the
# old one can go.
$node->safe_psql('postgres', 'CREATE DATABASE dependants');
$node->safe_psql('dependants', q{
	CREATE EXTENSION ratelimit VERSION '0.2.0';
	INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('b', 'fixed_window', 5, '1 day');
	SELECT rl_allow('k', 'b');
	CREATE VIEW my_keys AS SELECT key, remaining FROM rl_keys() WHERE key = 'k';
	CREATE VIEW checks AS SELECT * FROM rl_check_all(ARRAY['a'], ARRAY['b']);
	CREATE VIEW redis AS SELECT calls FROM rl_redis_info();
	GRANT SELECT ON my_keys TO watcher;
});
my ($ret, $out, $err) = $node->psql('dependants', 'ALTER EXTENSION ratelimit UPDATE');
is($ret, 0, 'views over functions created anew do not stop the update');
like($err, qr/WARNING:  the 0\.2\.0 definition of (public\.)?rl_keys\(boolean\) is kept as (public\.)?rl_keys_0_2_0\(boolean\), for rule _RETURN on view (public\.)?my_keys/,
	'a WARNING names the view over rl_keys');
like($err, qr/rl_check_all_0_2_0\(.*\), for rule _RETURN on view (public\.)?checks/,
	'and the one over rl_check_all');
like($err, qr/rl_redis_info_0_2_0\(\), for rule _RETURN on view (public\.)?redis/,
	'and the one over rl_redis_info');
like($err, qr/HINT:  Create those objects again over (public\.)?rl_keys\(boolean\) to see the new columns, then run ALTER EXTENSION ratelimit DROP FUNCTION (public\.)?rl_keys_0_2_0\(boolean\); DROP FUNCTION (public\.)?rl_keys_0_2_0\(boolean\);/,
	'with what to do');
is($node->safe_psql('dependants', "SELECT extversion FROM pg_extension WHERE extname = 'ratelimit'"),
	$default, 'the update ran');
is($node->safe_psql('dependants', "SELECT key, remaining FROM my_keys"), 'k|4',
	'the view over rl_keys works as before');
is($node->safe_psql('dependants', "SELECT calls FROM redis"), '0',
	'the view over rl_redis_info too');
is($node->safe_psql('dependants', "SELECT count(*) FROM checks"), '1',
	'and the one over rl_check_all');
is($node->safe_psql('dependants', q{SELECT has_table_privilege('watcher', 'my_keys', 'SELECT')}),
	't', 'the view keeps its own privileges');
is($node->safe_psql('dependants', q{SELECT key, encode(key_bytes, 'escape') FROM rl_keys() WHERE key = 'k'}),
	'k|k', 'rl_keys has its new columns');
$node->safe_psql('dependants', q{
	CREATE OR REPLACE VIEW my_keys AS SELECT key, remaining FROM rl_keys() WHERE key = 'k';
	ALTER EXTENSION ratelimit DROP FUNCTION rl_keys_0_2_0(boolean);
	DROP FUNCTION rl_keys_0_2_0(boolean);
});
is($node->safe_psql('dependants', q{SELECT to_regprocedure('rl_keys_0_2_0(boolean)') IS NULL,
	key, remaining FROM my_keys}), 't|k|4',
	'made again over the new rl_keys, the old one goes as the hint says');

# The update runs PL/pgSQL: the control file requires it, so a database
# without it gets a plain error naming it (and CASCADE installs it), and
# it cannot be dropped from under the extension.
$node->safe_psql('postgres', 'CREATE DATABASE nolang');
$node->safe_psql('nolang', 'DROP EXTENSION plpgsql');
($ret, $out, $err) = $node->psql('nolang', 'CREATE EXTENSION ratelimit');
like($err, qr/ERROR:  required extension "plpgsql" is not installed/,
	'without plpgsql, CREATE EXTENSION names what it needs');
$node->safe_psql('nolang', 'CREATE EXTENSION ratelimit CASCADE');
is($node->safe_psql('nolang', "SELECT extversion FROM pg_extension WHERE extname = 'ratelimit'"),
	$default, 'CREATE EXTENSION ... CASCADE installs plpgsql and the extension');
($ret, $out, $err) = $node->psql('nolang', 'DROP EXTENSION plpgsql');
like($err, qr/ERROR:  cannot drop extension plpgsql because other objects depend on it/,
	'plpgsql cannot be dropped while ratelimit is installed');

$node->stop;
done_testing();
