/*
 * config_int - what the config files share (config.c the public face: a
 * parse, the defaults, --help's directive list; config_directives.c the
 * table of directives and the one-value ones' parsers; config_policy.c
 * policy, override and live-max; config_check.c the shape and whole-config
 * checks; config_routes.c the routes map), and nobody else includes. The
 * calls run one way: config_routes -> config -> config_directives ->
 * config_policy -> config_check, and each of them -> config_lex.
 */
#ifndef SPOA_CONFIG_INT_H
#define SPOA_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "config_lex.h"

#define CONFIG_LIMIT_MAX      1000000u
#define CONFIG_WINDOW_MAX_MS  (24u * 3600u * 1000u)
/* inflight=<n> and lease=<duration> (a policy's in-flight leases) */
#define CONFIG_LEASES_MAX         1000000u
#define CONFIG_LEASE_MIN_MS       1000u
#define CONFIG_LEASE_MAX_MS       CONFIG_WINDOW_MAX_MS
#define CONFIG_LEASE_DEFAULT_MS   60000u
#define CONFIG_TIMEOUT_MAX_MS 60000u
#define CONFIG_CONN_MAX       1000000u
#define CONFIG_INFLIGHT_MAX   65536u
#define CONFIG_NOTIFY_MSGS_MAX 1024u
#define CONFIG_DENY_CACHE_SIZE_MAX 1048576u   /* entries per worker */
#define CONFIG_PEER_TIMEOUT_MIN_MS 10u
#define CONFIG_PEER_TIMEOUT_MAX_MS (3600u * 1000u)

#define CONFIG_DIRECTIVES_MAX  64u   /* rows of config_directives[] */

/* What a TLS setting on a build without TLS is told. */
extern const char config_no_tls[];

/* One parse of one text into a config (config_parse). */
struct parse_ctx {
	struct config_lex lex;                    /* name, line, error */
	struct config *c;
	/* line of the first use of each once-only directive (by its row in
	 * config_directives[]), 0 = not yet */
	unsigned seen[CONFIG_DIRECTIVES_MAX];
	/* Overrides added by this parse, per policy: where they start, the
	 * array's capacity, and the line of each (for duplicate messages). */
	size_t ov_first[CONFIG_MAX_POLICIES];
	size_t ov_cap[CONFIG_MAX_POLICIES];
	unsigned *ov_line[CONFIG_MAX_POLICIES];
};

/* What follows a directive's name on its line. */
enum config_arg_shape {
	CONFIG_ARG_NONE = 0,           /* nothing: a switch that is on once written; once */
	CONFIG_ARG_ONE,                /* exactly one value; once */
	CONFIG_ARG_LINE,               /* words of its own, checked by its parser; repeatable */
	CONFIG_ARG_COUNT
};

/*
 * One directive: all that the parser, config_init() and --help know of it.
 * A new directive is a row of config_directives[] (config_directives.c),
 * an entry in the man page's CONFIGURATION section in the same order, and a
 * row of docs/configuration.md's table (tests/integration/t_ops_install.py
 * and tests/e2e/t_config.sh hold the docs to the table).
 */
struct config_directive {
	const char *name;
	enum config_arg_shape shape;
	bool tls_only;                 /* redis-tls-*: refused by a build without TLS */
	/* The line's words <w>/<n> (w[0] the name, <n> already held to
	 * <shape>) into x->c. Returns 0, or -1 with the error set. */
	int (*parse)(struct parse_ctx *x, const struct word *w, size_t n);
	const char *def;               /* the value config_init() parses; NULL: none */
	const char *args;              /* --help: what follows the name, "" for nothing */
	const char *help;              /* --help: what it does, lines split by '\n' */
};

/* config_directives.c: the table, in --help's and the man page's order. */
extern const struct config_directive config_directives[];
extern const size_t config_ndirectives;
extern const char *const config_log_level_names[CONFIG_LOG_COUNT];
int config_directive_run(struct parse_ctx *x, const struct word *w, size_t n);
void config_directives_defaults(struct config *c);

/* config_policy.c: the repeatable directives, and the overrides of policy
 * <pi> sorted and checked for duplicates once a parse is over. */
int config_dir_policy(struct parse_ctx *x, const struct word *w, size_t n);
int config_dir_override(struct parse_ctx *x, const struct word *w, size_t n);
int config_dir_plan(struct parse_ctx *x, const struct word *w, size_t n);
int config_dir_live_max(struct parse_ctx *x, const struct word *w, size_t n);
int config_dir_pool(struct parse_ctx *x, const struct word *w, size_t n);
int config_overrides_finish(struct parse_ctx *x, size_t pi);

/* config_check.c: shape checks the parser runs on single directives. */
const char *config_check_listen_addr(const char *s, size_t len);
int config_check_policy_name(struct word w);
int config_check_redis_url(const char *s, size_t len, bool *tls, char *why, size_t cap);
int config_check_identity_kind(struct word w);
int config_check_key_kind(const char *p, size_t len);
int config_check_duration(const char *s, size_t len, uint64_t *ms);
int config_check_window(const char *s, size_t len, uint64_t *ms);

/* Copy <w> into <dst>/<cap> as a C string; -1 if it does not fit. */
static inline int config_word_copy(char *dst, size_t cap, struct word w)
{
	if (w.len >= cap)
		return -1;
	memcpy(dst, w.p, w.len);
	dst[w.len] = '\0';
	return 0;
}

/* The policy of <c> named <name>/<len>, or NULL; borrowed from <c>. Inline
 * so that the parsers below config.c share config_find_policy()'s lookup. */
static inline struct window_policy *config_policy_named(const struct config *c,
                                                        const char *name, size_t len)
{
	size_t i;

	for (i = 0; i < c->npolicies; i++) {
		if (c->policies[i].name_len == len && memcmp(c->policies[i].name, name, len) == 0)
			return (struct window_policy *)&c->policies[i];
	}
	return NULL;
}

#endif /* SPOA_CONFIG_INT_H */
