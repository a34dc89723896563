-- Load shedding by priority (docs/quotas.md, "Load shedding"): a policy
-- (or a direct call) reserves a share of its limit; a 'sheddable' call
-- must leave all of it free, a 'normal' one half of it, a 'critical' one
-- (or one without a priority) none.  All calls at one explicit time, so
-- nothing refills or expires meanwhile.  Concurrency between sessions:
-- test/specs/priority_slots.spec; Redis: test/t/092_redis_priority.pl.

-- admitted calls of n made in a row, under a limit of 10 with a 20%
-- reserve, called directly
CREATE FUNCTION pr_direct(k text, algo text, prio text, n int)
RETURNS bigint LANGUAGE sql AS $$
	SELECT count(*) FILTER (WHERE rl_allow(k, algo, 10, '1 hour',
		at => t(0), priority => prio, reserve => 0.2))
	FROM generate_series(1, n)
$$;
-- the same under a policy
CREATE FUNCTION pr_policy(k text, pol text, prio text, n int)
RETURNS bigint LANGUAGE sql AS $$
	SELECT count(*) FILTER (WHERE rl_allow(k, pol, at => t(0),
		priority => prio))
	FROM generate_series(1, n)
$$;
CREATE TABLE pr_algos (algo text);
INSERT INTO pr_algos VALUES ('fixed_window'), ('sliding_window_log'),
	('sliding_window_counter'), ('token_bucket'), ('leaky_bucket');

-- With a 20% reserve, sheddable calls stop at 80% of the limit, normal
-- ones at 90%, critical ones reach 100%, on one key in that order; every
-- algorithm alike
SELECT algo,
	pr_direct('d:' || algo, algo, 'sheddable', 12) AS sheddable,
	pr_direct('d:' || algo, algo, 'normal', 12) AS normal,
	pr_direct('d:' || algo, algo, 'critical', 12) AS critical,
	pr_direct('d:' || algo, algo, NULL, 1) AS unprioritised
FROM pr_algos ORDER BY algo;
-- critical calls alone reach 100% too, as calls without a priority do
SELECT algo,
	pr_direct('c:' || algo, algo, 'critical', 12) AS critical,
	pr_direct('n:' || algo, algo, NULL, 12) AS none
FROM pr_algos ORDER BY algo;

-- the same under policies: the reserve is the policy's column
INSERT INTO rl_policy (name, algo, "limit", per, reserve)
SELECT 'pr_' || algo, algo, 10, '1 hour', 0.2 FROM pr_algos;
SELECT algo,
	pr_policy('k', 'pr_' || algo, 'sheddable', 12) AS sheddable,
	pr_policy('k', 'pr_' || algo, 'normal', 12) AS normal,
	pr_policy('k', 'pr_' || algo, 'critical', 12) AS critical
FROM pr_algos ORDER BY algo;
-- a policy without a reserve sheds nothing
UPDATE rl_policy SET reserve = 0 WHERE name = 'pr_fixed_window';
SELECT pr_policy('k0', 'pr_fixed_window', 'sheddable', 12) AS no_reserve;
UPDATE rl_policy SET reserve = 0.2 WHERE name = 'pr_fixed_window';

-- A bucket's reserve is a share of its burst (what remaining counts
-- against): a token bucket of 10 per hour, burst 20, keeps 4 for critical
-- calls
SELECT count(*) FILTER (WHERE rl_allow('b', 'token_bucket', 10, '1 hour',
	burst => 20, at => t(0), priority => 'sheddable', reserve => 0.2))
	AS sheddable_of_20
FROM generate_series(1, 25);

-- What remaining means for a prioritised caller: the units left above
-- its headroom, those it may still use.  A look (cost 0) is denied once
-- the key is inside the caller's share of the reserve.
SELECT pr_direct('r', 'fixed_window', 'critical', 7) AS used;
SELECT p.prio, d.allowed, d.remaining, d.capacity
FROM unnest(ARRAY['sheddable', 'normal', 'critical']) AS p(prio),
	rl_check('r', 'fixed_window', 10, '1 hour', 0, at => t(0),
		priority => p.prio, reserve => 0.2) d;
SELECT pr_direct('r', 'fixed_window', 'critical', 2) AS used_two_more;
SELECT p.prio, d.allowed, d.remaining
FROM unnest(ARRAY['sheddable', 'normal', 'critical']) AS p(prio),
	rl_check('r', 'fixed_window', 10, '1 hour', 0, at => t(0),
		priority => p.prio, reserve => 0.2) d;
-- a denied sheddable call waits until the reserve is free again: a token
-- bucket of 10 per hour, 8 used, refills the one unit it lacks (with its
-- headroom of 2, it needs 3) in 6 minutes
SELECT pr_direct('w', 'token_bucket', 'sheddable', 9) AS admitted;
SELECT allowed, remaining, retry_after
FROM rl_check('w', 'token_bucket', 10, '1 hour', at => t(0),
	priority => 'sheddable', reserve => 0.2);
SELECT allowed, remaining
FROM rl_check('w', 'token_bucket', 10, '1 hour', at => t(360000000),
	priority => 'sheddable', reserve => 0.2);

-- The headroom is at most what the cost leaves: a call costing the whole
-- limit is admitted by an empty key whatever its priority
SELECT rl_allow('whole', 'sliding_window_log', 10, '1 hour', 10, at => t(0),
	priority => 'sheddable', reserve => 0.5) AS whole_limit;

-- Several limits in one policy: the reserve applies to each of them, of
-- its own capacity (10 per hour and 100 per day: sheddable stops at 8)
INSERT INTO rl_policy (name, algo, "limit", per, reserve)
VALUES ('pr_multi', 'fixed_window', 100, '1 day', 0.2);
INSERT INTO rl_policy_limit (policy, name, algo, "limit", per)
VALUES ('pr_multi', 'hourly', 'fixed_window', 10, '1 hour');
SELECT pr_policy('m', 'pr_multi', 'sheddable', 12) AS sheddable,
	pr_policy('m', 'pr_multi', 'critical', 12) AS critical;
-- and the binding limit's remaining is the caller's
SELECT allowed, "limit", remaining
FROM rl_check('m2', 'pr_multi', at => t(0), priority => 'sheddable');

-- A concurrency limit: with one slot, the headroom leaves the slot itself
-- (an empty key admits any priority); a slot is taken only while the
-- priority's share stays free (between sessions: the isolation spec)
BEGIN;
SELECT rl_acquire('slot', 1, priority => 'sheddable', reserve => 0.5) AS one_slot;
ROLLBACK;
INSERT INTO rl_policy (name, algo, "limit", reserve)
VALUES ('pr_slots', 'concurrency', 2, 0.5);
BEGIN;
SELECT rl_acquire('slot', 'pr_slots', priority => 'sheddable') AS sheddable_first;
ROLLBACK;

-- A quota trigger's priority is an expression over the row, like its cost
CREATE TABLE pr_jobs (tenant int, kind text, n int DEFAULT 1);
CREATE TRIGGER pr_jobs_quota BEFORE INSERT ON pr_jobs FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('pr_fixed_window', 'tenant',
		'priority = CASE kind WHEN ''batch'' THEN ''sheddable'' ELSE ''critical'' END');
SET ratelimit.trigger_at = '2026-01-01 00:00:00+00';
INSERT INTO pr_jobs (tenant, kind) SELECT 1, 'batch' FROM generate_series(1, 8);
-- the ninth batch job is shed
INSERT INTO pr_jobs (tenant, kind) VALUES (1, 'batch');
-- interactive jobs take the reserve
INSERT INTO pr_jobs (tenant, kind) VALUES (1, 'web'), (1, 'web');
INSERT INTO pr_jobs (tenant, kind) VALUES (1, 'web');
SELECT kind, count(*) FROM pr_jobs GROUP BY kind ORDER BY kind;
-- a null priority is none (a row not shed); a bad one is an error
DROP TRIGGER pr_jobs_quota ON pr_jobs;
CREATE TRIGGER pr_jobs_quota BEFORE INSERT ON pr_jobs FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('pr_fixed_window', 'tenant', 'priority=kind',
		'cost = n');
INSERT INTO pr_jobs (tenant, kind) VALUES (2, NULL);
INSERT INTO pr_jobs (tenant, kind) VALUES (2, 'urgent');
INSERT INTO pr_jobs (tenant, kind, n) VALUES (2, 'sheddable', 7);
INSERT INTO pr_jobs (tenant, kind, n) VALUES (2, 'sheddable', 1);
-- two priority expressions, an empty one
CREATE TRIGGER bad BEFORE INSERT ON pr_jobs FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('pr_fixed_window', 'tenant', 'priority=kind',
		'PRIORITY = ''normal''');
INSERT INTO pr_jobs VALUES (3, 'x');
DROP TRIGGER bad ON pr_jobs;
CREATE TRIGGER bad BEFORE INSERT ON pr_jobs FOR EACH ROW
	EXECUTE FUNCTION rl_enforce('pr_fixed_window', 'tenant', 'priority=');
INSERT INTO pr_jobs VALUES (3, 'x');
DROP TRIGGER bad ON pr_jobs;
RESET ratelimit.trigger_at;

-- Bad input: an unknown priority, a reserve out of [0, 1), in calls and
-- in policies (22023)
SELECT rl_allow('x', 'fixed_window', 10, priority => 'high');
SELECT rl_allow('x', 'fixed_window', 10, priority => 'Critical');
SELECT rl_allow('x', 'pr_fixed_window', priority => '');
SELECT rl_allow('x', 'fixed_window', 10, priority => 'normal', reserve => 1);
SELECT rl_allow('x', 'fixed_window', 10, priority => 'normal', reserve => -0.1);
SELECT rl_allow('x', 'fixed_window', 10, priority => 'normal', reserve => 'NaN');
SELECT rl_acquire('x', 3, priority => 'low');
INSERT INTO rl_policy (name, algo, "limit", reserve) VALUES ('pr_bad', 'fixed_window', 10, 1.5);
UPDATE rl_policy SET reserve = 'NaN' WHERE name = 'pr_fixed_window';
-- a reserve without a priority changes nothing; NULLs are none
SELECT pr_direct('none', 'fixed_window', NULL, 12) AS no_priority;
SELECT rl_allow('x2', 'fixed_window', 10, priority => NULL, reserve => NULL);

DROP TABLE pr_jobs, pr_algos;
DROP FUNCTION pr_direct(text, text, text, int), pr_policy(text, text, text, int);
DELETE FROM rl_policy WHERE name LIKE 'pr\_%';
