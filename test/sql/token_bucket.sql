-- token_bucket: starts full, refills at limit per "per", admits bursts up
-- to "burst".
-- The spec's worked example: 10 per second; 10 calls at 0..9 us, the 11th
-- at 10 us denied with retry_after ~0.1 s, allowed again at 100 ms.
SELECT us, c.* FROM generate_series(0, 10) us,
	LATERAL c('tb:ex', 'token_bucket', 10, us) c;
SELECT * FROM c('tb:ex', 'token_bucket', 10, 99999, cost => 0);
SELECT * FROM c('tb:ex', 'token_bucket', 10, 100000);
-- the refill is exact: 3 per 7 seconds
SELECT * FROM c('tb:odd', 'token_bucket', 3, 0, per => '7 seconds', cost => 3);
SELECT * FROM c('tb:odd', 'token_bucket', 3, 2333333, per => '7 seconds');
SELECT * FROM c('tb:odd', 'token_bucket', 3, 2333334, per => '7 seconds');
-- burst above the rate; cost up to the burst
SELECT * FROM c('tb:burst', 'token_bucket', 1, 0, per => '1 minute', cost => 5, burst => 5);
SELECT * FROM c('tb:burst', 'token_bucket', 1, 1, per => '1 minute', burst => 5);
SELECT * FROM c('tb:burst', 'token_bucket', 1, 60000001, per => '1 minute', burst => 5);
-- never above the burst however long the key idles
SELECT * FROM c('tb:burst', 'token_bucket', 1, 999000000000, per => '1 minute', cost => 0, burst => 5);
-- a smaller burst caps the tokens at once
SELECT * FROM c('tb:burst', 'token_bucket', 1, 999000000001, per => '1 minute', cost => 0, burst => 2);
-- a new window length keeps the tokens
SELECT * FROM c('tb:per', 'token_bucket', 10, 0, cost => 4);
SELECT * FROM c('tb:per', 'token_bucket', 10, 0, per => '1 hour', cost => 0);
-- time clamp: an earlier time adds no tokens and takes none away
SELECT * FROM c('tb:clamp', 'token_bucket', 1, 5000000, cost => 1);
SELECT * FROM c('tb:clamp', 'token_bucket', 1, 0);
