-- rl_wait: wait (interruptibly, up to max_wait) instead of denying.
-- Real time, so the waits here are a few hundred milliseconds at most.
INSERT INTO rl_policy (name, algo, "limit", per) VALUES ('w_shape', 'leaky_bucket', 20, '1 second');
-- admitted at once while there is room
SELECT rl_wait('w:a', 'token_bucket', 2, '1 hour');
SELECT rl_wait('w:a', 'token_bucket', 2, '1 hour', max_wait => '0');
-- no room within max_wait: false, without waiting for nothing
SELECT rl_wait('w:a', 'token_bucket', 2, '1 hour', max_wait => '0');
SELECT rl_wait('w:a', 'token_bucket', 2, '1 hour', max_wait => '100 ms');
-- room within max_wait: waits for it (a token every 50 ms)
SELECT rl_allow('w:b', 'token_bucket', 20, cost => 20);
SELECT rl_wait('w:b', 'token_bucket', 20, max_wait => '1 second') AS waited_for_a_token;
-- leaky bucket shaping: each admitted call sleeps its delay (the queue
-- ahead of it), so calls of a 20/s bucket leave about 50 ms apart.  Asserted
-- from the bucket, not the clock: when the fifth call returns, the queue has
-- drained to at most one unit (had the calls not waited, five would be
-- queued and 15 remain); a slower machine only drains it further.
SELECT count(*) AS admitted FROM generate_series(1, 5) n
	WHERE rl_wait('w:shape' || (n * 0)::text, policy => 'w_shape', max_wait => '1 second');
SELECT remaining >= 19 AS waited_out_the_delays
FROM rl_check('w:shape0', policy => 'w_shape', cost => 0);
-- a delay beyond max_wait: not admitted, and nothing consumed
SELECT rl_allow('w:c', 'leaky_bucket', 1, '1 hour', cost => 1, burst => 5);
SELECT rl_wait('w:c', 'leaky_bucket', 1, '1 hour', 1, 5, max_wait => '1 second');
SELECT remaining FROM rl_check('w:c', 'leaky_bucket', 1, '1 hour', 0, 5);
-- bad input
SELECT rl_wait('w:d', 'fixed_window', 1, max_wait => '-1 second');
SELECT rl_wait('w:d', 'fixed_window', 1, max_wait => '1 month');
SELECT rl_wait('w:d', 'fixed_window', 1, max_wait => NULL);
-- statement_timeout interrupts a wait
SELECT rl_allow('w:e', 'token_bucket', 1, '3 seconds');
SET statement_timeout = '100ms';
SELECT rl_wait('w:e', 'token_bucket', 1, '3 seconds', max_wait => '10 seconds');
RESET statement_timeout;
