/*
 * redis_url - where Redis is, and how to log in: the `redis` setting parsed.
 *
 *   redis://[user[:password]@]host[:port][/db]     one server (port 6379)
 *   unix:///absolute/path                          one server, unix socket
 *   cluster://host:port[,host:port...]             Redis Cluster seeds
 *   sentinel://host:port[,host:port...]/<master>   Sentinel-managed primary
 *
 * Over TLS (a build with TLS: make WITH_TLS=1): the same shapes spelt
 *   rediss://...         cluster+tls://...        sentinel+tls://...
 * (for Sentinel both the sentinels and the primary speak TLS; for a
 * Cluster every node). The certificates come from the redis-tls-*
 * directives (config.h), not from the URL.
 *
 * User and password may be %-escaped. So that no secret has to sit in a
 * config file or in argv (ps), the password may also come from the
 * environment, read by redis_url_load_secrets():
 *   RATELIMIT_SPOA_REDIS_USER             ACL user (when the URL has none)
 *   RATELIMIT_SPOA_REDIS_PASSWORD         the password itself
 *   RATELIMIT_SPOA_REDIS_PASSWORD_FILE    a file holding it (one line)
 *   RATELIMIT_SPOA_SENTINEL_PASSWORD      the sentinels' own password
 *   RATELIMIT_SPOA_SENTINEL_PASSWORD_FILE
 * A password in the URL wins over the environment, the variable over the
 * file. Error texts and <addr> never contain a password.
 */
#ifndef SPOA_REDIS_URL_H
#define SPOA_REDIS_URL_H

#include <stdbool.h>
#include <stddef.h>

#define REDIS_URL_HOST_MAX    256     /* host, or unix socket path, with NUL */
#define REDIS_URL_HOSTS_MAX   16      /* seeds of a cluster or sentinel URL */
#define REDIS_URL_SECRET_MAX  256     /* user or password, with NUL */
#define REDIS_URL_NAME_MAX    64      /* sentinel master name, with NUL */
#define REDIS_URL_ADDR_MAX    512     /* display form, with NUL */
#define REDIS_URL_DEFAULT_PORT 6379

enum redis_url_mode {
	REDIS_URL_TCP = 0,          /* redis:// */
	REDIS_URL_UNIX,             /* unix:// */
	REDIS_URL_CLUSTER,          /* cluster:// */
	REDIS_URL_SENTINEL,         /* sentinel:// */
	REDIS_URL_MODE_COUNT
};

struct redis_url_host {
	char host[REDIS_URL_HOST_MAX];  /* no brackets around IPv6 */
	int port;                       /* 0 for a unix socket */
};

struct redis_url {
	enum redis_url_mode mode;
	bool tls;                       /* rediss://, cluster+tls://, sentinel+tls:// */
	unsigned nhosts;                /* 1 for TCP and unix */
	struct redis_url_host hosts[REDIS_URL_HOSTS_MAX];
	char user[REDIS_URL_SECRET_MAX];            /* "" = no ACL user */
	char pass[REDIS_URL_SECRET_MAX];
	bool has_pass;
	char sentinel_pass[REDIS_URL_SECRET_MAX];   /* for the sentinels */
	bool has_sentinel_pass;
	int db;                         /* -1 = no SELECT */
	char master[REDIS_URL_NAME_MAX];            /* sentinel master name */
	char addr[REDIS_URL_ADDR_MAX];  /* for logs: scheme, hosts, db; no secret
	                                 * ("tls:" first over TLS) */
};

const char *redis_url_mode_str(enum redis_url_mode m);

/* Parse <s> into <u> (secrets from the URL only). Returns 0, or -1 with a
 * reason in <err> that never repeats the URL. */
int redis_url_parse(const char *s, struct redis_url *u, char *err, size_t errlen);

/* Fill what the URL left out from the environment (see above). Reads the
 * password files now, so a SIGHUP picks up a rotated password. Returns 0,
 * or -1 with <err> (naming the variable or file, never the secret). */
int redis_url_load_secrets(struct redis_url *u, char *err, size_t errlen);

/* One secret from variable <var> or, failing that, from the file named by
 * <var>_FILE (first line), into <dst>/<cap> with <*has> set. Nothing set is
 * no error. Returns 0, or -1 with <err> (never the secret). */
int redis_url_secret_from_env(const char *var, char *dst, size_t cap, bool *has,
                              char *err, size_t errlen);

/* Same target, mode and credentials? (a change means reconnecting) */
bool redis_url_same(const struct redis_url *a, const struct redis_url *b);

/* Is <s>/<len> a host name (or IPv4 literal) or master name we accept:
 * 1..253 bytes of letters, digits, '.', '-', '_'? */
bool redis_url_name_ok(const char *s, size_t len);

/* Format <host>:<port> into <dst>/<cap>, IPv6 in brackets. */
void redis_url_format_host(const char *host, int port, char *dst, size_t cap);

/* Overwrite the secrets in <u> (before it goes out of scope). */
void redis_url_wipe(struct redis_url *u);

#endif /* SPOA_REDIS_URL_H */
