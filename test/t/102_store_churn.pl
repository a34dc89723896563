# Keys coming and going in a small store: entries leave and rejoin the
# partition's free list and the buckets' chains in every order.  In a
# store of 16 entries, 40 keys (and one key under several algorithms) come
# and go by rl_reset and by reclaim, in an order drawn from fixed seeds:
# freed entries are taken again by other keys, chains grow and shrink in
# the middle.  After every step each live key's state is its own (a lost
# or doubly used entry would show in a key's remaining), the store counts
# exactly the live keys, it fills at exactly its capacity, and it all
# survives a restart (the state file's entries come back through the
# same creation).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('churn');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.max_keys = 16
ratelimit.pool_size = 64kB
ratelimit.role_share = 100
ratelimit.database_share = 100
timezone = 'UTC'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

sub sql { return $node->safe_psql('postgres', $_[0]); }

is(sql('SELECT capacity, partitions FROM rl_store_info()'), '16|1',
	'sixteen entries in one partition');

# A live key's state: consumed of 100 in a day's fixed window (now), or of
# 100 in a token bucket of a day.  Idle keys: a second's window at a time
# long past, reclaimed when room is needed.
my @algos = ('fixed_window', 'token_bucket');
my %live;		# "key|algo" => consumed
my %idle;		# idle keys made (fixed_window), reclaimed or not

sub consume
{
	my ($k, $a, $n) = @_;
	is(sql("SELECT rl_allow('$k', '$a', 100, '1 day', cost => $n)"), 't',
		"$k $a consumes $n") or return;
	$live{"$k|$a"} += $n;
}

sub check_all
{
	my ($what) = @_;
	my @keys = sort keys %live;
	my $want = join("\n", map { my ($k, $a) = split /\|/; 100 - $live{$_} } @keys);
	my $got = @keys == 0 ? '' : sql(join("\nUNION ALL ", map {
		my ($k, $a) = split /\|/;
		"(SELECT remaining FROM rl_check('$k', '$a', 100, '1 day', 0))"
	} @keys));
	is($got, $want, "$what: every live key's state is its own");
	my ($used) = sql('SELECT used FROM rl_store_info()');
	ok($used >= scalar(@keys) && $used <= scalar(@keys) + scalar(keys %idle),
		"$what: the store holds the live keys (" . scalar(@keys)
		  . ") and at most the idle ones (used $used)");
}

for my $seed (1, 2, 3)
{
	srand($seed);
	sql('SELECT rl_reset_all()');
	%live = ();
	%idle = ();
	is(sql('SELECT used FROM rl_store_info()'), '0', "seed $seed: empty");
	for my $step (1 .. 40)
	{
		my $r = rand();
		my $k = 'h:' . int(rand(40));
		my $a = $algos[int(rand(2))];
		if ($r < 0.45 && (exists $live{"$k|$a"} || keys(%live) < 16))
		{
			# a new key may reclaim an idle one's entry
			consume($k, $a, 1 + int(rand(3)));
		}
		elsif ($r < 0.65 && keys(%live) > 0)
		{
			my @l = sort keys %live;
			my ($rk) = split /\|/, $l[int(rand(@l))];
			# rl_reset frees the key's entry under every algorithm
			sql("SELECT rl_reset('$rk')");
			delete $live{"$rk|$_"} for @algos;
		}
		elsif ($r < 0.8 && keys(%live) < 16)
		{
			my $ik = 'i:' . int(rand(40));
			sql("SELECT rl_allow('$ik', 'fixed_window', 1, '1 second', at => '2020-01-01')");
			$idle{$ik} = 1;
		}
		elsif (keys(%live) > 0)
		{
			my @l = sort keys %live;
			my ($lk, $la) = split /\|/, $l[int(rand(@l))];
			consume($lk, $la, 1);
		}
		check_all("seed $seed, step $step") if $step % 5 == 0;
	}

	# fill up to exactly the capacity: idle entries are reclaimed for it
	my $n = 0;
	while (keys(%live) < 16)
	{
		my $k = "f:$seed:" . $n++;
		consume($k, 'fixed_window', 1);
	}
	check_all("seed $seed, full");
	is(sql('SELECT used FROM rl_store_info()'), '16', "seed $seed: full");
	my ($refused) = sql('SELECT refused FROM rl_store_info()');
	is(sql("SELECT remaining FROM rl_check('over:$seed', 'fixed_window', 5, '1 day')"),
		'4', "seed $seed: a seventeenth key is let through untracked (fail_mode open)");
	is(sql('SELECT refused FROM rl_store_info()'), $refused + 1,
		"seed $seed: and its refusal counted");
}

# a restart brings the live keys back, each to an entry of its own
$node->restart;
check_all('after a restart');
is(sql('SELECT used FROM rl_store_info()'), '16', 'after a restart: full');

# emptied one key at a time, the entries all come back
for my $lk (sort keys %live)
{
	my ($k) = split /\|/, $lk;
	sql("SELECT rl_reset('$k')");
}
%live = ();
is(sql('SELECT used FROM rl_store_info()'), '0', 'every entry freed');
for my $i (1 .. 16)
{
	consume("again:$i", $algos[$i % 2], $i);
}
check_all('filled again');
is(sql("SELECT rl_allow('again:17', 'fixed_window', 1, '1 day')"), 't',
	'a seventeenth key is let through');
is(sql('SELECT used FROM rl_store_info()'), '16', 'and not tracked');

$node->stop;
done_testing();
