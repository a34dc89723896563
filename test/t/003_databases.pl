# Two databases of one cluster never share state; rl_reset_all clears only
# the current database unless asked for all.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('dbs');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$node->start;
foreach my $db ('app1', 'app2')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION ratelimit');
}

my $call = "SELECT rl_allow('tenant:1', 'fixed_window', 1, '1 day')";
is($node->safe_psql('app1', $call), 't', 'app1 admits');
is($node->safe_psql('app1', $call), 'f', 'app1 is at its limit');
is($node->safe_psql('app2', $call), 't', 'app2 has its own state');

is($node->safe_psql('app2', 'SELECT rl_reset_all()'), '1', 'reset_all in app2 drops its key');
is($node->safe_psql('app1', $call), 'f', 'app1 untouched');
is($node->safe_psql('app2', 'SELECT rl_reset_all(true)'), '1', 'all_databases drops app1 too');
is($node->safe_psql('app1', $call), 't', 'app1 starts afresh');

$node->stop;
done_testing();
