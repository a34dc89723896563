-- The limiter's clock (clock.c): a decision's time is the real clock's,
-- read from the CPU's time-stamp counter for a millisecond after each
-- reading of the system clock, where the kernel keeps time with that
-- counter.  Bursts of decisions (the counter's path) alternate with pauses
-- (past the millisecond: the system clock read again, a new anchor, and
-- the counter's rate measured between anchors).  Each key's last_seen,
-- the time of its only decision, lies between clock_timestamp() read
-- just before its burst and just after (within 100 us: the counter is
-- tied to the system clock within half a reading's span, well under a
-- microsecond on hardware, some microseconds under valgrind).
-- The window is an hour: rl_keys() lists a key only while its state
-- differs from a new key's, and under valgrind a burst can take long
-- enough for a bucket of 10 a second to refill before it is listed.
SELECT rl_reset_all() >= 0 AS reset;
CREATE FUNCTION clock_bursts(bursts int, per_burst int)
RETURNS TABLE (decisions bigint, outside bigint)
LANGUAGE plpgsql AS $$
DECLARE
	before timestamptz;
	after timestamptz;
	n bigint := 0;
	bad bigint := 0;
	m bigint;
BEGIN
	FOR b IN 1..bursts LOOP
		before := clock_timestamp();
		FOR i IN 1..per_burst LOOP
			PERFORM rl_allow('clock:' || b || ':' || i, 'token_bucket', 10, '1 hour');
		END LOOP;
		after := clock_timestamp();
		SELECT count(*), count(*) FILTER (
				WHERE last_seen < before - interval '100 microseconds'
				   OR last_seen > after + interval '100 microseconds')
			INTO m, decisions
			FROM rl_keys() WHERE key LIKE 'clock:' || b || ':%';
		n := n + m;
		bad := bad + decisions;
		PERFORM pg_sleep(0.001 * (1 + b % 12));
	END LOOP;
	decisions := n;
	outside := bad;
	RETURN NEXT;
END $$;
SELECT * FROM clock_bursts(40, 100);

DROP FUNCTION clock_bursts(int, int);
SELECT rl_reset_all() >= 0 AS reset;
