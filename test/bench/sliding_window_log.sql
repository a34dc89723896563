-- run.sh replaces @PER@ with a window in which a key sees about 200 calls
-- at the floor's throughput: the log stays full (100 live entries) and about
-- half the calls are admitted.  It fills every log first (prefill.sql), so
-- the run starts in that steady state.
\set k random(1, :nkeys)
SELECT rl_allow('k' || :k, 'sliding_window_log', 100, '@PER@');
