-- sliding_window_log: exact, an entry lives for one window after its time.
SELECT us, c.* FROM unnest(ARRAY[0, 100000, 200000, 300000, 999999, 1000000,
	1000001, 1100000, 1100001]) AS us,
	LATERAL c('swl:a', 'sliding_window_log', 3, us) c;
-- retry_after names the oldest entry whose expiry makes room for the cost
SELECT * FROM c('swl:cost', 'sliding_window_log', 5, 0, cost => 2);
SELECT * FROM c('swl:cost', 'sliding_window_log', 5, 100000, cost => 2);
SELECT * FROM c('swl:cost', 'sliding_window_log', 5, 200000, cost => 1);
SELECT * FROM c('swl:cost', 'sliding_window_log', 5, 300000, cost => 3);
SELECT * FROM c('swl:cost', 'sliding_window_log', 5, 300000, cost => 0);
-- calls in the same microsecond share one entry
SELECT count(*) FILTER (WHERE c.allowed) AS admitted
FROM generate_series(1, 150) i, LATERAL c('swl:same', 'sliding_window_log', 100, 42 + 0 * i) c;
SELECT * FROM c('swl:same', 'sliding_window_log', 100, 1000041, cost => 0);
SELECT * FROM c('swl:same', 'sliding_window_log', 100, 1000042, cost => 0);
-- many entries across pool blocks, expiring from the head
SELECT count(*) FILTER (WHERE c.allowed) AS admitted
FROM generate_series(0, 299) i, LATERAL c('swl:many', 'sliding_window_log', 200, i * 1000) c;
SELECT * FROM c('swl:many', 'sliding_window_log', 200, 1000000, cost => 0);
SELECT * FROM c('swl:many', 'sliding_window_log', 200, 1150000, cost => 0);
SELECT * FROM c('swl:many', 'sliding_window_log', 200, 1199000, cost => 0);
SELECT * FROM c('swl:many', 'sliding_window_log', 200, 1199001, cost => 0);
-- a lower limit applies at once to the live entries
SELECT * FROM c('swl:change', 'sliding_window_log', 5, 0, cost => 4);
SELECT * FROM c('swl:change', 'sliding_window_log', 3, 1, cost => 0);
SELECT * FROM c('swl:change', 'sliding_window_log', 3, 2);
