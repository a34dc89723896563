-- What a call site keeps from call to call (#9): arguments that are
-- constants of its expression are checked once; parameters and variables
-- are compared at every call, so a new value takes effect at once.
SET timezone = 'UTC';
-- PL/pgSQL keeps a simple expression's state across evaluations with
-- other values: the limit follows the variable (2, then 4, then 1)
CREATE FUNCTION site_var() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	lim bigint;
	out text := '';
BEGIN
	FOREACH lim IN ARRAY ARRAY[2, 2, 2, 4, 4, 1]::bigint[] LOOP
		out := out || CASE WHEN rl_allow('site:var', 'fixed_window', lim,
										 '1 hour', 1, NULL,
										 '2026-03-01 10:00+00')
					   THEN 't' ELSE 'f' END;
	END LOOP;
	RETURN out;
END
$$;
SELECT site_var();
-- the algorithm and the window follow variables too
CREATE FUNCTION site_algo(algos text[], pers interval[]) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	i int;
	out text := '';
BEGIN
	FOR i IN 1 .. array_length(algos, 1) LOOP
		out := out || (SELECT r.remaining || '/' || r.per || ' '
					   FROM rl_check('site:algo', algos[i], 3, pers[i], 1,
									 NULL, '2026-03-01 10:00+00') r);
	END LOOP;
	RETURN out;
END
$$;
SELECT site_algo(ARRAY['fixed_window', 'fixed_window', 'token_bucket',
					   'fixed_window'],
				 ARRAY['1 hour', '1 hour', '1 hour', '1 day']::interval[]);
-- a generic plan's parameters change between executions
SET plan_cache_mode = force_generic_plan;
PREPARE site_p(bigint, bigint) AS
	SELECT rl_allow('site:p', 'fixed_window', $1, '1 hour', $2, NULL,
					'2026-03-01 10:00+00');
EXECUTE site_p(1, 1);
EXECUTE site_p(1, 1);
EXECUTE site_p(3, 1);
EXECUTE site_p(3, 2);
EXECUTE site_p(5, 2);
DEALLOCATE site_p;
RESET plan_cache_mode;
-- constants: one statement of many calls, every one decided (2 of 3 per key)
SELECT i % 3 AS k, count(*) FILTER (WHERE a) AS allowed, count(*) AS calls
FROM (SELECT i, rl_allow('site:c' || (i % 3), 'fixed_window', 2, '1 hour',
						 1, NULL, '2026-03-01 10:00+00') AS a
	  FROM generate_series(1, 9) i) s
GROUP BY 1 ORDER BY 1;
-- a constant call site's calendar window follows ratelimit.time_zone as
-- it is at each call: a day ends at midnight UTC, then in Tokyo
CREATE FUNCTION site_zone() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	zone text;
	out text := '';
BEGIN
	FOREACH zone IN ARRAY ARRAY['UTC', 'Asia/Tokyo', 'UTC'] LOOP
		PERFORM set_config('ratelimit.time_zone', zone, true);
		out := out || (SELECT r.reset_at::text || ' '
					   FROM rl_check('site:zone:' || zone, 'fixed_window', 5,
									 '1 day', 1, NULL,
									 '2026-03-01 10:00+00') r);
	END LOOP;
	RETURN out;
END
$$;
BEGIN;
SELECT site_zone();
COMMIT;
-- a bad constant is reported at every call, as before (22023)
SELECT rl_allow('site:bad', 'no_such_algo', 1, '1 hour')
FROM generate_series(1, 2);
SELECT rl_allow('site:bad', 'fixed_window', 0, '1 hour')
FROM generate_series(1, 2);
-- a NULL key from a constant site is still refused (22004)
SELECT rl_allow(CASE WHEN i = 2 THEN NULL ELSE 'site:null' END,
				'fixed_window', 5, '1 hour')
FROM generate_series(1, 2) i;
-- a constant site's decisions are counted (rl_stats), and counted again
-- after the counters are reset while the site lives (a PL/pgSQL simple
-- expression keeps it): the third call is the one counted
CREATE FUNCTION site_stats() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	i int;
	a boolean;
BEGIN
	FOR i IN 1 .. 3 LOOP
		IF i = 3 THEN
			PERFORM rl_stats_reset();
		END IF;
		a := rl_allow('site:s', 'sliding_window_counter', 10, '1 hour');
	END LOOP;
END
$$;
SELECT rl_stats_reset();
SELECT site_stats();
SELECT algo, allowed, denied FROM rl_stats
WHERE policy IS NULL AND algo = 'sliding_window_counter';
SELECT count(*) FILTER (WHERE a) AS allowed
FROM (SELECT rl_allow('site:s' || i, 'sliding_window_counter', 1, '1 hour')
		  AS a
	  FROM generate_series(1, 4) i) s;
SELECT algo, allowed, denied FROM rl_stats
WHERE policy IS NULL AND algo = 'sliding_window_counter';
DROP FUNCTION site_var(), site_algo(text[], interval[]), site_zone(),
	site_stats();
