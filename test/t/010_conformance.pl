# Conformance: long random call sequences replayed through rl_check, every
# output field compared with the reference model of the semantics spec
# (RlModel.pm).  The seed is printed; RL_SEED=<n> replays a failing run,
# RL_SEQUENCES / RL_CALLS change how many sequences of how many calls each
# algorithm gets, and RL_ALGOS=a,b limits the run to some algorithms.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use RlModel;

my $S = 1_000_000;    # microseconds per second

# The model first, against the spec's worked examples and hand-computed
# cases, so that a disagreement with the server is not the model's fault.
sub model_calls
{
	my ($m, $algo, $key, $L, $W, $B, @calls) = @_;
	return map { $m->check($algo, $key, $L, $W, $_->[1], $B, $_->[0]) } @calls;
}

sub rat { return Math::BigRat->new(@_); }

{
	# token_bucket, L = 10 per second: 10 calls at 0..9 us allowed
	# (remaining 9..0); at 10 us denied, retry 0.09999 s (the spec's
	# "0.1 s", rounded); at 100 ms allowed again
	my $m = RlModel->new;
	my @r =
	  model_calls($m, 'token_bucket', 'k', 10, $S, undef, map { [ $_, 1 ] } 0 .. 9);
	is_deeply([ map { [ $_->{allowed}, $_->{remaining} ] } @r ],
		[ map { [ 1, 9 - $_ ] } 0 .. 9 ],
		'model: token_bucket worked example, 10 calls allowed');
	my $d = $m->check('token_bucket', 'k', 10, $S, 1, undef, 10);
	ok(!$d->{allowed} && $d->{retry_after} == rat('9999/100000'),
		"model: token_bucket worked example, 11th denied (retry $d->{retry_after})");
	ok(abs($d->{retry_after}->numify - 0.1) < 1e-4,
		'model: token_bucket retry_after is the spec\'s 0.1 s');
	is($m->check('token_bucket', 'k', 10, $S, 1, undef, 100_000)->{allowed},
		1, 'model: token_bucket worked example, allowed again at 100 ms');
}

{
	# sliding_window_counter, L = 10 per second: retry 1.09999 s at 10 us
	my $m = RlModel->new;
	my @r = model_calls($m, 'sliding_window_counter', 'k', 10, $S, undef,
		map { [ $_, 1 ] } 0 .. 9);
	is_deeply([ map { $_->{allowed} } @r ],
		[ (1) x 10 ], 'model: sliding_window_counter worked example, 10 allowed');
	my $d = $m->check('sliding_window_counter', 'k', 10, $S, 1, undef, 10);
	ok(!$d->{allowed} && $d->{retry_after} == rat('1.09999'),
		"model: sliding_window_counter worked example, retry $d->{retry_after}");
	is($d->{reset_at}, 2 * $S, 'model: sliding_window_counter reset_at (w+2)W');
	is($m->check('sliding_window_counter', 'k', 10, $S, 1, undef, 1_099_999)
		  ->{allowed},
		0, 'model: sliding_window_counter still denied 1 us early');
	my $ok = $m->check('sliding_window_counter', 'k', 10, $S, 1, undef, 1_100_000);
	is_deeply([ @$ok{qw(allowed remaining reset_at)} ],
		[ 1, 0, 3 * $S ], 'model: sliding_window_counter allowed at 1.1 s');
}

{
	# fixed_window before the epoch: windows are floor(t / W)
	my $m = RlModel->new;
	my $W = 10 * $S;
	my @r = model_calls($m, 'fixed_window', 'k', 3, $W, undef,
		map { [ -5 * $S, 1 ] } 1 .. 4);
	is_deeply(
		[ map { [ @$_{qw(allowed remaining reset_at)} ] } @r ],
		[ [ 1, 2, 0 ], [ 1, 1, 0 ], [ 1, 0, 0 ], [ 0, 0, 0 ] ],
		'model: fixed_window in window -1 resets at the epoch');
	is($r[3]{retry_after}, 5, 'model: fixed_window retry_after to the window end');
	my $n = $m->check('fixed_window', 'k', 3, $W, 0, undef, 0);
	is_deeply([ @$n{qw(allowed remaining reset_at)} ],
		[ 1, 3, 0 ], 'model: fixed_window new window, look only: reset_at = t');
	my $b = $m->check('fixed_window', 'k', 3, $W, 1, undef, -20 * $S);
	is_deeply([ @$b{qw(t allowed remaining reset_at)} ],
		[ 0, 1, 2, $W ], 'model: a call back in time is clamped to the key\'s latest');
}

{
	# sliding_window_log, L = 3 per 10 s
	my $m = RlModel->new;
	my $W = 10 * $S;
	model_calls($m, 'sliding_window_log', 'k', 3, $W, undef, [ 0, 2 ], [ 4 * $S, 1 ]);
	my $d = $m->check('sliding_window_log', 'k', 3, $W, 2, undef, 5 * $S);
	is_deeply([ @$d{qw(allowed remaining reset_at)} ],
		[ 0, 0, 14 * $S ], 'model: sliding_window_log denied');
	is($d->{retry_after}, 5, 'model: sliding_window_log waits for the entry at 0');
	is($m->check('sliding_window_log', 'k', 3, $W, 2, undef, 10 * $S - 1)->{allowed},
		0, 'model: sliding_window_log entry still live at t_i + W - 1');
	my $a = $m->check('sliding_window_log', 'k', 3, $W, 2, undef, 10 * $S);
	is_deeply([ @$a{qw(allowed remaining reset_at)} ],
		[ 1, 0, 20 * $S ], 'model: sliding_window_log entry gone at t_i + W');
}

{
	# leaky_bucket, L = 2 per second, B = 4
	my $m = RlModel->new;
	my @r = model_calls($m, 'leaky_bucket', 'k', 2, $S, 4, [ 0, 1 ], [ 0, 1 ]);
	is_deeply([ map { "$_->{delay}" } @r ], [ 0, '1/2' ], 'model: leaky_bucket delay');
	my $d = $m->check('leaky_bucket', 'k', 2, $S, 3, 4, 250_000);
	is_deeply(
		[ map { "$_" } @$d{qw(allowed remaining retry_after reset_at delay)} ],
		[ 0, 2, '1/4', $S, 0 ],
		'model: leaky_bucket denied: retry, reset_at, no delay');
}

{
	# token_bucket: reset_at rounds up; parameters change without a reset
	my $m = RlModel->new;
	is($m->check('token_bucket', 'r', 3, $S, 1, undef, 0)->{reset_at},
		333_334, 'model: reset_at rounded up to the next microsecond');
	my @r = (
		$m->check('token_bucket', 'p', 10, $S, 15, 20, 0),
		$m->check('token_bucket', 'p', 10, $S, 1,  4,  0),
		$m->check('token_bucket', 'p', 10, $S, 0, undef, $S));
	is_deeply([ map { $_->{remaining} } @r ],
		[ 5, 3, 10 ], 'model: token_bucket burst changes apply from that call');
}

{
	# Calendar periods (docs/algorithms.md), hand-computed: months across a
	# leap day and before 1970, quarters, weeks from Monday, the days clocks
	# change in Paris (23 and 25 hours), anchors clamped at a month's end.
	my $us = sub {
		my ($y, $m, $d, $h) = @_;
		return (RlModel::_days_from_civil($y, $m, $d) * 24 + ($h // 0)) * 3600 * $S;
	};
	my @cases = (
		[ 'a month in a leap year', { months => 1, zone => 'UTC' },
		  [ 2024, 2, 29, 12 ], [ 2024, 2, 1 ], [ 2024, 3, 1 ] ],
		[ 'a year before 1970', { months => 12, zone => 'UTC' },
		  [ 1969, 6, 1 ], [ 1969, 1, 1 ], [ 1970, 1, 1 ] ],
		[ 'a quarter', { months => 3, zone => 'UTC' },
		  [ 2026, 5, 15 ], [ 2026, 4, 1 ], [ 2026, 7, 1 ] ],
		[ 'a week from Monday', { days => 7, zone => 'UTC' },
		  [ 2026, 1, 1 ], [ 2025, 12, 29 ], [ 2026, 1, 5 ] ],
		[ 'the 23-hour day in Paris', { days => 1, zone => 'Europe/Paris' },
		  [ 2026, 3, 29, 12 ], [ 2026, 3, 28, 23 ], [ 2026, 3, 29, 22 ] ],
		[ 'the 25-hour day in Paris', { days => 1, zone => 'Europe/Paris' },
		  [ 2026, 10, 25, 12 ], [ 2026, 10, 24, 22 ], [ 2026, 10, 25, 23 ] ],
		[ 'an anchor on January 31, in February',
		  { months => 1, zone => 'UTC', anchor => $us->(2026, 1, 31, 10) },
		  [ 2026, 2, 15 ], [ 2026, 1, 31, 10 ], [ 2026, 2, 28, 10 ] ],
		[ 'an anchor on January 31, in a leap March',
		  { months => 1, zone => 'UTC', anchor => $us->(2024, 1, 31, 10) },
		  [ 2024, 3, 1 ], [ 2024, 2, 29, 10 ], [ 2024, 3, 31, 10 ] ],
		[ 'an anchor in New York',
		  { months => 1, zone => 'America/New_York', anchor => $us->(2026, 1, 31, 14) },
		  [ 2026, 2, 10, 12 ], [ 2026, 1, 31, 14 ], [ 2026, 2, 28, 14 ] ],);
	for my $c (@cases)
	{
		my ($name, $period, $t, $start, $end) = @$c;
		is_deeply([ RlModel::period_bounds($period, $us->(@$t)) ],
			[ $us->(@$start), $us->(@$end) ], "model: calendar period, $name");
	}
}

# The server
my $seed  = RlModel::env_int('RL_SEED',      20260101);
my $nseq  = RlModel::env_int('RL_SEQUENCES', 4);
my $ncall = RlModel::env_int('RL_CALLS',     750);
diag("RL_SEED=$seed ($nseq sequences of $ncall calls per algorithm)");

my $node = PostgreSQL::Test::Cluster->new('conformance');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.max_keys = 100000
log_statement = none
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

RlModel::check_literals($node);
RlModel::run_conformance(
	$node,
	seed      => $seed,
	sequences => $nseq,
	calls     => $ncall,
	tag       => 'shm',
	calendar  => 1,
	$ENV{RL_ALGOS} ? (algos => [ split /,/, $ENV{RL_ALGOS} ]) : ());
# load shedding: half of the calls with a random priority and reserve
RlModel::run_conformance(
	$node,
	seed       => $seed,
	sequences  => 1,
	calls      => $ncall,
	tag        => 'shm-priority',
	priorities => 1,
	$ENV{RL_ALGOS} ? (algos => [ split /,/, $ENV{RL_ALGOS} ]) : ());

# every call was decided by the algorithms, none by ratelimit.fail_mode
is($node->safe_psql('postgres', 'SELECT refused FROM rl_store_info()'),
	'0', 'the store refused no call');

$node->stop;
done_testing();
