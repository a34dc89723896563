-- HTTP: rl_headers, and a PostgREST-style pre-request function that
-- rejects with 429.
SET timezone = 'UTC';
SELECT rl_headers(r) FROM rl_check('h:1', 'fixed_window', 2, '1 minute', at => t(0)) r;
SELECT rl_headers(r) FROM rl_check('h:1', 'fixed_window', 2, '1 minute', at => t(1)) r;
SELECT rl_headers(r) FROM rl_check('h:1', 'fixed_window', 2, '1 minute', at => t(30000000)) r;
SELECT rl_headers(r) FROM rl_check('h:2', 'token_bucket', 10, '1 second', 10, at => t(0)) r;
SELECT rl_headers(r) FROM rl_check('h:2', 'token_bucket', 10, '1 second', 1, at => t(1)) r;
-- X-RateLimit-Limit is the capacity that remaining counts against, so it
-- bounds X-RateLimit-Remaining: a bucket's burst (which may exceed its
-- limit), the limit for the other algorithms.  Decisions report it with
-- their window, in every form.
SELECT rl_headers(r) FROM rl_check('h:3', 'token_bucket', 100, '1 minute', burst => 200, at => t(0)) r;
SELECT rl_headers(r) FROM rl_check('h:4', 'leaky_bucket', 100, '1 minute', burst => 200, at => t(0)) r;
SELECT "limit", capacity, per, remaining FROM rl_check('h:5', 'sliding_window_counter', 100, '1 minute', at => t(0));
SELECT "limit", capacity, per, remaining FROM rl_check('h:5', 'fixed_window', 100, '1 day', at => t(0));
INSERT INTO rl_policy (name, algo, "limit", per, burst) VALUES ('h_burst', 'token_bucket', 10, '1 day', 25);
SELECT "limit", capacity, per, remaining FROM rl_check('h:6', 'h_burst', at => t(0));
SELECT key, "limit", capacity, per, remaining
FROM rl_check_all(ARRAY['h:6'], ARRAY['h_burst'], at => t(1));
-- a decision without a capacity (built by hand) falls back to its limit
SELECT rl_headers(ROW(true, 5, 4, 0, '2026-01-01 00:00:00+00', 0, NULL, NULL)::rl_decision);
-- The pre-request function of docs/quotas.md.  PostgREST runs it before
-- each request with the JWT claims in request.jwt.claims, sends the headers
-- set in response.headers, and answers RAISE SQLSTATE 'PGRST' with the
-- status and headers given in the error's detail (so a 429 carries
-- Retry-After).
INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('api_per_user', 'token_bucket', 2, '1 minute');
CREATE FUNCTION check_rate_limit() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	d rl_decision;
	who text := coalesce(
		current_setting('request.jwt.claims', true)::json ->> 'sub',
		current_setting('request.headers', true)::json ->> 'x-forwarded-for',
		'anonymous');
BEGIN
	SELECT * INTO d FROM rl_check('user:' || who, 'api_per_user');
	IF NOT d.allowed THEN
		RAISE SQLSTATE 'PGRST' USING
			MESSAGE = json_build_object('code', 'RL429', 'message', 'Too Many Requests',
				'hint', format('Retry after %s seconds.', ceil(d.retry_after)))::text,
			DETAIL = json_build_object('status', 429, 'headers', rl_headers(d))::text;
	END IF;
	PERFORM set_config('response.headers',
		(SELECT json_agg(json_build_object(h.key, h.value))::text
		 FROM jsonb_each_text(rl_headers(d)) h), true);
END $$;
-- three requests of user 42: two pass with their headers, the third is 429
BEGIN;
SET LOCAL request.jwt.claims = '{"sub": "42", "role": "web"}';
SELECT check_rate_limit();
SELECT current_setting('response.headers')::jsonb @> '[{"X-RateLimit-Remaining": "1"}]' AS headers_set;
SELECT check_rate_limit();
COMMIT;
BEGIN;
SET LOCAL request.jwt.claims = '{"sub": "42", "role": "web"}';
DO $$
DECLARE
	body json; response json;
BEGIN
	PERFORM check_rate_limit();
EXCEPTION WHEN SQLSTATE 'PGRST' THEN
	GET STACKED DIAGNOSTICS body = MESSAGE_TEXT, response = PG_EXCEPTION_DETAIL;
	RAISE NOTICE 'status %: %, Retry-After % (limit %)', response ->> 'status',
		body ->> 'message', response -> 'headers' ->> 'Retry-After',
		response -> 'headers' ->> 'X-RateLimit-Limit';
END $$;
COMMIT;
-- another user is not affected
BEGIN;
SET LOCAL request.jwt.claims = '{"sub": "7"}';
SELECT check_rate_limit();
COMMIT;
