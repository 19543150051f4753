/*
 * config_int - what the config files share (config.c the parser,
 * config_check.c the shape and whole-config checks, config_routes.c the
 * routes map), and nobody else includes. The calls run one way:
 * config_routes -> config -> config_check, and each of them -> config_lex.
 */
#ifndef SPOA_CONFIG_INT_H
#define SPOA_CONFIG_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "config_lex.h"

#define CONFIG_LIMIT_MAX      1000000u
#define CONFIG_WINDOW_MAX_MS  (24u * 3600u * 1000u)
#define CONFIG_TIMEOUT_MAX_MS 60000u
#define CONFIG_CONN_MAX       1000000u
#define CONFIG_INFLIGHT_MAX   65536u
#define CONFIG_NOTIFY_MSGS_MAX 1024u
#define CONFIG_DENY_CACHE_SIZE_MAX 1048576u   /* entries per worker */
#define CONFIG_PEER_TIMEOUT_MIN_MS 10u
#define CONFIG_PEER_TIMEOUT_MAX_MS (3600u * 1000u)

/* What a TLS setting on a build without TLS is told. */
extern const char config_no_tls[];

/* config_check.c: shape checks the parser runs on single directives. */
const char *config_check_listen_addr(const char *s, size_t len);
int config_check_policy_name(struct word w);
int config_check_redis_url(const char *s, size_t len, bool *tls, char *why, size_t cap);
int config_check_identity_kind(struct word w);
int config_check_key_kind(const char *p, size_t len);

#endif /* SPOA_CONFIG_INT_H */
