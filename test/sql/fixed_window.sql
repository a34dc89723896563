-- fixed_window: a counter per window aligned on the Unix epoch.
-- Three per second: the fourth call in a second is denied until the next.
SELECT us, c.* FROM unnest(ARRAY[0, 100000, 200000, 300000, 999999, 1000000])
	AS us, LATERAL c('fw:a', 'fixed_window', 3, us) c;
-- the 2x burst at a window edge: 3 at the end of one window, 3 at the start
-- of the next
SELECT us, c.allowed FROM unnest(ARRAY[2999998, 2999999, 2999999, 3000000,
	3000000, 3000001]) AS us, LATERAL c('fw:edge', 'fixed_window', 3, us) c;
-- cost: 0 looks without consuming; 2 takes two units
SELECT * FROM c('fw:cost', 'fixed_window', 5, 0, cost => 0);
SELECT * FROM c('fw:cost', 'fixed_window', 5, 1, cost => 2);
SELECT * FROM c('fw:cost', 'fixed_window', 5, 2, cost => 2);
SELECT * FROM c('fw:cost', 'fixed_window', 5, 3, cost => 2);
SELECT * FROM c('fw:cost', 'fixed_window', 5, 4, cost => 1);
SELECT * FROM c('fw:cost', 'fixed_window', 5, 5, cost => 0);
-- windows are aligned on the epoch: a one-minute window starts at :00
SELECT * FROM c('fw:minute', 'fixed_window', 1, 59000000, per => '1 minute');
SELECT * FROM c('fw:minute', 'fixed_window', 1, 59500000, per => '1 minute');
SELECT * FROM c('fw:minute', 'fixed_window', 1, 60000000, per => '1 minute');
-- time never runs backwards for a key: a late caller is clamped to the
-- latest time seen and cannot reopen the previous window
SELECT * FROM c('fw:clamp', 'fixed_window', 1, 1000000);
SELECT * FROM c('fw:clamp', 'fixed_window', 1, 999999);
-- a new limit applies from the next call on, without a reset
SELECT * FROM c('fw:change', 'fixed_window', 2, 0);
SELECT * FROM c('fw:change', 'fixed_window', 2, 1);
SELECT * FROM c('fw:change', 'fixed_window', 3, 2);
SELECT * FROM c('fw:change', 'fixed_window', 1, 3, cost => 0);
