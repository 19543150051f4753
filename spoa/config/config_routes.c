/*
 * config_routes - an HAProxy routes map (haproxy/routes.map) checked against
 * the agent's policies (config_check_routes, see config.h): each route names
 * a policy the config defines (or "-": exempt), an identity kind, a cost,
 * a failure mode the policy agrees with, and no route hides behind an
 * earlier prefix. Reads the map's file; calls the reader
 * (config_lex) and the parser's policy lookup, never the other way.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_int.h"
#include "config_lex.h"
#include "decimal.h"

/* Is <c> a byte of a route's host (lower case: the block lowers Host)? */
static int routes_host_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
}

/* The key of a route line: "[<host>:]*" (the default) or
 * "[<host>:]<METHOD>/<path prefix>[?]" ("?" at the end: that path exactly).
 * Returns 0 or -1 with the error set. */
static int routes_check_key(struct config_lex *x, struct word k)
{
	const char *p = k.p, *end = k.p + k.len, *colon, *slash, *q;

	colon = memchr(p, ':', k.len);
	if (colon) {
		if (colon == p)
			return config_parse_fail(x, "route '%.*s': an empty host before ':'",
			                         config_word_plen(k), k.p);
		for (q = p; q < colon; q++)
			if (!routes_host_char(*q))
				return config_parse_fail(x, "route '%.*s': the host must be lower case letters, digits, '.' and '-', without a port",
				                         config_word_plen(k), k.p);
		p = colon + 1;
	}
	if (end - p == 1 && *p == '*')
		return 0;
	slash = memchr(p, '/', (size_t)(end - p));
	if (!slash || slash == p)
		return config_parse_fail(x, "route '%.*s' must be [<host>:]<METHOD>/<path prefix>[?] or [<host>:]*, e.g. POST/transfers",
		                         config_word_plen(k), k.p);
	for (q = p; q < slash; q++)
		if (*q < 'A' || *q > 'Z')
			return config_parse_fail(x, "route '%.*s': the method must be upper case letters",
			                         config_word_plen(k), k.p);
	q = memchr(slash, '?', (size_t)(end - slash));
	if (q && q != end - 1)
		return config_parse_fail(x, "route '%.*s': '?' only ends a key (the exact path)",
		                         config_word_plen(k), k.p);
	return 0;
}

/* The identity word <w>: a kind, or "<kind>|ip" (the address when the
 * request has no credential of that kind). Returns 0, 1 for "<kind>|ip",
 * or -1. */
static int routes_identity(struct word w)
{
	struct word kind = w;

	if (w.len > 3 && memcmp(w.p + w.len - 3, "|ip", 3) == 0) {
		kind.len -= 3;
		if (config_word_is(kind, "ip") || config_check_identity_kind(kind) == -1)
			return -1;
		return 1;
	}
	return config_check_identity_kind(w) == -1 ? -1 : 0;
}

/* One line of a routes map: "<key> <policy> [<identity> [<cost>]]
 * [anon=<policy>] [fail=open|closed]", or "<key> -" (exempt)
 * (haproxy/routes.map). Returns 0 or -1 with the error set. */
static int routes_check_line(struct config_lex *x, const struct config *c,
                             const struct word *w, int n)
{
	const struct window_policy *pol, *anon = NULL;
	struct word v;
	uint64_t cost = 0;
	int i, npos = 0, or_ip = 0, fail_open = 0;

	if (n < 1 || !w[0].p)
		return config_parse_fail(x, "internal: empty route line");   /* for the analyzer */
	if (routes_check_key(x, w[0]) == -1)
		return -1;
	if (n < 2)
		return config_parse_fail(x, "route '%.*s' names no policy", config_word_plen(w[0]), w[0].p);
	if (config_word_is(w[1], "-")) {
		if (n > 2)
			return config_parse_fail(x, "route '%.*s': an exempt route ('-') takes no other word",
			                         config_word_plen(w[0]), w[0].p);
		return 0;
	}
	pol = config_find_policy(c, w[1].p, w[1].len);
	if (!pol)
		return config_parse_fail(x, "route '%.*s' names policy '%.*s', which the agent's config does not define",
		                  config_word_plen(w[0]), w[0].p, config_word_plen(w[1]), w[1].p);
	for (i = 2; i < n; i++) {
		v = w[i];
		if (!memchr(v.p, '=', v.len)) {
			if (i != 2 + npos || npos == 2)
				return config_parse_fail(x, "route '%.*s': too many words (<policy> [<identity> [<cost>]] [anon=<policy>] [fail=open|closed])",
				                         config_word_plen(w[0]), w[0].p);
			if (npos++ == 0) {
				or_ip = routes_identity(v);
				if (or_ip == -1)
					return config_parse_fail(x, "route '%.*s': identity must be jwt, key, cert, ip or <jwt|key|cert>|ip; got '%.*s'",
					                  config_word_plen(w[0]), w[0].p, config_word_plen(v), v.p);
			} else if (decimal_parse(v.p, v.len, UINT32_MAX, &cost) != 0 || cost < 1) {
				return config_parse_fail(x, "route '%.*s': cost must be an integer 1..%u; got '%.*s'",
				                  config_word_plen(w[0]), w[0].p, UINT32_MAX, config_word_plen(v), v.p);
			}
		} else if (v.len > 5 && memcmp(v.p, "anon=", 5) == 0) {
			if (or_ip != 1)
				return config_parse_fail(x, "route '%.*s': anon= needs the identity <kind>|ip",
				                         config_word_plen(w[0]), w[0].p);
			anon = config_find_policy(c, v.p + 5, v.len - 5);
			if (!anon)
				return config_parse_fail(x, "route '%.*s' names anon policy '%.*s', which the agent's config does not define",
				                         config_word_plen(w[0]), w[0].p, (int)(v.len - 5), v.p + 5);
		} else if (config_word_is(v, "fail=open")) {
			fail_open = 1;
		} else if (!config_word_is(v, "fail=closed")) {
			return config_parse_fail(x, "route '%.*s': unknown word '%.*s' (anon=<policy>, fail=open or fail=closed)",
			                         config_word_plen(w[0]), w[0].p, config_word_plen(v), v.p);
		}
	}
	/* fail=open passes the request when the agent cannot be asked; the
	 * agent must do the same when Redis cannot be, or the route's failure
	 * mode depends on which of the two is down */
	if (fail_open && (pol->on_error != WINDOW_ON_ERROR_ALLOW ||
	                  (anon && anon->on_error != WINDOW_ON_ERROR_ALLOW)))
		return config_parse_fail(x, "route '%.*s': fail=open, but policy '%.*s' has no on-redis-error=allow",
		                         config_word_plen(w[0]), w[0].p,
		                         anon && anon->on_error != WINDOW_ON_ERROR_ALLOW ? (int)anon->name_len : config_word_plen(w[1]),
		                         anon && anon->on_error != WINDOW_ON_ERROR_ALLOW ? anon->name : w[1].p);
	return 0;
}

/* The methods a request with no line of its own for its path falls back
 * to, in the block's order (ratelimit-edge.cfg): the first that has a line
 * for the path decides. */
static const char *const routes_fallback[] = { "GET", "POST", "PUT", "PATCH", "DELETE" };
#define ROUTES_FALLBACK_COUNT (sizeof(routes_fallback) / sizeof(routes_fallback[0]))

/* What the edge checks of a route line, least first: exempt, the address,
 * a credential or the address, a credential. */
enum routes_strictness {
	ROUTES_EXEMPT,
	ROUTES_IP,
	ROUTES_OR_IP,
	ROUTES_CREDENTIAL,
	ROUTES_STRICTNESS_COUNT
};
static const char *const routes_strictness_name[ROUTES_STRICTNESS_COUNT] = {
	"exempt", "by address", "a credential or the address", "a credential"
};

/* A route line as the method check reads it; its words are borrowed from
 * the map's text. */
struct route_seen {
	const char *p;                /* the key */
	size_t len;
	unsigned line;
	struct word host, method, path;  /* host empty when host-less */
	int exact;                    /* "?": that path only */
	int fallback;                 /* index in routes_fallback, -1 if none */
	enum routes_strictness strict;
};

/* Split key <k> (already checked) into <r>'s host, method and path; the
 * default "*" gets an empty method. */
static void routes_split_key(struct word k, struct route_seen *r)
{
	const char *p = k.p, *end = k.p + k.len, *colon, *slash;
	size_t i;

	colon = memchr(p, ':', k.len);
	r->host.p = p;
	r->host.len = colon ? (size_t)(colon - p) : 0;
	if (colon)
		p = colon + 1;
	r->fallback = -1;
	slash = memchr(p, '/', (size_t)(end - p));
	if (!slash) {
		r->method.p = r->path.p = p;
		r->method.len = r->path.len = 0;
		return;
	}
	r->method.p = p;
	r->method.len = (size_t)(slash - p);
	r->exact = end[-1] == '?';
	r->path.p = slash;
	r->path.len = (size_t)(end - slash) - (r->exact ? 1 : 0);
	for (i = 0; i < ROUTES_FALLBACK_COUNT; i++)
		if (config_word_is(r->method, routes_fallback[i]))
			r->fallback = (int)i;
}

/* The strictness of a line's words <w>/<n> (already checked). */
static enum routes_strictness routes_line_strictness(const struct word *w, int n)
{
	if (n < 2 || config_word_is(w[1], "-"))
		return ROUTES_EXEMPT;
	if (n < 3 || memchr(w[2].p, '=', w[2].len))
		return ROUTES_CREDENTIAL;   /* the identity defaults to jwt */
	if (config_word_is(w[2], "ip"))
		return ROUTES_IP;
	if (routes_identity(w[2]) == 1)
		return ROUTES_OR_IP;
	return ROUTES_CREDENTIAL;
}

/* Could one request path match both <a> and <b> (same or no host)? */
static int routes_overlap(const struct route_seen *a, const struct route_seen *b)
{
	const struct route_seen *s = a->path.len <= b->path.len ? a : b;
	const struct route_seen *l = s == a ? b : a;

	if (a->host.len && b->host.len &&
	    (a->host.len != b->host.len || memcmp(a->host.p, b->host.p, a->host.len) != 0))
		return 0;
	if (memcmp(s->path.p, l->path.p, s->path.len) != 0)
		return 0;
	/* an exact key matches its own path only */
	if (s->exact && s->path.len != l->path.len)
		return 0;
	return !l->exact || l->path.len == s->path.len || !s->exact;
}

/* Append "<name>:<line>: warning: <fmt...>\n" to <c>'s warnings, as the
 * config's own warnings (counted even when the buffer is full). */
__attribute__((format(printf, 4, 5)))
static void routes_warn(struct config *c, const char *name, unsigned line, const char *fmt, ...)
{
	char buf[CONFIG_ERR_LEN];
	size_t used = strlen(c->warnings);
	va_list ap;
	int n;

	c->nwarnings++;
	n = snprintf(buf, sizeof(buf), "%s:%u: warning: ", name, line);
	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < sizeof(buf))
		vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	if (used + strlen(buf) + 2 <= sizeof(c->warnings))
		snprintf(c->warnings + used, sizeof(c->warnings) - used, "%s\n", buf);
}

/* A method with no line of its own for a path takes the line of the first
 * of GET, POST, ... that has one: warn about each line <r[i]> that so takes
 * methods no line names from a path that a later method's line limits more
 * strictly (GET/orders by address before POST/orders with a key: PUT,
 * PATCH and DELETE on /orders would need no key). */
static void routes_warn_methods(struct config *c, const char *name,
                                const struct route_seen *r, size_t n)
{
	char unnamed[64];
	size_t i, j, k, m, used;
	int named;

	for (i = 0; i < n; i++) {
		if (r[i].fallback < 0)
			continue;
		/* an earlier method's line on the path is taken before it */
		for (k = 0; k < n; k++)
			if (r[k].fallback >= 0 && r[k].fallback < r[i].fallback && routes_overlap(&r[i], &r[k]))
				break;
		if (k < n)
			continue;
		for (j = 0; j < n; j++) {
			if (r[j].fallback <= r[i].fallback || r[j].strict <= r[i].strict ||
			    !routes_overlap(&r[i], &r[j]))
				continue;
			/* the fallback methods with no line on the path */
			used = 0;
			unnamed[0] = '\0';
			for (m = 0; m < ROUTES_FALLBACK_COUNT; m++) {
				named = (int)m == r[i].fallback;
				for (k = 0; k < n && !named; k++)
					named = r[k].fallback == (int)m && routes_overlap(&r[i], &r[k]);
				if (!named && used + strlen(routes_fallback[m]) + 3 < sizeof(unnamed))
					used += (size_t)snprintf(unnamed + used, sizeof(unnamed) - used, "%s%s",
					                         used ? ", " : "", routes_fallback[m]);
			}
			if (used)
				routes_warn(c, name, r[i].line,
				            "route '%.*s' (%s) also decides %s and methods no line names on its path, which line %u ('%.*s') limits more strictly (%s): give them lines of their own",
				            (int)r[i].len, r[i].p,
				            routes_strictness_name[r[i].strict], unnamed, r[j].line,
				            (int)r[j].len, r[j].p, routes_strictness_name[r[j].strict]);
			break;
		}
	}
}

/* See config.h. The route keys seen so far are borrowed from <text>, in a
 * table owned here. */
int config_check_routes(struct config *c, const char *name, const char *text,
                        size_t len, char *err, size_t errlen)
{
	struct route_seen *seen = NULL, *grown;
	struct config_lex x;
	struct word w[CONFIG_MAX_WORDS] = { { NULL, 0 } }, key;
	const char *p = text, *end = text + len, *line;
	size_t nseen = 0, capseen = 0, i, line_len;
	int n, rc = -1;

	memset(&x, 0, sizeof(x));
	x.name = name ? name : "routes";
	x.err = err;
	x.errlen = errlen;
	if (err && errlen)
		err[0] = '\0';
	while ((n = config_next_line(&x, &p, end, w, &line, &line_len)) > 0) {
		/* HAProxy reads a '#' after the key as part of the value */
		if (memchr(line, '#', line_len)) {
			config_parse_fail(&x, "a comment must be a line of its own ('#' after a route is part of its value)");
			goto out;
		}
		if (routes_check_line(&x, c, w, n) == -1)
			goto out;
		key = w[0];
		if (!key.p) {   /* cannot happen (n > 0); for the analyzer */
			config_parse_fail(&x, "internal: empty route line");
			goto out;
		}
		/* map_beg answers with the first line whose key begins the
		 * request: a line behind a prefix of its own key never matches
		 * (an exact "GET/a?" behind "GET/a" too; host-scoped keys begin
		 * with a lower-case host, never with a host-less key) */
		for (i = 0; i < nseen; i++) {
			if (seen[i].len <= key.len && memcmp(seen[i].p, key.p, seen[i].len) == 0) {
				config_parse_fail(&x, "route '%.*s' never matches: line %u ('%.*s') comes first and is a prefix of it",
				           config_word_plen(key), key.p, seen[i].line, (int)seen[i].len, seen[i].p);
				goto out;
			}
		}
		if (nseen == capseen) {
			capseen = capseen ? capseen * 2 : 16;
			grown = realloc(seen, capseen * sizeof(*seen));
			if (!grown) {
				config_parse_fail(&x, "out of memory");
				goto out;
			}
			seen = grown;
		}
		seen[nseen].p = key.p;
		seen[nseen].len = key.len;
		seen[nseen].line = x.line;
		routes_split_key(key, &seen[nseen]);
		seen[nseen].strict = routes_line_strictness(w, n);
		nseen++;
	}
	if (n == -1)
		goto out;
	routes_warn_methods(c, x.name, seen, nseen);
	rc = nseen > INT32_MAX ? INT32_MAX : (int)nseen;
out:
	free(seen);
	return rc;
}

/* Read the routes map at <path> and check it against <c> (see config.h). */
int config_check_routes_file(struct config *c, const char *path,
                             char *err, size_t errlen)
{
	char *buf;
	size_t len;
	int rc;

	if (config_read_file(path, &buf, &len, err, errlen) == -1)
		return -1;
	rc = config_check_routes(c, path, buf, len, err, errlen);
	free(buf);
	return rc;
}


/* See config.h. Nothing is kept: the words are borrowed from <text>. */
int config_check_plans_map(struct config *c, const char *name, const char *text,
                           size_t len, char *err, size_t errlen)
{
	struct config_lex x;
	struct word w[CONFIG_MAX_WORDS] = { { NULL, 0 } };
	const char *p = text, *end = text + len, *line;
	size_t line_len, i;
	int n, nplans = 0;

	memset(&x, 0, sizeof(x));
	x.name = name ? name : "map";
	x.err = err;
	x.errlen = errlen;
	if (err && errlen)
		err[0] = '\0';
	while ((n = config_next_line(&x, &p, end, w, &line, &line_len)) > 0) {
		for (i = 1; i < (size_t)n; i++) {
			struct word pl = { w[i].p + 5, w[i].len - 5 };

			if (w[i].len < 5 || memcmp(w[i].p, "plan=", 5) != 0)
				continue;
			nplans++;
			/* the edge reads only "<key> <account> plan=<plan>" and
			 * "<CN> plan=<plan>" */
			if (i != (size_t)n - 1 || n > 3)
				routes_warn(c, x.name, x.line, "plan= must be the line's last word, after "
				            "'<api key> <account>' or '<CN>': the edge reads no plan here");
			else if (config_check_policy_name(pl) == -1 ||
			         !config_plan_known(c, pl.p, pl.len))
				routes_warn(c, x.name, x.line, "plan '%.*s' is no plan of this config: its "
				            "requests get the policy's own limits (logged as unknown_plan)",
				            config_word_plen(pl), pl.p);
		}
	}
	return n == -1 ? -1 : nplans;
}

/* Read the map at <path> and check its plans against <c> (see config.h). */
int config_check_plans_map_file(struct config *c, const char *path,
                                char *err, size_t errlen)
{
	char *buf;
	size_t len;
	int rc;

	if (config_read_file(path, &buf, &len, err, errlen) == -1)
		return -1;
	rc = config_check_plans_map(c, path, buf, len, err, errlen);
	free(buf);
	return rc;
}
