=pod

=head1 NAME

RlHarness - one behaviour for the TAP harness of every supported PostgreSQL

=head1 SYNOPSIS

  use RlHarness;    # every TAP test of this project loads it

=head1 DESCRIPTION

The TAP modules come with the PostgreSQL installation under test, and
differ between its versions.  What ratelimit's tests meet is made the same
here, so that the tests themselves are written once:

=over

=item BackgroundPsql::query (and query_safe, which calls it)

Newer harnesses (17 and later, and the later minor releases of 15 and 16)
remove the trailing newline of a query's output; older ones (16.2, say) keep
it.  Loading this module makes the older ones remove it too.  A newer
harness is recognized by the query counter its sessions carry, not by the
version number, since the change came in minor releases.

=back

=cut

package RlHarness;

use strict;
use warnings;

use PostgreSQL::Test::BackgroundPsql;

my $harness_query = \&PostgreSQL::Test::BackgroundPsql::query;

# An older harness's query, without the trailing newline it keeps.
sub query
{
	my ($self) = @_;
	my $newer = exists $self->{query_cnt};
	my ($output, $ret) = $harness_query->(@_);

	$output =~ s/\r?\n\z// if !$newer && defined $output;
	return wantarray ? ($output, $ret) : $output;
}

{
	no warnings 'redefine';
	*PostgreSQL::Test::BackgroundPsql::query = \&query;
}

1;
