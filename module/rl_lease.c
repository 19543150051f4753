/* rl_lease.c - in-flight leases (inflight=, protocol 4) in the module, as
 * lua/sliding_window.lua's read_leases() and its "release" mode do them:
 * an account's leases are one sorted set, member = lease id, score = the
 * lease's end (Redis time, us); a lease runs while its end is after now.
 * In a decision the leases are a window of length 0 (rl_log.c trims them
 * and sets their TTL as a log window's: cut = now, TTL = the latest end).
 * Every write is propagated as the plain command it amounts to (ZADD,
 * ZREM, ZREMRANGEBYSCORE, PEXPIREAT). */
#include <string.h>

#include "rl_module.h"

const char *rl_lease_read(RedisModuleCtx *ctx, struct rl_state *s, int64_t now)
{
	RedisModuleKey *k = RedisModule_OpenKey(ctx, s->name, REDISMODULE_READ);
	int type = RedisModule_KeyType(k);
	const char *err = NULL;

	s->count = 0;
	s->has_oldest = s->has_top = 0;
	if (type == REDISMODULE_KEYTYPE_EMPTY)
		goto out;
	if (type != REDISMODULE_KEYTYPE_ZSET) {
		err = RL_ERR_WRONGTYPE;
		goto out;
	}
	/* (the running leases only: at most the bound, as many as the script
	 * reads with its one ZRANGEBYSCORE) */
	if (RedisModule_ZsetFirstInScoreRange(k, (double)now, REDISMODULE_POSITIVE_INFINITE, 1, 0) ==
	    REDISMODULE_OK) {
		while (!RedisModule_ZsetRangeEndReached(k)) {
			double sc = 0;
			RedisModuleString *m = RedisModule_ZsetRangeCurrentElement(k, &sc);

			if (!m)
				break;
			RedisModule_FreeString(ctx, m);
			if (!s->has_oldest)
				s->oldest = (int64_t)sc;
			s->has_oldest = s->has_top = 1;
			s->top = (int64_t)sc;
			s->count++;
			if (!RedisModule_ZsetRangeNext(k))
				break;
		}
	}
	RedisModule_ZsetRangeStop(k);
out:
	RedisModule_CloseKey(k);
	return err;
}

int rl_lease_add(RedisModuleCtx *ctx, RedisModuleKey *k, struct rl_state *s, int64_t now)
{
	RedisModuleString *m = RedisModule_CreateString(ctx, s->w->lease_id, s->w->lease_id_len);
	int flags = 0, rc = -1;

	s->score = now + s->w->lease_ms * 1000;
	if (RedisModule_ZsetAdd(k, (double)s->score, m, &flags) == REDISMODULE_OK) {
		RedisModule_Replicate(ctx, "ZADD", "sls", s->name, (long long)s->score, m);
		RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zadd", s->name);
		rc = 0;
	}
	RedisModule_FreeString(ctx, m);
	return rc;
}

int64_t rl_lease_retry(RedisModuleCtx *ctx, const struct rl_state *s, int64_t need, int64_t now)
{
	RedisModuleKey *k = RedisModule_OpenKey(ctx, s->name, REDISMODULE_READ);
	int64_t at = s->oldest, i = 0;

	if (RedisModule_KeyType(k) == REDISMODULE_KEYTYPE_ZSET &&
	    RedisModule_ZsetFirstInScoreRange(k, (double)now, REDISMODULE_POSITIVE_INFINITE, 1, 0) ==
	        REDISMODULE_OK) {
		while (!RedisModule_ZsetRangeEndReached(k)) {
			double sc = 0;
			RedisModuleString *m = RedisModule_ZsetRangeCurrentElement(k, &sc);

			if (!m)
				break;
			RedisModule_FreeString(ctx, m);
			at = (int64_t)sc;
			if (++i >= need || !RedisModule_ZsetRangeNext(k))
				break;
		}
		RedisModule_ZsetRangeStop(k);
	}
	RedisModule_CloseKey(k);
	return at - now;
}

const char *rl_lease_release(RedisModuleCtx *ctx, RedisModuleString *name, RedisModuleString *id,
                             int64_t now, long long *code, long long *live)
{
	RedisModuleKey *k = RedisModule_OpenKey(ctx, name, REDISMODULE_READ | REDISMODULE_WRITE);
	struct rl_window w;
	struct rl_state s;
	double sc = 0;
	int type = RedisModule_KeyType(k), deleted = 0;
	const char *err = NULL;

	*code = *live = 0;
	if (type == REDISMODULE_KEYTYPE_EMPTY)
		goto out;
	if (type != REDISMODULE_KEYTYPE_ZSET) {
		err = RL_ERR_WRONGTYPE;
		goto out;
	}
	if (RedisModule_ZsetScore(k, id, &sc) == REDISMODULE_OK &&
	    RedisModule_ZsetRem(k, id, &deleted) == REDISMODULE_OK && deleted) {
		RedisModule_Replicate(ctx, "ZREM", "ss", name, id);
		RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zrem", name);
		*code = (int64_t)sc > now ? 1 : 2;
	}
	/* the ended leases go as a decision's trim does it (a window of 0) */
	memset(&w, 0, sizeof(w));
	memset(&s, 0, sizeof(s));
	s.name = name;
	s.w = &w;
	s.cut = now;
	rl_scratch_begin();
	rl_log_trim(ctx, k, &s, now, -1);
	rl_scratch_release_dead();
	if (RedisModule_KeyType(k) == REDISMODULE_KEYTYPE_ZSET)
		*live = (long long)RedisModule_ValueLength(k);
out:
	RedisModule_CloseKey(k);
	return err;
}
