# A quota trigger under concurrent inserts from pgbench: the admitted rows
# never exceed the quota, rolled-back inserts do not consume, and a policy
# change applies at once in sessions that are already connected.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('quota');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policy (name, algo, "limit", per)
	VALUES ('orders_per_tenant', 'sliding_window_log', 200, '1 day');
	CREATE TABLE orders (id bigserial PRIMARY KEY, tenant int NOT NULL, note text);
	CREATE TRIGGER orders_quota BEFORE INSERT ON orders FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('orders_per_tenant', 'tenant');
});

# 8 clients insert for 4 tenants, 1200 attempts for 800 units of quota; a
# third of the transactions roll back after inserting.  place_order
# catches PT429 in a subtransaction, as an application would.
$node->safe_psql('postgres', q{
	CREATE FUNCTION place_order(t int) RETURNS boolean LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO orders (tenant) VALUES (t);
		RETURN true;
	EXCEPTION WHEN SQLSTATE 'PT429' THEN
		RETURN false;
	END $$;
});
my $script = $node->basedir . '/orders.sql';
open my $fh, '>', $script or die $!;
print $fh <<'SQL';
\set tenant random(1, 4)
\set rollback random(1, 3)
BEGIN;
SELECT place_order(:tenant);
\if :rollback = 1
ROLLBACK;
\else
COMMIT;
\endif
SQL
close $fh;
$node->command_ok(
	[ 'pgbench', '-n', '-c', '8', '-j', '2', '-t', '150', '-f', $script,
	  '-h', $node->host, '-p', $node->port, 'postgres' ],
	'pgbench: 8 clients inserting through the quota trigger');

my $rows = $node->safe_psql('postgres',
	'SELECT tenant, count(*) FROM orders GROUP BY tenant ORDER BY tenant');
note("admitted rows per tenant:\n$rows");
foreach my $line (split /\n/, $rows)
{
	my ($tenant, $count) = split /\|/, $line;
	cmp_ok($count, '<=', 200, "tenant $tenant: admitted rows never exceed the quota");
}
my $total = $node->safe_psql('postgres', 'SELECT count(*) FROM orders');
cmp_ok($total, '>', 0, "$total rows admitted");

# what each tenant's log holds equals its committed rows: rolled-back
# inserts gave their units back
foreach my $line (split /\n/, $rows)
{
	my ($tenant, $count) = split /\|/, $line;
	my $used = $node->safe_psql('postgres',
		"SELECT 200 - remaining FROM rl_check('$tenant', 'orders_per_tenant', cost => 0)");
	is($used, $count, "tenant $tenant: consumption equals committed rows ($count)");
}

# a policy change applies at once in an already-connected session
my $session = $node->background_psql('postgres', on_error_stop => 0);
$session->query_safe("INSERT INTO orders (tenant) VALUES (99)");
$node->safe_psql('postgres',
	"UPDATE rl_policy SET \"limit\" = 1 WHERE name = 'orders_per_tenant'");
$session->query("INSERT INTO orders (tenant) VALUES (99)");
like($session->{stderr}, qr/rate limit exceeded for policy "orders_per_tenant"/,
	'the lowered limit applies in the connected session');
$session->{stderr} = '';
$node->safe_psql('postgres',
	"UPDATE rl_policy SET \"limit\" = 1000 WHERE name = 'orders_per_tenant'");
$session->query_safe("INSERT INTO orders (tenant) VALUES (99)");
pass('the raised limit applies in the connected session');
$session->quit;

$node->stop;
done_testing();
