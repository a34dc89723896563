=pod

=head1 NAME

RlShed - the shed count of a concurrency limit, one scenario for each engine

=head1 SYNOPSIS

  use RlShed;
  RlShed::slot_shed_counts($node, 'ps', 'slot');    # a policy of 2, reserve 0.5

=head1 DESCRIPTION

C<slot_shed_counts> runs, on key C<s> of a concurrency policy of 2 slots
with half of them kept (created by the caller, on the engine under test),
the calls whose refusals C<rl_stats> must count as shed or not: with one
slot held, a sheddable call refused with and without waiting (shed: the
slot was free under the limit); with both held, sheddable and critical
calls refused (not shed).  The store (t/093) and Redis's leases (t/092)
must count the same.

=cut

package RlShed;

use strict;
use warnings;

use Test::More;

sub slot_shed_counts
{
	my ($node, $policy, $noun) = @_;
	my $try = sub {
		my ($priority, $wait) = @_;
		return $node->safe_psql('postgres', qq{
			SELECT rl_acquire('s', '$policy', max_wait => '$wait', priority => '$priority')});
	};
	my $stats = sub {
		return $node->safe_psql('postgres', qq{
			SELECT allowed || '/' || denied || '/' || shed FROM rl_stats
			WHERE policy = '$policy'});
	};
	my @held;
	my $hold = sub {
		my $h = $node->background_psql('postgres');
		$h->query_safe(qq{BEGIN; SELECT rl_acquire('s', '$policy', priority => 'critical')});
		push @held, $h;
	};

	$hold->();
	is($try->('sheddable', '0'), 'f', "one $noun held: a sheddable call is refused");
	is($stats->(), '1/1/1', '... and counted as shed');
	is($try->('sheddable', '300 ms'), 'f',
		"a sheddable call waiting for the reserved $noun gives up");
	is($stats->(), '1/2/2', '... and is counted as shed');
	$hold->();
	is($try->('sheddable', '0'), 'f', "both ${noun}s held: a sheddable call is refused");
	is($try->('critical', '0'), 'f', '... and so is a critical one');
	is($try->('sheddable', '300 ms'), 'f', '... and a sheddable one that waits');
	is($stats->(), '2/5/2', "a call refused with every $noun held is not shed");
	$_->quit foreach @held;
	return;
}

1;
