# The limiter's clock (clock.c) against the system clock, on a server not
# under valgrind (the regression test clock.sql allows 100 us for it):
# bursts of decisions (each some milliseconds long: several anchors, each
# extrapolated from over a millisecond), read from the CPU's time-stamp
# counter where the kernel keeps time with it, alternate with pauses of 1
# to 12 ms (past the millisecond, and past the 10 ms the counter's rate is
# measured over).  Every key's one decision lies between clock_timestamp()
# read just before it and just after, within 3 us: the counter is tied to
# the system clock within half a reading's span, its rate to a part in
# 10,000, and a time is extrapolated over a millisecond at most (the
# system clock's own slewing moves it by half a microsecond at most).  A
# rate off by a part in 200 puts the end of a millisecond 5 us out.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('clock');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ratelimit'
ratelimit.max_keys = 200000
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	CREATE FUNCTION clock_bursts(bursts int, per_burst int)
	RETURNS TABLE (decisions bigint, worst_us float8)
	LANGUAGE plpgsql AS $$
	DECLARE
		befores timestamptz[];
		afters timestamptz[];
		n bigint := 0;
		worst float8 := 0;
		m bigint;
		w float8;
	BEGIN
		FOR b IN 1..bursts LOOP
			FOR i IN 1..per_burst LOOP
				befores[i] := clock_timestamp();
				PERFORM rl_allow('clock:' || b || ':' || i, 'token_bucket', 10, '1 hour');
				afters[i] := clock_timestamp();
			END LOOP;
			SELECT count(*), coalesce(max(greatest(
					extract(epoch FROM t.before - k.last_seen),
					extract(epoch FROM k.last_seen - t.after), 0)) * 1e6, 0)
				INTO m, w
				FROM rl_keys() k
				JOIN unnest(befores, afters) WITH ORDINALITY AS t(before, after, i)
				  ON k.key = 'clock:' || b || ':' || t.i;
			n := n + m;
			worst := greatest(worst, w);
			PERFORM pg_sleep(0.001 * (1 + b % 12));
		END LOOP;
		decisions := n;
		worst_us := worst;
		RETURN NEXT;
	END $$;
});

my $r = $node->safe_psql('postgres',
	'SELECT decisions, worst_us FROM clock_bursts(60, 1000)');
my ($n, $worst) = split /\|/, $r;
is($n, 60000, 'every decision of the bursts is listed');
cmp_ok($worst, '<=', 3,
	"every decision's time lies within 3 us of the system clock around it (worst $worst us)");

# a decision after a long pause (the system clock read again)
$r = $node->safe_psql('postgres', q{
	DO $$
	DECLARE
		before timestamptz;
		seen timestamptz;
	BEGIN
		PERFORM pg_sleep(0.05);
		before := clock_timestamp();
		PERFORM rl_allow('clock:pause', 'token_bucket', 10, '1 hour');
		SELECT last_seen INTO seen FROM rl_keys() WHERE key = 'clock:pause';
		IF seen < before - interval '5 microseconds' OR
		   seen > clock_timestamp() + interval '5 microseconds' THEN
			RAISE EXCEPTION 'decided at %, not after %', seen, before;
		END IF;
	END $$;
	SELECT 'ok'});
is($r, 'ok', 'a decision after a pause has the time of the system clock');

$node->stop;
done_testing();
