\set k random(1, :nkeys)
SELECT tb_allow('k' || :k, 1000, '1 second');
