=pod

=head1 NAME

RlModel - reference model of the ratelimit decision semantics, and a
conformance runner that replays random call sequences through C<rl_check>

=head1 SYNOPSIS

  use RlModel;

  my $m   = RlModel->new;
  my $row = $m->check('token_bucket', 'tenant:42', 10, 1_000_000, 1, undef,
                      1_767_225_600_000_000);
  # $row->{allowed}, {limit}, {remaining}, {retry_after}, {reset_at}, {delay}

  # replay random sequences through a node and compare every output field
  RlModel::run_conformance($node, seed => 42, tag => 'redis',
                           setup => ["SET ratelimit.backend = 'redis'"]);

  # or one sequence
  my $calls = RlModel::gen_sequence(algo => 'leaky_bucket', seed => 7,
                                    calls => 500, prefix => 'x', start => 0);
  RlModel::run_sequence($node, 'leaky_bucket', $calls, name => 'leaky 7');

=head1 DESCRIPTION

The model is written from the project's semantics spec alone
(F<../shared/spec/semantics.md>), independently of the C code, with exact
rational arithmetic (Math::BigRat).  Times and windows are integers of
microseconds; t may be any integer (windows are aligned on the Unix epoch
with floor division, so times before 1970 work too).

The reporting conventions shared with the C code:

=over

=item remaining: the floor of the exact value, never negative

=item retry_after, delay: exact rationals in seconds (the server reports
doubles); 0 when the spec says so (allowed, resp. denied or not a
leaky_bucket)

=item reset_at: the exact time rounded up to the next whole microsecond,
as an integer of Unix microseconds

=item a look-only call (cost 0) on a key that has no state decides as on a
new key and leaves no state behind: in particular it leaves no time for a
later call to be clamped to.  The key's state, and with it the latest time
it has seen, begins with its first call that consumes.  (The spec's "latest
time this key has seen" read literally would count the look too; a store
that does not create an entry to look is simpler and admits the same calls.)

=back

=cut

package RlModel;

use strict;
use warnings;

use Carp;
use Math::BigInt try => 'GMP';
use Math::BigRat;
use POSIX ();
use Test::More;

our @ALGOS = qw(fixed_window sliding_window_log sliding_window_counter
  token_bucket leaky_bucket);

my %HAS_BURST = (token_bucket => 1, leaky_bucket => 1);

my $US_PER_S = 1_000_000;

# One algorithm per name: ($state, $p) -> { allowed, remaining (rational,
# before floor/clamp), retry (us), reset (us), delay (us) }.  $p holds
# L, W, c, B, t (clamped), elapsed (t minus the key's previous time, 0 for a
# new key) and fresh.
my %IMPL = (
	fixed_window           => \&_fixed_window,
	sliding_window_log     => \&_sliding_window_log,
	sliding_window_counter => \&_sliding_window_counter,
	token_bucket           => \&_token_bucket,
	leaky_bucket           => \&_leaky_bucket,);

sub _rat
{
	return Math::BigRat->new(@_ == 1 ? "$_[0]" : "$_[0]/$_[1]");
}

# floor(a / b) for native integers, b > 0
sub _floordiv
{
	my ($n, $d) = @_;
	use integer;
	my $q = $n / $d;
	$q-- if $n % $d != 0 && $n < 0;
	return $q;
}

# an integral number as a native integer (exact below 2**53), so that it
# stringifies as digits
sub _iv
{
	my $s = sprintf('%.0f', $_[0]);
	return 0 + $s;
}

sub _min { return $_[0] < $_[1] ? $_[0] : $_[1]; }
sub _max { return $_[0] > $_[1] ? $_[0] : $_[1]; }

=pod

=head2 RlModel->new

A model with no keys.

=cut

sub new
{
	my ($class) = @_;
	return bless { state => {} }, $class;
}

=pod

=head2 $m->check($algo, $key, $L, $W_us, $c, $B_or_undef, $t_us [, $period [, $shed]])

Decide one call like C<rl_check> and return a hashref: allowed (0/1), limit,
remaining (integer), retry_after and delay (seconds: 0 or an exact
Math::BigRat), reset_at (integer Unix microseconds), and t (the clamped time
the decision used).
Croaks on arguments the server must reject.  $period (fixed_window
only) makes the windows calendar periods: see C<period_bounds>.  $shed
({ priority => 'critical' | 'normal' | 'sheddable', reserve => millionths })
is a call's priority under a reserve: see C<headroom>.

=cut

sub check
{
	my ($self, $algo, $key, $L, $W, $c, $B, $t, $period, $shed) = @_;

	croak "unknown algorithm \"$algo\"" unless exists $IMPL{$algo};
	for my $n ($L, $W, $c, $B, $t)
	{
		croak "not an integer: $n" if defined $n && "$n" !~ /^-?\d+$/;
	}
	croak "limit must be > 0" unless $L > 0;
	croak "per must be > 0"   unless $W > 0;
	croak "cost must be >= 0" unless $c >= 0;
	croak "burst on \"$algo\"" if defined $B && !$HAS_BURST{$algo};
	croak "calendar period on \"$algo\"" if $period && $algo ne 'fixed_window';
	croak "burst must be > 0" if defined $B && $B <= 0;
	$B //= $L if $HAS_BURST{$algo};
	my $cap = $HAS_BURST{$algo} ? $B : $L;
	croak "cost $c can never fit in $cap" if $c > $cap;
	my $h = headroom($cap, $c, $shed);

	# State identity is (algo, key); time never runs backwards for a key.
	# A look-only call on a key without state leaves none (see above).
	my $s = $self->{state}{"$algo\0$key"};
	my $fresh = !defined $s;
	if ($fresh)
	{
		$s = {};
		$self->{state}{"$algo\0$key"} = $s if $c > 0;
	}
	$t = $s->{last} if !$fresh && $s->{last} > $t;
	my $elapsed = $fresh ? 0 : $t - $s->{last};
	$s->{last} = $t;

	my $r = $IMPL{$algo}->(
		$s,
		{
			L       => $L,
			W       => $W,
			c       => $c,
			h       => $h,
			B       => $B,
			t       => $t,
			elapsed => $elapsed,
			fresh   => $fresh,
			period  => $period
		});

	# what remains for the caller: the units above its headroom
	my $remaining = _floor($r->{remaining}) - $h;
	return {
		allowed     => $r->{allowed} ? 1 : 0,
		limit       => $L,
		remaining   => $remaining < 0 ? 0 : $remaining,
		retry_after => _seconds($r->{retry}),
		reset_at    => _ceil($r->{reset}),
		delay       => _seconds($r->{delay}),
		t           => $t,
	};
}

=pod

=head2 RlModel::headroom($capacity, $c, $shed)

Load shedding (docs/quotas.md): the units a call with priority and reserve
$shed must leave free, decided as if it cost $c plus them and charged $c.
A sheddable call keeps the whole reserve, a normal one half of it (in
millionths, rounded down), a critical one or one without a priority none:
floor(capacity * share / 10^6), at most capacity - $c.

=cut

sub headroom
{
	my ($cap, $c, $shed) = @_;
	return 0 unless $shed && $shed->{priority};
	my $share =
	    $shed->{priority} eq 'sheddable' ? $shed->{reserve}
	  : $shed->{priority} eq 'normal'    ? _floordiv($shed->{reserve}, 2)
	  :                                    0;
	my $h = _floordiv(_iv($cap) * $share, 1_000_000);
	return _max(0, _min($h, $cap - $c));
}

=pod

=head2 $m->adjust($algo, $key, $L, $W_us, $delta, $B_or_undef, $t_us)

Charge C<$delta> units after the fact like C<rl_adjust> (past the limit if
so), or give C<-$delta> back (never below a new key's state; a log gives
back from its newest entries), then return what a look (cost 0) at the
same time reports, as C<check> does.  A give-back to a key without state
leaves none.  (The server's counts saturate at 2^63 - 1, far beyond what
the sequences reach.)

=cut

sub adjust
{
	my ($self, $algo, $key, $L, $W, $delta, $B, $t) = @_;

	croak "unknown algorithm \"$algo\"" unless exists $IMPL{$algo};
	$B //= $L if $HAS_BURST{$algo};
	my $s = $self->{state}{"$algo\0$key"};
	my $fresh = !defined $s;
	return $self->check($algo, $key, $L, $W, 0, $HAS_BURST{$algo} ? $B : undef, $t)
	  if $fresh && $delta <= 0;
	$s = $self->{state}{"$algo\0$key"} = {} if $fresh;
	$t = $s->{last} if !$fresh && $s->{last} > $t;
	my $elapsed = $fresh ? 0 : $t - $s->{last};
	$s->{last} = $t;

	if ($algo eq 'fixed_window' || $algo eq 'sliding_window_counter')
	{
		# the window's roll, as a look makes it, then the current count
		$IMPL{$algo}->($s, { L => $L, W => $W, c => 0, h => 0, B => $B, t => $t,
				elapsed => $elapsed, fresh => $fresh });
		my $f = $algo eq 'fixed_window' ? 'count' : 'cur';
		$s->{$f} = _max(0, $s->{$f} + $delta);
	}
	elsif ($algo eq 'sliding_window_log')
	{
		my $log = $s->{log} //= [];
		shift @$log while @$log && !($log->[0][0] > $t - $W);
		if ($delta > 0)
		{
			if (@$log && $log->[-1][0] == $t) { $log->[-1][1] += $delta; }
			else                              { push @$log, [ $t, $delta ]; }
		}
		my $back = -$delta;
		while ($back > 0 && @$log)
		{
			my $given = _min($back, $log->[-1][1]);
			$log->[-1][1] -= $given;
			$back -= $given;
			pop @$log if $log->[-1][1] == 0;
		}
	}
	elsif ($algo eq 'token_bucket')
	{
		my $tokens =
		  $fresh
		  ? _rat($B)
		  : _min(_rat($B), $s->{tokens} + _rat($elapsed) * $L / $W);
		$s->{tokens} = _min(_rat($B), $tokens - $delta);
	}
	else
	{
		my $level =
		  $fresh
		  ? _rat(0)
		  : _max(_rat(0), $s->{level} - _rat($elapsed) * $L / $W);
		$s->{level} = _max(_rat(0), $level + $delta);
	}
	return $self->check($algo, $key, $L, $W, 0, $HAS_BURST{$algo} ? $B : undef, $t);
}

# Values are native integers or Math::BigRat (the latter only where a
# division happens: native arithmetic is much faster, and exact here).
sub _floor
{
	my ($x) = @_;
	return ref $x ? $x->copy->bfloor->numerator->bstr : $x;
}

sub _ceil
{
	my ($x) = @_;
	return ref $x ? $x->copy->bceil->numerator->bstr : $x;
}

# microseconds to seconds: 0 or an exact Math::BigRat
sub _seconds
{
	my ($us) = @_;
	return 0 if !defined $us || $us == 0;
	return ref $us ? $us / $US_PER_S : _rat($us, $US_PER_S);
}

# fixed_window: a counter per window [start, end): floor(t / W) * W and W
# long, or the calendar period holding t.
sub _fixed_window
{
	my ($s, $p) = @_;
	my ($L, $W, $c, $h, $t) = @$p{qw(L W c h t)};
	my ($start, $end) =
	  $p->{period}
	  ? period_bounds($p->{period}, $t)
	  : (_floordiv($t, $W) * $W, (_floordiv($t, $W) + 1) * $W);

	if ($p->{fresh} || $s->{start} != $start)
	{
		$s->{start} = $start;
		$s->{count} = 0;
	}
	my $allowed = $s->{count} + $c + $h <= $L;
	$s->{count} += $c if $allowed;
	return {
		allowed   => $allowed,
		remaining => $L - $s->{count},
		retry     => $allowed ? 0 : $end - $t,
		reset     => $s->{count} > 0 ? $end : $t,
	};
}

=pod

=head2 RlModel::period_bounds($period, $t_us)

The start and end (Unix microseconds) of the calendar period holding $t_us,
as docs/algorithms.md ("Calendar periods") defines them, computed here from
the rules alone: civil dates by Howard Hinnant's day-count formulas, zone
offsets by the C library's localtime (the TZ variable).  $period is
{ months => N } or { days => N }, with zone (a name; 'UTC') and anchor
(Unix microseconds, or undef).  Local times that do not exist or exist
twice (clock changes) are not modelled: sequences keep boundaries away
from them.

=cut

my $DAY_US = 86_400 * $US_PER_S;

sub _days_from_civil
{
	my ($y, $m, $d) = @_;
	$y -= 1 if $m <= 2;
	my $era = _floordiv($y, 400);
	my $yoe = $y - $era * 400;
	my $doy = int((153 * ($m > 2 ? $m - 3 : $m + 9) + 2) / 5) + $d - 1;
	my $doe = $yoe * 365 + int($yoe / 4) - int($yoe / 100) + $doy;
	return $era * 146_097 + $doe - 719_468;
}

sub _civil_from_days
{
	my ($z) = @_;
	$z += 719_468;
	my $era = _floordiv($z, 146_097);
	my $doe = $z - $era * 146_097;
	my $yoe =
	  int(($doe - int($doe / 1460) + int($doe / 36_524) - int($doe / 146_096)) / 365);
	my $doy = $doe - (365 * $yoe + int($yoe / 4) - int($yoe / 100));
	my $mp  = int((5 * $doy + 2) / 153);
	my $d   = $doy - int((153 * $mp + 2) / 5) + 1;
	my $m   = $mp < 10 ? $mp + 3 : $mp - 9;
	return ($yoe + $era * 400 + ($m <= 2 ? 1 : 0), $m, $d);
}

sub _month_days
{
	my ($y, $m) = @_;
	return _days_from_civil($m == 12 ? ($y + 1, 1) : ($y, $m + 1), 1) -
	  _days_from_civil($y, $m, 1);
}

# the zone's offset from UTC (microseconds) at Unix time $t
sub _offset
{
	my ($t, $zone) = @_;
	return 0 if $zone eq 'UTC';
	local $ENV{TZ} = $zone;
	POSIX::tzset();
	my $secs = _floordiv($t, $US_PER_S);
	my @lt   = localtime($secs);
	my $local =
	  _days_from_civil($lt[5] + 1900, $lt[4] + 1, $lt[3]) * 86_400 +
	  $lt[2] * 3600 + $lt[1] * 60 + $lt[0];
	return ($local - $secs) * $US_PER_S;
}

# the Unix time of local day $day (since 1970-01-01) at $tod in $zone
sub _unix
{
	my ($day, $tod, $zone) = @_;
	my $local = $day * $DAY_US + $tod;
	my $u = $local - _offset($local, $zone);
	my $off = _offset($u, $zone);
	return $local - $off;
}

sub period_bounds
{
	my ($P, $t) = @_;
	my $zone  = $P->{zone} // 'UTC';
	my $local = $t + _offset($t, $zone);
	my $day   = _floordiv($local, $DAY_US);
	my ($oday, $otod) = (0, 0);
	if (defined $P->{anchor})
	{
		my $la = $P->{anchor} + _offset($P->{anchor}, $zone);
		$oday = _floordiv($la, $DAY_US);
		$otod = $la - $oday * $DAY_US;
	}
	elsif ($P->{days} && $P->{days} % 7 == 0)
	{
		$oday = 4;    # Monday 1970-01-05
	}
	my ($k, $start_of);
	if ($P->{months})
	{
		my ($y, $m) = _civil_from_days($day);
		my ($a0, $aday) = (1970 * 12, 1);
		if (defined $P->{anchor})
		{
			my ($ay, $am, $ad) = _civil_from_days($oday);
			($a0, $aday) = ($ay * 12 + $am - 1, $ad);
		}
		$start_of = sub {
			my $i  = $a0 + $_[0] * $P->{months};
			my $yy = _floordiv($i, 12);
			my $mm = $i - $yy * 12 + 1;
			return _unix(
				_days_from_civil($yy, $mm, _min($aday, _month_days($yy, $mm))),
				$otod, $zone);
		};
		$k = _floordiv($y * 12 + $m - 1 - $a0, $P->{months});
	}
	else
	{
		$start_of = sub { _unix($oday + $_[0] * $P->{days}, $otod, $zone) };
		$k = _floordiv($day - $oday, $P->{days});
	}
	$k-- if $start_of->($k) > $t;
	return ($start_of->($k), $start_of->($k + 1));
}

# sliding_window_log: entries [t_i, c_i], oldest first, live while
# t_i > t - W.  Entries of one time are merged: "newer than j" then means
# strictly later, which is what expiring at t_j + W implies anyway.
sub _sliding_window_log
{
	my ($s, $p) = @_;
	my ($L, $W, $c, $h, $t) = @$p{qw(L W c h t)};
	my $log = $s->{log} //= [];

	shift @$log while @$log && !($log->[0][0] > $t - $W);
	my $sum = 0;
	$sum += $_->[1] for @$log;

	my $allowed = $sum + $c + $h <= $L;
	my $retry   = 0;
	if ($allowed)
	{
		if ($c > 0)
		{
			if (@$log && $log->[-1][0] == $t) { $log->[-1][1] += $c; }
			else                              { push @$log, [ $t, $c ]; }
			$sum += $c;
		}
	}
	else
	{
		# the oldest live entry j with (sum of entries newer than j) + c + h <= L
		my $newer = $sum;
		for my $e (@$log)
		{
			$newer -= $e->[1];
			if ($newer + $c + $h <= $L)
			{
				$retry = $e->[0] + $W - $t;
				last;
			}
		}
		croak "sliding_window_log: no entry to wait for" unless $retry > 0;
	}
	return {
		allowed   => $allowed,
		remaining => $L - $sum,
		retry     => $retry,
		reset     => @$log ? $log->[-1][0] + $W : $t,
	};
}

# sliding_window_counter: the current and the previous window's counters.
sub _sliding_window_counter
{
	my ($s, $p) = @_;
	my ($L, $W, $c, $h, $t) = @$p{qw(L W c h t)};
	my $n = $c + $h;    # decided for the cost and the headroom
	my $w = _floordiv($t, $W);
	my $e = $t - $w * $W;

	if ($p->{fresh})
	{
		@$s{qw(w prev cur)} = ($w, 0, 0);
	}
	elsif ($s->{w} == $w - 1)
	{
		@$s{qw(w prev cur)} = ($w, $s->{cur}, 0);
	}
	elsif ($s->{w} < $w - 1)
	{
		@$s{qw(w prev cur)} = ($w, 0, 0);
	}
	my ($prev, $cur) = @$s{qw(prev cur)};

	my $estimate = _rat($prev) * ($W - $e) / $W + $cur;
	my $allowed  = $estimate + $n <= $L;
	my $retry    = 0;
	if ($allowed)
	{
		$s->{cur} = $cur += $c;
		$estimate += $c;
	}
	elsif ($cur + $n <= $L)
	{
		# prev's weight fades enough inside this window
		$retry = _rat($W) - _rat($L - $cur - $n) * $W / $prev - $e;
	}
	else
	{
		# in the next window cur becomes prev
		my $more = _rat($W) - _rat($L - $n) * $W / $cur;
		$more = _rat(0) if $more < 0;
		$retry = _rat($W - $e) + $more;
	}
	return {
		allowed   => $allowed,
		remaining => _rat($L) - $estimate,
		retry     => $retry,
		reset     => $cur > 0 ? ($w + 2) * $W
		: $prev > 0 ? ($w + 1) * $W
		:             $t,
	};
}

# token_bucket: refills at r = L / W up to B; a new key starts full.
sub _token_bucket
{
	my ($s, $p) = @_;
	my ($L, $W, $c, $h, $B, $t) = @$p{qw(L W c h B t)};

	my $tokens =
	  $p->{fresh}
	  ? _rat($B)
	  : _min(_rat($B), $s->{tokens} + _rat($p->{elapsed}) * $L / $W);
	my $allowed = $tokens >= $c + $h;
	my $retry   = 0;
	if   ($allowed) { $tokens -= $c; }
	else            { $retry = ($c + $h - $tokens) * $W / $L; }
	$s->{tokens} = $tokens;
	return {
		allowed   => $allowed,
		remaining => $tokens,
		retry     => $retry,
		reset     => _rat($t) + (_rat($B) - $tokens) * $W / $L,
	};
}

# leaky_bucket: a queue of capacity B draining at r = L / W; a new key
# starts empty; an admitted call waits for the queue ahead of it.
sub _leaky_bucket
{
	my ($s, $p) = @_;
	my ($L, $W, $c, $h, $B, $t) = @$p{qw(L W c h B t)};

	my $level =
	  $p->{fresh}
	  ? _rat(0)
	  : _max(_rat(0), $s->{level} - _rat($p->{elapsed}) * $L / $W);
	my $allowed = $level + $c + $h <= $B;
	my ($retry, $delay) = (0, 0);
	if ($allowed)
	{
		$delay = $level * $W / $L;
		$level += $c;
	}
	else
	{
		$retry = ($level + $c + $h - $B) * $W / $L;
	}
	$s->{level} = $level;
	return {
		allowed   => $allowed,
		remaining => _rat($B) - $level,
		retry     => $retry,
		reset     => _rat($t) + $level * $W / $L,
		delay     => $delay,
	};
}

=pod

=head1 CONFORMANCE RUNNER

=head2 RlModel::ts_literal($us)

A timestamptz literal (UTC, microsecond precision) for Unix microseconds.

=cut

sub ts_literal
{
	my ($us) = @_;
	my $sec  = _floordiv($us, $US_PER_S);
	my $frac = $us - $sec * $US_PER_S;
	my @tm   = gmtime($sec);
	croak "time $us out of the supported range" if $tm[5] + 1900 < 1;
	return sprintf("%04d-%02d-%02d %02d:%02d:%02d.%06d+00",
		$tm[5] + 1900, $tm[4] + 1, @tm[ 3, 2, 1, 0 ], $frac);
}

=pod

=head2 RlModel::env_int($name, $default)

A run's size or seed from the environment variable $name (RL_SEED,
RL_SEQUENCES, RL_CALLS): a non-negative integer, or $default when unset
or empty.

=cut

sub env_int
{
	my ($name, $default) = @_;
	my $v = $ENV{$name};
	return $default if !defined $v || $v eq '';
	croak "$name must be a non-negative integer, not \"$v\"" unless $v =~ /^\d+$/;
	return $v;
}

# The windows the sequences use: microseconds and the interval's SQL text.
# The calendar periods calendar sequences use (fixed_window under a policy
# each): the period, its interval's SQL text, and a nominal length for the
# steps of time.  The zones: UTC, two that change clocks at 02:00 or 03:00
# (never at a period's start: anchors are at 00:00 to 23:00 on whole hours
# but for 01:00 to 03:59), one without changes.
our @PERIODS = (
	[ { months => 1 },  '1 month',  30 * 86_400_000_000 ],
	[ { months => 3 },  '3 months', 91 * 86_400_000_000 ],
	[ { months => 12 }, '1 year',   365 * 86_400_000_000 ],
	[ { days => 1 },    '1 day',    86_400_000_000 ],
	[ { days => 7 },    '7 days',   7 * 86_400_000_000 ],
	[ { days => 3 },    '3 days',   3 * 86_400_000_000 ],);
our @ZONES = ('UTC', 'Europe/Paris', 'America/New_York', 'Asia/Kolkata');

our @WINDOWS = (
	[ 1_000_000,      '1 second' ],
	[ 10_000_000,     '10 seconds' ],
	[ 60_000_000,     '1 minute' ],
	[ 3_600_000_000,  '1 hour' ],
	[ 7_000_000,      '7 seconds' ],
	[ 1_500_000,      '1.5 seconds' ],
	[ 250_000,        '250 milliseconds' ],
	[ 86_400_000_000, '1 day' ],
	[ 5_400_000_000,  '1 hour 30 minutes' ],
	[ 3,              '3 microseconds' ],);

my @LIMITS = (1, 2, 3, 5, 10, 10, 10, 20, 60, 100, 1000, 123_457);

# the literal forms that the runner relies on, checked once against a node
my @SAMPLE_TIMES = (
	0, 1, -1, 999_999, -999_999, -1_000_000, -1_000_001,
	1_767_225_600_000_000, 1_767_225_599_999_999, 1_767_225_600_123_457,
	951_782_400_000_000,          # 2000-02-29
	-2_208_988_800_000_001,       # 1899-12-31 23:59:59.999999
	4_102_444_800_000_000 - 1,    # 2099-12-31 23:59:59.999999
);

=pod

=head2 RlModel::check_literals($node, $dbname)

Test that the timestamptz literals of C<ts_literal> and the interval texts of
C<@WINDOWS> mean exactly the microseconds the model uses, and that the
output route C<(extract(epoch from ...) * 1000000)::bigint> is exact.

=cut

sub check_literals
{
	my ($node, $dbname) = @_;
	$dbname //= 'postgres';
	my $sql = join(
		"\n",
		"SET timezone = 'Pacific/Chatham';",    # any zone: literals say +00
		(
			map {
				sprintf("SELECT (extract(epoch from timestamptz '%s') * 1000000)::bigint;",
					ts_literal($_))
			} @SAMPLE_TIMES
		),
		(
			map {
				sprintf("SELECT (extract(epoch from interval '%s') * 1000000)::bigint;",
					$_->[1])
			} @WINDOWS
		));
	my $got = $node->safe_psql($dbname, $sql);
	is( $got,
		join("\n", @SAMPLE_TIMES, map { $_->[0] } @WINDOWS),
		'time and interval literals are exact to the microsecond');
	return;
}

# Perl's rand with srand is drand48 on every platform: a seed reproduces.
sub _pick { return $_[ int(rand(@_)) ]; }

# a random bucket capacity for limit $L: NULL half of the time
sub _random_burst
{
	my ($L) = @_;
	my $x = rand;
	return undef if $x < 0.5;
	return $L if $x < 0.6;
	return 1 + int(rand(3 * $L + 2));
}

# a priority and a reserve for a call (RlModel::headroom), or undef: half
# of the calls have none; reserves as SQL writes them and in millionths
my @RESERVES = ([ '0', 0 ], [ '0.2', 200_000 ], [ '0.25', 250_000 ],
	[ '0.5', 500_000 ], [ '0.333333', 333_333 ], [ '0.999999', 999_999 ],
	[ '0.000001', 1 ]);

sub _random_shed
{
	return undef if rand() < 0.5;
	my $r = _pick(@RESERVES);
	return {
		priority    => _pick('critical', 'normal', 'sheddable'),
		reserve     => $r->[1],
		reserve_sql => $r->[0]
	};
}

# a cost that fits capacity $cap: mostly 1, some 0, some large
sub _random_cost
{
	my ($cap) = @_;
	my $x = rand;
	return 0 if $x < 0.10;
	return 1 if $x < 0.65;
	return 1 + int(rand(_min($cap, 5))) if $x < 0.85;
	return $cap if $x < 0.90;
	return int(rand($cap + 1));
}

=pod

=head2 RlModel::gen_sequence(algo => ..., seed => ..., calls => N, prefix => ..., start => t_us)

A random call sequence: an arrayref of calls { key, L, W, per, c, B,
burst_sql, t, expected } (expected: the model's row).  With calendar => 1
(fixed_window), each key is under a policy of calendar periods (a call's
policy: { name, sql }; run_sequence creates them).  With priorities => 1,
half of the direct calls carry a random priority and reserve (shed: see
C<check>).  Several keys (odd
ones among them: quotes, Cyrillic, 1 kB long) with a fixed window each; times
mostly advance by small and large steps, sometimes go backwards, and
often land exactly on a window boundary, on a previous call's reset_at or on
the moment it was told to retry (a model runs alongside to know those);
limits and bursts change now and then.  The same arguments give the same
sequence.

=cut

sub gen_sequence
{
	my %o = @_;
	my $algo   = $o{algo};
	my $prefix = $o{prefix};
	srand($o{seed});

	my @names = ('k1', 'tenant:42', "user:7:POST /orders", "o'brien",
		"\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87", 'x' x 1000);    # UTF-8 bytes
	my $nkeys = 2 + int(rand(3));
	my @keys;
	for my $i (0 .. $nkeys - 1)
	{
		my $win = _pick(@WINDOWS);
		my $L   = _pick(@LIMITS);
		push @keys,
		  {
			name => "$prefix:" . $names[ ($i + int(rand(@names))) % @names ] . ":$i",
			W    => $win->[0],
			per  => $win->[1],
			L    => $L,
			B    => $HAS_BURST{$algo} ? _random_burst($L) : undef,
		  };
		_calendar_key($keys[-1], "$prefix:p$i", $o{start}) if $o{calendar};
	}

	my $model = RlModel->new;
	my %last;    # key name -> { t, row } of its previous call
	my $t = $o{start};
	my @calls;
	for (1 .. $o{calls})
	{
		my $k = _pick(@keys);
		my ($W, $L) = @$k{qw(W L)};

		# now and then the caller changes the limit or the burst (a
		# calendar key's policy keeps its own)
		if ($k->{period}) { }
		elsif (rand() < 0.02)
		{
			$k->{L} = $L = _pick(@LIMITS);
			$k->{B} = _random_burst($L) if $HAS_BURST{$algo} && rand() < 0.7;
		}
		elsif ($HAS_BURST{$algo} && rand() < 0.01)
		{
			$k->{B} = _random_burst($L);
		}

		my $period = _max(1, int($W / $L));    # the sustained spacing
		my $prev   = $last{ $k->{name} };
		my $x      = rand;
		my $jitter = _pick(-1, 0, 0, 0, 1);
		if    ($x < 0.30) { $t += int(rand(2 * $period)); }
		elsif ($x < 0.42) { }
		elsif ($x < 0.52) { $t += 1 + int(rand(5)); }
		elsif ($x < 0.60) { $t += int(rand($W / 2)); }
		elsif ($x < 0.65) { $t += int($W / 2 + rand(3 * $W)); }
		elsif ($x < 0.71) { $t -= 1 + int(rand($W)); }
		elsif ($x < 0.72) { $t -= int(rand(3 * $W)); }
		elsif ($x < 0.80)
		{
			$t =
			  $k->{period}
			  ? (period_bounds($k->{period}, $t))[1] + $jitter
			  : (_floordiv($t, $W) + 1) * $W + $jitter;
		}
		elsif ($prev && $x < 0.90)
		{
			# exactly when the previous call was told to come back
			$t = $prev->{row}{t} +
			  _ceil($prev->{row}{retry_after} * $US_PER_S) + $jitter
			  if !$prev->{row}{allowed};
		}
		elsif ($prev)
		{
			$t = $prev->{row}{reset_at} + $jitter;
		}
		$t = _iv($t);

		my $B   = $k->{B};
		my $cap = $HAS_BURST{$algo} ? ($B // $L) : $L;
		my $c   = _random_cost($cap);
		my $burst_sql =
		    !$HAS_BURST{$algo} ? undef
		  : defined $B ? $B
		  : rand() < 0.5 ? 'NULL'
		  :                undef;
		my $call = {
			key       => $k->{name},
			L         => $L,
			W         => $W,
			per       => $k->{per},
			c         => $c,
			B         => $B,
			burst_sql => $burst_sql,
			t         => $t,
			policy    => $k->{policy},
			shed      => $o{priorities} && !$k->{policy} ? _random_shed() : undef,
		};
		$call->{expected} =
		  $model->check($algo, $call->{key}, $L, $W, $c, $B, $t, $k->{period},
			$call->{shed});
		push @calls, $call;
		$last{ $k->{name} } = { row => $call->{expected} };
	}
	return \@calls;
}

# Make a sequence's key a calendar one: a random period, zone and anchor
# (half of the keys), under a policy of its own named $policy.
sub _calendar_key
{
	my ($k, $policy, $start) = @_;
	my $p    = _pick(@PERIODS);
	my $zone = _pick(@ZONES);
	my $anchor;
	if (rand() < 0.5)
	{
		# a day near the start, often late in its month, at a whole hour
		my ($y, $m) = _civil_from_days(_floordiv($start, $DAY_US));
		$y += _pick(-2, -1, 0, 1);
		$m = 1 + int(rand(12));
		my $dom = _min(_pick(1, 15, 28, 29, 30, 31), _month_days($y, $m));
		my $hour = _pick(0, 4, 9, 12, 18, 23);
		$anchor = _unix(_days_from_civil($y, $m, $dom), $hour * 3600 * $US_PER_S,
			$zone);
	}
	$k->{period} = { %{ $p->[0] }, zone => $zone, anchor => $anchor };
	$k->{per}    = $p->[1];
	$k->{W}      = $p->[2];
	$k->{policy} = {
		name => $policy,
		sql  => sprintf(
			"INSERT INTO rl_policy (name, algo, \"limit\", per, time_zone, period_anchor) "
			  . "VALUES (%s, 'fixed_window', %d, %s, %s, %s);",
			_sql_quote($policy), $k->{L}, _sql_quote($p->[1]), _sql_quote($zone),
			defined $anchor ? _sql_quote(ts_literal($anchor)) : 'NULL')
	};
	return;
}

sub _sql_quote
{
	my ($s) = @_;
	$s =~ s/'/''/g;
	return "'$s'";
}

# the SQL of call number $i of a sequence: one row, the call's number first
sub _call_sql
{
	my ($i, $algo, $call) = @_;
	return "SELECT $i, allowed, \"limit\", remaining, retry_after, "
	  . "(extract(epoch from reset_at) * 1000000)::bigint, delay "
	  . "FROM rl_check("
	  . join(', ',
		_sql_quote($call->{key}),
		'policy => ' . _sql_quote($call->{policy}{name}),
		'at => ' . _sql_quote(ts_literal($call->{t})),
		"cost => $call->{c}")
	  . ');'
	  if $call->{policy};
	my $args = join(', ',
		_sql_quote($call->{key}),
		_sql_quote($algo),
		$call->{L},
		'per => ' . _sql_quote($call->{per}),
		"cost => $call->{c}",
		(defined $call->{burst_sql} ? "burst => $call->{burst_sql}" : ()),
		'at => ' . _sql_quote(ts_literal($call->{t})),
		(   $call->{shed}
			? ("priority => '$call->{shed}{priority}'",
				"reserve => $call->{shed}{reserve_sql}")
			: ()));
	return "SELECT $i, allowed, \"limit\", remaining, retry_after, "
	  . "(extract(epoch from reset_at) * 1000000)::bigint, delay "
	  . "FROM rl_check($args);";
}

# a long key shortened for messages
sub _short
{
	my ($key) = @_;
	return length($key) <= 80
	  ? $key
	  : substr($key, 0, 40) . '...(' . length($key) . ' chars)...' . substr($key, -20);
}

sub _describe_call
{
	my ($i, $algo, $call) = @_;
	return sprintf(
		"call %d: rl_check(key => %s, algo => %s, limit => %s, per => %s (%s us), "
		  . "cost => %s, burst => %s, at => %s (%s us)%s)",
		$i, _sql_quote(_short($call->{key})), $algo, $call->{L}, $call->{per},
		$call->{W}, $call->{c}, $call->{B} // 'NULL',
		ts_literal($call->{t}), $call->{t},
		$call->{shed}
		? ", priority => $call->{shed}{priority}, reserve => $call->{shed}{reserve_sql}"
		: '');
}

sub _describe_row
{
	my ($r) = @_;
	return sprintf(
		"allowed=%s limit=%s remaining=%s retry_after=%s reset_at=%s (%s) delay=%s",
		map { $_ // 'undef' } @$r{qw(allowed limit remaining retry_after reset_at)},
		defined $r->{reset_at} && $r->{reset_at} =~ /^-?\d+$/
		? ts_literal($r->{reset_at})
		: '?',
		$r->{delay});
}

sub _close_enough
{
	my ($got, $exp) = @_;
	return 0 unless defined $got && $got =~ /^-?[\d.]+(e[-+]?\d+)?$/i;
	my $e = ref $exp ? $exp->numify : $exp;
	my $tol = _max(1e-9, 1e-12 * abs($e));
	return abs($got - $e) <= $tol;
}

# the names of the fields of $got that differ from the model's $exp
sub _mismatches
{
	my ($got, $exp) = @_;
	my @bad;
	push @bad, 'allowed'
	  unless ($got->{allowed} // '') eq ($exp->{allowed} ? 't' : 'f');
	for my $f (qw(limit remaining reset_at))
	{
		push @bad, $f unless defined $got->{$f} && $got->{$f} eq $exp->{$f};
	}
	for my $f (qw(retry_after delay))
	{
		push @bad, $f unless _close_enough($got->{$f}, $exp->{$f});
	}
	return @bad;
}

=pod

=head2 RlModel::run_sequence($node, $algo, $calls, name => ..., setup => [sql, ...], dbname => ...)

Run a sequence of calls through C<rl_check> in one psql session (after the
C<setup> statements, e.g. C<SET ratelimit.backend = 'redis'>), compare every
output field of every row with the model's (the calls' own expected rows, or
a fresh model's), and report one test.  On the
first mismatch it prints the call, both rows and the key's previous calls,
writes the SQL that reproduces it into the test's log directory, and stops
comparing the sequence.  Returns true when everything matched.

=cut

sub run_sequence
{
	my ($node, $algo, $calls, %o) = @_;
	my $name   = $o{name} // "$algo sequence";
	my $dbname = $o{dbname} // 'postgres';

	# the rows gen_sequence computed, or a fresh model's
	my $model = RlModel->new;
	my @exp =
	  @$calls && $calls->[0]{expected}
	  ? map { $_->{expected} } @$calls
	  : map { $model->check($algo, @$_{qw(key L W c B t)}, undef, $_->{shed}) }
	  @$calls;
	my %policies = map { $_->{policy} ? ($_->{policy}{name} => $_->{policy}{sql}) : () }
	  @$calls;
	my @setup = (
		"SET extra_float_digits = 3;", "SET timezone = 'UTC';",
		map { /;\s*$/ ? $_ : "$_;" } @{ $o{setup} // [] });
	push @setup, map { $policies{$_} } sort keys %policies;
	my @sql = map { _call_sql($_, $algo, $calls->[$_]) } 0 .. $#$calls;

	my ($ret, $out, $err) =
	  $node->psql($dbname, join("\n", @setup, @sql, ''), on_error_stop => 1);
	my @lines = $out eq '' ? () : split /\n/, $out;

	my %history;    # key -> indexes of its calls so far
	for my $i (0 .. $#$calls)
	{
		my $call = $calls->[$i];
		my $got;
		my @bad;
		if ($i >= @lines)
		{
			@bad = ('no row');
		}
		else
		{
			my @f = split /\|/, $lines[$i], -1;
			if (@f != 7 || $f[0] ne $i)
			{
				@bad = ("unexpected output line \"$lines[$i]\"");
			}
			else
			{
				@$got{qw(allowed limit remaining retry_after reset_at delay)} =
				  @f[ 1 .. 6 ];
				@bad = _mismatches($got, $exp[$i]);
			}
		}
		if (@bad)
		{
			my $msg = "$name: first mismatch at "
			  . _describe_call($i, $algo, $call) . "\n"
			  . "  clamped t: $exp[$i]{t} us\n"
			  . "  differs:   @bad\n"
			  . "  model:     "
			  . _describe_row($exp[$i]) . "\n"
			  . "  server:    "
			  . ($got ? _describe_row($got) : '(none)') . "\n";
			$msg .= "  psql exit $ret, stderr: $err\n" if $ret != 0 || $err ne '';
			my @h = @{ $history{ $call->{key} } // [] };
			@h = @h[ -8 .. -1 ] if @h > 8;
			$msg .= "  previous calls of this key (all matched):\n" if @h;
			$msg .= "    "
			  . _describe_call($_, $algo, $calls->[$_])
			  . "\n      -> "
			  . _describe_row($exp[$_]) . "\n"
			  for @h;
			no warnings 'once';
			(my $base = $name) =~ s/[^\w.-]+/_/g;
			my $file = "$PostgreSQL::Test::Utils::log_path/$base.sql";
			if (open my $fh, '>', $file)
			{
				print $fh join("\n", @setup, @sql[ 0 .. $i ], '');
				close $fh;
				$msg .= "  reproduce: psql -X -f $file (on a fresh server)\n";
			}
			diag($msg);
			return ok(0, $name);
		}
		push @{ $history{ $call->{key} } }, $i;
	}
	if ($ret != 0 || @lines != @$calls)
	{
		diag("$name: psql exit $ret, "
			  . scalar(@lines)
			  . " rows for "
			  . scalar(@$calls)
			  . " calls, stderr: $err");
		return ok(0, $name);
	}
	return ok(1, "$name: " . scalar(@$calls) . " calls match the model");
}

=pod

=head2 RlModel::run_conformance($node, seed => S, sequences => N, calls => M, tag => ..., setup => [...], algos => [...], calendar => 1, priorities => 1)

With priorities set, half of the calls carry a random priority and
reserve (gen_sequence).  With calendar set, N more sequences of fixed_window under calendar periods
(C<@PERIODS>, a zone of C<@ZONES>, an anchor half of the time, each key
under a policy of its own).  For each algorithm, generate N random sequences of M calls from seed S (the
sequence j of algorithm a uses a seed derived from S, a and j) and run them
with C<run_sequence>.  The first sequence of each algorithm starts ten
minutes before the Unix epoch, so that times before 1970 and windows across
it are exercised.  Keys are prefixed with the tag,
the seed and the sequence, so runs never share state.

=cut

sub run_conformance
{
	my ($node, %o) = @_;
	my $seed  = $o{seed} // 1;
	my $tag   = $o{tag} // 'conf';
	my $nseq  = $o{sequences} // 4;
	my $ncall = $o{calls} // 750;
	my %index = map { $ALGOS[$_] => $_ } 0 .. $#ALGOS;

	my @algos = @{ $o{algos} // \@ALGOS };
	push @algos, 'calendar' if $o{calendar};
	for my $algo (@algos)
	{
		croak "unknown algorithm \"$algo\""
		  unless exists $index{$algo} || $algo eq 'calendar';
		my $cal = $algo eq 'calendar';
		$algo = 'fixed_window' if $cal;
		for my $j (0 .. $nseq - 1)
		{
			my $s   = $seed * 1000 + ($cal ? 500 : $index{$algo} * 100) + $j;
			my %gen = (
				algo       => $algo,
				calendar   => $cal,
				priorities => $o{priorities},
				seed       => $s,
				calls      => $ncall,
				prefix     => "$tag:$seed:" . ($cal ? 'cal' : $algo) . ":$j",
				start => 1_767_225_600_000_000 + ($s % 997) * 86_400_000_000 + $s);
			if ($j == 0)
			{
				# centre the sequence on the epoch (its span depends on the
				# windows drawn): generate it once to see where it goes
				my @t = sort { $a <=> $b }
				  map { $_->{t} } @{ gen_sequence(%gen, start => 0) };
				$gen{start} = -$t[ @t / 2 ];
			}
			run_sequence($node, $algo, gen_sequence(%gen),
				name   => "$tag " . ($cal ? 'calendar' : $algo) . " seq $j (seed $s)",
				setup  => $o{setup},
				dbname => $o{dbname});
		}
	}
	return;
}

=pod

=head1 POLICIES: OVERRIDES, PENALTY BOX, SEVERAL LIMITS

A policy's call (C<rl_check(key, policy)>) as docs/reference.md defines it
for the tables C<rl_override> and C<rl_policy_limit> and the column
C<block_duration>, on top of C<check>.  A policy is a hashref:

  { name        => 'p',
    limits      => [ { name => '', algo, L, W, B }, ... ],  # its own first
    burst_given => 0/1,          # the policy's own burst was not NULL
    block       => D_us,         # block_duration, or undef
    overrides   => { key => { limit, burst, unlimited, blocked_until } } }

blocked_until is Unix microseconds or 'inf'.  The caller keeps
C<overrides> as it writes C<rl_override>.

=head2 $m->policy_check($pol, $key, $c, $t)

Decide one call under the policy and return the row C<rl_check> reports
(the binding limit's), as C<check> does, with C<binding> its index.  One
limit: the key's block or unlimited override answers first (no state
touched); else its penalty box, if in it; else the algorithm, and a
denial of a call that would have consumed puts the key into its box
(reported when it ends after the denial's own reset).  Several limits: all
or nothing (what admitted limits consumed is given back when one denies,
and they report a look); a key in the box of one limit is denied by it
and the others are only looked at; every limit the algorithms denied goes
into its own box.

=cut

sub policy_check
{
	my ($self, $pol, $key, $c, $t) = @_;
	my @lims = _policy_limits($pol, $key);
	my $ov   = $pol->{overrides}{$key};
	my $D    = $pol->{block};
	my @rows = map { _override_row($_, $ov, $t) } @lims;

	return _binding(\@lims, \@rows) if defined $rows[0];
	if (@lims == 1)
	{
		my $l = $lims[0];
		my $bu = $D ? $self->_box_until($l, $D, $t) : undef;
		return _binding(\@lims, [ _blocked_row($l, $bu, $t) ]) if defined $bu;
		my $row = $self->check(@$l{qw(algo skey L W)}, $c, $l->{B}, $t);
		$self->_box_start($l, $D, $c, $t, $row) if $D;
		return _binding(\@lims, [$row]);
	}

	my $blocked = 0;
	if ($D)
	{
		for my $i (0 .. $#lims)
		{
			my $bu = $self->_box_until($lims[$i], $D, $t);
			next unless defined $bu;
			$rows[$i] = _blocked_row($lims[$i], $bu, $t);
			$blocked = 1;
		}
	}
	if ($blocked)
	{
		# the others are looked at: a look is no attempt, and boxes no key
		for my $i (grep { !defined $rows[$_] } 0 .. $#lims)
		{
			my $l = $lims[$i];
			$rows[$i] = $self->check(@$l{qw(algo skey L W)}, 0, $l->{B}, $t);
		}
		return _binding(\@lims, \@rows);
	}
	@rows = map { $self->check(@$_{qw(algo skey L W)}, $c, $_->{B}, $t) } @lims;
	if (grep { !$_->{allowed} } @rows)
	{
		for my $i (grep { $rows[$_]{allowed} } 0 .. $#lims)
		{
			my $l = $lims[$i];
			$rows[$i] = $self->adjust(@$l{qw(algo skey L W)}, -$c, $l->{B}, $t);
		}
		if ($D)
		{
			$self->_box_start($lims[$_], $D, $c, $t, $rows[$_])
			  for grep { !$rows[$_]{allowed} } 0 .. $#lims;
		}
	}
	return _binding(\@lims, \@rows);
}

=pod

=head2 $m->policy_adjust($pol, $key, $delta, $t)

Charge C<$delta> units (or give them back) under every limit of the policy
like C<rl_adjust>, and return the binding limit's look as C<policy_check>
does.  An unlimited key's override leaves the states alone (its row is
the answer); a block does not (the units were used): the limits are
charged and report their looks.  The penalty box is not involved.

=cut

sub policy_adjust
{
	my ($self, $pol, $key, $delta, $t) = @_;
	my @lims = _policy_limits($pol, $key);
	my $ov   = $pol->{overrides}{$key};
	my @rows;
	for my $l (@lims)
	{
		my $r = _override_row($l, $ov, $t);
		push @rows,
		  $r && $r->{allowed}
		  ? $r
		  : $self->adjust(@$l{qw(algo skey L W)}, $delta, $l->{B}, $t);
	}
	return _binding(\@lims, \@rows);
}

# A policy's limits for a key: its own (with the key's override's limit
# and burst: a limit without a burst moves the burst with it unless the
# policy gave its own), then the others; skey names each one's state.
sub _policy_limits
{
	my ($pol, $key) = @_;
	my $ov = $pol->{overrides}{$key};
	my @lims;
	for my $i (0 .. $#{ $pol->{limits} })
	{
		my $l = { %{ $pol->{limits}[$i] } };
		$l->{skey} =
		  $i == 0 ? "$pol->{name}\0$key" : "$pol->{name}\0\0$l->{name}\0$key";
		$l->{B} = undef unless $HAS_BURST{ $l->{algo} };
		push @lims, $l;
	}
	if ($ov && $HAS_BURST{ $lims[0]{algo} })
	{
		$lims[0]{B} = $ov->{limit}
		  if defined $ov->{limit} && !$pol->{burst_given};
		$lims[0]{B} = $ov->{burst} if defined $ov->{burst};
	}
	$lims[0]{L} = $ov->{limit} if $ov && defined $ov->{limit};
	return @lims;
}

# the capacity of a limit: the burst of a bucket, else the limit
sub _capacity
{
	my ($l) = @_;
	return $HAS_BURST{ $l->{algo} } ? ($l->{B} // $l->{L}) : $l->{L};
}

=pod

=head2 RlModel::policy_capacity($pol, $key)

The largest cost a call under the policy may pass for the key (the least
capacity of its limits, with the key's override).

=cut

sub policy_capacity
{
	my ($pol, $key) = @_;
	my @caps = map { _capacity($_) } _policy_limits($pol, $key);
	my $min = shift @caps;
	$min = _min($min, $_) for @caps;
	return $min;
}

# The row of a limit whose key's override answers at t without the
# algorithm (a block in force, an unlimited key), or undef.
sub _override_row
{
	my ($l, $ov, $t) = @_;
	return undef unless $ov;
	my $bu = $ov->{blocked_until};
	return _blocked_row($l, $bu, $t)
	  if defined $bu && ($bu eq 'inf' || $t < $bu);
	return {
		allowed     => 1,
		limit       => $l->{L},
		remaining   => _capacity($l),
		retry_after => 0,
		reset_at    => $t,
		delay       => 0,
		t           => $t,
	} if $ov->{unlimited};
	return undef;
}

# A denial by a block ending at $bu (or 'inf': then one window)
sub _blocked_row
{
	my ($l, $bu, $t) = @_;
	my $inf = $bu eq 'inf';
	return {
		allowed     => 0,
		limit       => $l->{L},
		remaining   => 0,
		retry_after => _seconds($inf ? $l->{W} : $bu - $t),
		reset_at    => $inf ? $t + $l->{W} : $bu,
		delay       => 0,
		t           => $t,
	};
}

# A limit's penalty box is a token bucket of one token refilled over the
# block_duration D (a state of its own, clamped in time as any): a denial
# takes the token, and the key is in the box until it is back.  The end
# of the box the key is in at t, or undef.
sub _box_until
{
	my ($self, $l, $D, $t) = @_;
	my $r = $self->check('token_bucket', "box\0$l->{skey}", 1, $D, 0, 1, $t);
	return $r->{remaining} > 0 ? undef : $r->{reset_at};
}

# After the algorithm's row: a denial of a call that would have consumed
# puts the key into its box from t, reported if it ends later than the
# denial's own reset.
sub _box_start
{
	my ($self, $l, $D, $c, $t, $row) = @_;
	return if $row->{allowed} || $c == 0;
	my $r = $self->check('token_bucket', "box\0$l->{skey}", 1, $D, 1, 1, $t);
	return unless $r->{allowed};
	if ($t + $D > $row->{reset_at})
	{
		$row->{reset_at}    = $t + $D;
		$row->{retry_after} = _seconds($D);
	}
	return;
}

# The binding limit's row: when one denied, the denial with the longest
# retry_after; when all admitted, the fewest units left (the policy's own
# first among equals).
sub _binding
{
	my ($lims, $rows) = @_;
	my $b = 0;
	for my $i (1 .. $#$rows)
	{
		my ($x, $y) = ($rows->[$b], $rows->[$i]);
		$b = $i
		  if $x->{allowed}
		  ? !$y->{allowed} || $y->{remaining} < $x->{remaining}
		  : !$y->{allowed} && $y->{retry_after} > $x->{retry_after};
	}
	return { %{ $rows->[$b] }, limit => $lims->[$b]{L}, binding => $b };
}

1;
