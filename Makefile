# ratelimit: rate limits and quotas inside PostgreSQL (PGXS)

EXTENSION = ratelimit
MODULE_big = ratelimit
OBJS = \
	src/ratelimit.o \
	src/algo_table.o \
	src/algo_window.o \
	src/algo_bucket.o \
	src/algo_log.o \
	src/algo_slots.o \
	src/clock.o \
	src/period.o \
	src/lua_scripts.o \
	src/engine_table.o \
	src/store.o \
	src/store_owner.o \
	src/store_entry.o \
	src/store_durable.o \
	src/store_wal.o \
	src/store_sweeper.o \
	src/store_engine.o \
	src/store_admin.o \
	src/store_slots.o \
	src/redis_breaker.o \
	src/redis_reply.o \
	src/redis_conn.o \
	src/redis_cluster.o \
	src/redis_script.o \
	src/redis_batch.o \
	src/redis_refund.o \
	src/redis_lease.o \
	src/redis_lease_worker.o \
	src/redis_engine.o \
	src/redis_reset.o \
	src/stats.o \
	src/refund.o \
	src/refund_amount.o \
	src/refund_queue.o \
	src/refund_tally.o \
	src/slots.o \
	src/dispatch.o \
	src/dispatch_admin.o \
	src/dispatch_slots.o \
	src/dispatch_durable.o \
	src/shed.o \
	src/dispatch_penalty.o \
	src/args.o \
	src/policy_row.o \
	src/policy.o \
	src/override.o \
	src/override_validate.o \
	src/policy_request.o \
	src/policy_limit.o \
	src/functions.o \
	src/usage.o \
	src/functions_admin.o \
	src/functions_slots.o \
	src/trigger.o \
	src/trigger_cost.o \
	src/trigger_key.o \
	src/persist.o
SHLIB_LINK += -lhiredis
# Calls between the module's own functions bind inside it (#9): no PLT
# stub or GOT load on the hot path, and an exported function may be
# inlined in its own file (nothing interposes on ratelimit's symbols).
PG_CFLAGS += $(shell $(CC) -Werror -fno-semantic-interposition -E -x c /dev/null >/dev/null 2>&1 && echo -fno-semantic-interposition)
SHLIB_LINK += -Wl,-Bsymbolic
# the release, as the control file states it (module magic on 18, make dist)
RL_VERSION := $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" $(EXTENSION).control)
PG_CPPFLAGS += -DRL_VERSION='"$(RL_VERSION)"'

DATA = $(wildcard sql/ratelimit--*.sql)
PGFILEDESC = "ratelimit - rate limits and quotas in shared memory"

# Regression and isolation suites run on a private server with the library
# preloaded: "make install" first, then "make installcheck".  Tests live in
# test/, expected outputs in expected/ (pg_regress looks in the output
# directory first).
REGRESS = setup identity fixed_window sliding_window_log \
	sliding_window_counter token_bucket leaky_bucket arguments privileges reset \
	policy trigger refund refund_incarnation multi wait headers observability \
	refund_aggregate refund_pending calendar override penalty adjust policy_limits concurrency durable guide priority \
	concurrency_keys priority_calls call_sites trigger_rows clock refund_tally
REGRESS_OPTS = --inputdir=test --outputdir=. \
	--temp-instance=$(CURDIR)/test/tmp_instance \
	--temp-config=$(CURDIR)/test/ratelimit.conf
ISOLATION = concurrent_key policy_reload refund_after_reset override_reload \
	concurrency_wait priority_slots
ISOLATION_OPTS = --inputdir=test --outputdir=. --load-extension=ratelimit \
	--temp-instance=$(CURDIR)/test/tmp_instance_iso \
	--temp-config=$(CURDIR)/test/ratelimit.conf
TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

# rebuild what a changed header affects
override autodepend = yes

# The Redis scripts, src/lua/*.lua, as C strings (rl_lua_<file name>):
# generated, not in git; a changed or added .lua rebuilds them.
LUA_SOURCES := $(sort $(wildcard src/lua/*.lua))
LUA_EMBED = $(or $(PERL),perl) src/lua_embed.pl
EXTRA_CLEAN = src/lua_scripts.c src/lua_scripts.h

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# after PGXS, which resets it: lets TAP tests "use RlModel"
PROVE_FLAGS += -I $(CURDIR)/test/t

src/lua_scripts.c: $(LUA_SOURCES) src/lua_embed.pl
	$(LUA_EMBED) $(LUA_SOURCES) > $@.tmp && mv $@.tmp $@

src/lua_scripts.h: $(LUA_SOURCES) src/lua_embed.pl
	$(LUA_EMBED) -h $(LUA_SOURCES) > $@.tmp && mv $@.tmp $@

# the algorithm table and the Redis engine name the scripts (their LLVM
# bitcode too, which a JIT-enabled server's build makes beside the objects)
src/algo_table.o src/redis_script.o src/algo_table.bc src/redis_script.bc: \
	src/lua_scripts.h

# The PGXN release archive META.json describes: $(DISTDIR)/ratelimit-X.Y.Z.zip
# holding what HEAD holds under ratelimit-X.Y.Z/ (X.Y.Z: default_version of
# ratelimit.control).  Made with "git archive", so only in a git checkout
# and only from committed files; outside git it refuses, since what a bare
# tree holds (build output, edits) is not a release.
DISTDIR ?= .

.PHONY: dist
dist:
	@test "$$(git rev-parse --show-toplevel 2>/dev/null)" = "$(CURDIR)" || \
		{ echo "make dist: $(CURDIR) is not a git checkout: the archive is made from a commit (git archive HEAD)" >&2; exit 1; }
	@git diff --quiet HEAD -- || \
		echo "make dist: note: uncommitted changes are not in the archive" >&2
	git archive --format=zip --prefix=$(EXTENSION)-$(RL_VERSION)/ \
		-o $(DISTDIR)/$(EXTENSION)-$(RL_VERSION).zip HEAD
