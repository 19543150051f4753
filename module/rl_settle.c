/* rl_settle.c - reserve, then settle (settle=) in the module,
 * as lua/sliding_window.lua's settle_write() and its "settle" mode do it:
 * an admission under settle= writes its reservation's record, a string
 * "c<cost hex>" then "/<score>" per pair before it, expiring after the
 * pair's ms; RATELIMIT.SETTLE takes the record and charges or refunds
 * real - reserved in each window (the script's header says how). Every
 * write is propagated as the plain command it amounts to. */
#include <stdio.h>
#include <string.h>

#include "rl_module.h"

#define RL_SETTLE_REFUSED "ERR ratelimit: the server refused the write"

/* Sets string <name> (borrowed) to <buf>/<len>, expiring at <at> (ms),
 * replicated as SET and PEXPIREAT. 0 or -1. */
static int settle_set(RedisModuleCtx *ctx, RedisModuleString *name, const char *buf, size_t len,
                      long long at)
{
	RedisModuleString *v = RedisModule_CreateString(ctx, buf, len);
	RedisModuleKey *k = RedisModule_OpenKey(ctx, name, REDISMODULE_READ | REDISMODULE_WRITE);
	int rc = -1;

	if (RedisModule_StringSet(k, v) != REDISMODULE_OK)
		goto out;
	RedisModule_Replicate(ctx, "SET", "ss", name, v);
	RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_STRING, "set", name);
	if (RedisModule_SetAbsExpire(k, at) == REDISMODULE_OK) {
		RedisModule_Replicate(ctx, "PEXPIREAT", "sl", name, at);
		RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "expire", name);
	}
	rc = 0;
out:
	RedisModule_CloseKey(k);
	RedisModule_FreeString(ctx, v);
	return rc;
}

int rl_settle_write(RedisModuleCtx *ctx, RedisModuleString *name, const struct rl_decision *d,
                    const int64_t *scores, size_t n, int64_t now)
{
	char buf[32 + RL_MAX_WINDOWS * 24];
	size_t len, i;

	len = (size_t)snprintf(buf, sizeof(buf), "c%llx", (long long)d->cost);
	for (i = 0; i < n && len < sizeof(buf); i++)
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "/%lld", (long long)scores[i]);
	if (len >= sizeof(buf))
		return -1;
	return settle_set(ctx, name, buf, len, (long long)(floor_div(now, 1000) + d->settle_ms));
}

/* Replaces member <old> (borrowed) of <k> at <score> by "<cum>:<cost>"
 * (none when <cost> is 0), replicated as ZREM and ZADD. */
static void settle_rewrite(RedisModuleCtx *ctx, RedisModuleKey *k, RedisModuleString *name,
                           RedisModuleString *old, int64_t score, int64_t cum, int64_t cost)
{
	char buf[48];
	RedisModuleString *m;
	int flags = 0, deleted = 0;

	if (RedisModule_ZsetRem(k, old, &deleted) == REDISMODULE_OK && deleted) {
		RedisModule_Replicate(ctx, "ZREM", "ss", name, old);
		RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zrem", name);
	}
	if (cost == 0)
		return;
	m = RedisModule_CreateString(ctx, buf, rl_args_format_member(buf, sizeof(buf), cum, cost));
	if (RedisModule_ZsetAdd(k, (double)score, m, &flags) == REDISMODULE_OK) {
		RedisModule_Replicate(ctx, "ZADD", "sls", name, (long long)score, m);
		RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zadd", name);
	}
	RedisModule_FreeString(ctx, m);
}

/* The refund of <r> units from the entry at <sc> of log <k> (open for
 * writing), the entries after it shifted down as much (the script's
 * settle_log()). Owns nothing past its return. NULL or the error text. */
static const char *settle_refund(RedisModuleCtx *ctx, RedisModuleKey *k, RedisModuleString *name,
                                 int64_t sc, int64_t r)
{
	RedisModuleString **later = NULL, *e = NULL;
	double *lsc = NULL, esc = 0;
	int64_t c, cost, cj, kj;
	size_t n = 0, cap = 0, i;
	const char *err = NULL, *p;
	size_t len;

	if (RedisModule_KeyType(k) != REDISMODULE_KEYTYPE_ZSET)
		return NULL;
	if (RedisModule_ZsetFirstInScoreRange(k, (double)sc, (double)sc, 0, 0) == REDISMODULE_OK &&
	    !RedisModule_ZsetRangeEndReached(k))
		e = RedisModule_ZsetRangeCurrentElement(k, &esc);
	RedisModule_ZsetRangeStop(k);
	p = e ? RedisModule_StringPtrLen(e, &len) : NULL;
	if (!p || rl_args_parse_member(p, len, &c, &cost) == -1)
		goto out;
	if (RedisModule_ZsetFirstInScoreRange(k, (double)sc, REDISMODULE_POSITIVE_INFINITE, 1, 0) ==
	    REDISMODULE_OK) {
		while (!RedisModule_ZsetRangeEndReached(k)) {
			double s = 0;
			RedisModuleString *m;

			if (n == cap) {
				cap = cap ? 2 * cap : 16;
				later = RedisModule_Realloc(later, cap * sizeof(*later));
				lsc = RedisModule_Realloc(lsc, cap * sizeof(*lsc));
			}
			m = RedisModule_ZsetRangeCurrentElement(k, &s);
			if (!m)
				break;
			later[n] = m;
			lsc[n++] = s;
			p = RedisModule_StringPtrLen(m, &len);
			if (rl_args_parse_member(p, len, &cj, &kj) == -1)
				err = RL_ERR_ENTRY_TEXT;
			if (!RedisModule_ZsetRangeNext(k))
				break;
		}
	}
	RedisModule_ZsetRangeStop(k);
	if (err)
		goto out;
	if (r > cost)
		r = cost;
	settle_rewrite(ctx, k, name, e, sc, c - r, cost - r);
	for (i = 0; i < n; i++) {
		p = RedisModule_StringPtrLen(later[i], &len);
		rl_args_parse_member(p, len, &cj, &kj);
		settle_rewrite(ctx, k, name, later[i], (int64_t)lsc[i], cj - r, kj);
	}
out:
	for (i = 0; i < n; i++)
		RedisModule_FreeString(ctx, later[i]);
	RedisModule_Free(later);
	RedisModule_Free(lsc);
	if (e)
		RedisModule_FreeString(ctx, e);
	return err;
}

/* What log window <name> (borrowed) of <w> leaves after a settle into
 * <st>: remaining (never below 0) and reset (until its oldest unit
 * leaves; 0 when empty). st->known 0 when it holds a member the engines
 * refuse (the script's state_log()). */
static void settle_state_log(RedisModuleCtx *ctx, RedisModuleString *name,
                             const struct rl_window *w, int64_t now, struct rl_settle_state *st)
{
	struct rl_state s;

	memset(&s, 0, sizeof(s));
	s.name = name;
	s.w = w;
	s.cut = now - w->win_ms * 1000;
	st->known = rl_log_read(ctx, &s) == NULL;
	st->limit = w->limit;
	st->remaining = w->limit - s.count > 0 ? w->limit - s.count : 0;
	st->reset = s.has_oldest ? s.oldest + w->win_ms * 1000 - now : 0;
}

/* Settles <delta> units in log window <name> (borrowed) of <w>, whose
 * reservation entry has score <sc> (-1: none), and reads what it leaves
 * into <st>. NULL or the error. */
static const char *settle_log(RedisModuleCtx *ctx, RedisModuleString *name,
                              const struct rl_window *w, int64_t delta, int64_t sc, int64_t now,
                              struct rl_settle_state *st)
{
	struct rl_state s;
	RedisModuleKey *k;
	const char *err;

	memset(&s, 0, sizeof(s));
	s.name = name;
	s.w = w;
	s.cut = now - w->win_ms * 1000;
	if (delta == 0 || (delta < 0 && (sc < 0 || sc <= s.cut))) {
		settle_state_log(ctx, name, w, now, st);
		return NULL;
	}
	err = rl_log_read(ctx, &s);
	if (err)
		return err;
	k = RedisModule_OpenKey(ctx, name, REDISMODULE_READ | REDISMODULE_WRITE);
	if (delta > 0) {
		if (rl_log_add(ctx, k, &s, now, delta) == -1)
			err = RL_SETTLE_REFUSED;
		else
			rl_log_trim(ctx, k, &s, now, rl_log_ttl_ms(&s, now));
	} else {
		err = settle_refund(ctx, k, name, sc, -delta);
	}
	RedisModule_CloseKey(k);
	if (!err)
		settle_state_log(ctx, name, w, now, st);
	return err;
}

/* What token bucket <w> leaves, owing <d> us and <f> / limit, into <st>:
 * remaining and reset as its next decision reads them. */
static void settle_state_gcra(const struct rl_window *w, int64_t d, int64_t f,
                              struct rl_settle_state *st)
{
	int64_t us = w->win_ms * 1000, bw = w->burst * us, qb = bw / w->limit, rb = bw % w->limit;

	/* read as the next decision reads it: at most a full bucket owed
	 * (compared so, as d * limit may not fit past qb) */
	if (d > qb || (d == qb && f > rb)) {
		d = qb;
		f = rb;
	}
	st->known = 1;
	st->limit = w->burst;
	st->remaining = (bw - d * w->limit - f) / us;
	st->reset = f > 0 ? d + 1 : d;
}

/* Settles <delta> units in token bucket <name> (borrowed) of <w>, when
 * it was written for its limit and window (the script's settle_gcra()),
 * and reads what it leaves into <st> (unknown when it was not). */
static const char *settle_gcra(RedisModuleCtx *ctx, RedisModuleString *name,
                               const struct rl_window *w, int64_t delta, int64_t now,
                               struct rl_settle_state *st)
{
	RedisModuleKey *k = RedisModule_OpenKey(ctx, name, REDISMODULE_READ);
	int type = RedisModule_KeyType(k);
	int64_t l = w->limit, us = w->win_ms * 1000, d = 0, f = 0, m, q, r, reset, at;
	struct rl_gcra_value v;
	char buf[96];
	size_t len;

	st->known = 0;
	if (type == REDISMODULE_KEYTYPE_STRING) {
		const char *p = RedisModule_StringDMA(k, &len, REDISMODULE_READ);

		if (!p || rl_args_parse_gcra(p, len, &v) == -1 || v.win_ms != w->win_ms || v.limit != l) {
			RedisModule_CloseKey(k);
			return NULL;
		}
		d = v.tat - now;
		f = v.frac;
		if (f >= l) {
			d++;
			f = 0;
		}
		if (d < 0)
			d = f = 0;
	} else if (type != REDISMODULE_KEYTYPE_EMPTY) {
		RedisModule_CloseKey(k);
		return RL_ERR_WRONGTYPE;
	}
	RedisModule_CloseKey(k);
	if (delta == 0 || (type == REDISMODULE_KEYTYPE_EMPTY && delta < 0)) {
		settle_state_gcra(w, d, f, st);
		return NULL;
	}
	/* (a whole bucket's worth or more: the bucket empty or full either
	 * way; kept below 2^52 so that the script's doubles are exact) */
	m = delta < 0 ? -delta : delta;
	if (m > RL_GCRA_MAX_SPAN / us)
		m = RL_GCRA_MAX_SPAN / us;
	q = m * us / l;
	r = m * us % l;
	if (delta > 0) {
		d += q;
		f += r;
		if (f >= l) {
			d++;
			f -= l;
		}
	} else {
		d -= q;
		f -= r;
		if (f < 0) {
			d--;
			f += l;
		}
		if (d < 0)
			d = f = 0;
	}
	reset = f > 0 ? d + 1 : d;
	v.tat = now + d;
	v.frac = f;
	v.win_ms = w->win_ms;
	v.limit = l;
	v.owed = d;
	len = rl_args_format_gcra(buf, sizeof(buf), &v);
	at = floor_div(now, 1000) + (reset + 999) / 1000 + 1;
	if (settle_set(ctx, name, buf, len, (long long)at) == -1)
		return RL_SETTLE_REFUSED;
	settle_state_gcra(w, d, f, st);
	return NULL;
}

/* Reads record "c<hex>[/<score>...]" <p>/<len> (the script's
 * '^c(%x+)([/%d]*)$', then each '/(%d+)') into *<cost> and up to <cap>
 * scores (-1 beyond those given). 0 or -1 (not a record). */
static int settle_parse_record(const char *p, size_t len, int64_t *cost, int64_t *sc, size_t cap)
{
	size_t i, h, n;
	int64_t c = 0;

	for (n = 0; n < cap; n++)
		sc[n] = -1;
	if (len < 2 || p[0] != 'c')
		return -1;
	for (h = 1; h < len && p[h] && strchr("0123456789abcdefABCDEF", p[h]) && h < 16; h++)
		c = c * 16 + (p[h] <= '9' ? p[h] - '0' : (p[h] | 0x20) - 'a' + 10);
	if (h == 1)
		return -1;
	for (i = h; i < len; i++)
		if (p[i] != '/' && (p[i] < '0' || p[i] > '9'))
			return -1;
	*cost = c;
	for (i = h, n = 0; i < len;) {
		int64_t x = 0;

		if (p[i] != '/' || i + 1 >= len || p[i + 1] < '0' || p[i + 1] > '9') {
			i++;
			continue;
		}
		for (i++; i < len && p[i] >= '0' && p[i] <= '9' && x < RL_MAX_MS * 1000000; i++)
			x = x * 10 + (p[i] - '0');
		if (n < cap)
			sc[n++] = x;
	}
	return 0;
}

const char *rl_settle(RedisModuleCtx *ctx, RedisModuleString **keys, size_t nk,
                      const struct rl_arg *args, size_t nargs, int64_t now,
                      struct rl_settled *out)
{
	struct rl_window w[RL_SETTLE_MAX];
	struct rl_settle_state st;
	int64_t sc[RL_SETTLE_MAX], real, reserved, delta = 0;
	RedisModuleKey *k;
	const char *err = NULL, *p;
	size_t n = nk - 1, i, len;
	int deleted = 0;

	memset(out, 0, sizeof(*out));
	if (nk < 2 || n > RL_SETTLE_MAX || nargs != 1 + 2 * n ||
	    rl_args_parse_int(args[0].p, args[0].len, &real) == -1 || real < 0 || real > RL_MAX_UNITS)
		return RL_ERR_ARGS_TEXT;
	for (i = 0; i < n; i++)
		if (rl_args_parse_window_pair(&args[1 + 2 * i], &args[2 + 2 * i], &w[i]) == -1 ||
		    w[i].prec_ms || w[i].lease_ms || w[i].settle_ms)
			return RL_ERR_WINDOW_TEXT;
	k = RedisModule_OpenKey(ctx, keys[n], REDISMODULE_READ | REDISMODULE_WRITE);
	if (RedisModule_KeyType(k) != REDISMODULE_KEYTYPE_EMPTY &&
	    RedisModule_KeyType(k) != REDISMODULE_KEYTYPE_STRING) {
		RedisModule_CloseKey(k);
		return RL_ERR_WRONGTYPE;
	}
	p = RedisModule_KeyType(k) == REDISMODULE_KEYTYPE_STRING
	        ? RedisModule_StringDMA(k, &len, REDISMODULE_READ) : NULL;
	/* no record (settled, ended, never made): nothing moves, the state
	 * is still read */
	if (p && settle_parse_record(p, len, &reserved, sc, n) == 0) {
		if (RedisModule_DeleteKey(k) != REDISMODULE_OK) {
			RedisModule_CloseKey(k);
			return RL_SETTLE_REFUSED;
		}
		RedisModule_Replicate(ctx, "DEL", "s", keys[n]);
		RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "del", keys[n]);
		deleted = 1;
	}
	RedisModule_CloseKey(k);
	if (deleted) {
		out->code = 1;
		out->delta = delta = real - reserved;
	}
	/* the answer: the window with the least left (a tie: the first), when
	 * every window could be read as the decisions read it */
	out->known = 1;
	for (i = 0; i < n && !err; i++) {
		/* (an error leaves <st> as it was: unknown) */
		memset(&st, 0, sizeof(st));
		err = w[i].burst ? settle_gcra(ctx, keys[i], &w[i], delta, now, &st)
		                 : settle_log(ctx, keys[i], &w[i], delta, deleted ? sc[i] : -1, now, &st);
		if (err || !st.known)
			out->known = 0;
		else if (i == 0 || st.remaining < out->state.remaining) {
			out->state = st;
			out->index = i;
		}
	}
	return err;
}
