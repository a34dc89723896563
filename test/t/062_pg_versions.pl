# What differs between the supported PostgreSQL majors, as a user sees it.
# On 18 and later the library's magic block names the module and its
# version, shown by pg_get_loaded_modules(); earlier majors have neither.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RlHarness;

my $node = PostgreSQL::Test::Cluster->new('versions');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'");
$node->start;

my $major = int($node->safe_psql('postgres', 'SHOW server_version_num') / 10000);
my $default = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'ratelimit'");
note "PostgreSQL $major, ratelimit $default";

SKIP:
{
	skip "pg_get_loaded_modules() is new in 18 (this is $major)", 1 if $major < 18;
	is( $node->safe_psql(
			'postgres',
			"SELECT module_name || ' ' || version FROM pg_get_loaded_modules()
			 WHERE file_name = 'ratelimit.so'"),
		"ratelimit $default",
		'pg_get_loaded_modules() shows ratelimit and its version');
}

# the same SQL face on every major
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
is( $node->safe_psql(
		'postgres',
		"SELECT string_agg(rl_allow('v', 'token_bucket', 2, '1 hour')::text, ',')
		 FROM generate_series(1, 3)"),
	'true,true,false',
	"decisions on PostgreSQL $major");

$node->stop;
done_testing();
