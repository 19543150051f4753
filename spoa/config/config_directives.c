/*
 * config_directives - the table of the configuration's directives (name,
 * what follows it, its parser, its default, its --help lines), the parsers
 * of the one-value directives, and the dispatch of a line through the
 * table. config.c runs a parse and config_init() through it and prints
 * --help's directive list from it; policy, override and live-max are parsed
 * in config_policy.c. Error messages never repeat the redis URL: it may
 * hold a password.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "config_int.h"
#include "config_lex.h"
#include "decimal.h"
#include "redis_url.h"

const char *const config_log_level_names[CONFIG_LOG_COUNT] = {
	[CONFIG_LOG_ERROR] = "error",
	[CONFIG_LOG_WARN]  = "warn",
	[CONFIG_LOG_INFO]  = "info",
	[CONFIG_LOG_DEBUG] = "debug",
};

static const char *const redis_engine_names[CONFIG_REDIS_ENGINE_COUNT] = {
	[CONFIG_REDIS_ENGINE_AUTO] = "auto",
	[CONFIG_REDIS_ENGINE_SCRIPT] = "script",
	[CONFIG_REDIS_ENGINE_MODULE] = "module",
};

/* ------------------------------------------------------------------------ */
/* The one-value directives: w[0] the name, w[1] the value                   */
/* ------------------------------------------------------------------------ */

/* Directive <key> whose value <v> must be <on> (true) or <off> (false),
 * into <*out>. Returns 0 or -1 with the error set. */
static int parse_switch(struct parse_ctx *x, struct word key, struct word v, const char *on,
                        const char *off, bool *out)
{
	if (config_word_is(v, on) || config_word_is(v, off)) {
		*out = config_word_is(v, on);
		return 0;
	}
	return config_parse_fail(&x->lex, "%.*s must be %s or %s; got '%.*s'", config_word_plen(key), key.p, on, off,
	                  config_word_plen(v), v.p);
}

/* An integer 1..<max> in <v> into <*u>. Returns 0 or -1 (no error set:
 * each directive words its own). */
static int parse_count(struct word v, unsigned max, uint64_t *u)
{
	return decimal_parse(v.p, v.len, max, u) != 0 || *u < 1 ? -1 : 0;
}

static int dir_listen(struct parse_ctx *x, const struct word *w, size_t n)
{
	const char *why = config_check_listen_addr(w[1].p, w[1].len);

	(void)n;
	if (why)
		return config_parse_fail(&x->lex, "listen '%.*s': %s (expected host:port, [ipv6]:port or unix:/path)",
		                  config_word_plen(w[1]), w[1].p, why);
	if (config_word_copy(x->c->listen, sizeof(x->c->listen), w[1]) == -1)
		return config_parse_fail(&x->lex, "listen: address too long");
	return 0;
}

static int dir_metrics(struct parse_ctx *x, const struct word *w, size_t n)
{
	const char *why;

	(void)n;
	if (config_word_is(w[1], "off")) {
		x->c->metrics[0] = '\0';
		return 0;
	}
	why = config_check_listen_addr(w[1].p, w[1].len);
	if (why)
		return config_parse_fail(&x->lex, "metrics '%.*s': %s (expected host:port, [ipv6]:port, unix:/path or off)",
		                  config_word_plen(w[1]), w[1].p, why);
	if (config_word_copy(x->c->metrics, sizeof(x->c->metrics), w[1]) == -1)
		return config_parse_fail(&x->lex, "metrics: address too long");
	return 0;
}

static int dir_redis(struct parse_ctx *x, const struct word *w, size_t n)
{
	char why[CONFIG_ERR_LEN];
	bool tls;

	(void)n;
	if (config_check_redis_url(w[1].p, w[1].len, &tls, why, sizeof(why)) == -1)
		return config_parse_fail(&x->lex, "%s", why);
	if (config_word_copy(x->c->redis, sizeof(x->c->redis), w[1]) == -1)
		return config_parse_fail(&x->lex, "redis: URL too long (at most %d bytes)", CONFIG_URL_MAX - 1);
	return 0;
}

static int dir_redis_timeout(struct parse_ctx *x, const struct word *w, size_t n)
{
	uint64_t u;

	(void)n;
	if (config_check_duration(w[1].p, w[1].len, &u) == -1 || u < 1 || u > CONFIG_TIMEOUT_MAX_MS)
		return config_parse_fail(&x->lex, "redis-timeout must be a duration 1ms..60s, e.g. 50ms; got '%.*s'",
		                  config_word_plen(w[1]), w[1].p);
	x->c->redis_timeout_ms = u;
	return 0;
}

static int dir_redis_batch(struct parse_ctx *x, const struct word *w, size_t n)
{
	uint64_t u;

	(void)n;
	if (parse_count(w[1], CONFIG_REDIS_BATCH_MAX, &u) == -1)
		return config_parse_fail(&x->lex, "redis-batch must be an integer 1..%u (1: one script call per decision); got '%.*s'",
		                  CONFIG_REDIS_BATCH_MAX, config_word_plen(w[1]), w[1].p);
	x->c->redis_batch = (unsigned)u;
	return 0;
}

static int dir_threads(struct parse_ctx *x, const struct word *w, size_t n)
{
	uint64_t u;

	(void)n;
	if (parse_count(w[1], CONFIG_THREADS_MAX, &u) == -1)
		return config_parse_fail(&x->lex, "threads must be an integer 1..%u", CONFIG_THREADS_MAX);
	x->c->threads = (unsigned)u;
	return 0;
}

/* plan-default <name>: checked against the plans once the parse is over
 * (config_parse), as the plan lines may follow it. */
static int dir_plan_default(struct parse_ctx *x, const struct word *w, size_t n)
{
	(void)n;
	if (config_check_policy_name(w[1]) == -1)
		return config_parse_fail(&x->lex, "plan-default: plan name '%.*s' must be 1..%d "
		                         "characters of A-Z a-z 0-9 _ . -", config_word_plen(w[1]),
		                         w[1].p, WINDOW_NAME_MAX);
	memcpy(x->c->plan_default, w[1].p, w[1].len);
	x->c->plan_default[w[1].len] = '\0';
	x->c->plan_default_len = w[1].len;
	x->c->plan_default_line = x->lex.line;
	return 0;
}

static int dir_log_level(struct parse_ctx *x, const struct word *w, size_t n)
{
	size_t i;

	(void)n;
	for (i = 0; i < CONFIG_LOG_COUNT; i++) {
		if (config_word_is(w[1], config_log_level_names[i])) {
			x->c->log_level = (enum config_log_level)i;
			return 0;
		}
	}
	return config_parse_fail(&x->lex, "log-level must be error, warn, info or debug; got '%.*s'",
	                  config_word_plen(w[1]), w[1].p);
}

static int dir_max_connections(struct parse_ctx *x, const struct word *w, size_t n)
{
	uint64_t u;

	(void)n;
	if (parse_count(w[1], CONFIG_CONN_MAX, &u) == -1)
		return config_parse_fail(&x->lex, "max-connections must be an integer 1..%u", CONFIG_CONN_MAX);
	x->c->max_connections = (unsigned)u;
	return 0;
}

static int dir_max_inflight(struct parse_ctx *x, const struct word *w, size_t n)
{
	uint64_t u;

	(void)n;
	if (parse_count(w[1], CONFIG_INFLIGHT_MAX, &u) == -1)
		return config_parse_fail(&x->lex, "max-inflight must be an integer 1..%u", CONFIG_INFLIGHT_MAX);
	x->c->max_inflight = (unsigned)u;
	return 0;
}

static int dir_max_notify_messages(struct parse_ctx *x, const struct word *w, size_t n)
{
	uint64_t u;

	(void)n;
	if (parse_count(w[1], CONFIG_NOTIFY_MSGS_MAX, &u) == -1)
		return config_parse_fail(&x->lex, "max-notify-messages must be an integer 1..%u",
		                         CONFIG_NOTIFY_MSGS_MAX);
	x->c->max_notify_messages = (unsigned)u;
	return 0;
}

/* hello-timeout or frame-timeout (named by w[0]) into <*ms>. */
static int parse_peer_timeout(struct parse_ctx *x, const struct word *w, uint64_t *ms)
{
	uint64_t u;

	/* a floor keeps a typo ("1ms") from cutting every peer off */
	if (config_check_duration(w[1].p, w[1].len, &u) == -1 || u < CONFIG_PEER_TIMEOUT_MIN_MS ||
	    u > CONFIG_PEER_TIMEOUT_MAX_MS)
		return config_parse_fail(&x->lex, "%.*s must be a duration 10ms..1h, e.g. 10s; got '%.*s'",
		                  config_word_plen(w[0]), w[0].p, config_word_plen(w[1]), w[1].p);
	*ms = u;
	return 0;
}

static int dir_hello_timeout(struct parse_ctx *x, const struct word *w, size_t n)
{
	(void)n;
	return parse_peer_timeout(x, w, &x->c->hello_timeout_ms);
}

static int dir_frame_timeout(struct parse_ctx *x, const struct word *w, size_t n)
{
	(void)n;
	return parse_peer_timeout(x, w, &x->c->frame_timeout_ms);
}

static int dir_deny_cache(struct parse_ctx *x, const struct word *w, size_t n)
{
	(void)n;
	return parse_switch(x, w[0], w[1], "on", "off", &x->c->deny_cache);
}

static int dir_deny_cache_size(struct parse_ctx *x, const struct word *w, size_t n)
{
	uint64_t u;

	(void)n;
	if (parse_count(w[1], CONFIG_DENY_CACHE_SIZE_MAX, &u) == -1)
		return config_parse_fail(&x->lex, "deny-cache-size must be an integer 1..%u",
		                         CONFIG_DENY_CACHE_SIZE_MAX);
	x->c->deny_cache_size = (unsigned)u;
	return 0;
}

static int dir_redis_allow_eviction(struct parse_ctx *x, const struct word *w, size_t n)
{
	(void)n;
	return parse_switch(x, w[0], w[1], "yes", "no", &x->c->redis_allow_eviction);
}

static int dir_legacy_keys(struct parse_ctx *x, const struct word *w, size_t n)
{
	(void)n;
	return parse_switch(x, w[0], w[1], "on", "off", &x->c->legacy_keys);
}

static int dir_redis_engine(struct parse_ctx *x, const struct word *w, size_t n)
{
	size_t i;

	(void)n;
	for (i = 0; i < CONFIG_REDIS_ENGINE_COUNT; i++) {
		if (config_word_is(w[1], redis_engine_names[i])) {
			x->c->redis_engine = (enum config_redis_engine)i;
			return 0;
		}
	}
	return config_parse_fail(&x->lex, "redis-engine must be auto, script or module; got '%.*s'",
	                         config_word_plen(w[1]), w[1].p);
}

/* A redis-tls-* file or directory (w[1]) into <dst>/<cap>: it must exist
 * and be readable now (a typo fails at -c, not at the first connect). */
static int parse_tls_path(struct parse_ctx *x, const struct word *w, bool dir, char *dst, size_t cap)
{
	const char *why = NULL;
	struct stat st;

	if (config_word_copy(dst, cap, w[1]) == -1)
		why = "path too long";
	else if (stat(dst, &st) == -1)
		why = "no such file";
	else if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
		why = dir ? "not a directory" : "not a regular file";
	else if (access(dst, dir ? (R_OK | X_OK) : R_OK) == -1)
		why = "not readable by this user";
	if (why)
		return config_parse_fail(&x->lex, "%.*s '%.*s': %s", config_word_plen(w[0]), w[0].p,
		                         config_word_plen(w[1]), w[1].p, why);
	return 0;
}

static int dir_tls_ca(struct parse_ctx *x, const struct word *w, size_t n)
{
	(void)n;
	return parse_tls_path(x, w, false, x->c->tls.ca, sizeof(x->c->tls.ca));
}

static int dir_tls_ca_dir(struct parse_ctx *x, const struct word *w, size_t n)
{
	(void)n;
	return parse_tls_path(x, w, true, x->c->tls.ca_dir, sizeof(x->c->tls.ca_dir));
}

static int dir_tls_cert(struct parse_ctx *x, const struct word *w, size_t n)
{
	(void)n;
	return parse_tls_path(x, w, false, x->c->tls.cert, sizeof(x->c->tls.cert));
}

static int dir_tls_key(struct parse_ctx *x, const struct word *w, size_t n)
{
	(void)n;
	return parse_tls_path(x, w, false, x->c->tls.key, sizeof(x->c->tls.key));
}

static int dir_tls_server_name(struct parse_ctx *x, const struct word *w, size_t n)
{
	(void)n;
	if (!redis_url_name_ok(w[1].p, w[1].len))
		return config_parse_fail(&x->lex, "redis-tls-server-name must be a host name; got '%.*s'",
		                         config_word_plen(w[1]), w[1].p);
	if (config_word_copy(x->c->tls.server_name, sizeof(x->c->tls.server_name), w[1]) == -1)
		return config_parse_fail(&x->lex, "redis-tls-server-name: too long");
	return 0;
}

static int dir_tls_verify(struct parse_ctx *x, const struct word *w, size_t n)
{
	(void)n;
	return parse_switch(x, w[0], w[1], "on", "off", &x->c->tls.verify);
}

static int dir_allow_remote_listen(struct parse_ctx *x, const struct word *w, size_t n)
{
	(void)w;
	(void)n;
	x->c->allow_remote_listen = true;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* The table                                                                  */
/* ------------------------------------------------------------------------ */

/* In the order --help prints them and the man page documents them. A
 * default is written as in a file; "help" names it ("default <def>"). */
const struct config_directive config_directives[] = {
	{ "listen", CONFIG_ARG_ONE, false, dir_listen, "127.0.0.1:12345", "ADDR",
	  "default 127.0.0.1:12345 (loopback or unix only\n"
	  "unless 'allow-remote-listen')" },
	{ "redis", CONFIG_ARG_ONE, false, dir_redis, "redis://127.0.0.1:6379/0", "URL",
	  "default redis://127.0.0.1:6379/0; also\n"
	  "redis://user:pass@host[:port][/db] (port 6379),\n"
	  "unix:///path, cluster://h:p[,h:p...],\n"
	  "sentinel://h:p[,h:p...]/name; over TLS (make\n"
	  "WITH_TLS=1): rediss://, cluster+tls://,\n"
	  "sentinel+tls://. Host names are resolved off\n"
	  "the event loop at every connection attempt" },
	{ "redis-timeout", CONFIG_ARG_ONE, false, dir_redis_timeout, "50ms", "DURATION",
	  "per-decision deadline, default 50ms (1ms..60s)" },
	{ "redis-batch", CONFIG_ARG_ONE, false, dir_redis_batch, "32", "N",
	  "decisions ready together go to Redis in one\n"
	  "script call, up to N (1..256, default 32; 1: one\n"
	  "call per decision; cluster:// always 1)" },
	{ "threads", CONFIG_ARG_ONE, false, dir_threads, "1", "N",
	  "worker threads, default 1 (1..64)" },
	{ "pool", CONFIG_ARG_LINE, false, config_dir_pool, NULL,
	  "NAME LIMIT/WINDOW [headroom=N]",
	  "one ceiling shared by the accounts of every\n"
	  "policy with pool=NAME (before them), exact across\n"
	  "agents; an account holding its share or more\n"
	  "(LIMIT / (accounts in the pool + 1)) may not take\n"
	  "the last headroom units (default LIMIT/10, >= 1)" },
	{ "policy", CONFIG_ARG_LINE, false, config_dir_policy, NULL,
	  "NAME LIMIT/WINDOW [LIMIT/WINDOW...] [on-redis-error=deny|allow] [shadow]\n"
	  "         [max-cost=N] [precision=DURATION] [algorithm=log|gcra] [burst=N] [pool=POOL]\n"
	  "         [inflight=N] [lease=DURATION] [settle=HEADER]",
	  "shadow: decide and count, but answer allow with\n"
	  "reason=shadow-deny where it would deny;\n"
	  "max-cost: a larger cost is bad-cost;\n"
	  "precision: windows longer than it are counted\n"
	  "in buckets of it (bounded memory, never over\n"
	  "the limit, may under-admit by one bucket);\n"
	  "algorithm=gcra: a token bucket, one LIMIT/WINDOW\n"
	  "(the rate, and a quota beside it) and burst=N\n"
	  "units (default LIMIT);\n"
	  "pool: also counted in POOL (a log policy);\n"
	  "LIMIT/hour|day|week|month [tz=+-hh:mm]\n"
	  "[anchor=1..28]: a calendar quota, reset at the\n"
	  "period's end (a week from Monday, a month from\n"
	  "its anchor day; tz: a fixed offset, default UTC);\n"
	  "inflight: at most N requests of an account\n"
	  "running at once, each holding a lease until\n"
	  "its response or lease=DURATION (default 60s,\n"
	  "1s..24h; longer than your longest request);\n"
	  "settle: the cost is reserved at the request and\n"
	  "the response's HEADER (its real cost) charges\n"
	  "or refunds the difference (not with pool= or\n"
	  "precision=)" },
	{ "override", CONFIG_ARG_LINE, false, config_dir_override, NULL,
	  "POLICY KEY LIMIT/WINDOW [LIMIT/WINDOW...] [burst=N]",
	  "limits of one account (e.g. a partner) in POLICY" },
	{ "plan", CONFIG_ARG_LINE, false, config_dir_plan, NULL,
	  "NAME POLICY LIMIT/WINDOW [LIMIT/WINDOW...] [burst=N]",
	  "limits of every account on plan NAME in POLICY\n"
	  "(HAProxy's SPOE arg plan names it), with the\n"
	  "policy's window lengths; an account's override\n"
	  "wins over its plan" },
	{ "plan-default", CONFIG_ARG_ONE, false, dir_plan_default, NULL, "NAME",
	  "the plan of a request that names none (default:\n"
	  "none, the policy's own limits)" },
	{ "live-max", CONFIG_ARG_LINE, false, config_dir_live_max, NULL,
	  "POLICY LIMIT/WINDOW [LIMIT/WINDOW...]",
	  "the most a live override (ratelimit-spoa ctl)\n"
	  "may allow POLICY's accounts; without it a live\n"
	  "override may only lower their limits" },
	{ "log-level", CONFIG_ARG_ONE, false, dir_log_level, "info", "error|warn|info|debug",
	  "default info" },
	{ "metrics", CONFIG_ARG_ONE, false, dir_metrics, "off", "ADDR|off",
	  "Prometheus text on http://ADDR/metrics, e.g.\n"
	  "127.0.0.1:9102, and probes /healthz (serving)\n"
	  "and /readyz (Redis up, can decide); default off" },
	{ "max-connections", CONFIG_ARG_ONE, false, dir_max_connections, "10000", "N",
	  "default 10000" },
	{ "max-inflight", CONFIG_ARG_ONE, false, dir_max_inflight, "256", "N",
	  "decisions in flight per connection, default 256" },
	{ "max-notify-messages", CONFIG_ARG_ONE, false, dir_max_notify_messages, "16", "N",
	  "still read, default 16; a NOTIFY takes one\n"
	  "'ratelimit' message whatever N" },
	{ "hello-timeout", CONFIG_ARG_ONE, false, dir_hello_timeout, "10s", "DURATION",
	  "a new connection must send its HELLO, default 10s" },
	{ "frame-timeout", CONFIG_ARG_ONE, false, dir_frame_timeout, "10s", "DURATION",
	  "a started frame must arrive whole, default 10s" },
	{ "deny-cache", CONFIG_ARG_ONE, false, dir_deny_cache, "on", "on|off",
	  "answer an account known to be denied locally,\n"
	  "without Redis, until its retry_after; default on" },
	{ "deny-cache-size", CONFIG_ARG_ONE, false, dir_deny_cache_size, "4096", "N",
	  "its entries per worker thread (368 bytes each),\n"
	  "default 4096 (1.44 MiB, held only while one is live)" },
	{ "redis-allow-eviction", CONFIG_ARG_ONE, false, dir_redis_allow_eviction, "no", "yes|no",
	  "decide even when Redis's maxmemory-policy is not\n"
	  "noeviction (it may evict the windows); default no:\n"
	  "answer error, reason=redis-evicts-keys" },
	{ "redis-engine", CONFIG_ARG_ONE, false, dir_redis_engine, "auto", "auto|script|module",
	  "how Redis decides: the module's command\n"
	  "RATELIMIT.DECIDE, or the script; auto (default):\n"
	  "the module where Redis has it; module: a Redis\n"
	  "without it answers every decision with error" },
	{ "legacy-keys", CONFIG_ARG_ONE, false, dir_legacy_keys, "on", "on|off",
	  "on (default): for a window + 1h after the start,\n"
	  "a one-window decision also counts 1.0.0's key\n"
	  "(an upgrade from 1.0.0); off: a new install, or\n"
	  "every agent on 1.1.0 for an hour" },
	{ "redis-tls-ca", CONFIG_ARG_ONE, true, dir_tls_ca, NULL, "FILE",
	  "CA certificates for the Redis server (TLS builds;\n"
	  "default: the system's)" },
	{ "redis-tls-ca-dir", CONFIG_ARG_ONE, true, dir_tls_ca_dir, NULL, "DIR",
	  "the same, a hashed directory" },
	{ "redis-tls-cert", CONFIG_ARG_ONE, true, dir_tls_cert, NULL, "FILE",
	  "client certificate for mutual TLS, with..." },
	{ "redis-tls-key", CONFIG_ARG_ONE, true, dir_tls_key, NULL, "FILE",
	  "...its key (passphrase from the environment:\n"
	  "RATELIMIT_SPOA_REDIS_TLS_KEY_PASSWORD[_FILE])" },
	{ "redis-tls-server-name", CONFIG_ARG_ONE, true, dir_tls_server_name, NULL, "NAME",
	  "SNI and the name verified; default: the host" },
	{ "redis-tls-verify", CONFIG_ARG_ONE, true, dir_tls_verify, "on", "on|off",
	  "default on; off warns at every connect" },
	{ "allow-remote-listen", CONFIG_ARG_NONE, false, dir_allow_remote_listen, NULL, "",
	  "permit a non-loopback listen/metrics address" },
};

const size_t config_ndirectives = sizeof(config_directives) / sizeof(config_directives[0]);

_Static_assert(sizeof(config_directives) / sizeof(config_directives[0]) <= CONFIG_DIRECTIVES_MAX,
               "struct parse_ctx's seen[] has a slot per directive: raise CONFIG_DIRECTIVES_MAX");

/* One line's words <w>/<n> (n >= 1) through the table. Returns 0 or -1
 * with the error set. */
int config_directive_run(struct parse_ctx *x, const struct word *w, size_t n)
{
	const struct config_directive *d = NULL;
	size_t i;

	for (i = 0; i < config_ndirectives; i++) {
		if (config_word_is(w[0], config_directives[i].name)) {
			d = &config_directives[i];
			break;
		}
	}
	if (!d)
		return config_parse_fail(&x->lex, "unknown directive '%.*s'", config_word_plen(w[0]), w[0].p);
	if (d->shape == CONFIG_ARG_LINE)
		return d->parse(x, w, n);

	if (x->seen[i])
		return config_parse_fail(&x->lex, "duplicate directive '%s' (first at line %u)",
		                  d->name, x->seen[i]);
	x->seen[i] = x->lex.line;
	if (d->shape == CONFIG_ARG_NONE && n != 1)
		return config_parse_fail(&x->lex, "%s takes no argument", d->name);
	if (d->shape == CONFIG_ARG_ONE && n != 2)
		return config_parse_fail(&x->lex, "%s takes exactly one argument", d->name);
	if (d->tls_only) {
		if (!SPOA_TLS)
			return config_parse_fail(&x->lex, "%s: %s", d->name, config_no_tls);
		x->c->tls.any = true;
	}
	return d->parse(x, w, n);
}

/* The table's defaults into <c> (zeroed by the caller), each parsed as if
 * written in a file. A default that does not parse is a bug of the table
 * (tests/unit/test_directives.c parses every one): abort rather than run
 * with a value nobody wrote. */
void config_directives_defaults(struct config *c)
{
	struct parse_ctx x;
	char err[CONFIG_ERR_LEN];
	struct word w[2];
	size_t i;

	memset(&x, 0, sizeof(x));
	x.c = c;
	x.lex.name = "default";
	x.lex.err = err;
	x.lex.errlen = sizeof(err);
	for (i = 0; i < config_ndirectives; i++) {
		const struct config_directive *d = &config_directives[i];

		if (!d->def)
			continue;
		w[0] = (struct word){ d->name, strlen(d->name) };
		w[1] = (struct word){ d->def, strlen(d->def) };
		if (d->parse(&x, w, 2) == -1) {
			fprintf(stderr, "config: the default of %s does not parse: %s\n", d->name, err);
			abort();
		}
	}
}
