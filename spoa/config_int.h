/*
 * config_int - what config.c (the parser) and config_check.c (the checks)
 * share, and nobody else includes.
 */
#ifndef SPOA_CONFIG_INT_H
#define SPOA_CONFIG_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config.h"

#define CONFIG_MAX_WORDS      16
#define CONFIG_LIMIT_MAX      1000000u
#define CONFIG_WINDOW_MAX_MS  (24u * 3600u * 1000u)
#define CONFIG_TIMEOUT_MAX_MS 60000u
#define CONFIG_CONN_MAX       1000000u
#define CONFIG_INFLIGHT_MAX   65536u
#define CONFIG_NOTIFY_MSGS_MAX 1024u
#define CONFIG_PEER_TIMEOUT_MIN_MS 10u
#define CONFIG_PEER_TIMEOUT_MAX_MS (3600u * 1000u)
#define CONFIG_FILE_MAX       (16u << 20)

/* A slice of the text being parsed. */
struct word {
	const char *p;
	size_t len;
};

/* Scalar directives: each may appear once per parsed text. */
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
	CONFIG_DIR_COUNT
};

struct parse_ctx {
	struct config *c;
	const char *name;
	unsigned line;
	char *err;
	size_t errlen;
	unsigned seen[CONFIG_DIR_COUNT];          /* line of first use, 0 = not yet */
	/* Overrides added by this parse, per policy: where they start, the
	 * array's capacity, and the line of each (for duplicate messages). */
	size_t ov_first[CONFIG_MAX_POLICIES];
	size_t ov_cap[CONFIG_MAX_POLICIES];
	unsigned *ov_line[CONFIG_MAX_POLICIES];
};

/* The URL shapes a bad `redis` setting is told about. */
extern const char config_redis_shapes[];
/* What a TLS setting on a build without TLS is told. */
extern const char config_no_tls[];

/* Is <w> exactly the C string <s>? */
static inline int config_word_is(struct word w, const char *s)
{
	size_t n = strlen(s);

	return w.p && w.len == n && memcmp(w.p, s, n) == 0;
}

/* Printable length of <w> for messages: long words are cut at 64 bytes. */
static inline int config_word_plen(struct word w)
{
	return w.len > 64 ? 64 : (int)w.len;
}

/* config.c: the line reader and the error format both files use. */
__attribute__((format(printf, 2, 3)))
int config_parse_fail(struct parse_ctx *x, const char *fmt, ...);
int config_next_line(struct parse_ctx *x, const char **p, const char *end,
                     struct word *w, const char **line, size_t *line_len);
int config_read_file(const char *path, char **buf, size_t *len, char *err, size_t errlen);

/* config_check.c: shape checks the parser runs on single directives. */
const char *config_check_listen_addr(const char *s, size_t len);
int config_check_policy_name(struct word w);
int config_check_redis_url(const char *s, size_t len, bool *tls, char *why, size_t cap);

#endif /* SPOA_CONFIG_INT_H */
