# All-or-nothing checks (rl_allow_all, rl_check_all) on the Redis backend:
# one script decides every key atomically in Redis.  A differential test
# runs random multi-key checks, some inside rolled-back savepoints, through
# policies on both backends: every row must match the local backend's.
# Then each fail_mode with Redis down, hybrid's pre-check, and the errors
# (keys on different backends).  RL_SEED replays a run.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use RlRedis;

my $seed = $ENV{RL_SEED} // 20261201;
my $nchecks = $ENV{RL_CHECKS} // 300;
diag("RL_SEED=$seed ($nchecks checks)");
srand($seed);

my $redis = RlRedis->new;
my $node = RlRedis::pg_node('redis_all', qq{
ratelimit.backend = local
ratelimit.redis_nodes = '${\ $redis->addr}'
ratelimit.redis_command_timeout = 300
ratelimit.redis_probe_interval = 200
ratelimit.refund_on_rollback = on
log_statement = none
});
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

sub sql { return $node->safe_psql('postgres', $_[0]); }
sub last_of { return (split /\n/, sql($_[0]))[-1]; }

# the same policies on both backends: p<i>_local and p<i>_redis
my @algos = qw(fixed_window sliding_window_log sliding_window_counter
  token_bucket leaky_bucket);
my @policies;
my %cap;    # the largest cost a policy admits
for my $algo (@algos)
{
	for my $shape ([ 2, '1 second', 'NULL', 'false' ],
		[ 6, '1 hour', 'NULL', 'false' ],
		[ 3, '250 milliseconds', $algo =~ /bucket/ ? 5 : 'NULL', 'false' ],
		[ 1, '1 second', 'NULL', 'true' ])
	{
		my $i = scalar @policies;
		my ($limit, $per, $burst, $shadow) = @$shape;
		for my $backend (qw(local redis))
		{
			sql(qq{INSERT INTO rl_policy (name, algo, "limit", per, burst, backend, shadow)
				VALUES ('p${i}_$backend', '$algo', $limit, '$per', $burst, '$backend', $shadow)});
		}
		push @policies, "p$i";
		$cap{"p$i"} = $burst eq 'NULL' ? $limit : $burst;
	}
}

# ---- differential ----

my @sql = ("SET extra_float_digits = 3;", "SET timezone = 'UTC';", 'BEGIN;');
my @described;
my $t = 1_800_000_000_000_000;
my $rows = 0;
for my $check (1 .. $nchecks)
{
	my $n = 1 + int(rand(4));
	my (@keys, @pols, @costs);
	for (1 .. $n)
	{
		push @keys, 'k' . int(rand(2));
		my $p = $policies[ int(rand(@policies)) ];
		push @pols, $p;
		push @costs, rand() < 0.1 ? 0 : 1 + int(rand($cap{$p} > 1 ? 2 : 1));
	}
	$t += (0, 0, 100, 1000, 20_000, 300_000)[ int(rand(6)) ];
	my $rollback = rand() < 0.3;
	push @sql, 'SAVEPOINT s;' if $rollback;
	for my $backend (qw(local redis))
	{
		my $args = sprintf(
			"ARRAY[%s], ARRAY[%s], ARRAY[%s]::bigint[], "
			  . "to_timestamp(0) + interval '%d microseconds'",
			join(', ', map { "'$_'" } @keys),
			join(', ', map { "'${_}_$backend'" } @pols),
			join(', ', @costs), $t);
		push @sql,
		  "SELECT key, allowed, \"limit\", remaining, retry_after, "
		  . "(extract(epoch from reset_at) * 1000000)::numeric, delay "
		  . "FROM rl_check_all($args);";
		push @described,
		  ($rollback ? 'rolled back: ' : '') . "rl_check_all($args)"
		  if $backend eq 'redis';
	}
	push @sql, 'ROLLBACK TO SAVEPOINT s; RELEASE SAVEPOINT s;' if $rollback;
	$rows += $n;
}
push @sql, 'COMMIT;';
my ($ret, $out, $err) =
  $node->psql('postgres', join("\n", @sql, ''), on_error_stop => 1);
is($ret, 0, 'every check ran on both backends') or diag($err);
my @lines = grep { /\|/ } split /\n/, $out;
is(scalar @lines, 2 * $rows, 'one row per element and backend');
# the rows come per check: the local backend's, then Redis's
my ($i, $mismatch, $refused) = (0, 0, 0);
for my $d (@described)
{
	my ($n) = $d =~ /ARRAY\[([^\]]*)\]/;
	$n = scalar split /, /, $n;
	my @l = @lines[ $i .. $i + $n - 1 ];
	my @r = @lines[ $i + $n .. $i + 2 * $n - 1 ];
	$i += 2 * $n;
	$refused++ if grep { /^[^|]*\|f\|/ } @l;
	next if join("\n", @l) eq join("\n", @r);
	diag("$d differs:\n  local: " . join("\n         ", @l)
		  . "\n  redis: " . join("\n         ", @r));
	last if ++$mismatch >= 3;
}
is($mismatch, 0,
	"$nchecks checks ($rows elements), 30% rolled back: both backends answer identically");
ok($refused > $nchecks / 10 && $refused < $nchecks * 0.9,
	"the checks admit and refuse ($refused refused)");
is(sql('SELECT failures FROM rl_redis_info()'), '0', 'no Redis call failed');

# ---- a refused check leaves nothing consumed in Redis ----

sql(q{
	INSERT INTO rl_policy (name, algo, "limit", per, backend) VALUES
		('big', 'fixed_window', 10, '1 hour', 'redis'),
		('small', 'fixed_window', 1, '1 hour', 'redis'),
		('big_local', 'fixed_window', 10, '1 hour', 'local');
});
is( sql(q{
	SELECT rl_allow_all(ARRAY['a', 'b'], ARRAY['big', 'small']),
	       rl_allow_all(ARRAY['a', 'b'], ARRAY['big', 'small'])
}), 't|f', 'the second check is refused (small is full)');
is(sql("SELECT remaining FROM rl_check('a', policy => 'big', cost => 0)"),
	'9', 'and took nothing from the other key');

# ---- errors ----

($ret, $out, $err) = $node->psql('postgres',
	"SELECT rl_allow_all(ARRAY['a', 'b'], ARRAY['big', 'big_local'])");
like($err,
	qr/ERROR:  all-or-nothing checks need every key on the same backend\nDETAIL:  Key 2 is decided by the local backend, key 1 by the redis backend\./,
	'keys on different backends: SQLSTATE 0A000, nothing decided');

# ---- hybrid: the pre-check is all or nothing too, and given back ----

is( last_of(q{
	SET ratelimit.backend = hybrid;
	SET ratelimit.hybrid_multiple = 2;
	INSERT INTO rl_policy (name, algo, "limit", per) VALUES
		('h1', 'fixed_window', 5, '1 hour'), ('h0', 'fixed_window', 1, '1 hour');
	SELECT rl_allow('hz', policy => 'h0');
	SELECT rl_allow_all(ARRAY['hy', 'hz'], ARRAY['h1', 'h0']);
	SELECT remaining FROM rl_keys() WHERE key = 'hy';
}), '5', 'hybrid: the pre-check admits, Redis refuses: the pre-check gets its units back');

# ---- Redis down: each fail_mode ----

sql(q{
	INSERT INTO rl_policy (name, algo, "limit", per, backend, fail_mode) VALUES
		('d_open', 'fixed_window', 2, '1 hour', 'redis', 'open'),
		('d_closed', 'fixed_window', 2, '1 hour', 'redis', 'closed'),
		('d_local', 'fixed_window', 2, '1 hour', 'redis', 'local');
});
$redis->stop;
is( sql(q{
	SELECT rl_allow_all(ARRAY['x', 'y'], ARRAY['d_open', 'd_open'])
}), 't', 'open: admitted');
is( last_of(q{
	SELECT key, allowed FROM rl_check_all(ARRAY['x', 'y'], ARRAY['d_open', 'd_closed'])
}), 'y|f', 'one closed: refused');
is( sql(q{
	SELECT string_agg(rl_allow_all(ARRAY['x', 'x'], ARRAY['d_local', 'd_local'])::text, ',')
	FROM generate_series(1, 3)
}), 'true,false,false', 'local: decided in shared memory, all or nothing (limit 2, 2 per check)');
is(sql(q{SELECT remaining FROM rl_keys() WHERE policy = 'd_local'}), '0',
	'the shared-memory state holds what was admitted');
ok(sql('SELECT failures FROM rl_redis_info()') > 0, 'the failures are counted');

$node->stop;
done_testing();
