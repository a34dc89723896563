-- An explicit "at" and the admin functions are for superusers (and, for
-- "at", members of ratelimit_admin).
CREATE ROLE regress_rl_app;
CREATE ROLE regress_rl_admin_member;
SET ROLE regress_rl_app;
SELECT rl_allow('p:k', 'fixed_window', 1) AS allowed_without_at;
SELECT rl_allow('p:k', 'fixed_window', 1, at => t(0));
SELECT rl_reset('p:k');
SELECT rl_reset_all();
SELECT * FROM rl_store_info();
RESET ROLE;
-- members of ratelimit_admin may pass "at"
CREATE ROLE ratelimit_admin;
GRANT ratelimit_admin TO regress_rl_admin_member;
SET ROLE regress_rl_admin_member;
SELECT rl_allow('p:k2', 'fixed_window', 1, at => t(0)) AS member_may_pass_at;
SELECT rl_reset('p:k2');
RESET ROLE;
-- monitoring roles see the store figures
GRANT pg_monitor TO regress_rl_app;
SET ROLE regress_rl_app;
SELECT capacity > 0 AS monitor_sees_store FROM rl_store_info();
RESET ROLE;
-- the settings that change what is admitted are superuser-only
SET ROLE regress_rl_app;
SET ratelimit.fail_mode = 'closed';
RESET ROLE;
SELECT count(*) FROM pg_proc p
WHERE p.proname IN ('rl_reset', 'rl_reset_all', 'rl_store_info')
	AND has_function_privilege('public', p.oid, 'EXECUTE');
DROP ROLE regress_rl_app;
DROP ROLE regress_rl_admin_member;
DROP ROLE ratelimit_admin;
