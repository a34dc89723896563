# rl_adjust against the reference model (RlModel::adjust), on the store and
# on Redis: random sequences of calls (rl_check) and charges after the fact
# (rl_adjust, both ways, past the limit and below a new key's state) under
# a policy of each algorithm, every output field compared with the model's.
# The same sequences run on both backends (the policy's backend column), so
# the charge scripts in Lua and the C charges answer alike.

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
my $node = RlRedis::pg_node('adjust_conformance', qq{
ratelimit.redis_nodes = '${\ $redis->addr}'
ratelimit.redis_command_timeout = 5000
ratelimit.fail_mode = closed
log_statement = none
});
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

my $seed = $ENV{RL_SEED} // 20261130;
my $ncall = $ENV{RL_CALLS} // 300;
diag("RL_SEED=$seed ($ncall calls per algorithm and backend)");
srand($seed);

my %has_burst = (token_bucket => 1, leaky_bucket => 1);
my @windows = (1_000_000, 60_000_000, 3_600_000_000, 7_000_003);

# One random sequence for an algorithm: its policy's limit, window and
# burst, and calls { op => check|adjust, key, n (cost or delta), t }.
sub sequence
{
	my ($algo) = @_;
	my $L = 1 + int(rand(20));
	my $W = $windows[ int(rand(@windows)) ];
	my $B = $has_burst{$algo} && rand() < 0.5 ? $L + int(rand(10)) : undef;
	my $cap = $B // $L;
	my $t = 1_767_225_600_000_000 + int(rand(1_000_000_000));
	my @calls;
	for (1 .. $ncall)
	{
		# mostly forward, by up to a fifth of a window; now and then back
		my $step = int(rand($W / 5));
		$t += rand() < 0.1 ? -$step : $step;
		my $key = 'k' . int(rand(3));
		if (rand() < 0.35)
		{
			push @calls, { op => 'adjust', key => $key, t => $t,
				n => int(rand(4 * $L)) - int(1.5 * $L) };
		}
		else
		{
			push @calls, { op => 'check', key => $key, t => $t,
				n => int(rand($cap + 1)) };
		}
	}
	return { L => $L, W => $W, B => $B, calls => \@calls };
}

# Run a sequence under a new policy on a backend; compare with the model.
sub run
{
	my ($algo, $seq, $backend, $n) = @_;
	my $policy = "adj_${backend}_$n";
	my $model = RlModel->new;
	my @sql = ("SET extra_float_digits = 3;", "SET timezone = 'UTC';",
		sprintf("INSERT INTO rl_policy (name, algo, \"limit\", per, burst, backend) "
			  . "VALUES ('%s', '%s', %d, '%d microseconds', %s, '%s');",
			$policy, $algo, $seq->{L}, $seq->{W}, $seq->{B} // 'NULL', $backend));
	my @exp;
	for my $i (0 .. $#{ $seq->{calls} })
	{
		my $c = $seq->{calls}[$i];
		my $at = RlModel::ts_literal($c->{t});
		my $call = $c->{op} eq 'check'
		  ? "rl_check('$c->{key}', '$policy', at => '$at', cost => $c->{n})"
		  : "rl_adjust('$c->{key}', '$policy', $c->{n}, at => '$at')";
		push @sql, "SELECT $i, allowed, \"limit\", remaining, retry_after, "
		  . "(extract(epoch from reset_at) * 1000000)::bigint, delay FROM $call;";
		my @args = ($algo, $c->{key}, $seq->{L}, $seq->{W}, $c->{n},
			$seq->{B}, $c->{t});
		push @exp, $c->{op} eq 'check' ? $model->check(@args)
		  : $model->adjust(@args);
	}
	my ($ret, $out, $err) =
	  $node->psql('postgres', join("\n", @sql, ''), on_error_stop => 1);
	my @lines = split /\n/, $out;
	for my $i (0 .. $#exp)
	{
		my $got = {};
		my @f = split /\|/, $lines[$i] // '', -1;
		@$got{qw(allowed limit remaining retry_after reset_at delay)} =
		  @f[ 1 .. 6 ];
		my @bad = @f == 7 ? RlModel::_mismatches($got, $exp[$i]) : ('no row');
		next unless @bad;
		my $c = $seq->{calls}[$i];
		diag("$algo on $backend (L $seq->{L}, W $seq->{W}, B "
			  . ($seq->{B} // 'NULL')
			  . "): call $i, $c->{op} $c->{key} $c->{n} at $c->{t}: @bad differ\n"
			  . "  model:  " . RlModel::_describe_row($exp[$i]) . "\n"
			  . "  server: " . RlModel::_describe_row($got) . "\n"
			  . "  psql exit $ret: $err");
		return ok(0, "$algo on $backend");
	}
	return ok($ret == 0 && @lines == @exp,
		"$algo on $backend: " . scalar(@exp) . " calls and charges match the model");
}

my $n = 0;
for my $algo (@RlModel::ALGOS)
{
	my $seq = sequence($algo);
	run($algo, $seq, $_, $n) for qw(local redis);
	$n++;
}
is($node->safe_psql('postgres', 'SELECT failures FROM rl_redis_info()'),
	'0', 'no Redis call failed');

# A charge Redis cannot take is an error, not a fail mode's answer.
$redis->stop;
my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT rl_adjust('k0', 'adj_redis_0', 1)");
like($err, qr/could not charge the key in Redis/, 'Redis down: an error');
$redis->start;

done_testing();
