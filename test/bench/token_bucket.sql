\set k random(1, :nkeys)
SELECT rl_allow('k' || :k, 'token_bucket', 1000, '1 second');
