# Conformance on the Redis backend: the random call sequences of
# 010_conformance.pl replayed through Lua scripts in a real redis-server,
# every output field compared with the reference model.  Then what Redis
# holds: the documented key layout, a TTL on every key, nothing stored for a
# look at a new key, and the bounds of an explicit time.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use RlModel;
use RlRedis;

my $redis = RlRedis->new;

my $node = RlRedis::pg_node('redis_conformance', qq{
ratelimit.backend = redis
ratelimit.redis_nodes = '${\ $redis->addr}'
ratelimit.redis_command_timeout = 5000
ratelimit.fail_mode = closed
log_statement = none
});
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

my $seed = $ENV{RL_SEED} // 20260101;
my $nseq = $ENV{RL_SEQUENCES} // 4;
my $ncall = $ENV{RL_CALLS} // 750;
diag("RL_SEED=$seed ($nseq sequences of $ncall calls per algorithm)");

RlModel::run_conformance(
	$node,
	seed      => $seed,
	sequences => $nseq,
	calls     => $ncall,
	tag       => 'redis',
	calendar  => 1);
# load shedding: half of the calls with a random priority and reserve
# (the headroom is the scripts' ARGV[7])
RlModel::run_conformance(
	$node,
	seed       => $seed,
	sequences  => 1,
	calls      => $ncall,
	tag        => 'redis-priority',
	priorities => 1);

# Nothing may have been decided by fail_mode: a failure would have been
# counted.
is($node->safe_psql('postgres', 'SELECT failures FROM rl_redis_info()'),
	'0', 'no call failed');

# The key layout: rl:{<database oid>:<algo>:<key>}, and :log for the entries
# of sliding_window_log; every key expires.
my $dboid = $node->safe_psql('postgres',
	"SELECT oid FROM pg_database WHERE datname = 'postgres'");
$node->safe_psql('postgres',
	"SELECT rl_allow('layout', a, 5) FROM unnest(ARRAY['fixed_window', "
	  . "'sliding_window_log', 'sliding_window_counter', 'token_bucket', "
	  . "'leaky_bucket']) a");
my %code = (fw => 'c i s t', swl => 'i n t', swc => 'c i p s t',
	tb => 'i t w x', lb => 'i t w x');
for my $c (sort keys %code)
{
	my $k = "rl:{$dboid:$c:layout}";
	is(join(' ', sort split /\n/, $redis->cli('HKEYS', $k)),
		$code{$c}, "$c: state hash $k with the documented fields");
	my $ttl = $redis->cli('PTTL', $k);
	ok($ttl > 0 && $ttl <= 3_100, "$c: the state expires (PTTL $ttl ms)");
}
is($redis->cli('LRANGE', "rl:{$dboid:swl:layout}:log", 0, -1) =~ /^\d+ 1$/
	? 1 : 0, 1, 'swl: entries are "time cost"');
ok($redis->cli('PTTL', "rl:{$dboid:swl:layout}:log") > 0,
	'swl: the entry list expires');

# rl_reset drops the state in Redis too.  The states are taken anew with
# an hour's window: the ones above expire after about 3 s, which a slow
# server (valgrind, a loaded machine) may take to get here.
$node->safe_psql('postgres',
	"SELECT rl_allow('layout', a, 5, '1 hour') FROM unnest(ARRAY["
	  . "'fixed_window', 'sliding_window_log', 'sliding_window_counter', "
	  . "'token_bucket', 'leaky_bucket']) a");
is($node->safe_psql('postgres', "SELECT rl_reset('layout')"),
	'5', 'rl_reset drops the five states in Redis');
is($redis->cli('EXISTS', (map { "rl:{$dboid:$_:layout}" } keys %code),
		"rl:{$dboid:swl:layout}:log"),
	'0', 'their keys are gone');
is( $node->safe_psql(
		'postgres',
		"SELECT remaining FROM rl_check('layout', 'fixed_window', 5, '1 hour')"),
	'4', 'the key starts afresh');

# A hash lacking a field (written by something else, half evicted) starts
# afresh instead of failing every call.
$redis->cli('HSET', "rl:{$dboid:tb:broken}", 't', '5');
is( $node->safe_psql(
		'postgres', "SELECT remaining FROM rl_check('broken', 'token_bucket', 5)"),
	'4', 'a hash lacking fields is a new key');

# A look (cost 0) at a new key stores nothing, as in shared memory.
$node->safe_psql('postgres',
	"SELECT rl_check('look', 'token_bucket', 5, cost => 0)");
is($redis->cli('EXISTS', "rl:{$dboid:tb:look}"), '0',
	'a look at a new key stores nothing');

# Explicit times: before 1898 is refused with a clear error; far future
# works exactly (values beyond 2^53 in the scripts).
my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT rl_allow('old', 'fixed_window', 5, at => '1850-01-01 UTC')");
like($err, qr/"at" is out of range for the Redis backend/,
	'an explicit time before 1898 is refused');
is( $node->safe_psql(
		'postgres',
		"SELECT remaining, reset_at FROM rl_check('future', 'token_bucket', "
		  . "4611686018427387904, per => '36525 days', cost => 3, "
		  . "at => '30000-01-01 00:00:00 UTC')"),
	'4611686018427387901|30000-01-01 00:00:00.000001+00',
	'huge limits and times stay exact');

# rl_reset_all drops the database's states in Redis, and nothing else
sub psql_last { return (split /\n/, $node->safe_psql(@_))[-1]; }
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION ratelimit');
my $otheroid = $node->safe_psql('postgres',
	"SELECT oid FROM pg_database WHERE datname = 'other'");
$node->safe_psql('postgres', 'SELECT rl_reset_all()');
my $five = "unnest(ARRAY['fixed_window', 'sliding_window_log', "
  . "'sliding_window_counter', 'token_bucket', 'leaky_bucket']) a";
$node->safe_psql('postgres',
	"SELECT rl_allow('all' || i, a, 5, '1 hour') FROM generate_series(1, 30) i, $five");
$node->safe_psql('other', "SELECT rl_allow('o', 'fixed_window', 5, '1 hour')");
$redis->cli('SET', 'unrelated', 'x');
$redis->cli('HSET', 'rl:{shared-ns:fw:k}', 't', '1');
is($node->safe_psql('postgres', 'SELECT rl_reset_all()'),
	'150', 'rl_reset_all drops the 150 states of the database in Redis');
is($redis->cli('KEYS', "rl:{$dboid:*"), '', 'none of its keys is left');
is($redis->cli('EXISTS', "rl:{$otheroid:fw:o}", 'unrelated', 'rl:{shared-ns:fw:k}'),
	'3', "another database's state, a namespace's and other keys stay");
is(psql_last('other', q{
	SET ratelimit.backend = local;
	SELECT rl_reset_all();
}), '0', 'with the local backend (and no Redis policy) Redis is not touched');
is($redis->cli('EXISTS', "rl:{$otheroid:fw:o}"), '1', 'the state is still there');
is(psql_last('other', q{
	SET ratelimit.backend = local;
	INSERT INTO rl_policy (name, algo, "limit", backend)
	VALUES ('remote', 'fixed_window', 5, 'redis');
	SELECT rl_reset_all();
}), '1', 'a policy on Redis makes rl_reset_all clear Redis too');
$node->safe_psql('other', "SELECT rl_allow('o', 'fixed_window', 5, '1 hour')");
is($node->safe_psql('postgres', 'SELECT rl_reset_all(all_databases => true)'),
	'1', 'all_databases: every database (named by its OID) in Redis');
is($redis->cli('EXISTS', "rl:{$otheroid:fw:o}", 'unrelated', 'rl:{shared-ns:fw:k}'),
	'2', 'a namespace and other keys still stay');
# with a namespace, its states go, and glob characters in it match only
# themselves
$redis->cli('HSET', 'rl:{nsX1:fw:k}', 't', '1');
is(psql_last('postgres', q{
	SET ratelimit.redis_namespace = 'ns*1';
	SELECT rl_allow('n' || i, 'token_bucket', 5, '1 hour') FROM generate_series(1, 3) i;
	SELECT rl_reset_all();
}), '3', 'a namespace: its 3 states are dropped');
is($redis->cli('EXISTS', 'rl:{nsX1:fw:k}', 'rl:{shared-ns:fw:k}'), '2',
	'a namespace\'s glob characters match only themselves');
$node->safe_psql('postgres', 'DROP DATABASE other');
$redis->stop;
($ret, $out, $err) = $node->psql('postgres', 'SELECT rl_reset_all()');
like($err, qr/ERROR:  could not reset every state in Redis: could not connect/,
	'rl_reset_all with Redis down raises an error');
($ret, $out, $err) = $node->psql('postgres', "SELECT rl_reset('layout')");
like($err, qr/ERROR:  could not reset the key in Redis: could not connect/,
	'so does rl_reset');

$node->stop;
$redis->stop;
done_testing();
