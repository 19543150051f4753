/*
 * config - the agent's configuration file and command-line overrides.
 *
 * Parsing and validation: no sockets, no libev, no hiredis. Not pure: it
 * reads the config file, stat()s the redis-tls-* files, and reads a routes
 * map. Errors are written as "<file>:<line>: <reason>" into the caller's
 * buffer. Files: config.c (a parse, the defaults, copies), config_directives.c
 * (the table of directives: name, arguments, parser, default, --help line),
 * config_policy.c (policy, override, plan, live-max), config_lex.c (lines, words,
 * reading a file), config_check.c (shapes, config_validate),
 * config_routes.c.
 *
 * Syntax: one directive a line, '#' starts a comment. The directives, what
 * follows each, its default and its help are the table in
 * config_directives.c (--help prints it; the man page documents each, in
 * its order).
 * The redis-tls-* directives need a TLS URL (rediss://, cluster+tls://,
 * sentinel+tls://) and a build with TLS (make WITH_TLS=1): without it they
 * are an error. Files must exist and be readable when the config is read.
 * A UTF-8 byte order mark at the start of a file is skipped.
 * Durations: <n>ms|s|m|h. Windows: <n>ms|s|m|h with an implicit 1 ("1s" or "s").
 */
#ifndef SPOA_CONFIG_H
#define SPOA_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "log.h"
#include "redis_tls.h"
#include "window.h"

#define CONFIG_ERR_LEN        512
#define CONFIG_ADDR_MAX       256
#define CONFIG_URL_MAX        512
#define CONFIG_MAX_POLICIES   64
#define CONFIG_MAX_POOLS      64
#define CONFIG_MAX_PLANS      32      /* plan lines per policy */
#define CONFIG_THREADS_MAX    64u     /* worker threads */
#define CONFIG_REDIS_BATCH_MAX 256u   /* decisions per script call */
#define CONFIG_WARN_LEN       1024

/* 1 when built with TLS to Redis (make WITH_TLS=1). */
#ifndef SPOA_TLS
#define SPOA_TLS 0
#endif

/* redis-engine: how Redis decides (limiter.h's limiter_engine_mode, same
 * order). */
enum config_redis_engine {
	CONFIG_REDIS_ENGINE_AUTO = 0,   /* the module when Redis has it, else the script */
	CONFIG_REDIS_ENGINE_SCRIPT,
	CONFIG_REDIS_ENGINE_MODULE,
	CONFIG_REDIS_ENGINE_COUNT
};

struct config {
	char path[CONFIG_ADDR_MAX];            /* file it came from, "" if none */
	char listen[CONFIG_ADDR_MAX];
	char redis[CONFIG_URL_MAX];
	uint64_t redis_timeout_ms;
	unsigned redis_batch;                  /* decisions per script call, 1 = no batching */
	unsigned threads;
	enum config_log_level log_level;
	char metrics[CONFIG_ADDR_MAX];         /* "" = off */
	unsigned max_connections;
	unsigned max_inflight;                 /* decisions ("ratelimit" messages) */
	unsigned max_notify_messages;          /* per NOTIFY */
	uint64_t hello_timeout_ms;             /* HAPROXY-HELLO deadline */
	uint64_t frame_timeout_ms;             /* a partial frame's deadline */
	bool allow_remote_listen;
	bool deny_cache;                       /* local deny cache, default on */
	unsigned deny_cache_size;              /* its entries per worker, default 4096 */
	bool redis_allow_eviction;             /* decide on an evicting Redis, default no */
	enum config_redis_engine redis_engine; /* default auto */
	bool legacy_keys;                      /* count 1.0.0's one-window keys, default on */
	struct config_tls tls;                 /* redis-tls-*; used with a TLS URL */
	size_t npolicies;
	struct window_policy policies[CONFIG_MAX_POLICIES];
	size_t npools;                         /* pool: each policy copies its own */
	struct window_pool pools[CONFIG_MAX_POOLS];
	/* plan-default: the plan of a request that names none ("": none), and
	 * the line that set it (for the message when no policy has it) */
	char plan_default[WINDOW_NAME_MAX + 1];
	size_t plan_default_len;
	unsigned plan_default_line;
	unsigned pool_line[CONFIG_MAX_POOLS];  /* each pool's line, for a reload's refusal */
	unsigned policy_line[CONFIG_MAX_POLICIES]; /* each policy's line, likewise */
	/* What parses but cannot do what it says (a window that never decides):
	 * "<file>:<line>: warning: <reason>" lines, each ending in '\n', cut to
	 * fit; <nwarnings> counts them all. Never an error. */
	char warnings[CONFIG_WARN_LEN];
	unsigned nwarnings;
};

/* Fill <c> with the defaults (listen 127.0.0.1:12345, redis
 * redis://127.0.0.1:6379/0, redis-timeout 50ms, threads 1, ...: the
 * directives table's, parsed as if written in a file). */
void config_init(struct config *c);

/*
 * Parse <text> (<len> bytes, need not be NUL-terminated) named <name> in
 * messages, on top of what <c> already holds. Returns 0, or -1 with
 * "<name>:<line>: <reason>" in <err>. On -1 <c> may be half-filled: callers
 * parse into a scratch copy. Allocates override tables: free with
 * config_release().
 */
int config_parse(struct config *c, const char *name, const char *text, size_t len,
                 char *err, size_t errlen);

/* Read and parse the file at <path>. Same contract as config_parse(). */
int config_load_file(struct config *c, const char *path, char *err, size_t errlen);

/* Final checks once file and flags are merged (a policy exists, listen is
 * loopback or unix unless allowed, ...). Returns 0 or -1 with <err>. */
int config_validate(const struct config *c, char *err, size_t errlen);

/* Once the file and flags are merged: a pooled policy's account keys take
 * its pool's hash tag when the Redis URL is a Cluster (window_policy
 * pool_tag), so that one atomic call holds the account and its pool. */
void config_tag_pool_accounts(struct config *c);

/* A reload from <old> to <next> (read from <path>): refused when a pool of
 * both gets a longer window, or when a policy of both would keep its
 * accounts' units under other keys (it joins, leaves or changes its pool
 * on a Cluster). Returns 0, or -1 with "<path>:<line>: ..." in <err>. */
int config_check_pool_reload(const struct config *old, const struct config *next,
                             const char *path, char *err, size_t errlen);

/* Free what config_parse() allocated inside <c>; <c> itself is the caller's. */
void config_release(struct config *c);

/* Deep-copy <src> into <dst> (override tables included). Returns 0 or -1. */
int config_copy(struct config *dst, const struct config *src);

/*
 * Check an HAProxy routes map (haproxy/routes.map) against <c>: each line
 * "<METHOD>/<path prefix> <policy> [jwt|key|cert [<cost>]]" must name a
 * policy of <c>, and no line may sit behind an earlier prefix of its key
 * (map_beg takes the first match). '#' starts a comment. Returns the number
 * of routes, or -1 with "<name>:<line>: <reason>" in <err>. A line that
 * would decide methods no line names on a path that a later method's line
 * limits more strictly (the block's method fallback) is a warning, appended
 * to <c>'s. config_check_routes_file() reads <path> first.
 */
int config_check_routes(struct config *c, const char *name, const char *text,
                        size_t len, char *err, size_t errlen);
int config_check_routes_file(struct config *c, const char *path,
                             char *err, size_t errlen);

/*
 * Check the plans an HAProxy map names (an API key map's lines "<api key>
 * <account> plan=<plan>", a client certificate map's "<CN> plan=<plan>";
 * docs/integrate.md) against <c>: a plan no policy of <c> has, or a plan=
 * word where the edge does not read it, is a warning "<name>:<line>:
 * warning: ..." appended to <c>'s. Returns the number of plan= words, or
 * -1 with the error in <err> (an unreadable file, a line too long).
 * config_check_plans_map_file() reads <path> first.
 */
int config_check_plans_map(struct config *c, const char *name, const char *text,
                           size_t len, char *err, size_t errlen);
int config_check_plans_map_file(struct config *c, const char *path,
                                char *err, size_t errlen);

/* Does some policy of <c> have a plan named <name>/<len>? */
bool config_plan_known(const struct config *c, const char *name, size_t len);

/* Policy named <name>/<len>, or NULL. Borrowed from <c>. */
const struct window_policy *config_find_policy(const struct config *c,
                                               const char *name, size_t len);

/* Parse "<n><unit>" (ms, s, m, h). Returns 0 and <*ms>, or -1. */
int config_parse_duration(const char *s, size_t len, uint64_t *ms);

const char *config_log_level_str(enum config_log_level l);

/* Print --help's list of the directives to <f>, from the parser's own table:
 * each "  <name> <arguments>" with its help lines beside it. */
void config_print_directives(FILE *f);

#endif /* SPOA_CONFIG_H */
