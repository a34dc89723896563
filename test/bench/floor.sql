\set k random(1, :nkeys)
SELECT rl_floor('k' || :k, 'token_bucket', 1000, '1 second');
