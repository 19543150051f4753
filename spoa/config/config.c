/*
 * config - parse the agent's configuration (see config.h); the checks of
 * addresses, URLs, the whole config and a routes map are config_check.c.
 * Lines and words come from config_lex.c; nothing is copied until a
 * directive accepts a word. Error messages never repeat the redis URL: it
 * may hold a password.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "config_int.h"
#include "config_lex.h"
#include "decimal.h"
#include "redis_url.h"

/* Scalar directives: each may appear once per parsed text. A new directive
 * is a value here, a line in directives[] below, a case in dir_scalar(),
 * and a row in docs/configuration.md's table and an entry in the man page
 * (tests/e2e/t_config.sh holds the docs to the parser's list). */
enum config_dir {
	CONFIG_DIR_LISTEN = 0,
	CONFIG_DIR_REDIS,
	CONFIG_DIR_REDIS_TIMEOUT,
	CONFIG_DIR_REDIS_BATCH,
	CONFIG_DIR_THREADS,
	CONFIG_DIR_LOG_LEVEL,
	CONFIG_DIR_METRICS,
	CONFIG_DIR_MAX_CONNECTIONS,
	CONFIG_DIR_MAX_INFLIGHT,
	CONFIG_DIR_MAX_NOTIFY_MESSAGES,
	CONFIG_DIR_HELLO_TIMEOUT,
	CONFIG_DIR_FRAME_TIMEOUT,
	CONFIG_DIR_ALLOW_REMOTE_LISTEN,
	CONFIG_DIR_DENY_CACHE,
	CONFIG_DIR_DENY_CACHE_SIZE,
	CONFIG_DIR_REDIS_ALLOW_EVICTION,
	CONFIG_DIR_REDIS_ENGINE,
	CONFIG_DIR_TLS_CA,
	CONFIG_DIR_TLS_CA_DIR,
	CONFIG_DIR_TLS_CERT,
	CONFIG_DIR_TLS_KEY,
	CONFIG_DIR_TLS_SERVER_NAME,
	CONFIG_DIR_TLS_VERIFY,
	CONFIG_DIR_POLICY,             /* repeatable from here on */
	CONFIG_DIR_OVERRIDE,
	CONFIG_DIR_LIVE_MAX,
	CONFIG_DIR_COUNT
};

struct parse_ctx {
	struct config_lex lex;                    /* name, line, error */
	struct config *c;
	unsigned seen[CONFIG_DIR_COUNT];          /* line of first use, 0 = not yet */
	/* Overrides added by this parse, per policy: where they start, the
	 * array's capacity, and the line of each (for duplicate messages). */
	size_t ov_first[CONFIG_MAX_POLICIES];
	size_t ov_cap[CONFIG_MAX_POLICIES];
	unsigned *ov_line[CONFIG_MAX_POLICIES];
};

static const char *const log_level_names[CONFIG_LOG_COUNT] = {
	[CONFIG_LOG_ERROR] = "error",
	[CONFIG_LOG_WARN]  = "warn",
	[CONFIG_LOG_INFO]  = "info",
	[CONFIG_LOG_DEBUG] = "debug",
};

/* ------------------------------------------------------------------------ */
/* Small helpers                                                              */
/* ------------------------------------------------------------------------ */

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

/* Milliseconds in <unit>/<len> ("ms", "s", "m", "h"), or 0. */
static uint64_t unit_ms(const char *unit, size_t len)
{
	if (len == 2 && memcmp(unit, "ms", 2) == 0)
		return 1;
	if (len == 1 && unit[0] == 's')
		return 1000;
	if (len == 1 && unit[0] == 'm')
		return 60000;
	if (len == 1 && unit[0] == 'h')
		return 3600000;
	return 0;
}

/* "<n>ms|s|m|h" in <s>/<len> to <*ms>. Returns 0 or -1. */
int config_parse_duration(const char *s, size_t len, uint64_t *ms)
{
	size_t i = 0;
	uint64_t n, mul;

	while (i < len && s[i] >= '0' && s[i] <= '9')
		i++;
	mul = unit_ms(s + i, len - i);
	if (i == 0 || mul == 0 || decimal_parse(s, i, UINT64_MAX / mul, &n) != 0)
		return -1;
	*ms = n * mul;
	return 0;
}

/* A window: a duration, or a bare unit meaning one of it ("s" = "1s"). */
static int parse_window(const char *s, size_t len, uint64_t *ms)
{
	if (len && (s[0] < '0' || s[0] > '9')) {
		uint64_t mul = unit_ms(s, len);

		if (!mul)
			return -1;
		*ms = mul;
		return 0;
	}
	return config_parse_duration(s, len, ms);
}

/* Name of <l> ("error", ...); "unknown" outside the enum. Static storage. */
const char *config_log_level_str(enum config_log_level l)
{
	if ((unsigned)l >= CONFIG_LOG_COUNT)
		return "unknown";
	return log_level_names[l];
}

/* ------------------------------------------------------------------------ */
/* Directives                                                                 */
/* ------------------------------------------------------------------------ */

/* Copy <w> into <dst>/<cap> as a C string; -1 if it does not fit. */
static int word_copy(char *dst, size_t cap, struct word w)
{
	if (w.len >= cap)
		return -1;
	memcpy(dst, w.p, w.len);
	dst[w.len] = '\0';
	return 0;
}

/*
 * Parse one "<limit>/<window>" word <w> into <lim> appended to <win>/<*nwin>
 * (checking range and that the window is new). <what> names the owner in
 * messages ("policy 'x'"). Returns 0, 1 when <w> has no '/', or -1.
 */
static int parse_limit_word(struct parse_ctx *x, const char *what, struct word w,
                            struct window_limit *win, unsigned *nwin)
{
	const char *slash = memchr(w.p, '/', w.len);
	uint64_t limit, ms;
	unsigned i;
	int rc;

	if (!slash)
		return 1;
	rc = decimal_parse(w.p, (size_t)(slash - w.p), CONFIG_LIMIT_MAX, &limit);
	if (rc == -1 || (rc == 0 && limit == 0))
		return config_parse_fail(&x->lex, "%s: limit must be a positive integer, got '%.*s'",
		                  what, config_word_plen(w), w.p);
	if (rc == -2)
		return config_parse_fail(&x->lex, "%s: limit must be at most %u", what, CONFIG_LIMIT_MAX);
	if (parse_window(slash + 1, (size_t)(w.p + w.len - slash - 1), &ms) == -1)
		return config_parse_fail(&x->lex, "%s: bad window in '%.*s' (use <n>ms, <n>s, <n>m or <n>h)",
		                  what, config_word_plen(w), w.p);
	if (ms < 1 || ms > CONFIG_WINDOW_MAX_MS)
		return config_parse_fail(&x->lex, "%s: window must be 1ms..24h", what);
	for (i = 0; i < *nwin; i++) {
		if (win[i].window_ms == ms) {
			char ws[32];

			window_format_ms(ms, ws, sizeof(ws));
			return config_parse_fail(&x->lex, "%s: window %s given twice", what, ws);
		}
	}
	if (*nwin >= WINDOW_MAX_WINDOWS)
		return config_parse_fail(&x->lex, "%s: at most %d windows", what, WINDOW_MAX_WINDOWS);
	win[*nwin].limit = limit;
	win[*nwin].window_ms = ms;
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
			if (win[i].window_ms >= win[j].window_ms || win[i].limit < win[j].limit)
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
	if (nwin != 1)
		return config_parse_fail(&x->lex, "%s: algorithm=gcra takes exactly one <limit>/<window> "
		                         "(the rate; burst=<n> is the bucket)", what);
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

/* policy <name> <limit>/<window>... [on-redis-error=deny|allow] [shadow]
 * [max-cost=<n>] [precision=<duration>] [algorithm=log|gcra] [burst=<n>] */
static int dir_policy(struct parse_ctx *x, const struct word *w, size_t n)
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
	if (config_find_policy(c, w[1].p, w[1].len))
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
			if (config_parse_duration(w[i].p + 10, w[i].len - 10, &p->precision_ms) != 0 ||
			    p->precision_ms == 0)
				return config_parse_fail(&x->lex, "%s: bad precision in '%.*s' (use <n>s, <n>m or <n>h)",
				                  what, config_word_plen(w[i]), w[i].p);
		} else
			return config_parse_fail(&x->lex, "%s: unknown option '%.*s' (expected <limit>/<window>, "
			                  "on-redis-error=deny|allow, shadow, max-cost=<n>, "
			                  "precision=<duration>, algorithm=log|gcra or burst=<n>)",
			                  what, config_word_plen(w[i]), w[i].p);
	}
	if (p->nwin == 0)
		return config_parse_fail(&x->lex, "%s: expected at least one <limit>/<window>", what);
	if (p->algorithm == WINDOW_ALGO_GCRA) {
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
		for (i = 0; i < p->nwin && !window_is_bucketed(p, p->win[i].window_ms); i++)
			;
		if (i == p->nwin)
			return config_parse_fail(&x->lex, "%s: precision applies to no window (only windows "
			                  "longer than it are counted in buckets)", what);
	}
	warn_dead_windows(x, what, p->win, p->nwin);
	/* Overrides added later in this parse start at index 0. */
	x->ov_first[c->npolicies] = 0;
	x->ov_cap[c->npolicies] = 0;
	c->npolicies++;
	return 0;
}

/* override <policy> <key> <limit>/<window>... [burst=<n>] (gcra). Grows
 * the policy's override table (owned by the config) and this parse's line
 * table (owned by <x>). */
static int dir_override(struct parse_ctx *x, const struct word *w, size_t n)
{
	struct config *c = x->c;
	struct window_policy *p;
	struct window_override *o;
	char what[WINDOW_NAME_MAX + 32];
	uint64_t burst = 0;
	size_t pi, i, k;
	int rc;

	if (n < 4)
		return config_parse_fail(&x->lex, "override: expected 'override <policy> <key> <limit>/<window>...'");
	p = (struct window_policy *)config_find_policy(c, w[1].p, w[1].len);
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
	for (i = 3; i < n; i++) {
		rc = parse_limit_word(x, what, w[i], o->win, &o->nwin);
		if (rc == 1 && p->algorithm == WINDOW_ALGO_GCRA)
			rc = parse_burst_word(x, what, w[i], &burst);
		if (rc == -1)
			return -1;
		if (rc == 1)
			return config_parse_fail(&x->lex, "%s: expected <limit>/<window>%s, got '%.*s'",
			                  what, p->algorithm == WINDOW_ALGO_GCRA ? " or burst=<n>" : "",
			                  config_word_plen(w[i]), w[i].p);
	}
	/* an override keeps its policy's algorithm */
	if (p->algorithm == WINDOW_ALGO_GCRA &&
	    gcra_finish(x, what, o->win, o->nwin, burst, p->max_cost) == -1)
		return -1;
	if (check_precision(x, what, p->precision_ms, o->win, o->nwin) == -1)
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

/* live-max <policy> <limit>/<window>...: the most a live override (ctl)
 * may allow that policy's accounts; without it a live override may only
 * lower an account's configured limits. */
static int dir_live_max(struct parse_ctx *x, const struct word *w, size_t n)
{
	struct window_policy *p;
	char what[WINDOW_NAME_MAX + 32];
	size_t i;
	int rc;

	if (n < 3)
		return config_parse_fail(&x->lex, "live-max: expected 'live-max <policy> <limit>/<window>...'");
	p = (struct window_policy *)config_find_policy(x->c, w[1].p, w[1].len);
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
static int overrides_finish(struct parse_ctx *x, size_t pi)
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


static const char *const redis_engine_names[CONFIG_REDIS_ENGINE_COUNT] = {
	[CONFIG_REDIS_ENGINE_AUTO] = "auto",
	[CONFIG_REDIS_ENGINE_SCRIPT] = "script",
	[CONFIG_REDIS_ENGINE_MODULE] = "module",
};
/* Directive <key> whose value <v> must be <on> (true) or <off> (false),
 * into <*out>. Returns 0 or -1 with the error set. */
static int parse_switch(struct parse_ctx *x, struct word key, struct word v, const char *on,
                        const char *off, bool *out)
{
	if (config_word_is(v, on) || config_word_is(v, off)) {
		*out = config_word_is(v, on);
		return 0;
	}
	return config_parse_fail(&x->lex, "%.*s must be %s or %s; got '%.*s'", config_word_plen(key), key.p, on, off,
	                  config_word_plen(v), v.p);
}

/* A redis-tls-* file or directory <v> into <dst>/<cap>: it must exist and
 * be readable now (a typo fails at -c, not at the first connect). Returns
 * NULL or a reason. */
static const char *check_tls_path(struct word v, bool dir, char *dst, size_t cap)
{
	struct stat st;

	if (word_copy(dst, cap, v) == -1)
		return "path too long";
	if (stat(dst, &st) == -1)
		return "no such file";
	if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
		return dir ? "not a directory" : "not a regular file";
	if (access(dst, dir ? (R_OK | X_OK) : R_OK) == -1)
		return "not readable by this user";
	return NULL;
}

/* One redis-tls-* directive <d> with value <v> into c->tls. */
static int dir_tls(struct parse_ctx *x, enum config_dir d, struct word key, struct word v)
{
	struct config_tls *t;
	const char *why = NULL;

	if (!SPOA_TLS)
		return config_parse_fail(&x->lex, "%.*s: %s", config_word_plen(key), key.p, config_no_tls);
	t = &x->c->tls;
	t->any = true;
	switch (d) {
	case CONFIG_DIR_TLS_CA:
		why = check_tls_path(v, false, t->ca, sizeof(t->ca));
		break;
	case CONFIG_DIR_TLS_CA_DIR:
		why = check_tls_path(v, true, t->ca_dir, sizeof(t->ca_dir));
		break;
	case CONFIG_DIR_TLS_CERT:
		why = check_tls_path(v, false, t->cert, sizeof(t->cert));
		break;
	case CONFIG_DIR_TLS_KEY:
		why = check_tls_path(v, false, t->key, sizeof(t->key));
		break;
	case CONFIG_DIR_TLS_SERVER_NAME:
		if (!redis_url_name_ok(v.p, v.len))
			return config_parse_fail(&x->lex, "redis-tls-server-name must be a host name; got '%.*s'",
			                         config_word_plen(v), v.p);
		if (word_copy(t->server_name, sizeof(t->server_name), v) == -1)
			return config_parse_fail(&x->lex, "redis-tls-server-name: too long");
		return 0;
	default:
		return parse_switch(x, key, v, "on", "off", &t->verify);
	}
	if (why)
		return config_parse_fail(&x->lex, "%.*s '%.*s': %s", config_word_plen(key), key.p,
		                         config_word_plen(v), v.p, why);
	return 0;
}

/* A scalar directive <d> with one argument <v> (already counted). */
static int dir_scalar(struct parse_ctx *x, enum config_dir d, struct word key, struct word v)
{
	struct config *c = x->c;
	const char *why;
	char whybuf[CONFIG_ERR_LEN];
	uint64_t u;
	int rc;
	size_t i;
	bool tls;

	switch (d) {
	case CONFIG_DIR_LISTEN:
		why = config_check_listen_addr(v.p, v.len);
		if (why)
			return config_parse_fail(&x->lex, "listen '%.*s': %s (expected host:port, [ipv6]:port or unix:/path)",
			                  config_word_plen(v), v.p, why);
		if (word_copy(c->listen, sizeof(c->listen), v) == -1)
			return config_parse_fail(&x->lex, "listen: address too long");
		return 0;
	case CONFIG_DIR_METRICS:
		if (config_word_is(v, "off")) {
			c->metrics[0] = '\0';
			return 0;
		}
		why = config_check_listen_addr(v.p, v.len);
		if (why)
			return config_parse_fail(&x->lex, "metrics '%.*s': %s (expected host:port, [ipv6]:port, unix:/path or off)",
			                  config_word_plen(v), v.p, why);
		if (word_copy(c->metrics, sizeof(c->metrics), v) == -1)
			return config_parse_fail(&x->lex, "metrics: address too long");
		return 0;
	case CONFIG_DIR_REDIS:
		if (config_check_redis_url(v.p, v.len, &tls, whybuf, sizeof(whybuf)) == -1)
			return config_parse_fail(&x->lex, "%s", whybuf);
		if (word_copy(c->redis, sizeof(c->redis), v) == -1)
			return config_parse_fail(&x->lex, "redis: URL too long (at most %d bytes)", CONFIG_URL_MAX - 1);
		return 0;
	case CONFIG_DIR_REDIS_TIMEOUT:
		if (config_parse_duration(v.p, v.len, &u) == -1 || u < 1 || u > CONFIG_TIMEOUT_MAX_MS)
			return config_parse_fail(&x->lex, "redis-timeout must be a duration 1ms..60s, e.g. 50ms; got '%.*s'",
			                  config_word_plen(v), v.p);
		c->redis_timeout_ms = u;
		return 0;
	case CONFIG_DIR_REDIS_BATCH:
		if (decimal_parse(v.p, v.len, CONFIG_REDIS_BATCH_MAX, &u) != 0 || u < 1)
			return config_parse_fail(&x->lex, "redis-batch must be an integer 1..%u (1: one script call per decision); got '%.*s'",
			                  CONFIG_REDIS_BATCH_MAX, config_word_plen(v), v.p);
		c->redis_batch = (unsigned)u;
		return 0;
	case CONFIG_DIR_THREADS:
		if (decimal_parse(v.p, v.len, CONFIG_THREADS_MAX, &u) != 0 || u < 1)
			return config_parse_fail(&x->lex, "threads must be an integer 1..%u", CONFIG_THREADS_MAX);
		c->threads = (unsigned)u;
		return 0;
	case CONFIG_DIR_MAX_CONNECTIONS:
		if (decimal_parse(v.p, v.len, CONFIG_CONN_MAX, &u) != 0 || u < 1)
			return config_parse_fail(&x->lex, "max-connections must be an integer 1..%u", CONFIG_CONN_MAX);
		c->max_connections = (unsigned)u;
		return 0;
	case CONFIG_DIR_MAX_INFLIGHT:
		if (decimal_parse(v.p, v.len, CONFIG_INFLIGHT_MAX, &u) != 0 || u < 1)
			return config_parse_fail(&x->lex, "max-inflight must be an integer 1..%u", CONFIG_INFLIGHT_MAX);
		c->max_inflight = (unsigned)u;
		return 0;
	case CONFIG_DIR_MAX_NOTIFY_MESSAGES:
		if (decimal_parse(v.p, v.len, CONFIG_NOTIFY_MSGS_MAX, &u) != 0 || u < 1)
			return config_parse_fail(&x->lex, "max-notify-messages must be an integer 1..%u",
			                         CONFIG_NOTIFY_MSGS_MAX);
		c->max_notify_messages = (unsigned)u;
		return 0;
	case CONFIG_DIR_HELLO_TIMEOUT:
	case CONFIG_DIR_FRAME_TIMEOUT:
		/* a floor keeps a typo ("1ms") from cutting every peer off */
		if (config_parse_duration(v.p, v.len, &u) == -1 || u < CONFIG_PEER_TIMEOUT_MIN_MS ||
		    u > CONFIG_PEER_TIMEOUT_MAX_MS)
			return config_parse_fail(&x->lex, "%.*s must be a duration 10ms..1h, e.g. 10s; got '%.*s'",
			                  config_word_plen(key), key.p, config_word_plen(v), v.p);
		if (d == CONFIG_DIR_HELLO_TIMEOUT)
			c->hello_timeout_ms = u;
		else
			c->frame_timeout_ms = u;
		return 0;
	case CONFIG_DIR_DENY_CACHE:
		return parse_switch(x, key, v, "on", "off", &c->deny_cache);
	case CONFIG_DIR_DENY_CACHE_SIZE:
		if (decimal_parse(v.p, v.len, CONFIG_DENY_CACHE_SIZE_MAX, &u) != 0 || u < 1)
			return config_parse_fail(&x->lex, "deny-cache-size must be an integer 1..%u",
			                         CONFIG_DENY_CACHE_SIZE_MAX);
		c->deny_cache_size = (unsigned)u;
		return 0;
	case CONFIG_DIR_REDIS_ALLOW_EVICTION:
		return parse_switch(x, key, v, "yes", "no", &c->redis_allow_eviction);
	case CONFIG_DIR_REDIS_ENGINE:
		for (i = 0; i < CONFIG_REDIS_ENGINE_COUNT; i++) {
			if (config_word_is(v, redis_engine_names[i])) {
				c->redis_engine = (enum config_redis_engine)i;
				return 0;
			}
		}
		return config_parse_fail(&x->lex, "redis-engine must be auto, script or module; got '%.*s'",
		                         config_word_plen(v), v.p);
	case CONFIG_DIR_TLS_CA:
	case CONFIG_DIR_TLS_CA_DIR:
	case CONFIG_DIR_TLS_CERT:
	case CONFIG_DIR_TLS_KEY:
	case CONFIG_DIR_TLS_SERVER_NAME:
	case CONFIG_DIR_TLS_VERIFY:
		return dir_tls(x, d, key, v);
	case CONFIG_DIR_LOG_LEVEL:
		for (i = 0; i < CONFIG_LOG_COUNT; i++) {
			if (config_word_is(v, log_level_names[i])) {
				c->log_level = (enum config_log_level)i;
				return 0;
			}
		}
		return config_parse_fail(&x->lex, "log-level must be error, warn, info or debug; got '%.*s'",
		                  config_word_plen(v), v.p);
	default:
		rc = config_parse_fail(&x->lex, "internal: unhandled directive '%.*s'", config_word_plen(key), key.p);
		return rc;
	}
}

static const struct {
	const char *name;
	enum config_dir dir;
} directives[] = {
	{ "listen",              CONFIG_DIR_LISTEN },
	{ "redis",               CONFIG_DIR_REDIS },
	{ "redis-timeout",       CONFIG_DIR_REDIS_TIMEOUT },
	{ "redis-batch",         CONFIG_DIR_REDIS_BATCH },
	{ "threads",             CONFIG_DIR_THREADS },
	{ "log-level",           CONFIG_DIR_LOG_LEVEL },
	{ "metrics",             CONFIG_DIR_METRICS },
	{ "max-connections",     CONFIG_DIR_MAX_CONNECTIONS },
	{ "max-inflight",        CONFIG_DIR_MAX_INFLIGHT },
	{ "max-notify-messages", CONFIG_DIR_MAX_NOTIFY_MESSAGES },
	{ "hello-timeout",       CONFIG_DIR_HELLO_TIMEOUT },
	{ "frame-timeout",       CONFIG_DIR_FRAME_TIMEOUT },
	{ "allow-remote-listen", CONFIG_DIR_ALLOW_REMOTE_LISTEN },
	{ "deny-cache",          CONFIG_DIR_DENY_CACHE },
	{ "deny-cache-size",     CONFIG_DIR_DENY_CACHE_SIZE },
	{ "redis-allow-eviction", CONFIG_DIR_REDIS_ALLOW_EVICTION },
	{ "redis-engine",        CONFIG_DIR_REDIS_ENGINE },
	{ "redis-tls-ca",        CONFIG_DIR_TLS_CA },
	{ "redis-tls-ca-dir",    CONFIG_DIR_TLS_CA_DIR },
	{ "redis-tls-cert",      CONFIG_DIR_TLS_CERT },
	{ "redis-tls-key",       CONFIG_DIR_TLS_KEY },
	{ "redis-tls-server-name", CONFIG_DIR_TLS_SERVER_NAME },
	{ "redis-tls-verify",    CONFIG_DIR_TLS_VERIFY },
	{ "policy",              CONFIG_DIR_POLICY },
	{ "override",            CONFIG_DIR_OVERRIDE },
	{ "live-max",            CONFIG_DIR_LIVE_MAX },
};

/* One line's words <w>/<n> (n >= 1). Returns 0 or -1 with the error set. */
static int parse_words(struct parse_ctx *x, const struct word *w, size_t n)
{
	size_t i;
	enum config_dir d = CONFIG_DIR_COUNT;

	for (i = 0; i < sizeof(directives) / sizeof(directives[0]); i++) {
		if (config_word_is(w[0], directives[i].name)) {
			d = directives[i].dir;
			break;
		}
	}
	if (d == CONFIG_DIR_COUNT)
		return config_parse_fail(&x->lex, "unknown directive '%.*s'", config_word_plen(w[0]), w[0].p);
	if (d == CONFIG_DIR_POLICY)
		return dir_policy(x, w, n);
	if (d == CONFIG_DIR_OVERRIDE)
		return dir_override(x, w, n);
	if (d == CONFIG_DIR_LIVE_MAX)
		return dir_live_max(x, w, n);

	if (x->seen[d])
		return config_parse_fail(&x->lex, "duplicate directive '%s' (first at line %u)",
		                  directives[i].name, x->seen[d]);
	x->seen[d] = x->lex.line;
	if (d == CONFIG_DIR_ALLOW_REMOTE_LISTEN) {
		if (n != 1)
			return config_parse_fail(&x->lex, "allow-remote-listen takes no argument");
		x->c->allow_remote_listen = true;
		return 0;
	}
	if (n != 2)
		return config_parse_fail(&x->lex, "%s takes exactly one argument", directives[i].name);
	return dir_scalar(x, d, w[0], w[1]);
}

/* Parse <text>/<len> named <name> into <c>; see config.h. Overrides get
 * allocated inside <c> (owned by it: config_release()). */
int config_parse(struct config *c, const char *name, const char *text, size_t len,
                 char *err, size_t errlen)
{
	struct parse_ctx x;
	/* config_next_line() fills it; initialised for clang-analyzer */
	struct word w[CONFIG_MAX_WORDS] = { { NULL, 0 } };
	const char *p = text, *end = text + len, *line;
	size_t i, line_len;
	int n, rc = -1;

	memset(&x, 0, sizeof(x));
	x.c = c;
	x.lex.name = name ? name : "config";
	x.lex.err = err;
	x.lex.errlen = errlen;
	for (i = 0; i < c->npolicies; i++) {
		x.ov_first[i] = c->policies[i].noverrides;
		x.ov_cap[i] = c->policies[i].noverrides;
	}
	if (err && errlen)
		err[0] = '\0';
	/* editors on some systems start a UTF-8 file with a byte order mark */
	if (len >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0)
		p += 3;

	while ((n = config_next_line(&x.lex, &p, end, w, &line, &line_len)) > 0)
		if (parse_words(&x, w, (size_t)n) == -1)
			goto out;
	if (n == -1)
		goto out;
	for (i = 0; i < c->npolicies; i++) {
		if (c->policies[i].noverrides > x.ov_first[i] && overrides_finish(&x, i) == -1)
			goto out;
	}
	rc = 0;
out:
	for (i = 0; i < CONFIG_MAX_POLICIES; i++) {
		free(x.ov_line[i]);
		x.ov_line[i] = NULL;
	}
	return rc;
}

/* Read <path> whole and parse it into <c> (see config_parse()). The file's
 * bytes are a temporary buffer owned here; overrides go to <c>. */
int config_load_file(struct config *c, const char *path, char *err, size_t errlen)
{
	char *buf;
	size_t len;
	int rc;

	if (config_read_file(path, &buf, &len, err, errlen) == -1)
		return -1;
	snprintf(c->path, sizeof(c->path), "%s", path);
	rc = config_parse(c, path, buf, len, err, errlen);
	free(buf);
	return rc;
}

/* Defaults into <c>; it owns nothing yet. */
void config_init(struct config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->listen, sizeof(c->listen), "127.0.0.1:12345");
	snprintf(c->redis, sizeof(c->redis), "redis://127.0.0.1:6379/0");
	c->redis_timeout_ms = 50;
	c->redis_batch = CONFIG_REDIS_BATCH_DEFAULT;
	c->threads = 1;
	c->log_level = CONFIG_LOG_INFO;
	c->max_connections = 10000;
	c->max_inflight = 256;
	c->max_notify_messages = 16;
	c->hello_timeout_ms = 10000;
	c->frame_timeout_ms = 10000;
	c->deny_cache = true;
	c->deny_cache_size = 4096;
	c->tls.verify = true;
}

/* Free the override tables <c> owns; <c> stays usable (without overrides). */
void config_release(struct config *c)
{
	size_t i;

	for (i = 0; i < c->npolicies; i++) {
		free(c->policies[i].overrides);
		c->policies[i].overrides = NULL;
		c->policies[i].noverrides = 0;
	}
}

/* Deep copy of <src> into <dst>, which owns its own override tables after
 * (whatever <dst> held is overwritten, not freed). Returns 0 or -1. */
int config_copy(struct config *dst, const struct config *src)
{
	size_t i;

	memcpy(dst, src, sizeof(*dst));
	for (i = 0; i < dst->npolicies; i++)
		dst->policies[i].overrides = NULL;
	for (i = 0; i < dst->npolicies; i++) {
		const struct window_policy *sp = &src->policies[i];
		struct window_policy *dp = &dst->policies[i];

		if (!sp->noverrides)
			continue;
		dp->overrides = malloc(sp->noverrides * sizeof(*dp->overrides));
		if (!dp->overrides) {
			/* Leave <dst> consistent: counts match what is allocated. */
			dp->noverrides = 0;
			for (i = i + 1; i < dst->npolicies; i++)
				dst->policies[i].noverrides = 0;
			config_release(dst);
			return -1;
		}
		memcpy(dp->overrides, sp->overrides, sp->noverrides * sizeof(*dp->overrides));
	}
	return 0;
}

/* The policy of <c> named <name>/<len>, or NULL. Borrowed from <c>. */
const struct window_policy *config_find_policy(const struct config *c,
                                               const char *name, size_t len)
{
	size_t i;

	for (i = 0; i < c->npolicies; i++) {
		if (c->policies[i].name_len == len && memcmp(c->policies[i].name, name, len) == 0)
			return &c->policies[i];
	}
	return NULL;
}
