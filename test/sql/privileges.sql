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
-- Policies are read with the privileges of the role using them (SELECT on
-- rl_policy, row security): what the backend's cache read under another
-- role (a pooler's login role before SET ROLE, a SECURITY DEFINER
-- function) lends it nothing.
INSERT INTO rl_policy (name, algo, "limit", per) VALUES
	('priv_open', 'fixed_window', 10, '1 hour'),
	('priv_hidden', 'fixed_window', 10, '1 hour');
CREATE ROLE regress_rl_reader;
CREATE ROLE regress_rl_other;
REVOKE SELECT ON rl_policy FROM PUBLIC;
GRANT SELECT ON rl_policy TO regress_rl_reader;
SELECT rl_allow('priv:k', 'priv_open') AS read_as_superuser;
SET ROLE regress_rl_other;
SELECT rl_allow('priv:k', 'priv_open') AS without_select;
SELECT * FROM rl_check_all(ARRAY['priv:k'], ARRAY['priv_open']);
RESET ROLE;
SET ROLE regress_rl_reader;
SELECT rl_allow('priv:k', 'priv_open') AS with_select;
RESET ROLE;
-- a SECURITY DEFINER function reads them as its owner, and only there
CREATE FUNCTION priv_definer() RETURNS boolean LANGUAGE sql SECURITY DEFINER
AS $$ SELECT rl_allow('priv:k', 'priv_open') $$;
GRANT EXECUTE ON FUNCTION priv_definer() TO regress_rl_other;
SET ROLE regress_rl_other;
SELECT priv_definer() AS as_owner;
SELECT rl_allow('priv:k', 'priv_open') AS after_definer;
RESET ROLE;
-- row security: each role uses the policies it sees
GRANT SELECT ON rl_policy TO regress_rl_other;
ALTER TABLE rl_policy ENABLE ROW LEVEL SECURITY;
CREATE POLICY regress_rl_visible ON rl_policy FOR SELECT TO regress_rl_other
	USING (name <> 'priv_hidden');
SELECT rl_allow('priv:k', 'priv_hidden') AS superuser_sees_all;
SET ROLE regress_rl_other;
SELECT rl_allow('priv:k', 'priv_hidden') AS hidden_from_other;
SELECT rl_allow('priv:k', 'priv_open') AS visible_to_other;
RESET ROLE;
SELECT rl_allow('priv:k', 'priv_hidden') AS superuser_again;
SET ROLE regress_rl_other;
SELECT rl_allow('priv:k', 'priv_hidden') AS hidden_again;
RESET ROLE;
DROP POLICY regress_rl_visible ON rl_policy;
ALTER TABLE rl_policy DISABLE ROW LEVEL SECURITY;
REVOKE SELECT ON rl_policy FROM regress_rl_reader, regress_rl_other;
GRANT SELECT ON rl_policy TO PUBLIC;
DELETE FROM rl_policy WHERE name LIKE 'priv\_%';
DROP FUNCTION priv_definer();
DROP ROLE regress_rl_reader;
DROP ROLE regress_rl_other;
