# Privileges across sessions: what an ordinary role cannot do (admin
# functions, an explicit "at", superuser-only settings, reading secrets),
# that grants and revocations made in another session apply to an open
# session at its next call, and that a refused call changes nothing.
# Database isolation itself is 003's; here only its role aspects.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $secret = 'sekrit-7d1f02';
my $node = PostgreSQL::Test::Cluster->new('privs');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$node->start;
my $has_password = $node->safe_psql('postgres',
	"SELECT current_setting('ratelimit.redis_password', true) IS NOT NULL") eq 't';
if ($has_password)
{
	$node->append_conf('postgresql.conf', "ratelimit.redis_password = '$secret'");
	$node->reload;
}
foreach my $db ('app1', 'app2')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION ratelimit');
}
$node->safe_psql('postgres', q{
CREATE ROLE app LOGIN;
CREATE ROLE ops LOGIN;
CREATE ROLE replayer LOGIN NOINHERIT;
});

# A session that stays open while others change grants.
sub session
{
	my ($db, $user) = @_;
	return $node->background_psql($db,
		on_error_stop => 0,
		extra_params => [ '-U', $user, '-v', 'VERBOSITY=verbose' ]);
}

# (output, SQLSTATE of the error or '', stderr)
sub run_in
{
	my ($s, $q) = @_;
	$s->{stderr} = '';
	my $out = $s->query($q);
	my $err = $s->{stderr};
	$s->{stderr} = '';
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return ($out, $state // '', $err);
}

sub denied
{
	my ($s, $q, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my (undef, $state, $err) = run_in($s, $q);
	is($state, '42501', "denied: $name") or diag($err);
	return $err;
}

sub returns
{
	my ($s, $q, $want, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my ($out, $state, $err) = run_in($s, $q);
	is("$state$out", $want, $name) or diag($err);
}

my $su = session('app1', $node->safe_psql('postgres', 'SELECT current_user'));
my $app = session('app1', 'app');

# ---- an ordinary role ----
returns($app, "SELECT rl_allow('p:k', 'fixed_window', 1, '36525 days')", 't',
	'an ordinary role consumes');
my $err = denied($app,
	"SELECT rl_allow('p:k', 'fixed_window', 1, '36525 days', at => '2030-01-01')",
	'explicit "at"');
like($err, qr/permission denied to pass "at"/, '"at": the message says what');
like($err, qr/HINT:\s+Only superusers and members of role "ratelimit_admin"/,
	'"at": the hint names the role');
returns($app,
	"SELECT rl_allow('p:null', 'fixed_window', 1, '36525 days', at => NULL)",
	't', 'an explicit NULL "at" is the real clock, allowed');
denied($app, "SELECT * FROM rl_check('p:k', 'fixed_window', 1, at => now())",
	'explicit "at" in rl_check');
denied($app, "SELECT rl_reset('p:k')", 'rl_reset');
denied($app, "SELECT rl_reset('p:k', 'fixed_window')", 'rl_reset with algo');
denied($app, 'SELECT rl_reset_all()', 'rl_reset_all');
denied($app, 'SELECT rl_reset_all(true)', 'rl_reset_all(all_databases)');
denied($app, 'SELECT * FROM rl_store_info()', 'rl_store_info');
returns($app, "SELECT rl_allow('p:k', 'fixed_window', 1, '36525 days')", 'f',
	'the refused calls changed nothing: p:k still at its limit');

# it cannot give itself the rights, or swap the functions
run_in($app, 'GRANT EXECUTE ON FUNCTION rl_reset TO app');
denied($app, "SELECT rl_reset('p:k')", 'rl_reset after granting itself');
denied($app, 'DROP FUNCTION rl_reset', 'dropping rl_reset');
denied($app, 'ALTER FUNCTION rl_reset_all OWNER TO app', 'taking rl_reset_all');

# every superuser-only setting, whatever the way of setting it
my @suset = split /\n/, $node->safe_psql('postgres', q{
	SELECT name || '=' || setting FROM pg_settings
	WHERE name LIKE 'ratelimit.%' AND context = 'superuser' ORDER BY name});
ok((grep { /^ratelimit\.fail_mode=/ } @suset), 'ratelimit.fail_mode is superuser-only');
foreach my $s (@suset)
{
	my ($name, $value) = split /=/, $s, 2;
	$err = denied($app, "SET $name = '$value'", "SET $name");
	like($err, qr/permission denied to set parameter "\Q$name\E"/,
		"SET $name: the message names it");
}
denied($app, "BEGIN; SET LOCAL ratelimit.fail_mode = 'open'", 'SET LOCAL ratelimit.fail_mode');
run_in($app, 'ROLLBACK');
denied($app, "SELECT set_config('ratelimit.fail_mode', 'open', false)",
	'set_config(ratelimit.fail_mode)');
denied($app, "ALTER ROLE app SET ratelimit.fail_mode = 'open'",
	'ALTER ROLE app SET ratelimit.fail_mode');
denied($app, "ALTER SYSTEM SET ratelimit.fail_mode = 'open'",
	'ALTER SYSTEM SET ratelimit.fail_mode');
$node->connect_fails(
	$node->connstr('app1') . " user=app options='-c ratelimit.fail_mode=open'",
	'ratelimit.fail_mode in the startup packet is refused',
	expected_stderr => qr/permission denied to set parameter "ratelimit.fail_mode"/);
returns($app, 'SHOW ratelimit.fail_mode', 'open', 'fail_mode is still the default');

# secrets
SKIP:
{
	skip 'ratelimit.redis_password is not defined in this build', 6
	  unless $has_password;
	denied($app, 'SHOW ratelimit.redis_password', 'SHOW ratelimit.redis_password');
	denied($app, "SELECT current_setting('ratelimit.redis_password')",
		'current_setting(ratelimit.redis_password)');
	returns($app, "SELECT count(*) FROM pg_settings WHERE setting LIKE '%sekrit%'",
		'0', 'pg_settings does not show it');
	my ($all) = run_in($app, 'SHOW ALL');
	unlike($all, qr/\Q$secret\E/, 'SHOW ALL does not show it');
	returns($su, 'SHOW ratelimit.redis_password', '********',
		'SHOW masks it, even for a superuser');

	# pg_monitor, the role rl_store_info is granted to, includes
	# pg_read_all_settings, which reads superuser-only settings: it sees
	# the mask only
	run_in($su, 'GRANT pg_monitor TO app');
	returns($app, 'SHOW ratelimit.redis_password', '********',
		'SHOW ratelimit.redis_password for pg_monitor is a mask');
	returns($app, "SELECT count(*) FROM pg_settings WHERE setting LIKE '%sekrit%'",
		'0', 'pg_settings does not show it to pg_monitor');
	run_in($su, 'REVOKE pg_monitor FROM app');
}

# ---- grants made in another session apply at the next call ----

# "at": members of ratelimit_admin, from the moment the role exists
my $at = "SELECT rl_allow('p:at', 'fixed_window', 1, '1 hour', at => '2030-01-01')";
run_in($su, 'CREATE ROLE ratelimit_admin; GRANT ratelimit_admin TO app');
returns($app, $at, 't', '"at" once a member of ratelimit_admin');
run_in($su, 'REVOKE ratelimit_admin FROM app');
denied($app, $at, '"at" once the membership is revoked');
run_in($su, 'GRANT ratelimit_admin TO app');
returns($app, $at, 'f', '"at" again');
run_in($su, 'DROP ROLE ratelimit_admin');
denied($app, $at, '"at" once ratelimit_admin is dropped');

# a NOINHERIT member has the privilege only after SET ROLE
run_in($su, 'CREATE ROLE ratelimit_admin; GRANT ratelimit_admin TO replayer');
my $replayer = session('app1', 'replayer');
denied($replayer, $at, '"at" for a NOINHERIT member');
returns($replayer, "SET ROLE ratelimit_admin; $at", 'f',
	'"at" for it after SET ROLE ratelimit_admin');
denied($replayer, "SELECT rl_reset('p:at')", 'but ratelimit_admin gives no rl_reset');
$replayer->quit;

# monitoring: pg_monitor reads the store figures, and nothing more
run_in($su, 'GRANT pg_monitor TO app');
returns($app, 'SELECT capacity > 0 FROM rl_store_info()', 't',
	'rl_store_info once a member of pg_monitor');
denied($app, "SELECT rl_reset('p:k')", 'rl_reset for pg_monitor');
denied($app, 'SELECT rl_reset_all()', 'rl_reset_all for pg_monitor');
run_in($su, 'REVOKE pg_monitor FROM app');
denied($app, 'SELECT * FROM rl_store_info()', 'rl_store_info once revoked');

# delegated reset: rl_reset only, and only in the database that granted it
run_in($su, 'GRANT EXECUTE ON FUNCTION rl_reset TO app');
returns($app, "SELECT rl_reset('p:k', 'fixed_window')", '1', 'rl_reset once granted');
returns($app, "SELECT rl_allow('p:k', 'fixed_window', 1, '36525 days')", 't',
	'and the key starts afresh');
denied($app, 'SELECT rl_reset_all()', 'rl_reset_all is another grant');
run_in($su, 'REVOKE EXECUTE ON FUNCTION rl_reset FROM app');
denied($app, "SELECT rl_reset('p:k')", 'rl_reset once revoked');

# ---- role aspects of database isolation ----
# Roles are cluster-wide, grants are not: ops may reset everything in app2
# and nothing in app1, and its reset of app2 leaves app1's state alone.
$node->safe_psql('app2', 'GRANT EXECUTE ON FUNCTION rl_reset_all TO ops');
my $ops1 = session('app1', 'ops');
my $ops2 = session('app2', 'ops');
my $key = "SELECT rl_allow('shared:1', 'fixed_window', 1, '36525 days')";
returns($ops1, $key, 't', 'ops consumes in app1');
returns($ops2, $key, 't', 'ops consumes in app2: its own state');
denied($ops1, 'SELECT rl_reset_all()', 'the grant in app2 gives nothing in app1');
returns($ops2, 'SELECT rl_reset_all()', '1', 'ops resets app2');
returns($ops1, $key, 'f', "app1's state is untouched");
returns($ops2, $key, 't', "app2's starts afresh");

# all_databases reaches into databases where the role has no grant at all
denied($ops2, 'SELECT rl_reset_all(true)',
	'a grant in app2 does not let ops reset app1');
$ops1->quit;
$ops2->quit;

$app->quit;
$su->quit;
$node->stop;
done_testing();
