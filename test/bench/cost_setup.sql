-- test/bench/cost_setup.sql: what cost.sh measures besides setup.sql's
-- functions, created once in its throwaway database.

-- rl_allow's policy form: the same limit as the algorithm form's cases.
-- bench_quota: the quota triggers' policy, a limit no benchmark reaches (1
-- million rows on one key in one statement included), so that every row is
-- admitted and the figures are those of the common case.
INSERT INTO rl_policy (name, algo, "limit", per)
VALUES ('bench_tb', 'token_bucket', 1000, '1 second'),
       ('bench_quota', 'token_bucket', 1000000000, '1 second');

-- A no-op PL/pgSQL row trigger: what users write first, for reference.
CREATE FUNCTION bench_plpgsql_trigger() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RETURN NEW;
END
$$;

-- One UNLOGGED table per way of inserting, all alike (a tenant, the key,
-- and a quantity, the cost= expression's column), so that no trigger is
-- created or dropped between runs: bench_plain has no trigger.
CREATE UNLOGGED TABLE bench_plain (tenant int NOT NULL, qty int NOT NULL);
CREATE UNLOGGED TABLE bench_floor (LIKE bench_plain);
CREATE UNLOGGED TABLE bench_plpgsql (LIKE bench_plain);
CREATE UNLOGGED TABLE bench_enforce (LIKE bench_plain);
CREATE UNLOGGED TABLE bench_enforce_cost (LIKE bench_plain);

CREATE TRIGGER floor BEFORE INSERT ON bench_floor
    FOR EACH ROW EXECUTE FUNCTION rl_floor_trigger();
CREATE TRIGGER noop BEFORE INSERT ON bench_plpgsql
    FOR EACH ROW EXECUTE FUNCTION bench_plpgsql_trigger();
CREATE TRIGGER quota BEFORE INSERT ON bench_enforce
    FOR EACH ROW EXECUTE FUNCTION rl_enforce('bench_quota', 'tenant');
CREATE TRIGGER quota BEFORE INSERT ON bench_enforce_cost
    FOR EACH ROW EXECUTE FUNCTION rl_enforce('bench_quota', 'tenant', 'cost=qty');
