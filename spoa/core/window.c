/*
 * window - rate-limit policy math without I/O (see window.h).
 *
 * Everything here is pure: keys and script arguments are built into the
 * caller's struct window_args, and Redis replies are only read.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "decimal.h"
#include "rl_args.h"
#include "stored.h"
#include "window.h"

#define US_PER_S 1000000

/* window_reply holds what stored_read_reply() reads */
_Static_assert(WINDOW_REPLY_INTS == STORED_REPLY_INTS, "a reply's integers");

static const char *const status_names[WINDOW_STATUS_COUNT] = {
	[WINDOW_ALLOW] = "allow",
	[WINDOW_DENY]  = "deny",
	[WINDOW_ERROR] = "error",
};

static const char *const reason_names[WINDOW_REASON_COUNT] = {
	[WINDOW_REASON_NONE]              = "",
	[WINDOW_REASON_REDIS_UNAVAILABLE] = "redis-unavailable",
	[WINDOW_REASON_REDIS_TIMEOUT]     = "redis-timeout",
	[WINDOW_REASON_REDIS_ERROR]       = "redis-error",
	[WINDOW_REASON_UNKNOWN_POLICY]    = "unknown-policy",
	[WINDOW_REASON_BAD_KEY]           = "bad-key",
	[WINDOW_REASON_BAD_COST]          = "bad-cost",
	[WINDOW_REASON_SHADOW_DENY]       = "shadow-deny",
	[WINDOW_REASON_OVERLOAD]          = "overload",
	[WINDOW_REASON_REDIS_EVICTS]      = "redis-evicts-keys",
	[WINDOW_REASON_REDIS_OOM]         = "redis-oom",
	[WINDOW_REASON_TOO_MANY_MESSAGES] = "too-many-messages",
	[WINDOW_REASON_BLOCKED]           = "blocked",
	[WINDOW_REASON_POOL_FULL]         = "pool-full",
	[WINDOW_REASON_POOL_SHARE]        = "pool-share",
	[WINDOW_REASON_IN_FLIGHT]         = "in-flight",
	[WINDOW_REASON_QUOTA]             = "quota",
};

static const char *const cal_names[WINDOW_CAL_COUNT] = {
	[WINDOW_CAL_NONE] = "", [WINDOW_CAL_HOUR] = "hour", [WINDOW_CAL_DAY] = "day",
	[WINDOW_CAL_WEEK] = "week", [WINDOW_CAL_MONTH] = "month",
};

/* the engines' kinds, the same values (module/rl_args.h) */
_Static_assert((int)WINDOW_CAL_MONTH == (int)RL_CAL_MONTH && (int)WINDOW_CAL_HOUR == (int)RL_CAL_HOUR,
               "calendar kinds");

/* Nominal length of <cal>, ms (see window.h). */
uint64_t window_cal_ms(enum window_cal cal)
{
	static const uint64_t ms[WINDOW_CAL_COUNT] = {
		[WINDOW_CAL_HOUR] = 3600000ULL, [WINDOW_CAL_DAY] = 86400000ULL,
		[WINDOW_CAL_WEEK] = 7 * 86400000ULL, [WINDOW_CAL_MONTH] = 31 * 86400000ULL,
	};

	return (unsigned)cal < WINDOW_CAL_COUNT ? ms[cal] : 0;
}

/* Name of <cal>; static storage. */
const char *window_cal_name(enum window_cal cal)
{
	return (unsigned)cal < WINDOW_CAL_COUNT ? cal_names[cal] : "";
}

/* Does <p> or one of its overrides count a quota? */
bool window_policy_has_quota(const struct window_policy *p)
{
	size_t i, j;

	for (i = 0; i < p->nwin; i++)
		if (p->win[i].cal)
			return true;
	for (i = 0; i < p->noverrides; i++)
		for (j = 0; j < p->overrides[i].nwin; j++)
			if (p->overrides[i].win[j].cal)
				return true;
	return false;
}

/* Name of <s>; "unknown" outside the enum. Static storage. */
const char *window_status_str(enum window_status s)
{
	if ((unsigned)s >= WINDOW_STATUS_COUNT)
		return "unknown";
	return status_names[s];
}

/* Wire name of <r> ("" for none and out of range). Static storage. */
const char *window_reason_str(enum window_reason r)
{
	if ((unsigned)r >= WINDOW_REASON_COUNT)
		return "";
	return reason_names[r];
}

/* Bytewise order on the keys of two struct window_override <a>, <b>. */
int window_override_cmp(const void *a, const void *b)
{
	const struct window_override *x = a, *y = b;
	size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
	int c = memcmp(x->key, y->key, n);

	if (c)
		return c;
	return (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

/* Limits for <key>/<key_len> under <p>, borrowed from <p>; <*nwin> set. */
const struct window_limit *window_limits_for(const struct window_policy *p,
                                             const char *key, size_t key_len,
                                             unsigned *nwin)
{
	const struct window_override *o = NULL;

	/* Only the key fields of <probe> are read: keys longer than an override
	 * key can hold cannot match anyway. */
	if (p->noverrides && key_len <= WINDOW_KEY_MAX) {
		struct window_override probe = { .key_len = key_len };

		memcpy(probe.key, key, key_len);
		o = bsearch(&probe, p->overrides, p->noverrides, sizeof(*p->overrides),
		            window_override_cmp);
	}
	if (o) {
		*nwin = o->nwin;
		return o->win;
	}
	*nwin = p->nwin;
	return p->win;
}

/* Plan <name>/<len> of <p>, borrowed from <p>, or NULL. */
const struct window_plan *window_plan_find(const struct window_policy *p,
                                           const char *name, size_t len)
{
	size_t i;

	for (i = 0; i < p->nplans; i++)
		if (p->plans[i].name_len == len && memcmp(p->plans[i].name, name, len) == 0)
			return &p->plans[i];
	return NULL;
}

/* What GCRA limit <lim> announces (see window.h) into <out>. */
void window_announced(const struct window_limit *lim, struct window_limit *out)
{
	*out = *lim;
	if (!lim->burst || !lim->limit)
		return;
	/* (burst * window fits: the config bounds it by 2^52 us) */
	out->limit = lim->burst;
	out->window_ms = (lim->burst * lim->window_ms + lim->limit - 1) / lim->limit;
	out->burst = 0;
}

/* Does precision= of <p> apply to a window of <window_ms>? Only windows
 * longer than a bucket are bucketed: "10/1s 1000/1h precision=1m" keeps
 * the 1s window exact. */
bool window_is_bucketed(const struct window_policy *p, uint64_t window_ms)
{
	return p->precision_ms && window_ms > p->precision_ms;
}

/* Check <precision_ms> against <win>/<nwin> (see window.h); <why> is the
 * caller's buffer. */
int window_check_precision(uint64_t precision_ms, const struct window_limit *win,
                           unsigned nwin, char *why, size_t cap)
{
	char ps[32], ws[32];
	unsigned i;

	window_format_ms(precision_ms, ps, sizeof(ps));
	if (precision_ms < WINDOW_PRECISION_MIN_MS) {
		snprintf(why, cap, "precision=%s is below the minimum of %ds", ps,
		         WINDOW_PRECISION_MIN_MS / 1000);
		return -1;
	}
	for (i = 0; i < nwin; i++) {
		/* (a quota is one counter per period, never in buckets) */
		if (win[i].window_ms <= precision_ms || win[i].cal)
			continue;
		window_format_ms(win[i].window_ms, ws, sizeof(ws));
		if (win[i].window_ms % precision_ms) {
			snprintf(why, cap, "precision=%s does not divide the %s window", ps, ws);
			return -1;
		}
		if (win[i].window_ms / precision_ms > WINDOW_PRECISION_MAX_BUCKETS) {
			snprintf(why, cap, "precision=%s gives %" PRIu64 " buckets for the %s window "
			         "(at most %d)", ps, win[i].window_ms / precision_ms, ws,
			         WINDOW_PRECISION_MAX_BUCKETS);
			return -1;
		}
	}
	return 0;
}

/* Accept <key>/<key_len> if it is 1..WINDOW_KEY_MAX bytes (any bytes: the
 * key travels length-delimited). Returns 0 or -1. */
int window_check_key(const char *key, size_t key_len)
{
	if (!key || key_len == 0 || key_len > WINDOW_KEY_MAX)
		return -1;
	return 0;
}

/* Compact text of <ms> into <dst>/<cap>: the largest unit that divides it.
 * Written by hand, not snprintf: every decision formats its window into
 * the Redis arguments, and snprintf was 7 % of the agent's instructions per
 * decision. Cut short and -1 when it does not fit, as snprintf would. */
int window_format_ms(uint64_t ms, char *dst, size_t cap)
{
	static const struct { uint64_t ms; const char *unit; size_t len; } units[] = {
		{ 3600000, "h", 1 }, { 60000, "m", 1 }, { 1000, "s", 1 }, { 1, "ms", 2 },
	};
	char tmp[DECIMAL_U64_LEN + 2];
	size_t i, n;

	for (i = 0; i < sizeof(units) / sizeof(units[0]) - 1; i++)
		if (ms && ms % units[i].ms == 0)
			break;
	n = decimal_format(ms / units[i].ms, tmp);
	memcpy(tmp + n, units[i].unit, units[i].len);
	n += units[i].len;
	if (n >= cap) {
		if (cap) {
			memcpy(dst, tmp, cap - 1);
			dst[cap - 1] = '\0';
		}
		return -1;
	}
	memcpy(dst, tmp, n);
	dst[n] = '\0';
	return (int)n;
}

/* See window.h. */
bool window_deny_holds(const struct window_policy *p, uint64_t cost,
                       const struct window_decision *d)
{
	if (d->status != WINDOW_DENY)
		return false;
	/* a pool's deny carries its reason, which the cache does not keep;
	 * and a share can grow before the retry (accounts leave the pool);
	 * a lease is mostly released before it ends */
	if (d->reason == WINDOW_REASON_POOL_FULL || d->reason == WINDOW_REASON_POOL_SHARE ||
	    d->reason == WINDOW_REASON_IN_FLIGHT || d->reason == WINDOW_REASON_QUOTA)
		return false;
	if (p->algorithm != WINDOW_ALGO_GCRA)
		return true;
	return d->remaining >= 0 && (uint64_t)d->remaining + 1 == cost;
}

/* Seconds, rounded up, in <us>; 0 and negatives give 0. */
int64_t window_us_to_s_ceil(int64_t us)
{
	if (us <= 0)
		return 0;
	return us / US_PER_S + (us % US_PER_S != 0);
}

/* Is <why> a failure of Redis (what on-redis-error is about), rather than
 * of the request (bad key, bad cost) or of the agent (overload)? */
static bool reason_is_redis(enum window_reason why)
{
	return why == WINDOW_REASON_REDIS_UNAVAILABLE || why == WINDOW_REASON_REDIS_TIMEOUT ||
	       why == WINDOW_REASON_REDIS_ERROR || why == WINDOW_REASON_REDIS_EVICTS ||
	       why == WINDOW_REASON_REDIS_OOM;
}

/* The error decision of <p> (which may be NULL: no policy) for <why>. */
void window_decide_error(const struct window_policy *p, enum window_reason why,
                         struct window_decision *d)
{
	memset(d, 0, sizeof(*d));
	d->status = WINDOW_ERROR;
	d->reason = why;
	/* A malformed request stays an error even on a fail-open policy:
	 * fail-open covers Redis being away, not a bad cost or key. */
	if (p && p->on_error == WINDOW_ON_ERROR_ALLOW && reason_is_redis(why)) {
		/* Fail-open: HAProxy still learns the limit, but no remaining or
		 * reset it could mistake for a real count. */
		d->status = WINDOW_ALLOW;
		d->limit = p->nwin ? (int64_t)window_limit_quota(&p->win[0]) : 0;
	}
}

/* Decision of <p> from script reply <r> (borrowed); see window.h. The
 * reply's integers are read by stored_read_reply(), the one reader (7 of
 * them for a pooled policy, the 7th saying whether the pool refused). */
int window_decide_reply(const struct window_policy *p, const struct window_reply *r,
                        struct window_decision *d)
{
	struct stored_reply sr;
	bool leased;

	/* (the leases' pair is one index more than the windows) */
	leased = p && p->inflight && p->lease_at >= 0;
	if (!r || r->kind != WINDOW_REPLY_INTEGERS ||
	    stored_read_reply(r->v, r->n, WINDOW_MAX_WINDOWS + (leased ? 1 : 0), p && p->pooled,
	                      &sr) == -1) {
		enum window_reason why = WINDOW_REASON_REDIS_ERROR;

		if (window_reply_is_oom(r))
			why = WINDOW_REASON_REDIS_OOM;
		else if (window_reply_is_evicts(r))
			why = WINDOW_REASON_REDIS_EVICTS;
		window_decide_error(p, why, d);
		return -1;
	}
	memset(d, 0, sizeof(*d));
	d->has_quota = true;
	d->limit = sr.limit;
	d->remaining = sr.remaining;
	d->reset = window_us_to_s_ceil(sr.reset_us);
	d->reset_us = sr.reset_us;
	d->window = sr.window;
	/* the leases' pair, and a pool after it, are no window of the policy */
	if (leased && d->window >= (unsigned)p->lease_at) {
		if (d->window == (unsigned)p->lease_at && sr.pool == STORED_POOL_NONE && !sr.allowed)
			d->reason = WINDOW_REASON_IN_FLIGHT;
		d->window = WINDOW_MAX_WINDOWS;
	}
	/* the 1.0.x key of an upgrade is window 0 again (see window_build_args) */
	if (p && p->legacy_key && p->nwin == 1 && d->window == 1)
		d->window = 0;
	if (sr.pool != STORED_POOL_NONE)
		d->reason = sr.pool == STORED_POOL_FULL ? WINDOW_REASON_POOL_FULL : WINDOW_REASON_POOL_SHARE;
	if (sr.allowed) {
		d->status = WINDOW_ALLOW;
		/* (settle=: the id of the reservation's record) */
		if (leased || (p && p->settle_hdr[0] && p->lease_id[0]))
			memcpy(d->lease, p->lease_id, sizeof(d->lease));
		return 0;
	}
	d->status = WINDOW_DENY;
	/* the deciding window a calendar quota (the limits of this call) */
	if (p && d->reason == WINDOW_REASON_NONE && d->window < p->nwin && p->win[d->window].cal)
		d->reason = WINDOW_REASON_QUOTA;
	d->retry_after_us = sr.retry_after_us;
	d->retry_after = window_us_to_s_ceil(d->retry_after_us);
	/* A deny always means "come back later", never "now". */
	if (d->retry_after < 1)
		d->retry_after = 1;
	if (p && p->shadow) {
		d->status = WINDOW_ALLOW;
		d->reason = WINDOW_REASON_SHADOW_DENY;
	}
	return 0;
}

/* Is <r> the NOSCRIPT error (the script cache of that node lacks ours)? */
bool window_reply_is_noscript(const struct window_reply *r)
{
	return r && r->kind == WINDOW_REPLY_ERROR && r->str && r->len >= 8 &&
	       memcmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Is <r> the OOM refusal? Redis 7 passes it through from the script's
 * ZADD as is; Redis 6 wraps it: "ERR Error running script ...: OOM ...". */
bool window_reply_is_oom(const struct window_reply *r)
{
	static const char oom[] = "OOM command not allowed";

	if (!r || r->kind != WINDOW_REPLY_ERROR || !r->str)
		return false;
	if (r->len >= 4 && memcmp(r->str, "OOM ", 4) == 0)
		return true;
	return memmem(r->str, r->len, oom, sizeof(oom) - 1) != NULL;
}

/* Is <r> the module's refusal on a Redis whose maxmemory-policy may evict
 * keys ("EVICTS ratelimit: ...")? The same verdict as the agent's own
 * eviction check, reached when the policy changed after the agent looked. */
bool window_reply_is_evicts(const struct window_reply *r)
{
	return r && r->kind == WINDOW_REPLY_ERROR && r->str && r->len >= 7 &&
	       memcmp(r->str, "EVICTS ", 7) == 0;
}

/* Empty accumulator for window_decision_merge(). */
void window_decision_init(struct window_decision *acc)
{
	memset(acc, 0, sizeof(*acc));
	acc->status = WINDOW_STATUS_COUNT;
}

/* Severity rank of <d>: higher is more restrictive. */
static int decision_rank(const struct window_decision *d)
{
	switch (d->status) {
	case WINDOW_ERROR:
		return 4;
	case WINDOW_DENY:
		return 3;
	case WINDOW_ALLOW:
		return d->has_quota ? 2 : 1;
	default:
		return 0;
	}
}

/* Keep in <acc> the more restrictive of <acc> and <d> (see window.h). */
void window_decision_merge(struct window_decision *acc, const struct window_decision *d)
{
	int ra = decision_rank(acc), rd = decision_rank(d);

	if (rd > ra) {
		*acc = *d;
		return;
	}
	if (rd < ra)
		return;
	/* Seconds first: a decision from a local cache may lack the raw us. */
	if (d->status == WINDOW_DENY &&
	    (d->retry_after > acc->retry_after ||
	     (d->retry_after == acc->retry_after && d->retry_after_us > acc->retry_after_us)))
		*acc = *d;
	else if (d->status == WINDOW_ALLOW && d->has_quota && d->remaining < acc->remaining)
		*acc = *d;
}
