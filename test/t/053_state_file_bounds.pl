# What a saved state may claim is bounded by what calls could produce
# (red-team finding f08).  Files forged with a valid CRC:
#  - an idle time far in the future, for each algorithm, is lowered to the
#    latest time the saved state can still differ from a new key's (a
#    state equal to a new key's is not restored at all), so no forged image
#    pins a key in the store for ever;
#  - the header is checked before anything else is read, and nothing is
#    allocated for what the file claims: a 3 GB sparse file at the path,
#    a header claiming 2^40 entries, or 5 million entries of zeros (320
#    MB, read as a stream to check the CRC) leave the postmaster's memory
#    as it was;
#  - entries of databases that no longer exist (forged, or left by DROP
#    DATABASE) are dropped when the store has no room for a call.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use RlStateFile;

my $sf = RlStateFile->new(
	'bounds',
	role  => 'victim',
	conf  => "ratelimit.max_keys = 20000\n",
	setup => q{
	CREATE ROLE victim LOGIN;
	INSERT INTO rl_policy (name, algo, "limit", per, fail_mode)
		VALUES ('api', 'token_bucket', 10, '1 minute', 'closed');
	INSERT INTO rl_policy (name, algo, "limit", per, burst)
		VALUES ('lk', 'leaky_bucket', 10, '1 second', 10);
});
my $node = $sf->node;
my $state_file = $sf->path;
my $pg_version = $sf->pg_version;

sub sql { return $node->safe_psql('postgres', $_[0]); }
sub entry { return $sf->entry(@_); }
sub forge { return $sf->forge(@_); }

my $us = 1000000;
my $century = 36525 * 86400 * $us;
my $now = sql(q{SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint});
my $forever = (1 << 62) - 1;
my $minute = 60 * $us;
# the current 100-year window starts at the epoch (it ends in 2070)
my $start = 0;

# ---- idle times: bounded by the state, for every algorithm ----

my $offset = forge(
	# live states, each claiming to stay live until the year 148000
	entry(key => 'fw', algo => 'fixed_window', last => $now, idle_at => $forever,
		state => window_state($start, 1, 0)),
	entry(key => 'swc', algo => 'sliding_window_counter', last => $now,
		idle_at => $forever, state => window_state($start, 1, 0)),
	entry(key => 'swc-prev', algo => 'sliding_window_counter', last => $now,
		idle_at => $forever, state => window_state($start, 0, 1)),
	entry(key => 'swl', algo => 'sliding_window_log', last => $now,
		idle_at => $forever, state => log_state(1), log => [ [ $now - $us, 1 ] ]),
	entry(key => 'tb', algo => 'token_bucket', last => $now, idle_at => $forever,
		state => bucket_state(0, $minute)),
	entry(key => 'lb', algo => 'leaky_bucket', last => $now, idle_at => $forever,
		state => bucket_state(5 * $minute, $minute)),
	# states equal to a new key's, claiming the same: nothing to keep
	entry(key => 'fw-new', algo => 'fixed_window', last => $now - $us,
		idle_at => $forever, state => window_state($start, 0, 0)),
	entry(key => 'swc-new', algo => 'sliding_window_counter', last => $now - $us,
		idle_at => $forever, state => window_state($start, 0, 0)),
	entry(key => 'swl-new', algo => 'sliding_window_log', last => $now - $us,
		idle_at => $forever, state => log_state(0)),
	entry(key => 'lb-new', algo => 'leaky_bucket', last => $now - $us,
		idle_at => $forever, state => bucket_state(0, $minute)));
ok($node->log_contains(
	qr/ratelimit restored the state of 6 keys from file "pg_stat\/ratelimit.state"\n.*DETAIL:\s+Not restored: 4 idle\./,
	$offset), 'the live states are restored; the four equal to a new key\'s are idle');
my %idle = map { split /\|/ } split /\n/, sql(q{
	SELECT key, (extract(epoch FROM reset_at) * 1000000)::bigint FROM rl_keys()});
is($idle{fw}, $start + $century, 'fixed_window: idle when its window can end at the latest');
is($idle{swc}, $start + 2 * $century, 'sliding_window_counter: when its next window can end');
is($idle{'swc-prev'}, $start + $century, 'and with only a previous count, when this one can end');
is($idle{swl}, $now - $us + $century, 'sliding_window_log: when its newest entry can expire');
is($idle{tb}, $now + 2 * $century, 'token_bucket: two longest windows after its latest call');
is($idle{lb}, $now + 5 * $minute, 'leaky_bucket: when its queue has drained at the slowest rate');
is(scalar(keys %idle), 6, 'only those six are in the store');

# ---- a leaky bucket above its capacity ----

# A level past the burst is a state calls leave (a charge past the
# capacity, rl_adjust), so it is restored as it is (docs/design.md): the
# key is denied until its queue drained to the capacity, as after that
# charge.  15 units queued, a burst of 10, draining one unit an hour.
my $hour = 60 * $minute;
$offset = forge(entry(key => 'lb-over', algo => 'leaky_bucket', last => $now,
	idle_at => $forever, state => bucket_state(15 * $hour, $hour)));
my $at = "timestamptz 'epoch' + $now * interval '1 microsecond'";
my $lb = q{rl_check('lb-over', 'leaky_bucket', 1, '1 hour', burst => 10, };
is(sql("SELECT allowed, remaining, retry_after FROM $lb cost => 0, at => $at)"),
	'f|0|18000', 'a leaky bucket restored above its capacity: denied until it drained to it');
is(sql("SELECT allowed, remaining FROM $lb cost => 1, at => $at + interval '6 hours')"),
	't|0', 'and admitting once below it');

# ---- files that must not cost the postmaster memory ----

sub peak_kb
{
	open my $fh, '<', $node->data_dir . '/postmaster.pid' or die $!;
	chomp(my $pid = <$fh>);
	close $fh;
	my ($hwm) = slurp_file("/proc/$pid/status") =~ /^VmHWM:\s+(\d+) kB/m;
	return $hwm;
}

sub start_with
{
	my ($make, $why, $name) = @_;
	$node->stop;
	unlink $state_file;
	$make->();
	my $offset = -s $node->logfile;
	$node->start;
	ok($node->log_contains(
		qr/ignoring invalid data in file "pg_stat\/ratelimit.state"\n.*DETAIL:\s+\Q$why\E/, $offset),
		"$name: ignored ($why)");
	my $hwm = peak_kb();
	cmp_ok($hwm, '<', 200_000, "$name: the postmaster's peak memory stays small ($hwm kB)");
}

start_with(sub { system('truncate', '-s', '3G', $state_file) == 0 or die 'truncate' },
	'It is not a ratelimit state file.', 'a 3 GB sparse file at the path');
start_with(sub {
		open my $fh, '>', $state_file or die $!;
		binmode $fh;
		print $fh pack('L L L L Q', 0x524C5354, 2, $pg_version, 0, 1 << 40), "\0" x 100;
		close $fh;
	},
	'It is truncated.', 'a header claiming 2^40 entries');
start_with(sub {
		open my $fh, '>', $state_file or die $!;
		binmode $fh;
		print $fh pack('L L L L Q', 0x524C5354, 2, $pg_version, 0, 5_000_000);
		close $fh;
		truncate($state_file, 24 + 5_000_000 * 64 + 4) or die $!;
	},
	'Its checksum does not match.', 'a header and 5 million entries of zeros (320 MB)');

# ---- entries of databases that do not exist ----

# 800 databases that do not exist, 24 full token buckets each (the state
# of a new key), claiming to stay live for ever: restored (their idle time
# bounded to two centuries), they hold nearly all of the 20,000 entries
# (those of partitions that fill up are dropped without room)
my @pins;
foreach my $d (0 .. 799)
{
	push @pins, entry(dbid => 900000 + $d, owner_role => 0, key => "pin:$_",
		algo => 'token_bucket', last => $now, idle_at => $forever,
		state => bucket_state($minute, $minute)) foreach 0 .. 23;
}
$offset = forge(@pins);
ok($node->log_contains(qr/ratelimit restored the state of 1[89]\d{3} keys/, $offset),
	'the entries of 800 databases that do not exist are restored');
is(sql(q{SET ROLE victim; SELECT count(*) FROM generate_series(1, 1000) i,
	LATERAL rl_allow('user:' || i, 'api') a WHERE NOT a}),
	'0', 'a real database\'s first calls under fail_mode closed are not denied');
is(sql('SELECT used FROM rl_store_info()'), '1000',
	'the entries of the databases that do not exist were dropped to make room');

$node->stop;
done_testing();
