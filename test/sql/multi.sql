-- All or nothing across keys: per user, per tenant and global together.
SET timezone = 'UTC';
INSERT INTO rl_policy (name, algo, "limit", per) VALUES
	('m_user', 'fixed_window', 2, '1 hour'),
	('m_tenant', 'fixed_window', 3, '1 hour'),
	('m_global', 'token_bucket', 100, '1 hour');
SELECT rl_allow_all(ARRAY['user:1', 'tenant:1', 'global'], ARRAY['m_user', 'm_tenant', 'm_global'], at => t(0));
SELECT rl_allow_all(ARRAY['user:2', 'tenant:1', 'global'], ARRAY['m_user', 'm_tenant', 'm_global'], at => t(1));
SELECT rl_allow_all(ARRAY['user:3', 'tenant:1', 'global'], ARRAY['m_user', 'm_tenant', 'm_global'], at => t(2));
-- tenant:1 is full: user:4 is denied and consumes nothing anywhere
SELECT * FROM rl_check_all(ARRAY['user:4', 'tenant:1', 'global'], ARRAY['m_user', 'm_tenant', 'm_global'], at => t(3));
SELECT remaining FROM rl_check('user:4', 'm_user', at => t(4), cost => 0);
SELECT remaining FROM rl_check('global', 'm_global', at => t(4), cost => 0);
-- costs per key
SELECT * FROM rl_check_all(ARRAY['user:5', 'global'], ARRAY['m_user', 'm_global'], ARRAY[2, 50], at => t(5));
SELECT * FROM rl_check_all(ARRAY['user:6', 'global'], ARRAY['m_user', 'm_global'], ARRAY[1, 50], at => t(6));
SELECT remaining FROM rl_check('user:6', 'm_user', at => t(7), cost => 0);
-- bad input
SELECT rl_allow_all(ARRAY['a', 'b'], ARRAY['m_user']);
SELECT rl_allow_all(ARRAY['a'], ARRAY['m_user'], ARRAY[1, 2]);
SELECT rl_allow_all(ARRAY['a', NULL], ARRAY['m_user', 'm_user']);
SELECT rl_allow_all(ARRAY[]::text[], ARRAY[]::text[]);
SELECT rl_allow_all(NULL, ARRAY['m_user']);
SELECT rl_allow_all(ARRAY['a'], ARRAY['nope']);
SELECT rl_allow_all(ARRAY['a'], ARRAY['m_user'], ARRAY[3]);
SELECT rl_allow_all(array_fill('k'::text, ARRAY[33]), array_fill('m_user'::text, ARRAY[33]));
