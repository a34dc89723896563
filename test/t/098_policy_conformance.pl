# Policies against the reference model (RlModel::policy_check and
# policy_adjust), on the store and on Redis: random sequences of calls under
# a policy with a penalty box (block_duration) or not, with one to three
# limits (rl_policy_limit), while the keys' overrides change between calls
# (rl_override's limit, burst, unlimited and blocked_until written
# directly; rl_block and rl_unblock), with charges after the fact
# (rl_adjust) among them, every output field compared with the model's.
# The same sequences run on both backends (the policy's backend column).
# RL_SEED=<n> replays a run, RL_SEQUENCES and RL_CALLS change its size.

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

# The model first, on the case test/sql/penalty.sql computes by hand: a
# fixed window of 5 an hour and a token bucket of 1 per 5 minutes (burst
# 3), a box of 10 minutes.
{
	my $m = RlModel->new;
	my $h = 3_600_000_000;
	my $pol = {
		name   => 'm',
		limits => [
			{ name => '', algo => 'fixed_window', L => 5, W => $h },
			{ name => 'tb', algo => 'token_bucket', L => 1, W => 300_000_000, B => 3 }
		],
		block     => 600_000_000,
		overrides => {},
	};
	my @r = map { $m->policy_check($pol, 'f', 1, 0) } 1 .. 4;
	is_deeply([ map { "$_->{allowed}/$_->{binding}" } @r ],
		[ '1/1', '1/1', '1/1', '0/1' ],
		'model: the bucket, with fewer units left, binds, and denies the fourth call');
	is("$r[3]{retry_after}", 300, 'model: its wait, not the shorter box');
	$pol->{overrides}{f} = { limit => 2 };
	my $d = $m->policy_check($pol, 'f', 1, 60_000_000);
	is_deeply([ @$d{qw(allowed limit binding)}, "$d->{retry_after}" ],
		[ 0, 2, 0, 3540 ],
		'model: in the bucket\'s box, the own limit lowered below its use binds');
	delete $pol->{overrides}{f};
	my $a = $m->policy_check($pol, 'f', 1, 601_000_000);
	is_deeply([ @$a{qw(allowed limit remaining)} ], [ 1, 5, 1 ],
		'model: a look boxes no limit: admitted once the box is over');
}

my $redis = RlRedis->new;
my $node = RlRedis::pg_node('policy_conformance', qq{
ratelimit.redis_nodes = '${\ $redis->addr}'
ratelimit.redis_command_timeout = 5000
ratelimit.fail_mode = closed
log_statement = none
});
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

my $seed  = RlModel::env_int('RL_SEED',      20261201);
my $nseq  = RlModel::env_int('RL_SEQUENCES', 8);
my $ncall = RlModel::env_int('RL_CALLS',     300);
diag("RL_SEED=$seed ($nseq sequences of $ncall operations per backend)");

my %has_burst = (token_bucket => 1, leaky_bucket => 1);
my @windows = (1_000_000, 10_000_000, 60_000_000, 7_000_003, 3_600_000_000);
my @boxes = (500_000, 5_000_000, 90_000_000, 3_600_000_000);
my @limits = (1, 2, 3, 5, 10, 20);
my @keys = ('a', "o'brien", 'tenant:42');

sub pick { return $_[ int(rand(@_)) ]; }

sub sqlq { my ($s) = @_; $s =~ s/'/''/g; return "'$s'"; }

# a random limit { name, algo, L, W, B }: B undef half of the time
sub random_limit
{
	my ($name) = @_;
	my $algo = pick(@RlModel::ALGOS);
	my $L = pick(@limits);
	return {
		name => $name,
		algo => $algo,
		L    => $L,
		W    => pick(@windows),
		B    => $has_burst{$algo} && rand() < 0.5 ? $L + int(rand(6)) : undef,
	};
}

# One random sequence: a policy (the model's form) and its operations
# { op => check|override|delete|block|unblock, key, t, ... }, with the
# model's expected answers.  Times mostly move forward, by steps of the
# shortest window's scale, sometimes onto the moment a call was told to
# come back or to its reset, sometimes back.
sub sequence
{
	my ($n) = @_;
	my $nlim = pick(1, 1, 2, 2, 3);
	my $pol = {
		name      => "pc_$n",
		limits    => [ map { random_limit($_ ? "l$_" : '') } 0 .. $nlim - 1 ],
		block     => rand() < 0.6 ? pick(@boxes) : undef,
		overrides => {},
	};
	$pol->{burst_given} = defined $pol->{limits}[0]{B} ? 1 : 0;
	my $algo = $pol->{limits}[0]{algo};
	my $wmin = $pol->{limits}[0]{W};
	$wmin = $_->{W} < $wmin ? $_->{W} : $wmin for @{ $pol->{limits} };

	my $model = RlModel->new;
	my $t = 1_767_225_600_000_000 + int(rand(1_000_000_000));
	my (@ops, %last);
	for (1 .. $ncall)
	{
		my $key = pick(@keys);
		my $x = rand;
		if    ($x < 0.40) { $t += int(rand($wmin / 3)); }
		elsif ($x < 0.55) { $t += int(rand(2 * $wmin)); }
		elsif ($x < 0.60) { $t += int(rand($pol->{block} // $wmin)); }
		elsif ($x < 0.65) { $t -= int(rand($wmin)); }
		elsif ($x < 0.80 && $last{$key})
		{
			my $r = $last{$key};
			$t = $r->{allowed}
			  ? $r->{reset_at}
			  : $r->{t} + RlModel::_ceil($r->{retry_after} * 1_000_000);
			$t += pick(-1, 0, 0, 1);
		}
		$t = RlModel::_iv($t);

		my $op = { key => $key, t => $t };
		my $ov = $pol->{overrides}{$key};
		my $y = rand;
		if ($y < 0.09)
		{
			my $o = {};
			$o->{limit} = pick(@limits, 40) if rand() < 0.6;
			$o->{burst} = pick(@limits) + int(rand(4))
			  if $has_burst{$algo} && rand() < 0.3;
			$o->{unlimited} = rand() < 0.15 ? 1 : 0;
			my $z = rand;
			$o->{blocked_until} =
			    $z < 0.10 ? 'inf'
			  : $z < 0.25 ? $t + 1 + int(rand(3 * $wmin))
			  : $z < 0.30 ? $t - int(rand($wmin))
			  :             undef;
			$op->{op} = 'override';
			$op->{o} = { %$o };    # the row as written: later ops change $o
			$pol->{overrides}{$key} = $o;
		}
		elsif ($y < 0.12)
		{
			$op->{op} = 'delete';
			delete $pol->{overrides}{$key};
		}
		elsif ($y < 0.16)
		{
			$op->{op} = 'block';
			$op->{d} = rand() < 0.2 ? undef : 1 + int(rand(2 * $wmin));
			$op->{expected} = defined $op->{d} ? $t + $op->{d} : 'infinity';
			$ov = $pol->{overrides}{$key} //= {};
			$ov->{blocked_until} = defined $op->{d} ? $t + $op->{d} : 'inf';
		}
		elsif ($y < 0.19)
		{
			$op->{op} = 'unblock';
			$op->{expected} = $ov && defined $ov->{blocked_until} ? 't' : 'f';
			if ($ov)
			{
				delete $ov->{blocked_until};
				delete $pol->{overrides}{$key}
				  unless defined $ov->{limit} || defined $ov->{burst}
				  || $ov->{unlimited};
			}
		}
		elsif ($y < 0.25)
		{
			my $L = $pol->{limits}[0]{L};
			$op->{op} = 'adjust';
			$op->{c} = int(rand(4 * $L + 1)) - int(1.5 * $L) || 1;
			$op->{expected} = $model->policy_adjust($pol, $key, $op->{c}, $t);
			$last{$key} = $op->{expected};
		}
		else
		{
			my $cap = RlModel::policy_capacity($pol, $key);
			my $c = rand() < 0.1 ? 0 : rand() < 0.7 ? 1 : int(rand($cap + 1));
			$op->{op} = 'check';
			$op->{c} = $c;
			$op->{expected} = $model->policy_check($pol, $key, $c, $t);
			$last{$key} = $op->{expected};
		}
		push @ops, $op;
	}
	return { pol => $pol, ops => \@ops };
}

# the SQL of a sequence's policy
sub policy_sql
{
	my ($pol, $name, $backend) = @_;
	my @l = @{ $pol->{limits} };
	my $own = shift @l;
	my $micro = sub { "'$_[0] microseconds'" };
	return (
		sprintf(
			"INSERT INTO rl_policy (name, algo, \"limit\", per, burst, backend, "
			  . "block_duration) VALUES ('%s', '%s', %d, %s, %s, '%s', %s);",
			$name, $own->{algo}, $own->{L}, $micro->($own->{W}),
			$own->{B} // 'NULL', $backend,
			defined $pol->{block} ? $micro->($pol->{block}) : 'NULL'),
		map {
			sprintf(
				"INSERT INTO rl_policy_limit (policy, name, algo, \"limit\", per, "
				  . "burst) VALUES ('%s', '%s', '%s', %d, %s, %s);",
				$name, $_->{name}, $_->{algo}, $_->{L}, $micro->($_->{W}),
				$_->{B} // 'NULL')
		} @l);
}

# the SQL of an operation, its output line starting with its number
sub op_sql
{
	my ($i, $op, $name) = @_;
	my $k = sqlq($op->{key});
	my $at = sqlq(RlModel::ts_literal($op->{t}));
	if ($op->{op} eq 'check' || $op->{op} eq 'adjust')
	{
		return "SELECT $i, allowed, \"limit\", remaining, retry_after, "
		  . "(extract(epoch from reset_at) * 1000000)::bigint, delay FROM "
		  . ($op->{op} eq 'check'
			? "rl_check($k, '$name', at => $at, cost => $op->{c});"
			: "rl_adjust($k, '$name', $op->{c}, at => $at);");
	}
	if ($op->{op} eq 'override')
	{
		my $o = $op->{o};
		my $bu = $o->{blocked_until};
		return sprintf(
			"INSERT INTO rl_override (policy, key, \"limit\", burst, unlimited, "
			  . "blocked_until) VALUES ('%s', %s, %s, %s, %s, %s) "
			  . "ON CONFLICT (policy, key) DO UPDATE SET \"limit\" = EXCLUDED.\"limit\", "
			  . "burst = EXCLUDED.burst, unlimited = EXCLUDED.unlimited, "
			  . "blocked_until = EXCLUDED.blocked_until;",
			$name, $k, $o->{limit} // 'NULL', $o->{burst} // 'NULL',
			$o->{unlimited} ? 'true' : 'false',
			!defined $bu ? 'NULL'
			: $bu eq 'inf' ? "'infinity'"
			: sqlq(RlModel::ts_literal($bu)));
	}
	return "DELETE FROM rl_override WHERE policy = '$name' AND key = $k;"
	  if $op->{op} eq 'delete';
	return "SELECT $i, rl_unblock($k, '$name');" if $op->{op} eq 'unblock';
	my $d = defined $op->{d} ? "'$op->{d} microseconds'" : 'NULL';
	return "SELECT $i, CASE WHEN isfinite(b) THEN "
	  . "(extract(epoch from b) * 1000000)::bigint::text ELSE b::text END "
	  . "FROM rl_block($k, '$name', $d, at => $at) b;";
}

sub describe_op
{
	my ($i, $op) = @_;
	my $what =
	    $op->{op} eq 'check'  ? "rl_check cost $op->{c}"
	  : $op->{op} eq 'adjust' ? "rl_adjust delta $op->{c}"
	  : $op->{op} eq 'override' ? 'override ' . join(', ',
		map { "$_ => " . ($op->{o}{$_} // 'NULL') }
		  qw(limit burst unlimited blocked_until))
	  : $op->{op} eq 'block' ? 'rl_block for ' . ($op->{d} // 'NULL') . ' us'
	  : $op->{op};
	return "op $i: $what, key \"$op->{key}\" at $op->{t}";
}

# Run a sequence under a new policy on a backend; compare with the model.
sub run
{
	my ($seq, $backend, $n, $s) = @_;
	my $name = "pc_${backend}_$n";
	my $pol = $seq->{pol};
	my $desc = "seq $n (seed $s) on $backend: "
	  . join(' + ',
		map { "$_->{algo} $_->{L}/$_->{W}us B " . ($_->{B} // 'NULL') }
		  @{ $pol->{limits} })
	  . ', box ' . ($pol->{block} // 'none');
	my @ops = @{ $seq->{ops} };
	my @sql = ("SET extra_float_digits = 3;", "SET timezone = 'UTC';",
		policy_sql($pol, $name, $backend),
		map { op_sql($_, $ops[$_], $name) } 0 .. $#ops);
	my ($ret, $out, $err) =
	  $node->psql('postgres', join("\n", @sql, ''), on_error_stop => 1);
	my %line = map { my @f = split /\|/, $_, -1; ($f[0] => \@f) }
	  grep { /^\d+\|/ } split /\n/, $out;
	my @history;
	for my $i (0 .. $#ops)
	{
		my $op = $ops[$i];
		push @history, describe_op($i, $op);
		shift @history if @history > 12;
		next unless defined $op->{expected};
		my $f = $line{$i};
		my ($got, @bad) = ({});
		if (!$f)
		{
			@bad = ('no row');
		}
		elsif ($op->{op} eq 'check' || $op->{op} eq 'adjust')
		{
			@$got{qw(allowed limit remaining retry_after reset_at delay)} =
			  @$f[ 1 .. 6 ];
			@bad = @$f == 7 ? RlModel::_mismatches($got, $op->{expected})
			  : ('fields');
		}
		elsif (($f->[1] // '') ne $op->{expected})
		{
			@bad = ("$op->{op} returned \"$f->[1]\", not \"$op->{expected}\"");
		}
		next unless @bad;
		diag("$desc: first mismatch at " . describe_op($i, $op) . ": @bad\n"
			  . ($op->{op} eq 'check' || $op->{op} eq 'adjust'
				? "  model:  " . RlModel::_describe_row($op->{expected})
				  . " (binding limit $op->{expected}{binding})\n"
				  . "  server: " . RlModel::_describe_row($got) . "\n"
				: '')
			  . "  the operations up to it:\n    " . join("\n    ", @history)
			  . "\n  psql exit $ret: $err");
		return ok(0, $desc);
	}
	return ok($ret == 0, "$desc: " . scalar(@ops) . " operations match the model")
	  || diag("psql exit $ret: $err");
}

for my $n (0 .. $nseq - 1)
{
	my $s = $seed * 100 + $n;
	srand($s);
	my $seq = sequence($n);
	run($seq, $_, $n, $s) for qw(local redis);
}
is($node->safe_psql('postgres', 'SELECT failures FROM rl_redis_info()'),
	'0', 'no Redis call failed');

$node->stop;
$redis->stop;
done_testing();
