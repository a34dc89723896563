-- sliding_window_counter: the previous window's count, weighted by how much
-- of it the sliding window still covers, plus the current count.
-- The spec's worked example: 10 per second, 10 calls at 0..9 us, the 11th
-- at 10 us is denied with retry_after 1.09999 s.
SELECT count(*) FILTER (WHERE c.allowed) AS admitted
FROM generate_series(0, 9) us, LATERAL c('swc:ex', 'sliding_window_counter', 10, us) c;
SELECT * FROM c('swc:ex', 'sliding_window_counter', 10, 10);
SELECT * FROM c('swc:ex', 'sliding_window_counter', 10, 1099999, cost => 0);
SELECT * FROM c('swc:ex', 'sliding_window_counter', 10, 1100000);
SELECT * FROM c('swc:ex', 'sliding_window_counter', 10, 1100001);
-- the previous window fades: retry_after when the current count still fits
SELECT * FROM c('swc:fade', 'sliding_window_counter', 4, 500000, cost => 4);
SELECT * FROM c('swc:fade', 'sliding_window_counter', 4, 1250000);
SELECT * FROM c('swc:fade', 'sliding_window_counter', 4, 1500000);
SELECT * FROM c('swc:fade', 'sliding_window_counter', 4, 1750000);
SELECT * FROM c('swc:fade', 'sliding_window_counter', 4, 1800000);
-- a window more than one back is forgotten
SELECT * FROM c('swc:fade', 'sliding_window_counter', 4, 3000000, cost => 0);
-- time clamp
SELECT * FROM c('swc:clamp', 'sliding_window_counter', 2, 2000000, cost => 2);
SELECT * FROM c('swc:clamp', 'sliding_window_counter', 2, 1000000);
