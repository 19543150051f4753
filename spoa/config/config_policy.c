/*
 * config_policy - the directives that take a line of their own and may
 * repeat: pool, policy, override, plan and live-max (their rows in
 * config_directives.c point here), their <limit>/<window> words and options, the warnings about
 * windows that never decide, and the overrides sorted once a parse is over
 * (config_overrides_finish, called by config.c).
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_int.h"
#include "config_lex.h"
#include "decimal.h"

/* Append "<name>:<line>: warning: <fmt...>\n" to the config's warnings
 * (counted even when the buffer is full, then not stored). */
__attribute__((format(printf, 2, 3)))
static void parse_warn(struct parse_ctx *x, const char *fmt, ...)
{
	char *w = x->c->warnings;
	size_t used = strlen(w), cap = sizeof(x->c->warnings);
	char line[CONFIG_ERR_LEN];
	va_list ap;
	int n;

	x->c->nwarnings++;
	va_start(ap, fmt);
	n = snprintf(line, sizeof(line), "%s:%u: warning: ", x->lex.name, x->lex.line);
	if (n >= 0 && (size_t)n < sizeof(line))
		vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (used + strlen(line) + 2 <= cap)
		snprintf(w + used, cap - used, "%s\n", line);
}

/* The calendar period named <p>/<len> ("hour", "day", "week", "month"),
 * or WINDOW_CAL_NONE. */
static enum window_cal parse_cal_name(const char *p, size_t len)
{
	int c;

	for (c = WINDOW_CAL_HOUR; c < WINDOW_CAL_COUNT; c++)
		if (strlen(window_cal_name((enum window_cal)c)) == len &&
		    memcmp(window_cal_name((enum window_cal)c), p, len) == 0)
			return (enum window_cal)c;
	return WINDOW_CAL_NONE;
}

/*
 * A quota's option word <w>: "tz=<+|-><hh>:<mm>" (a fixed UTC offset,
 * -14:00 .. +14:00) or "anchor=<1..28>" (a month's first day), applied to
 * the quotas before it in <win>/<nwin> (anchor=: the monthly ones).
 * Returns 0, 1 when <w> is neither, or -1.
 */
static int parse_cal_option(struct parse_ctx *x, const char *what, struct word w,
                            struct window_limit *win, unsigned nwin)
{
	unsigned i, hit = 0;
	uint64_t v = 0, hh, mm;
	int tz = -1;

	if (w.len > 3 && memcmp(w.p, "tz=", 3) == 0) {
		if (w.len != 9 || (w.p[3] != '+' && w.p[3] != '-') || w.p[6] != ':' ||
		    decimal_parse(w.p + 4, 2, 99, &hh) != 0 || decimal_parse(w.p + 7, 2, 99, &mm) != 0 ||
		    mm > 59 || hh * 60 + mm > 14 * 60)
			return config_parse_fail(&x->lex, "%s: bad offset '%.*s' (use tz=+hh:mm or "
			                         "tz=-hh:mm, -14:00 .. +14:00)", what,
			                         config_word_plen(w), w.p);
		tz = (int)(hh * 60 + mm) * (w.p[3] == '-' ? -1 : 1);
	} else if (w.len > 7 && memcmp(w.p, "anchor=", 7) == 0) {
		if (decimal_parse(w.p + 7, w.len - 7, 31, &v) != 0 || v < 1 || v > 28)
			return config_parse_fail(&x->lex, "%s: anchor must be 1..28 (a day every month "
			                         "has), got '%.*s'", what, config_word_plen(w), w.p);
	} else {
		return 1;
	}
	for (i = 0; i < nwin; i++) {
		if (!win[i].cal || (v && win[i].cal != WINDOW_CAL_MONTH))
			continue;
		if (v)
			win[i].anchor = (uint8_t)v;
		else
			win[i].tz_min = (int16_t)tz;
		hit++;
	}
	if (!hit)
		return config_parse_fail(&x->lex, "%s: '%.*s' follows no %s on its line", what,
		                         config_word_plen(w), w.p,
		                         v ? "<limit>/month" : "<limit>/hour|day|week|month");
	return 0;
}

/*
 * Parse one "<limit>/<window>" word <w> into <lim> appended to <win>/<*nwin>
 * (checking range and that the window is new); the window may be a
 * calendar period (hour, day, week, month: a quota), and tz= and anchor=
 * words set the quotas before them. <what> names the owner in messages
 * ("policy 'x'"). Returns 0, 1 when <w> is neither, or -1.
 */
static int parse_limit_word(struct parse_ctx *x, const char *what, struct word w,
                            struct window_limit *win, unsigned *nwin)
{
	const char *slash = memchr(w.p, '/', w.len);
	enum window_cal cal;
	uint64_t limit, ms;
	unsigned i;
	int rc;

	if (!slash)
		return parse_cal_option(x, what, w, win, *nwin);
	rc = decimal_parse(w.p, (size_t)(slash - w.p), CONFIG_LIMIT_MAX, &limit);
	if (rc == -1 || (rc == 0 && limit == 0))
		return config_parse_fail(&x->lex, "%s: limit must be a positive integer, got '%.*s'",
		                  what, config_word_plen(w), w.p);
	if (rc == -2)
		return config_parse_fail(&x->lex, "%s: limit must be at most %u", what, CONFIG_LIMIT_MAX);
	cal = parse_cal_name(slash + 1, (size_t)(w.p + w.len - slash - 1));
	ms = window_cal_ms(cal);
	if (!cal && config_check_window(slash + 1, (size_t)(w.p + w.len - slash - 1), &ms) == -1)
		return config_parse_fail(&x->lex, "%s: bad window in '%.*s' (use <n>ms, <n>s, <n>m or "
		                         "<n>h, or a period: hour, day, week, month)",
		                         what, config_word_plen(w), w.p);
	if (!cal && (ms < 1 || ms > CONFIG_WINDOW_MAX_MS))
		return config_parse_fail(&x->lex, "%s: window must be 1ms..24h", what);
	for (i = 0; i < *nwin; i++) {
		if (cal && win[i].cal == cal)
			return config_parse_fail(&x->lex, "%s: /%s given twice", what,
			                         window_cal_name(cal));
		if (!cal && !win[i].cal && win[i].window_ms == ms) {
			char ws[32];

			window_format_ms(ms, ws, sizeof(ws));
			return config_parse_fail(&x->lex, "%s: window %s given twice", what, ws);
		}
	}
	if (*nwin >= WINDOW_MAX_WINDOWS)
		return config_parse_fail(&x->lex, "%s: at most %d windows", what, WINDOW_MAX_WINDOWS);
	memset(&win[*nwin], 0, sizeof(win[*nwin]));
	win[*nwin].limit = limit;
	win[*nwin].window_ms = ms;
	win[*nwin].cal = (uint8_t)cal;
	win[*nwin].anchor = cal == WINDOW_CAL_MONTH ? 1 : 0;
	(*nwin)++;
	return 0;
}

/* <what>'s windows <win>/<nwin> under precision=<precision_ms> (0: none):
 * see window_check_precision. Returns 0 or -1 (a parse failure). */
static int check_precision(struct parse_ctx *x, const char *what, uint64_t precision_ms,
                           const struct window_limit *win, unsigned nwin)
{
	char why[160];

	if (!precision_ms || window_check_precision(precision_ms, win, nwin, why, sizeof(why)) == 0)
		return 0;
	return config_parse_fail(&x->lex, "%s: %s", what, why);
}

/*
 * Warn (see parse_warn) about each window of <win>/<nwin> that can never
 * decide: a longer window holds every request the shorter one does, so with
 * a limit no larger it always denies first. <what> names the owner.
 */
static void warn_dead_windows(struct parse_ctx *x, const char *what,
                              const struct window_limit *win, unsigned nwin)
{
	char ws[32], wl[32];
	unsigned i, j;

	for (i = 0; i < nwin; i++) {
		for (j = 0; j < nwin; j++) {
			/* (a sliding window can span two periods of a quota) */
			if (win[i].cal || win[j].cal || win[i].window_ms >= win[j].window_ms ||
			    win[i].limit < win[j].limit)
				continue;
			window_format_ms(win[i].window_ms, ws, sizeof(ws));
			window_format_ms(win[j].window_ms, wl, sizeof(wl));
			parse_warn(x, "%s: %llu/%s can never decide: %llu/%s, a longer window with "
			           "a limit no larger, always denies first",
			           what, (unsigned long long)win[i].limit, ws,
			           (unsigned long long)win[j].limit, wl);
			break;
		}
	}
}

/* A "burst=<n>" word <w> into <*burst> (1..WINDOW_BURST_MAX). Returns 0,
 * 1 when <w> is not burst=, or -1. */
static int parse_burst_word(struct parse_ctx *x, const char *what, struct word w, uint64_t *burst)
{
	if (w.len < 6 || memcmp(w.p, "burst=", 6) != 0)
		return 1;
	if (decimal_parse(w.p + 6, w.len - 6, WINDOW_BURST_MAX, burst) != 0 || *burst == 0)
		return config_parse_fail(&x->lex, "%s: burst must be 1..%u, got '%.*s'", what,
		                         WINDOW_BURST_MAX, config_word_plen(w), w.p);
	return 0;
}

/* The one limit <win>/<nwin> (borrowed, written) of a GCRA policy or
 * override <what>: its burst (<burst>, 0: the limit) set and bounded, and
 * a <max_cost> (0: none) that fits in it. Returns 0 or -1 (a parse
 * failure). */
static int gcra_finish(struct parse_ctx *x, const char *what, struct window_limit *win,
                       unsigned nwin, uint64_t burst, uint64_t max_cost)
{
	/* a calendar quota may stand beside the rate: the rate first */
	if (nwin == 2 && win[0].cal && !win[1].cal) {
		struct window_limit t = win[0];

		win[0] = win[1];
		win[1] = t;
	}
	if (nwin == 2 && win[1].cal && !win[0].cal)
		nwin = 1;
	if (nwin != 1 || win[0].cal)
		return config_parse_fail(&x->lex, "%s: algorithm=gcra takes exactly one <limit>/<window> "
		                         "(the rate; burst=<n> is the bucket), and at most one calendar "
		                         "quota beside it", what);
	win[0].burst = burst ? burst : win[0].limit;
	if (win[0].burst > WINDOW_GCRA_MAX_SPAN_US / 1000 / win[0].window_ms)
		return config_parse_fail(&x->lex, "%s: burst %llu times the window is too long for "
		                         "algorithm=gcra (at most 2^52 us: write the same rate with a "
		                         "shorter window, e.g. 625/54s burst=1000000 for 1000000/24h)",
		                         what, (unsigned long long)win[0].burst);
	if (max_cost > win[0].burst)
		return config_parse_fail(&x->lex, "%s: max-cost=%llu is above the burst (%llu): such a "
		                         "cost could never pass", what, (unsigned long long)max_cost,
		                         (unsigned long long)win[0].burst);
	return 0;
}

/* pool <name> <limit>/<window> [headroom=<n>]: one pool, before the
 * policies that name it (each copies it). */
int config_dir_pool(struct parse_ctx *x, const struct word *w, size_t n)
{
	struct config *c = x->c;
	struct window_pool *pl;
	struct window_limit win[WINDOW_MAX_WINDOWS];
	char what[WINDOW_NAME_MAX + 16];
	unsigned nwin = 0;
	size_t i;
	int rc;

	if (n < 3 || n > 4)
		return config_parse_fail(&x->lex, "pool: expected 'pool <name> <limit>/<window> "
		                         "[headroom=<n>]'");
	if (config_check_policy_name(w[1]) == -1)
		return config_parse_fail(&x->lex, "pool name '%.*s' must be 1..%d characters of A-Z a-z "
		                         "0-9 _ . -", config_word_plen(w[1]), w[1].p, WINDOW_NAME_MAX);
	for (i = 0; i < c->npools; i++)
		if (c->pools[i].name_len == w[1].len && memcmp(c->pools[i].name, w[1].p, w[1].len) == 0)
			return config_parse_fail(&x->lex, "duplicate pool '%.*s'", config_word_plen(w[1]),
			                         w[1].p);
	if (c->npools >= CONFIG_MAX_POOLS)
		return config_parse_fail(&x->lex, "too many pools (at most %d)", CONFIG_MAX_POOLS);
	snprintf(what, sizeof(what), "pool '%.*s'", config_word_plen(w[1]), w[1].p);
	rc = parse_limit_word(x, what, w[2], win, &nwin);
	if (rc == 1)
		return config_parse_fail(&x->lex, "%s: expected <limit>/<window>, got '%.*s'", what,
		                         config_word_plen(w[2]), w[2].p);
	if (rc == -1)
		return -1;
	if (win[0].cal)
		return config_parse_fail(&x->lex, "%s: a pool is a sliding window, not a calendar "
		                         "period", what);
	pl = &c->pools[c->npools];
	memset(pl, 0, sizeof(*pl));
	memcpy(pl->name, w[1].p, w[1].len);
	pl->name_len = w[1].len;
	pl->limit = win[0].limit;
	pl->window_ms = win[0].window_ms;
	pl->headroom = pl->limit / 10 ? pl->limit / 10 : 1;
	if (n == 4) {
		if (w[3].len < 10 || memcmp(w[3].p, "headroom=", 9) != 0 ||
		    decimal_parse(w[3].p + 9, w[3].len - 9, CONFIG_LIMIT_MAX, &pl->headroom) != 0)
			return config_parse_fail(&x->lex, "%s: expected headroom=<n>, got '%.*s'", what,
			                         config_word_plen(w[3]), w[3].p);
	}
	if (pl->headroom >= pl->limit)
		return config_parse_fail(&x->lex, "%s: headroom must be below the limit (%llu), got %llu",
		                         what, (unsigned long long)pl->limit,
		                         (unsigned long long)pl->headroom);
	c->pool_line[c->npools] = x->lex.line;
	c->npools++;
	return 0;
}

/* "pool=<name>" word <w> of policy <p>: the pool's limits copied into it.
 * Returns 0, 1 when <w> is not pool=, or -1. */
static int parse_pool_word(struct parse_ctx *x, const char *what, struct word w,
                           struct window_policy *p)
{
	const struct config *c = x->c;
	size_t i;

	if (w.len < 5 || memcmp(w.p, "pool=", 5) != 0)
		return 1;
	for (i = 0; i < c->npools; i++) {
		if (c->pools[i].name_len == w.len - 5 && memcmp(c->pools[i].name, w.p + 5, w.len - 5) == 0) {
			p->pool = c->pools[i];
			p->pooled = true;
			return 0;
		}
	}
	return config_parse_fail(&x->lex, "%s: unknown pool '%.*s' (define it first: 'pool <name> "
	                         "<limit>/<window> [headroom=<n>]')", what,
	                         config_word_plen(w) - 5, w.p + 5);
}

/* "inflight=<n>", "lease=<duration>" or "settle=<header>" word <w> of
 * policy <p> (see config_dir_policy for what needs what). Returns 0, 1
 * when <w> is none of them, or -1. */
static int parse_lease_word(struct parse_ctx *x, const char *what, struct word w,
                            struct window_policy *p)
{
	if (w.len > 9 && memcmp(w.p, "inflight=", 9) == 0) {
		if (decimal_parse(w.p + 9, w.len - 9, CONFIG_LEASES_MAX, &p->inflight) != 0 ||
		    p->inflight == 0)
			return config_parse_fail(&x->lex, "%s: inflight must be 1..%u, got '%.*s'", what,
			                         CONFIG_LEASES_MAX, config_word_plen(w), w.p);
		return 0;
	}
	if (w.len > 6 && memcmp(w.p, "lease=", 6) == 0) {
		if (config_check_duration(w.p + 6, w.len - 6, &p->lease_ms) != 0 ||
		    p->lease_ms < CONFIG_LEASE_MIN_MS || p->lease_ms > CONFIG_LEASE_MAX_MS)
			return config_parse_fail(&x->lex, "%s: lease must be 1s..24h, got '%.*s'", what,
			                         config_word_plen(w), w.p);
		return 0;
	}
	if (w.len > 7 && memcmp(w.p, "settle=", 7) == 0) {
		size_t i, len = w.len - 7;

		/* (an HTTP field name: a token, kept in lower case as HAProxy
		 * compares it) */
		for (i = 0; i < len && len <= WINDOW_SETTLE_HDR_MAX; i++)
			if (!isalnum((unsigned char)w.p[7 + i]) && !strchr("!#$%&'*+-.^_`|~", w.p[7 + i]))
				break;
		if (len > WINDOW_SETTLE_HDR_MAX || i < len)
			return config_parse_fail(&x->lex, "%s: settle= must name a response header "
			                         "(1..%d characters of a field name), got '%.*s'", what,
			                         WINDOW_SETTLE_HDR_MAX, config_word_plen(w), w.p);
		for (i = 0; i < len; i++)
			p->settle_hdr[i] = (char)tolower((unsigned char)w.p[7 + i]);
		p->settle_hdr[len] = '\0';
		return 0;
	}
	return 1;
}

/* policy <name> <limit>/<window>... [on-redis-error=deny|allow] [shadow]
 * [max-cost=<n>] [precision=<duration>] [algorithm=log|gcra] [burst=<n>]
 * [pool=<pool>] [inflight=<n>] [lease=<duration>] [settle=<header>] */
int config_dir_policy(struct parse_ctx *x, const struct word *w, size_t n)
{
	struct config *c = x->c;
	struct window_policy *p;
	char what[WINDOW_NAME_MAX + 16];
	uint64_t burst = 0;
	size_t i;
	int rc;

	if (n < 3)
		return config_parse_fail(&x->lex, "policy: expected 'policy <name> <limit>/<window> [options]'");
	if (config_check_policy_name(w[1]) == -1)
		return config_parse_fail(&x->lex, "policy name '%.*s' must be 1..%d characters of A-Z a-z 0-9 _ . -",
		                  config_word_plen(w[1]), w[1].p, WINDOW_NAME_MAX);
	if (config_policy_named(c, w[1].p, w[1].len))
		return config_parse_fail(&x->lex, "duplicate policy '%.*s'", (int)w[1].len, w[1].p);
	if (c->npolicies >= CONFIG_MAX_POLICIES)
		return config_parse_fail(&x->lex, "too many policies (at most %d)", CONFIG_MAX_POLICIES);

	p = &c->policies[c->npolicies];
	memset(p, 0, sizeof(*p));
	memcpy(p->name, w[1].p, w[1].len);
	p->name_len = w[1].len;
	snprintf(what, sizeof(what), "policy '%s'", p->name);
	for (i = 2; i < n; i++) {
		rc = parse_limit_word(x, what, w[i], p->win, &p->nwin);
		if (rc == -1)
			return -1;
		if (rc == 0)
			continue;
		rc = parse_burst_word(x, what, w[i], &burst);
		if (rc == 0)
			continue;
		if (rc == 1)
			rc = parse_pool_word(x, what, w[i], p);
		if (rc == 1)
			rc = parse_lease_word(x, what, w[i], p);
		if (rc == -1)
			return -1;
		if (rc == 0)
			continue;
		if (config_word_is(w[i], "algorithm=log"))
			p->algorithm = WINDOW_ALGO_LOG;
		else if (config_word_is(w[i], "algorithm=gcra"))
			p->algorithm = WINDOW_ALGO_GCRA;
		else if (config_word_is(w[i], "on-redis-error=deny"))
			p->on_error = WINDOW_ON_ERROR_DENY;
		else if (config_word_is(w[i], "on-redis-error=allow"))
			p->on_error = WINDOW_ON_ERROR_ALLOW;
		else if (config_word_is(w[i], "shadow"))
			p->shadow = true;
		else if (w[i].len > 9 && memcmp(w[i].p, "max-cost=", 9) == 0) {
			if (decimal_parse(w[i].p + 9, w[i].len - 9, CONFIG_LIMIT_MAX, &p->max_cost) != 0 ||
			    p->max_cost == 0)
				return config_parse_fail(&x->lex, "%s: max-cost must be 1..%u, got '%.*s'", what,
				                  CONFIG_LIMIT_MAX, config_word_plen(w[i]), w[i].p);
		} else if (w[i].len > 10 && memcmp(w[i].p, "precision=", 10) == 0) {
			if (config_check_duration(w[i].p + 10, w[i].len - 10, &p->precision_ms) != 0 ||
			    p->precision_ms == 0)
				return config_parse_fail(&x->lex, "%s: bad precision in '%.*s' (use <n>s, <n>m or <n>h)",
				                  what, config_word_plen(w[i]), w[i].p);
		} else
			return config_parse_fail(&x->lex, "%s: unknown option '%.*s' (expected <limit>/<window>, "
			                  "on-redis-error=deny|allow, shadow, max-cost=<n>, "
			                  "precision=<duration>, algorithm=log|gcra, burst=<n>, pool=<pool>, "
			                  "inflight=<n>, lease=<duration> or settle=<header>)",
			                  what, config_word_plen(w[i]), w[i].p);
	}
	if (p->nwin == 0 && !p->inflight)
		return config_parse_fail(&x->lex, "%s: expected at least one <limit>/<window> "
		                         "(or inflight=<n>)", what);
	if (p->lease_ms && !p->inflight && !p->settle_hdr[0])
		return config_parse_fail(&x->lex, "%s: lease= needs inflight=<n> or settle=<header>",
		                         what);
	if ((p->inflight || p->settle_hdr[0]) && !p->lease_ms)
		p->lease_ms = CONFIG_LEASE_DEFAULT_MS;
	/* (a reservation is settled in the account's own windows: exact logs
	 * or its bucket, none of a pool's or of buckets of precision=) */
	if (p->settle_hdr[0] && (p->nwin == 0 || p->pooled || p->precision_ms))
		return config_parse_fail(&x->lex, "%s: settle= needs <limit>/<window> and does not "
		                         "apply with pool= or precision=", what);
	/* (a quota's counter has no entry of the request to refund from) */
	if (p->settle_hdr[0] && window_policy_has_quota(p))
		return config_parse_fail(&x->lex, "%s: settle= does not apply with a calendar quota "
		                         "(/hour, /day, /week, /month)", what);
	if (p->algorithm == WINDOW_ALGO_GCRA) {
		/* (a bucket's decision is its one value: no other key beside it) */
		if (p->inflight)
			return config_parse_fail(&x->lex, "%s: inflight= does not apply to algorithm=gcra "
			                         "(in-flight leases count log and precision= policies)",
			                         what);
		/* (a pool is a log on Redis's clock beside the account's windows:
		 * a bucket's one value has no such step) */
		if (p->pooled)
			return config_parse_fail(&x->lex, "%s: pool= does not apply to algorithm=gcra "
			                         "(a pool counts log and precision= policies)", what);
		if (p->precision_ms)
			return config_parse_fail(&x->lex, "%s: precision= does not apply to algorithm=gcra "
			                         "(a bucket is one value per account)", what);
		if (gcra_finish(x, what, p->win, p->nwin, burst, p->max_cost) == -1)
			return -1;
	} else if (burst) {
		return config_parse_fail(&x->lex, "%s: burst= needs algorithm=gcra", what);
	}
	if (check_precision(x, what, p->precision_ms, p->win, p->nwin) == -1)
		return -1;
	if (p->precision_ms) {
		for (i = 0; i < p->nwin && (p->win[i].cal || !window_is_bucketed(p, p->win[i].window_ms));
		     i++)
			;
		if (i == p->nwin)
			return config_parse_fail(&x->lex, "%s: precision applies to no window (only windows "
			                  "longer than it are counted in buckets)", what);
	}
	warn_dead_windows(x, what, p->win, p->nwin);
	/* Overrides added later in this parse start at index 0. */
	x->ov_first[c->npolicies] = 0;
	x->ov_cap[c->npolicies] = 0;
	c->policy_line[c->npolicies] = x->lex.line;
	c->npolicies++;
	return 0;
}

/*
 * The limits of an override or plan line <what> of policy <p>: the words
 * <w>/<n> after its key or name, each <limit>/<window> (the policy's own
 * window parser) or, for a GCRA policy, burst=<n>, into <win>/<*nwin>. It
 * keeps its policy's algorithm and precision. Returns 0 or -1.
 */
static int parse_account_limits(struct parse_ctx *x, const char *what,
                                 const struct window_policy *p, const struct word *w,
                                 size_t n, struct window_limit *win, unsigned *nwin)
{
	uint64_t burst = 0;
	size_t i;
	int rc;

	for (i = 0; i < n; i++) {
		rc = parse_limit_word(x, what, w[i], win, nwin);
		if (rc == 1 && p->algorithm == WINDOW_ALGO_GCRA)
			rc = parse_burst_word(x, what, w[i], &burst);
		if (rc == -1)
			return -1;
		if (rc == 1)
			return config_parse_fail(&x->lex, "%s: expected <limit>/<window>%s, got '%.*s'",
			                  what, p->algorithm == WINDOW_ALGO_GCRA ? " or burst=<n>" : "",
			                  config_word_plen(w[i]), w[i].p);
	}
	if (p->algorithm == WINDOW_ALGO_GCRA &&
	    gcra_finish(x, what, win, *nwin, burst, p->max_cost) == -1)
		return -1;
	return check_precision(x, what, p->precision_ms, win, *nwin);
}

/* override <policy> <key> <limit>/<window>... [burst=<n>] (gcra). Grows
 * the policy's override table (owned by the config) and this parse's line
 * table (owned by <x>). */
int config_dir_override(struct parse_ctx *x, const struct word *w, size_t n)
{
	struct config *c = x->c;
	struct window_policy *p;
	struct window_override *o;
	char what[WINDOW_NAME_MAX + 32];
	size_t pi, k;

	if (n < 4)
		return config_parse_fail(&x->lex, "override: expected 'override <policy> <key> <limit>/<window>...'");
	p = config_policy_named(c, w[1].p, w[1].len);
	if (!p)
		return config_parse_fail(&x->lex, "override for unknown policy '%.*s'", config_word_plen(w[1]), w[1].p);
	if (window_check_key(w[2].p, w[2].len) == -1)
		return config_parse_fail(&x->lex, "override: key must be 1..%d bytes", WINDOW_KEY_MAX);
	pi = (size_t)(p - c->policies);

	if (p->noverrides == x->ov_cap[pi]) {
		size_t cap = x->ov_cap[pi] ? x->ov_cap[pi] * 2 : 8;
		size_t nnew = cap - x->ov_first[pi];
		struct window_override *grown = realloc(p->overrides, cap * sizeof(*grown));
		unsigned *lines;

		if (!grown)
			return config_parse_fail(&x->lex, "out of memory");
		p->overrides = grown;
		x->ov_cap[pi] = cap;
		lines = realloc(x->ov_line[pi], nnew * sizeof(*lines));
		if (!lines)
			return config_parse_fail(&x->lex, "out of memory");
		x->ov_line[pi] = lines;
	}
	o = &p->overrides[p->noverrides];
	memset(o, 0, sizeof(*o));
	memcpy(o->key, w[2].p, w[2].len);
	o->key_len = w[2].len;
	snprintf(what, sizeof(what), "override '%.*s' of '%s'",
	         config_word_plen(w[2]) > 24 ? 24 : config_word_plen(w[2]), w[2].p, p->name);
	if (parse_account_limits(x, what, p, w + 3, n - 3, o->win, &o->nwin) == -1)
		return -1;
	/* HAProxy sends the identity with its kind ("jwt:ACC-1"): a bare
	 * account parses but matches nothing the shipped block sends. A warning,
	 * not an error: a site whose own HAProxy sends bare keys keeps working. */
	if (config_check_key_kind(o->key, o->key_len) == -1)
		parse_warn(x, "%s: the key has no identity kind (jwt:, key:, cert: or ip:), so it never "
		           "matches a key the shipped HAProxy block sends (e.g. 'jwt:%.*s')",
		           what, config_word_plen(w[2]) > 24 ? 24 : config_word_plen(w[2]), w[2].p);
	warn_dead_windows(x, what, o->win, o->nwin);
	k = p->noverrides - x->ov_first[pi];
	x->ov_line[pi][k] = x->lex.line;
	p->noverrides++;
	return 0;
}

/* plan <name> <policy> <limit>/<window>... [burst=<n>] (gcra): the limits of
 * every account on plan <name> in <policy>. Grows the policy's plan table
 * (owned by the config) by one. */
/* Whether plan windows <win>/<nwin> have the keys of policy <p>'s: the same
 * window lengths and quota periods (a bucket's rate is one key whatever its
 * window). Then every plan of a policy counts in the same keys, and a change
 * of plan keeps what the account was admitted in each window. */
static bool plan_same_keys(const struct window_policy *p, const struct window_limit *win,
                           unsigned nwin)
{
	unsigned i, j;

	if (nwin != p->nwin)
		return false;
	for (i = 0; i < nwin; i++) {
		for (j = 0; j < p->nwin; j++)
			if (win[i].cal == p->win[j].cal &&
			    (win[i].cal || p->algorithm == WINDOW_ALGO_GCRA ||
			     win[i].window_ms == p->win[j].window_ms))
				break;
		if (j == p->nwin)
			return false;
	}
	return true;
}

int config_dir_plan(struct parse_ctx *x, const struct word *w, size_t n)
{
	struct window_policy *p;
	struct window_plan *pl, *grown;
	char what[2 * WINDOW_NAME_MAX + 32];

	if (n < 4)
		return config_parse_fail(&x->lex, "plan: expected 'plan <name> <policy> "
		                         "<limit>/<window>... [burst=<n>]'");
	if (config_check_policy_name(w[1]) == -1)
		return config_parse_fail(&x->lex, "plan name '%.*s' must be 1..%d characters of A-Z a-z "
		                         "0-9 _ . -", config_word_plen(w[1]), w[1].p, WINDOW_NAME_MAX);
	p = config_policy_named(x->c, w[2].p, w[2].len);
	if (!p)
		return config_parse_fail(&x->lex, "plan '%.*s' for unknown policy '%.*s'",
		                         config_word_plen(w[1]), w[1].p, config_word_plen(w[2]), w[2].p);
	snprintf(what, sizeof(what), "plan '%.*s' of '%s'", config_word_plen(w[1]), w[1].p, p->name);
	if (window_plan_find(p, w[1].p, w[1].len))
		return config_parse_fail(&x->lex, "%s given twice", what);
	if (p->nplans >= CONFIG_MAX_PLANS)
		return config_parse_fail(&x->lex, "%s: at most %d plans per policy", what,
		                         CONFIG_MAX_PLANS);
	grown = realloc(p->plans, (p->nplans + 1) * sizeof(*grown));
	if (!grown)
		return config_parse_fail(&x->lex, "out of memory");
	p->plans = grown;
	pl = &p->plans[p->nplans];
	memset(pl, 0, sizeof(*pl));
	memcpy(pl->name, w[1].p, w[1].len);
	pl->name_len = w[1].len;
	if (parse_account_limits(x, what, p, w + 3, n - 3, pl->win, &pl->nwin) == -1)
		return -1;
	if (!plan_same_keys(p, pl->win, pl->nwin))
		return config_parse_fail(&x->lex, "%s: its windows must have the policy's lengths and "
		                         "quota periods, its limits may differ (an account's units "
		                         "are counted in the same keys whatever its plan)", what);
	warn_dead_windows(x, what, pl->win, pl->nwin);
	p->nplans++;
	return 0;
}

/* live-max <policy> <limit>/<window>...: the most a live override (ctl)
 * may allow that policy's accounts; without it a live override may only
 * lower an account's configured limits. */
int config_dir_live_max(struct parse_ctx *x, const struct word *w, size_t n)
{
	struct window_policy *p;
	char what[WINDOW_NAME_MAX + 32];
	size_t i;
	int rc;

	if (n < 3)
		return config_parse_fail(&x->lex, "live-max: expected 'live-max <policy> <limit>/<window>...'");
	p = config_policy_named(x->c, w[1].p, w[1].len);
	if (!p)
		return config_parse_fail(&x->lex, "live-max for unknown policy '%.*s'", config_word_plen(w[1]), w[1].p);
	if (p->live_nwin)
		return config_parse_fail(&x->lex, "duplicate live-max for policy '%s'", p->name);
	snprintf(what, sizeof(what), "live-max of '%s'", p->name);
	for (i = 2; i < n; i++) {
		rc = parse_limit_word(x, what, w[i], p->live_win, &p->live_nwin);
		if (rc == 1)
			rc = config_parse_fail(&x->lex, "%s: expected <limit>/<window>, got '%.*s'",
			                       what, config_word_plen(w[i]), w[i].p);
		if (rc == -1)
			return -1;
	}
	return check_precision(x, what, p->precision_ms, p->live_win, p->live_nwin);
}

/* An override and where it was written, for sorting with line numbers. */
struct ov_ref {
	const struct window_override *ov;
	unsigned line;                 /* 0 = from an earlier parse */
};

/* Order of struct ov_ref <a>, <b>: by key, then by line. */
static int ov_ref_cmp(const void *a, const void *b)
{
	const struct ov_ref *x = a, *y = b;
	int c = window_override_cmp(x->ov, y->ov);

	if (c)
		return c;
	return (x->line > y->line) - (x->line < y->line);
}

/*
 * Sort the overrides of policy <pi> (window.h's order, for bsearch) and
 * refuse duplicate keys, naming the later line. The sorted table replaces
 * the old one at its exact size (the old one is freed; the config owns the
 * new one); the temporary reference array is freed here. Returns 0 or -1.
 */
int config_overrides_finish(struct parse_ctx *x, size_t pi)
{
	struct window_policy *p = &x->c->policies[pi];
	size_t n = p->noverrides, i;
	struct ov_ref *refs = NULL;
	struct window_override *sorted = NULL;
	int rc = -1;

	refs = malloc(n * sizeof(*refs));
	sorted = malloc(n * sizeof(*sorted));
	if (!refs || !sorted) {
		config_parse_fail(&x->lex, "out of memory");
		goto out;
	}
	for (i = 0; i < n; i++) {
		refs[i].ov = &p->overrides[i];
		refs[i].line = i < x->ov_first[pi] ? 0 : x->ov_line[pi][i - x->ov_first[pi]];
	}
	qsort(refs, n, sizeof(*refs), ov_ref_cmp);
	for (i = 0; i < n; i++) {
		if (i && window_override_cmp(refs[i - 1].ov, refs[i].ov) == 0) {
			x->lex.line = refs[i].line;
			config_parse_fail(&x->lex, "duplicate override '%.*s' for policy '%s'",
			           refs[i].ov->key_len > 64 ? 64 : (int)refs[i].ov->key_len,
			           refs[i].ov->key, p->name);
			goto out;
		}
		sorted[i] = *refs[i].ov;
	}
	free(p->overrides);
	p->overrides = sorted;
	sorted = NULL;
	x->ov_first[pi] = n;
	x->ov_cap[pi] = n;
	rc = 0;
out:
	free(sorted);
	free(refs);
	return rc;
}
