-- Bad arguments: SQLSTATE class 22, the message names the argument.
\set VERBOSITY sqlstate
SELECT rl_allow(NULL, 'fixed_window', 1);
SELECT rl_allow('k', NULL, 1);
SELECT rl_allow('k', 'fixed_window', NULL::bigint);
SELECT rl_allow('k', 'fixed_window', 1, NULL);
SELECT rl_allow('k', 'fixed_window', 1, cost => NULL);
\set VERBOSITY default
SELECT rl_allow(NULL, 'fixed_window', 1);
SELECT rl_allow('k', 'token bucket', 1);
SELECT rl_allow('k', 'fixed_window', 0);
SELECT rl_allow('k', 'fixed_window', -5);
SELECT rl_allow('k', 'fixed_window', 1, '0 seconds');
SELECT rl_allow('k', 'fixed_window', 1, '-1 second');
SELECT rl_allow('k', 'token_bucket', 1, '1 month');
SELECT rl_allow('k', 'sliding_window_log', 1, '1 year');
SELECT rl_allow('k', 'fixed_window', 1, '36526 days');
SELECT rl_allow('k', 'fixed_window', 1, cost => -1);
SELECT rl_allow('k', 'fixed_window', 2, cost => 3);
SELECT rl_allow('k', 'sliding_window_counter', 2, cost => 3);
SELECT rl_allow('k', 'token_bucket', 2, cost => 3);
SELECT rl_allow('k', 'token_bucket', 2, cost => 3, burst => 3) AS burst_makes_room;
SELECT rl_allow('k', 'leaky_bucket', 5, cost => 3, burst => 2);
SELECT rl_allow('k', 'fixed_window', 2, burst => 3);
SELECT rl_allow('k', 'sliding_window_log', 2, burst => 3);
SELECT rl_allow('k', 'token_bucket', 2, burst => 0);
SELECT rl_allow('k', 'fixed_window', 2, at => 'infinity');
SELECT rl_allow('k', 'fixed_window', 2, at => '-infinity');
SELECT rl_allow('k', 'fixed_window', 2, at => '200000-01-01');
SELECT rl_allow(repeat('k', 4097), 'fixed_window', 1);
SELECT rl_reset(NULL);
SELECT rl_reset('k', 'nope');
\set VERBOSITY sqlstate
SELECT rl_check('k', 'token bucket', 1);
SELECT rl_check('k', 'fixed_window', 0);
SELECT rl_check('k', 'leaky_bucket', 1, '2 mons');
SELECT rl_check('k', 'fixed_window', 1, cost => 2);
SELECT rl_check('k', 'fixed_window', 1, at => 'infinity');
SELECT rl_check(repeat('k', 5000), 'fixed_window', 1);
\set VERBOSITY default
-- extremes that are accepted
SELECT allowed, remaining FROM rl_check('k:max', 'token_bucket', 9223372036854775807,
	'36525 days', 9223372036854775807, 9223372036854775807, t(0));
SELECT allowed, remaining, retry_after > 0 AS waits FROM rl_check('k:max', 'token_bucket',
	9223372036854775807, '36525 days', 9223372036854775807, 9223372036854775807, t(1));
SELECT allowed, remaining FROM rl_check('k:max2', 'sliding_window_counter', 9223372036854775807,
	'36525 days', 9223372036854775807, NULL, t(0));
SELECT allowed FROM rl_check('k:old', 'fixed_window', 1, at => '1900-01-01 00:00:00+00');
-- a token bucket idle from the earliest time "at" takes to the latest
-- (70,000 years) at the largest rate: the refill does not overflow
SELECT allowed, remaining FROM rl_check('k:idle', 'token_bucket', 9223372036854775807,
	'1 microsecond', 9223372036854775807, 9223372036854775807, '4713-01-01 00:00:00+00 BC');
SELECT allowed, remaining FROM rl_check('k:idle', 'token_bucket', 9223372036854775807,
	'1 microsecond', 1, 9223372036854775807, '4713-01-01 00:00:00.000001+00 BC');
SELECT allowed, remaining FROM rl_check('k:idle', 'token_bucket', 9223372036854775807,
	'1 microsecond', 1, 9223372036854775807, '38000-01-01 00:00:00+00');
SELECT rl_allow('', 'sliding_window_counter', 1, at => t(0)) AS empty_key_is_a_key;
