/* rl_args.c - RATELIMIT.DECIDE's arguments, members and bucket ends
 * (see rl_args.h). Pure: no Redis, no I/O, no allocation.
 *
 * Numbers: the script converts with Lua's tonumber() (any Lua number);
 * the module takes decimal integers only, which is all the agent sends,
 * and bounds them (RL_MAX_*) so that no sum or product overflows or
 * loses precision. */
#include "rl_args.h"

#include <stdio.h>
#include <string.h>

static const char *const err_text[RL_ERR_COUNT] = {
	[RL_OK] = NULL,
	[RL_ERR_ARGS] = RL_ERR_ARGS_TEXT,
	[RL_ERR_WINDOW] = RL_ERR_WINDOW_TEXT,
	[RL_ERR_BATCH] = RL_ERR_BATCH_TEXT,
};

/* The error reply text of <e> (RL_OK: NULL). */
const char *rl_args_err_text(enum rl_err e)
{
	return (unsigned)e < RL_ERR_COUNT ? err_text[e] : RL_ERR_ARGS_TEXT;
}

/* A decimal integer into <out>; 0 or -1. */
int rl_args_parse_int(const char *p, size_t len, int64_t *out)
{
	int64_t v = 0;
	size_t i = 0;
	int neg = 0;

	if (len > 0 && p[0] == '-') {
		neg = 1;
		i = 1;
	}
	/* 18 digits: below 2^63 without an overflow check per digit */
	if (len == i || len - i > 18)
		return -1;
	for (; i < len; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -1;
		v = v * 10 + (p[i] - '0');
	}
	*out = neg ? -v : v;
	return 0;
}

/* An integer in [lo, hi] into <out>; 0 or -1. */
static int parse_bounded(const struct rl_arg *a, int64_t lo, int64_t hi, int64_t *out)
{
	int64_t v;

	if (rl_args_parse_int(a->p, a->len, &v) == -1 || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* <a> split at its first ':' into <left> and <right>, both digits only
 * (the script's '^(%d+):(%d+)$': neither empty nor signed). 0 or -1. */
static int split_pair(const struct rl_arg *a, struct rl_arg *left, struct rl_arg *right)
{
	const char *colon = memchr(a->p, ':', a->len);

	if (!colon)
		return -1;
	left->p = a->p;
	left->len = (size_t)(colon - a->p);
	right->p = colon + 1;
	right->len = a->len - left->len - 1;
	if (left->len == 0 || right->len == 0 || left->p[0] == '-' || right->p[0] == '-')
		return -1;
	return 0;
}

/* "gcra:<ms>:<burst>" (<a> without "gcra:") into <w>: burst * ms * 1000
 * at most RL_GCRA_MAX_SPAN. */
static int parse_gcra_window(const struct rl_arg *a, struct rl_window *w)
{
	struct rl_arg ms, burst;

	if (split_pair(a, &ms, &burst) == -1 || parse_bounded(&ms, 1, RL_MAX_MS, &w->win_ms) == -1 ||
	    parse_bounded(&burst, 1, RL_MAX_UNITS, &w->burst) == -1 ||
	    w->burst > RL_GCRA_MAX_SPAN / (w->win_ms * 1000))
		return -1;
	w->prec_ms = 0;
	return 0;
}

int rl_args_is_lease_id(const char *p, size_t len)
{
	size_t i;

	if (len < 1 || len > RL_LEASE_ID_MAX)
		return 0;
	for (i = 0; i < len; i++)
		if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f') ||
		      (p[i] >= 'A' && p[i] <= 'F')))
			return 0;
	return 1;
}

/* "lease:<ms>:<id>" (<a> without "lease:") into <w>: the script's
 * '^lease:(%d+):(%x+)$', ms 1..RL_MAX_MS, the id at most RL_LEASE_ID_MAX. */
static int parse_lease_window(const struct rl_arg *a, struct rl_window *w)
{
	const char *colon = memchr(a->p, ':', a->len);
	struct rl_arg ms;

	if (!colon)
		return -1;
	ms.p = a->p;
	ms.len = (size_t)(colon - a->p);
	w->lease_id = colon + 1;
	w->lease_id_len = a->len - ms.len - 1;
	if (ms.len == 0 || ms.p[0] == '-' || parse_bounded(&ms, 1, RL_MAX_MS, &w->lease_ms) == -1 ||
	    !rl_args_is_lease_id(w->lease_id, w->lease_id_len))
		return -1;
	w->win_ms = 0;
	w->prec_ms = 0;
	return 0;
}

/* "cal:<kind>:<tz minutes>:<anchor>" (<a> without "cal:") into <w>: kind
 * one of h d w m, the offset -840..840 (a sign only before digits), the
 * anchor 1..28 (the script's '^([hdwm]):(%-?%d+):(%d+)$'). */
static int parse_cal_window(const struct rl_arg *a, struct rl_window *w)
{
	static const char kinds[] = "hdwm";
	const char *k = a->len > 1 ? memchr(kinds, a->p[0], 4) : NULL;
	struct rl_arg rest = { a->p + 2, a->len - 2 }, tz, anchor;
	const char *colon = a->len > 2 ? memchr(rest.p, ':', rest.len) : NULL;

	if (!k || a->p[1] != ':' || !colon)
		return -1;
	tz.p = rest.p;
	tz.len = (size_t)(colon - rest.p);
	anchor.p = colon + 1;
	anchor.len = rest.len - tz.len - 1;
	if (anchor.len == 0 || anchor.p[0] == '-' || (tz.len == 1 && tz.p[0] == '-') ||
	    parse_bounded(&tz, -RL_CAL_TZ_MAX, RL_CAL_TZ_MAX, &w->tz_min) == -1 ||
	    parse_bounded(&anchor, 1, RL_CAL_ANCHOR_MAX, &w->anchor) == -1)
		return -1;
	w->cal = RL_CAL_HOUR + (int)(k - kinds);
	w->win_ms = 0;
	w->prec_ms = 0;
	return 0;
}

/* Window length <a>: "<ms>" (a log), "<ms>:<precision ms>" (bucketed),
 * "gcra:<ms>:<burst>", "lease:<ms>:<id>" or "cal:<kind>:<tz>:<anchor>". */
static int parse_window(const struct rl_arg *a, struct rl_window *w)
{
	struct rl_arg ms, prec;

	w->burst = 0;
	w->lease_ms = 0;
	w->lease_id = NULL;
	w->lease_id_len = 0;
	w->cal = RL_CAL_NONE;
	w->tz_min = 0;
	w->anchor = 0;
	w->settle_ms = 0;
	if (a->len > 7 && memcmp(a->p, "settle:", 7) == 0) {
		struct rl_arg rest = { a->p + 7, a->len - 7 };

		w->win_ms = w->prec_ms = 0;
		return parse_bounded(&rest, 1, RL_MAX_MS, &w->settle_ms);
	}
	if (a->len > 6 && memcmp(a->p, "lease:", 6) == 0) {
		struct rl_arg rest = { a->p + 6, a->len - 6 };

		return parse_lease_window(&rest, w);
	}
	if (a->len > 4 && memcmp(a->p, "cal:", 4) == 0) {
		struct rl_arg rest = { a->p + 4, a->len - 4 };

		return parse_cal_window(&rest, w);
	}
	if (a->len > 5 && memcmp(a->p, "gcra:", 5) == 0) {
		struct rl_arg rest = { a->p + 5, a->len - 5 };

		return parse_gcra_window(&rest, w);
	}
	if (!memchr(a->p, ':', a->len)) {
		w->prec_ms = 0;
		return parse_bounded(a, 1, RL_MAX_MS, &w->win_ms);
	}
	if (split_pair(a, &ms, &prec) == -1 || parse_bounded(&ms, 1, RL_MAX_MS, &w->win_ms) == -1 ||
	    parse_bounded(&prec, 1, RL_MAX_MS, &w->prec_ms) == -1)
		return -1;
	return 0;
}

/* Is <a> a pool's length argument ("pool:...")? */
static int is_pool(const struct rl_arg *a)
{
	return a->len >= 5 && memcmp(a->p, "pool:", 5) == 0;
}

/* A pool's pair <limit> "pool:<ms>:<headroom>:<account>" into <pool>
 * (the script's '^pool:(%d+):(%d+):(.+)$', headroom below the limit). */
static int parse_pool(const struct rl_arg *limit, const struct rl_arg *a, struct rl_pool *pool)
{
	struct rl_arg rest = { a->p + 5, a->len - 5 }, ms, head;
	const char *c1 = memchr(rest.p, ':', rest.len), *c2;

	if (parse_bounded(limit, 1, RL_MAX_UNITS, &pool->limit) == -1 || !c1)
		return -1;
	c2 = memchr(c1 + 1, ':', rest.len - (size_t)(c1 + 1 - rest.p));
	if (!c2)
		return -1;
	ms.p = rest.p;
	ms.len = (size_t)(c1 - rest.p);
	head.p = c1 + 1;
	head.len = (size_t)(c2 - head.p);
	pool->acc = c2 + 1;
	pool->acc_len = rest.len - (size_t)(pool->acc - rest.p);
	if (ms.len == 0 || ms.p[0] == '-' || head.len == 0 || head.p[0] == '-' ||
	    parse_bounded(&ms, 1, RL_MAX_MS, &pool->win_ms) == -1 ||
	    parse_bounded(&head, 0, pool->limit - 1, &pool->headroom) == -1 ||
	    pool->acc_len < 1 || pool->acc_len > RL_POOL_ACC_MAX)
		return -1;
	return 0;
}

/* Cost and <nwin> limit/window pairs from <args> into <d>; with
 * <pooled>, the pool's pair after them. */
static enum rl_err parse_decision(const struct rl_arg *args, size_t nwin, int pooled,
                                  struct rl_decision *d)
{
	size_t i, leases = 0;

	if (nwin < 1 || nwin > RL_MAX_WINDOWS)
		return RL_ERR_ARGS;
	if (parse_bounded(&args[0], 1, RL_MAX_UNITS, &d->cost) == -1)
		return RL_ERR_ARGS;
	d->nwin = nwin;
	for (i = 0; i < nwin; i++) {
		struct rl_window *w = &d->w[i];

		if (parse_bounded(&args[1 + 2 * i], 1, RL_MAX_UNITS, &w->limit) == -1 ||
		    parse_window(&args[2 + 2 * i], w) == -1)
			return RL_ERR_WINDOW;
		/* (at most one lease pair: the script's takes the first only) */
		if (w->lease_ms && ++leases > 1)
			return RL_ERR_WINDOW;
		/* (a reservation's record: the last pair of a decision of
		 * windows, without a pool) */
		if (w->settle_ms && (i + 1 < nwin || nwin < 2 || pooled))
			return RL_ERR_WINDOW;
	}
	d->settle_ms = d->w[nwin - 1].settle_ms;
	if (d->settle_ms)
		d->nwin = --nwin;
	/* a GCRA decision has one window, and no pool; or a calendar quota
	 * second */
	for (i = 0; (nwin > 1 || pooled) && i < nwin; i++)
		if (d->w[i].burst && (i > 0 || pooled || nwin > 2 || !d->w[1].cal))
			return RL_ERR_WINDOW;
	d->pooled = pooled;
	if (pooled && parse_pool(&args[1 + 2 * nwin], &args[2 + 2 * nwin], &d->pool) == -1)
		return RL_ERR_WINDOW;
	return RL_OK;
}

int rl_args_parse_window_pair(const struct rl_arg *limit, const struct rl_arg *win,
                              struct rl_window *w)
{
	if (parse_bounded(limit, 1, RL_MAX_UNITS, &w->limit) == -1)
		return -1;
	return parse_window(win, w);
}

/* The arguments (its key count included) of the batch decision whose key
 * count <nk> is args[ai] of <nargs>: a pooled one's last pair is its
 * pool's (2 * nk), else 2 + 2 * nk. */
static size_t batch_nargs(const struct rl_arg *args, size_t nargs, size_t ai, size_t nk)
{
	if (nk >= 3 && ai + 2 * nk - 1 < nargs && is_pool(&args[ai + 2 * nk - 1]))
		return 2 * nk;
	return 2 + 2 * nk;
}

/* Is <args> the batch form? */
int rl_args_is_batch(const struct rl_arg *args, size_t nargs)
{
	return nargs >= 1 && args[0].len == 5 && memcmp(args[0].p, "batch", 5) == 0;
}

/* A single decision over all <nkeys> keys into <d>. */
enum rl_err rl_args_parse_single(const struct rl_arg *args, size_t nargs, size_t nkeys,
                                 struct rl_decision *d)
{
	d->key0 = 0;
	if (nkeys >= 3 && nargs == 2 * nkeys - 1 && is_pool(&args[nargs - 1]))
		return parse_decision(args, nkeys - 2, 1, d);
	if (nkeys < 1 || nargs < 2 || nargs != 1 + 2 * nkeys)
		return RL_ERR_ARGS;
	return parse_decision(args, nkeys, 0, d);
}

/* Checks a batch's layout; *<n> decisions. */
enum rl_err rl_args_batch_check(const struct rl_arg *args, size_t nargs, size_t nkeys,
                                size_t *n)
{
	size_t ki = 0, ai = 2, d;
	int64_t nb, nk;

	if (nargs < 2 || rl_args_parse_int(args[1].p, args[1].len, &nb) == -1 || nb < 1 ||
	    (uint64_t)nb > nargs)
		return RL_ERR_BATCH;
	for (d = 0; d < (size_t)nb; d++) {
		size_t na;

		if (ai >= nargs || rl_args_parse_int(args[ai].p, args[ai].len, &nk) == -1 ||
		    nk < 1 || (uint64_t)nk > nkeys - ki || (uint64_t)nk > (nargs - ai) / 2)
			return RL_ERR_BATCH;
		na = batch_nargs(args, nargs, ai, (size_t)nk);
		if (ai + na > nargs)
			return RL_ERR_BATCH;
		ki += (size_t)nk;
		ai += na;
	}
	if (ki != nkeys || ai != nargs)
		return RL_ERR_BATCH;
	*n = (size_t)nb;
	return RL_OK;
}

/* The next decision of a checked batch into <d>. */
enum rl_err rl_args_batch_next(const struct rl_arg *args, struct rl_batch_iter *it,
                               struct rl_decision *d)
{
	int64_t nk = 0;
	size_t ai = it->ai, na;

	/* checked by rl_args_batch_check(): a number in range, the decision
	 * within the arguments */
	(void)rl_args_parse_int(args[ai].p, args[ai].len, &nk);
	na = batch_nargs(args, ai + 2 * (size_t)nk, ai, (size_t)nk);
	d->key0 = it->ki;
	it->ki += (size_t)nk;
	it->ai += na;
	if (na == 2 * (size_t)nk)
		return parse_decision(&args[ai + 1], (size_t)nk - 2, 1, d);
	return parse_decision(&args[ai + 1], (size_t)nk, 0, d);
}

/* One hex field of a member: 1.. digits (leading zeros allowed, as
 * Lua's tonumber(s, 16)), value at most RL_MAX_MEMBER. */
static int parse_hex(const char *p, size_t len, int64_t *out)
{
	int64_t v = 0;
	size_t i;

	if (len == 0)
		return -1;
	for (i = 0; i < len; i++) {
		int c = (unsigned char)p[i], x;

		if (c >= '0' && c <= '9')
			x = c - '0';
		else if (c >= 'a' && c <= 'f')
			x = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			x = c - 'A' + 10;
		else
			return -1;
		v = v * 16 + x;
		if (v > RL_MAX_MEMBER)
			return -1;
	}
	*out = v;
	return 0;
}

/* A stored member "<cum>:<cost>" into <cum>, <cost>; 0 or -1. */
int rl_args_parse_member(const char *p, size_t len, int64_t *cum, int64_t *cost)
{
	const char *colon = memchr(p, ':', len);
	size_t n;

	if (!colon)
		return -1;
	n = (size_t)(colon - p);
	if (parse_hex(p, n, cum) == -1 || parse_hex(colon + 1, len - n - 1, cost) == -1)
		return -1;
	return 0;
}

/* A pool's member "<cum>:<cost>:<account>"; 0 or -1. */
int rl_args_parse_pool_member(const char *p, size_t len, int64_t *cum, int64_t *cost,
                              const char **acc, size_t *acc_len)
{
	const char *c1 = memchr(p, ':', len), *c2;
	size_t n;

	if (!c1)
		return -1;
	c2 = memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - p));
	if (!c2 || c2 + 1 == p + len)
		return -1;
	n = (size_t)(c2 - p);
	if (rl_args_parse_member(p, n, cum, cost) == -1)
		return -1;
	*acc = c2 + 1;
	*acc_len = len - n - 1;
	return 0;
}

/* Pool member "<cum>:<cost>:<account>" into <buf>; its length. */
size_t rl_args_format_pool_member(char *buf, size_t size, int64_t cum, int64_t cost,
                                  const char *acc, size_t acc_len)
{
	size_t n = rl_args_format_member(buf, size, cum, cost);

	if (n == 0 || n + 1 + acc_len + 1 > size)
		return 0;
	buf[n] = ':';
	memcpy(buf + n + 1, acc, acc_len);
	buf[n + 1 + acc_len] = '\0';
	return n + 1 + acc_len;
}

/* Member "<cum>:<cost>" into <buf>; its length. */
size_t rl_args_format_member(char *buf, size_t size, int64_t cum, int64_t cost)
{
	static const char hex[] = "0123456789abcdef";
	char tmp[40];
	size_t n = 0, i;
	uint64_t v;

	v = (uint64_t)cost;
	do {
		tmp[n++] = hex[v & 15];
		v >>= 4;
	} while (v);
	tmp[n++] = ':';
	v = (uint64_t)cum;
	do {
		tmp[n++] = hex[v & 15];
		v >>= 4;
	} while (v);
	if (n + 1 > size)
		return 0;
	for (i = 0; i < n; i++)
		buf[i] = tmp[n - 1 - i];
	buf[n] = '\0';
	return n;
}

/* End (ms) of the <prec_ms> bucket holding <now_us>. */
int64_t rl_args_bucket_end(int64_t now_us, int64_t prec_ms)
{
	int64_t ms = now_us / 1000;

	/* floor for a negative clock too (a fake one, before 1970) */
	if (now_us < 0 && now_us % 1000 != 0)
		ms--;
	int64_t q = ms / prec_ms;
	if (ms < 0 && ms % prec_ms != 0)
		q--;
	return (q + 1) * prec_ms;
}

/* A stored GCRA value, either form, into <v>; 0 or -1. */
int rl_args_parse_gcra(const char *p, size_t len, struct rl_gcra_value *v)
{
	struct rl_arg a = { p, len }, t, f, rest, ms, l, o;

	memset(v, 0, sizeof(*v));
	if (split_pair(&a, &t, &f) == -1 || parse_bounded(&t, 0, RL_MAX_MEMBER, &v->tat) == -1)
		return -1;
	if (!memchr(f.p, ':', f.len))
		return parse_bounded(&f, 0, RL_MAX_MEMBER, &v->frac);
	rest = f;
	if (split_pair(&rest, &f, &ms) == -1 || parse_bounded(&f, 0, RL_MAX_MEMBER, &v->frac) == -1)
		return -1;
	rest = ms;
	if (split_pair(&rest, &ms, &l) == -1 || parse_bounded(&ms, 1, RL_MAX_MS, &v->win_ms) == -1)
		return -1;
	rest = l;
	if (split_pair(&rest, &l, &o) == -1 || parse_bounded(&l, 1, RL_MAX_UNITS, &v->limit) == -1 ||
	    parse_bounded(&o, 0, RL_MAX_MEMBER, &v->owed) == -1 || v->owed > v->tat)
		return -1;
	return 0;
}

/* <v> into <buf>; its length, 0 when it does not fit. */
size_t rl_args_format_gcra(char *buf, size_t size, const struct rl_gcra_value *v)
{
	int n = v->win_ms ? snprintf(buf, size, "%lld:%lld:%lld:%lld:%lld", (long long)v->tat,
	                             (long long)v->frac, (long long)v->win_ms, (long long)v->limit,
	                             (long long)v->owed)
	                  : snprintf(buf, size, "%lld:%lld", (long long)v->tat, (long long)v->frac);

	return n < 0 || (size_t)n >= size ? 0 : (size_t)n;
}

/* a / b rounded down, for a >= 0, b >= 1 */
static int64_t div_floor_pos(int64_t a, int64_t b, int64_t *r)
{
	*r = a % b;
	return a / b;
}

/* The script's reading of a stored value, step for step (its gcra()
 * header says why). */
int rl_args_gcra_owed(const struct rl_window *w, int64_t now, const struct rl_gcra_value *v,
                      int64_t *d, int64_t *f)
{
	int64_t l = w->limit, us = w->win_ms * 1000, bw = w->burst * us;
	int64_t t, fr, o, e, w1, q, r, x;

	*d = 0;
	*f = 0;
	if (!v)
		return 0;
	t = v->tat;
	fr = v->frac;
	if (!v->win_ms) {
		if (fr >= l) {
			t++;
			fr = 0;
		}
		if (t >= now) {
			*d = t - now;
			*f = fr;
		}
		return 0;
	}
	o = v->owed;
	/* e: the write's time from now */
	e = t - o - now;
	if (e > RL_GCRA_MAX_SPAN)
		return -1;
	w1 = v->win_ms * 1000;
	if (fr >= v->limit) {
		o++;
		fr = 0;
	}
	if (w1 == us && v->limit == l) {
		/* the same rate: what the general case gives, cheaper */
		q = div_floor_pos(bw, l, &r);
		if (o > q || (o == q && fr > r)) {
			o = q;
			fr = r;
		}
	} else {
		/* q + r / w1: the units owed at the write, at most the burst */
		q = w->burst;
		r = 0;
		if (o <= RL_GCRA_MAX_SPAN / v->limit)
			q = div_floor_pos(o * v->limit + fr, w1, &r);
		x = bw;
		/* (r < w1 <= 10^15 and us <= 2^52: the product needs 128 bits;
		 * the script gets the same ceiling bit by bit) */
		if (q < w->burst)
			x = q * us + (int64_t)(((unsigned __int128)r * (unsigned __int128)us +
			                        (unsigned __int128)(w1 - 1)) / (unsigned __int128)w1);
		o = div_floor_pos(x, l, &fr);
	}
	if (e + o >= 0) {
		*d = e + o;
		*f = fr;
	}
	return 0;
}

/* The script's gcra(), step for step (its header says the rules). */
int rl_args_gcra(const struct rl_window *w, int64_t cost, int64_t now,
                 const struct rl_gcra_value *v, struct rl_gcra *out)
{
	int64_t l = w->limit, b = w->burst, us = w->win_ms * 1000, bw = b * us;
	int64_t d, f, qx, rx, qc, rc, qb, rb, r;

	memset(out, 0, sizeof(*out));
	if (rl_args_gcra_owed(w, now, v, &d, &f) == -1)
		return -1;
	if (cost <= b) {
		qx = div_floor_pos((b - cost) * us, l, &rx);
		if (d < qx || (d == qx && f <= rx)) {
			qc = div_floor_pos(cost * us, l, &rc);
			d += qc;
			f += rc;
			if (f >= l) {
				d++;
				f -= l;
			}
			out->allowed = 1;
			out->reset = d + (f > 0);
			out->remaining = div_floor_pos(bw - d * l - f, us, &r);
			out->tat = now + d;
			out->frac = f;
			out->ttl_ms = div_floor_pos(out->reset + 999, 1000, &r) + 1;
			return 0;
		}
		out->retry = d - qx + (f > rx);
	}
	qb = div_floor_pos(bw, l, &rb);
	/* a cost above the burst never fits: the whole bucket's time */
	if (cost > b)
		out->retry = qb + (rb > 0);
	out->reset = d + (f > 0);
	if (d < qb || (d == qb && f <= rb))
		out->remaining = div_floor_pos(bw - d * l - f, us, &r);
	return 0;
}

/* Hinnant's days_from_civil, in int64 (any year the clock can reach). */
int64_t rl_cal_days_from_civil(int64_t y, int64_t m, int64_t d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

/* Hinnant's civil_from_days. */
void rl_cal_civil_from_days(int64_t z, int64_t *y, int64_t *m, int64_t *d)
{
	int64_t era, doe, yoe, doy, mp;

	z += 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*d = doy - (153 * mp + 2) / 5 + 1;
	*m = mp < 10 ? mp + 3 : mp - 9;
	*y = yoe + era * 400 + (*m <= 2);
}

/* a / b rounded down, b > 0 (a fake clock may be before 1970) */
static int64_t cal_floor(int64_t a, int64_t b)
{
	return a / b - (a % b != 0 && a < 0);
}

#define CAL_US_HOUR 3600000000LL
#define CAL_US_DAY  86400000000LL

/* The period of <w> holding <now>: times are shifted into the offset's
 * clock, cut there, and shifted back. */
void rl_cal_period(const struct rl_window *w, int64_t now, int64_t *start, int64_t *end)
{
	int64_t off = w->tz_min * 60000000LL, local = now + off, day, y, m, d;

	if (w->cal == RL_CAL_HOUR) {
		*start = cal_floor(local, CAL_US_HOUR) * CAL_US_HOUR - off;
		*end = *start + CAL_US_HOUR;
		return;
	}
	day = cal_floor(local, CAL_US_DAY);
	if (w->cal == RL_CAL_DAY) {
		*start = day * CAL_US_DAY - off;
		*end = *start + CAL_US_DAY;
		return;
	}
	if (w->cal == RL_CAL_WEEK) {
		/* 1970-01-01 was a Thursday: (day + 3) mod 7 days since Monday */
		day -= (day + 3) - cal_floor(day + 3, 7) * 7;
		*start = day * CAL_US_DAY - off;
		*end = *start + 7 * CAL_US_DAY;
		return;
	}
	rl_cal_civil_from_days(day, &y, &m, &d);
	if (d < w->anchor && --m < 1) {
		m = 12;
		y--;
	}
	*start = rl_cal_days_from_civil(y, m, w->anchor) * CAL_US_DAY - off;
	if (++m > 12) {
		m = 1;
		y++;
	}
	*end = rl_cal_days_from_civil(y, m, w->anchor) * CAL_US_DAY - off;
}

/* "<end>:<units>" into <v>; 0 or -1. */
int rl_args_parse_quota(const char *p, size_t len, struct rl_quota_value *v)
{
	struct rl_arg a = { p, len }, e, u;

	if (split_pair(&a, &e, &u) == -1 || parse_bounded(&e, 0, RL_MAX_MEMBER, &v->end) == -1 ||
	    parse_bounded(&u, 0, RL_MAX_MEMBER, &v->units) == -1)
		return -1;
	return 0;
}

/* <v> as "<end>:<units>" into <buf>; its length, 0 when it does not fit. */
size_t rl_args_format_quota(char *buf, size_t size, const struct rl_quota_value *v)
{
	int n = snprintf(buf, size, "%lld:%lld", (long long)v->end, (long long)v->units);

	return n < 0 || (size_t)n >= size ? 0 : (size_t)n;
}
