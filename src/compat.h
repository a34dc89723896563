/*-------------------------------------------------------------------------
 *
 * compat.h
 *		Every difference between the supported PostgreSQL majors (15, 16,
 *		17 and 18) that ratelimit's sources meet, and the only place that
 *		tests PG_VERSION_NUM.
 *
 * The other files write one spelling (ours, below) and include this header
 * after postgres.h and the PostgreSQL headers they need.  What 15 to 18
 * share needs nothing here: InitMaterializedSRF, MarkGUCPrefixReserved,
 * get_controlfile(DataDir, &crc_ok), WaitLatchOrSocket and the shared
 * memory hooks have the same form in all four.  Only the state file's
 * header records PG_VERSION_NUM itself (persist.c), as a value, so that a
 * file written by a build for another release is not read.  The TAP
 * harness's differences are made alike in test/t/RlHarness.pm.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_COMPAT_H
#define RL_COMPAT_H

#if PG_VERSION_NUM < 150000
#error "ratelimit needs PostgreSQL 15 or later"
#endif

/*
 * 16 moved the varlena macros (VARDATA_ANY, VARSIZE_ANY_EXHDR, ...) out of
 * postgres.h into varatt.h.
 */
#if PG_VERSION_NUM >= 160000
#include "varatt.h"
#endif

/*
 * The module's magic block.  18 lets it carry the module's name and
 * version, which pg_get_loaded_modules() shows; RL_VERSION comes from the
 * Makefile (default_version of ratelimit.control).
 */
#if PG_VERSION_NUM >= 180000
#define RL_MODULE_MAGIC \
	PG_MODULE_MAGIC_EXT(.name = "ratelimit", .version = RL_VERSION)
#else
#define RL_MODULE_MAGIC PG_MODULE_MAGIC
#endif

/*
 * A function that never returns.  18 replaced pg_attribute_noreturn(),
 * written after the declarator, with pg_noreturn, written before the
 * declaration; gcc and clang take the older attribute in front too, so
 * rl_noreturn goes in front: "rl_noreturn static void f(void);".
 */
#if PG_VERSION_NUM >= 180000
#define rl_noreturn pg_noreturn
#else
#define rl_noreturn pg_attribute_noreturn()
#endif

/*
 * A WaitEventSet that belongs to no transaction, for a set kept as long as
 * a connection (across transactions) and freed only by FreeWaitEventSet.
 * Up to 16 the first argument is the memory context to allocate it in and
 * nothing tracks the set.  17 made it the resource owner that tracks the
 * set (always allocated in TopMemoryContext).  Passing 16's TopMemoryContext
 * there makes 17 read a memory context as a resource owner (the "called
 * after release started" error); passing a transaction's owner would free
 * the set when that transaction ends, under the connection.  NULL: not
 * tracked, as before.  The caller includes storage/latch.h and
 * utils/memutils.h.
 */
#if PG_VERSION_NUM >= 170000
#define rl_waitset_create(nevents) CreateWaitEventSet(NULL, (nevents))
#else
#define rl_waitset_create(nevents) \
	CreateWaitEventSet(TopMemoryContext, (nevents))
#endif

/*
 * This backend's PGPROC number (the index GetPGProcByNumber takes).  17
 * named it MyProcNumber; before, it is the pgprocno of MyProc.  The caller
 * includes storage/proc.h.
 */
#if PG_VERSION_NUM >= 170000
#define rl_my_procno() ((int) MyProcNumber)
#else
#define rl_my_procno() (MyProc->pgprocno)
#endif

/*
 * A process's local transaction id, half of its virtual transaction id
 * (the sweeper of store_wal.c takes new ones).  17 moved it into
 * PGPROC.vxid.  The caller includes storage/proc.h.
 */
#if PG_VERSION_NUM >= 170000
#define rl_proc_lxid(proc) ((proc)->vxid.lxid)
#else
#define rl_proc_lxid(proc) ((proc)->lxid)
#endif

/*
 * A variable shared between the files of the library and nothing else.
 * 16 builds modules with -fvisibility=hidden, so such a variable is
 * reached directly; 15 does not, and a variable of default visibility in a
 * shared library is reached through the global offset table: one load
 * more per use on the store's hot path.  Hidden on every version alike.
 */
#if defined(__GNUC__) || defined(__clang__)
#define rl_hidden __attribute__((visibility("hidden")))
#else
#define rl_hidden
#endif

#endif							/* RL_COMPAT_H */
