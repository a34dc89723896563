-- token_bucket.sql through Redis: run.sh runs the redis_* cases with
-- ratelimit.backend = redis, against its own redis-server.
\set k random(1, :nkeys)
SELECT rl_allow('k' || :k, 'token_bucket', 1000, '1 second');
