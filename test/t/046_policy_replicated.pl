# Policies written without the usual triggers firing still reach the
# sessions that hold them: rows applied by logical replication (policies
# managed on one server, subscribed to by others), and rows written under
# session_replication_role = replica.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $publisher = PostgreSQL::Test::Cluster->new('publisher');
$publisher->init(allows_streaming => 'logical');
$publisher->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$publisher->start;
my $subscriber = PostgreSQL::Test::Cluster->new('subscriber');
$subscriber->init;
$subscriber->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$subscriber->start;

foreach my $node ($publisher, $subscriber)
{
	$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
}
$publisher->safe_psql('postgres', q{
	INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('api', 'fixed_window', 2, '1 day');
	CREATE PUBLICATION policies FOR TABLE rl_policy, rl_policy_limit, rl_override;
});
my $publisher_connstr = $publisher->connstr . ' dbname=postgres';
$subscriber->safe_psql('postgres',
	"CREATE SUBSCRIPTION policies CONNECTION '$publisher_connstr' PUBLICATION policies");
$subscriber->wait_for_subscription_sync($publisher, 'policies');

my $look = q{SELECT "limit" FROM rl_check('k', 'api', cost => 0)};
my $session = $subscriber->background_psql('postgres', on_error_stop => 0);
is($session->query_safe($look), '2', 'the subscribed policy is used');

foreach my $change (
	[ q{UPDATE rl_policy SET "limit" = 5 WHERE name = 'api'}, '5', 'an update' ],
	[ q{INSERT INTO rl_override (policy, key, "limit") VALUES ('api', 'k', 9)}, '9',
		'an override' ],
	[ q{DELETE FROM rl_policy; INSERT INTO rl_policy (name, algo, "limit", per)
		VALUES ('api', 'fixed_window', 7, '1 day')}, '7', 'a delete and an insert' ])
{
	my ($sql, $limit, $what) = @$change;
	$publisher->safe_psql('postgres', $sql);
	$publisher->wait_for_catchup('policies');
	is($session->query_safe($look), $limit,
		"$what applied by logical replication reaches a connected session");
}

# the overrides and limits that reference the policies go too
$publisher->safe_psql('postgres', 'TRUNCATE rl_policy CASCADE');
$publisher->wait_for_catchup('policies');
$session->query($look);
like($session->{stderr}, qr/rate-limit policy "api" does not exist/,
	'a TRUNCATE applied by logical replication reaches it too');
$session->{stderr} = '';

# Written by a session in replica mode, as some replication and bulk-load
# tools do.
$subscriber->safe_psql('postgres', q{
	SET session_replication_role = replica;
	INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('api', 'fixed_window', 9, '1 day');
});
is($session->query_safe($look), '9',
	'a row written with session_replication_role = replica reaches it');

$session->quit;
$subscriber->stop;
$publisher->stop;
done_testing();
