-- test/bench/setup.sql: the three contenders of the benchmark, created in a
-- throwaway database by run.sh and cost.sh (after CREATE EXTENSION ratelimit).

-- The floor: a no-op C function with rl_allow's signature (test/bench/floor),
-- in both of rl_allow's forms: the algorithm form and the policy form.
CREATE FUNCTION rl_floor(key text, algo text, "limit" bigint,
                         per interval DEFAULT '1 second',
                         cost bigint DEFAULT 1, burst bigint DEFAULT NULL,
                         at timestamptz DEFAULT NULL)
RETURNS boolean
AS '$libdir/rl_floor', 'rl_floor'
LANGUAGE C VOLATILE;
CREATE FUNCTION rl_floor(key text, policy text, at timestamptz DEFAULT NULL,
                         cost bigint DEFAULT NULL)
RETURNS boolean
AS '$libdir/rl_floor', 'rl_floor'
LANGUAGE C VOLATILE;

-- The floor of a quota trigger (rl_enforce): a no-op C row trigger.
CREATE FUNCTION rl_floor_trigger() RETURNS trigger
AS '$libdir/rl_floor', 'rl_floor_trigger'
LANGUAGE C;

-- The peer: the token bucket a user would write by hand, on an UNLOGGED
-- table.  One statement per call: the upsert takes the row lock, refills at
-- "limit" per "per" up to a capacity of "limit" (a new key starts full),
-- takes one token if there is one, and returns the decision.  It uses the
-- real clock and never lets a key's time run backwards, like rl_allow.
CREATE UNLOGGED TABLE tb_bucket (
    key     text PRIMARY KEY,
    tokens  double precision NOT NULL,
    ts      timestamptz NOT NULL,
    allowed boolean NOT NULL
);

CREATE FUNCTION tb_allow(key text, "limit" bigint, per interval)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    rate    double precision := tb_allow."limit" / extract(epoch FROM tb_allow.per);
    ok      boolean;
BEGIN
    INSERT INTO tb_bucket AS b (key, tokens, ts, allowed)
    VALUES (tb_allow.key, tb_allow."limit" - 1, clock_timestamp(), true)
    ON CONFLICT (key) DO UPDATE SET (tokens, allowed, ts) = (
        SELECT r.tokens - CASE WHEN r.tokens >= 1 THEN 1 ELSE 0 END,
               r.tokens >= 1,
               greatest(b.ts, excluded.ts)
        FROM (SELECT least(tb_allow."limit", b.tokens + rate *
                           greatest(0, extract(epoch FROM excluded.ts - b.ts)))
                     AS tokens) r)
    RETURNING allowed INTO ok;
    RETURN ok;
END
$$;
