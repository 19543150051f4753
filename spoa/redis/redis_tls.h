/*
 * redis_tls - TLS to Redis (hiredis >= 1.1 with hiredis_ssl, make WITH_TLS=1).
 *
 * One OpenSSL context per limiter generation (the redis-tls-* directives:
 * CA, client certificate and key, verification on or off), and per
 * connection an SSL object that checks the server's certificate against the
 * name the link connects to (or redis-tls-server-name), handed to hiredis
 * right after redisAsyncConnect*(): the handshake then runs as part of the
 * link's non-blocking connect.
 *
 * The key may be encrypted: its passphrase comes from the environment like
 * the Redis password (never argv, never logged):
 *   RATELIMIT_SPOA_REDIS_TLS_KEY_PASSWORD, or _FILE naming a file holding it.
 *
 * In a build without TLS the functions exist and fail ("this build has no
 * TLS"); config refuses TLS settings there before anything gets this far.
 */
#ifndef SPOA_REDIS_TLS_H
#define SPOA_REDIS_TLS_H

#include <stdbool.h>
#include <stddef.h>

/* The longest redis-tls-* path or name the config takes. */
#define REDIS_TLS_PATH_MAX 256

/* The redis-tls-* directives ("" = not given): the config parses them
 * into its struct config, this folder reads them. */
struct config_tls {
	char ca[REDIS_TLS_PATH_MAX];
	char ca_dir[REDIS_TLS_PATH_MAX];
	char cert[REDIS_TLS_PATH_MAX];
	char key[REDIS_TLS_PATH_MAX];
	char server_name[REDIS_TLS_PATH_MAX];
	bool verify;                           /* default on */
	bool any;                              /* some redis-tls-* was given */
};

struct redisAsyncContext;
struct redisContext;
struct redis_tls;

/* The context for <c> (files read now). Returns it (the caller owns it:
 * redis_tls_free()), or NULL with <err>. */
struct redis_tls *redis_tls_new(const struct config_tls *c, char *err, size_t errlen);

/* Start TLS on <ac> (just created by redisAsyncConnect*, not yet connected),
 * verifying the certificate against <host> (a name or an IP literal) unless
 * redis-tls-server-name names another. Returns 0, or -1 with <err> (the
 * caller frees <ac>). */
int redis_tls_start(struct redis_tls *t, struct redisAsyncContext *ac, const char *host,
                    char *err, size_t errlen);

/* The same on a synchronous context (ratelimit-spoa ctl and the agent's
 * live-control thread). */
int redis_tls_start_sync(struct redis_tls *t, struct redisContext *c, const char *host,
                         char *err, size_t errlen);

/* redis-tls-verify off: the caller warns at every connect. */
bool redis_tls_verify_off(const struct redis_tls *t);

/* Why the certificate check of the last handshake started on this thread's
 * <t> failed, or "" (borrowed from <t>). */
const char *redis_tls_last_error(const struct redis_tls *t);

void redis_tls_free(struct redis_tls *t);

#endif /* SPOA_REDIS_TLS_H */
