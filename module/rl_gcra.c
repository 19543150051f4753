/* rl_gcra.c - the module's token bucket (GCRA): one string key per
 * (policy, account), "<tat>:<frac>:<ms>:<limit>:<owed>", read and written
 * as lua/sliding_window.lua's gcra() does; the math is rl_args_gcra(). */
#include "rl_module.h"

/* A GCRA decision (the script's gcra(); the math is rl_args_gcra()):
 * reads the string key <name> (borrowed from argv), and on an admission
 * stores the new TAT with its expiry, propagated as SET and PEXPIREAT.
 * Writes the reply. */
void rl_gcra_decide(RedisModuleCtx *ctx, RedisModuleString *name, RedisModuleString *qname,
                    const struct rl_decision *d, int64_t now, int oom, RedisModuleString *rec)
{
	RedisModuleKey *k = RedisModule_OpenKey(ctx, name, REDISMODULE_READ);
	int type = RedisModule_KeyType(k), has = 0, qdeny = 0;
	struct rl_gcra_value v;
	struct rl_gcra g;
	struct rl_state qs = { .name = qname, .w = &d->w[1] };
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
	/* a quota beside the bucket (the script's gcra(): read after it) */
	if (!err && qname)
		err = rl_quota_read(ctx, &qs, now);
	if (err) {
		RedisModule_ReplyWithError(ctx, err);
		return;
	}
	/* the quota's refusal decides when the bucket admits, or refuses with
	 * a retry no longer (a tie: the bucket) */
	qdeny = qname && qs.count + d->cost > qs.w->limit &&
	        (g.allowed || qs.oldest - now > g.retry);
	if (qdeny) {
		RedisModule_ReplyWithArray(ctx, 6);
		RedisModule_ReplyWithLongLong(ctx, 0);
		RedisModule_ReplyWithLongLong(ctx, qs.w->limit);
		RedisModule_ReplyWithLongLong(ctx, qs.w->limit - qs.count > 0 ? qs.w->limit - qs.count : 0);
		RedisModule_ReplyWithLongLong(ctx, qs.oldest - now);
		RedisModule_ReplyWithLongLong(ctx, qs.oldest - now);
		RedisModule_ReplyWithLongLong(ctx, 1);
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
		if (rec && rl_settle_write(ctx, rec, d, NULL, 0, now) == -1) {
			RedisModule_ReplyWithError(ctx, "ERR ratelimit: the server refused the write");
			return;
		}
		if (qname && rl_quota_add(ctx, &qs, now, d->cost) == -1) {
			RedisModule_ReplyWithError(ctx, "ERR ratelimit: the server refused the write");
			return;
		}
		/* the quota decides when it has less left (a tie: the bucket) */
		if (qname && qs.w->limit - qs.count - d->cost < g.remaining) {
			RedisModule_ReplyWithArray(ctx, 6);
			RedisModule_ReplyWithLongLong(ctx, 1);
			RedisModule_ReplyWithLongLong(ctx, qs.w->limit);
			RedisModule_ReplyWithLongLong(ctx, qs.w->limit - qs.count - d->cost);
			RedisModule_ReplyWithLongLong(ctx, qs.score - now);
			RedisModule_ReplyWithLongLong(ctx, 0);
			RedisModule_ReplyWithLongLong(ctx, 1);
			return;
		}
	}
	RedisModule_ReplyWithArray(ctx, 6);
	RedisModule_ReplyWithLongLong(ctx, g.allowed);
	RedisModule_ReplyWithLongLong(ctx, d->w[0].burst);
	RedisModule_ReplyWithLongLong(ctx, g.remaining);
	RedisModule_ReplyWithLongLong(ctx, g.reset);
	RedisModule_ReplyWithLongLong(ctx, g.retry);
	RedisModule_ReplyWithLongLong(ctx, 0);
}
