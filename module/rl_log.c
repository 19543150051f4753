/* rl_log.c - the module's windows: a sorted-set log ("<cum>:<cost>" at
 * Redis's time in us) and a bucketed hash (bucket end in ms -> units), as
 * lua/sliding_window.lua reads and writes them; and the scratch arrays a
 * decision's reads fill. Every write is propagated as the plain command it
 * amounts to (see ratelimit.c). */
#include <stdlib.h>
#include <string.h>

#include "rl_module.h"

#ifdef RATELIMIT_TEST_CLOCK
static long long fail_alloc_at;   /* the Nth scratch growth from now fails (0: none) */
#endif

struct rl_bucket {
	int64_t end_us;
	int64_t units;
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
void rl_scratch_release_dead(void)
{
	size_t i;

	for (i = 0; i < scratch.ndead; i++)
		RedisModule_FreeString(NULL, scratch.dead[i]);
	scratch.ndead = 0;
	scratch.nb = 0;
}

void rl_scratch_begin(void)
{
	scratch.nb = 0;
	scratch.ndead = 0;
}

void rl_scratch_free(long long fail_at)
{
	RedisModule_Free(scratch.b);
	RedisModule_Free(scratch.dead);
	RedisModule_Free(scratch.trim);
	memset(&scratch, 0, sizeof(scratch));
#ifdef RATELIMIT_TEST_CLOCK
	fail_alloc_at = fail_at;
#else
	(void)fail_at;
#endif
}

/* cum and cost of member <p>/<len> (a pool's when <pool>: its account
 * after them); 0, or -1 when it is not ours. */
static int parse_entry(const char *p, size_t len, int pool, int64_t *cum, int64_t *cost)
{
	const char *acc;
	size_t acc_len;

	if (pool)
		return rl_args_parse_pool_member(p, len, cum, cost, &acc, &acc_len);
	return rl_args_parse_member(p, len, cum, cost);
}

/* Member and score of the element the range of <k> is on; 0, or -1 when
 * the member is not ours or the score not an integer time. */
static int current_entry(RedisModuleKey *k, int pool, int64_t *cum, int64_t *cost,
                         int64_t *score)
{
	double sc = 0;
	RedisModuleString *m = RedisModule_ZsetRangeCurrentElement(k, &sc);
	const char *p;
	size_t len;
	int rc;

	if (!m)
		return -1;
	p = RedisModule_StringPtrLen(m, &len);
	rc = parse_entry(p, len, pool, cum, cost);
	RedisModule_FreeString(NULL, m);
	/* (a score we never write: infinite, or beyond 2^53) */
	if (!(sc >= -9007199254740992.0 && sc <= 9007199254740992.0))
		return -1;
	*score = (int64_t)sc;
	return rc;
}

/* Log window <s>, read only. Returns NULL or the error reply text. */
const char *rl_log_read(RedisModuleCtx *ctx, struct rl_state *s)
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
	if (current_entry(k, s->pool, &c1, &k1, &o1) == -1)
		err = RL_ERR_ENTRY_TEXT;
	RedisModule_ZsetRangeStop(k);
	if (err)
		goto out;
	if (RedisModule_ZsetLastInScoreRange(k, REDISMODULE_NEGATIVE_INFINITE,
	                                     REDISMODULE_POSITIVE_INFINITE, 0, 0) != REDISMODULE_OK ||
	    current_entry(k, s->pool, &c2, &k2, &t2) == -1)
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
const char *rl_log_read_buckets(RedisModuleCtx *ctx, struct rl_state *s, int64_t now)
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
int64_t rl_log_ttl_ms(const struct rl_state *s, int64_t now)
{
	int64_t last = s->score;

	if (s->has_top && s->top > last)
		last = s->top;
	return s->w->win_ms + 1 + ceil_div_pos(last - now, 1000);
}

/* Writes this admission's entry into log window <s>, open as <k>.
 * Returns 0, or -1 when Redis refused the write (nothing written, nothing
 * replicated). */
int rl_log_add(RedisModuleCtx *ctx, RedisModuleKey *k, struct rl_state *s, int64_t now,
               int64_t cost)
{
	RedisModuleString *m;
	char buf[48 + RL_POOL_ACC_MAX];
	size_t len;
	int flags = 0, rc = -1;

	/* Above the newest entry, so that rank order stays cum order (a later
	 * stamp only makes this entry live longer, never shorter). */
	s->score = (s->has_top && s->top >= now) ? s->top + 1 : now;
	len = s->pool ? rl_args_format_pool_member(buf, sizeof(buf), s->cum + cost, cost, s->acc,
	                                           s->acc_len)
	              : rl_args_format_member(buf, sizeof(buf), s->cum + cost, cost);
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
void rl_log_add_bucket(RedisModuleCtx *ctx, RedisModuleKey *k, struct rl_state *s, int64_t cost)
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
void rl_log_trim(RedisModuleCtx *ctx, RedisModuleKey *k, struct rl_state *s, int64_t now,
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
int rl_log_has_expired(RedisModuleCtx *ctx, const struct rl_state *s)
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
static int first_in(RedisModuleKey *k, int pool, int64_t lo, int64_t hi, int64_t *cum,
                    int64_t *score)
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
			if (parse_entry(p, len, pool, cum, &cost) == -1)
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
int64_t rl_log_retry(RedisModuleCtx *ctx, const struct rl_state *s, int64_t need, int64_t now)
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

			if (first_in(k, s->pool, mid, hi, &cum, &sc) == -1 || sc > hi) {
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
int64_t rl_log_retry_buckets(const struct rl_state *s, int64_t need, int64_t now)
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
