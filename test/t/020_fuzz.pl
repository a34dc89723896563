# Randomized arguments to every SQL function, good and bad: each call
# either succeeds or fails with a documented SQLSTATE (class 22; 42501 for
# an ordinary role), never crashes a backend, and every rl_check that
# succeeds reports a sane decision.  The seed is printed; RL_SEED=<n>
# replays a run and RL_FUZZ_CALLS=<n> changes its length.
use strict;
use warnings;
use Math::BigInt;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $seed = $ENV{RL_SEED} // 20240501;
my $ncalls = $ENV{RL_FUZZ_CALLS} // 4000;
my $batch_size = 250;
srand($seed);
diag("020_fuzz: seed $seed ($ncalls calls), replay with RL_SEED=$seed");

my $node = PostgreSQL::Test::Cluster->new('fuzz');
$node->init(extra => [ '--encoding=UTF8', '--locale=C' ]);
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.max_keys = 512
ratelimit.pool_size = 256kB
timezone = 'UTC'
restart_after_crash = off
});
$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION ratelimit;
CREATE ROLE fuzz_app LOGIN;
-- run one call, return 'ok <its text result>' or 'err <SQLSTATE>'
CREATE FUNCTION fz_try(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	r text;
BEGIN
	EXECUTE q INTO r;
	RETURN 'ok ' || coalesce(r, '<null>');
EXCEPTION WHEN OTHERS THEN
	RETURN 'err ' || SQLSTATE;
END
$$;
GRANT EXECUTE ON FUNCTION fz_try(text) TO fuzz_app;
});

# ---- random values, as SQL expressions ----

sub pick { return $_[ int(rand(@_)) ]; }

# Most calls are tame: every argument is drawn from the values below the
# generator's "good" mark, except at most one wild argument.  The other
# calls are wild throughout.
my $tame = 0;
my $wild_arg = '';

sub draw
{
	my ($arg, $good) = @_;
	return ($tame && $arg ne $wild_arg) ? rand($good) : rand();
}

# A text literal for any bytes: printable ASCII as is, everything else
# escaped, so the script stays ASCII and the server sees the exact bytes
# (invalid UTF-8 is then the server's class-22 error, as it should be).
sub text_lit
{
	my ($bytes) = @_;
	return 'NULL::text' unless defined $bytes;
	my $s = join '',
	  map { /[A-Za-z0-9 _:.,;=+\/()-]/ ? $_ : sprintf('\\x%02x', ord $_) }
	  split //, $bytes;
	return "E'$s'";
}

sub utf8_bytes
{
	my ($str) = @_;
	utf8::encode($str);
	return $str;
}

# a random valid code point (no NUL, no surrogate), of 1 to 4 UTF-8 bytes
sub random_char
{
	my $range = pick([ 1, 0x7f ], [ 0x80, 0x7ff ], [ 0x800, 0xd7ff ],
		[ 0xe000, 0xfffd ], [ 0x10000, 0x10ffff ]);
	return chr($range->[0] + int(rand($range->[1] - $range->[0] + 1)));
}

sub random_string
{
	my ($n) = @_;
	return utf8_bytes(join '', map { random_char() } 1 .. $n);
}

# NUL-free random bytes: mostly invalid UTF-8
sub random_bytes
{
	my ($n) = @_;
	return join '', map { chr(1 + int(rand(255))) } 1 .. $n;
}

my @algos = qw(fixed_window sliding_window_log sliding_window_counter
  token_bucket leaky_bucket);
my %bucket = (token_bucket => 1, leaky_bucket => 1);

my @near_misses = (
	'token_buckets', 'token_bucke', 'Token_Bucket', 'TOKEN_BUCKET',
	'token bucket', 'token-bucket', ' token_bucket', 'token_bucket ',
	"token_bucket\t", "fixed_window\n", 'sliding_window', 'sliding_window_logs',
	'Sliding_Window_Counter', 'leaky', 'fixedwindow', 'fixed_window_',
	'', "leaky_bucket\x01", utf8_bytes("fixed_w\x{0131}ndow"),
	utf8_bytes("token_bucket\x{200b}"));

# returns (bytes or undef, the algorithm name when valid)
sub random_algo
{
	my $r = draw('algo', 0.60);
	if ($r < 0.60)
	{
		my $a = pick(@algos);
		return ($a, $a);
	}
	return (pick(@near_misses), undef) if $r < 0.82;
	return (random_bytes(1 + int(rand(20))), undef) if $r < 0.88;
	return (random_string(1 + int(rand(20))), undef) if $r < 0.93;
	return ('x' x (1000 + int(rand(20000))), undef) if $r < 0.96;
	return (undef, undef);
}

my @keys = (
	'k1', 'k2', 'k3', 'tenant:42:user:7:POST /orders', '', ' ', 'K1',
	utf8_bytes("cl\x{e9}-\x{65e5}\x{672c}-\x{1f642}"),
	"ctl\x01\x02\x1f\x7f\t\n\r", 'k' x 56, 'k' x 57, 'k' x 4096);

sub random_key
{
	my $r = draw('key', 0.55);
	return pick(@keys) if $r < 0.55;
	return 'k' x (4097 + int(rand(3))) if $r < 0.58;
	return 'q' x int(rand(4097)) if $r < 0.63;
	return utf8_bytes("\x{e9}" x 2048) if $r < 0.65;    # 4096 bytes
	return utf8_bytes("\x{e9}" x 2049) if $r < 0.67;    # 4098 bytes
	return utf8_bytes("\x{65e5}" x (1300 + int(rand(100)))) if $r < 0.70;
	return random_string(1 + int(rand(40))) if $r < 0.80;
	return random_bytes(1 + int(rand(40))) if $r < 0.87;
	return join('', map { chr(1 + int(rand(31))) } 1 .. 1 + int(rand(10)))
	  if $r < 0.95;
	return undef;
}

my @int64_extremes = (
	'0', '1', '-1', '2', '3', '2147483647', '2147483648', '4294967296',
	'9007199254740993', '4611686018427387904', '9223372036854775806',
	'9223372036854775807', '-9223372036854775807', '-9223372036854775808',
	'9223372036854775808', '-9223372036854775809', '99999999999999999999');

# a decimal string, sometimes beyond bigint (the server's 22003)
sub random_int
{
	my $r = rand();
	return pick(@int64_extremes) if $r < 0.4;
	my $len = 1 + int(rand(19));
	my $s = (1 + int(rand(9))) . join('', map { int(rand(10)) } 2 .. $len);
	return (rand() < 0.2 ? '-' : '') . $s;
}

# (SQL, value): value is the decimal string, undef for NULL
sub bigint_arg
{
	my ($v) = @_;
	return ('NULL::bigint', undef) unless defined $v;
	return ("'$v'::bigint", $v);
}

sub random_limit
{
	my $r = draw('limit', 0.65);
	return bigint_arg(1 + int(rand(10))) if $r < 0.55;
	return bigint_arg(1 + int(rand(100000))) if $r < 0.65;
	return bigint_arg(undef) if $r < 0.68;
	return bigint_arg(random_int());
}

sub random_cost
{
	my ($limit) = @_;
	my $r = draw('cost', 0.62);
	return bigint_arg(1) if $r < 0.35;
	return bigint_arg(0) if $r < 0.50;
	return bigint_arg(1 + int(rand(5))) if $r < 0.62;
	return bigint_arg($limit) if $r < 0.70 && defined $limit;
	return bigint_arg(undef) if $r < 0.72;
	return bigint_arg(random_int());
}

sub random_burst
{
	my ($limit) = @_;
	my $r = draw('burst', 0.55);
	return bigint_arg(undef) if $r < 0.55;
	return bigint_arg(1 + int(rand(20))) if $r < 0.75;
	return bigint_arg($limit) if $r < 0.80 && defined $limit;
	return bigint_arg(random_int());
}

my @intervals = (
	'1 second', '1 microsecond', '0.5 microseconds', '1.5 us', '2 us',
	'1 minute', '1 hour', '1 day', '7 days', '36525 days', '36526 days',
	'36525 days 1 microsecond', '0', '0 seconds', '-1 second',
	'-1 microsecond', '1 mon', '1 year', '-1 mon', '1 mon -30 days',
	'-1 mon +40 days', '1 day -1 microsecond', '1 day -86400 seconds',
	'-1 day +86400.000001 seconds', '1 day -23 hours', '-1 day 25 hours',
	'2147483647 days', '-2147483648 days', '2562047788:00:54.775807',
	'-2562047788:00:54.775808', '2147483647 days 2562047788:00:54.775807',
	'-2147483648 days -2562047788:00:54.775808',
	'2147483647 days -2562047788:00:54.775808', '178000000 years',
	'9999999999 years', 'P1D', 'PT0.000001S', 'not an interval', '');

sub random_per
{
	my $r = draw('per', 0.55);
	return 'NULL::interval' if $r < 0.04;
	return "'" . pick('1 second', '1 minute', '10 seconds') . "'::interval"
	  if $r < 0.45;
	return sprintf("'%d us'::interval", 1 + int(rand(5_000_000))) if $r < 0.55;
	return "'" . pick(@intervals) . "'::interval";
}

# 2^60 microseconds after the epoch is the last accepted "at"
my @timestamps = (
	'infinity', '-infinity', '4714-11-24 00:00:00+00 BC',
	'4714-11-23 23:59:59+00 BC', '0001-01-01 00:00:00+00 BC',
	'0001-12-31 23:59:59.999999+00 BC', '1900-01-01', '1969-12-31 23:59:59.999999',
	'1970-01-01', 'epoch', '2000-01-01', '2038-01-19 03:14:08',
	'9999-12-31 23:59:59.999999', '38000-01-01', '200000-01-01',
	'294276-12-31 23:59:59.999999', '294277-01-01', 'not a time', 'today',
	'allballs');

sub random_at
{
	my $r = draw('at', 0.78);
	return 'NULL::timestamptz' if $r < 0.40;
	return sprintf("'2026-01-01'::timestamptz + '%d us'::interval",
		int(rand(10_000_000)))
	  if $r < 0.75;
	return q{'epoch'::timestamptz + '13343998 days 77406.846976 seconds'::interval}
	  if $r < 0.78;
	return q{'epoch'::timestamptz + '13343998 days 77406.846977 seconds'::interval}
	  if $r < 0.80;
	return "'" . pick(@timestamps) . "'::timestamptz";
}

# The argument list, positional (possibly without some of the optional
# arguments) or named in a random order.
sub arg_list
{
	my ($required, @args) = @_;    # [ name, sql ] in declaration order
	my $r = rand();
	if ($r < 0.55)
	{
		return join ', ', map { $_->[1] } @args;
	}
	elsif ($r < 0.75)
	{
		my $n = $required + int(rand(@args - $required + 1));
		return join ', ', map { $_->[1] } @args[ 0 .. $n - 1 ];
	}
	my @named = grep { $_ < $required || rand() < 0.7 } 0 .. $#args;
	for (my $i = $#named; $i > 0; $i--)
	{
		my $j = int(rand($i + 1));
		@named[ $i, $j ] = @named[ $j, $i ];
	}
	return join ', ', map { "$args[$_][0] => $args[$_][1]" } @named;
}

# A call whose every argument is valid but taken from the edges of its
# range, on a few keys that keep their state across calls with changing
# parameters: the algorithms' arithmetic at its limits.  It must succeed.
my @edge_limits = (
	'1', '2', '3', '1000000', '4294967296', '4611686018427387904',
	'9223372036854775806', '9223372036854775807');
my @edge_pers = (
	'1 microsecond', '2 us', '1 second', '1 day', '36524 days 23:59:59.999999',
	'36525 days');
my @edge_ats = (
	'4714-11-24 00:00:00+00 BC', '0001-01-01 00:00:00+00 BC', '1970-01-01',
	'2026-01-01', '2026-01-01 00:00:00.000001', '2026-01-01 00:00:01',
	'2126-01-01', '9999-12-31 23:59:59.999999');

sub edge_call
{
	my $algo = pick(@algos);
	my $limit = pick(@edge_limits);
	my $burst = $bucket{$algo} && rand() < 0.6 ? pick(@edge_limits) : undef;
	my $cap = Math::BigInt->new($burst // $limit);
	my $cost = pick(0, 1, $cap, $cap - 1, $cap / 2);
	my $at = rand() < 0.2 ? 'NULL::timestamptz'
	  : rand() < 0.1 ? q{'epoch'::timestamptz + '13343998 days 77406.846976 seconds'::interval}
	  : "'" . pick(@edge_ats) . "'::timestamptz";
	my $args = join ', ', "'edge:" . int(rand(4)) . "'", "'$algo'", "'$limit'::bigint",
	  "'" . pick(@edge_pers) . "'::interval", "'$cost'::bigint",
	  (defined $burst ? "'$burst'::bigint" : 'NULL::bigint'), $at;
	return (
		"SELECT format('%s|%s|%s|%s|%s|%s', allowed, \"limit\", remaining, "
		  . "retry_after, reset_at, delay) FROM rl_check($args)",
		{
			fn => 'rl_check',
			algo => $algo,
			limit => $limit,
			burst => $burst,
			valid => 1
		});
}

# One random call: (sql, what to check when it succeeds)
sub random_call
{
	return edge_call() if rand() < 0.15;
	$tame = rand() < 0.6;
	$wild_arg = rand() < 0.5 ? pick(qw(key algo limit per cost burst at)) : '';
	my $r = rand();
	if ($r < 0.85)
	{
		my $fn = $r < 0.40 ? 'rl_allow' : 'rl_check';
		my ($algo_bytes, $algo) = random_algo();
		my ($limit_sql, $limit) = random_limit();
		my ($cost_sql) = random_cost($limit);
		my ($burst_sql, $burst) = random_burst($limit);
		my $args = arg_list(3,
			[ 'key', text_lit(random_key()) ],
			[ 'algo', text_lit($algo_bytes) ],
			[ '"limit"', $limit_sql ],
			[ 'per', random_per() ],
			[ 'cost', $cost_sql ],
			[ 'burst', $burst_sql ],
			[ 'at', random_at() ]);
		return ("SELECT rl_allow($args)::text", { fn => 'rl_allow', algo => $algo })
		  if $fn eq 'rl_allow';
		# a call cut short or named leaves burst at NULL: then capacity is
		# the limit; the check below accepts either when unsure
		return (
			"SELECT format('%s|%s|%s|%s|%s|%s', allowed, \"limit\", remaining, "
			  . "retry_after, reset_at, delay) FROM rl_check($args)",
			{
				fn => 'rl_check',
				algo => $algo,
				limit => $limit,
				burst => $burst
			});
	}
	elsif ($r < 0.93)
	{
		my ($algo_bytes) = random_algo();
		my $args = arg_list(1, [ 'key', text_lit(random_key()) ],
			[ 'algo', text_lit($algo_bytes) ]);
		return ("SELECT rl_reset($args)::text", undef);
	}
	elsif ($r < 0.95)
	{
		my $arg = pick('', 'true', 'false', 'NULL', 'all_databases => false');
		return ("SELECT rl_reset_all($arg)::text", undef);
	}
	return (
		"SELECT format('%s|%s|%s|%s|%s|%s|%s', capacity, used, pool_blocks, "
		  . "pool_used, reclaimed, refused, partitions) FROM rl_store_info()",
		{ fn => 'rl_store_info' });
}

# ---- what a successful call must report ----

sub finite_nonneg
{
	my ($x) = @_;
	return $x =~ /^\d+(\.\d+)?(e[-+]?\d+)?$/i;
}

# Returns an error string, or '' when the result is sane.
sub check_result
{
	my ($want, $result) = @_;
	return '' unless $want;
	my @f = split /\|/, $result, -1;
	if ($want->{fn} eq 'rl_allow')
	{
		return "an unknown algorithm was accepted" unless defined $want->{algo};
		return $result =~ /^(true|false)$/ ? '' : "rl_allow returned '$result'";
	}
	if ($want->{fn} eq 'rl_store_info')
	{
		return "expected 7 fields" unless @f == 7;
		my ($cap, $used, $blocks, $pool_used) = map { Math::BigInt->new($_) } @f[ 0 .. 3 ];
		return "used > capacity" if $used > $cap;
		return "pool_used > pool_blocks" if $pool_used > $blocks;
		return '';
	}
	return "expected 6 fields" unless @f == 6;
	return "an unknown algorithm was accepted" unless defined $want->{algo};
	my ($allowed, $limit, $remaining, $retry, $reset_at, $delay) = @f;
	return "allowed is '$allowed'" unless $allowed =~ /^[tf]$/;
	return "limit $limit, passed $want->{limit}"
	  unless Math::BigInt->new($limit) == Math::BigInt->new($want->{limit});
	return "remaining '$remaining' is negative or not a number"
	  unless $remaining =~ /^\d+$/;
	my $cap = Math::BigInt->new($want->{limit});
	if ($bucket{ $want->{algo} } && defined $want->{burst})
	{
		my $b = Math::BigInt->new($want->{burst});
		$cap = $b if $b > $cap;    # burst may have been dropped by a short call
	}
	return "remaining $remaining above capacity $cap"
	  if Math::BigInt->new($remaining) > $cap;
	return "retry_after '$retry'" unless finite_nonneg($retry);
	return "allowed with retry_after $retry" if $allowed eq 't' && $retry != 0;
	return "delay '$delay'" unless finite_nonneg($delay);
	return "delay $delay on a denied call" if $allowed eq 'f' && $delay != 0;
	return "delay $delay on $want->{algo}"
	  if $want->{algo} ne 'leaky_bucket' && $delay != 0;
	return "reset_at is null" if $reset_at eq '';
	return '';
}

# ---- the run ----

my %outcomes;
my @unexpected;
my @insane;
my $crashed = 0;
my $done = 0;
my $batch_no = 0;
my $t0 = time;

while ($done < $ncalls && !$crashed)
{
	# every third batch runs as an ordinary role
	my $as_app = $batch_no++ % 3 == 2;
	my $n = $ncalls - $done < $batch_size ? $ncalls - $done : $batch_size;
	my (@calls, @wants);
	for (1 .. $n)
	{
		my ($sql, $want) = random_call();
		push @calls, $sql;
		push @wants, $want;
	}
	my $script = $as_app ? "SET ROLE fuzz_app;\n" : '';
	$script .= join '',
	  map { "SELECT $_, fz_try(\$fz\$$calls[$_]\$fz\$);\n" } 0 .. $#calls;
	# from a file, kept when the batch fails: psql may stop reading early
	my $file = $node->basedir . "/fuzz_batch_$batch_no.sql";
	open my $fh, '>', $file or die "$file: $!";
	print $fh $script;
	close $fh;
	my ($out, $err) = ('', '');
	my $ret = $node->psql('postgres', '',
		stdout => \$out, stderr => \$err, on_error_stop => 1,
		extra_params => [ '-f', $file ]);
	my %seen;
	foreach my $line (split /\n/, $out)
	{
		my ($i, $res) = $line =~ /^(\d+)\|(.*)$/s or next;
		$seen{$i} = 1;
		my $sql = $calls[$i];
		if ($res =~ /^err (\w{5})$/)
		{
			my $state = $1;
			$outcomes{$state}++;
			my $documented = ($state =~ /^22/ && !($wants[$i] && $wants[$i]{valid}))
			  || ($as_app && $state eq '42501');
			push @unexpected,
			  "$state as " . ($as_app ? 'an ordinary role' : 'superuser') . ": $sql"
			  unless $documented;
		}
		elsif ($res =~ /^ok (.*)$/s)
		{
			$outcomes{ok}++;
			my $why = check_result($wants[$i], $1);
			push @insane, "$why: $sql => $1" if $why ne '';
		}
		else
		{
			push @unexpected, "unparsable result '$res': $sql";
		}
	}
	if ($ret != 0 || keys %seen != @calls)
	{
		my ($last) = grep { !$seen{$_} } 0 .. $#calls;
		$crashed = 1;
		diag("batch $batch_no failed (psql exit $ret): $err");
		diag("first call without a result: " . substr($calls[$last] // '?', 0, 2000));
		diag("the batch is in $file");
	}
	else
	{
		unlink $file;
	}
	$done += @calls;
}

my $elapsed = time - $t0;
note(sprintf("%d calls in %d s: %s", $done, $elapsed,
	join ', ', map { "$_ $outcomes{$_}" } sort keys %outcomes));

ok(!$crashed, "all $done calls answered in one session per batch");
is(scalar(@unexpected), 0, 'every error has a documented SQLSTATE')
  or diag(join "\n", map { substr($_, 0, 500) } @unexpected[ 0 .. ($#unexpected < 9 ? $#unexpected : 9) ]);
is(scalar(@insane), 0, 'every successful call reports a sane result')
  or diag(join "\n", map { substr($_, 0, 500) } @insane[ 0 .. ($#insane < 9 ? $#insane : 9) ]);
cmp_ok($outcomes{ok} // 0, '>', $done / 4, 'a good share of the calls succeeded');
cmp_ok(scalar(grep { /^22/ } keys %outcomes), '>=', 5,
	'and the errors cover several class-22 SQLSTATEs');

# the server is still up, never restarted, and still deciding
my $log = slurp_file($node->logfile);
unlike($log,
	qr/terminated by signal|server process .* (was terminated|exited with exit code)|PANIC:|TRAP:/,
	'no backend crashed');
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'a fresh connection works');
is($node->safe_psql('postgres', "SELECT rl_allow('after', 'token_bucket', 1)"),
	't', 'rl_allow still decides');
is($node->safe_psql('postgres',
	"SELECT used <= capacity AND pool_used <= pool_blocks FROM rl_store_info()"),
	't', 'the store is consistent');
is($node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE rl_allow('after:fw', 'fixed_window', 3, '1 day'))
	FROM generate_series(1, 5)}),
	'3', 'a fresh key is limited exactly');

$node->stop;
done_testing();
