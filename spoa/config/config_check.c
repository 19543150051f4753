/*
 * config_check - what the config must be beyond its grammar: the shape of
 * addresses and Redis URLs (nothing is resolved), the whole-config checks
 * once the file and the flags are merged (config_validate). No I/O of its
 * own (redis_url, which parses the URL, reads a password from the
 * environment or a file); a routes map is checked by config_routes.c.
 */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_int.h"
#include "config_lex.h"
#include "decimal.h"
#include "net.h"
#include "redis_url.h"

/* The identity kinds the shipped HAProxy block puts before an account
 * ("jwt:ACC-1001"): a routes map's third word, an override key's prefix. */
static const char *const identity_kinds[] = { "jwt", "key", "cert", "ip" };

/* The URL shapes a bad `redis` setting is told about. */
static const char config_redis_shapes[] =
	"expected redis://[user:password@]host[:port][/db], unix:///path, "
	"cluster://host[:port][,host[:port]...] or sentinel://host[:port][,host[:port]...]/name; "
	"over TLS rediss://, cluster+tls://, sentinel+tls://";

/* What a TLS setting on a build without TLS is told. */
const char config_no_tls[] = "this build has no TLS; build with make WITH_TLS=1";

/* Format "<path>: <fmt...>" (no line: whole-config checks) into <err>. */
__attribute__((format(printf, 4, 5)))
static int validate_fail(const struct config *c, char *err, size_t errlen,
                         const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!err || !errlen)
		return -1;
	va_start(ap, fmt);
	n = snprintf(err, errlen, "%s: ", c->path[0] ? c->path : "config");
	if (n >= 0 && (size_t)n < errlen)
		vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

/* ------------------------------------------------------------------------ */
/* Addresses and URLs: shape only, nothing is resolved                        */
/* ------------------------------------------------------------------------ */

/* A host name or IPv4 literal: [A-Za-z0-9.-], 1..253 bytes. */
static int check_hostname(const char *s, size_t len)
{
	size_t i;

	if (len == 0 || len > 253)
		return -1;
	for (i = 0; i < len; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '-'))
			return -1;
	}
	return 0;
}

/*
 * Check "host:port" or "[v6]:port" in <s>/<len>. On success sets <*host>/
 * <*hlen> to the host without brackets (borrowed from <s>) and <*v6>.
 * Returns NULL or a reason.
 */
static const char *check_hostport(const char *s, size_t len, const char **host,
                                  size_t *hlen, int *v6)
{
	const char *colon;
	uint64_t port;
	char tmp[64];
	unsigned char bin[16];

	*v6 = 0;
	if (len && s[0] == '[') {
		const char *close = memchr(s, ']', len);

		if (!close || close == s + 1)
			return "bad IPv6 address";
		*host = s + 1;
		*hlen = (size_t)(close - s - 1);
		if (*hlen >= sizeof(tmp))
			return "bad IPv6 address";
		memcpy(tmp, *host, *hlen);
		tmp[*hlen] = '\0';
		if (inet_pton(AF_INET6, tmp, bin) != 1)
			return "bad IPv6 address";
		*v6 = 1;
		colon = close + 1;
		if (colon >= s + len || *colon != ':')
			return "missing port";
	} else {
		colon = memchr(s, ':', len);
		if (!colon)
			return "missing port";
		*host = s;
		*hlen = (size_t)(colon - s);
		if (*hlen == 0)
			return "missing host";
		if (check_hostname(*host, *hlen) == -1)
			return "bad host";
	}
	if (decimal_parse(colon + 1, (size_t)(s + len - colon - 1), 65535, &port) != 0 || port == 0)
		return "port must be 1..65535";
	return NULL;
}

/* "unix:/path": an absolute path that fits a sockaddr_un. */
static const char *check_unix_path(const char *path, size_t len)
{
	if (len == 0 || path[0] != '/')
		return "unix socket path must be absolute";
	if (len > NET_UNIX_PATH_MAX - 1)      /* room for the NUL */
		return "unix socket path too long";
	return NULL;
}

/* A listen or metrics address in <s>/<len>. Returns NULL or a reason. */
const char *config_check_listen_addr(const char *s, size_t len)
{
	const char *host;
	size_t hlen;
	int v6;

	if (len >= 5 && memcmp(s, "unix:", 5) == 0)
		return check_unix_path(s + 5, len - 5);
	return check_hostport(s, len, &host, &hlen, &v6);
}

/* Is the address <s> (already shape-checked) on this host only? */
static int addr_is_loopback(const char *s)
{
	const char *host;
	size_t hlen;
	int v6;
	char tmp[64];
	unsigned char bin[16];

	if (strncmp(s, "unix:", 5) == 0)
		return 1;
	if (check_hostport(s, strlen(s), &host, &hlen, &v6) || hlen >= sizeof(tmp))
		return 0;
	memcpy(tmp, host, hlen);
	tmp[hlen] = '\0';
	if (v6) {
		static const unsigned char lo6[16] = { [15] = 1 };
		static const unsigned char mapped[12] = { [10] = 0xff, [11] = 0xff };

		if (inet_pton(AF_INET6, tmp, bin) != 1)
			return 0;
		return memcmp(bin, lo6, 16) == 0 ||
		       (memcmp(bin, mapped, 12) == 0 && bin[12] == 127);
	}
	if (strcmp(tmp, "localhost") == 0)
		return 1;
	/* inet_pton accepts only full dotted quads: "127.1" is not loopback
	 * here, it is a host name nobody should use. */
	return inet_pton(AF_INET, tmp, bin) == 1 && bin[0] == 127;
}

/* Policy names end up in Redis keys and metric labels: keep them plain. */
int config_check_policy_name(struct word w)
{
	size_t i;

	if (w.len == 0 || w.len > WINDOW_NAME_MAX)
		return -1;
	for (i = 0; i < w.len; i++) {
		char ch = w.p[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-'))
			return -1;
	}
	return 0;
}

/* Redis URL <s>/<len>, by the parser the limiter runs (redis_url), so that
 * -c and a reload accept exactly what will connect. The whole message,
 * "redis: <reason> (<the shapes>)", goes into <why>/<cap> (never the URL: it
 * may hold a password): the parser and config_validate both print it as it
 * is. <*tls> says whether it is a TLS URL. Returns 0 or -1. */
int config_check_redis_url(const char *s, size_t len, bool *tls, char *why, size_t cap)
{
	struct redis_url u;
	char copy[CONFIG_URL_MAX], reason[128];
	int rc;

	*tls = false;
	if (len >= sizeof(copy)) {
		snprintf(why, cap, "redis: URL too long (at most %d bytes) (%s)", CONFIG_URL_MAX - 1,
		         config_redis_shapes);
		return -1;
	}
	memcpy(copy, s, len);
	copy[len] = '\0';
	rc = redis_url_parse(copy, &u, reason, sizeof(reason));
	*tls = rc == 0 && u.tls;
	if (rc == 0 && u.tls && !SPOA_TLS)
		rc = -1;
	redis_url_wipe(&u);
	explicit_bzero(copy, sizeof(copy));
	if (rc == -1 && *tls)
		snprintf(why, cap, "redis: a TLS URL: %s", config_no_tls);
	else if (rc == -1)
		snprintf(why, cap, "redis: %s (%s)", reason, config_redis_shapes);
	return rc;
}

/* Is the routes map's identity word <w> a known kind (jwt, key, cert, ip)? */
int config_check_identity_kind(struct word w)
{
	size_t i;

	for (i = 0; i < sizeof(identity_kinds) / sizeof(identity_kinds[0]); i++)
		if (config_word_is(w, identity_kinds[i]))
			return 0;
	return -1;
}

/* Does the override key <p>/<len> start with "<kind>:" for a known kind,
 * followed by at least one byte? */
int config_check_key_kind(const char *p, size_t len)
{
	size_t i, n;

	for (i = 0; i < sizeof(identity_kinds) / sizeof(identity_kinds[0]); i++) {
		n = strlen(identity_kinds[i]);
		if (len > n + 1 && memcmp(p, identity_kinds[i], n) == 0 && p[n] == ':')
			return 0;
	}
	return -1;
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

/* "<n>ms|s|m|h" in <s>/<len> to <*ms> (config_parse_duration's rule, here
 * so that the directive parsers need not call up into config.c). Returns 0
 * or -1. */
int config_check_duration(const char *s, size_t len, uint64_t *ms)
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
int config_check_window(const char *s, size_t len, uint64_t *ms)
{
	if (len && (s[0] < '0' || s[0] > '9')) {
		uint64_t mul = unit_ms(s, len);

		if (!mul)
			return -1;
		*ms = mul;
		return 0;
	}
	return config_check_duration(s, len, ms);
}

/* Whole-config checks on <c> once file and flags are merged. */
int config_validate(const struct config *c, char *err, size_t errlen)
{
	const char *why;
	char whybuf[CONFIG_ERR_LEN];
	size_t i;
	bool tls;

	if (c->npolicies == 0)
		return validate_fail(c, err, errlen,
		                     "no policy defined (add one, e.g. 'policy transfer 3/1s')");
	why = config_check_listen_addr(c->listen, strlen(c->listen));
	if (why)
		return validate_fail(c, err, errlen, "listen '%s': %s", c->listen, why);
	if (!c->allow_remote_listen && !addr_is_loopback(c->listen))
		return validate_fail(c, err, errlen,
		                     "listen '%s' is not loopback (127.0.0.0/8, ::1, localhost or unix:); "
		                     "add 'allow-remote-listen' to accept other hosts", c->listen);
	if (c->metrics[0]) {
		why = config_check_listen_addr(c->metrics, strlen(c->metrics));
		if (why)
			return validate_fail(c, err, errlen, "metrics '%s': %s", c->metrics, why);
		if (!c->allow_remote_listen && !addr_is_loopback(c->metrics))
			return validate_fail(c, err, errlen,
			                     "metrics '%s' is not loopback; add 'allow-remote-listen' "
			                     "to expose it to other hosts", c->metrics);
	}
	if (config_check_redis_url(c->redis, strlen(c->redis), &tls, whybuf, sizeof(whybuf)) == -1)
		return validate_fail(c, err, errlen, "%s", whybuf);
	if (c->tls.any && !tls)
		return validate_fail(c, err, errlen, "redis-tls-* given but the redis URL is not "
		                     "TLS (rediss://, cluster+tls:// or sentinel+tls://)");
	if (!c->tls.cert[0] != !c->tls.key[0])
		return validate_fail(c, err, errlen, "redis-tls-cert and redis-tls-key go together "
		                     "(mutual TLS needs both)");
	if (c->redis_timeout_ms < 1 || c->redis_timeout_ms > CONFIG_TIMEOUT_MAX_MS)
		return validate_fail(c, err, errlen, "redis-timeout must be 1ms..60s");
	if (c->threads < 1 || c->threads > CONFIG_THREADS_MAX)
		return validate_fail(c, err, errlen, "threads must be 1..%u", CONFIG_THREADS_MAX);
	if (c->max_connections < 1 || c->max_inflight < 1 || c->max_notify_messages < 1)
		return validate_fail(c, err, errlen,
		                     "max-connections, max-inflight and max-notify-messages must be >= 1");
	if (c->hello_timeout_ms < CONFIG_PEER_TIMEOUT_MIN_MS ||
	    c->hello_timeout_ms > CONFIG_PEER_TIMEOUT_MAX_MS ||
	    c->frame_timeout_ms < CONFIG_PEER_TIMEOUT_MIN_MS ||
	    c->frame_timeout_ms > CONFIG_PEER_TIMEOUT_MAX_MS)
		return validate_fail(c, err, errlen, "hello-timeout and frame-timeout must be 10ms..1h");
	if ((unsigned)c->log_level >= CONFIG_LOG_COUNT)
		return validate_fail(c, err, errlen, "bad log level");
	for (i = 0; i < c->npolicies; i++) {
		/* (inflight= alone: the leases are the policy's one limit) */
		if ((c->policies[i].nwin < 1 && !c->policies[i].inflight) ||
		    c->policies[i].nwin > WINDOW_MAX_WINDOWS)
			return validate_fail(c, err, errlen, "policy '%s': 1..%d windows",
			                     c->policies[i].name, WINDOW_MAX_WINDOWS);
	}
	return 0;
}

/* See config.h. */
void config_tag_pool_accounts(struct config *c)
{
	bool cluster = strncmp(c->redis, "cluster://", 10) == 0 ||
	               strncmp(c->redis, "cluster+tls://", 14) == 0;
	size_t i;

	for (i = 0; i < c->npolicies; i++)
		c->policies[i].pool_tag = cluster && c->policies[i].pooled;
}

/* The keys of <p>'s accounts and <q>'s differ (the pool's tag on a Cluster). */
static bool pool_tag_moves(const struct window_policy *p, const struct window_policy *q)
{
	if (p->pool_tag != q->pool_tag)
		return true;
	return p->pool_tag && (p->pool.name_len != q->pool.name_len ||
	                       memcmp(p->pool.name, q->pool.name, p->pool.name_len) != 0);
}

/* A pool's log keeps what its window held: a decision trims what left the
 * window in force, and the keys expire one window after the newest entry.
 * A longer window would count only what is still stored, so the first new
 * window could hold up to the old limit more than the new one. A shorter
 * window, a new limit or headroom apply to the units already counted. */
int config_check_pool_reload(const struct config *old, const struct config *next,
                             const char *path, char *err, size_t errlen)
{
	size_t i, j;

	for (i = 0; i < next->npools; i++) {
		const struct window_pool *np = &next->pools[i];

		for (j = 0; j < old->npools; j++) {
			const struct window_pool *op = &old->pools[j];

			if (op->name_len != np->name_len || memcmp(op->name, np->name, np->name_len) != 0 ||
			    np->window_ms <= op->window_ms)
				continue;
			snprintf(err, errlen, "%s:%u: pool '%s': its window cannot grow on reload "
			         "(%llums to %llums): its log holds only the running window's units, so the "
			         "longer window would count less than was admitted; shorten it, or give the "
			         "longer window a new pool name", path ? path : "(config)",
			         next->pool_line[i], np->name, (unsigned long long)op->window_ms,
			         (unsigned long long)np->window_ms);
			return -1;
		}
	}
	/* On a Cluster a pooled policy's accounts are keyed under the pool's
	 * tag: a new tag would start every account's windows empty */
	for (i = 0; i < next->npolicies; i++) {
		const struct window_policy *np = &next->policies[i];

		for (j = 0; j < old->npolicies; j++) {
			const struct window_policy *op = &old->policies[j];

			if (op->name_len != np->name_len || memcmp(op->name, np->name, np->name_len) != 0 ||
			    !pool_tag_moves(op, np))
				continue;
			snprintf(err, errlen, "%s:%u: policy '%s': on a Redis Cluster its pool cannot change "
			         "on reload (pool=%s to pool=%s%s): its accounts' keys carry the pool's hash "
			         "tag, so their windows would start empty; keep the pool, or give the "
			         "policy a new name (a restart starts them empty too)",
			         path ? path : "(config)", next->policy_line[i], np->name,
			         op->pooled ? op->pool.name : "(none)", np->pooled ? np->pool.name : "(none)",
			         op->pool_tag == np->pool_tag || op->pooled != np->pooled ? ""
			         : op->pool_tag ? ", the redis URL off the Cluster"
			                        : ", the redis URL onto a Cluster");
			return -1;
		}
	}
	return 0;
}
