-- leaky_bucket: a queue draining at limit per "per"; admitted calls are
-- told how long to wait so they leave at a smooth rate.
SELECT us, c.* FROM generate_series(0, 10) us,
	LATERAL c('lb:ex', 'leaky_bucket', 10, us) c;
SELECT * FROM c('lb:ex', 'leaky_bucket', 10, 100000);
-- admits the same calls as token_bucket
SELECT g.us, a.allowed AS leaky, b.allowed AS token
FROM generate_series(0, 3000000, 37000) AS g(us),
	LATERAL c('lb:same', 'leaky_bucket', 4, g.us, cost => 1 + (g.us / 37000) % 2, burst => 6) a,
	LATERAL c('lb:same', 'token_bucket', 4, g.us, cost => 1 + (g.us / 37000) % 2, burst => 6) b
WHERE a.allowed <> b.allowed;
-- burst: the queue holds up to burst units; denied calls have delay 0
SELECT * FROM c('lb:burst', 'leaky_bucket', 2, 0, cost => 3, burst => 4);
SELECT * FROM c('lb:burst', 'leaky_bucket', 2, 0, cost => 1, burst => 4);
SELECT * FROM c('lb:burst', 'leaky_bucket', 2, 0, cost => 1, burst => 4);
SELECT * FROM c('lb:burst', 'leaky_bucket', 2, 250000, cost => 0, burst => 4);
