-- ratelimit in five minutes: quotas enforced from SQL.
\pset footer off
SET timezone = 'UTC';
CREATE EXTENSION ratelimit;

\echo
\echo '1. A per-user API limit: 5 requests per second, token bucket (bursts allowed).'
\echo '   User 7 sends eight requests at once, user 9 two: user 7 gets three 429s.'
CREATE TABLE requests (n int, tenant int, user_id int, endpoint text);
INSERT INTO requests
SELECT n, 42, CASE WHEN n IN (3, 6) THEN 9 ELSE 7 END, 'GET /orders'
FROM generate_series(1, 10) n;
SELECT q.n AS request, q.user_id, r.allowed, r.remaining,
	round(r.retry_after::numeric, 3) AS retry_after_s
FROM requests q,
	LATERAL rl_check(format('tenant:%s:user:%s:%s', q.tenant, q.user_id, q.endpoint),
		'token_bucket', 5) r
ORDER BY q.n;

\echo
\echo '2. The same call mapped to HTTP headers by the application.'
SELECT CASE WHEN r.allowed THEN 200 ELSE 429 END AS status,
	r."limit" AS "X-RateLimit-Limit",
	r.remaining AS "X-RateLimit-Remaining",
	ceil(extract(epoch FROM r.reset_at))::bigint AS "X-RateLimit-Reset",
	CASE WHEN NOT r.allowed THEN ceil(r.retry_after)::int END AS "Retry-After"
FROM rl_check('tenant:42:user:7:GET /orders', 'token_bucket', 5) r;

\echo
\echo '3. A tenant quota enforced where the data lives: a policy (data, changed'
\echo '   without restarts) and a trigger.  At most 3 orders per tenant per minute.'
INSERT INTO rl_policy (name, algo, "limit", per)
VALUES ('orders_per_tenant', 'sliding_window_log', 3, '1 minute');
CREATE TABLE orders (id serial PRIMARY KEY, tenant int, item text);
CREATE TRIGGER orders_quota BEFORE INSERT ON orders FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('orders_per_tenant', 'tenant');
INSERT INTO orders (tenant, item) VALUES (1, 'apple'), (1, 'pear'), (2, 'plum'), (1, 'fig');
\set ON_ERROR_STOP 0
\set VERBOSITY verbose
INSERT INTO orders (tenant, item) VALUES (1, 'kiwi');
\set VERBOSITY default
\set ON_ERROR_STOP 1
\echo '   A rolled-back insert gives its quota back:'
BEGIN;
INSERT INTO orders (tenant, item) VALUES (2, 'lime'), (2, 'date');
ROLLBACK;
INSERT INTO orders (tenant, item) VALUES (2, 'lime'), (2, 'date');
SELECT tenant, count(*) AS orders FROM orders GROUP BY tenant ORDER BY tenant;
\echo '   Raising the limit is an UPDATE; it applies at the next insert:'
UPDATE rl_policy SET "limit" = 4 WHERE name = 'orders_per_tenant';
INSERT INTO orders (tenant, item) VALUES (1, 'kiwi');
SELECT policy, allowed, denied FROM rl_stats WHERE policy = 'orders_per_tenant';

\echo
\echo '4. The five algorithms side by side: 4 per second, 6 calls 100 ms apart'
\echo '   (explicit times, as a superuser may pass for replay and tests).'
SELECT a.algo, string_agg(CASE WHEN r.allowed THEN 'ok' ELSE '429' END, ' ' ORDER BY i) AS decisions
FROM unnest(ARRAY['fixed_window', 'sliding_window_log', 'sliding_window_counter',
	'token_bucket', 'leaky_bucket']) AS a(algo),
	generate_series(0, 5) i,
	LATERAL rl_check('demo:' || a.algo, a.algo, 4,
		at => '2026-01-01 00:00:00.7+00'::timestamptz + i * interval '100 ms') r
GROUP BY a.algo ORDER BY a.algo;

\echo
\echo '5. Leaky bucket shaping: each admitted call is told how long to wait so'
\echo '   that calls leave at a smooth 4 per second.'
SELECT i AS call, r.allowed, r.delay AS wait_s
FROM generate_series(1, 5) i,
	LATERAL rl_check('shape', 'leaky_bucket', 4, at => '2026-01-01 00:00:00+00'::timestamptz + i * interval '1 us') r;

\echo
\echo '6. Bad input is an error with a SQLSTATE, never a silent pass.'
\set ON_ERROR_STOP 0
\set VERBOSITY verbose
SELECT rl_allow('k', 'token-bucket', 5);
SELECT rl_allow('k', 'fixed_window', 5, per => '1 month');
\set VERBOSITY default
\set ON_ERROR_STOP 1

\echo
\echo '7. The store: capacity and use.'
SELECT * FROM rl_store_info();
