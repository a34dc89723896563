=pod

=head1 NAME

RlRedis - throwaway redis-server processes (single or a 3-master cluster)
for the ratelimit TAP tests

=head1 SYNOPSIS

  use RlRedis;

  my $redis = RlRedis->new;            # on a free loopback port
  $redis->cli('PING');                 # redis-cli output, chomped
  $redis->signal('STOP');              # hang it (SIGSTOP) ...
  $redis->signal('CONT');
  $redis->stop; $redis->start;         # restart on the same port

  my @masters = RlRedis::cluster(3);   # --cluster-enabled, slots assigned

  # a started PostgreSQL node with ratelimit preloaded and these settings
  my $node = RlRedis::pg_node('name', qq{ratelimit.backend = redis ...});

  # wait until every refund an abort queued has been sent (or dropped):
  # a session sends them at its next call, or as it exits
  RlRedis::refunds_settled($node);

=head1 DESCRIPTION

Every server listens on 127.0.0.1 only, keeps nothing on disk (C<--save ''>,
C<--appendonly no>) and lives in the test's tmp_check directory.  Servers
still running when the test ends are killed.

=cut

package RlRedis;

use strict;
use warnings;

use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my @ALL;
my $SERIAL = 0;    # folders made by this test process

# A TCP port nobody listens on right now.
sub free_port
{
	my $s = IO::Socket::INET->new(
		Listen    => 1,
		LocalAddr => '127.0.0.1',
		LocalPort => 0,
		ReuseAddr => 1) or die "no free port: $!";
	my $port = $s->sockport;
	close $s;
	return $port;
}

=pod

=head2 RlRedis->new(args => [...])

Start a redis-server on a free port, with extra command-line arguments.

=cut

sub new
{
	my ($class, %o) = @_;
	my $port = free_port();
	# a port is free again once a server of an earlier test file stopped,
	# so the folder is named by the test's process and a serial as well
	my $dir = sprintf('%s/redis_%d_%d_%d',
		$PostgreSQL::Test::Utils::tmp_check, $port, $$, ++$SERIAL);
	mkdir $dir or die "mkdir $dir: $!";
	my $self = bless { port => $port, dir => $dir, args => $o{args} // [] },
	  $class;
	push @ALL, $self;
	$self->start;
	return $self;
}

sub port { return $_[0]{port}; }
sub addr { return "127.0.0.1:$_[0]{port}"; }

sub start
{
	my ($self) = @_;
	my $d = $self->{dir};
	unlink "$d/redis.pid";    # a killed server leaves its own
	delete $self->{pid};
	system('redis-server', '--port', $self->{port}, '--bind', '127.0.0.1',
		'--save', '', '--appendonly', 'no', '--dir', $d,
		'--daemonize', 'yes', '--pidfile', "$d/redis.pid",
		'--logfile', "$d/redis.log", @{ $self->{args} }) == 0
	  or die "redis-server did not start";
	for (1 .. 200)
	{
		if (!$self->{pid} && open my $fh, '<', "$d/redis.pid")
		{
			chomp($self->{pid} = <$fh>);
		}
		return if $self->{pid} && ($self->cli('PING') // '') =~ /PONG|NOAUTH/;
		usleep(50_000);
	}
	die "redis-server on port $self->{port} does not answer";
}

=pod

=head2 $r->cli(@args)

Run redis-cli against the server; its output, chomped (undef on failure).

=cut

sub cli
{
	my ($self, @args) = @_;
	my ($out, $err);
	IPC::Run::run([ 'redis-cli', '-h', '127.0.0.1', '-p', $self->{port}, @args ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(20));
	return undef unless defined $out;
	chomp $out;
	return $out;
}

# Send a signal (name without SIG) to the server.
sub signal
{
	my ($self, $sig) = @_;
	kill $sig, $self->{pid} if $self->{pid};
	return;
}

=pod

=head2 $r->stop / $r->kill9

Stop the server and wait until it is gone (SIGTERM, or SIGKILL).

=cut

sub stop
{
	my ($self, $sig) = @_;
	return unless $self->{pid};
	kill 'CONT', $self->{pid};
	kill $sig // 'TERM', $self->{pid};
	for (1 .. 200)
	{
		last unless kill 0, $self->{pid};
		usleep(50_000);
	}
	delete $self->{pid};
	return;
}

sub kill9 { return $_[0]->stop('KILL'); }

=pod

=head2 RlRedis::cluster($n)

Start $n masters with --cluster-enabled and join them into one cluster
(slots spread evenly); returns them once every node reports cluster_state
ok.

=cut

sub cluster
{
	my ($n) = @_;
	my @nodes = map {
		RlRedis->new(args => [ '--cluster-enabled', 'yes',
				'--cluster-config-file', 'nodes.conf',
				'--cluster-node-timeout', '5000' ])
	} 1 .. $n;
	my ($out, $err);
	IPC::Run::run(
		[ 'redis-cli', '--cluster', 'create', (map { $_->addr } @nodes),
			'--cluster-replicas', '0', '--cluster-yes' ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60))
	  or die "redis-cli --cluster create failed: $out $err";
	for my $node (@nodes)
	{
		for (1 .. 200)
		{
			last if ($node->cli('CLUSTER', 'INFO') // '') =~ /cluster_state:ok/;
			usleep(50_000);
		}
	}
	return @nodes;
}

END
{
	$_->stop('KILL') for grep { $_->{pid} } @ALL;
}

# Differential tests: the calls described, and the output lines, two per
# call (the local backend's, then Redis's).  Returns how many calls
# differ, telling the first five.
sub mismatches
{
	my ($described, $lines) = @_;
	my $mismatch = 0;

	for my $i (0 .. $#$described)
	{
		my ($l, $r) = @$lines[ 2 * $i, 2 * $i + 1 ];
		next if defined $l && defined $r && $l eq $r;
		Test::More::diag("call $i differs: $described->[$i]\n  local: "
			  . ($l // '(none)') . "\n  redis: " . ($r // '(none)'));
		last if ++$mismatch >= 5;
	}
	return $mismatch;
}

# A started PostgreSQL node with ratelimit preloaded and the given
# postgresql.conf lines (the backend, the Redis nodes, timeouts...).
sub pg_node
{
	my ($name, $conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);

	$node->init;
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'ratelimit'\n$conf");
	$node->start;
	return $node;
}

# Two started PostgreSQL nodes, "<prefix>_a" and "<prefix>_b", sharing one
# limit through the Redis server $redis (the same namespace, fail_mode
# closed, a command timeout of 2 s for a loaded machine), each with the
# extension created in database postgres; $lease_time is
# ratelimit.redis_lease_time.
sub pg_pair
{
	my ($redis, $prefix, $lease_time) = @_;
	my $conf = qq{
ratelimit.backend = redis
ratelimit.redis_nodes = '${\ $redis->addr}'
ratelimit.redis_namespace = 'shared'
ratelimit.redis_lease_time = '$lease_time'
ratelimit.redis_command_timeout = 2000
ratelimit.fail_mode = closed
max_connections = 40
};
	my @nodes = map { pg_node("${prefix}_$_", $conf) } qw(a b);
	$_->safe_psql('postgres', 'CREATE EXTENSION ratelimit') for @nodes;
	return @nodes;
}

# Wait until every Redis refund queued by an abort has been sent or
# dropped (rl_redis_info: queued = sent + dropped, when nothing else
# refunded at once).  Sessions send their queued refunds at their next
# call or as they exit; a test that reads Redis's state after another
# session's rollback waits for that exit here.
sub refunds_settled
{
	my ($node, $db) = @_;

	$node->poll_query_until($db // 'postgres',
		'SELECT refunds_queued = refunds_sent + refunds_dropped FROM rl_redis_info()')
	  or die 'queued Redis refunds were not sent';
	return;
}

1;
