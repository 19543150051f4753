/*
 * config_routes - an HAProxy routes map (haproxy/routes.map) checked against
 * the agent's policies (config_check_routes, see config.h): each route names
 * a policy the config defines, an identity kind and a cost, and no route
 * hides behind an earlier prefix. Reads the map's file; calls the reader
 * (config_lex) and the parser's policy lookup, never the other way.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_int.h"
#include "config_lex.h"
#include "decimal.h"

/* The failure modes a route may name as its fifth word: what HAProxy does
 * when the agent gives no answer at all (down, frozen, refusing). */
static const char *const routes_on_agent_error[] = { "closed", "open" };

/* Split word <w> at its first '|' into <a> and <b> (<b> empty without one). */
static void routes_split_word(struct word w, struct word *a, struct word *b)
{
	const char *bar = memchr(w.p, '|', w.len);

	a->p = w.p;
	a->len = bar ? (size_t)(bar - w.p) : w.len;
	b->p = bar ? bar + 1 : w.p + w.len;
	b->len = bar ? w.len - a->len - 1 : 0;
}

/* The policy named by <w>, or -1 with the error set for route <key>. */
static int routes_check_policy(struct config_lex *x, const struct config *c, struct word key,
                               struct word w, const struct window_policy **p)
{
	*p = config_find_policy(c, w.p, w.len);
	if (!*p)
		return config_parse_fail(x, "route '%.*s' names policy '%.*s', which the agent's config does not define",
		                  config_word_plen(key), key.p, config_word_plen(w), w.p);
	return 0;
}

/* Is <c> a byte of a route's host (lower case: the block lowers Host)? */
static int routes_host_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
}

/* The key of a route line: "[<host>:]*" (the default line) or
 * "[<host>:]<METHOD>/<path prefix>[?]" ("?" at the end: that path exactly,
 * as the block looks up "<METHOD><path>?"). Returns 0 or -1 with the error
 * set. */
static int routes_check_key(struct config_lex *x, struct word k)
{
	const char *p = k.p, *end = k.p + k.len, *colon, *slash, *q;

	/* the host ends at the first ':' before the path (a path may hold ':') */
	slash = memchr(p, '/', k.len);
	colon = memchr(p, ':', slash ? (size_t)(slash - p) : k.len);
	if (colon) {
		if (colon == p)
			return config_parse_fail(x, "route '%.*s': an empty host before ':'",
			                         config_word_plen(k), k.p);
		for (q = p; q < colon; q++)
			if (!routes_host_char(*q) ||
			    memchr(colon + 1, ':', (size_t)((slash ? slash : end) - colon - 1)))
				return config_parse_fail(x, "route '%.*s': the host must be lower case letters, digits, '.' and '-', without a port",
				                         config_word_plen(k), k.p);
		p = colon + 1;
	}
	if (end - p == 1 && *p == '*')
		return 0;
	slash = memchr(p, '/', (size_t)(end - p));
	if (!slash || slash == p)
		return config_parse_fail(x, "route '%.*s' must be <METHOD>/<path prefix>, e.g. POST/transfers, or * (the default line)",
		                         config_word_plen(k), k.p);
	for (q = p; q < slash; q++)
		if (*q < 'A' || *q > 'Z')
			return config_parse_fail(x, "route '%.*s': the method must be upper case letters",
			                         config_word_plen(k), k.p);
	q = memchr(slash, '?', (size_t)(end - slash));
	if (q && q != end - 1)
		return config_parse_fail(x, "route '%.*s': '?' only ends a key (that path exactly)",
		                         config_word_plen(k), k.p);
	return 0;
}

/* One line of a routes map: "<METHOD></path prefix> <policy> [<identity>
 * [<cost> [closed|open]]]", "* ..." (the default line) or "<key> -" (an
 * exemption) (haproxy/routes.map). An identity "jwt|ip" or "key|ip" takes
 * the credential when the request carries one, else the address, with the
 * policies "<for the credential>|<for the address>" (or one for both).
 * Returns 0 or -1 with the error set. */
static int routes_check_line(struct config_lex *x, const struct config *c,
                             const struct word *w, int n)
{
	const struct window_policy *p, *p2 = NULL;
	struct word pol, pol2, id, id2;
	size_t i;
	uint64_t cost = 0;

	if (n < 1 || !w[0].p)
		return config_parse_fail(x, "internal: empty route line");   /* for the analyzer */
	if (routes_check_key(x, w[0]) == -1)
		return -1;
	if (n < 2)
		return config_parse_fail(x, "route '%.*s' names no policy", config_word_plen(w[0]), w[0].p);
	if (config_word_is(w[1], "-")) {
		if (n > 2)
			return config_parse_fail(x, "route '%.*s': an exemption ('-') takes no other word",
			                  config_word_plen(w[0]), w[0].p);
		return 0;
	}
	if (n > 5)
		return config_parse_fail(x, "route '%.*s': too many words (<policy> [<identity> [<cost> [closed|open]]])",
		                  config_word_plen(w[0]), w[0].p);
	routes_split_word(w[1], &pol, &pol2);
	if (routes_check_policy(x, c, w[0], pol, &p) == -1)
		return -1;
	if (pol2.len && routes_check_policy(x, c, w[0], pol2, &p2) == -1)
		return -1;
	id.len = id2.len = 0;
	if (n >= 3)
		routes_split_word(w[2], &id, &id2);
	if (id2.len && (!(config_word_is(id, "jwt") || config_word_is(id, "key")) || !config_word_is(id2, "ip")))
		return config_parse_fail(x, "route '%.*s': an identity with a fallback is jwt|ip or key|ip; got '%.*s'",
		                  config_word_plen(w[0]), w[0].p, config_word_plen(w[2]), w[2].p);
	if (n >= 3 && !id2.len && config_check_identity_kind(w[2]) == -1)
		return config_parse_fail(x, "route '%.*s': identity must be jwt, key, cert, ip, jwt|ip or key|ip; got '%.*s'",
		                  config_word_plen(w[0]), w[0].p, config_word_plen(w[2]), w[2].p);
	if (p2 && !id2.len)
		return config_parse_fail(x, "route '%.*s': two policies ('%.*s') need an identity with a fallback (jwt|ip or key|ip)",
		                  config_word_plen(w[0]), w[0].p, config_word_plen(w[1]), w[1].p);
	if (n >= 4) {
		if (decimal_parse(w[3].p, w[3].len, UINT32_MAX, &cost) != 0 || cost < 1)
			return config_parse_fail(x, "route '%.*s': cost must be an integer 1..%u; got '%.*s'",
			                  config_word_plen(w[0]), w[0].p, UINT32_MAX, config_word_plen(w[3]), w[3].p);
	}
	if (n == 5) {
		for (i = 0; i < sizeof(routes_on_agent_error) / sizeof(routes_on_agent_error[0]); i++)
			if (config_word_is(w[4], routes_on_agent_error[i]))
				break;
		if (i == sizeof(routes_on_agent_error) / sizeof(routes_on_agent_error[0]))
			return config_parse_fail(x, "route '%.*s': the fifth word must be closed or open; got '%.*s'",
			                  config_word_plen(w[0]), w[0].p, config_word_plen(w[4]), w[4].p);
		/* the edge passing a request the agent would refuse: never looser
		 * without the agent than with it */
		if (config_word_is(w[4], "open") &&
		    (p->on_error != WINDOW_ON_ERROR_ALLOW || (p2 && p2->on_error != WINDOW_ON_ERROR_ALLOW)))
			return config_parse_fail(x, "route '%.*s' is open when the agent is unreachable, but policy '%.*s' is fail-closed (on-redis-error=deny): make both fail-open or neither",
			                  config_word_plen(w[0]), w[0].p,
			                  config_word_plen(p->on_error != WINDOW_ON_ERROR_ALLOW ? pol : pol2),
			                  (p->on_error != WINDOW_ON_ERROR_ALLOW ? pol : pol2).p);
	}
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
		 * (an exact "GET/a?" behind "GET/a" too; a host's key begins
		 * with its lower-case host, never with a host-less key) */
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

