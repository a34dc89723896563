# On a streaming hot standby: the limiter works (its state is in shared
# memory, not in tables), policies arrive through replication, and a policy
# changed on the primary applies in sessions already connected to the
# standby.  Each server keeps its own state.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$primary->start;
$primary->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('api', 'token_bucket', 2, '1 day');
});
$primary->backup('backup');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'standby is in recovery');
is($standby->safe_psql('postgres',
	"SELECT rl_allow('k', 'fixed_window', 1, '1 day')"), 't', 'direct call on the standby');
is($standby->safe_psql('postgres',
	"SELECT rl_allow('k', 'fixed_window', 1, '1 day')"), 'f', 'and its limit holds');
is($standby->safe_psql('postgres',
	"SELECT string_agg(rl_allow('u', 'api')::text, ',') FROM generate_series(1, 3) i WHERE i > 0"),
	'true,true,false', 'policy call on the standby');

# the standby's state is its own
is($primary->safe_psql('postgres',
	"SELECT rl_allow('k', 'fixed_window', 1, '1 day')"), 't', 'the primary has its own state');

# a policy change on the primary reaches a connected standby session
my $session = $standby->background_psql('postgres', on_error_stop => 0);
my $limit = $session->query_safe(
	"SELECT \"limit\" FROM rl_check('v', 'api', cost => 0)");
is($limit, '2', 'connected standby session uses the policy');
$primary->safe_psql('postgres', "UPDATE rl_policy SET \"limit\" = 50 WHERE name = 'api'");
$primary->wait_for_catchup($standby);
$limit = $session->query_safe(
	"SELECT \"limit\" FROM rl_check('v', 'api', cost => 0)");
is($limit, '50', 'the change applies in the connected standby session');
$session->quit;

# writes are refused on a standby, but the limiter still decides in a
# read-only transaction with refunds enabled
is($standby->safe_psql('postgres', q{
	SET ratelimit.refund_on_rollback = on;
	BEGIN;
	SELECT rl_allow('r', 'token_bucket', 1, '1 day');
	ROLLBACK;
	SELECT rl_allow('r', 'token_bucket', 1, '1 day');
}), "t\nt", 'refund on rollback on the standby');

$standby->stop;
$primary->stop;
done_testing();
