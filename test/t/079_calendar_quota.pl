# A monthly quota enforced by a trigger (rl_enforce) under pgbench, with
# rollbacks, across the end of a month: the last second of January and the
# first of February in Paris (ratelimit.trigger_at, the triggers' "at").
# Each month admits exactly its quota per tenant, what rolled back is given
# back, and the new month starts from zero whatever January used; rl_usage
# reports the committed rows and the calendar period.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $QUOTA   = 60;
my $TENANTS = 3;

my $node = PostgreSQL::Test::Cluster->new('calendar_quota');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$node->start;
$node->safe_psql('postgres', q{ALTER DATABASE postgres SET timezone = 'UTC'});
$node->safe_psql('postgres', qq{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policy (name, algo, "limit", per, time_zone)
	VALUES ('orders_monthly', 'fixed_window', $QUOTA, '1 month', 'Europe/Paris');
	CREATE TABLE orders (id bigserial PRIMARY KEY, tenant int NOT NULL,
		month text NOT NULL DEFAULT current_setting('app.month'));
	CREATE TRIGGER orders_quota BEFORE INSERT ON orders FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('orders_monthly', 'tenant');
	CREATE FUNCTION place_order(t int) RETURNS boolean LANGUAGE plpgsql AS \$\$
	BEGIN
		INSERT INTO orders (tenant) VALUES (t);
		RETURN true;
	EXCEPTION WHEN SQLSTATE 'PT429' THEN
		RETURN false;
	END \$\$;
});

my $script = $node->basedir . '/orders.sql';
open my $fh, '>', $script or die $!;
print $fh <<"SQL";
\\set tenant random(1, $TENANTS)
\\set rollback random(1, 3)
BEGIN;
SELECT place_order(:tenant);
\\if :rollback = 1
ROLLBACK;
\\else
COMMIT;
\\endif
SQL
close $fh;

# Each month: 4 clients, 240 transactions each, two thirds committing:
# about 640 committed attempts for 3 x 60 units.  Sessions take the time
# and the month from the database's settings.
my %at = (
	january  => '2026-01-31 23:59:59+01',
	february => '2026-02-01 00:00:00+01');
for my $month (qw(january february))
{
	$node->safe_psql('postgres', qq{
		ALTER DATABASE postgres SET ratelimit.trigger_at = '$at{$month}';
		ALTER DATABASE postgres SET app.month = '$month';
	});
	$node->command_ok(
		[ 'pgbench', '-n', '-c', '4', '-j', '2', '-t', '240', '-f', $script,
		  '-h', $node->host, '-p', $node->port, 'postgres' ],
		"pgbench: 4 clients ordering in $month through the quota trigger");

	my $rows = $node->safe_psql('postgres', qq{
		SELECT tenant, count(*) FROM orders WHERE month = '$month'
		GROUP BY tenant ORDER BY tenant});
	is($rows, join("\n", map { "$_|$QUOTA" } 1 .. $TENANTS),
		"$month: each tenant has exactly its quota of committed rows");

	# what the limiter counts is what committed: rollbacks gave theirs back
	my $usage = $node->safe_psql('postgres', qq{
		SELECT key, used, period_start, period_end
		FROM rl_usage('orders_monthly', at => '$at{$month}') ORDER BY key});
	my ($start, $end) =
	  $month eq 'january'
	  ? ('2025-12-31 23:00:00+00', '2026-01-31 23:00:00+00')
	  : ('2026-01-31 23:00:00+00', '2026-02-28 23:00:00+00');
	is($usage, join("\n", map { "$_|$QUOTA|$start|$end" } 1 .. $TENANTS),
		"$month: rl_usage reports the committed rows and the month in Paris");
}

# January's rows were all decided in January, February's in February: a
# denied February order says when March starts (Paris midnight).
my ($ret, $out, $err) = $node->psql('postgres',
	q{INSERT INTO orders (tenant) VALUES (1)},
	extra_params => [ '-v', 'ON_ERROR_STOP=1' ]);
like($err, qr/rate limit exceeded for policy "orders_monthly"/,
	'a tenant over its February quota is refused');
like($err, qr/per 1 mon/, 'the refusal names the calendar period');
# 2026-02-28 23:00 UTC minus 2026-01-31 23:00 UTC: 28 days
like($err, qr/Retry after 2419200 seconds/,
	'and the retry is at the start of March, Paris time');

$node->stop;
done_testing();
