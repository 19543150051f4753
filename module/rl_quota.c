/* rl_quota.c - the module's calendar quotas: one string key per (policy,
 * account, kind of period), "<end>:<units>", the units admitted in the
 * period that ends at <end> (us, Redis time), read and written as
 * lua/sliding_window.lua's quota windows are; the period is
 * rl_cal_period(). */
#include "rl_module.h"

/* Quota window <s>, read only: what counts at <now> (the stored units
 * while their period has not ended) and the end an admission writes
 * (the period's; a longer stored one is kept, see the script's header).
 * Returns NULL or the error reply text. */
const char *rl_quota_read(RedisModuleCtx *ctx, struct rl_state *s, int64_t now)
{
	RedisModuleKey *k = RedisModule_OpenKey(ctx, s->name, REDISMODULE_READ);
	int type = RedisModule_KeyType(k);
	struct rl_quota_value v = { 0, 0 };
	const char *err = NULL;
	int64_t start, end;

	if (type == REDISMODULE_KEYTYPE_STRING) {
		size_t len;
		const char *p = RedisModule_StringDMA(k, &len, REDISMODULE_READ);

		if (!p || rl_args_parse_quota(p, len, &v) == -1)
			err = RL_ERR_ENTRY_TEXT;
	} else if (type != REDISMODULE_KEYTYPE_EMPTY) {
		err = RL_ERR_WRONGTYPE;
	}
	RedisModule_CloseKey(k);
	if (err)
		return err;
	rl_cal_period(s->w, now, &start, &end);
	s->count = 0;
	s->has_oldest = 1;
	s->oldest = end;
	s->score = end;
	if (v.end > now) {
		/* counted until its own end; an admission keeps the later end */
		s->count = v.units;
		s->oldest = v.end;
		if (v.end > end)
			s->score = v.end;
	}
	return NULL;
}

/* Records an admission of <cost> in quota window <s> (read at <now>):
 * SET "<end>:<units>" and its expiry, propagated as SET and PEXPIREAT.
 * Returns 0, or -1 when Redis refused the write. */
int rl_quota_add(RedisModuleCtx *ctx, struct rl_state *s, int64_t now, int64_t cost)
{
	struct rl_quota_value v = { s->score, s->count + cost };
	long long at = (long long)(floor_div(now, 1000) + ceil_div_pos(s->score - now, 1000) + 1);
	RedisModuleKey *k;
	RedisModuleString *sv;
	char buf[64];
	size_t len = rl_args_format_quota(buf, sizeof(buf), &v);
	int rc = -1;

	sv = RedisModule_CreateString(ctx, buf, len);
	k = RedisModule_OpenKey(ctx, s->name, REDISMODULE_READ | REDISMODULE_WRITE);
	if (RedisModule_StringSet(k, sv) != REDISMODULE_OK)
		goto out;
	RedisModule_Replicate(ctx, "SET", "ss", s->name, sv);
	RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_STRING, "set", s->name);
	if (RedisModule_SetAbsExpire(k, at) == REDISMODULE_OK) {
		RedisModule_Replicate(ctx, "PEXPIREAT", "sl", s->name, at);
		RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "expire", s->name);
	}
	rc = 0;
out:
	RedisModule_CloseKey(k);
	RedisModule_FreeString(ctx, sv);
	return rc;
}
