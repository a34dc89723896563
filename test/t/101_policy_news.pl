# A policy change committed by another session reaches a session at its
# next statement, inside an open transaction too, and a statement already
# running within a millisecond (#9: not at every call, which cost a quota
# trigger's row 79 instructions): a call or a quota trigger's row made
# after the change, in the same statement, uses the new limit.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('news');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policy (name, algo, "limit", per)
	VALUES ('p', 'fixed_window', 10, '1 hour'),
		   ('q', 'fixed_window', 100, '1 hour');
	CREATE TABLE o (tenant int, step int);
	CREATE TRIGGER oq BEFORE INSERT ON o FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('q', 'tenant');
});

my $s = $node->background_psql('postgres', on_error_stop => 0);
my $pid = $s->query_safe('SELECT pg_backend_pid()');

sub set_limit
{
	my ($policy, $limit) = @_;
	$node->safe_psql('postgres',
		qq{UPDATE rl_policy SET "limit" = $limit WHERE name = '$policy'});
}

# Wait until the session sleeps in pg_sleep (its statement has begun).
sub wait_sleeping
{
	$node->poll_query_until('postgres', qq{
		SELECT wait_event = 'PgSleep' FROM pg_stat_activity WHERE pid = $pid
	}) or die "the session never slept";
}

# the next statement, in an open transaction
$s->query_safe('BEGIN');
is($s->query_safe(q{SELECT "limit" FROM rl_check('k1', 'p')}),
	'10', 'the limit read in a transaction');
set_limit('p', 20);
is($s->query_safe(q{SELECT "limit" FROM rl_check('k1', 'p')}),
	'20', 'a change committed meanwhile: the next statement uses it');
$s->query_safe('COMMIT');

# calls of one statement: the first before the change, the others after it
# (the statement sleeps between them while the change commits)
$s->query_until(qr/started\n/, q{\echo started
SELECT string_agg(l::text, ',' ORDER BY g) AS limits FROM (
	SELECT g, CASE WHEN g = 2 THEN pg_sleep(2) END AS slept,
		(SELECT "limit" FROM rl_check('k2:' || g, 'p')) AS l
	FROM generate_series(1, 3) g) s;
});
wait_sleeping();
set_limit('p', 30);
like($s->query_safe(q{SELECT 'done'}), qr/^20,30,30\ndone$/,
	'a change committed while a statement runs: its later calls use it');

# a quota trigger's rows of one INSERT: two under a limit of 100, then the
# limit lowered to 3 while the INSERT sleeps: the third row is admitted, the
# fourth refused, and the INSERT with it
$s->query_until(qr/started\n/, q{\echo started
INSERT INTO o SELECT 7, g FROM generate_series(1, 5) g
	WHERE g <> 3 OR (SELECT true FROM pg_sleep(2));
\echo inserted
});
wait_sleeping();
set_limit('q', 3);
my ($out) = $s->query(q{SELECT 'done'});
like($out, qr/^inserted\ndone$/, 'the INSERT ended');
like($s->{stderr}, qr/rate limit exceeded for policy "q".*may use 3 per/s,
	'its fourth row was refused under the new limit');
$s->{stderr} = '';
is($node->safe_psql('postgres', 'SELECT count(*) FROM o'), '0',
	'the INSERT was rolled back');
is($node->safe_psql('postgres',
		q{SELECT remaining FROM rl_check('7', 'q', cost => 0)}),
	'3', 'and what its rows consumed given back');

$s->quit;
$node->stop;
done_testing();
