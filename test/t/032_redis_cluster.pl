# The Redis backend against a real Redis Cluster of three masters: slot
# routing from one seed node, conformance across slots, a concurrency check
# on one key, and a live slot migration followed through ASK and MOVED
# without losing the key's state.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use Time::HiRes qw(usleep);
use RlModel;
use RlRedis;

my @masters = RlRedis::cluster(3);

my $node = RlRedis::pg_node('redis_cluster', qq{
ratelimit.backend = redis
ratelimit.redis_nodes = '${\ $masters[0]->addr}'
ratelimit.redis_command_timeout = 5000
ratelimit.fail_mode = closed
max_connections = 40
});
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
my $dboid = $node->safe_psql('postgres',
	"SELECT oid FROM pg_database WHERE datname = 'postgres'");

sub info
{
	my ($col) = @_;
	return $node->safe_psql('postgres', "SELECT $col FROM rl_redis_info()");
}

# the master that owns a key's slot
sub owner
{
	my ($key) = @_;
	my $slot = $masters[0]->cli('CLUSTER', 'KEYSLOT', $key);
	for my $m (@masters)
	{
		for my $line (split /\n/, $m->cli('CLUSTER', 'NODES'))
		{
			my @f = split / /, $line;
			next unless $f[2] =~ /myself/ && $f[2] =~ /master/;
			for my $r (@f[ 8 .. $#f ])
			{
				my ($lo, $hi) = split /-/, $r;
				$hi //= $lo;
				return $m if $lo =~ /^\d+$/ && $slot >= $lo && $slot <= $hi;
			}
		}
	}
	return undef;
}

# ---- conformance across slots, from one seed ----

RlModel::run_conformance(
	$node,
	seed      => $ENV{RL_SEED} // 20260101,
	sequences => 2,
	calls     => 300,
	tag       => 'cluster');
is(info('failures'), '0', 'no call failed');
my @sizes = map { $_->cli('DBSIZE') } @masters;
ok((grep { $_ > 0 } @sizes) == 3, "state spread over the three masters (@sizes)");

# every key of a decision is in the slot of its hash tag, on its owner
$node->safe_psql('postgres', "SELECT rl_allow('where', 'sliding_window_log', 5)");
my $k = "rl:{$dboid:swl:where}";
my $m = owner($k);
is($m->cli('EXISTS', $k, "$k:log"), '2',
	'both keys of a sliding_window_log decision live on the owner of their slot');

# refunds reach each key's owner
my @refunded = split /\n/, $node->safe_psql(
	'postgres', q{
	SET ratelimit.refund_on_rollback = on;
	BEGIN;
	SELECT rl_allow('refund' || i, 'fixed_window', 3, '1 hour')
	FROM generate_series(1, 12) i, generate_series(1, 2);
	ROLLBACK;
	SELECT count(*) FROM generate_series(1, 12) i
	WHERE (rl_check('refund' || i, 'fixed_window', 3, '1 hour', cost => 0)).remaining = 3;
});
is($refunded[-1], '12', 'a rollback gives back on every master (12 keys)');

# ---- many sessions on one key never admit more than the limit ----

$node->safe_psql('postgres', 'CREATE TABLE admitted (n int)');
my $script = "$PostgreSQL::Test::Utils::tmp_check/hot.sql";
open my $fh, '>', $script or die $!;
print $fh "INSERT INTO admitted SELECT 1 WHERE rl_allow('hot', 'fixed_window', 300, '1 hour');\n";
close $fh;
my ($out, $err) = ('', '');
IPC::Run::run(
	[ 'pgbench', '-n', '-c', '8', '-j', '2', '-t', '100', '-f', $script,
		'-p', $node->port, '-h', $node->host, 'postgres' ],
	'>', \$out, '2>', \$err) or diag($err);
is($node->safe_psql('postgres', 'SELECT count(*) FROM admitted'),
	'300', '800 concurrent calls on one key admit exactly the limit (300)');

# ---- a slot migration under traffic ----

# one session throughout, so that its slot map goes stale
my $bg = $node->background_psql('postgres');

sub remaining
{
	return $bg->query_safe(
		"SELECT remaining FROM rl_check('mig', 'fixed_window', 1000, '1 hour')");
}

my $mkey = "rl:{$dboid:fw:mig}";
is(remaining(), '999', 'migration: state on the source');
my $src = owner($mkey);
my ($dst) = grep { $_ != $src } @masters;
my $slot = $src->cli('CLUSTER', 'KEYSLOT', $mkey);
my $src_id = $src->cli('CLUSTER', 'MYID');
my $dst_id = $dst->cli('CLUSTER', 'MYID');

$dst->cli('CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $src_id);
$src->cli('CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $dst_id);
is(remaining(), '998', 'migration: slot migrating, key still on the source');

my $redirects = info('redirects');
is($src->cli('MIGRATE', '127.0.0.1', $dst->port, '', 0, 5000, 'KEYS', $mkey),
	'OK', 'migration: key moved to the target');
is(remaining(), '997', 'migration: ASK followed to the target, state kept');
ok(info('redirects') > $redirects, 'migration: the redirect is counted');

$_->cli('CLUSTER', 'SETSLOT', $slot, 'NODE', $dst_id) for @masters;
$redirects = info('redirects');
is(remaining(), '996', 'migration done: MOVED followed');
is(info('redirects'), $redirects + 1, 'the stale slot map met one MOVED');
$redirects = info('redirects');
is(remaining(), '995', 'then the slot map sends calls straight to the target');
is(info('redirects'), $redirects, 'without another redirect');
is($dst->cli('HGET', $mkey, 'c'), '5', 'the target holds the whole state');
is(info('failures'), '0', 'no call failed during the migration');

# ---- a two-key decision split by a migration: TRYAGAIN until it is whole ----

$bg->query_safe("SELECT rl_allow('split', 'sliding_window_log', 100, '1 hour')")
  for 1 .. 3;
my $h = "rl:{$dboid:swl:split}";
$src = owner($h);
($dst) = grep { $_ != $src } @masters;
$slot = $src->cli('CLUSTER', 'KEYSLOT', $h);
$src_id = $src->cli('CLUSTER', 'MYID');
$dst_id = $dst->cli('CLUSTER', 'MYID');
$dst->cli('CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $src_id);
$src->cli('CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $dst_id);
$src->cli('MIGRATE', '127.0.0.1', $dst->port, '', 0, 5000, 'KEYS', $h);

$bg->{stdin} .=
  "SELECT remaining FROM rl_check('split', 'sliding_window_log', 100, '1 hour');\n";
$bg->{run}->pump_nb;
usleep(300_000);
$bg->{run}->pump_nb;
is($bg->{stdout}, '', 'split slot: the call waits while Redis answers TRYAGAIN');
$src->cli('MIGRATE', '127.0.0.1', $dst->port, '', 0, 5000, 'KEYS', "$h:log");
pump_until($bg->{run}, $bg->{timeout}, \$bg->{stdout}, qr/\n/);
is($bg->{stdout}, "96\n", 'then decides on the whole state, on the target');
$bg->{stdout} = '';
$_->cli('CLUSTER', 'SETSLOT', $slot, 'NODE', $dst_id) for @masters;
is($bg->query_safe(
		"SELECT remaining FROM rl_check('split', 'sliding_window_log', 100, '1 hour')"),
	'95', 'split slot: migration done');
is(info('failures'), '0', 'no call failed');

# all-or-nothing checks: one key works; keys in different slots cannot be
# decided atomically
$node->safe_psql('postgres',
	q{INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('multi', 'fixed_window', 5, '1 hour')});
is($node->safe_psql('postgres', "SELECT rl_allow_all(ARRAY['m1'], ARRAY['multi'])"),
	't', 'an all-or-nothing check of one key works on a cluster');
my $ret;
($ret, $out, $err) = $node->psql('postgres',
	"SELECT rl_allow_all(ARRAY['m1', 'm2'], ARRAY['multi', 'multi'])");
like($err, qr/ERROR:  all-or-nothing checks on a Redis Cluster need every key in one hash slot/,
	'keys in different slots: SQLSTATE 0A000');

# rl_reset_all reaches every master
$node->safe_psql('postgres',
	"SELECT rl_allow('wipe' || i, 'sliding_window_log', 5, '1 hour') FROM generate_series(1, 30) i");
ok((grep { $_->cli('KEYS', "rl:{$dboid:swl:wipe*") ne '' } @masters) == 3,
	'30 states on the three masters');
ok($node->safe_psql('postgres', 'SELECT rl_reset_all()') >= 30,
	'rl_reset_all drops them (and what else the database had)');
is(join('', map { $_->cli('KEYS', "rl:{$dboid:*") } @masters), '',
	'no key of the database is left on any master');

$bg->quit;
$node->stop;
$_->stop for @masters;
done_testing();
