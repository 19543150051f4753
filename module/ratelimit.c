/* ratelimit.c - RATELIMIT.DECIDE, lua/sliding_window.lua as a Redis module.
 *
 *   RATELIMIT.DECIDE <numkeys> <key>... <arg>...
 *
 * The keys and args are exactly the script's KEYS and ARGV, the reply is
 * exactly its reply, and the stored data are the same (a sorted set per
 * log window, member "<cum>:<cost>" in hex, score = Redis time in us,
 * strictly increasing within a key; a hash per bucketed window, field =
 * bucket end in ms, value = units; a string "<tat>:<frac>:<ms>:<limit>:<owed>"
 * (or, written before, "<tat>:<frac>") per GCRA
 * bucket): agents on the script and agents on the
 * module share one Redis and never over-admit. The script's header says
 * the rules; this file follows it step for step, reading through the key
 * API (two O(log n) reads per log window, no reply parsing, no Lua).
 *
 * Replication: the decision depends on the time, so it is never replicated
 * as such. Every write is propagated as the plain command it amounts to
 * (ZADD, ZREMRANGEBYSCORE, HSET, HDEL, PEXPIREAT with the absolute time),
 * wrapped in MULTI/EXEC by Redis: a replica or an AOF replay holds the same
 * windows, TTLs included, without the module.
 *
 * Memory: no deny-oom flag (a denial writes nothing and must still be
 * answered, as with the script); over maxmemory an admission answers the
 * OOM error and writes nothing. On a server whose maxmemory-policy may
 * evict keys, every call answers an EVICTS error (the windows could vanish
 * and admit more than the limit) unless the module was loaded with
 * allow-eviction.
 *
 * Versions: RATELIMIT.VERSION answers [<protocol>, <product version>]; the
 * protocol (also the module version MODULE LIST shows) names the contract
 * of RATELIMIT.DECIDE (its arguments and replies) and only changes when
 * that does; agents read it at connect and use the module only on a
 * protocol they speak. A module without the command (before 1.1.0) speaks
 * protocol 1; this one speaks 6 (5: reserve, then settle; 4: in-flight
 * leases and calendar quotas; 3: pools; 2: GCRA), a superset of the ones
 * before it.
 *
 * Load arguments: allow-eviction. A build with -DRATELIMIT_TEST_CLOCK
 * (module/ratelimit-test.so, for the tests only) also takes test-clock:
 * the time is then read from the hash test:clock (fields s, us) as the
 * script's test copies do, and RATELIMIT.TEST-FAIL-ALLOC makes a scratch
 * array's growth fail (the out-of-memory paths); and test-protocol=<n>
 * (RATELIMIT.VERSION reports protocol n) and test-no-version (no
 * RATELIMIT.VERSION, as a module before it): the agent's version checks.
 * A production build refuses those arguments and has none of it. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "rl_module.h"

#define RL_MODULE_NAME    "ratelimit"
/* The protocol of RATELIMIT.DECIDE: what RATELIMIT.VERSION and MODULE LIST
 * report. 1: the log and precision= windows; 2: also GCRA windows
 * ("gcra:<ms>:<burst>"), every protocol-1 call answered as before; 3:
 * also pools (a last pair "pool:..."), every protocol-2 call answered as
 * before; 4: also in-flight leases (a pair "lease:<ms>:<id>", and
 * RATELIMIT.RELEASE) and calendar quotas ("cal:<kind>:<tz>:<anchor>"), every
 * protocol-3 call answered as before; 5: also reserve, then settle (a last
 * pair "settle:<ms>", and RATELIMIT.SETTLE), every protocol-4 call answered
 * as before; 6: RATELIMIT.SETTLE also answers what the windows have left
 * (6 integers instead of 2), every other call answered as before. */
#define RL_MODULE_VERSION 6
#ifndef RL_PRODUCT_VERSION
#define RL_PRODUCT_VERSION "unknown"
#endif

#define RL_ERR_EVICTS_TEXT                                                                   \
	"EVICTS ratelimit: maxmemory-policy may evict keys and admit more than the limit " \
	"(set noeviction, or load the module with allow-eviction)"
#define RL_STACK_ARGS 64

static int allow_eviction;
#ifdef RATELIMIT_TEST_CLOCK
static int test_clock;
#endif

/* The time of this call, us: Redis's own clock (the script's TIME). */
static int rl_now(RedisModuleCtx *ctx, int64_t *now)
{
	struct timespec ts;

#ifdef RATELIMIT_TEST_CLOCK
	if (test_clock) {
		RedisModuleString *name = RedisModule_CreateString(ctx, "test:clock", 10);
		RedisModuleKey *k = RedisModule_OpenKey(ctx, name, REDISMODULE_READ);
		RedisModuleString *s = NULL, *us = NULL;
		long long vs = 0, vus = 0;
		int rc = -1;

		if (RedisModule_KeyType(k) == REDISMODULE_KEYTYPE_HASH &&
		    RedisModule_HashGet(k, REDISMODULE_HASH_CFIELDS, "s", &s, "us", &us, NULL) ==
		        REDISMODULE_OK &&
		    s && us && RedisModule_StringToLongLong(s, &vs) == REDISMODULE_OK &&
		    RedisModule_StringToLongLong(us, &vus) == REDISMODULE_OK &&
		    vs > -9000000000LL && vs < 9000000000LL && vus > -1000000000LL &&
		    vus < 1000000000LL) {
			*now = vs * 1000000 + vus;
			rc = 0;
		}
		if (s)
			RedisModule_FreeString(ctx, s);
		if (us)
			RedisModule_FreeString(ctx, us);
		RedisModule_CloseKey(k);
		RedisModule_FreeString(ctx, name);
		return rc;
	}
#endif
	(void)ctx;
	if (RedisModule_Microseconds) {
		*now = (int64_t)RedisModule_Microseconds();
		return 0;
	}
	/* (the clock Redis's TIME reads) */
	if (clock_gettime(CLOCK_REALTIME, &ts) == -1)
		return -1;
	*now = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	return 0;
}
/* What window <s> of <d> takes of its limit: the cost, or one slot of
 * the leases whatever the cost. */
static int64_t unit_of(const struct rl_decision *d, const struct rl_state *s)
{
	return s->w->lease_ms ? 1 : d->cost;
}

/* Decides <d> over keys <keys> at <now> and writes the reply (the
 * script's array, or an error). <oom>: Redis is over maxmemory. */
static void decide(RedisModuleCtx *ctx, RedisModuleString **keys, const struct rl_decision *d,
                   int64_t now, int oom)
{
	struct rl_state st[RL_MAX_WINDOWS];
	struct rl_pool_state ps;
	const struct rl_state *bs;
	const char *err = NULL;
	size_t i, best = 0;
	int allowed = 1, code = 0, pooled_read = 0, have = 0;
	int64_t best_rem = 0, best_reset = 0, best_retry = 0;

	/* (the parser gives 1..RL_MAX_WINDOWS; said again for the reader) */
	if (d->nwin < 1 || d->nwin > RL_MAX_WINDOWS) {
		RedisModule_ReplyWithError(ctx, RL_ERR_ARGS_TEXT);
		return;
	}
	if (d->w[0].burst) {
		rl_gcra_decide(ctx, keys[d->key0], d->nwin > 1 ? keys[d->key0 + 1] : NULL, d, now, oom,
		               d->settle_ms ? keys[d->key0 + d->nwin] : NULL);
		return;
	}
	rl_scratch_begin();
	for (i = 0; i < d->nwin; i++) {
		struct rl_state *s = &st[i];

		memset(s, 0, sizeof(*s));
		s->name = keys[d->key0 + i];
		s->w = &d->w[i];
		/* Inclusive bound: score <= now - window is out, so an entry
		 * exactly one window old does not count. */
		s->cut = now - s->w->win_ms * 1000;
		if (s->w->lease_ms)
			err = rl_lease_read(ctx, s, now);
		else if (s->w->cal)
			err = rl_quota_read(ctx, s, now);
		else
			err = s->w->prec_ms ? rl_log_read_buckets(ctx, s, now) : rl_log_read(ctx, s);
		if (err)
			goto fail;
		if (s->count + unit_of(d, s) > s->w->limit)
			allowed = 0;
	}
	if (d->pooled) {
		err = rl_pool_read(ctx, &ps, &d->pool, keys[d->key0 + d->nwin],
		                   keys[d->key0 + d->nwin + 1], now, d->cost);
		if (err)
			goto fail;
		pooled_read = 1;
		if (!ps.admits)
			allowed = 0;
	}

	if (allowed) {
		/* Over maxmemory an admission is refused, with nothing written
		 * (the script's ZADD is refused the same way). */
		if (oom) {
			err = RL_ERR_OOM_TEXT;
			goto fail;
		}
		/* Window by window: its write, its trim, its expiry, through one
		 * handle. (The script writes every window before it trims any;
		 * the order within a key is the same, so are the data.) */
		for (i = 0; i < d->nwin; i++) {
			struct rl_state *s = &st[i];
			int64_t rem = s->w->limit - s->count - unit_of(d, s);
			RedisModuleKey *k;
			int rc;

			if (s->w->cal) {
				if (rl_quota_add(ctx, s, now, d->cost) == -1) {
					err = "ERR ratelimit: the server refused the write";
					goto fail;
				}
				if (!have || rem < best_rem) {
					best = i;
					best_rem = rem;
					have = 1;
				}
				continue;
			}
			k = RedisModule_OpenKey(ctx, s->name, REDISMODULE_READ | REDISMODULE_WRITE);
			if (s->w->prec_ms) {
				rl_log_add_bucket(ctx, k, s, d->cost);
				rc = 0;
			} else if (s->w->lease_ms) {
				rc = rl_lease_add(ctx, k, s, now);
			} else {
				rc = rl_log_add(ctx, k, s, now, d->cost);
			}
			if (rc == -1) {
				/* (the windows before it hold their admission, as their
				 * replicas do: the caller sees an error, fail-closed) */
				RedisModule_CloseKey(k);
				err = "ERR ratelimit: the server refused the write";
				goto fail;
			}
			rl_log_trim(ctx, k, s, now, rl_log_ttl_ms(s, now));
			RedisModule_CloseKey(k);
			/* (the leases decide an admission only alone: the headers
			 * tell the rate) */
			if ((!have || rem < best_rem) && (d->nwin == 1 || !s->w->lease_ms)) {
				best = i;
				best_rem = rem;
				have = 1;
			}
		}
		if (d->pooled && rl_pool_admit(ctx, &ps, now, d->cost) == -1) {
			err = "ERR ratelimit: the server refused the write";
			goto fail;
		}
		if (d->settle_ms) {
			int64_t sc[RL_MAX_WINDOWS];

			for (i = 0; i < d->nwin; i++)
				sc[i] = st[i].score;
			if (rl_settle_write(ctx, keys[d->key0 + d->nwin], d, sc, d->nwin, now) == -1) {
				err = "ERR ratelimit: the server refused the write";
				goto fail;
			}
		}
		/* reset: when the oldest in-window entry or bucket (perhaps the
		 * new one) leaves */
		best_reset = (st[best].has_oldest && !st[best].w->cal ? st[best].oldest : st[best].score) +
		             st[best].w->win_ms * 1000 - now;
		best_retry = 0;
	} else {
		for (i = 0; i < d->nwin; i++) {
			RedisModuleKey *k;

			if (st[i].w->cal || !rl_log_has_expired(ctx, &st[i]))
				continue;
			k = RedisModule_OpenKey(ctx, st[i].name, REDISMODULE_READ | REDISMODULE_WRITE);
			rl_log_trim(ctx, k, &st[i], now, -1);
			RedisModule_CloseKey(k);
		}
		if (d->pooled)
			rl_pool_trim(ctx, &ps);
		for (i = 0; i < d->nwin; i++) {
			struct rl_state *s = &st[i];
			int64_t need = s->count + unit_of(d, s) - s->w->limit, retry;

			if (need <= 0)
				continue;
			/* cost > limit never fits: a whole window rather than a loop */
			retry = s->w->win_ms * 1000;
			if (s->w->lease_ms)
				retry = rl_lease_retry(ctx, s, need, now);
			/* a quota's units leave together, at its period's end */
			else if (s->w->cal)
				retry = s->oldest - now;
			else if (need <= s->count)
				retry = s->w->prec_ms ? rl_log_retry_buckets(s, need, now)
				                      : rl_log_retry(ctx, s, need, now);
			if (!have || retry > best_retry) {
				best = i;
				best_retry = retry;
				have = 1;
			}
		}
		/* the pool, when it refuses, after the windows: it decides only
		 * with a longer retry (need: the units that must leave it) */
		if (d->pooled && !ps.admits) {
			int64_t need = ps.log.count + d->cost - ps.room, retry = ps.w.win_ms * 1000;

			if (need <= ps.log.count)
				retry = rl_log_retry(ctx, &ps.log, need, now);
			if (ps.code == 2) {
				int64_t r = rl_pool_retry_share(ctx, &ps, d->cost,
				                                retry + now - ps.w.win_ms * 1000,
				                                need <= ps.log.count, now);

				if (r >= 0)
					retry = r;
			}
			if (!have || retry > best_retry) {
				best = d->nwin;
				best_retry = retry;
				code = ps.code;
			}
		}
		bs = code ? &ps.log : &st[best];
		best_rem = (code ? ps.room : bs->w->limit) - bs->count;
		if (best_rem < 0)
			best_rem = 0;
		best_reset = bs->has_oldest ? bs->oldest + bs->w->win_ms * 1000 - now
		                            : bs->w->win_ms * 1000;
	}
	rl_scratch_release_dead();
	if (d->pooled)
		rl_pool_release(&ps);
	bs = code ? &ps.log : &st[best];
	RedisModule_ReplyWithArray(ctx, d->pooled ? 7 : 6);
	RedisModule_ReplyWithLongLong(ctx, allowed);
	RedisModule_ReplyWithLongLong(ctx, bs->w->limit);
	RedisModule_ReplyWithLongLong(ctx, best_rem);
	RedisModule_ReplyWithLongLong(ctx, best_reset);
	RedisModule_ReplyWithLongLong(ctx, best_retry);
	RedisModule_ReplyWithLongLong(ctx, (long long)best);
	if (d->pooled)
		RedisModule_ReplyWithLongLong(ctx, code);
	return;
fail:
	rl_scratch_release_dead();
	if (pooled_read)
		rl_pool_release(&ps);
	RedisModule_ReplyWithError(ctx, err);
}

/* Cluster and ACL: the keys are argv[2 .. 2 + numkeys), as for EVAL. */
static void report_keys(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
	long long nk;
	int i;

	if (argc < 2 || RedisModule_StringToLongLong(argv[1], &nk) != REDISMODULE_OK || nk < 0 ||
	    nk > argc - 2)
		return;
	for (i = 0; i < (int)nk; i++)
		RedisModule_KeyAtPos(ctx, 2 + i);
}

/* RATELIMIT.DECIDE <numkeys> <key>... <arg>... */
/* The protocol RATELIMIT.VERSION reports (a test build may report another). */
static long long version_protocol = RL_MODULE_VERSION;

/* RATELIMIT.VERSION: [<protocol>, <product version>]. */
static int cmd_version(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
	(void)argv;
	if (argc != 1)
		return RedisModule_WrongArity(ctx);
	RedisModule_ReplyWithArray(ctx, 2);
	RedisModule_ReplyWithLongLong(ctx, version_protocol);
	RedisModule_ReplyWithSimpleString(ctx, RL_PRODUCT_VERSION);
	return REDISMODULE_OK;
}

static int cmd_decide(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
	struct rl_arg stack_args[RL_STACK_ARGS], *args = stack_args;
	struct rl_decision d;
	RedisModuleString **keys;
	long long nk;
	size_t nargs, i, n;
	int64_t now;
	enum rl_err e;
	int flags, oom;

	if (RedisModule_IsKeysPositionRequest && RedisModule_IsKeysPositionRequest(ctx)) {
		report_keys(ctx, argv, argc);
		return REDISMODULE_OK;
	}
	if (argc < 2)
		return RedisModule_WrongArity(ctx);
	if (RedisModule_StringToLongLong(argv[1], &nk) != REDISMODULE_OK)
		return RedisModule_ReplyWithError(ctx, "ERR value is not an integer or out of range");
	if (nk < 0)
		return RedisModule_ReplyWithError(ctx, "ERR Number of keys can't be negative");
	if (nk > argc - 2)
		return RedisModule_ReplyWithError(ctx,
		                                  "ERR Number of keys can't be greater than number of args");
	flags = RedisModule_GetContextFlags(ctx);
	if ((flags & REDISMODULE_CTX_FLAGS_EVICT) && !allow_eviction)
		return RedisModule_ReplyWithError(ctx, RL_ERR_EVICTS_TEXT);
	oom = (flags & REDISMODULE_CTX_FLAGS_OOM) != 0;
	if (rl_now(ctx, &now) == -1)
		return RedisModule_ReplyWithError(ctx, "ERR ratelimit: no clock");
	keys = argv + 2;
	nargs = (size_t)(argc - 2 - nk);
	if (nargs > RL_STACK_ARGS) {
		args = RedisModule_Alloc(nargs * sizeof(*args));
		if (!args)
			return RedisModule_ReplyWithError(ctx, "ERR ratelimit: out of memory");
	}
	for (i = 0; i < nargs; i++)
		args[i].p = RedisModule_StringPtrLen(argv[2 + nk + (long long)i], &args[i].len);

	if (!rl_args_is_batch(args, nargs)) {
		e = rl_args_parse_single(args, nargs, (size_t)nk, &d);
		if (e != RL_OK)
			RedisModule_ReplyWithError(ctx, rl_args_err_text(e));
		else
			decide(ctx, keys, &d, now, oom);
	} else if (rl_args_batch_check(args, nargs, (size_t)nk, &n) != RL_OK) {
		RedisModule_ReplyWithError(ctx, RL_ERR_BATCH_TEXT);
	} else {
		struct rl_batch_iter it = { 0, 2 };

		RedisModule_ReplyWithArray(ctx, (long)n);
		for (i = 0; i < n; i++) {
			e = rl_args_batch_next(args, &it, &d);
			if (e != RL_OK)
				RedisModule_ReplyWithError(ctx, rl_args_err_text(e));
			else
				decide(ctx, keys, &d, now, oom);
		}
	}
	if (args != stack_args)
		RedisModule_Free(args);
	return REDISMODULE_OK;
}

/* RATELIMIT.SETTLE <numkeys> <key>... <real cost> <limit> <window>...:
 * the script's "settle" mode; replies [<code>, <real - reserved>] and,
 * when every window was read, <limit> <remaining> <reset> <index> of the
 * one with the least left (protocol 6). */
static int cmd_settle(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
	struct rl_arg args[1 + 2 * RL_SETTLE_MAX];
	struct rl_settled st;
	long long nk;
	const char *err;
	size_t nargs, i;
	int64_t now;

	if (RedisModule_IsKeysPositionRequest && RedisModule_IsKeysPositionRequest(ctx)) {
		report_keys(ctx, argv, argc);
		return REDISMODULE_OK;
	}
	if (argc < 2)
		return RedisModule_WrongArity(ctx);
	if (RedisModule_StringToLongLong(argv[1], &nk) != REDISMODULE_OK || nk < 0 || nk > argc - 2)
		return RedisModule_ReplyWithError(ctx, RL_ERR_ARGS_TEXT);
	if ((RedisModule_GetContextFlags(ctx) & REDISMODULE_CTX_FLAGS_EVICT) && !allow_eviction)
		return RedisModule_ReplyWithError(ctx, RL_ERR_EVICTS_TEXT);
	if (rl_now(ctx, &now) == -1)
		return RedisModule_ReplyWithError(ctx, "ERR ratelimit: no clock");
	nargs = (size_t)(argc - 2 - nk);
	if (nargs > 1 + 2 * RL_SETTLE_MAX)
		return RedisModule_ReplyWithError(ctx, RL_ERR_ARGS_TEXT);
	for (i = 0; i < nargs; i++)
		args[i].p = RedisModule_StringPtrLen(argv[2 + nk + (long long)i], &args[i].len);
	rl_scratch_begin();
	err = rl_settle(ctx, argv + 2, (size_t)nk, args, nargs, now, &st);
	rl_scratch_release_dead();
	if (err)
		return RedisModule_ReplyWithError(ctx, err);
	RedisModule_ReplyWithArray(ctx, st.known ? 6 : 2);
	RedisModule_ReplyWithLongLong(ctx, st.code);
	RedisModule_ReplyWithLongLong(ctx, st.delta);
	if (st.known) {
		RedisModule_ReplyWithLongLong(ctx, st.state.limit);
		RedisModule_ReplyWithLongLong(ctx, st.state.remaining);
		RedisModule_ReplyWithLongLong(ctx, st.state.reset);
		RedisModule_ReplyWithLongLong(ctx, (long long)st.index);
	}
	return REDISMODULE_OK;
}

/* RATELIMIT.RELEASE <key> <lease id>: the script's "release" mode (its
 * KEYS[1], ARGV[2]); replies [<code>, <leases left>]. */
static int cmd_release(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
	long long code, live;
	const char *err, *id;
	size_t len;
	int64_t now;

	if (RedisModule_IsKeysPositionRequest && RedisModule_IsKeysPositionRequest(ctx)) {
		if (argc >= 2)
			RedisModule_KeyAtPos(ctx, 1);
		return REDISMODULE_OK;
	}
	if (argc != 3)
		return RedisModule_WrongArity(ctx);
	if ((RedisModule_GetContextFlags(ctx) & REDISMODULE_CTX_FLAGS_EVICT) && !allow_eviction)
		return RedisModule_ReplyWithError(ctx, RL_ERR_EVICTS_TEXT);
	id = RedisModule_StringPtrLen(argv[2], &len);
	if (!rl_args_is_lease_id(id, len))
		return RedisModule_ReplyWithError(ctx, RL_ERR_ARGS_TEXT);
	if (rl_now(ctx, &now) == -1)
		return RedisModule_ReplyWithError(ctx, "ERR ratelimit: no clock");
	err = rl_lease_release(ctx, argv[1], argv[2], now, &code, &live);
	if (err)
		return RedisModule_ReplyWithError(ctx, err);
	RedisModule_ReplyWithArray(ctx, 2);
	RedisModule_ReplyWithLongLong(ctx, code);
	return RedisModule_ReplyWithLongLong(ctx, live);
}

#ifdef RATELIMIT_TEST_CLOCK
/* RATELIMIT.TEST-FAIL-ALLOC <n> (test build only): empties the scratch
 * arrays, so that they grow again from nothing, and makes the <n>th growth
 * from now on fail (0: none), as an out-of-memory Realloc would. */
static int cmd_test_fail_alloc(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
	long long n;

	if (argc != 2)
		return RedisModule_WrongArity(ctx);
	if (RedisModule_StringToLongLong(argv[1], &n) != REDISMODULE_OK || n < 0)
		return RedisModule_ReplyWithError(ctx, "ERR value is not an integer or out of range");
	rl_scratch_free(n);
	return RedisModule_ReplyWithLongLong(ctx, n);
}
#endif

/* Every API the command needs, by name (a server lacking one is refused at
 * load with that name, never a NULL call later). */
#define RL_REQUIRED(X)                                                                   \
	X(CreateCommand) X(OpenKey) X(CloseKey) X(KeyType) X(ZsetAdd) X(ZsetRem)            \
	X(ZsetFirstInScoreRange) X(ZsetLastInScoreRange) X(ZsetRangeCurrentElement)         \
	X(ZsetRangeNext) X(ZsetRangeStop) X(ZsetRangeEndReached) X(HashGet) X(HashSet)      \
	X(ScanKey) X(ScanCursorCreate) X(ScanCursorDestroy) X(SetAbsExpire) X(Replicate)    \
	X(GetContextFlags) X(ReplyWithArray) X(ReplyWithLongLong) X(ReplyWithError)          \
	X(ReplyWithSimpleString)                                                             \
	X(WrongArity) X(StringPtrLen) X(StringToLongLong) X(CreateString)                   \
	X(CreateStringFromLongLong) X(FreeString) X(RetainString) X(Alloc) X(Realloc)        \
	X(Free) X(Log) X(NotifyKeyspaceEvent) X(StringSet) X(StringDMA) X(ValueLength) X(DeleteKey) \
	X(ZsetScore)

/* The two symbols Redis looks up (everything else is hidden). */
#define RL_EXPORT __attribute__((visibility("default")))

/* Load: RedisModule_OnLoad(ctx, argv, argc) with the load arguments. */
RL_EXPORT int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
RL_EXPORT int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
	const char *missing = NULL;
	int keyspecs, i, with_version = 1;

	if (RedisModule_Init(ctx, RL_MODULE_NAME, RL_MODULE_VERSION, REDISMODULE_APIVER_1) ==
	    REDISMODULE_ERR)
		return REDISMODULE_ERR;
#define RL_CHECK(name) \
	if (!missing && !RedisModule_##name) \
		missing = "RedisModule_" #name;
	RL_REQUIRED(RL_CHECK)
#undef RL_CHECK
	if (missing) {
		if (RedisModule_Log)
			RedisModule_Log(ctx, "warning",
			                "ratelimit: this server lacks %s; the module cannot load "
			                "(keep the script: redis-engine script)",
			                missing);
		return REDISMODULE_ERR;
	}
	allow_eviction = 0;
	for (i = 0; i < argc; i++) {
		const char *a = RedisModule_StringPtrLen(argv[i], NULL);

		if (strcasecmp(a, "allow-eviction") == 0) {
			allow_eviction = 1;
			continue;
		}
		if (strcasecmp(a, "test-clock") == 0) {
#ifdef RATELIMIT_TEST_CLOCK
			test_clock = 1;
			RedisModule_Log(ctx, "warning",
			                "ratelimit: TEST BUILD: the time is read from the hash "
			                "test:clock (never for production)");
			if (RedisModule_CreateCommand(ctx, "ratelimit.test-fail-alloc", cmd_test_fail_alloc,
			                              "write", 0, 0, 0) == REDISMODULE_ERR)
				return REDISMODULE_ERR;
			continue;
#else
			RedisModule_Log(ctx, "warning",
			                "ratelimit: test-clock is not available in this build");
			return REDISMODULE_ERR;
#endif
		}
#ifdef RATELIMIT_TEST_CLOCK
		if (strncasecmp(a, "test-protocol=", 14) == 0) {
			version_protocol = strtoll(a + 14, NULL, 10);
			continue;
		}
		if (strcasecmp(a, "test-no-version") == 0) {
			with_version = 0;
			continue;
		}
#endif
		RedisModule_Log(ctx, "warning", "ratelimit: unknown load argument '%s' "
		                "(the only one is allow-eviction)", a);
		return REDISMODULE_ERR;
	}

	/* Keys: the command reports them itself (getkeys-api), which is what
	 * Cluster's routing asks on Redis 7.0 (a "numkeys" spec has no legacy
	 * range form); key specs (Redis >= 7.0) say the same, "numkeys at 1,
	 * keys after it" as EVAL's, for COMMAND INFO, ACL and clients. */
	keyspecs = RedisModule_SetCommandInfo && RedisModule_GetCommand;
	if (!(RedisModule_IsKeysPositionRequest && RedisModule_KeyAtPos)) {
		RedisModule_Log(ctx, "warning", "ratelimit: this server can declare no keys");
		return REDISMODULE_ERR;
	}
	if (RedisModule_CreateCommand(ctx, "ratelimit.decide", cmd_decide, "write getkeys-api", 0, 0,
	                              0) == REDISMODULE_ERR)
		return REDISMODULE_ERR;
	if (RedisModule_CreateCommand(ctx, "ratelimit.release", cmd_release, "write getkeys-api", 0,
	                              0, 0) == REDISMODULE_ERR)
		return REDISMODULE_ERR;
	if (RedisModule_CreateCommand(ctx, "ratelimit.settle", cmd_settle, "write getkeys-api", 0,
	                              0, 0) == REDISMODULE_ERR)
		return REDISMODULE_ERR;
	if (with_version && RedisModule_CreateCommand(ctx, "ratelimit.version", cmd_version,
	                                              "readonly fast", 0, 0, 0) == REDISMODULE_ERR)
		return REDISMODULE_ERR;
	if (keyspecs) {
		static RedisModuleCommandKeySpec specs[] = {
			{
				.notes = "one key per window of every decision",
				.flags = REDISMODULE_CMD_KEY_RW | REDISMODULE_CMD_KEY_ACCESS |
				         REDISMODULE_CMD_KEY_UPDATE,
				.begin_search_type = REDISMODULE_KSPEC_BS_INDEX,
				.bs.index.pos = 1,
				.find_keys_type = REDISMODULE_KSPEC_FK_KEYNUM,
				.fk.keynum = { 0, 1, 1 },
			},
			{ 0 }
		};
		RedisModuleCommandInfo info = {
			.version = REDISMODULE_COMMAND_INFO_VERSION,
			.summary = "One rate-limit decision (or a batch), as lua/sliding_window.lua",
			.complexity = "O(log N) per log window, O(N) per bucketed window",
			.since = "0.2.0",
			.arity = -2,
			.key_specs = specs,
		};
		RedisModuleCommand *cmd = RedisModule_GetCommand(ctx, "ratelimit.decide");

		if (!cmd || RedisModule_SetCommandInfo(cmd, &info) == REDISMODULE_ERR) {
			RedisModule_Log(ctx, "warning", "ratelimit: the server refused the key specs");
			return REDISMODULE_ERR;
		}
	}
	return REDISMODULE_OK;
}

/* Unload: the scratch arrays. Refused on Redis >= 8.0: it keeps each
 * client's last command and reuses it without a lookup (server.c,
 * isCommandReusable), and MODULE UNLOAD frees the command under every
 * client that last called it: its next command reads freed memory (found
 * by make valgrind-module; it can crash Redis). There, remove the module
 * with a restart without loadmodule. */
/* Is the server Redis >= 8.0 (not Valkey, which numbers its versions on
 * and has no such reuse)? */
static int server_reuses_commands(RedisModuleCtx *ctx)
{
	RedisModuleServerInfoData *info;
	const char *name;
	int valkey = 0;

	if (!RedisModule_GetServerVersion || RedisModule_GetServerVersion() < 0x00080000)
		return 0;
	if (RedisModule_GetServerInfo && RedisModule_ServerInfoGetFieldC &&
	    RedisModule_FreeServerInfo) {
		info = RedisModule_GetServerInfo(ctx, "server");
		if (info) {
			name = RedisModule_ServerInfoGetFieldC(info, "server_name");
			valkey = name && strcasecmp(name, "valkey") == 0;
			RedisModule_FreeServerInfo(ctx, info);
		}
	}
	return !valkey;
}

RL_EXPORT int RedisModule_OnUnload(RedisModuleCtx *ctx);
RL_EXPORT int RedisModule_OnUnload(RedisModuleCtx *ctx)
{
	if (server_reuses_commands(ctx)) {
		RedisModule_Log(ctx, "warning",
		                "ratelimit: MODULE UNLOAD refused on Redis >= 8.0 (Redis reuses a "
		                "client's last command after it is freed): restart without loadmodule");
		return REDISMODULE_ERR;
	}
	rl_scratch_free(0);
	return REDISMODULE_OK;
}
