-- rl_adjust: charge after the fact (past the limit if so; later calls
-- denied until the allowance recovers, retry_after saying when) and give
-- back, for every algorithm, outside of transaction rollback.
SET timezone = 'UTC';
INSERT INTO rl_policy (name, algo, "limit", per, burst) VALUES
	('adj_fw', 'fixed_window', 10, '1 minute', NULL),
	('adj_swc', 'sliding_window_counter', 10, '1 minute', NULL),
	('adj_swl', 'sliding_window_log', 10, '1 minute', NULL),
	('adj_tb', 'token_bucket', 10, '1 minute', NULL),
	('adj_lb', 'leaky_bucket', 10, '1 minute', NULL);
-- a look after each step: allowed (a call of cost 0), remaining, retry_after
CREATE FUNCTION adj(p text, delta bigint, us bigint)
RETURNS TABLE (allowed boolean, remaining bigint, retry_after double precision, reset_us bigint)
LANGUAGE sql AS $$
	SELECT r.allowed, r.remaining, r.retry_after,
		   ((extract(epoch FROM r.reset_at - t(0)) * 1000000))::bigint
	FROM rl_adjust('k', p, delta, t(us)) r
$$;
-- 4 used by calls, then 21 charged: 15 past the limit of 10
SELECT p, count(*) FILTER (WHERE rl_allow('k', p, at => t(0))) AS admitted
FROM unnest(ARRAY['adj_fw', 'adj_swc', 'adj_swl', 'adj_tb', 'adj_lb']) p,
	 generate_series(1, 4) GROUP BY p ORDER BY p;
SELECT p, a.* FROM unnest(ARRAY['adj_fw', 'adj_swc', 'adj_swl', 'adj_tb', 'adj_lb']) p,
	 LATERAL adj(p, 21, 0) a ORDER BY p;
-- later calls are denied, retry_after as each algorithm recovers
SELECT p, c.allowed, c.remaining, c.retry_after
FROM unnest(ARRAY['adj_fw', 'adj_swc', 'adj_swl', 'adj_tb', 'adj_lb']) p,
	 LATERAL c2('k', p, 1000000) c ORDER BY p;
-- give back 20: within the limit again (the log from its newest entries)
SELECT p, a.* FROM unnest(ARRAY['adj_fw', 'adj_swc', 'adj_swl', 'adj_tb', 'adj_lb']) p,
	 LATERAL adj(p, -20, 2000000) a ORDER BY p;
SELECT p, c.allowed, c.remaining
FROM unnest(ARRAY['adj_fw', 'adj_swc', 'adj_swl', 'adj_tb', 'adj_lb']) p,
	 LATERAL c2('k', p, 3000000) c ORDER BY p;
-- a give-back never goes below a new key's state
SELECT p, a.allowed, a.remaining FROM unnest(ARRAY['adj_fw', 'adj_swc', 'adj_swl', 'adj_tb', 'adj_lb']) p,
	 LATERAL adj(p, -1000, 4000000) a ORDER BY p;
-- nor does a give-back to a key without state create one
SELECT p, a.allowed, a.remaining FROM unnest(ARRAY['adj_fw', 'adj_tb']) p,
	 LATERAL rl_adjust('none', p, -5, t(0)) a ORDER BY p;
SELECT count(*) AS stored FROM rl_keys() WHERE key = 'none';
-- a token bucket owes what a charge took past empty: 25 charged into a
-- full bucket of 10 refilling 10 a minute owes 15, back to 1 token after
-- 96 s
SELECT allowed, remaining, retry_after FROM rl_adjust('debt', 'adj_tb', 25, t(0));
SELECT allowed, retry_after FROM c2('debt', 'adj_tb', 95999999);
SELECT allowed, remaining FROM c2('debt', 'adj_tb', 96000000);
-- outside of rollback: a charge stays when its transaction aborts
BEGIN;
SELECT remaining FROM rl_adjust('tx', 'adj_fw', 7, t(0));
ROLLBACK;
SELECT remaining FROM c2('tx', 'adj_fw', 0, cost => 0);
-- reserve, then settle to the actual: an estimate of 8, then 3 used
SELECT allowed, remaining FROM c2('job', 'adj_fw', 0, cost => 8);
SELECT remaining FROM rl_adjust('job', 'adj_fw', 3 - 8, t(0));
-- an override's limit applies; an unlimited key counts nothing
INSERT INTO rl_override (policy, key, "limit") VALUES ('adj_fw', 'big', 100);
SELECT "limit", remaining FROM rl_adjust('big', 'adj_fw', 30, t(0));
UPDATE rl_override SET unlimited = true WHERE key = 'big';
SELECT allowed, remaining FROM rl_adjust('big', 'adj_fw', 30, t(0));
UPDATE rl_override SET unlimited = false WHERE key = 'big';
SELECT remaining FROM c2('big', 'adj_fw', 0, cost => 0);
-- bad input
SELECT rl_adjust('k', 'nope', 1);
SELECT rl_adjust('k', 'adj_fw', NULL);
SELECT rl_adjust(NULL, 'adj_fw', 1);
SELECT rl_adjust(repeat('x', 4097), 'adj_fw', 1);
SELECT rl_adjust('k', 'adj_fw', -9223372036854775808);
-- privileges: revoked from PUBLIC, as rl_reset
CREATE ROLE adj_user;
SET ROLE adj_user;
SELECT rl_adjust('k', 'adj_fw', 1);
RESET ROLE;
DROP ROLE adj_user;
DROP FUNCTION adj(text, bigint, bigint);
DELETE FROM rl_policy WHERE name LIKE 'adj\_%';
