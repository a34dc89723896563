-- The extension and a helper: t(us) is 2026-01-01 00:00:00 UTC plus us
-- microseconds, so each test states its times exactly.
CREATE EXTENSION ratelimit;
CREATE FUNCTION t(us bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE
AS $$ SELECT '2026-01-01 00:00:00+00'::timestamptz + us * interval '1 microsecond' $$;
-- a call, with its time shown as microseconds after t(0)
CREATE FUNCTION c(key text, algo text, lim bigint, us bigint,
				  per interval DEFAULT '1 second', cost bigint DEFAULT 1,
				  burst bigint DEFAULT NULL)
RETURNS TABLE (allowed boolean, remaining bigint, retry_after double precision,
			   reset_us bigint, delay double precision)
LANGUAGE sql
AS $$
	SELECT r.allowed, r.remaining, r.retry_after,
		   ((extract(epoch FROM r.reset_at - t(0)) * 1000000))::bigint,
		   r.delay
	FROM rl_check(key, algo, lim, per, cost, burst, t(us)) r
$$;
-- the same for a call under a policy
CREATE FUNCTION c2(key text, policy text, us bigint, cost bigint DEFAULT NULL)
RETURNS TABLE (allowed boolean, "limit" bigint, remaining bigint,
			   retry_after double precision, reset_us bigint,
			   delay double precision)
LANGUAGE sql
AS $$
	SELECT r.allowed, r."limit", r.remaining, r.retry_after,
		   ((extract(epoch FROM r.reset_at - t(0)) * 1000000))::bigint,
		   r.delay
	FROM rl_check(key, policy, at => t(us), cost => cost) r
$$;
SELECT rl_reset_all(true) >= 0 AS cleared;
