/*
 * config_routes - an HAProxy routes map (haproxy/routes.map) checked against
 * the agent's policies (config_check_routes, see config.h): each route names
 * a policy the config defines (or "-": exempt), an identity kind, a cost,
 * a failure mode the policy agrees with, and no route hides behind an
 * earlier prefix. Reads the map's file; calls the reader
 * (config_lex) and the parser's policy lookup, never the other way.
 */
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

/* See config.h. The route keys seen so far are borrowed from <text>, in a
 * table owned here. */
int config_check_routes(const struct config *c, const char *name, const char *text,
                        size_t len, char *err, size_t errlen)
{
	struct route_seen { const char *p; size_t len; unsigned line; } *seen = NULL, *grown;
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
		nseen++;
	}
	if (n == -1)
		goto out;
	rc = nseen > INT32_MAX ? INT32_MAX : (int)nseen;
out:
	free(seen);
	return rc;
}

/* Read the routes map at <path> and check it against <c> (see config.h). */
int config_check_routes_file(const struct config *c, const char *path,
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

