-- rl_reset forgets one key (one algorithm or all); rl_reset_all forgets
-- every key of the database.
SELECT * FROM c('r:a', 'fixed_window', 1, 0);
SELECT * FROM c('r:a', 'token_bucket', 1, 0);
SELECT * FROM c('r:b', 'fixed_window', 1, 0);
SELECT rl_reset('r:a', 'fixed_window');
SELECT rl_reset('r:a', 'fixed_window');
SELECT * FROM c('r:a', 'fixed_window', 1, 1);
SELECT * FROM c('r:a', 'token_bucket', 1, 1);
SELECT rl_reset('r:a');
SELECT * FROM c('r:a', 'token_bucket', 1, 2);
-- a sliding log gives its blocks back to the pool
SELECT count(*) FILTER (WHERE c.allowed) FROM generate_series(1, 400) i,
	LATERAL c('r:log', 'sliding_window_log', 1000, i) c;
SELECT pool_used > 0 AS log_uses_pool FROM rl_store_info();
SELECT rl_reset_all() > 0 AS dropped;
SELECT used, pool_used FROM rl_store_info();
SELECT * FROM c('r:b', 'fixed_window', 1, 1);
SELECT capacity >= 20000 AS sized, partitions FROM rl_store_info();
