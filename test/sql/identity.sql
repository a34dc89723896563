-- State identity is (database, algorithm, key).
-- the same key under two algorithms: two states
SELECT * FROM c('id:k', 'fixed_window', 1, 0);
SELECT * FROM c('id:k', 'token_bucket', 1, 0);
SELECT * FROM c('id:k', 'fixed_window', 1, 1);
-- keys that differ only in case, spaces or trailing bytes are distinct
SELECT key, c.allowed FROM unnest(ARRAY['id:K', 'id:k ', 'id:k' || chr(10), '']) AS key,
	LATERAL c(key, 'fixed_window', 1, 2) c;
-- long keys (up to 4096 bytes) are stored whole: keys sharing a long
-- prefix, or differing only in their last byte, never share state
SELECT n, c.allowed FROM unnest(ARRAY[50, 51, 56, 57, 64, 114, 115, 1024, 4096]) AS n,
	LATERAL c(repeat('x', n - 1) || 'a', 'fixed_window', 1, 0) c;
SELECT n, c.allowed FROM unnest(ARRAY[50, 51, 56, 57, 64, 114, 115, 1024, 4096]) AS n,
	LATERAL c(repeat('x', n - 1) || 'b', 'fixed_window', 1, 0) c;
SELECT n, c.allowed FROM unnest(ARRAY[50, 51, 56, 57, 64, 114, 115, 1024, 4096]) AS n,
	LATERAL c(repeat('x', n - 1) || 'a', 'fixed_window', 1, 1) c;
-- multibyte keys
SELECT * FROM c('id:ключ:😀', 'fixed_window', 1, 0);
SELECT * FROM c('id:ключ:😀', 'fixed_window', 1, 1);
-- rl_allow returns the decision alone
SELECT rl_allow('id:allow', 'token_bucket', 2, at => t(0)),
	   rl_allow('id:allow', 'token_bucket', 2, at => t(1)),
	   rl_allow('id:allow', 'token_bucket', 2, at => t(2));
-- named notation, as the documentation shows it
SELECT allowed, "limit", remaining FROM rl_check(key => 'id:named', algo => 'leaky_bucket',
	"limit" => 5, per => '1 minute', cost => 2, burst => 10, at => t(0));
-- without "at" the real clock is used (not the transaction's now())
BEGIN;
SELECT rl_allow('id:clock', 'fixed_window', 1, '1 day') AS first;
SELECT (rl_check('id:clock', 'sliding_window_log', 5, '1 hour')).reset_at
	> clock_timestamp() + interval '59 minutes' AS resets_in_an_hour;
COMMIT;
