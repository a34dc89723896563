# The saved state file is not trusted.  Files forged with a valid CRC but
# hostile values (a zero window, negative counts and costs, times far in
# the future, unordered logs, wrong sums, oversized keys, unknown
# algorithms, foreign owners, lengths that do not frame): the server
# starts, each bad entry is dropped and counted by reason in one LOG line,
# the good ones load, and calls on the affected keys decide as for new
# keys.  A FIFO at the file's path does not block the start.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use POSIX qw(mkfifo);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use RlStateFile;

my $sf = RlStateFile->new('statefile', role => 'app', setup => 'CREATE ROLE app');
my $node = $sf->node;
my $state_file = $sf->path;
my $pg_version = $sf->pg_version;
my $dbid = $sf->dbid;

sub sql { return $node->safe_psql('postgres', $_[0]); }
sub entry { return $sf->entry(@_); }

# ---- a forged file ----

# times in Unix microseconds; the keys are called with a window of 100
# years, whose current window starts at the epoch and ends in 2070
my $century = 36525 * 86400 * 1000000;
my $now = sql(q{SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint});
my $year = 365 * 86400 * 1000000;
my $call = q{'%s', '%s', 5, '36525 days'};

my @good = (
	entry(key => 'good:fixed', algo => 'fixed_window', last => $now,
		idle_at => $century, state => window_state(0, 3, 0)),
	entry(key => 'good:bucket', algo => 'token_bucket', last => $now,
		idle_at => $now + $century, state => bucket_state(2 * $century, $century)),
	entry(key => 'good:log', algo => 'sliding_window_log', last => $now,
		idle_at => $now + $century, state => log_state(3),
		log => [ [ $now - 2000000, 1 ], [ $now - 1000000, 2 ] ]),
	entry(key => 'L' x 300, algo => 'fixed_window', last => $now,
		idle_at => $century, state => window_state(0, 4, 0)),
	# a token bucket owing 3 tokens after a charge past its limit (rl_adjust)
	entry(key => 'good:debt', algo => 'token_bucket', last => $now,
		idle_at => $now + $century, state => bucket_state(-3 * $century, $century)));
my @bad = (
	# a zero window: division by zero under the partition lock
	entry(key => 'bad:zero', algo => 'token_bucket', last => $now,
		idle_at => $now + $century, state => bucket_state(0, 0)),
	entry(key => 'bad:zero', algo => 'leaky_bucket', last => $now,
		idle_at => $now + $century, state => bucket_state(5, 0)),
	# negative counts and contents: admit everything
	entry(key => 'bad:negative', algo => 'fixed_window', last => $now,
		idle_at => $century, state => window_state(0, -1000000, 0)),
	entry(key => 'bad:negative', algo => 'leaky_bucket', last => $now,
		idle_at => $now + $century, state => bucket_state(-1000 * $century, $century)),
	entry(key => 'bad:negative', algo => 'sliding_window_log', last => $now,
		idle_at => $now + $century, state => log_state(-100),
		log => [ [ $now - 1000000, -100 ] ]),
	# the latest time ten years ahead: every call clamped to it
	entry(key => 'bad:future', algo => 'fixed_window', last => $now + 10 * $year,
		idle_at => $century, state => window_state(0, 5, 0)),
	# logs out of order, or whose sum does not match
	entry(key => 'bad:unordered', algo => 'sliding_window_log', last => $now,
		idle_at => $now + $century, state => log_state(3),
		log => [ [ $now - 1000000, 1 ], [ $now - 2000000, 2 ] ]),
	entry(key => 'bad:sum', algo => 'sliding_window_log', last => $now,
		idle_at => $now + $century, state => log_state(0),
		log => [ [ $now - 1000000, 5 ] ]),
	entry(key => 'bad:ahead', algo => 'sliding_window_log', last => $now,
		idle_at => $now + $century, state => log_state(5),
		log => [ [ $now + $year, 5 ] ]),
	# a key longer than any call can store, an unknown algorithm, an owner
	# of another database, a time out of range
	entry(key => 'k' x 4227, algo => 'fixed_window', last => $now,
		idle_at => $century, state => window_state(0, 1, 0)),
	entry(key => 'bad:algo', algo_no => 7, last => $now,
		idle_at => $century, state => window_state(0, 1, 0)),
	entry(key => 'bad:owner', algo => 'fixed_window', owner_db => $dbid + 1000,
		last => $now, idle_at => $century, state => window_state(0, 1, 0)),
	entry(key => 'bad:time', algo => 'fixed_window', last => 1 << 62,
		idle_at => 1 << 62, state => window_state(0, 1, 0)));

my $log_offset = $sf->forge(@good, @bad);
ok($node->log_contains(
	qr/ratelimit restored the state of 5 keys from file "pg_stat\/ratelimit.state"\n.*DETAIL:\s+Not restored: 1 with an unknown algorithm, 1 with a key too long, 1 with an owner of another database, 1 with a time out of range, 1 with a time in the future, 4 with a window or count out of range, 4 with a log out of order, a cost not positive or a wrong sum\./,
	$log_offset),
	'the good entries load; the bad ones are dropped and counted by reason in one line');
ok(!-e $state_file, 'the file is removed once loaded');

is(sql(qq{
	SELECT string_agg(n || '=' || (SELECT remaining FROM rl_check(k, a, 5, '36525 days', 0)), ' ' ORDER BY n)
	FROM (VALUES (1, 'good:fixed', 'fixed_window'), (2, 'good:bucket', 'token_bucket'),
		(3, 'good:log', 'sliding_window_log'), (4, repeat('L', 300), 'fixed_window'),
		(5, 'good:debt', 'token_bucket')) v(n, k, a)}),
	'1=2 2=2 3=2 4=1 5=0', 'the good entries kept their state, a debt too');
is(sql(q{SELECT rolname || ':' || keys FROM rl_owners}), 'app:5',
	'with their owner');

# every affected key decides as a new key would: five admitted, the sixth
# denied, and no backend dies
foreach my $key ([ 'bad:zero', 'token_bucket' ], [ 'bad:zero', 'leaky_bucket' ],
	[ 'bad:negative', 'fixed_window' ], [ 'bad:negative', 'leaky_bucket' ],
	[ 'bad:negative', 'sliding_window_log' ], [ 'bad:future', 'fixed_window' ],
	[ 'bad:unordered', 'sliding_window_log' ], [ 'bad:sum', 'sliding_window_log' ],
	[ 'bad:ahead', 'sliding_window_log' ], [ 'bad:algo', 'fixed_window' ],
	[ 'bad:owner', 'fixed_window' ], [ 'bad:time', 'fixed_window' ])
{
	my ($k, $a) = @$key;
	is(sql(qq{
		SELECT string_agg(CASE WHEN r.allowed THEN r.remaining::text ELSE 'denied' END, ',' ORDER BY i)
		FROM generate_series(1, 6) i, LATERAL rl_check('$k', '$a', 5, '36525 days', 1 + 0 * i) r}),
		'4,3,2,1,0,denied', "$a '$k' decides as a new key");
}
unlike(slurp_file($node->logfile, $log_offset),
	qr/terminated by signal|was terminated|PANIC:|TRAP:/, 'no backend crashed');

# ---- framing that cannot be followed, and files of the wrong kind ----

$log_offset = $sf->forge(@good[ 0 .. 1 ],
	entry(key => 'x', algo => 'fixed_window', nlog => -1, last => $now,
		idle_at => $century, state => window_state(0, 1, 0)));
ok($node->log_contains(
	qr/ignoring invalid data in file "pg_stat\/ratelimit.state"\n.*DETAIL:\s+An entry has a negative length\./,
	$log_offset), 'a negative length: the whole file is ignored, with a log line');
is(sql('SELECT used FROM rl_store_info()'), '0', 'and nothing is loaded');

# a FIFO at the path: opened without blocking, seen not to be a file
$node->stop;
unlink $state_file;
mkfifo($state_file, 0600) or die "mkfifo: $!";
$log_offset = -s $node->logfile;
$node->start;
ok($node->log_contains(
	qr/ignoring invalid data in file "pg_stat\/ratelimit.state"\n.*DETAIL:\s+It is not a regular file\./,
	$log_offset), 'a FIFO at the path does not block the start: ignored with a log line');
ok(!-e $state_file, 'and removed');
is(sql("SELECT rl_allow('after', 'fixed_window', 1, '36525 days')"), 't', 'the server works');

# and one at the temporary path does not block the shutdown
mkfifo("$state_file.tmp", 0600) or die "mkfifo: $!";
$node->stop;
ok(-f $state_file, 'the state is saved past a FIFO at the temporary path');
$node->start;
is(sql("SELECT rl_allow('after', 'fixed_window', 1, '36525 days')"), 'f', 'and restored');

# ---- the release that wrote it: the major counts, not the minor ----

# a file of another minor release of the same major is loaded (an update
# from 15.4 to 15.5 keeps the state); of another major it is ignored
my $written_by = $pg_version % 100 > 0 ? $pg_version - 1 : $pg_version + 1;
$sf->written_by($written_by);
$log_offset = $sf->forge($good[0]);
ok($node->log_contains(
	qr/ratelimit restored the state of 1 keys from file/, $log_offset),
	"a file written by $written_by (this server: $pg_version) is loaded");
is(sql(q{SELECT remaining FROM rl_check('good:fixed', 'fixed_window', 5, '36525 days', 0)}),
	'2', 'with its state');

$written_by = $pg_version + 10000;
$sf->written_by($written_by);
$log_offset = $sf->forge($good[0]);
ok($node->log_contains(
	qr/ignoring invalid data in file "pg_stat\/ratelimit.state"\n.*DETAIL:\s+It was written by another version of ratelimit or PostgreSQL\./,
	$log_offset), "a file written by $written_by is ignored");
is(sql('SELECT used FROM rl_store_info()'), '0', 'and nothing is loaded');

$node->stop;
done_testing();
