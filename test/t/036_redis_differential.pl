# Differential test of the two backends at the edges of the ranges: random
# call sequences with limits and bursts up to 2^63 - 1, windows up to 100
# years, times from 1898 to 36000 years ahead, costs up to the capacity,
# priorities under reserves (headrooms up to 2^63) and parameter changes, each call made once on the local backend and once on
# Redis.  Every output field must be identical, to the last bit of the
# doubles: the scripts' exact arithmetic against the C algorithms' 128-bit
# integers.  RL_SEED replays a run.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use Math::BigInt;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use RlRedis;

my $seed = $ENV{RL_SEED} // 20260102;
my $ncalls = $ENV{RL_CALLS} // 1500;
diag("RL_SEED=$seed ($ncalls calls per algorithm)");
srand($seed);

my $redis = RlRedis->new;
my $node = RlRedis::pg_node('redis_differential', qq{
ratelimit.max_keys = 20000
ratelimit.redis_nodes = '${\ $redis->addr}'
ratelimit.redis_command_timeout = 5000
ratelimit.fail_mode = closed
log_statement = none
});
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

# powers of two as exact integers (a Perl float would print rounded)
sub p2 { return Math::BigInt->new(2)->bpow($_[0]); }
my $MAX = p2(63)->bsub(1);

# a random integer in [lo, hi] (Math::BigInt bounds), as a string
sub between
{
	my ($lo, $hi) = map { Math::BigInt->new($_) } @_;
	my $span = $hi->copy->bsub($lo)->badd(1);
	my $r = Math::BigInt->new(0);
	$r->bmul(65536)->badd(int(rand(65536))) for 1 .. 5;
	return $r->bmod($span)->badd($lo)->bstr;
}

sub magnitude
{
	my $x = rand;
	return between(1, 5) if $x < 0.25;
	return between(1, 1000) if $x < 0.45;
	return between(1, p2(40)) if $x < 0.6;
	return between(p2(52), p2(54)) if $x < 0.75;
	return between(p2(61), $MAX);
}

sub window
{
	my $x = rand;
	return between(1, 10) if $x < 0.2;
	return '1000000' if $x < 0.4;
	return between(1, 10_000_000) if $x < 0.6;
	return '3155760000000000' if $x < 0.8;    # 36525 days
	return between(1, '3155760000000000');
}

# Unix us -> timestamptz literal
sub ts
{
	my ($us) = @_;
	my $b = Math::BigInt->new($us);
	my ($s, $frac) = $b->copy->bdiv(1_000_000);
	return sprintf("to_timestamp(%s) + interval '%s microseconds'", $s, $frac);
}

my @sql = ("SET extra_float_digits = 3;", "SET timezone = 'UTC';");
my @described;
for my $algo (qw(fixed_window sliding_window_log sliding_window_counter
	token_bucket leaky_bucket))
{
	my $bucket = $algo =~ /bucket/;
	my %keys;
	for my $i (1 .. $ncalls)
	{
		my $k = "k" . int(rand(4));
		my $s = $keys{$k};
		if (!$s || rand() < 0.03)
		{
			my $L = magnitude();
			# log entries are kept per call: keep its window short
			my $W = $algo eq 'sliding_window_log' ? between(1, 5_000_000) : window();
			$s = $keys{$k} = {
				L => $L,
				W => $W,
				B => $bucket && rand() < 0.5 ? magnitude() : undef,
				t => $s ? $s->{t}
				: rand() < 0.3 ? between(-p2(51), p2(51))
				: rand() < 0.5 ? between(p2(51), p2(60))
				: between('1600000000000000', '1900000000000000'),
			};
		}
		my $cap = Math::BigInt->new($s->{B} // $s->{L});
		my $x = rand;
		my $c =
		    $x < 0.1 ? 0
		  : $x < 0.6 ? ($cap > 3 ? between(1, 3) : between(1, $cap))
		  : $x < 0.8 ? between(0, $cap)
		  : $cap->bstr;
		my $W = Math::BigInt->new($s->{W});
		my $y = rand;
		my $step =
		    $y < 0.3 ? 0
		  : $y < 0.6 ? between(0, $W->copy->bdiv(4)->badd(1))
		  : $y < 0.8 ? between(0, $W->copy->bmul(2))
		  : $y < 0.9 ? '-' . between(0, $W)
		  : between(0, 100);
		my $t = Math::BigInt->new($s->{t})->badd($step);
		$t = Math::BigInt->new(-p2(51)) if $t < -p2(51);
		$t = Math::BigInt->new(p2(60)) if $t > p2(60);
		$s->{t} = $t->bstr;

		# a third of the calls with a priority under a reserve (load
		# shedding: a headroom up to the capacity less the cost)
		my $shed =
		  rand() < 0.33
		  ? sprintf(", priority => '%s', reserve => %s",
			(qw(critical normal sheddable))[ int(rand(3)) ],
			(qw(0.2 0.5 0.999999 0.000001 0.123457))[ int(rand(5)) ])
		  : '';
		my $args = sprintf(
			"'%s', '%s', %s, per => interval '%s microseconds', cost => %s%s, at => %s%s",
			"$k", $algo, $s->{L}, $s->{W}, $c,
			defined $s->{B} ? ", burst => $s->{B}" : '',
			ts($s->{t}), $shed);
		push @described, "$algo: rl_check($args)";
		for my $backend (qw(local redis))
		{
			push @sql,
			  "SET ratelimit.backend = $backend;",
			  "SELECT allowed, remaining, retry_after, "
			  . "(extract(epoch from reset_at) * 1000000)::numeric, delay "
			  . "FROM rl_check($args);";
		}
	}
}

my ($ret, $out, $err) =
  $node->psql('postgres', join("\n", @sql, ''), on_error_stop => 1);
is($ret, 0, 'every call ran on both backends') or diag($err);
my @lines = split /\n/, $out;
is(scalar @lines, 2 * scalar @described, 'one row per call and backend');
my $mismatch = RlRedis::mismatches(\@described, \@lines);
is($mismatch, 0, scalar(@described) . ' calls: both backends answer identically');
my @f = map { [ split /\|/ ] } @lines;
my $denied = grep { $_->[0] eq 'f' } @f;
my $huge = grep { length($_->[1]) > 16 } @f;
ok($denied > @f / 20 && $huge > @f / 20,
	"the sequences exercise denials ($denied rows) and values beyond 2^53 ($huge rows)");
is($node->safe_psql('postgres', 'SELECT failures FROM rl_redis_info()'),
	'0', 'no Redis call failed');

$node->stop;
$redis->stop;
done_testing();
