/*
 * live_rule - a live override's encoding, ceiling and words (live_rule.h).
 * Pure: no I/O, no clock.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "decimal.h"
#include "live_rule.h"

#define LIVE_LIMIT_MAX   1000000u
#define LIVE_WINDOW_MAX  (24ull * 3600 * 1000)

/* See live_rule.h: reads <s>, writes into the caller's <win>. */
int live_rule_parse_limit(const char *s, size_t len, struct window_limit *win,
                          unsigned *nwin, char *why, size_t cap)
{
	const char *slash = memchr(s, '/', len);
	const char *w;
	size_t wl;
	char one[40];
	uint64_t limit, ms;
	unsigned i;

	if (!slash || decimal_parse(s, (size_t)(slash - s), LIVE_LIMIT_MAX, &limit) != 0 ||
	    limit == 0) {
		snprintf(why, cap, "'%.*s': expected <limit>/<window>, limit 1..%u",
		         (int)(len > 40 ? 40 : len), s, LIVE_LIMIT_MAX);
		return -1;
	}
	w = slash + 1;
	wl = (size_t)(s + len - w);
	/* a bare unit is one of it ("3/s"), as in the config */
	if (wl && wl + 2 < sizeof(one) && (w[0] < '0' || w[0] > '9')) {
		one[0] = '1';
		memcpy(one + 1, w, wl);
		w = one;
		wl++;
	}
	if (config_parse_duration(w, wl, &ms) == -1 || ms < 1 || ms > LIVE_WINDOW_MAX) {
		snprintf(why, cap, "'%.*s': window must be 1ms..24h (<n>ms, <n>s, <n>m or <n>h)",
		         (int)(len > 40 ? 40 : len), s);
		return -1;
	}
	for (i = 0; i < *nwin; i++)
		if (win[i].window_ms == ms) {
			snprintf(why, cap, "'%.*s': window given twice", (int)(len > 40 ? 40 : len), s);
			return -1;
		}
	if (*nwin >= WINDOW_MAX_WINDOWS) {
		snprintf(why, cap, "at most %d windows", WINDOW_MAX_WINDOWS);
		return -1;
	}
	win[*nwin].limit = limit;
	win[*nwin].window_ms = ms;
	(*nwin)++;
	return 0;
}

/* See live_rule.h: reads <s> only. */
int live_rule_parse_for(const char *s, size_t len, uint64_t *ms)
{
	uint64_t n;

	if (len > 1 && s[len - 1] == 'd') {
		if (decimal_parse(s, len - 1, 7, &n) != 0)
			return -1;
		*ms = n * 24 * 3600 * 1000;
	} else if (config_parse_duration(s, len, ms) == -1) {
		return -1;
	}
	return *ms >= 1000 && *ms <= LIVE_FOR_MAX_MS ? 0 : -1;
}

/* See live_rule.h: writes into the caller's <dst>. */
int live_rule_field(const struct live_rule *r, char *dst, size_t cap)
{
	size_t n = r->policy_len + 1 + r->key_len;

	if (n > cap)
		return -1;
	memcpy(dst, r->policy, r->policy_len);
	dst[r->policy_len] = ' ';
	memcpy(dst + r->policy_len + 1, r->key, r->key_len);
	return (int)n;
}

/* See live_rule.h: copies out of <f> into <r>. */
int live_rule_parse_field(const char *f, size_t len, struct live_rule *r)
{
	const char *sp = memchr(f, ' ', len);
	size_t pl, kl;

	if (!sp)
		return -1;
	pl = (size_t)(sp - f);
	kl = len - pl - 1;
	if (pl == 0 || pl > WINDOW_NAME_MAX || window_check_key(sp + 1, kl) == -1)
		return -1;
	memcpy(r->policy, f, pl);
	r->policy[pl] = '\0';
	r->policy_len = pl;
	memcpy(r->key, sp + 1, kl);
	r->key[kl] = '\0';
	r->key_len = kl;
	return 0;
}

/* See live_rule.h: writes into the caller's <dst>. */
int live_rule_escape(const char *s, size_t len, char *dst, size_t cap)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t i, o = 0;

	if (len == 0) {
		if (cap < 2)
			return -1;
		memcpy(dst, "-", 2);
		return 1;
	}
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		bool keep = c > ' ' && c < 0x7f && c != '%' && !(i == 0 && len == 1 && c == '-');

		if (o + (keep ? 1 : 3) + 1 > cap)
			return -1;
		if (keep) {
			dst[o++] = (char)c;
		} else {
			dst[o++] = '%';
			dst[o++] = hex[c >> 4];
			dst[o++] = hex[c & 15];
		}
	}
	dst[o] = '\0';
	return (int)o;
}

/* Value of hex digit <c>, or -1. */
static int live_hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* See live_rule.h: writes into the caller's <dst>. */
int live_rule_unescape(const char *s, size_t len, char *dst, size_t cap)
{
	size_t i, o = 0;

	if (len == 1 && s[0] == '-')
		len = 0;
	for (i = 0; i < len; i++) {
		char c = s[i];

		if (c == '%') {
			int hi, lo;

			if (i + 2 >= len)
				return -1;
			hi = live_hex(s[i + 1]);
			lo = live_hex(s[i + 2]);
			if (hi < 0 || lo < 0)
				return -1;
			c = (char)(hi * 16 + lo);
			i += 2;
		}
		if (o + 1 >= cap)
			return -1;
		dst[o++] = c;
	}
	if (o >= cap)
		return -1;
	dst[o] = '\0';
	return (int)o;
}

/* See live_rule.h: writes into the caller's <dst>. */
int live_rule_format_limits(const struct live_rule *r, char *dst, size_t cap)
{
	size_t o = 0;
	unsigned i;
	char ws[32];
	int n;

	if (r->block) {
		n = snprintf(dst, cap, "block");
		return n < 0 || (size_t)n >= cap ? -1 : n;
	}
	if (cap)
		dst[0] = '\0';
	for (i = 0; i < r->nwin; i++) {
		if (window_format_ms(r->win[i].window_ms, ws, sizeof(ws)) < 0)
			return -1;
		n = snprintf(dst + o, cap - o, "%s%" PRIu64 "/%s", i ? "," : "", r->win[i].limit, ws);
		if (n < 0 || (size_t)n >= cap - o)
			return -1;
		o += (size_t)n;
	}
	return r->nwin ? (int)o : -1;
}

/* See live_rule.h: writes into the caller's <dst>. */
int live_rule_encode(const struct live_rule *r, char *dst, size_t cap)
{
	char lim[WINDOW_MAX_WINDOWS * 32], who[3 * LIVE_WHO_MAX + 2], why[3 * LIVE_REASON_MAX + 2];
	int n;

	if (live_rule_format_limits(r, lim, sizeof(lim)) < 0 ||
	    live_rule_escape(r->who, strlen(r->who), who, sizeof(who)) < 0 ||
	    live_rule_escape(r->reason, strlen(r->reason), why, sizeof(why)) < 0)
		return -1;
	n = snprintf(dst, cap, "v1 %" PRId64 " %" PRId64 " %s %s %s", r->expires_ms, r->set_ms,
	             lim, who, why);
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

/* The next space-separated word of <*s>..<end> into <w>/<*wl>; 0 or -1. */
static int live_word(const char **s, const char *end, const char **w, size_t *wl)
{
	const char *p = *s, *e;

	if (p >= end)
		return -1;
	e = memchr(p, ' ', (size_t)(end - p));
	if (!e)
		e = end;
	*w = p;
	*wl = (size_t)(e - p);
	*s = e < end ? e + 1 : end;
	return *wl ? 0 : -1;
}

/* See live_rule.h: copies out of <v> into <r>. */
int live_rule_decode(const char *v, size_t len, struct live_rule *r)
{
	const char *s = v, *end = v + len, *w;
	size_t wl, i;
	uint64_t exp, set;
	char why[96];

	r->block = false;
	r->nwin = 0;
	if (live_word(&s, end, &w, &wl) == -1 || wl != 2 || memcmp(w, "v1", 2) != 0 ||
	    live_word(&s, end, &w, &wl) == -1 || decimal_parse(w, wl, INT64_MAX, &exp) != 0 ||
	    live_word(&s, end, &w, &wl) == -1 || decimal_parse(w, wl, INT64_MAX, &set) != 0 ||
	    live_word(&s, end, &w, &wl) == -1)
		return -1;
	r->expires_ms = (int64_t)exp;
	r->set_ms = (int64_t)set;
	if (wl == 5 && memcmp(w, "block", 5) == 0) {
		r->block = true;
	} else {
		for (i = 0; i < wl;) {
			const char *c = memchr(w + i, ',', wl - i);
			size_t n = c ? (size_t)(c - w) - i : wl - i;

			if (live_rule_parse_limit(w + i, n, r->win, &r->nwin, why, sizeof(why)) == -1)
				return -1;
			i += n + 1;
		}
	}
	if (live_word(&s, end, &w, &wl) == -1 ||
	    live_rule_unescape(w, wl, r->who, sizeof(r->who)) < 0 ||
	    live_word(&s, end, &w, &wl) == -1 ||
	    live_rule_unescape(w, wl, r->reason, sizeof(r->reason)) < 0 || s != end)
		return -1;
	return 0;
}

/* The ceiling of <r> under <p> (borrowed from <p>): its live-max windows,
 * else the limits configured for the account. */
static void live_rule_ceiling(const struct window_policy *p, const struct live_rule *r,
                              const struct window_limit **ceil, unsigned *nceil)
{
	if (p->live_nwin) {
		*ceil = p->live_win;
		*nceil = p->live_nwin;
	} else {
		*ceil = window_limits_for(p, r->key, r->key_len, nceil);
	}
}

/* See live_rule.h: borrows <p> and <r>. */
uint64_t live_rule_gcra_burst(const struct window_policy *p, const struct live_rule *r)
{
	const struct window_limit *ceil;
	unsigned nceil, i;
	uint64_t b = r->nwin ? r->win[0].limit : 0;

	live_rule_ceiling(p, r, &ceil, &nceil);
	for (i = 0; i < nceil; i++) {
		uint64_t cb = window_limit_quota(&ceil[i]);

		if (cb < b)
			b = cb;
	}
	return b;
}

/* Why an override is refused by ceiling window <c> of <p> (<what> to
 * lower: "limits", "rate"), into <why>. Returns -1. */
static int live_rule_over(const struct window_policy *p, const struct window_limit *c,
                          const char *what, char *why, size_t cap)
{
	char ws[32];

	window_format_ms(c->window_ms, ws, sizeof(ws));
	snprintf(why, cap, "above the ceiling %" PRIu64 "/%s of policy '%s' (%s); "
	         "lower the %s, or raise live-max in the config", c->limit, ws, p->name,
	         p->live_nwin ? "its live-max" : "its configured limits", what);
	return -1;
}

/* A live override of GCRA policy <p>: one rate, no faster than any
 * ceiling window's rate (limit per window, compared exactly), and a bucket
 * (live_rule_gcra_burst()) whose span the engines can hold. Writes <why>. */
static int live_rule_check_gcra(const struct window_policy *p, const struct live_rule *r,
                                const struct window_limit *ceil, unsigned nceil, char *why,
                                size_t cap)
{
	uint64_t b = live_rule_gcra_burst(p, r);
	unsigned i;

	if (r->nwin != 1) {
		snprintf(why, cap, "policy '%s' is a token bucket (algorithm=gcra): one rate, "
		         "<limit>/<window>", p->name);
		return -1;
	}
	for (i = 0; i < nceil; i++)
		if (r->win[0].limit * ceil[i].window_ms > ceil[i].limit * r->win[0].window_ms)
			return live_rule_over(p, &ceil[i], "rate", why, cap);
	if (b == 0 || b * r->win[0].window_ms * 1000 > WINDOW_GCRA_MAX_SPAN_US) {
		snprintf(why, cap, "a bucket of %" PRIu64 " over that window is more than the "
		         "engines hold (burst x window at most 2^52 us)", b);
		return -1;
	}
	return 0;
}

/* See live_rule.h: borrows <p> and <r>, writes <why>. */
int live_rule_check(const struct window_policy *p, const struct live_rule *r,
                    char *why, size_t cap)
{
	const struct window_limit *ceil;
	unsigned nceil, i, j;

	if (r->block)
		return 0;
	if (r->nwin == 0 || r->nwin > WINDOW_MAX_WINDOWS) {
		snprintf(why, cap, "no limits");
		return -1;
	}
	if (p->precision_ms &&
	    window_check_precision(p->precision_ms, r->win, r->nwin, why, cap) == -1)
		return -1;
	live_rule_ceiling(p, r, &ceil, &nceil);
	if (p->algorithm == WINDOW_ALGO_GCRA)
		return live_rule_check_gcra(p, r, ceil, nceil, why, cap);
	for (i = 0; i < nceil; i++) {
		for (j = 0; j < r->nwin; j++) {
			uint64_t spans = (ceil[i].window_ms + r->win[j].window_ms - 1) / r->win[j].window_ms;

			if (r->win[j].limit <= ceil[i].limit / spans)
				break;
		}
		if (j == r->nwin)
			return live_rule_over(p, &ceil[i], "limits", why, cap);
	}
	return 0;
}
