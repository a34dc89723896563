# A monthly quota enforced by a trigger (rl_enforce) under pgbench, with
# rollbacks, across the end of a month: the last second of January and the
# first of February in Paris (ratelimit.trigger_at, the triggers' "at"), on
# the shared-memory store and on Redis.  Each month admits exactly its
# quota per tenant, what rolled back is given back, and the new month
# starts from zero whatever January used; rl_usage reports the committed
# rows and the calendar period.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;
use RlRedis;

my $QUOTA   = 60;
my $TENANTS = 3;
my %AT = (
	january  => '2026-01-31 23:59:59+01',
	february => '2026-02-01 00:00:00+01');
my %PERIOD = (
	january  => [ '2025-12-31 23:00:00+00', '2026-01-31 23:00:00+00' ],
	february => [ '2026-01-31 23:00:00+00', '2026-02-28 23:00:00+00' ]);

my $redis = RlRedis->new;

# The scenario on a node whose policy decides on $backend.
sub scenario
{
	my ($node, $backend) = @_;

	$node->safe_psql('postgres',
		q{ALTER DATABASE postgres SET timezone = 'UTC'});
	$node->safe_psql('postgres', qq{
		CREATE EXTENSION ratelimit;
		INSERT INTO rl_policy (name, algo, "limit", per, time_zone, backend)
		VALUES ('orders_monthly', 'fixed_window', $QUOTA, '1 month',
				'Europe/Paris', '$backend');
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
	# about 640 committed attempts for 3 x 60 units.  Sessions take the
	# time and the month from the database's settings.
	for my $month (qw(january february))
	{
		$node->safe_psql('postgres', qq{
			ALTER DATABASE postgres SET ratelimit.trigger_at = '$AT{$month}';
			ALTER DATABASE postgres SET app.month = '$month';
		});
		$node->command_ok(
			[ 'pgbench', '-n', '-c', '4', '-j', '2', '-t', '240', '-f', $script,
			  '-h', $node->host, '-p', $node->port, 'postgres' ],
			"$backend: pgbench, 4 clients ordering in $month through the quota trigger");
		RlRedis::refunds_settled($node) if $backend eq 'redis';

		# Redis refunds are sent after the transaction: a call may have been
		# denied before the units it needed came back.  What is left is
		# exactly what was not committed: a tenant can place that many more
		# orders, then none.
		my $more = $node->safe_psql('postgres', qq{
			SELECT t, count(*) FILTER (WHERE place_order(t))
			FROM generate_series(1, $TENANTS) t, generate_series(1, $QUOTA + 5)
			GROUP BY t ORDER BY t});
		note("$backend $month: orders placed after pgbench, per tenant:\n$more");
		my $rows = $node->safe_psql('postgres', qq{
			SELECT tenant, count(*) FROM orders WHERE month = '$month'
			GROUP BY tenant ORDER BY tenant});
		is($rows, join("\n", map { "$_|$QUOTA" } 1 .. $TENANTS),
			"$backend $month: each tenant has exactly its quota of committed rows");
		$more = $node->safe_psql('postgres', qq{
			SELECT count(*) FILTER (WHERE place_order(t))
			FROM generate_series(1, $TENANTS) t});
		is($more, '0', "$backend $month: and no more");

		# what the limiter counts is what committed: rollbacks gave theirs
		# back (Redis offers no scan: each key is named)
		my $usage = $node->safe_psql('postgres', qq{
			SELECT u.key, u.used, u.period_start, u.period_end
			FROM generate_series(1, $TENANTS) t,
				LATERAL rl_usage('orders_monthly', t::text, '$AT{$month}') u
			ORDER BY u.key});
		is($usage,
			join("\n", map { "$_|$QUOTA|$PERIOD{$month}[0]|$PERIOD{$month}[1]" } 1 .. $TENANTS),
			"$backend $month: rl_usage reports the committed rows and the month in Paris");
	}

	# a denied February order says when March starts (Paris midnight):
	# 2026-02-28 23:00 UTC minus 2026-01-31 23:00 UTC, 28 days
	my ($ret, $out, $err) =
	  $node->psql('postgres', q{INSERT INTO orders (tenant) VALUES (1)});
	like($err, qr/rate limit exceeded for policy "orders_monthly"/,
		"$backend: a tenant over its February quota is refused");
	like($err, qr/per 1 mon/, "$backend: the refusal names the calendar period");
	like($err, qr/Retry after 2419200 seconds/,
		"$backend: and the retry is at the start of March, Paris time");

	# Direct calls in a zone, on the backend: a month in Paris; a call of
	# February clamped to the key's latest time, in April, counts in April
	# (on Redis: the period its state recorded, since the bounds sent were
	# computed around February); a year from January.
	my $direct = $node->safe_psql('postgres', qq{
		SET ratelimit.backend = '$backend';
		SET ratelimit.time_zone = 'Europe/Paris';
		SELECT r.allowed, r.remaining, r.reset_at, r.retry_after, r.per
		FROM unnest(ARRAY['2026-02-15 00:00:00+00', '2026-04-15 00:00:00+00',
			'2026-02-01 00:00:00+00', '2026-04-30 22:00:00+00']::timestamptz[])
			WITH ORDINALITY AS a(at, i),
			LATERAL rl_check('direct', 'fixed_window', 1, '1 month', at => a.at) r
		ORDER BY a.i;
		SELECT reset_at FROM rl_check('direct_year', 'fixed_window', 5, '1 year',
			at => '2026-06-01 00:00:00+00');
	});
	is($direct, join("\n",
			't|0|2026-02-28 23:00:00+00|0|1 mon',
			't|0|2026-04-30 22:00:00+00|0|1 mon',
			'f|0|2026-04-30 22:00:00+00|1375200|1 mon',
			't|0|2026-05-31 22:00:00+00|0|1 mon',
			'2026-12-31 23:00:00+00'),
		"$backend: direct calls count per month and year in Paris, a clamped call in its latest month");
	return;
}

my $local = PostgreSQL::Test::Cluster->new('calendar_quota');
$local->init;
$local->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$local->start;
scenario($local, 'local');
$local->stop;

my $node = RlRedis::pg_node('calendar_quota_redis', qq{
ratelimit.redis_nodes = '${\ $redis->addr}'
ratelimit.redis_command_timeout = 5000
ratelimit.fail_mode = closed
});
scenario($node, 'redis');
is($node->safe_psql('postgres', 'SELECT failures FROM rl_redis_info()'),
	'0', 'redis: no call failed');
$node->stop;
done_testing();
