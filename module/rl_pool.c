/* rl_pool.c - a pool (pool=) in the module, as lua/sliding_window.lua's
 * read_pool() and trim_pool() do it: the pool's log is a window's sorted
 * set whose members carry the account ("<cum>:<cost>:<account>"), beside
 * a hash account -> units of the log's entries. The share is read exactly
 * without a scan of the accounts: the hash's length and this account's
 * field, less what the log's expired entries (those the next trim
 * removes) still hold there. Every write is propagated as the plain
 * command it amounts to (ZADD, ZREMRANGEBYSCORE, HSET, HDEL, PEXPIREAT). */
#include <stdlib.h>
#include <string.h>

#include "rl_module.h"

/* One expired entry of a pool's log: its member (held) and what it holds. */
struct pool_gone {
	RedisModuleString *m;   /* owned */
	const char *acc;        /* into m; NULL for a member not ours */
	size_t acc_len;
	int64_t cost;
};

static int gone_cmp(const void *a, const void *b)
{
	const struct pool_gone *x = a, *y = b;
	size_t n = x->acc_len < y->acc_len ? x->acc_len : y->acc_len;
	int c;

	if (!x->acc || !y->acc)
		return (x->acc != NULL) - (y->acc != NULL);
	c = n ? memcmp(x->acc, y->acc, n) : 0;
	if (c)
		return c;
	return (x->acc_len > y->acc_len) - (x->acc_len < y->acc_len);
}

static int same_acc(const struct pool_gone *x, const struct pool_gone *y)
{
	return x->acc && y->acc && x->acc_len == y->acc_len && memcmp(x->acc, y->acc, x->acc_len) == 0;
}

/* Frees <g> (owned, <n> entries) and the members it holds. */
static void gone_free(struct pool_gone *g, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		RedisModule_FreeString(NULL, g[i].m);
	RedisModule_Free(g);
}

/* The entries at or before <cut> of log <k> (open), sorted by account,
 * into *<out> (owned by the caller: gone_free) and *<n>. Returns 0, or -1
 * out of memory (nothing out). */
static int gone_read(RedisModuleKey *k, int64_t cut, struct pool_gone **out, size_t *n)
{
	struct pool_gone *g = NULL, *ng;
	size_t cap = 0, cnt = 0;
	int rc = 0;

	*out = NULL;
	*n = 0;
	/* (NULL for a key that does not exist: KeyType takes it, the range
	 * calls do not) */
	if (RedisModule_KeyType(k) != REDISMODULE_KEYTYPE_ZSET)
		return 0;
	if (RedisModule_ZsetFirstInScoreRange(k, REDISMODULE_NEGATIVE_INFINITE, (double)cut, 0, 0) !=
	    REDISMODULE_OK) {
		RedisModule_ZsetRangeStop(k);
		return 0;
	}
	while (!RedisModule_ZsetRangeEndReached(k)) {
		RedisModuleString *m = RedisModule_ZsetRangeCurrentElement(k, NULL);
		const char *p;
		size_t len;
		int64_t cum;

		if (!m)
			break;
		if (cnt == cap) {
			cap = cap ? cap * 2 : 16;
			ng = RedisModule_Realloc(g, cap * sizeof(*g));
			if (!ng) {
				RedisModule_FreeString(NULL, m);
				rc = -1;
				break;
			}
			g = ng;
		}
		g[cnt].m = m;
		p = RedisModule_StringPtrLen(m, &len);
		if (rl_args_parse_pool_member(p, len, &cum, &g[cnt].cost, &g[cnt].acc,
		                              &g[cnt].acc_len) == -1) {
			g[cnt].acc = NULL;
			g[cnt].acc_len = 0;
			g[cnt].cost = 0;
		}
		cnt++;
		if (!RedisModule_ZsetRangeNext(k))
			break;
	}
	RedisModule_ZsetRangeStop(k);
	if (rc == -1) {
		gone_free(g, cnt);
		return -1;
	}
	if (cnt)
		qsort(g, cnt, sizeof(*g), gone_cmp);
	*out = g;
	*n = cnt;
	return 0;
}

/* The units hash <h> (open) holds for account <acc>/<len> (0 for none or
 * a value not an integer, as the script's hnum()); *<exists>: the field
 * is there. */
static int64_t hash_units(RedisModuleKey *h, const char *acc, size_t len, int *exists)
{
	RedisModuleString *f, *v = NULL;
	long long x = 0;

	*exists = 0;
	if (RedisModule_KeyType(h) != REDISMODULE_KEYTYPE_HASH)
		return 0;
	f = RedisModule_CreateString(NULL, acc, len);
	if (RedisModule_HashGet(h, REDISMODULE_HASH_NONE, f, &v, NULL) == REDISMODULE_OK && v) {
		*exists = 1;
		if (RedisModule_StringToLongLong(v, &x) != REDISMODULE_OK)
			x = 0;
		RedisModule_FreeString(NULL, v);
	}
	RedisModule_FreeString(NULL, f);
	return (int64_t)x;
}

/* Sets account <acc>/<len> of hash <h> (open, named <name>) to <v> units,
 * or drops the field at 0 or below. */
static void hash_put(RedisModuleCtx *ctx, RedisModuleKey *h, RedisModuleString *name,
                     const char *acc, size_t len, int64_t v)
{
	RedisModuleString *f = RedisModule_CreateString(ctx, acc, len), *sv;

	if (v > 0) {
		sv = RedisModule_CreateStringFromLongLong(ctx, v);
		RedisModule_HashSet(h, REDISMODULE_HASH_NONE, f, sv, NULL);
		RedisModule_Replicate(ctx, "HSET", "sss", name, f, sv);
		RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_HASH, "hset", name);
		RedisModule_FreeString(ctx, sv);
	} else if (RedisModule_HashSet(h, REDISMODULE_HASH_NONE, f, REDISMODULE_HASH_DELETE, NULL)) {
		RedisModule_Replicate(ctx, "HDEL", "ss", name, f);
		RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_HASH, "hdel", name);
	}
	RedisModule_FreeString(ctx, f);
}

/* Reads the pool into <ps> (see rl_module.h). */
const char *rl_pool_read(RedisModuleCtx *ctx, struct rl_pool_state *ps, const struct rl_pool *pool,
                         RedisModuleString *key, RedisModuleString *hkey, int64_t now,
                         int64_t cost)
{
	struct pool_gone *g = NULL;
	size_t ng = 0, i, j;
	RedisModuleKey *k, *h;
	int64_t mine, na;
	const char *err;
	int exists, type;

	memset(ps, 0, sizeof(*ps));
	ps->pool = pool;
	ps->hkey = hkey;
	ps->w.limit = pool->limit;
	ps->w.win_ms = pool->win_ms;
	ps->log.name = key;
	ps->log.w = &ps->w;
	ps->log.pool = 1;
	ps->log.acc = pool->acc;
	ps->log.acc_len = pool->acc_len;
	ps->log.cut = now - pool->win_ms * 1000;
	err = rl_log_read(ctx, &ps->log);
	if (err)
		return err;
	h = RedisModule_OpenKey(ctx, hkey, REDISMODULE_READ);
	type = RedisModule_KeyType(h);
	if (type != REDISMODULE_KEYTYPE_EMPTY && type != REDISMODULE_KEYTYPE_HASH) {
		RedisModule_CloseKey(h);
		return RL_ERR_WRONGTYPE;
	}
	k = RedisModule_OpenKey(ctx, key, REDISMODULE_READ);
	if (gone_read(k, ps->log.cut, &g, &ng) == -1)
		err = "ERR ratelimit: out of memory";
	RedisModule_CloseKey(k);
	if (err) {
		RedisModule_CloseKey(h);
		return err;
	}
	/* what each account holds once the expired entries are gone: the
	 * accounts left at 0 no longer hold units; with the log empty, nobody
	 * (a hash left without its log goes with the next admission) */
	ps->orphan = !ps->log.has_oldest && ng == 0;
	mine = ps->orphan ? 0 : hash_units(h, pool->acc, pool->acc_len, &exists);
	na = type == REDISMODULE_KEYTYPE_HASH && !ps->orphan ? (int64_t)RedisModule_ValueLength(h) : 0;
	for (i = 0; i < ng; i = j) {
		int64_t dec = 0;

		for (j = i; j < ng && (j == i || same_acc(&g[i], &g[j])); j++)
			dec += g[j].cost;
		if (!g[i].acc)
			continue;
		if (g[i].acc_len == pool->acc_len && memcmp(g[i].acc, pool->acc, pool->acc_len) == 0)
			mine -= dec;
		if (hash_units(h, g[i].acc, g[i].acc_len, &exists) - dec <= 0 && exists)
			na--;
	}
	RedisModule_CloseKey(h);
	ps->expired = ng > 0;
	ps->mine = mine;
	ps->na = na;
	ps->gone = g;
	ps->ngone = ng;
	/* (each account taken off is a distinct field of the hash: never
	 * below 0, said again for the reader) */
	if (na < 0)
		na = ps->na = 0;
	/* at least its share: mine * (na + 1) >= limit, as a ceiling */
	if (mine >= (pool->limit + na) / (na + 1)) {
		ps->room = pool->limit - pool->headroom;
		ps->code = 2;
	} else {
		ps->room = pool->limit;
		ps->code = 1;
	}
	ps->admits = ps->log.count + cost <= ps->room;
	return NULL;
}

/* The trim of the pool's log <k> and hash <h> (open for writing): the
 * expired entries rl_pool_read() read (the same call: nothing else wrote
 * the log since) go, their units off their accounts. */
static void pool_trim_keys(RedisModuleCtx *ctx, struct rl_pool_state *ps, RedisModuleKey *k,
                           RedisModuleKey *h)
{
	const struct pool_gone *g = ps->gone;
	size_t ng = ps->ngone, i, j;
	int exists;

	if (ng == 0)
		return;
	for (i = 0; i < ng; i++) {
		double sc;
		int deleted = 0;

		/* An admission into an empty window writes cum = cost again: the
		 * same member as an expired one of its account ("1:1:A") is moved
		 * to its new score, and the script's ZREMRANGEBYSCORE keeps it. */
		if (RedisModule_ZsetScore(k, g[i].m, &sc) == REDISMODULE_OK && sc <= (double)ps->log.cut)
			RedisModule_ZsetRem(k, g[i].m, &deleted);
	}
	RedisModule_Replicate(ctx, "ZREMRANGEBYSCORE", "scl", ps->log.name, "-inf",
	                      (long long)ps->log.cut);
	RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zremrangebyscore",
	                                ps->log.name);
	for (i = 0; i < ng; i = j) {
		int64_t dec = 0;

		for (j = i; j < ng && (j == i || same_acc(&g[i], &g[j])); j++)
			dec += g[j].cost;
		if (g[i].acc)
			hash_put(ctx, h, ps->hkey, g[i].acc, g[i].acc_len,
			         hash_units(h, g[i].acc, g[i].acc_len, &exists) - dec);
	}
	rl_pool_release(ps);
}

/* The first time, as the pool's entries leave (oldest first, those of one
 * score at once), at which the account is below its share and the cost fits
 * in the whole pool (the script's retry_share()). Runs after the denial's
 * trim, so each account's units are its field as it stands. The walk stops
 * at <hi> when <bounded> (the cost fits outside the headroom there): at most headroom +
 * cost entries, each account's field read once (a dict: no scan). */
int64_t rl_pool_retry_share(RedisModuleCtx *ctx, const struct rl_pool_state *ps, int64_t cost,
                            int64_t hi, int bounded, int64_t now)
{
	const struct rl_pool *pool = ps->pool;
	RedisModuleKey *k, *h;
	RedisModuleDict *units;
	RedisModuleString *m;
	int64_t n = ps->na, cnt = ps->log.count, mine = ps->mine, *u = NULL, *nu, retry = -1;
	size_t nu_len = 0, cap = 0;
	double sc = 0, s2 = 0;
	int exists, end = 0;

	k = RedisModule_OpenKey(ctx, ps->log.name, REDISMODULE_READ);
	if (RedisModule_KeyType(k) != REDISMODULE_KEYTYPE_ZSET ||
	    RedisModule_ZsetFirstInScoreRange(k, (double)ps->log.cut,
	                                      bounded ? (double)hi : REDISMODULE_POSITIVE_INFINITE, 1,
	                                      0) != REDISMODULE_OK) {
		RedisModule_CloseKey(k);
		return -1;
	}
	h = RedisModule_OpenKey(ctx, ps->hkey, REDISMODULE_READ);
	units = RedisModule_CreateDict(ctx);
	m = RedisModule_ZsetRangeCurrentElement(k, &sc);
	while (m && retry < 0) {
		const char *p, *acc;
		size_t len, acc_len;
		int64_t c, k1, v;
		void *ix;
		int nokey;

		p = RedisModule_StringPtrLen(m, &len);
		if (rl_args_parse_pool_member(p, len, &c, &k1, &acc, &acc_len) == 0) {
			ix = RedisModule_DictGetC(units, (void *)acc, acc_len, &nokey);
			if (nokey) {
				if (nu_len == cap) {
					cap = cap ? cap * 2 : 16;
					nu = RedisModule_Realloc(u, cap * sizeof(*u));
					if (!nu) {
						/* (the caller keeps the retry outside the headroom) */
						RedisModule_FreeString(ctx, m);
						m = NULL;
						break;
					}
					u = nu;
				}
				u[nu_len] = hash_units(h, acc, acc_len, &exists);
				ix = (void *)(uintptr_t)nu_len++;
				RedisModule_DictSetC(units, (void *)acc, acc_len, ix);
			}
			if (!u) {   /* (never: an index in the dict has its slot in u) */
				RedisModule_FreeString(ctx, m);
				m = NULL;
				break;
			}
			v = u[(uintptr_t)ix];
			if (v > 0 && v - k1 <= 0 && n > 0)
				n--;
			u[(uintptr_t)ix] = v - k1;
			if (acc_len == pool->acc_len && memcmp(acc, pool->acc, acc_len) == 0)
				mine = v - k1;
			cnt = ps->log.cum - c;
		}
		RedisModule_FreeString(ctx, m);
		m = NULL;
		end = !RedisModule_ZsetRangeNext(k);
		if (!end)
			m = RedisModule_ZsetRangeCurrentElement(k, &s2);
		/* every entry of one score leaves at once: the rule is read after
		 * the last of them */
		if ((end || s2 != sc) && cnt + cost <= pool->limit &&
		    mine < (pool->limit + n) / (n + 1))
			retry = (int64_t)sc + pool->win_ms * 1000 - now;
		sc = s2;
	}
	if (m)
		RedisModule_FreeString(ctx, m);
	RedisModule_ZsetRangeStop(k);
	RedisModule_FreeDict(ctx, units);
	RedisModule_Free(u);
	RedisModule_CloseKey(h);
	RedisModule_CloseKey(k);
	return retry;
}

/* Frees the expired entries <ps> holds. */
void rl_pool_release(struct rl_pool_state *ps)
{
	if (ps->gone)
		gone_free(ps->gone, ps->ngone);
	ps->gone = NULL;
	ps->ngone = 0;
	ps->expired = 0;
}

/* Sets key <k> (open, named <name>) to expire at <at> ms. */
static void pool_expire(RedisModuleCtx *ctx, RedisModuleKey *k, RedisModuleString *name,
                        long long at)
{
	if (RedisModule_KeyType(k) == REDISMODULE_KEYTYPE_EMPTY ||
	    RedisModule_SetAbsExpire(k, at) != REDISMODULE_OK)
		return;
	RedisModule_Replicate(ctx, "PEXPIREAT", "sl", name, at);
	RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "expire", name);
}

/* Records an admission in the pool (see rl_module.h). */
int rl_pool_admit(RedisModuleCtx *ctx, struct rl_pool_state *ps, int64_t now, int64_t cost)
{
	const struct rl_pool *pool = ps->pool;
	RedisModuleKey *k = RedisModule_OpenKey(ctx, ps->log.name, REDISMODULE_READ | REDISMODULE_WRITE);
	RedisModuleKey *h;
	long long at;
	int exists;

	if (rl_log_add(ctx, k, &ps->log, now, cost) == -1) {
		RedisModule_CloseKey(k);
		return -1;
	}
	h = RedisModule_OpenKey(ctx, ps->hkey, REDISMODULE_READ | REDISMODULE_WRITE);
	if (ps->orphan && RedisModule_KeyType(h) != REDISMODULE_KEYTYPE_EMPTY &&
	    RedisModule_DeleteKey(h) == REDISMODULE_OK) {
		RedisModule_Replicate(ctx, "DEL", "s", ps->hkey);
		RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "del", ps->hkey);
	}
	hash_put(ctx, h, ps->hkey, pool->acc, pool->acc_len,
	         hash_units(h, pool->acc, pool->acc_len, &exists) + cost);
	if (ps->expired)
		pool_trim_keys(ctx, ps, k, h);
	/* the log's TTL as a window's; the hash lives as long */
	at = (long long)(floor_div(now, 1000) + rl_log_ttl_ms(&ps->log, now));
	pool_expire(ctx, k, ps->log.name, at);
	pool_expire(ctx, h, ps->hkey, at);
	RedisModule_CloseKey(h);
	RedisModule_CloseKey(k);
	return 0;
}

/* A denial's trim of the pool (see rl_module.h). */
void rl_pool_trim(RedisModuleCtx *ctx, struct rl_pool_state *ps)
{
	RedisModuleKey *k, *h;

	if (!ps->expired)
		return;
	k = RedisModule_OpenKey(ctx, ps->log.name, REDISMODULE_READ | REDISMODULE_WRITE);
	h = RedisModule_OpenKey(ctx, ps->hkey, REDISMODULE_READ | REDISMODULE_WRITE);
	pool_trim_keys(ctx, ps, k, h);
	RedisModule_CloseKey(h);
	RedisModule_CloseKey(k);
}
