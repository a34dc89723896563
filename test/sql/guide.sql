-- The examples of docs/guide.md, in the guide's order.  Each ```sql block
-- of the guide appears below verbatim, after a comment "-- guide:" naming
-- the guide's section; those that need a Redis server are in
-- test/t/077_guide.pl instead.  test/guide_check.pl, run at the end, checks
-- it.  They run as a reader would run them: in a database of their own,
-- created with the extension, in one session.
\set regress_db :DBNAME
CREATE DATABASE guide;
\c guide
CREATE EXTENSION ratelimit;
SET timezone = 'UTC';
-- guide: IP addresses
-- a key per IPv4 address and per IPv6 /64
CREATE FUNCTION ip_key(addr inet) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
	SELECT 'ip:' || CASE
		WHEN family(addr) = 4 THEN host(addr)
		WHEN addr << '::ffff:0:0/96' THEN host('0.0.0.0'::inet + (addr - '::ffff:0:0'))
		ELSE network(set_masklen(addr, 64))::text
	END
$$;

SELECT ip_key('203.0.113.7'), ip_key('::ffff:203.0.113.7'),
       ip_key('2001:db8:1:2:a::1'), ip_key('2001:DB8:1:2:b::99');
-- ip:203.0.113.7 | ip:203.0.113.7 | ip:2001:db8:1:2::/64 | ip:2001:db8:1:2::/64

-- X-Forwarded-For as our one proxy passes it on: the client wrote the
-- first entry, the proxy appended the address it saw
SELECT ip_key(trim(split_part('198.51.100.23, 203.0.113.7', ',', -1))::inet);
-- ip:203.0.113.7
-- guide: Endpoints and costs
-- one allowance per tenant and hour; an export weighs as much as 50 reads
INSERT INTO rl_policy (name, algo, "limit", per)
VALUES ('work_per_tenant', 'token_bucket', 1000, '1 hour');

SELECT rl_allow('tenant:42', 'work_per_tenant', at => '2026-03-02 09:00:00+00');   -- a read
SELECT allowed, remaining
FROM rl_check('tenant:42', 'work_per_tenant', at => '2026-03-02 09:00:00+00', cost => 50);
-- t | 949
-- guide: Combining keys
INSERT INTO rl_policy (name, algo, "limit", per) VALUES
    ('calls_per_user', 'sliding_window_counter', 2, '1 minute'),
    ('calls_per_tenant', 'sliding_window_counter', 3, '1 minute');

-- users 7 and 8 of tenant 42 call twice each, in the same second
SELECT n, u AS "user", rl_allow_all(ARRAY['user:' || u, 'tenant:42'],
                                    ARRAY['calls_per_user', 'calls_per_tenant'],
                                    at => '2026-03-02 09:00:00+00') AS allowed
FROM (VALUES (1, 7), (2, 7), (3, 8), (4, 8)) AS calls (n, u)
ORDER BY n;
-- allowed: t, t, t, f

-- the tenant's limit refused user 8's second call, which took nothing from user 8
SELECT key, policy, remaining
FROM rl_check_all(ARRAY['user:8', 'tenant:42'], ARRAY['calls_per_user', 'calls_per_tenant'],
                  costs => ARRAY[0, 0], at => '2026-03-02 09:00:00+00');
-- user:8    | calls_per_user   | 1
-- tenant:42 | calls_per_tenant | 0
INSERT INTO rl_policy (name, algo, "limit", per) VALUES
    ('login_per_ip', 'sliding_window_counter', 300, '10 minutes'),
    ('login_per_account_ip', 'sliding_window_log', 5, '15 minutes'),
    ('login_per_account', 'sliding_window_log', 50, '1 day');

-- an attempt on ann's account from 203.0.113.7
SELECT rl_allow_all(ARRAY[ip_key('203.0.113.7'),
                          'account:ann@example.com:' || ip_key('203.0.113.7'),
                          'account:ann@example.com'],
                    ARRAY['login_per_ip', 'login_per_account_ip', 'login_per_account'],
                    at => '2026-03-02 09:00:00+00');
-- t
-- guide: Plans and exceptions for single keys
INSERT INTO rl_policy (name, algo, "limit", per) VALUES
    ('exports_free', 'fixed_window', 10, '1 day'),
    ('exports_pro', 'fixed_window', 1000, '1 day');
CREATE TABLE tenants (id int PRIMARY KEY, plan text NOT NULL);
INSERT INTO tenants VALUES (1, 'free'), (2, 'pro');

SELECT id, plan, r.allowed, r.remaining
FROM tenants, LATERAL rl_check('tenant:' || id, 'exports_' || plan,
                               at => '2026-03-02 09:00:00+00') AS r
ORDER BY id;
-- 1 | free | t |   9
-- 2 | pro  | t | 999
-- guide: Choosing an algorithm
SELECT algo, count(*) FILTER (WHERE r.allowed) AS admitted
FROM unnest(ARRAY['fixed_window', 'sliding_window_log']) AS algo,
     generate_series(1, 6) AS i,
     LATERAL rl_check('edge:' || algo, algo, 3, '1 minute',
                      at => CASE WHEN i <= 3 THEN timestamptz '2026-03-02 09:00:59+00'
                                 ELSE timestamptz '2026-03-02 09:01:00+00' END) AS r
GROUP BY algo ORDER BY algo;
-- fixed_window       | 6
-- sliding_window_log | 3
-- guide: Monthly quotas
INSERT INTO rl_policy (name, algo, "limit", per) VALUES
    ('exports_monthly', 'fixed_window', 10000, '1 month');

SELECT remaining, reset_at
FROM rl_check('tenant:42', 'exports_monthly', at => '2026-02-27 09:00:00+00');
-- 9999 | 2026-03-01 00:00:00+00
INSERT INTO rl_policy (name, algo, "limit", per, time_zone, period_anchor) VALUES
    ('seats_billing', 'fixed_window', 500, '1 month', 'America/New_York',
     '2026-01-31 09:30:00-05');

SELECT reset_at FROM rl_check('tenant:7', 'seats_billing', at => '2026-02-10 12:00:00+00');
-- 2026-02-28 14:30:00+00
-- guide: Several limits on one key
INSERT INTO rl_policy (name, algo, "limit", per, burst) VALUES
    ('search_rate', 'token_bucket', 10, '1 second', 20),
    ('search_daily', 'fixed_window', 10000, '1 day', NULL);

SELECT key, policy, allowed, remaining
FROM rl_check_all(ARRAY['tenant:42', 'tenant:42'], ARRAY['search_rate', 'search_daily'],
                  at => '2026-03-02 09:00:00+00');
-- tenant:42 | search_rate  | t |   19
-- tenant:42 | search_daily | t | 9999
-- guide: Failing open or closed
-- logins refuse the calls the limiter cannot count; reads let them through
UPDATE rl_policy SET fail_mode = 'closed' WHERE name LIKE 'login%';
INSERT INTO rl_policy (name, algo, "limit", per, fail_mode)
VALUES ('reads_per_user', 'token_bucket', 600, '1 minute', 'open');

SELECT name, fail_mode FROM rl_policy WHERE name LIKE 'login%' OR name = 'reads_per_user'
ORDER BY name;
-- login_per_account    | closed
-- login_per_account_ip | closed
-- login_per_ip         | closed
-- reads_per_user       | open
-- guide: Hot keys on one Redis Cluster shard
-- (test/t/077_guide.pl runs it on a Redis Cluster too)
-- tenant 42's 1,000 calls a second as 4 keys of 250, by user
SELECT 'tenant:42:part:' || user_id % 4 AS key,
       count(*) FILTER (WHERE rl_allow('tenant:42:part:' || user_id % 4, 'token_bucket', 250, '1 second',
                                       at => '2026-03-02 09:00:00+00')) AS admitted
FROM generate_series(1, 1200) AS user_id
GROUP BY 1 ORDER BY 1;
-- tenant:42:part:0 | 250   (and 250 for each of the other three)
-- guide: Where the database limiter sits
-- the refusal's hint says when to retry, by the real clock: keep it out
\set VERBOSITY terse
INSERT INTO rl_policy (name, algo, "limit", per)
VALUES ('messages_per_tenant', 'token_bucket', 2, '1 day');
CREATE TABLE messages (id bigserial PRIMARY KEY, tenant int NOT NULL, body text);
CREATE TRIGGER messages_quota BEFORE INSERT ON messages FOR EACH ROW
    EXECUTE FUNCTION rl_enforce('messages_per_tenant', 'tenant');

INSERT INTO messages (tenant, body) VALUES (42, 'from the web application'), (42, 'from a nightly job');
INSERT INTO messages (tenant, body) VALUES (42, 'from psql');
-- ERROR:  rate limit exceeded for policy "messages_per_tenant"
\set VERBOSITY default
-- guide: Usage for billing and dashboards
SELECT key, used, "limit", period_start, period_end
FROM rl_usage('exports_monthly', at => '2026-02-27 10:00:00+00');
-- tenant:42 | 1 | 10000 | 2026-02-01 00:00:00+00 | 2026-03-01 00:00:00+00
SELECT rl_headers(r, 'exports_monthly', '2026-02-27 10:00:00+00')
FROM rl_check('tenant:42', 'exports_monthly', at => '2026-02-27 10:00:00+00') AS r;
-- RateLimit-Policy: "exports_monthly";q=10000      (no w: a month has no fixed length)
-- RateLimit: "exports_monthly";r=9998;t=136800      (t: seconds to March 1)
-- back to the suite's database
\c :regress_db
DROP DATABASE guide;
-- every example of the guide is above or in test/t/077_guide.pl
\set guide_check `perl test/guide_check.pl`
SELECT :'guide_check' AS guide_check;
