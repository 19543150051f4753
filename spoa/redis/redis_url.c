/*
 * redis_url - the `redis` setting parsed, secrets from the environment
 * (see redis_url.h).
 *
 * Secrets are copied only into the caller's struct and wiped by
 * redis_url_wipe(); no message built here ever contains one.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "decimal.h"
#include "redis_url.h"

#define REDIS_URL_SENTINEL_PORT 26379

static const char *const mode_names[REDIS_URL_MODE_COUNT] = {
	[REDIS_URL_TCP]      = "redis",
	[REDIS_URL_UNIX]     = "unix",
	[REDIS_URL_CLUSTER]  = "cluster",
	[REDIS_URL_SENTINEL] = "sentinel",
};

/* Name of <m> (its scheme); "unknown" outside the enum. Static storage. */
const char *redis_url_mode_str(enum redis_url_mode m)
{
	if ((unsigned)m >= REDIS_URL_MODE_COUNT)
		return "unknown";
	return mode_names[m];
}

/* <host>:<port> into <dst>/<cap>, an IPv6 literal in brackets. */
void redis_url_format_host(const char *host, int port, char *dst, size_t cap)
{
	if (strchr(host, ':'))
		snprintf(dst, cap, "[%s]:%d", host, port);
	else
		snprintf(dst, cap, "%s:%d", host, port);
}

/* Decode the %XX escapes of <src>/<len> into <dst>/<cap>, NUL-terminated.
 * Returns 0, or -1 on a bad escape, a NUL byte, or when it does not fit. */
static int url_unescape(const char *src, size_t len, char *dst, size_t cap)
{
	size_t i, n = 0;

	for (i = 0; i < len; i++) {
		int c = (unsigned char)src[i];

		if (c == '%') {
			char hex[3];
			char *end;

			if (i + 2 >= len)
				return -1;
			hex[0] = src[i + 1];
			hex[1] = src[i + 2];
			hex[2] = '\0';
			c = (int)strtol(hex, &end, 16);
			if (end != hex + 2)
				return -1;
			i += 2;
		}
		if (c == 0 || n + 1 >= cap)
			return -1;
		dst[n++] = (char)c;
	}
	dst[n] = '\0';
	return 0;
}

/* Is <s>/<len> 1..253 bytes of letters, digits, '.', '-' and '_'? Host
 * names (container names have '_'; an IPv4 literal passes too) and
 * sentinel master names, which go into commands and logs. */
bool redis_url_name_ok(const char *s, size_t len)
{
	size_t i;

	if (len == 0 || len > 253)
		return false;
	for (i = 0; i < len; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '_'))
			return false;
	}
	return true;
}

/* One "host[:port]" or "[v6][:port]" in <s>/<len> into <h> (<def_port> when
 * none is given). Returns NULL or a reason. */
static const char *url_parse_host(const char *s, size_t len, int def_port,
                                  struct redis_url_host *h)
{
	const char *end = s + len, *host, *host_end, *p;
	size_t hlen;
	uint64_t v;

	if (len == 0)
		return "missing host";
	if (*s == '[') {
		host_end = memchr(s, ']', len);
		if (!host_end)
			return "missing ']'";
		host = s + 1;
		p = host_end + 1;
	} else {
		host = s;
		host_end = memchr(s, ':', len);
		if (!host_end)
			host_end = end;
		p = host_end;
	}
	hlen = (size_t)(host_end - host);
	if (hlen == 0)
		return "missing host";
	if (hlen >= sizeof(h->host))
		return "bad host";
	memcpy(h->host, host, hlen);
	h->host[hlen] = '\0';
	if (*s == '[') {
		unsigned char bin[16];

		if (inet_pton(AF_INET6, h->host, bin) != 1)
			return "bad IPv6 address";
	} else if (!redis_url_name_ok(host, hlen)) {
		return "bad host";
	}
	h->port = def_port;
	if (p == end)
		return NULL;
	if (*p != ':' || decimal_parse(p + 1, (size_t)(end - p - 1), 65535, &v) != 0 || v < 1)
		return "port must be 1..65535";
	h->port = (int)v;
	return NULL;
}

/* "h[:p][,h[:p]...]" in <s>/<len> into <u>'s hosts. Returns NULL or a reason. */
static const char *url_parse_host_list(const char *s, size_t len, int def_port,
                                       struct redis_url *u)
{
	const char *end = s + len;

	for (;;) {
		const char *comma = memchr(s, ',', (size_t)(end - s));
		const char *stop = comma ? comma : end;
		const char *why;

		if (u->nhosts >= REDIS_URL_HOSTS_MAX)
			return "too many hosts";
		why = url_parse_host(s, (size_t)(stop - s), def_port, &u->hosts[u->nhosts]);
		if (why)
			return why;
		u->nhosts++;
		if (!comma)
			return NULL;
		s = comma + 1;
	}
}

/* The "user:password@" part in <s>/<len> (without the '@') into <u>.
 * Returns NULL or a reason. */
static const char *url_parse_userinfo(const char *s, size_t len, struct redis_url *u)
{
	const char *colon = memchr(s, ':', len);

	/* "user@" alone would need the password from elsewhere: say where */
	if (!colon)
		return "user info must be user:password or :password "
		       "(or the user in RATELIMIT_SPOA_REDIS_USER)";
	if (url_unescape(s, (size_t)(colon - s), u->user, sizeof(u->user)) == -1 ||
	    url_unescape(colon + 1, len - (size_t)(colon - s) - 1, u->pass, sizeof(u->pass)) == -1)
		return "user or password: bad %-escape or too long";
	if (!u->pass[0])
		return "password is empty";
	u->has_pass = true;
	return NULL;
}

/* The display form of <u> into u->addr: scheme, hosts, db or master. */
static void url_format_addr(struct redis_url *u)
{
	size_t n = 0;
	unsigned i;

	if (u->mode == REDIS_URL_UNIX) {
		snprintf(u->addr, sizeof(u->addr), "unix:%s", u->hosts[0].host);
		return;
	}
	if (u->tls)
		n = (size_t)snprintf(u->addr, sizeof(u->addr), "tls:");
	if (u->mode != REDIS_URL_TCP)
		n += (size_t)snprintf(u->addr + n, sizeof(u->addr) - n, "%s://",
		                      redis_url_mode_str(u->mode));
	for (i = 0; i < u->nhosts && n < sizeof(u->addr); i++) {
		if (i)
			u->addr[n++] = ',';
		if (n >= sizeof(u->addr))
			break;
		redis_url_format_host(u->hosts[i].host, u->hosts[i].port, u->addr + n,
		                      sizeof(u->addr) - n);
		n += strlen(u->addr + n);
	}
	if (n >= sizeof(u->addr))
		n = sizeof(u->addr) - 1;
	u->addr[n] = '\0';
	if (u->mode == REDIS_URL_SENTINEL)
		snprintf(u->addr + n, sizeof(u->addr) - n, "/%s", u->master);
	else if (u->db >= 0)
		snprintf(u->addr + n, sizeof(u->addr) - n, "/%d", u->db);
}

/* Parse <s> into <u>, which then holds copies of the URL's secrets (wipe
 * with redis_url_wipe()). Returns 0, or -1 with <err>. */
int redis_url_parse(const char *s, struct redis_url *u, char *err, size_t errlen)
{
	static const struct {
		const char *scheme;
		enum redis_url_mode mode;
		bool tls;
	} schemes[] = {
		{ "redis://", REDIS_URL_TCP, false },
		{ "rediss://", REDIS_URL_TCP, true },
		{ "unix://", REDIS_URL_UNIX, false },
		{ "cluster://", REDIS_URL_CLUSTER, false },
		{ "cluster+tls://", REDIS_URL_CLUSTER, true },
		{ "sentinel://", REDIS_URL_SENTINEL, false },
		{ "sentinel+tls://", REDIS_URL_SENTINEL, true },
	};
	const char *p = NULL, *end, *at, *slash, *why = NULL;
	size_t i, len;
	int def_port = REDIS_URL_DEFAULT_PORT;

	memset(u, 0, sizeof(*u));
	u->db = -1;
	if (!s || !*s) {
		snprintf(err, errlen, "empty address");
		return -1;
	}
	for (i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
		size_t n = strlen(schemes[i].scheme);

		if (strncmp(s, schemes[i].scheme, n) == 0) {
			u->mode = schemes[i].mode;
			u->tls = schemes[i].tls;
			p = s + n;
			break;
		}
	}
	if (!p) {
		snprintf(err, errlen, "unknown scheme");
		return -1;
	}
	len = strlen(p);
	end = p + len;

	if (u->mode == REDIS_URL_UNIX) {
		if (len < 2 || p[0] != '/') {
			snprintf(err, errlen, "unix socket path must be absolute");
			return -1;
		}
		if (len >= sizeof(u->hosts[0].host) || len >= 108) {
			snprintf(err, errlen, "unix socket path too long");
			return -1;
		}
		memcpy(u->hosts[0].host, p, len + 1);
		u->nhosts = 1;
		url_format_addr(u);
		return 0;
	}

	/* The last '@' ends the user info, so a password may hold '@' or '/'. */
	at = memrchr(p, '@', len);
	if (at) {
		why = url_parse_userinfo(p, (size_t)(at - p), u);
		if (why)
			goto fail;
		p = at + 1;
	}
	/* An IPv6 literal holds ':' but never '/', so the first '/' ends the hosts. */
	slash = memchr(p, '/', (size_t)(end - p));
	if (u->mode == REDIS_URL_SENTINEL) {
		size_t nlen;

		def_port = REDIS_URL_SENTINEL_PORT;
		nlen = slash ? (size_t)(end - slash - 1) : 0;
		if (!slash || nlen == 0 || nlen >= sizeof(u->master) ||
		    memchr(slash + 1, '/', nlen)) {
			why = "sentinel URL needs /<master-name>";
			goto fail;
		}
		if (!redis_url_name_ok(slash + 1, nlen)) {
			why = "bad sentinel master name";
			goto fail;
		}
		memcpy(u->master, slash + 1, nlen);
		u->master[nlen] = '\0';
	} else if (slash && slash + 1 < end) {
		if (u->mode == REDIS_URL_CLUSTER) {
			why = "a cluster has only db 0";
			goto fail;
		}
		uint64_t db;

		if (decimal_parse(slash + 1, (size_t)(end - slash - 1), 65535, &db) != 0) {
			why = "db must be a number 0..65535";
			goto fail;
		}
		u->db = (int)db;
	}
	if (slash)
		end = slash;
	why = url_parse_host_list(p, (size_t)(end - p), def_port, u);
	if (why)
		goto fail;
	if (u->mode == REDIS_URL_TCP && u->nhosts != 1) {
		why = u->tls ? "one host only (use cluster+tls:// or sentinel+tls:// for several)"
		             : "one host only (use cluster:// or sentinel:// for several)";
		goto fail;
	}
	url_format_addr(u);
	return 0;

fail:
	redis_url_wipe(u);
	snprintf(err, errlen, "%s", why);
	return -1;
}

/*
 * Read the secret in file <path> into <dst>/<cap>: the first line, its
 * newline dropped. <var> names the variable in messages. Returns 0 or -1.
 */
static int url_read_secret_file(const char *var, const char *path, char *dst, size_t cap,
                                char *err, size_t errlen)
{
	char buf[REDIS_URL_SECRET_MAX + 2];
	size_t n = 0;
	ssize_t r;
	int fd, rc = -1;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd == -1) {
		snprintf(err, errlen, "%s: cannot open %s: %s", var, path, strerror(errno));
		return -1;
	}
	while (n < sizeof(buf) && (r = read(fd, buf + n, sizeof(buf) - n)) != 0) {
		if (r == -1) {
			if (errno == EINTR)
				continue;
			snprintf(err, errlen, "%s: cannot read %s: %s", var, path, strerror(errno));
			goto out;
		}
		n += (size_t)r;
	}
	/* first line only: a trailing newline (or CRLF) is not part of it */
	for (r = 0; (size_t)r < n; r++)
		if (buf[r] == '\n' || buf[r] == '\r')
			break;
	n = (size_t)r;
	if (n == 0 || n >= cap || memchr(buf, '\0', n)) {
		snprintf(err, errlen, "%s: %s must hold the password on its first line "
		         "(1..%zu bytes)", var, path, cap - 1);
		goto out;
	}
	memcpy(dst, buf, n);
	dst[n] = '\0';
	rc = 0;
out:
	explicit_bzero(buf, sizeof(buf));
	close(fd);
	return rc;
}

/*
 * One secret from variable <var> or, failing that, from the file named by
 * <var>_FILE, into <dst>/<cap> with <*has> set. Nothing set is no error.
 * Returns 0 or -1.
 */
int redis_url_secret_from_env(const char *var, char *dst, size_t cap, bool *has,
                              char *err, size_t errlen)
{
	char file_var[96];
	const char *v = getenv(var);

	if (v && *v) {
		if (strlen(v) >= cap) {
			snprintf(err, errlen, "%s: too long (at most %zu bytes)", var, cap - 1);
			return -1;
		}
		snprintf(dst, cap, "%s", v);
		*has = true;
		return 0;
	}
	snprintf(file_var, sizeof(file_var), "%s_FILE", var);
	v = getenv(file_var);
	if (v && *v) {
		if (url_read_secret_file(file_var, v, dst, cap, err, errlen) == -1)
			return -1;
		*has = true;
	}
	return 0;
}

/* Secrets the URL of <u> lacks, from the environment (see redis_url.h),
 * copied into <u>. Returns 0, or -1 with <err>. */
int redis_url_load_secrets(struct redis_url *u, char *err, size_t errlen)
{
	const char *user;

	if (!u->has_pass &&
	    redis_url_secret_from_env("RATELIMIT_SPOA_REDIS_PASSWORD", u->pass, sizeof(u->pass),
	                        &u->has_pass, err, errlen) == -1)
		return -1;
	user = getenv("RATELIMIT_SPOA_REDIS_USER");
	if (!u->user[0] && user && *user) {
		if (strlen(user) >= sizeof(u->user)) {
			snprintf(err, errlen, "RATELIMIT_SPOA_REDIS_USER: too long");
			return -1;
		}
		snprintf(u->user, sizeof(u->user), "%s", user);
	}
	if (u->user[0] && !u->has_pass) {
		snprintf(err, errlen, "an ACL user needs a password "
		         "(RATELIMIT_SPOA_REDIS_PASSWORD or _FILE)");
		return -1;
	}
	if (u->mode == REDIS_URL_SENTINEL &&
	    redis_url_secret_from_env("RATELIMIT_SPOA_SENTINEL_PASSWORD", u->sentinel_pass,
	                        sizeof(u->sentinel_pass), &u->has_sentinel_pass,
	                        err, errlen) == -1)
		return -1;
	return 0;
}

/* Do <a> and <b> name the same servers, mode and credentials? */
bool redis_url_same(const struct redis_url *a, const struct redis_url *b)
{
	unsigned i;

	if (a->mode != b->mode || a->tls != b->tls || a->nhosts != b->nhosts || a->db != b->db ||
	    a->has_pass != b->has_pass || a->has_sentinel_pass != b->has_sentinel_pass ||
	    strcmp(a->user, b->user) != 0 || strcmp(a->pass, b->pass) != 0 ||
	    strcmp(a->sentinel_pass, b->sentinel_pass) != 0 || strcmp(a->master, b->master) != 0)
		return false;
	for (i = 0; i < a->nhosts; i++)
		if (a->hosts[i].port != b->hosts[i].port ||
		    strcmp(a->hosts[i].host, b->hosts[i].host) != 0)
			return false;
	return true;
}

/* Overwrite <u>'s secrets (explicit_bzero: the compiler may not skip it). */
void redis_url_wipe(struct redis_url *u)
{
	explicit_bzero(u->user, sizeof(u->user));
	explicit_bzero(u->pass, sizeof(u->pass));
	explicit_bzero(u->sentinel_pass, sizeof(u->sentinel_pass));
	u->has_pass = false;
	u->has_sentinel_pass = false;
}
