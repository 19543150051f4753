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
 * protocol 1; this one speaks 2 (GCRA), a superset of 1.
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

#include "redismodule.h"
#include "rl_args.h"

#define RL_MODULE_NAME    "ratelimit"
/* The protocol of RATELIMIT.DECIDE: what RATELIMIT.VERSION and MODULE LIST
 * report. 1: the log and precision= windows; 2: also GCRA windows
 * ("gcra:<ms>:<burst>"), every protocol-1 call answered as before. */
#define RL_MODULE_VERSION 2
#ifndef RL_PRODUCT_VERSION
#define RL_PRODUCT_VERSION "unknown"
#endif

#define RL_ERR_ENTRY_TEXT "ERR sliding_window: bad entry"
#define RL_ERR_EVICTS_TEXT                                                                   \
	"EVICTS ratelimit: maxmemory-policy may evict keys and admit more than the limit " \
	"(set noeviction, or load the module with allow-eviction)"
#define RL_ERR_OOM_TEXT     "OOM command not allowed when used memory > 'maxmemory'."
#define RL_ERR_WRONGTYPE    "WRONGTYPE Operation against a key holding the wrong kind of value"
#define RL_ERR_HASHINT_TEXT "ERR hash value is not an integer"
#define RL_ERR_OVERFLOW_TEXT "ERR increment or decrement would overflow"

/* A bucket end beyond this (ms, year 2255) is not ours: dead. */
#define RL_MAX_BUCKET_END 9000000000000LL
#define RL_STACK_ARGS 64

static int allow_eviction;
#ifdef RATELIMIT_TEST_CLOCK
static int test_clock;
static long long fail_alloc_at;   /* the Nth scratch growth from now fails (0: none) */
#endif

struct rl_bucket {
	int64_t end_us;
	int64_t units;
};

/* Window i of the decision being made (see the script's slot). */
struct rl_state {
	RedisModuleString *name;       /* borrowed from argv */
	const struct rl_window *w;
	int64_t cut;                   /* us: an entry at or before it is out */
	int64_t count;                 /* units in the window */
	int64_t cum;                   /* cum of the newest entry (log) */
	int64_t top;                   /* newest entry's score / counted bucket end */
	int64_t oldest;                /* oldest in-window entry / counted bucket end */
	int64_t first;                 /* cost of the oldest in-window entry (log) */
	int64_t score;                 /* this admission's score / bucket end, us */
	int64_t bucket_ms;             /* this admission's bucket (bucketed) */
	int64_t bucket_units;          /* units already in it */
	int has_top, has_oldest;
	size_t b0, nb;                 /* counted buckets: scratch.b[b0 .. b0 + nb) */
	size_t d0, nd;                 /* dead fields: scratch.dead[d0 .. d0 + nd) */
};

/* Scratch arrays of one call, kept between calls (the main thread is the
 * only caller): counted buckets, dead fields (held strings), members to
 * trim (held strings). */
static struct {
	struct rl_bucket *b;
	size_t nb, cap_b;
	RedisModuleString **dead;
	size_t ndead, cap_dead;
	RedisModuleString **trim;
	size_t ntrim, cap_trim;
} scratch;

/* <arr> (owned by scratch, <*cap> elements of <size>) grown to hold
 * <need>: the array to keep (perhaps moved), or NULL (then <arr> stands). */
static void *scratch_grow(void *arr, size_t *cap, size_t need, size_t size)
{
	size_t n = *cap ? *cap : 16;
	void *p;

	if (need <= *cap)
		return arr;
	while (n < need)
		n *= 2;
#ifdef RATELIMIT_TEST_CLOCK
	/* (test build: RATELIMIT.TEST-FAIL-ALLOC makes the Nth growth fail) */
	if (fail_alloc_at > 0 && --fail_alloc_at == 0)
		return NULL;
#endif
	p = RedisModule_Realloc(arr, n * size);
	if (p)
		*cap = n;
	return p;
}

/* Frees the dead fields the scratch holds (strings retained by the scan). */
static void scratch_release_dead(void)
{
	size_t i;

	for (i = 0; i < scratch.ndead; i++)
		RedisModule_FreeString(NULL, scratch.dead[i]);
	scratch.ndead = 0;
	scratch.nb = 0;
}

/* a / b rounded down (C rounds toward zero; a fake clock may be < 0). */
static int64_t floor_div(int64_t a, int64_t b)
{
	int64_t q = a / b;

	return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* a / b rounded up, for b > 0 (the script's math.ceil). */
static int64_t ceil_div_pos(int64_t a, int64_t b)
{
	return a <= 0 ? -floor_div(-a, b) : (a + b - 1) / b;
}

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

/* Member and score of the element the range of <k> is on; 0, or -1 when
 * the member is not ours or the score not an integer time. */
static int current_entry(RedisModuleKey *k, int64_t *cum, int64_t *cost, int64_t *score)
{
	double sc = 0;
	RedisModuleString *m = RedisModule_ZsetRangeCurrentElement(k, &sc);
	const char *p;
	size_t len;
	int rc;

	if (!m)
		return -1;
	p = RedisModule_StringPtrLen(m, &len);
	rc = rl_args_parse_member(p, len, cum, cost);
	RedisModule_FreeString(NULL, m);
	/* (a score we never write: infinite, or beyond 2^53) */
	if (!(sc >= -9007199254740992.0 && sc <= 9007199254740992.0))
		return -1;
	*score = (int64_t)sc;
	return rc;
}

/* Log window <s>, read only. Returns NULL or the error reply text. */
static const char *read_log(RedisModuleCtx *ctx, struct rl_state *s)
{
	RedisModuleKey *k = RedisModule_OpenKey(ctx, s->name, REDISMODULE_READ);
	int64_t c1, k1, o1, c2, k2, t2;
	const char *err = NULL;
	int type = RedisModule_KeyType(k);

	s->count = s->cum = s->first = 0;
	s->has_top = s->has_oldest = 0;
	if (type == REDISMODULE_KEYTYPE_EMPTY)
		goto out;
	if (type != REDISMODULE_KEYTYPE_ZSET) {
		err = RL_ERR_WRONGTYPE;
		goto out;
	}
	if (RedisModule_ZsetFirstInScoreRange(k, (double)s->cut, REDISMODULE_POSITIVE_INFINITE, 1, 0) !=
	        REDISMODULE_OK ||
	    RedisModule_ZsetRangeEndReached(k)) {
		RedisModule_ZsetRangeStop(k);
		goto out;
	}
	if (current_entry(k, &c1, &k1, &o1) == -1)
		err = RL_ERR_ENTRY_TEXT;
	RedisModule_ZsetRangeStop(k);
	if (err)
		goto out;
	if (RedisModule_ZsetLastInScoreRange(k, REDISMODULE_NEGATIVE_INFINITE,
	                                     REDISMODULE_POSITIVE_INFINITE, 0, 0) != REDISMODULE_OK ||
	    current_entry(k, &c2, &k2, &t2) == -1)
		err = RL_ERR_ENTRY_TEXT;
	RedisModule_ZsetRangeStop(k);
	if (err)
		goto out;
	s->oldest = o1;
	s->top = t2;
	s->has_oldest = s->has_top = 1;
	s->count = c2 - c1 + k1;
	s->cum = c2;
	s->first = k1;
out:
	RedisModule_CloseKey(k);
	return err;
}

struct scan_ctx {
	struct rl_state *s;
	int64_t cut_ms;       /* a bucket counts while its end > cut_ms (ms) */
	int failed;           /* out of memory */
	int bad_current;      /* this admission's bucket holds a non-integer */
};

/* One field of a bucketed window: counted, or dead (held for the trim). */
static void scan_bucket(RedisModuleKey *key, RedisModuleString *field, RedisModuleString *value,
                        void *privdata)
{
	struct scan_ctx *sc = privdata;
	struct rl_state *s = sc->s;
	RedisModuleString **dead;
	const char *fp, *vp;
	size_t fl, vl;
	int64_t e, v;
	int ok;

	(void)key;
	if (sc->failed)
		return;
	fp = RedisModule_StringPtrLen(field, &fl);
	vp = value ? RedisModule_StringPtrLen(value, &vl) : NULL;
	ok = rl_args_parse_int(fp, fl, &e) == 0 && vp && rl_args_parse_int(vp, vl, &v) == 0 &&
	     e <= RL_MAX_BUCKET_END && v >= -RL_MAX_MEMBER && v <= RL_MAX_MEMBER;
	if (rl_args_parse_int(fp, fl, &e) == 0 && e == s->bucket_ms) {
		if (!ok)
			sc->bad_current = 1;
		else
			s->bucket_units = v;
	}
	if (ok && e > sc->cut_ms) {
		struct rl_bucket *b = scratch_grow(scratch.b, &scratch.cap_b, scratch.nb + 1,
		                                   sizeof(*scratch.b));

		if (!b) {
			sc->failed = 1;
			return;
		}
		scratch.b = b;
		scratch.b[scratch.nb].end_us = e * 1000;
		scratch.b[scratch.nb].units = v;
		scratch.nb++;
		s->nb++;
		/* (a hash holds at most 2^32 fields of at most 2^53 units each) */
		s->count += v;
		if (!s->has_oldest || e * 1000 < s->oldest) {
			s->oldest = e * 1000;
			s->has_oldest = 1;
		}
		if (!s->has_top || e * 1000 > s->top) {
			s->top = e * 1000;
			s->has_top = 1;
		}
		return;
	}
	dead = scratch_grow(scratch.dead, &scratch.cap_dead, scratch.ndead + 1,
	                    sizeof(*scratch.dead));
	if (!dead) {
		sc->failed = 1;
		return;
	}
	scratch.dead = dead;
	RedisModule_RetainString(NULL, field);
	scratch.dead[scratch.ndead++] = field;
	s->nd++;
}

/* Bucketed window <s>, read only. Returns NULL or the error reply text. */
static const char *read_buckets(RedisModuleCtx *ctx, struct rl_state *s, int64_t now)
{
	RedisModuleKey *k = RedisModule_OpenKey(ctx, s->name, REDISMODULE_READ);
	struct scan_ctx sc = { s, floor_div(s->cut, 1000), 0, 0 };
	RedisModuleScanCursor *cur;
	const char *err = NULL;
	int type = RedisModule_KeyType(k);

	s->count = 0;
	s->has_oldest = s->has_top = 0;
	s->b0 = scratch.nb;
	s->d0 = scratch.ndead;
	s->nb = s->nd = 0;
	s->bucket_ms = rl_args_bucket_end(now, s->w->prec_ms);
	s->bucket_units = 0;
	if (type == REDISMODULE_KEYTYPE_EMPTY)
		goto out;
	if (type != REDISMODULE_KEYTYPE_HASH) {
		err = RL_ERR_WRONGTYPE;
		goto out;
	}
	/* the exact count of a bucket with a (e > cut) test: e * 1000 > cut
	 * is e > floor(cut / 1000) for an integer e */
	cur = RedisModule_ScanCursorCreate();
	if (!cur) {
		err = "ERR ratelimit: out of memory";
		goto out;
	}
	while (RedisModule_ScanKey(k, cur, scan_bucket, &sc))
		;
	RedisModule_ScanCursorDestroy(cur);
	if (sc.failed)
		err = "ERR ratelimit: out of memory";
	else if (sc.bad_current)
		err = RL_ERR_HASHINT_TEXT;
out:
	RedisModule_CloseKey(k);
	return err;
}

/* The TTL (ms) of window <s>'s key after this admission (the script's
 * PEXPIRE argument): until its newest entry or bucket leaves, i.e. its
 * score (or, after a clock step back, a later bucket's end) plus one
 * window, rounded up to a ms, plus 1 ms. (The script's margin covers
 * PEXPIRE counting from the command's time snapshot; the module counts
 * from <now> itself and keeps the same TTL, so that both engines leave
 * the same expiry.) */
static int64_t rl_ttl_ms(const struct rl_state *s, int64_t now)
{
	int64_t last = s->score;

	if (s->has_top && s->top > last)
		last = s->top;
	return s->w->win_ms + 1 + ceil_div_pos(last - now, 1000);
}

/* Writes this admission's entry into log window <s>, open as <k>.
 * Returns 0, or -1 when Redis refused the write (nothing written, nothing
 * replicated). */
static int add_log(RedisModuleCtx *ctx, RedisModuleKey *k, struct rl_state *s, int64_t now,
                   int64_t cost)
{
	RedisModuleString *m;
	char buf[48];
	size_t len;
	int flags = 0, rc = -1;

	/* Above the newest entry, so that rank order stays cum order (a later
	 * stamp only makes this entry live longer, never shorter). */
	s->score = (s->has_top && s->top >= now) ? s->top + 1 : now;
	len = rl_args_format_member(buf, sizeof(buf), s->cum + cost, cost);
	m = RedisModule_CreateString(ctx, buf, len);
	if (RedisModule_ZsetAdd(k, (double)s->score, m, &flags) == REDISMODULE_OK) {
		RedisModule_Replicate(ctx, "ZADD", "sls", s->name, (long long)s->score, m);
		RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zadd", s->name);
		rc = 0;
	}
	RedisModule_FreeString(ctx, m);
	return rc;
}

/* Adds <cost> to the bucket of <now> in bucketed window <s>, open as <k>. */
static void add_bucket(RedisModuleCtx *ctx, RedisModuleKey *k, struct rl_state *s, int64_t cost)
{
	RedisModuleString *f = RedisModule_CreateStringFromLongLong(ctx, s->bucket_ms);
	RedisModuleString *v = RedisModule_CreateStringFromLongLong(ctx, s->bucket_units + cost);

	s->score = s->bucket_ms * 1000;
	RedisModule_HashSet(k, REDISMODULE_HASH_NONE, f, v, NULL);
	RedisModule_Replicate(ctx, "HSET", "sss", s->name, f, v);
	RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_HASH, "hincrby", s->name);
	RedisModule_FreeString(ctx, f);
	RedisModule_FreeString(ctx, v);
}

/* Drops the expired entries (log) or dead fields (bucketed) of <s>, open
 * as <k>, and with <ttl_ms> >= 0 sets the key's expiry to now + ttl_ms. */
static void trim_window(RedisModuleCtx *ctx, RedisModuleKey *k, struct rl_state *s, int64_t now,
                        int64_t ttl_ms)
{
	size_t i, n = 0;

	if (s->w->prec_ms == 0 && RedisModule_KeyType(k) == REDISMODULE_KEYTYPE_ZSET) {
		/* All or nothing: the replicas get ZREMRANGEBYSCORE -inf cut, so
		 * the primary removes the whole range or (short of memory for the
		 * members) nothing; the expired entries then wait for the next
		 * trim, harmless (nothing reads below the cut). */
		int whole = 0;

		scratch.ntrim = 0;
		if (RedisModule_ZsetFirstInScoreRange(k, REDISMODULE_NEGATIVE_INFINITE, (double)s->cut,
		                                      0, 0) == REDISMODULE_OK) {
			for (;;) {
				RedisModuleString *m, **t;

				if (RedisModule_ZsetRangeEndReached(k)) {
					whole = 1;
					break;
				}
				m = RedisModule_ZsetRangeCurrentElement(k, NULL);
				if (!m)
					break;
				t = scratch_grow(scratch.trim, &scratch.cap_trim, scratch.ntrim + 1,
				                 sizeof(*scratch.trim));
				if (!t) {
					RedisModule_FreeString(ctx, m);
					break;
				}
				scratch.trim = t;
				scratch.trim[scratch.ntrim++] = m;
				if (!RedisModule_ZsetRangeNext(k)) {
					whole = 1;
					break;
				}
			}
		}
		RedisModule_ZsetRangeStop(k);
		for (i = 0; i < scratch.ntrim; i++) {
			int deleted = 0;

			if (whole)
				RedisModule_ZsetRem(k, scratch.trim[i], &deleted);
			n += (size_t)deleted;
			RedisModule_FreeString(ctx, scratch.trim[i]);
		}
		scratch.ntrim = 0;
		if (n) {
			RedisModule_Replicate(ctx, "ZREMRANGEBYSCORE", "scl", s->name, "-inf",
			                      (long long)s->cut);
			RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zremrangebyscore",
			                                s->name);
		}
	} else if (s->w->prec_ms != 0 && s->nd &&
	           RedisModule_KeyType(k) == REDISMODULE_KEYTYPE_HASH) {
		for (i = 0; i < s->nd; i++)
			n += (size_t)RedisModule_HashSet(k, REDISMODULE_HASH_NONE, scratch.dead[s->d0 + i],
			                                 REDISMODULE_HASH_DELETE, NULL);
		if (n) {
			RedisModule_Replicate(ctx, "HDEL", "sv", s->name, &scratch.dead[s->d0],
			                      (size_t)s->nd);
			RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_HASH, "hdel", s->name);
		}
	}
	if (ttl_ms >= 0 && RedisModule_KeyType(k) != REDISMODULE_KEYTYPE_EMPTY) {
		long long at = (long long)(floor_div(now, 1000) + ttl_ms);

		if (RedisModule_SetAbsExpire(k, at) == REDISMODULE_OK) {
			RedisModule_Replicate(ctx, "PEXPIREAT", "sl", s->name, at);
			RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "expire",
			                                s->name);
		}
	}
}

/* Has window <s> anything to trim? (A denial opens a key for writing only
 * then: a write handle marks the key modified for WATCH and client
 * tracking, as the script's trim does only when it removes something.) */
static int has_expired(RedisModuleCtx *ctx, const struct rl_state *s)
{
	RedisModuleKey *k;
	int yes = 0;

	if (s->w->prec_ms)
		return s->nd > 0;
	/* (NULL for a key that does not exist: KeyType and CloseKey take it,
	 * the range calls do not) */
	k = RedisModule_OpenKey(ctx, s->name, REDISMODULE_READ);
	if (RedisModule_KeyType(k) == REDISMODULE_KEYTYPE_ZSET) {
		if (RedisModule_ZsetFirstInScoreRange(k, REDISMODULE_NEGATIVE_INFINITE, (double)s->cut,
		                                      0, 0) == REDISMODULE_OK)
			yes = !RedisModule_ZsetRangeEndReached(k);
		RedisModule_ZsetRangeStop(k);
	}
	RedisModule_CloseKey(k);
	return yes;
}

/* Score of the first entry with a score in [lo, hi] of <k> into <score>,
 * its cum into <cum> (0 for a member not ours: the search goes past it,
 * later, never early). Returns 0, or -1 when there is none. */
static int first_in(RedisModuleKey *k, int64_t lo, int64_t hi, int64_t *cum, int64_t *score)
{
	int64_t cost;
	int rc = -1;

	if (RedisModule_ZsetFirstInScoreRange(k, (double)lo, (double)hi, 0, 0) == REDISMODULE_OK &&
	    !RedisModule_ZsetRangeEndReached(k)) {
		double sc = 0;
		RedisModuleString *m = RedisModule_ZsetRangeCurrentElement(k, &sc);

		if (m) {
			const char *p;
			size_t len;

			p = RedisModule_StringPtrLen(m, &len);
			if (rl_args_parse_member(p, len, cum, &cost) == -1)
				*cum = 0;
			RedisModule_FreeString(NULL, m);
			*score = (int64_t)sc;
			rc = 0;
		}
	}
	RedisModule_ZsetRangeStop(k);
	return rc;
}

/* Time until <need> units have left log window <s>: when the entry whose
 * leaving frees the <need>th unit leaves (cum grows with the score: a
 * binary search on the score). Never early. */
static int64_t retry_log(RedisModuleCtx *ctx, const struct rl_state *s, int64_t need, int64_t now)
{
	int64_t win_us = s->w->win_ms * 1000, base, lo, hi, ans, cum, sc;
	RedisModuleKey *k;

	/* the usual case (cost 1 on a full window): the oldest is enough */
	if (s->first >= need)
		return s->oldest + win_us - now;
	base = s->count - s->cum;   /* cum of the entry before the oldest, negated */
	ans = s->top;
	lo = s->oldest;
	hi = s->top - 1;
	k = RedisModule_OpenKey(ctx, s->name, REDISMODULE_READ);
	if (RedisModule_KeyType(k) == REDISMODULE_KEYTYPE_ZSET) {
		while (lo <= hi) {
			int64_t mid = lo + (hi - lo) / 2;

			if (first_in(k, mid, hi, &cum, &sc) == -1 || sc > hi) {
				hi = mid - 1;
			} else if (cum + base >= need) {
				ans = sc;
				hi = mid - 1;
			} else {
				lo = sc + 1;
			}
		}
	}
	RedisModule_CloseKey(k);
	return ans + win_us - now;
}

static int cmp_bucket(const void *a, const void *b)
{
	const struct rl_bucket *x = a, *y = b;

	return (x->end_us > y->end_us) - (x->end_us < y->end_us);
}

/* Time until <need> units have left bucketed window <s>: a bucket leaves
 * when the cut reaches its end, one window after it. Never early. */
static int64_t retry_buckets(const struct rl_state *s, int64_t need, int64_t now)
{
	int64_t acc = 0, win_us = s->w->win_ms * 1000;
	struct rl_bucket *b = scratch.b + s->b0;
	size_t j;

	qsort(b, s->nb, sizeof(*b), cmp_bucket);
	for (j = 0; j < s->nb; j++) {
		acc += b[j].units;
		if (acc >= need)
			return b[j].end_us + win_us - now;
	}
	return win_us;
}

/* A GCRA decision (the script's gcra(); the math is rl_args_gcra()):
 * reads the string key <name> (borrowed from argv), and on an admission
 * stores the new TAT with its expiry, propagated as SET and PEXPIREAT.
 * Writes the reply. */
static void decide_gcra(RedisModuleCtx *ctx, RedisModuleString *name, const struct rl_decision *d,
                        int64_t now, int oom)
{
	RedisModuleKey *k = RedisModule_OpenKey(ctx, name, REDISMODULE_READ);
	int type = RedisModule_KeyType(k), has = 0;
	struct rl_gcra_value v;
	struct rl_gcra g;
	const char *err = NULL;

	if (type == REDISMODULE_KEYTYPE_STRING) {
		size_t len;
		/* (the one read the API has: Redis makes a short embstr value raw
		 * on it, the same bytes, the same MEMORY USAGE) */
		const char *p = RedisModule_StringDMA(k, &len, REDISMODULE_READ);

		if (!p || rl_args_parse_gcra(p, len, &v) == -1)
			err = RL_ERR_ENTRY_TEXT;
		has = 1;
	} else if (type != REDISMODULE_KEYTYPE_EMPTY) {
		err = RL_ERR_WRONGTYPE;
	}
	RedisModule_CloseKey(k);
	if (!err && rl_args_gcra(&d->w[0], d->cost, now, has ? &v : NULL, &g) == -1)
		err = RL_ERR_ENTRY_TEXT;
	if (err) {
		RedisModule_ReplyWithError(ctx, err);
		return;
	}
	if (g.allowed) {
		/* the rate it was decided under beside it: a change reads it */
		struct rl_gcra_value nv = { g.tat, g.frac, d->w[0].win_ms, d->w[0].limit, g.tat - now };
		char buf[96];
		size_t len = rl_args_format_gcra(buf, sizeof(buf), &nv);
		long long at = (long long)(floor_div(now, 1000) + g.ttl_ms);
		RedisModuleString *sv;

		/* over maxmemory an admission is refused, nothing written (the
		 * script's SET is refused the same way) */
		if (oom) {
			RedisModule_ReplyWithError(ctx, RL_ERR_OOM_TEXT);
			return;
		}
		sv = RedisModule_CreateString(ctx, buf, len);
		k = RedisModule_OpenKey(ctx, name, REDISMODULE_READ | REDISMODULE_WRITE);
		if (RedisModule_StringSet(k, sv) != REDISMODULE_OK) {
			RedisModule_CloseKey(k);
			RedisModule_FreeString(ctx, sv);
			RedisModule_ReplyWithError(ctx, "ERR ratelimit: the server refused the write");
			return;
		}
		RedisModule_Replicate(ctx, "SET", "ss", name, sv);
		RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_STRING, "set", name);
		if (RedisModule_SetAbsExpire(k, at) == REDISMODULE_OK) {
			RedisModule_Replicate(ctx, "PEXPIREAT", "sl", name, at);
			RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "expire", name);
		}
		RedisModule_CloseKey(k);
		RedisModule_FreeString(ctx, sv);
	}
	RedisModule_ReplyWithArray(ctx, 6);
	RedisModule_ReplyWithLongLong(ctx, g.allowed);
	RedisModule_ReplyWithLongLong(ctx, d->w[0].burst);
	RedisModule_ReplyWithLongLong(ctx, g.remaining);
	RedisModule_ReplyWithLongLong(ctx, g.reset);
	RedisModule_ReplyWithLongLong(ctx, g.retry);
	RedisModule_ReplyWithLongLong(ctx, 0);
}

/* Decides <d> over keys <keys> at <now> and writes the reply (the
 * script's array, or an error). <oom>: Redis is over maxmemory. */
static void decide(RedisModuleCtx *ctx, RedisModuleString **keys, const struct rl_decision *d,
                   int64_t now, int oom)
{
	struct rl_state st[RL_MAX_WINDOWS];
	const char *err = NULL;
	size_t i, best = 0;
	int allowed = 1;
	int64_t best_rem = 0, best_reset = 0, best_retry = 0;

	/* (the parser gives 1..RL_MAX_WINDOWS; said again for the reader) */
	if (d->nwin < 1 || d->nwin > RL_MAX_WINDOWS) {
		RedisModule_ReplyWithError(ctx, RL_ERR_ARGS_TEXT);
		return;
	}
	if (d->w[0].burst) {
		decide_gcra(ctx, keys[d->key0], d, now, oom);
		return;
	}
	scratch.nb = 0;
	scratch.ndead = 0;
	for (i = 0; i < d->nwin; i++) {
		struct rl_state *s = &st[i];

		memset(s, 0, sizeof(*s));
		s->name = keys[d->key0 + i];
		s->w = &d->w[i];
		/* Inclusive bound: score <= now - window is out, so an entry
		 * exactly one window old does not count. */
		s->cut = now - s->w->win_ms * 1000;
		err = s->w->prec_ms ? read_buckets(ctx, s, now) : read_log(ctx, s);
		if (err)
			goto fail;
		if (s->count + d->cost > s->w->limit)
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
			int64_t rem = s->w->limit - s->count - d->cost;
			RedisModuleKey *k =
				RedisModule_OpenKey(ctx, s->name, REDISMODULE_READ | REDISMODULE_WRITE);

			if (s->w->prec_ms) {
				add_bucket(ctx, k, s, d->cost);
			} else if (add_log(ctx, k, s, now, d->cost) == -1) {
				/* (the windows before it hold their admission, as their
				 * replicas do: the caller sees an error, fail-closed) */
				RedisModule_CloseKey(k);
				err = "ERR ratelimit: the server refused the write";
				goto fail;
			}
			trim_window(ctx, k, s, now, rl_ttl_ms(s, now));
			RedisModule_CloseKey(k);
			if (i == 0 || rem < best_rem) {
				best = i;
				best_rem = rem;
			}
		}
		/* reset: when the oldest in-window entry or bucket (perhaps the
		 * new one) leaves */
		best_reset = (st[best].has_oldest ? st[best].oldest : st[best].score) +
		             st[best].w->win_ms * 1000 - now;
		best_retry = 0;
	} else {
		int have = 0;

		for (i = 0; i < d->nwin; i++) {
			RedisModuleKey *k;

			if (!has_expired(ctx, &st[i]))
				continue;
			k = RedisModule_OpenKey(ctx, st[i].name, REDISMODULE_READ | REDISMODULE_WRITE);
			trim_window(ctx, k, &st[i], now, -1);
			RedisModule_CloseKey(k);
		}
		for (i = 0; i < d->nwin; i++) {
			struct rl_state *s = &st[i];
			int64_t need = s->count + d->cost - s->w->limit, retry;

			if (need <= 0)
				continue;
			/* cost > limit never fits: a whole window rather than a loop */
			retry = s->w->win_ms * 1000;
			if (need <= s->count)
				retry = s->w->prec_ms ? retry_buckets(s, need, now)
				                      : retry_log(ctx, s, need, now);
			if (!have || retry > best_retry) {
				best = i;
				best_retry = retry;
				have = 1;
			}
		}
		best_rem = st[best].w->limit - st[best].count;
		if (best_rem < 0)
			best_rem = 0;
		best_reset = st[best].has_oldest ? st[best].oldest + st[best].w->win_ms * 1000 - now
		                                 : st[best].w->win_ms * 1000;
	}
	scratch_release_dead();
	RedisModule_ReplyWithArray(ctx, 6);
	RedisModule_ReplyWithLongLong(ctx, allowed);
	RedisModule_ReplyWithLongLong(ctx, st[best].w->limit);
	RedisModule_ReplyWithLongLong(ctx, best_rem);
	RedisModule_ReplyWithLongLong(ctx, best_reset);
	RedisModule_ReplyWithLongLong(ctx, best_retry);
	RedisModule_ReplyWithLongLong(ctx, (long long)best);
	return;
fail:
	scratch_release_dead();
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
	RedisModule_Free(scratch.b);
	RedisModule_Free(scratch.dead);
	RedisModule_Free(scratch.trim);
	memset(&scratch, 0, sizeof(scratch));
	fail_alloc_at = n;
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
	X(Free) X(Log) X(NotifyKeyspaceEvent) X(StringSet) X(StringDMA)

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
	RedisModule_Free(scratch.b);
	RedisModule_Free(scratch.dead);
	RedisModule_Free(scratch.trim);
	memset(&scratch, 0, sizeof(scratch));
	return REDISMODULE_OK;
}
