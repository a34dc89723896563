# Connection settings of the Redis backend: a password (never shown to
# ordinary roles, never echoed in errors or the log), an ACL user limited to
# the extension's keys, a database number, and the clock source.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use RlRedis;

my $secret = 'S3cret-pw_only-for-redis';
my $redis = RlRedis->new(args => [ '--requirepass', $secret ]);
$redis->cli('-a', $secret, '--no-auth-warning', 'ACL', 'SETUSER', 'limiter',
	'on', '>limiter-pw', '~rl:*', '+@all');

my $node = RlRedis::pg_node('redis_auth', qq{
ratelimit.backend = redis
ratelimit.redis_nodes = '${\ $redis->addr}'
ratelimit.redis_probe_interval = 1
ratelimit.fail_mode = closed
log_statement = none
});
$node->safe_psql('postgres',
	'CREATE EXTENSION ratelimit; CREATE ROLE app LOGIN');

sub allow
{
	my ($set, $key) = @_;
	return $node->safe_psql('postgres',
		"$set; SELECT rl_allow('$key', 'fixed_window', 5)");
}

is(allow('SET ratelimit.fail_mode = closed', 'k'), 'f', 'no password: Redis refuses, fail_mode closed denies');
like($node->safe_psql('postgres', 'SELECT last_error FROM rl_redis_info()'),
	qr/NOAUTH|Authentication required/, 'the error says why');

is(allow("SET ratelimit.redis_password = 'wrong-pw-42'", 'k'),
	'f', 'a wrong password is refused');
my $err = $node->safe_psql('postgres', 'SELECT last_error FROM rl_redis_info()');
like($err, qr/WRONGPASS|invalid/, "the error says why ($err)");
unlike($err, qr/wrong-pw-42/, 'without echoing the password');

is(allow("SET ratelimit.redis_password = '$secret'", 'k'),
	't', 'the right password works');
is(allow("SET ratelimit.redis_user = 'limiter'; SET ratelimit.redis_password = 'limiter-pw'", 'k'),
	't', 'an ACL user restricted to rl:* keys works');
unlike(slurp_file($node->logfile), qr/\Q$secret\E|limiter-pw|wrong-pw-42/,
	'no password in the server log');

# ordinary roles can neither read nor change the password
$node->safe_psql('postgres',
	"ALTER SYSTEM SET ratelimit.redis_password = '$secret'; SELECT pg_reload_conf()");
my ($ret, $out, $stderr) =
  $node->psql('postgres', 'SHOW ratelimit.redis_password', extra_params => [ '-U', 'app' ]);
like($stderr, qr/must be superuser|permission denied/,
	'SHOW ratelimit.redis_password is refused to ordinary roles');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM pg_settings WHERE name = 'ratelimit.redis_password'",
		extra_params => [ '-U', 'app' ]),
	'0',
	'pg_settings hides it from them');
($ret, $out, $stderr) = $node->psql('postgres',
	"SET ratelimit.redis_password = 'x'", extra_params => [ '-U', 'app' ]);
like($stderr, qr/permission denied/, 'and they cannot set it');
is( $node->safe_psql(
		'postgres', "SELECT rl_allow('app', 'fixed_window', 5)",
		extra_params => [ '-U', 'app' ]),
	't',
	'they can use the limiter through Redis');

# malformed settings are refused
for my $bad ('localhost', 'h:0', 'h:70000', '', '[::1:6379', 'h:12x')
{
	my ($r, $o, $e) = $node->psql('postgres', "SET ratelimit.redis_nodes = '$bad'");
	like($e, qr/invalid value for parameter "ratelimit.redis_nodes"/,
		"redis_nodes '$bad' is refused");
}
is( $node->safe_psql(
		'postgres',
		"SET ratelimit.redis_nodes = ' 127.0.0.1:1 , [::1]:2,h:3'; SHOW ratelimit.redis_nodes"),
	' 127.0.0.1:1 , [::1]:2,h:3',
	'a list with spaces and an IPv6 address is accepted');
($ret, $out, $stderr) =
  $node->psql('postgres', "SET ratelimit.redis_namespace = 'a{b'");
like($stderr, qr/must not contain/, 'a namespace with a brace is refused');

# a database number
is(allow("SET ratelimit.redis_database = 3", 'in-db-3'), 't', 'database 3');
my $dboid = $node->safe_psql('postgres',
	"SELECT oid FROM pg_database WHERE datname = 'postgres'");
is($redis->cli('-a', $secret, '--no-auth-warning', '-n', 3, 'EXISTS',
		"rl:{$dboid:fw:in-db-3}"), '1', 'the key is in database 3');

# the clock: server (Redis TIME) or client (this server's clock); an
# explicit "at" wins over both
for my $clock (qw(server client))
{
	my $r = $node->safe_psql('postgres',
		"SET ratelimit.redis_clock = $clock; "
		  . "SELECT abs(extract(epoch from reset_at - clock_timestamp())) < 5 "
		  . "FROM rl_check('clock-$clock', 'token_bucket', 1, '1 s')");
	is($r, 't', "redis_clock = $clock: reset_at is about now + 1 s");
}
is( $node->safe_psql(
		'postgres',
		"SELECT reset_at FROM rl_check('clock-at', 'fixed_window', 1, '1 s', "
		  . "at => '2030-01-01 00:00:00.5+00')"),
	'2030-01-01 00:00:01+00',
	'an explicit "at" wins over the clock setting');

$node->stop;
$redis->stop;
done_testing();
