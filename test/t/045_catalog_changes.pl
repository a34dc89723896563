# What a session caches from the catalogs follows every change to them: a
# session that has fired a quota trigger (and so holds what the trigger
# resolved: key columns, the prepared cost expression) charges exactly
# what a new session charges after each kind of change to the table or its
# triggers, made by another session or by itself; a session holding the
# policies follows renames of rl_policy and a re-created extension.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('catalog');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION ratelimit;
	INSERT INTO rl_policy (name, algo, "limit", per)
	VALUES ('q', 'fixed_window', 1000000, '1 day');
	CREATE TABLE o (id serial, tenant int, amount int);
	CREATE TRIGGER oq BEFORE INSERT ON o FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('q', 'tenant', 'cost=coalesce(amount::bigint, 0)');
});

# The session that keeps firing the trigger, as a pooler keeps it.
my $old = $node->background_psql('postgres', on_error_stop => 0);
my $tenant = 0;

# What one statement did: "charged N" (what key $t consumed under q), or
# its error report without psql's prefix.
sub outcome
{
	my ($t, $stderr) = @_;
	if ($stderr ne '')
	{
		$stderr =~ s/^psql:[^:]*:\d+: //mg;
		chomp $stderr;
		return $stderr;
	}
	return 'charged '
	  . $node->safe_psql('postgres',
		"SELECT 1000000 - remaining FROM rl_check('$t', 'q', cost => 0)");
}

# Run $sql (with TENANT standing for a tenant of its own) in the old
# session and in a new one.
sub in_old
{
	my ($sql) = @_;
	my $t = ++$tenant;
	(my $run = $sql) =~ s/TENANT/$t/g;
	$old->{stderr} = '';
	$old->query($run);
	return outcome($t, $old->{stderr});
}

sub in_new
{
	my ($sql) = @_;
	my $t = ++$tenant;
	(my $run = $sql) =~ s/TENANT/$t/g;
	my ($ret, $out, $err) = $node->psql('postgres', $run);
	return outcome($t, $err);
}

# After $change (made by another session), the old session and a new one
# give the same outcome for $sql, and it is $expected.
sub after_change
{
	my ($name, $change, $sql, $expected) = @_;
	$node->safe_psql('postgres', $change) if $change ne '';
	my $was = in_old($sql);
	my $now = in_new($sql);
	is($was, $now, "$name: the old session does what a new one does");
	if (ref $expected)
	{
		like($now, $expected, "$name: outcome");
	}
	else
	{
		is($now, $expected, "$name: outcome");
	}
}

my $insert = 'INSERT INTO o (tenant, amount) VALUES (TENANT, 7)';
after_change('first use', '', $insert, 'charged 7');

after_change('column of the expression dropped and added again',
	'ALTER TABLE o DROP COLUMN amount; ALTER TABLE o ADD COLUMN amount int',
	$insert, 'charged 7');

after_change('its type changed',
	'ALTER TABLE o ALTER COLUMN amount TYPE bigint', $insert, 'charged 7');

after_change('its type changed to one that rounds',
	'ALTER TABLE o ALTER COLUMN amount TYPE numeric',
	'INSERT INTO o (tenant, amount) VALUES (TENANT, 2.6)', 'charged 3');

after_change('its type changed to text',
	'ALTER TABLE o ALTER COLUMN amount TYPE text USING amount::text',
	"INSERT INTO o (tenant, amount) VALUES (TENANT, '12')", 'charged 12');

after_change('it is renamed',
	'ALTER TABLE o RENAME COLUMN amount TO amt',
	'INSERT INTO o (tenant, amt) VALUES (TENANT, 7)',
	qr/^ERROR:  column "amount" does not exist\n.*\nCONTEXT:  cost expression of quota trigger "oq" on table "o"$/s);

after_change('renamed back',
	'ALTER TABLE o RENAME COLUMN amt TO amount; ALTER TABLE o ALTER COLUMN amount TYPE int USING amount::numeric::int',
	$insert, 'charged 7');

after_change('a column before it dropped',
	'ALTER TABLE o DROP COLUMN id', $insert, 'charged 7');

after_change('the key column renamed',
	'ALTER TABLE o RENAME COLUMN tenant TO org',
	'INSERT INTO o (org, amount) VALUES (TENANT, 7)',
	qr/^ERROR:  column "tenant" named by trigger "oq" does not exist in table "o"\nCONTEXT:  quota trigger "oq" on table "o"$/);

after_change('the key column renamed back, in another case',
	'ALTER TABLE o RENAME COLUMN org TO "Tenant"', $insert =~ s/tenant/"Tenant"/r,
	'charged 7');

after_change('the key column dropped and added again',
	'ALTER TABLE o DROP COLUMN "Tenant"; ALTER TABLE o ADD COLUMN tenant int',
	$insert, 'charged 7');

after_change('the trigger replaced with other arguments',
	q{CREATE OR REPLACE TRIGGER oq BEFORE INSERT ON o FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('q', 'tenant', 'cost=amount * 2')},
	$insert, 'charged 14');

after_change('another trigger on the table',
	q{CREATE TRIGGER oq2 BEFORE INSERT ON o FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('q', 'tenant', 'cost=amount + 1')},
	$insert, 'charged 22');

after_change('a trigger dropped and created again with the same name',
	q{DROP TRIGGER oq2 ON o;
	  CREATE TRIGGER oq2 BEFORE INSERT ON o FOR EACH ROW
		EXECUTE FUNCTION rl_enforce('q', 'tenant', 'cost=amount + 100')},
	$insert, 'charged 121');

after_change('a trigger renamed',
	'DROP TRIGGER oq2 ON o; ALTER TRIGGER oq ON o RENAME TO oq_renamed',
	'INSERT INTO o (tenant, amount) VALUES (TENANT, 999999)',
	qr/^ERROR:  "cost" \(1999998\) exceeds the limit \(1000000\) and can never be admitted\nCONTEXT:  quota trigger "oq_renamed" on table "o"$/);

after_change('the table renamed',
	'ALTER TRIGGER oq_renamed ON o RENAME TO oq; ALTER TABLE o RENAME TO o2',
	'INSERT INTO o2 (tenant, amount) VALUES (TENANT, NULL)',
	qr/^ERROR:  cost expression "amount \* 2" of trigger "oq" on table "o2" is null for this row\nHINT:  .*\nCONTEXT:  quota trigger "oq" on table "o2"$/);
after_change('the table renamed back', 'ALTER TABLE o2 RENAME TO o',
	$insert, 'charged 14');

# The session's own changes: in its transaction, and rolled back.
is( in_old(
		q{BEGIN;
		  ALTER TABLE o DROP COLUMN amount;
		  ALTER TABLE o ADD COLUMN amount int;
		  INSERT INTO o (tenant, amount) VALUES (TENANT, 5);
		  COMMIT;}),
	'charged 10',
	'own change in a transaction: the next row follows it');
is( in_old(
		q{BEGIN;
		  DROP TRIGGER oq ON o;
		  CREATE TRIGGER oq BEFORE INSERT ON o FOR EACH ROW
			EXECUTE FUNCTION rl_enforce('q', 'tenant', 'cost=amount * 3');
		  INSERT INTO o (tenant, amount) VALUES (TENANT, 5);
		  COMMIT;}),
	'charged 15', 'own DROP TRIGGER and CREATE TRIGGER of the same name');
is( in_old(
		q{BEGIN;
		  ALTER TABLE o RENAME COLUMN amount TO old_amount;
		  ALTER TABLE o ADD COLUMN amount int;
		  INSERT INTO o (tenant, amount, old_amount) VALUES (TENANT, 1, 1000);
		  ROLLBACK;
		  INSERT INTO o (tenant, amount) VALUES (TENANT, 6);}),
	'charged 18',
	'own change rolled back: the next row follows the table as it is again');

# The policies a session holds follow rl_policy's renames and a re-created
# extension.
my $policy_call = "SELECT \"limit\" FROM rl_check('k', 'q', cost => 0)";
$old->query_safe($policy_call);
$node->safe_psql('postgres', 'ALTER TABLE rl_policy RENAME TO rl_policy_away');
$old->{stderr} = '';
$old->query($policy_call);
like($old->{stderr},
	qr/ERROR:  table "rl_policy" of extension "ratelimit" does not exist in this database/,
	'rl_policy renamed: the old session no longer finds it');
$node->safe_psql('postgres', 'ALTER TABLE rl_policy_away RENAME TO rl_policy');
$old->{stderr} = '';
is($old->query_safe($policy_call), '1000000', 'renamed back: the policies again');

$node->safe_psql('postgres', q{
	DROP EXTENSION ratelimit CASCADE;
	CREATE EXTENSION ratelimit;
});
$old->{stderr} = '';
$old->query($policy_call);
like($old->{stderr}, qr/ERROR:  rate-limit policy "q" does not exist/,
	'extension re-created: the old policies are gone in the old session');
$node->safe_psql('postgres', q{
	INSERT INTO rl_policy (name, algo, "limit", per)
	VALUES ('q', 'token_bucket', 5, '1 hour')});
$old->{stderr} = '';
is($old->query_safe($policy_call), '5',
	'extension re-created: the old session reads the new policies');

$old->quit;
$node->stop;
done_testing();
