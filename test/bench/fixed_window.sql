\set k random(1, :nkeys)
SELECT rl_allow('k' || :k, 'fixed_window', 1000, '1 second');
