=pod

=head1 NAME

RlFakeRedis - a fake Redis for the ratelimit TAP tests, answering as the
test tells it to: hostile replies, slow replies, odd topologies

=head1 SYNOPSIS

  use RlFakeRedis qw(reply hold flood trickle decision);

  my $f = RlFakeRedis::start(evalsha => hold("*2147483647\r\n"));
  ... SET ratelimit.redis_nodes = '127.0.0.1:$f->{port}' ...
  RlFakeRedis::stop($f);

=head1 DESCRIPTION

start(%writers) listens on a free loopback port, in a child process, and
serves each connection in a process of its own (a backend may hold several
connections to it at once).  A writer is called with the connection's
socket, the command (its arguments, the name first), a hash of the
connection's own state and the number of the connection (0, 1, ...); it
writes what it wants and returns whether to go on serving the connection.
%writers maps a command name in lower case (cluster, evalsha, script, del,
scan, unlink) to a writer, or to [a sub taking the port and returning one];
CLUSTER SLOTS answers "cluster support disabled", EVAL what EVALSHA does,
anything else "+OK".  Every process of a fake dies with stop(), or when the
test ends.

=cut

package RlFakeRedis;

use strict;
use warnings;

use Exporter 'import';
use IO::Socket::INET;
use POSIX ();
use Time::HiRes qw(usleep);

our @EXPORT_OK = qw(reply hold flood trickle decision bulk);

my @fakes;

# Read one command (an array of bulk strings) from the client: its
# arguments, or undef once the client has closed the connection.
sub read_command
{
	my ($c, $buf) = @_;
	while (1)
	{
		if ($$buf =~ /^\*(\d+)\r\n/)
		{
			my ($n, $pos, @args) = ($1, length($&));
			for (1 .. $n)
			{
				last unless substr($$buf, $pos) =~ /^\$(\d+)\r\n/;
				my ($len, $head) = ($1, length($&));
				last if length($$buf) < $pos + $head + $len + 2;
				push @args, substr($$buf, $pos + $head, $len);
				$pos += $head + $len + 2;
			}
			if (@args == $n)
			{
				substr($$buf, 0, $pos) = '';
				return \@args;
			}
		}
		my $got = sysread($c, my $chunk, 65536);
		return undef unless $got;
		$$buf .= $chunk;
	}
}

# Write all of $data; false once the client is gone.
sub send_all
{
	my ($c, $data) = @_;
	for (my $off = 0; $off < length $data;)
	{
		my $n = syswrite($c, $data, length($data) - $off, $off);
		return 0 unless $n;
		$off += $n;
	}
	return 1;
}

=pod

=head2 Writers

reply($data): send it.  hold($data): send it, then wait for the client to
hang up.  flood($head, $chunk): send the head, then the chunk again and
again until the client hangs up.  trickle($data, $pause): one byte every
$pause seconds.

=cut

sub reply { my ($d) = @_; return sub { return send_all($_[0], $d); }; }

sub hold
{
	my ($d) = @_;
	return sub {
		my ($c) = @_;
		send_all($c, $d);
		1 while sysread($c, my $junk, 65536);
		return 0;
	};
}

sub flood
{
	my ($head, $chunk) = @_;
	return sub {
		my ($c) = @_;
		send_all($c, $head) or return 0;
		1 while send_all($c, $chunk);
		return 0;
	};
}

sub trickle
{
	my ($d, $pause) = @_;
	return sub {
		my ($c) = @_;
		for my $byte (split //, $d)
		{
			send_all($c, $byte) or return 0;
			usleep($pause * 1_000_000);
		}
		return 1;
	};
}

# A RESP bulk string.
sub bulk { return '$' . length($_[0]) . "\r\n$_[0]\r\n"; }

=pod

=head2 decision($allowed, $remaining, @rest)

A decision script's reply: allowed, remaining, then as the scripts send
them reset_at, retry_after and delay as fractions, the call's time, the
state's incarnation (@rest replaces those seven strings).

=cut

sub decision
{
	my ($allowed, $remaining, @rest) = @_;
	@rest = (1_800_000_000_000_000, 0, 1, 0, 1,
		1_800_000_000_000_000, 1_700_000_000_000_000)
	  unless @rest;
	return "*9\r\n:$allowed\r\n" . join('', map { bulk($_) } $remaining, @rest);
}

# Serve one connection (in its own process).
sub serve
{
	my ($c, $o, $conn) = @_;
	my $buf = '';
	my %state;
	while (my $cmd = read_command($c, \$buf))
	{
		my $name = lc $cmd->[0];
		$name = 'evalsha' if $name eq 'eval';
		my $w = $o->{$name}
		  // ($name eq 'cluster'
			? reply("-ERR This instance has cluster support disabled\r\n")
			: reply("+OK\r\n"));
		last unless $w->($c, $cmd, \%state, $conn);
	}
	close $c;
	return;
}

=pod

=head2 start(%writers), stop($fake)

start returns { pid, port } once the fake listens.

=cut

sub start
{
	my (%o) = @_;
	my $srv = IO::Socket::INET->new(
		Listen    => 128,
		LocalAddr => '127.0.0.1',
		LocalPort => 0,
		ReuseAddr => 1) or die "no listener: $!";
	my $port = $srv->sockport;
	for my $k (keys %o)
	{
		$o{$k} = $o{$k}[0]->($port) if ref $o{$k} eq 'ARRAY';
	}
	my $pid = fork // die "fork: $!";
	if ($pid == 0)
	{
		# one process group: stop() kills the connections' processes too
		POSIX::setpgid(0, 0);
		$SIG{PIPE} = 'IGNORE';
		$SIG{CHLD} = 'IGNORE';
		alarm 600;
		my $conn = 0;
		while (1)
		{
			my $c = $srv->accept or next;
			my $child = fork;
			if (defined $child && $child == 0)
			{
				close $srv;
				serve($c, \%o, $conn);
				POSIX::_exit(0);
			}
			close $c;
			$conn++;
		}
	}
	close $srv;
	push @fakes, $pid;
	return { pid => $pid, port => $port };
}

sub stop
{
	my ($f) = @_;
	kill 'KILL', -$f->{pid}, $f->{pid};
	waitpid($f->{pid}, 0);
	@fakes = grep { $_ != $f->{pid} } @fakes;
	return;
}

END { kill 'KILL', (map { (-$_, $_) } @fakes) if @fakes; }

1;
