-- test/bench/prefill.sql: put the sliding_window_log case in its steady
-- state before it runs.  Every key 'k1' .. 'k<n>' gets a fresh log of 100
-- entries spread evenly over the last window :'per', as if it had been
-- called at a steady rate; from then on entries expire as fast as a full log
-- admits calls.  Run by run.sh as a superuser (explicit "at"); prints the
-- number of entries logged, 100 n.
SELECT sum(rl_reset('k' || k, 'sliding_window_log')) AS reset
FROM generate_series(1, :n) k \gset
SELECT count(*) FILTER (WHERE a) AS filled
FROM (SELECT clock_timestamp() AS t0) s,
     generate_series(1, 100) i,
     LATERAL (SELECT rl_allow('k' || k, 'sliding_window_log', 100, :'per',
                              at => s.t0 - :'per'::interval * (100 - i) / 100) AS a
              FROM generate_series(1, :n) k) x;
