-- A script deciding or refunding one call: the prelude, this line, the
-- algorithm's setup (the buckets' part) and its decision or refund.
use(KEYS, ARGV)
