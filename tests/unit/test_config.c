/*
 * test_config - the configuration parser: every directive, every error
 * message, the shipped etc/ratelimit-spoa.conf, copy and release.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "decimal.h"
#include "redis_url.h"

#define SHAPES "redis://[user:password@]host[:port][/db], unix:///path, " \
	"cluster://host[:port][,host[:port]...] or sentinel://host[:port][,host[:port]...]/name; " \
	"over TLS rediss://, cluster+tls://, sentinel+tls://"

/* Parse <text> as "t.conf" on top of the defaults into <c> (caller releases). */
static int parse(struct config *c, const char *text, char *err)
{
	config_init(c);
	return config_parse(c, "t.conf", text, strlen(text), err, CONFIG_ERR_LEN);
}

/* <limit>/hour|day|week|month with tz= and anchor=: a quota beside a
 * sliding window, 24h and a day apart (another key), an override's own. */
static void test_quotas(void **state)
{
	struct config c;
	char err[CONFIG_ERR_LEN] = "";
	const struct window_policy *p;

	(void)state;
	assert_int_equal(parse(&c, "policy api 100/24h 10000/month tz=-05:30 anchor=15 "
	                           "500/week 50/day\n"
	                           "override api jwt:A 20/1s 20000/month anchor=28\n", err), 0);
	p = &c.policies[0];
	assert_int_equal(p->nwin, 4);
	assert_int_equal(p->win[0].cal, WINDOW_CAL_NONE);
	assert_int_equal(p->win[1].cal, WINDOW_CAL_MONTH);
	assert_int_equal(p->win[1].limit, 10000);
	assert_int_equal(p->win[1].tz_min, -330);
	assert_int_equal(p->win[1].anchor, 15);
	assert_int_equal(p->win[1].window_ms, 31 * 86400000ULL);
	assert_int_equal(p->win[2].cal, WINDOW_CAL_WEEK);
	/* (tz= before it: the week keeps UTC) */
	assert_int_equal(p->win[2].tz_min, 0);
	assert_int_equal(p->win[3].cal, WINDOW_CAL_DAY);
	assert_true(window_policy_has_quota(p));
	assert_int_equal(p->overrides[0].win[1].anchor, 28);
	assert_int_equal(p->overrides[0].win[1].tz_min, 0);
	config_release(&c);
	/* a bucket with a quota beside it: the rate first, whatever the order */
	assert_int_equal(parse(&c, "policy pro 1000000/month anchor=15 100/1s burst=200 "
	                           "algorithm=gcra\n", err), 0);
	p = &c.policies[0];
	assert_int_equal(p->nwin, 2);
	assert_int_equal(p->win[0].cal, WINDOW_CAL_NONE);
	assert_int_equal(p->win[0].burst, 200);
	assert_int_equal(p->win[1].cal, WINDOW_CAL_MONTH);
	assert_int_equal(p->win[1].anchor, 15);
	config_release(&c);
	assert_int_equal(parse(&c, "policy api 50/day 10/1s\n", err), 0);
	assert_int_equal(c.policies[0].nwin, 2);
	assert_false(window_policy_has_quota(&c.policies[0]) == false);
	config_release(&c);
}

static void test_defaults(void **state)
{
	struct config c;
	char err[CONFIG_ERR_LEN];

	(void)state;
	config_init(&c);
	assert_string_equal(c.listen, "127.0.0.1:12345");
	assert_string_equal(c.redis, "redis://127.0.0.1:6379/0");
	assert_int_equal(c.redis_timeout_ms, 50);
	assert_int_equal(c.redis_batch, 32);
	assert_int_equal(c.threads, 1);
	assert_int_equal(c.log_level, CONFIG_LOG_INFO);
	assert_string_equal(c.metrics, "");
	assert_int_equal(c.max_connections, 10000);
	assert_int_equal(c.max_inflight, 256);
	assert_int_equal(c.max_notify_messages, 16);
	assert_int_equal(c.hello_timeout_ms, 10000);
	assert_int_equal(c.frame_timeout_ms, 10000);
	assert_false(c.allow_remote_listen);
	assert_true(c.deny_cache);
	assert_int_equal(c.npolicies, 0);
	/* The defaults alone are not a usable config: no policy. */
	assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
	assert_string_equal(err, "config: no policy defined (add one, e.g. 'policy transfer 3/1s')");
}

static void test_strings(void **state)
{
	(void)state;
	assert_string_equal(config_log_level_str(CONFIG_LOG_ERROR), "error");
	assert_string_equal(config_log_level_str(CONFIG_LOG_WARN), "warn");
	assert_string_equal(config_log_level_str(CONFIG_LOG_INFO), "info");
	assert_string_equal(config_log_level_str(CONFIG_LOG_DEBUG), "debug");
	assert_string_equal(config_log_level_str(CONFIG_LOG_COUNT), "unknown");
}

static void test_durations(void **state)
{
	static const struct { const char *s; uint64_t ms; } good[] = {
		{ "50ms", 50 }, { "1s", 1000 }, { "10m", 600000 }, { "1h", 3600000 },
		{ "0ms", 0 }, { "24h", 86400000 }, { "007s", 7000 },
	};
	static const char *const bad[] = {
		"", "ms", "s", "50", "5x", "1.5s", "-1s", "+1s", " 1s", "1 s", "1S", "1sec",
		"1msx", "99999999999999999999s", "5124095576030432h",
	};
	uint64_t ms;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		ms = 12345;
		assert_int_equal(config_parse_duration(good[i].s, strlen(good[i].s), &ms), 0);
		assert_int_equal(ms, good[i].ms);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(config_parse_duration(bad[i], strlen(bad[i]), &ms), -1);
	/* Not NUL-terminated: the length is the limit. */
	assert_int_equal(config_parse_duration("2sXYZ", 2, &ms), 0);
	assert_int_equal(ms, 2000);
}

static void test_full(void **state)
{
	static const char text[] =
		"# a comment line\n"
		"\n"
		"   listen   [::1]:9999   # trailing comment\n"
		"redis redis://user:p#ss@word@redis.local:6380/3\n"
		"redis-timeout 2s\r\n"
		"redis-batch 1\r\n"
		"threads 4\n"
		"log-level debug\n"
		"metrics 127.0.0.1:9102\n"
		"max-connections 500\n"
		"max-inflight 64\n"
		"max-notify-messages 4\n"
		"hello-timeout 2s\n"
		"frame-timeout 500ms\n"
		"policy transfer 3/1s\n"
		"policy api 10/s 1000/1h 50/500ms 2/24h on-redis-error=allow shadow max-cost=20\n"
		"policy exports 10/1s 1000/1h precision=1m\n"
		"override exports ACC-VIP 30/1s\n"
		"policy x.y_z-1 1000000/1ms on-redis-error=deny\n"
		"override api ACC-9 1/1s\n"
		"override transfer ACC-VIP 30/1s 100/1m\n"
		"override transfer ACC-1 5/1s\n"
		"\tallow-remote-listen";
	struct config c;
	char err[CONFIG_ERR_LEN];
	const struct window_policy *p;
	const struct window_limit *l;
	unsigned nwin;

	(void)state;
	assert_int_equal(parse(&c, text, err), 0);
	assert_string_equal(err, "");
	assert_string_equal(c.listen, "[::1]:9999");
	assert_string_equal(c.redis, "redis://user:p#ss@word@redis.local:6380/3");
	assert_int_equal(c.redis_timeout_ms, 2000);
	assert_int_equal(c.redis_batch, 1);
	assert_int_equal(c.threads, 4);
	assert_int_equal(c.log_level, CONFIG_LOG_DEBUG);
	assert_string_equal(c.metrics, "127.0.0.1:9102");
	assert_int_equal(c.max_connections, 500);
	assert_int_equal(c.max_inflight, 64);
	assert_int_equal(c.max_notify_messages, 4);
	assert_int_equal(c.hello_timeout_ms, 2000);
	assert_int_equal(c.frame_timeout_ms, 500);
	assert_true(c.allow_remote_listen);
	assert_int_equal(c.npolicies, 4);

	p = config_find_policy(&c, "transfer", 8);
	assert_non_null(p);
	assert_int_equal(p->nwin, 1);
	assert_int_equal(p->win[0].limit, 3);
	assert_int_equal(p->win[0].window_ms, 1000);
	assert_int_equal(p->on_error, WINDOW_ON_ERROR_DENY);
	assert_false(p->shadow);
	assert_int_equal(p->max_cost, 0);
	assert_int_equal(p->noverrides, 2);
	/* Stored sorted for bsearch. */
	assert_memory_equal(p->overrides[0].key, "ACC-1", 5);
	assert_memory_equal(p->overrides[1].key, "ACC-VIP", 7);
	l = window_limits_for(p, "ACC-VIP", 7, &nwin);
	assert_int_equal(nwin, 2);
	assert_int_equal(l[0].limit, 30);
	assert_int_equal(l[1].limit, 100);
	assert_int_equal(l[1].window_ms, 60000);
	l = window_limits_for(p, "ACC-2", 5, &nwin);
	assert_int_equal(l[0].limit, 3);

	p = config_find_policy(&c, "api", 3);
	assert_non_null(p);
	assert_int_equal(p->nwin, 4);
	assert_int_equal(p->win[0].window_ms, 1000);
	assert_int_equal(p->win[1].limit, 1000);
	assert_int_equal(p->win[1].window_ms, 3600000);
	assert_int_equal(p->win[2].window_ms, 500);
	assert_int_equal(p->win[3].window_ms, 86400000);
	assert_int_equal(p->on_error, WINDOW_ON_ERROR_ALLOW);
	assert_true(p->shadow);
	assert_int_equal(p->max_cost, 20);
	assert_int_equal(p->noverrides, 1);
	assert_int_equal(p->precision_ms, 0);

	/* precision= applies to the windows longer than it; an override with
	 * only shorter windows is fine */
	p = config_find_policy(&c, "exports", 7);
	assert_non_null(p);
	assert_int_equal(p->precision_ms, 60000);
	assert_false(window_is_bucketed(p, p->win[0].window_ms));
	assert_true(window_is_bucketed(p, p->win[1].window_ms));
	assert_int_equal(p->noverrides, 1);

	p = config_find_policy(&c, "x.y_z-1", 7);
	assert_non_null(p);
	assert_int_equal(p->win[0].limit, 1000000);
	assert_int_equal(p->win[0].window_ms, 1);
	assert_null(config_find_policy(&c, "transfe", 7));
	assert_null(config_find_policy(&c, "nope", 4));

	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
	config_release(&c);
	assert_null(c.policies[0].overrides);
	assert_int_equal(c.policies[0].noverrides, 0);
}

/* The config shipped in etc/ parses, validates and says what the docs say. */
static void test_etc_file(void **state)
{
	struct config c;
	char err[CONFIG_ERR_LEN];
	const char *path = getenv("CONFIG_FILE");
	const struct window_policy *p;

	(void)state;
	if (!path)
		path = "etc/ratelimit-spoa.conf";
	config_init(&c);
	if (config_load_file(&c, path, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_string_equal(c.path, path);
	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
	assert_string_equal(c.listen, "127.0.0.1:12345");
	assert_string_equal(c.redis, "redis://127.0.0.1:6379/0");
	assert_int_equal(c.redis_timeout_ms, 50);
	p = config_find_policy(&c, "transfer", 8);
	assert_non_null(p);
	assert_int_equal(p->nwin, 1);
	assert_int_equal(p->win[0].limit, 3);
	assert_int_equal(p->win[0].window_ms, 1000);
	assert_int_equal(p->on_error, WINDOW_ON_ERROR_DENY);
	assert_false(p->shadow);
	p = config_find_policy(&c, "reads", 5);
	assert_non_null(p);
	assert_int_equal(p->on_error, WINDOW_ON_ERROR_ALLOW);
	config_release(&c);
}

static void test_load_file_errors(void **state)
{
	struct config c;
	char err[CONFIG_ERR_LEN];
	char path[] = "/tmp/test_config.XXXXXX";
	int fd;
	FILE *f;

	(void)state;
	config_init(&c);
	assert_int_equal(config_load_file(&c, "/nonexistent/x.conf", err, sizeof(err)), -1);
	assert_string_equal(err, "/nonexistent/x.conf: cannot open: No such file or directory");
	assert_int_equal(config_load_file(&c, "/tmp", err, sizeof(err)), -1);
	assert_string_equal(err, "/tmp: not a regular file");

	fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	assert_non_null(f);
	fputs("policy a 1/1s\nthreads 0\n", f);
	fclose(f);
	assert_int_equal(config_load_file(&c, path, err, sizeof(err)), -1);
	{
		char want[CONFIG_ERR_LEN];

		snprintf(want, sizeof(want), "%s:2: threads must be an integer 1..64", path);
		assert_string_equal(err, want);
	}
	remove(path);
	config_release(&c);
}

/* Every parse error, with its exact text. */
static void test_parse_errors(void **state)
{
	static const struct { const char *text; const char *err; } cases[] = {
		{ "foo bar\n", "t.conf:1: unknown directive 'foo'" },
		{ "\n\n  Listen 127.0.0.1:1\n", "t.conf:3: unknown directive 'Listen'" },
		{ "listen\n", "t.conf:1: listen takes exactly one argument" },
		{ "listen a:1 b:2\n", "t.conf:1: listen takes exactly one argument" },
		{ "listen 127.0.0.1:1\nlisten 127.0.0.1:2\n",
		  "t.conf:2: duplicate directive 'listen' (first at line 1)" },
		{ "listen 127.0.0.1\n", "t.conf:1: listen '127.0.0.1': missing port "
		  "(expected host:port, [ipv6]:port or unix:/path)" },
		{ "listen 127.0.0.1:0\n", "t.conf:1: listen '127.0.0.1:0': port must be 1..65535 "
		  "(expected host:port, [ipv6]:port or unix:/path)" },
		{ "listen 127.0.0.1:65536\n", "t.conf:1: listen '127.0.0.1:65536': port must be 1..65535 "
		  "(expected host:port, [ipv6]:port or unix:/path)" },
		{ "listen :80\n", "t.conf:1: listen ':80': missing host "
		  "(expected host:port, [ipv6]:port or unix:/path)" },
		{ "listen ::1:80\n", "t.conf:1: listen '::1:80': missing host "
		  "(expected host:port, [ipv6]:port or unix:/path)" },
		{ "listen [::1:80\n", "t.conf:1: listen '[::1:80': bad IPv6 address "
		  "(expected host:port, [ipv6]:port or unix:/path)" },
		{ "listen [zz]:80\n", "t.conf:1: listen '[zz]:80': bad IPv6 address "
		  "(expected host:port, [ipv6]:port or unix:/path)" },
		{ "listen [::1]\n", "t.conf:1: listen '[::1]': missing port "
		  "(expected host:port, [ipv6]:port or unix:/path)" },
		{ "listen ho_st:80\n", "t.conf:1: listen 'ho_st:80': bad host "
		  "(expected host:port, [ipv6]:port or unix:/path)" },
		{ "listen unix:run/x.sock\n", "t.conf:1: listen 'unix:run/x.sock': unix socket path "
		  "must be absolute (expected host:port, [ipv6]:port or unix:/path)" },
		{ "metrics 127.0.0.1\n", "t.conf:1: metrics '127.0.0.1': missing port "
		  "(expected host:port, [ipv6]:port, unix:/path or off)" },
		{ "redis http://127.0.0.1:6379\n", "t.conf:1: redis: unknown scheme (expected "
		  SHAPES ")" },
		{ "redis redis://127.0.0.1:0\n", "t.conf:1: redis: port must be 1..65535 (expected "
		  SHAPES ")" },
		/* The password is never echoed back. */
		{ "redis redis://u:secret@h:6379/x\n", "t.conf:1: redis: db must be a number 0..65535 "
		  "(expected " SHAPES ")" },
		{ "redis redis://@h:6379\n", "t.conf:1: redis: user info must be user:password or "
		  ":password (or the user in RATELIMIT_SPOA_REDIS_USER) (expected " SHAPES ")" },
		{ "redis redis://u:p@/0\n", "t.conf:1: redis: missing host (expected "
		  SHAPES ")" },
		{ "redis unix://run/redis.sock\n", "t.conf:1: redis: unix socket path must be absolute "
		  "(expected " SHAPES ")" },
		{ "redis cluster://a:1,\n", "t.conf:1: redis: missing host (expected "
		  SHAPES ")" },
		{ "redis sentinel://a:1,b:2\n", "t.conf:1: redis: sentinel URL needs /<master-name> "
		  "(expected " SHAPES ")" },
		{ "redis sentinel://a:1/m;x\n", "t.conf:1: redis: bad sentinel master name "
		  "(expected " SHAPES ")" },
		{ "redis-batch 0\n",
		  "t.conf:1: redis-batch must be an integer 1..256 (1: one script call per decision); got '0'" },
		{ "redis-batch 257\n",
		  "t.conf:1: redis-batch must be an integer 1..256 (1: one script call per decision); got '257'" },
		{ "redis-timeout 50\n",
		  "t.conf:1: redis-timeout must be a duration 1ms..60s, e.g. 50ms; got '50'" },
		{ "redis-timeout 0ms\n",
		  "t.conf:1: redis-timeout must be a duration 1ms..60s, e.g. 50ms; got '0ms'" },
		{ "redis-timeout 2m\n",
		  "t.conf:1: redis-timeout must be a duration 1ms..60s, e.g. 50ms; got '2m'" },
		{ "threads 0\n", "t.conf:1: threads must be an integer 1..64" },
		{ "threads 65\n", "t.conf:1: threads must be an integer 1..64" },
		{ "threads two\n", "t.conf:1: threads must be an integer 1..64" },
		{ "max-connections 0\n", "t.conf:1: max-connections must be an integer 1..1000000" },
		{ "max-inflight 65537\n", "t.conf:1: max-inflight must be an integer 1..65536" },
		{ "max-notify-messages 0\n", "t.conf:1: max-notify-messages must be an integer 1..1024" },
		{ "max-notify-messages 1025\n", "t.conf:1: max-notify-messages must be an integer 1..1024" },
		{ "hello-timeout 5ms\n",
		  "t.conf:1: hello-timeout must be a duration 10ms..1h, e.g. 10s; got '5ms'" },
		{ "frame-timeout 2h\n",
		  "t.conf:1: frame-timeout must be a duration 10ms..1h, e.g. 10s; got '2h'" },
		{ "frame-timeout 10\n",
		  "t.conf:1: frame-timeout must be a duration 10ms..1h, e.g. 10s; got '10'" },
		{ "frame-timeout 1s\nframe-timeout 2s\n",
		  "t.conf:2: duplicate directive 'frame-timeout' (first at line 1)" },
		{ "log-level verbose\n",
		  "t.conf:1: log-level must be error, warn, info or debug; got 'verbose'" },
		{ "allow-remote-listen yes\n", "t.conf:1: allow-remote-listen takes no argument" },
		{ "deny-cache maybe\n", "t.conf:1: deny-cache must be on or off; got 'maybe'" },
		{ "redis-allow-eviction on\n",
		  "t.conf:1: redis-allow-eviction must be yes or no; got 'on'" },
		{ "deny-cache off\ndeny-cache on\n",
		  "t.conf:2: duplicate directive 'deny-cache' (first at line 1)" },
		{ "policy\n", "t.conf:1: policy: expected 'policy <name> <limit>/<window> [options]'" },
		{ "policy transfer\n",
		  "t.conf:1: policy: expected 'policy <name> <limit>/<window> [options]'" },
		{ "policy tr@nsfer 3/1s\n",
		  "t.conf:1: policy name 'tr@nsfer' must be 1..48 characters of A-Z a-z 0-9 _ . -" },
		{ "policy aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 3/1s\n",
		  "t.conf:1: policy name 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' "
		  "must be 1..48 characters of A-Z a-z 0-9 _ . -" },
		{ "policy transfer 3/1s\npolicy transfer 5/1m\n", "t.conf:2: duplicate policy 'transfer'" },
		{ "policy x 0/1s\n", "t.conf:1: policy 'x': limit must be a positive integer, got '0/1s'" },
		{ "policy x -1/1s\n", "t.conf:1: policy 'x': limit must be a positive integer, got '-1/1s'" },
		{ "policy x /1s\n", "t.conf:1: policy 'x': limit must be a positive integer, got '/1s'" },
		{ "policy x 1000001/1s\n", "t.conf:1: policy 'x': limit must be at most 1000000" },
		{ "policy x 3/1d\n",
		  "t.conf:1: policy 'x': bad window in '3/1d' (use <n>ms, <n>s, <n>m or <n>h, or a period: hour, day, week, month)" },
		{ "policy x 3/\n",
		  "t.conf:1: policy 'x': bad window in '3/' (use <n>ms, <n>s, <n>m or <n>h, or a period: hour, day, week, month)" },
		{ "policy x 3/0s\n", "t.conf:1: policy 'x': window must be 1ms..24h" },
		{ "policy x 3/25h\n", "t.conf:1: policy 'x': window must be 1ms..24h" },
		{ "policy x 3/1441m\n", "t.conf:1: policy 'x': window must be 1ms..24h" },
		{ "policy x 3/1s 5/1000ms\n", "t.conf:1: policy 'x': window 1s given twice" },
		/* calendar quotas */
		{ "policy x 3/1s 10/month anchor=29\n",
		  "t.conf:1: policy 'x': anchor must be 1..28 (a day every month has), got 'anchor=29'" },
		{ "policy x 3/1s 10/month anchor=0\n",
		  "t.conf:1: policy 'x': anchor must be 1..28 (a day every month has), got 'anchor=0'" },
		{ "policy x 3/1s\npolicy y 10/day anchor=3\n",
		  "t.conf:2: policy 'y': 'anchor=3' follows no <limit>/month on its line" },
		{ "policy x tz=+01:00 10/day\n",
		  "t.conf:1: policy 'x': 'tz=+01:00' follows no <limit>/hour|day|week|month on its line" },
		{ "policy x 10/day tz=+14:30\n", "t.conf:1: policy 'x': bad offset 'tz=+14:30' (use "
		  "tz=+hh:mm or tz=-hh:mm, -14:00 .. +14:00)" },
		{ "policy x 10/day tz=0100\n", "t.conf:1: policy 'x': bad offset 'tz=0100' (use "
		  "tz=+hh:mm or tz=-hh:mm, -14:00 .. +14:00)" },
		{ "policy x 10/day 20/day\n", "t.conf:1: policy 'x': /day given twice" },
		{ "policy x 10/1s 100/month 5/day algorithm=gcra\n",
		  "t.conf:1: policy 'x': algorithm=gcra takes exactly one <limit>/<window> (the rate; "
		  "burst=<n> is the bucket), and at most one calendar quota beside it" },
		{ "pool p 100/day\n", "t.conf:1: pool 'p': a pool is a sliding window, not a calendar "
		  "period" },
		{ "policy x 1/1s 2/2s 3/3s 4/4s 5/5s\n", "t.conf:1: policy 'x': at most 4 windows" },
		{ "policy x 3/1s on-redis-error=maybe\n",
		  "t.conf:1: policy 'x': unknown option 'on-redis-error=maybe' "
		  "(expected <limit>/<window>, on-redis-error=deny|allow, shadow, max-cost=<n>, "
		  "precision=<duration>, algorithm=log|gcra, burst=<n>, pool=<pool>, "
		  "inflight=<n>, lease=<duration> or settle=<header>)" },
		{ "policy x 3/1s max-cost=0\n", "t.conf:1: policy 'x': max-cost must be 1..1000000, got 'max-cost=0'" },
		{ "policy x 3/1s max-cost=1000001\n",
		  "t.conf:1: policy 'x': max-cost must be 1..1000000, got 'max-cost=1000001'" },
		{ "policy x 3/1s max-cost=2k\n", "t.conf:1: policy 'x': max-cost must be 1..1000000, got 'max-cost=2k'" },
		{ "policy x 3/1s max-cost=\n",
		  "t.conf:1: policy 'x': unknown option 'max-cost=' "
		  "(expected <limit>/<window>, on-redis-error=deny|allow, shadow, max-cost=<n>, "
		  "precision=<duration>, algorithm=log|gcra, burst=<n>, pool=<pool>, "
		  "inflight=<n>, lease=<duration> or settle=<header>)" },
		{ "policy x shadow\n",
		  "t.conf:1: policy 'x': expected at least one <limit>/<window> (or inflight=<n>)" },
		{ "policy x 3/1h precision=7m\n",
		  "t.conf:1: policy 'x': precision=7m does not divide the 1h window" },
		{ "policy x 3/1h precision=5s\n",
		  "t.conf:1: policy 'x': precision=5s gives 720 buckets for the 1h window (at most 600)" },
		{ "policy x 3/1h precision=999ms\n",
		  "t.conf:1: policy 'x': precision=999ms is below the minimum of 1s" },
		{ "policy x 3/1m 5/30s precision=1m\n",
		  "t.conf:1: policy 'x': precision applies to no window (only windows longer than "
		  "it are counted in buckets)" },
		{ "policy x 3/1h precision=\n", "t.conf:1: policy 'x': unknown option 'precision=' "
		  "(expected <limit>/<window>, on-redis-error=deny|allow, shadow, max-cost=<n>, "
		  "precision=<duration>, algorithm=log|gcra, burst=<n>, pool=<pool>, "
		  "inflight=<n>, lease=<duration> or settle=<header>)" },
		{ "policy x 3/1h precision=0s\n",
		  "t.conf:1: policy 'x': bad precision in 'precision=0s' (use <n>s, <n>m or <n>h)" },
		{ "policy x 3/1h precision=m\n",
		  "t.conf:1: policy 'x': bad precision in 'precision=m' (use <n>s, <n>m or <n>h)" },
		{ "policy x 3/1h precision=1m\noverride x K 9/1s 3/150s\n",
		  "t.conf:2: override 'K' of 'x': precision=1m does not divide the 150s window" },
		{ "override y K 3/1s\n", "t.conf:1: override for unknown policy 'y'" },
		{ "policy x 3/1s\noverride x K\n",
		  "t.conf:2: override: expected 'override <policy> <key> <limit>/<window>...'" },
		{ "policy x 3/1s\noverride x K shadow\n",
		  "t.conf:2: override 'K' of 'x': expected <limit>/<window>, got 'shadow'" },
		{ "policy x 3/1s\noverride x K 0/1s\n",
		  "t.conf:2: override 'K' of 'x': limit must be a positive integer, got '0/1s'" },
		{ "policy x 3/1s\noverride x K 3/1s 4/1s\n",
		  "t.conf:2: override 'K' of 'x': window 1s given twice" },
		{ "policy x 3/1s\noverride x B 1/1s\noverride x A 1/1s\noverride x B 2/1s\n",
		  "t.conf:4: duplicate override 'B' for policy 'x'" },
		{ "policy a b c d e f g h i j k l m n o p q\n", "t.conf:1: too many words (at most 16)" },
		/* algorithm=gcra, burst= */
		{ "policy x 3/1s algorithm=bucket\n",
		  "t.conf:1: policy 'x': unknown option 'algorithm=bucket' "
		  "(expected <limit>/<window>, on-redis-error=deny|allow, shadow, max-cost=<n>, "
		  "precision=<duration>, algorithm=log|gcra, burst=<n>, pool=<pool>, "
		  "inflight=<n>, lease=<duration> or settle=<header>)" },
		{ "policy x 3/1s 100/1h algorithm=gcra\n",
		  "t.conf:1: policy 'x': algorithm=gcra takes exactly one <limit>/<window> (the rate; "
		  "burst=<n> is the bucket), and at most one calendar quota beside it" },
		{ "policy x 3/1h algorithm=gcra precision=1m\n",
		  "t.conf:1: policy 'x': precision= does not apply to algorithm=gcra (a bucket is one "
		  "value per account)" },
		{ "policy x 3/1s burst=3\n", "t.conf:1: policy 'x': burst= needs algorithm=gcra" },
		/* in-flight leases (issue 38) */
		{ "policy x 3/1s inflight=0\n",
		  "t.conf:1: policy 'x': inflight must be 1..1000000, got 'inflight=0'" },
		{ "policy x 3/1s inflight=1000001\n",
		  "t.conf:1: policy 'x': inflight must be 1..1000000, got 'inflight=1000001'" },
		{ "policy x 3/1s inflight=2x\n",
		  "t.conf:1: policy 'x': inflight must be 1..1000000, got 'inflight=2x'" },
		{ "policy x 3/1s inflight=5 lease=999ms\n",
		  "t.conf:1: policy 'x': lease must be 1s..24h, got 'lease=999ms'" },
		{ "policy x 3/1s inflight=5 lease=25h\n",
		  "t.conf:1: policy 'x': lease must be 1s..24h, got 'lease=25h'" },
		{ "policy x 3/1s inflight=5 lease=1d\n",
		  "t.conf:1: policy 'x': lease must be 1s..24h, got 'lease=1d'" },
		{ "policy x 3/1s lease=30s\n",
		  "t.conf:1: policy 'x': lease= needs inflight=<n> or settle=<header>" },
		/* reserve, then settle (issue 38) */
		{ "policy x 3/1s settle=x-units:\n",
		  "t.conf:1: policy 'x': settle= must name a response header (1..63 characters of a "
		  "field name), got 'settle=x-units:'" },
		{ "policy x 3/1s settle=" "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
		  "t.conf:1: policy 'x': settle= must name a response header (1..63 characters of a "
		  "field name), got 'settle=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'" },
		{ "policy x inflight=2 settle=x-units\n",
		  "t.conf:1: policy 'x': settle= needs <limit>/<window> and does not apply with pool= "
		  "or precision=" },
		{ "policy x 3/1s 100/1h precision=1m settle=x-units\n",
		  "t.conf:1: policy 'x': settle= needs <limit>/<window> and does not apply with pool= "
		  "or precision=" },
		{ "policy x 3/1s 100/month settle=x-units\n",
		  "t.conf:1: policy 'x': settle= does not apply with a calendar quota (/hour, /day, "
		  "/week, /month)" },
		{ "policy x 3/1s algorithm=gcra inflight=2\n",
		  "t.conf:1: policy 'x': inflight= does not apply to algorithm=gcra (in-flight leases "
		  "count log and precision= policies)" },
		{ "policy x lease=5s\n",
		  "t.conf:1: policy 'x': expected at least one <limit>/<window> (or inflight=<n>)" },
		/* pools (issue 37) */
		{ "policy x 3/1s pool=p\n",
		  "t.conf:1: policy 'x': unknown pool 'p' (define it first: 'pool <name> <limit>/<window> "
		  "[headroom=<n>]')" },
		{ "policy x 3/1s pool=p\npool p 5/1s\n",
		  "t.conf:1: policy 'x': unknown pool 'p' (define it first: 'pool <name> <limit>/<window> "
		  "[headroom=<n>]')" },
		{ "pool p 5/1s headroom=5\n",
		  "t.conf:1: pool 'p': headroom must be below the limit (5), got 5" },
		{ "pool p 5/1s headroom=9\n",
		  "t.conf:1: pool 'p': headroom must be below the limit (5), got 9" },
		{ "pool p 1/1s\n", "t.conf:1: pool 'p': headroom must be below the limit (1), got 1" },
		{ "pool p 5/1s headroom=x\n", "t.conf:1: pool 'p': expected headroom=<n>, got 'headroom=x'" },
		{ "pool p 5/1s\npool p 6/1s\n", "t.conf:2: duplicate pool 'p'" },
		{ "pool p shadow\n", "t.conf:1: pool 'p': expected <limit>/<window>, got 'shadow'" },
		{ "pool p\n", "t.conf:1: pool: expected 'pool <name> <limit>/<window> [headroom=<n>]'" },
		{ "pool p{x} 5/1s\n",
		  "t.conf:1: pool name 'p{x}' must be 1..48 characters of A-Z a-z 0-9 _ . -" },
		{ "pool p 5/1s\npolicy x 3/1s algorithm=gcra pool=p\n",
		  "t.conf:2: policy 'x': pool= does not apply to algorithm=gcra (a pool counts log and "
		  "precision= policies)" },
		{ "policy x 3/1s algorithm=log burst=3\n", "t.conf:1: policy 'x': burst= needs algorithm=gcra" },
		{ "policy x 3/1s algorithm=gcra burst=0\n",
		  "t.conf:1: policy 'x': burst must be 1..1000000, got 'burst=0'" },
		{ "policy x 3/1s algorithm=gcra burst=1000001\n",
		  "t.conf:1: policy 'x': burst must be 1..1000000, got 'burst=1000001'" },
		{ "policy x 3/1s algorithm=gcra burst=\n",
		  "t.conf:1: policy 'x': burst must be 1..1000000, got 'burst='" },
		{ "policy x 3/1s algorithm=gcra burst=3 max-cost=4\n",
		  "t.conf:1: policy 'x': max-cost=4 is above the burst (3): such a cost could never pass" },
		{ "policy x 3/1s max-cost=4 algorithm=gcra\n",
		  "t.conf:1: policy 'x': max-cost=4 is above the burst (3): such a cost could never pass" },
		{ "policy x 1000000/24h algorithm=gcra\n",
		  "t.conf:1: policy 'x': burst 1000000 times the window is too long for algorithm=gcra "
		  "(at most 2^52 us: write the same rate with a shorter window, e.g. 625/54s burst=1000000 for "
		  "1000000/24h)" },
		{ "policy x 3/1s algorithm=gcra\noverride x K 3/1s 5/1m\n",
		  "t.conf:2: override 'K' of 'x': algorithm=gcra takes exactly one <limit>/<window> (the "
		  "rate; burst=<n> is the bucket), and at most one calendar quota beside it" },
		{ "policy x 3/1s algorithm=gcra\noverride x K burst=5\n",
		  "t.conf:2: override 'K' of 'x': algorithm=gcra takes exactly one <limit>/<window> (the "
		  "rate; burst=<n> is the bucket), and at most one calendar quota beside it" },
		{ "policy x 3/1s algorithm=gcra max-cost=3\noverride x K 9/1s burst=2\n",
		  "t.conf:2: override 'K' of 'x': max-cost=3 is above the burst (2): such a cost could "
		  "never pass" },
		{ "policy x 3/1s algorithm=gcra\noverride x K 9/1s burst=x\n",
		  "t.conf:2: override 'K' of 'x': burst must be 1..1000000, got 'burst=x'" },
		{ "policy x 3/1s\noverride x K 9/1s burst=5\n",
		  "t.conf:2: override 'K' of 'x': expected <limit>/<window>, got 'burst=5'" },
	};
	struct config c;
	char err[CONFIG_ERR_LEN];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (parse(&c, cases[i].text, err) != -1)
			fail_msg("case %zu parsed: %s", i, cases[i].text);
		if (strcmp(err, cases[i].err) != 0)
			fail_msg("case %zu:\n  got  %s\n  want %s", i, err, cases[i].err);
		config_release(&c);
	}
}

/* algorithm=gcra: the rate, the burst (default the limit), overrides
 * keeping the algorithm with their own burst; the log stays the default. */
/* pool and pool= (issue 37): the pool's limits copied into each policy
 * naming it, the default headroom, and on a Cluster URL the pool's tag on
 * its policies' accounts. */
/* A reload that lengthens a pool's window is refused with file:line (its
 * log holds only the running window's units); a shorter window, another
 * limit or headroom, a new pool or one dropped are not. */
static void test_pool_reload_window(void **state)
{
	struct config old, next;
	char err[CONFIG_ERR_LEN];

	(void)state;
	assert_int_equal(parse(&old, "pool backend 10/1m\npool other 5/1s\n"
	                             "policy p 3/1s pool=backend\n", err), 0);
	assert_int_equal(parse(&next, "pool other 5/1s\n# the window grows\n"
	                              "pool backend 10/1h\npolicy p 3/1s pool=backend\n", err), 0);
	err[0] = '\0';
	assert_int_equal(config_check_pool_reload(&old, &next, "a.conf", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "a.conf:3: pool 'backend': its window cannot grow on reload "
	                            "(60000ms to 3600000ms)"));
	config_release(&next);
	assert_int_equal(parse(&next, "pool backend 20/1s headroom=5\npool added 5/1h\n"
	                              "policy p 3/1s pool=backend\n", err), 0);
	assert_int_equal(config_check_pool_reload(&old, &next, "a.conf", err, sizeof(err)), 0);
	/* (and back: a longer window than the running one's) */
	assert_int_equal(config_check_pool_reload(&next, &old, "a.conf", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "a.conf:1: pool 'backend'"));
	config_release(&next);
	config_release(&old);
}

static void test_pools(void **state)
{
	static const char text[] =
		"pool backend 2000/1s\n"
		"pool transfers 5/1s headroom=2\n"
		"pool tiny 3/1m\n"
		"policy search 10/1s 100/1m pool=backend\n"
		"policy export 5/1s precision=1m 50/1h pool=backend shadow\n"
		"policy transfer 3/1s pool=transfers\n"
		"policy alone 3/1s\n";
	struct config c;
	char err[CONFIG_ERR_LEN];
	const struct window_policy *p;

	(void)state;
	if (parse(&c, text, err) != 0)
		fail_msg("%s", err);
	assert_int_equal(c.npools, 3);
	p = config_find_policy(&c, "search", 6);
	assert_true(p->pooled);
	assert_string_equal(p->pool.name, "backend");
	assert_int_equal(p->pool.limit, 2000);
	assert_int_equal(p->pool.window_ms, 1000);
	assert_int_equal(p->pool.headroom, 200);
	p = config_find_policy(&c, "export", 6);
	assert_true(p->pooled && p->shadow);
	assert_int_equal(p->pool.limit, 2000);
	p = config_find_policy(&c, "transfer", 8);
	assert_int_equal(p->pool.headroom, 2);
	assert_int_equal(c.pools[2].headroom, 1);   /* a tenth of 3, at least 1 */
	assert_false(config_find_policy(&c, "alone", 5)->pooled);
	if (config_validate(&c, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	config_tag_pool_accounts(&c);
	assert_false(config_find_policy(&c, "search", 6)->pool_tag);
	/* on a Cluster the pooled policies' accounts take their pool's tag */
	snprintf(c.redis, sizeof(c.redis), "cluster://127.0.0.1:7000");
	config_tag_pool_accounts(&c);
	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
	assert_true(config_find_policy(&c, "search", 6)->pool_tag);
	assert_true(config_find_policy(&c, "transfer", 8)->pool_tag);
	assert_false(config_find_policy(&c, "alone", 5)->pool_tag);
	snprintf(c.redis, sizeof(c.redis), "cluster+tls://127.0.0.1:7000");
	config_tag_pool_accounts(&c);
	assert_true(config_find_policy(&c, "export", 6)->pool_tag);
	snprintf(c.redis, sizeof(c.redis), "sentinel://127.0.0.1:26379/m");
	config_tag_pool_accounts(&c);
	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
	assert_false(config_find_policy(&c, "search", 6)->pool_tag);
	config_release(&c);
}

/* On a Cluster a reload that moves a policy's accounts to other keys (it
 * joins, leaves or changes its pool) is refused with file:line; the same
 * change off a Cluster, or another pool's limits, is not. */
static void test_pool_reload_cluster(void **state)
{
	static const char *const next_text[] = {
		"pool a 10/1s\npool b 10/1s\npolicy other 3/1s\npolicy p 3/1s pool=b\n",
		"pool a 10/1s\npool b 10/1s\npolicy other 3/1s\npolicy p 3/1s\n",
	};
	struct config old, next;
	char err[CONFIG_ERR_LEN];
	size_t i;

	(void)state;
	for (i = 0; i < 2; i++) {
		assert_int_equal(parse(&old, "pool a 10/1s\npool b 10/1s\npolicy other 3/1s\n"
		                             "policy p 3/1s pool=a\n", err), 0);
		assert_int_equal(parse(&next, next_text[i], err), 0);
		config_tag_pool_accounts(&old);
		config_tag_pool_accounts(&next);
		assert_int_equal(config_check_pool_reload(&old, &next, "a.conf", err, sizeof(err)), 0);
		snprintf(old.redis, sizeof(old.redis), "cluster://127.0.0.1:7000");
		snprintf(next.redis, sizeof(next.redis), "cluster://127.0.0.1:7000");
		config_tag_pool_accounts(&old);
		config_tag_pool_accounts(&next);
		err[0] = '\0';
		assert_int_equal(config_check_pool_reload(&old, &next, "a.conf", err, sizeof(err)), -1);
		assert_non_null(strstr(err, i == 0 ? "a.conf:4: policy 'p': on a Redis Cluster its pool "
		                                     "cannot change on reload (pool=a to pool=b)"
		                                   : "a.conf:4: policy 'p': on a Redis Cluster its pool "
		                                     "cannot change on reload (pool=a to pool=(none))"));
		/* (and joining one) */
		assert_int_equal(config_check_pool_reload(&next, &old, "a.conf", err, sizeof(err)), -1);
		config_release(&next);
		/* the same pool with other limits keeps the keys */
		assert_int_equal(parse(&next, "pool a 20/1s headroom=5\npolicy p 5/1s pool=a\n", err), 0);
		snprintf(next.redis, sizeof(next.redis), "cluster://127.0.0.1:7000");
		config_tag_pool_accounts(&next);
		assert_int_equal(config_check_pool_reload(&old, &next, "a.conf", err, sizeof(err)), 0);
		config_release(&next);
		config_release(&old);
	}
	/* the redis URL onto a Cluster moves a pooled policy's keys too */
	assert_int_equal(parse(&old, "pool a 10/1s\npolicy p 3/1s pool=a\n", err), 0);
	assert_int_equal(parse(&next, "pool a 10/1s\npolicy p 3/1s pool=a\n", err), 0);
	config_tag_pool_accounts(&old);
	snprintf(next.redis, sizeof(next.redis), "cluster://127.0.0.1:7000");
	config_tag_pool_accounts(&next);
	assert_int_equal(config_check_pool_reload(&old, &next, "a.conf", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "a.conf:2: policy 'p': on a Redis Cluster its pool cannot change "
	                            "on reload (pool=a to pool=a, the redis URL onto a Cluster)"));
	assert_int_equal(config_check_pool_reload(&next, &old, "a.conf", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "(pool=a to pool=a, the redis URL off the Cluster)"));
	config_release(&next);
	config_release(&old);
}

/* inflight= and lease= (issue 38): the bound and the lease's length (60s
 * by default), beside a pool and precision=; none on a plain policy. */
static void test_leases(void **state)
{
	static const char text[] =
		"pool backend 2000/1s\n"
		"policy export 10/1m inflight=5\n"
		"policy report 5/1s precision=1m 50/1h inflight=2 lease=15m pool=backend\n"
		"policy edge 3/1s inflight=1 lease=24h\n"
		"policy short 3/1s lease=1s inflight=1000000\n"
		"policy conc inflight=3 lease=10m\n"
		"policy plain 3/1s\n"
		"policy tok 100/1h settle=X-Usage-Units\n"
		"policy tokg 10/1s algorithm=gcra settle=x-units lease=5m\n";
	struct config c;
	char err[CONFIG_ERR_LEN];
	const struct window_policy *p;

	(void)state;
	if (parse(&c, text, err) != 0)
		fail_msg("%s", err);
	p = config_find_policy(&c, "export", 6);
	assert_int_equal(p->inflight, 5);
	assert_int_equal(p->lease_ms, 60000);
	p = config_find_policy(&c, "report", 6);
	assert_int_equal(p->inflight, 2);
	assert_int_equal(p->lease_ms, 15 * 60000);
	assert_true(p->pooled);
	assert_int_equal(p->precision_ms, 60000);
	assert_int_equal(config_find_policy(&c, "edge", 4)->lease_ms, 24 * 3600000);
	p = config_find_policy(&c, "short", 5);
	assert_int_equal(p->inflight, 1000000);
	assert_int_equal(p->lease_ms, 1000);
	p = config_find_policy(&c, "conc", 4);
	assert_int_equal(p->nwin, 0);
	assert_int_equal(p->inflight, 3);
	assert_int_equal(p->lease_ms, 600000);
	p = config_find_policy(&c, "plain", 5);
	assert_int_equal(p->inflight, 0);
	assert_int_equal(p->lease_ms, 0);
	assert_string_equal(p->settle_hdr, "");
	/* settle=: the header in lower case, a lease= by default */
	p = config_find_policy(&c, "tok", 3);
	assert_string_equal(p->settle_hdr, "x-usage-units");
	assert_int_equal(p->lease_ms, 60000);
	assert_int_equal(p->inflight, 0);
	if (config_validate(&c, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	config_release(&c);
}

static void test_gcra(void **state)
{
	static const char text[] =
		"policy transfers 3/1s algorithm=gcra burst=5 max-cost=5\n"
		"policy plain 3/1s\n"
		"policy deflt 10/1m algorithm=gcra shadow\n"
		"policy logged 3/1s algorithm=log\n"
		"override transfers jwt:VIP 30/1s burst=60\n"
		"override deflt jwt:SLOW 1/1s\n"
		"policy big 52124/24h algorithm=gcra\n"
		"policy daily 625/54s algorithm=gcra burst=1000000\n";
	struct config c;
	char err[CONFIG_ERR_LEN];
	const struct window_policy *p;
	const struct window_limit *l;
	struct window_limit ann;
	unsigned nwin;

	(void)state;
	assert_int_equal(parse(&c, text, err), 0);
	p = config_find_policy(&c, "transfers", 9);
	assert_non_null(p);
	assert_int_equal(p->algorithm, WINDOW_ALGO_GCRA);
	assert_int_equal(p->nwin, 1);
	assert_int_equal(p->win[0].limit, 3);
	assert_int_equal(p->win[0].window_ms, 1000);
	assert_int_equal(p->win[0].burst, 5);
	assert_int_equal(p->max_cost, 5);
	l = window_limits_for(p, "jwt:VIP", 7, &nwin);
	assert_int_equal(nwin, 1);
	assert_int_equal(l[0].limit, 30);
	assert_int_equal(l[0].burst, 60);
	/* the draft's headers: q = burst, w = burst * T (5 * 1s / 3, up) */
	window_announced(&p->win[0], &ann);
	assert_int_equal(ann.limit, 5);
	assert_int_equal(ann.window_ms, 1667);
	assert_int_equal(ann.burst, 0);

	p = config_find_policy(&c, "plain", 5);
	assert_int_equal(p->algorithm, WINDOW_ALGO_LOG);
	assert_int_equal(p->win[0].burst, 0);
	window_announced(&p->win[0], &ann);
	assert_int_equal(ann.limit, 3);
	assert_int_equal(ann.window_ms, 1000);
	p = config_find_policy(&c, "deflt", 5);
	assert_int_equal(p->algorithm, WINDOW_ALGO_GCRA);
	assert_int_equal(p->win[0].burst, 10);
	assert_true(p->shadow);
	/* an override's burst defaults to its own limit */
	l = window_limits_for(p, "jwt:SLOW", 8, &nwin);
	assert_int_equal(l[0].limit, 1);
	assert_int_equal(l[0].burst, 1);
	p = config_find_policy(&c, "logged", 6);
	assert_int_equal(p->algorithm, WINDOW_ALGO_LOG);
	/* the largest default burst a 24h window takes (52124 * 86400000 ms
	 * <= 2^52 us) */
	p = config_find_policy(&c, "big", 3);
	assert_int_equal(p->win[0].burst, 52124);
	/* what -c suggests for 1000000/24h: the same rate, a shorter window */
	p = config_find_policy(&c, "daily", 5);
	assert_int_equal(p->win[0].burst, 1000000);
	window_announced(&p->win[0], &ann);
	assert_int_equal(ann.window_ms, 86400000);
	config_release(&c);
}

static void test_nul_byte(void **state)
{
	struct config c;
	char err[CONFIG_ERR_LEN];
	static const char text[] = "threads 1\nthreads\0 2\n";

	(void)state;
	config_init(&c);
	assert_int_equal(config_parse(&c, "t.conf", text, sizeof(text) - 1, err, sizeof(err)), -1);
	assert_string_equal(err, "t.conf:2: NUL byte in line");
	/* A NULL error buffer is allowed. */
	config_init(&c);
	assert_int_equal(config_parse(&c, "t.conf", "bogus", 5, NULL, 0), -1);
}

/* A long key is cut in the message, and a small buffer is never overrun. */
static void test_error_truncation(void **state)
{
	struct config c;
	char err[16];
	char text[600];

	(void)state;
	memset(text, 'z', sizeof(text) - 1);
	text[sizeof(text) - 1] = '\0';
	config_init(&c);
	assert_int_equal(config_parse(&c, "t.conf", text, strlen(text), err, sizeof(err)), -1);
	assert_string_equal(err, "t.conf:1: unkno");
}

/* -c, a reload and the limiter read the `redis` URL with one grammar: every
 * URL is accepted by config_parse() exactly when redis_url_parse() (what
 * connects) accepts it, and a URL without a port means 6379. */
static void test_redis_url_one_grammar(void **state)
{
	static const char *const urls[] = {
		"redis://h", "redis://h:6379", "redis://h/3", "redis://127.0.0.1:6380/0",
		"redis://[::1]", "redis://[::1]:7000/2", "redis://redis_1:6379", "redis://h:0",
		"redis://h:65536", "redis://h:x", "redis://h/x", "redis://h/70000",
		"redis://user@h:6379", "redis://user:@h:6379", "redis://:pw@h", "redis://u:p@h:1/2",
		"redis://u:p%zz@h:1", "redis://@h:6379", "redis://u:p@/0", "redis://", "redis://h1,h2",
		"redis://[zz]:1", "redis://[::1", "redis://h o:1", "redis://h;x:1",
		"unix:///run/redis.sock", "unix://run/redis.sock", "unix://",
		"cluster://a", "cluster://a:1,b", "cluster://a:1,", "cluster://a:1/0",
		"sentinel://s1,s2:26380/mymaster", "sentinel://s1/", "sentinel://s1/m@x",
		"sentinel://s1/a/b", "http://h:1",
	};
	struct redis_url u;
	struct config c;
	char err[CONFIG_ERR_LEN], text[256];
	size_t i;
	int want, got;

	(void)state;
	for (i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
		want = redis_url_parse(urls[i], &u, err, sizeof(err));
		redis_url_wipe(&u);
		snprintf(text, sizeof(text), "redis %s\npolicy p 1/s\n", urls[i]);
		config_init(&c);
		got = config_parse(&c, "t.conf", text, strlen(text), err, sizeof(err));
		if (got == 0)
			got = config_validate(&c, err, sizeof(err));
		config_release(&c);
		if (got != want)
			fail_msg("%s: limiter %s, config %s (%s)", urls[i], want ? "refuses" : "accepts",
			         got ? "refuses" : "accepts", got ? err : "-");
	}
	assert_int_equal(redis_url_parse("redis://h", &u, err, sizeof(err)), 0);
	assert_int_equal(u.hosts[0].port, 6379);
	assert_int_equal(redis_url_parse("redis://user@h:6379", &u, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "RATELIMIT_SPOA_REDIS_USER"));
}

static void test_windows_and_urls(void **state)
{
	static const char *const good[] = {
		"policy p 3/s\n", "policy p 3/ms\n", "policy p 3/h 5/m\n", "policy p 1/24h\n",
		"redis redis://127.0.0.1:6379\n", "redis redis://h:1/0\n",
		"redis redis://:pw@h:1\n", "redis redis://h\n", "redis cluster://a:1,b\n",
		"redis redis://u:p/w:x@[::1]:6379/2\n", "redis unix:///run/redis/redis.sock\n",
		"redis cluster://a:7000\n", "redis cluster://a:7000,b:7001,[::1]:7002\n",
		"redis sentinel://s1:26379,s2:26379/mymaster\n",
		"listen unix:/run/ratelimit-spoa.sock\n", "listen localhost:1\n",
		"metrics off\n", "metrics unix:/run/m.sock\n", "redis-allow-eviction yes\n",
	};
	struct config c;
	char err[CONFIG_ERR_LEN];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		if (parse(&c, good[i], err) != 0)
			fail_msg("case %zu (%s): %s", i, good[i], err);
		config_release(&c);
	}
	assert_int_equal(parse(&c, "policy p 3/s 7/h\n", err), 0);
	assert_int_equal(c.policies[0].win[0].window_ms, 1000);
	assert_int_equal(c.policies[0].win[1].window_ms, 3600000);
	assert_int_equal(c.policies[0].win[1].limit, 7);
}

static void test_validate(void **state)
{
	static const struct { const char *text; const char *err; } cases[] = {
		{ "listen 0.0.0.0:12345\npolicy p 1/1s\n",
		  "config: listen '0.0.0.0:12345' is not loopback (127.0.0.0/8, ::1, localhost or unix:); "
		  "add 'allow-remote-listen' to accept other hosts" },
		{ "listen [::]:12345\npolicy p 1/1s\n",
		  "config: listen '[::]:12345' is not loopback (127.0.0.0/8, ::1, localhost or unix:); "
		  "add 'allow-remote-listen' to accept other hosts" },
		{ "listen 10.0.0.1:12345\npolicy p 1/1s\n",
		  "config: listen '10.0.0.1:12345' is not loopback (127.0.0.0/8, ::1, localhost or unix:); "
		  "add 'allow-remote-listen' to accept other hosts" },
		{ "listen spoa.internal:12345\npolicy p 1/1s\n",
		  "config: listen 'spoa.internal:12345' is not loopback (127.0.0.0/8, ::1, localhost or "
		  "unix:); add 'allow-remote-listen' to accept other hosts" },
		{ "metrics 0.0.0.0:9102\npolicy p 1/1s\n",
		  "config: metrics '0.0.0.0:9102' is not loopback; add 'allow-remote-listen' "
		  "to expose it to other hosts" },
		{ "threads 2\n", "config: no policy defined (add one, e.g. 'policy transfer 3/1s')" },
	};
	static const char *const good[] = {
		"listen 127.0.0.1:1\npolicy p 1/1s\n",
		"listen 127.9.8.7:1\npolicy p 1/1s\n",
		"listen [::1]:1\npolicy p 1/1s\n",
		"listen [::ffff:127.0.0.1]:1\npolicy p 1/1s\n",
		"listen localhost:1\npolicy p 1/1s\n",
		"listen unix:/tmp/x.sock\npolicy p 1/1s\n",
		"listen 0.0.0.0:1\nallow-remote-listen\nmetrics 0.0.0.0:9102\npolicy p 1/1s\n",
	};
	struct config c;
	char err[CONFIG_ERR_LEN];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(parse(&c, cases[i].text, err), 0);
		assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
		if (strcmp(err, cases[i].err) != 0)
			fail_msg("case %zu:\n  got  %s\n  want %s", i, err, cases[i].err);
		config_release(&c);
	}
	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_int_equal(parse(&c, good[i], err), 0);
		if (config_validate(&c, err, sizeof(err)) != 0)
			fail_msg("case %zu: %s", i, err);
		config_release(&c);
	}

	/* Flags write fields directly: validate re-checks their shape, and names
	 * the file when there is one. */
	assert_int_equal(parse(&c, "policy p 1/1s\n", err), 0);
	snprintf(c.path, sizeof(c.path), "/etc/x.conf");
	snprintf(c.redis, sizeof(c.redis), "redis://:hunter2@nohost:0");
	assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
	assert_null(strstr(err, "hunter2"));
	assert_non_null(strstr(err, "/etc/x.conf: redis: port must be 1..65535"));
	snprintf(c.redis, sizeof(c.redis), "redis://127.0.0.1:6379/0");
	snprintf(c.listen, sizeof(c.listen), "nowhere");
	assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
	assert_string_equal(err, "/etc/x.conf: listen 'nowhere': missing port");
	snprintf(c.listen, sizeof(c.listen), "127.0.0.1:1");
	c.threads = 0;
	assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
	assert_string_equal(err, "/etc/x.conf: threads must be 1..64");
	c.threads = 1;
	c.redis_timeout_ms = 0;
	assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
	assert_string_equal(err, "/etc/x.conf: redis-timeout must be 1ms..60s");
	config_release(&c);
}

/* A second text layers on the first: overrides join, duplicates are caught. */
static void test_layered(void **state)
{
	struct config c;
	char err[CONFIG_ERR_LEN];
	static const char a[] = "policy t 3/1s\noverride t M 1/1s\noverride t C 1/1s\n";
	static const char b[] = "override t A 2/1s\noverride t Z 2/1s\nthreads 2\n";
	static const char dup[] = "override t C 9/1s\n";
	static const char dup_policy[] = "policy t 1/1m\n";

	(void)state;
	config_init(&c);
	assert_int_equal(config_parse(&c, "a", a, strlen(a), err, sizeof(err)), 0);
	assert_int_equal(config_parse(&c, "b", b, strlen(b), err, sizeof(err)), 0);
	assert_int_equal(c.policies[0].noverrides, 4);
	assert_memory_equal(c.policies[0].overrides[0].key, "A", 1);
	assert_memory_equal(c.policies[0].overrides[1].key, "C", 1);
	assert_memory_equal(c.policies[0].overrides[2].key, "M", 1);
	assert_memory_equal(c.policies[0].overrides[3].key, "Z", 1);
	assert_int_equal(config_parse(&c, "c", dup, strlen(dup), err, sizeof(err)), -1);
	assert_string_equal(err, "c:1: duplicate override 'C' for policy 't'");
	assert_int_equal(config_parse(&c, "d", dup_policy, strlen(dup_policy), err, sizeof(err)), -1);
	assert_string_equal(err, "d:1: duplicate policy 't'");
	config_release(&c);
}

/* Many overrides: growth, sorting and lookup all hold. */
static void test_many_overrides(void **state)
{
	struct config c;
	char err[CONFIG_ERR_LEN];
	char *text = malloc(64 * 1024);
	size_t len = 0, i;
	const struct window_limit *l;
	unsigned nwin;

	(void)state;
	assert_non_null(text);
	len += (size_t)sprintf(text + len, "policy t 3/1s\n");
	for (i = 1000; i > 0; i--)
		len += (size_t)sprintf(text + len, "override t ACC-%zu %zu/1s\n", i, i);
	config_init(&c);
	assert_int_equal(config_parse(&c, "t", text, len, err, sizeof(err)), 0);
	assert_int_equal(c.policies[0].noverrides, 1000);
	for (i = 1; i <= 1000; i++) {
		char key[32];
		int n = snprintf(key, sizeof(key), "ACC-%zu", i);

		l = window_limits_for(&c.policies[0], key, (size_t)n, &nwin);
		assert_int_equal(l[0].limit, i);
	}
	l = window_limits_for(&c.policies[0], "ACC-0", 5, &nwin);
	assert_int_equal(l[0].limit, 3);
	free(text);
	config_release(&c);
}

static void test_deny_cache_switch(void **state)
{
	static const char text[] = "deny-cache off\npolicy transfer 3/1s\n";
	struct config c;
	char err[CONFIG_ERR_LEN];

	(void)state;
	config_init(&c);
	assert_int_equal(config_parse(&c, "t.conf", text, sizeof(text) - 1, err, sizeof(err)), 0);
	assert_false(c.deny_cache);
	config_release(&c);
}

/* The TLS spellings: rediss://, cluster+tls://, sentinel+tls:// parse in
 * every build (the URL grammar is one); whether the build may use them is
 * config's question (test_tls_directives). */
static void test_redis_url_tls(void **state)
{
	struct redis_url u, v;
	char err[CONFIG_ERR_LEN];

	(void)state;
	assert_int_equal(redis_url_parse("rediss://u:p@cache.example.com/2", &u, err, sizeof(err)), 0);
	assert_true(u.tls);
	assert_int_equal(u.mode, REDIS_URL_TCP);
	assert_string_equal(u.hosts[0].host, "cache.example.com");
	assert_int_equal(u.hosts[0].port, 6379);
	assert_int_equal(u.db, 2);
	assert_string_equal(u.addr, "tls:cache.example.com:6379/2");
	assert_int_equal(redis_url_parse("redis://u:p@cache.example.com/2", &v, err, sizeof(err)), 0);
	assert_false(v.tls);
	assert_false(redis_url_same(&u, &v));
	redis_url_wipe(&u);
	redis_url_wipe(&v);

	assert_int_equal(redis_url_parse("cluster+tls://a:7000,[::1]:7001", &u, err, sizeof(err)), 0);
	assert_true(u.tls);
	assert_int_equal(u.mode, REDIS_URL_CLUSTER);
	assert_int_equal(u.nhosts, 2);
	assert_string_equal(u.addr, "tls:cluster://a:7000,[::1]:7001");

	assert_int_equal(redis_url_parse("sentinel+tls://s1,s2:26380/mymaster", &u, err, sizeof(err)), 0);
	assert_true(u.tls);
	assert_int_equal(u.mode, REDIS_URL_SENTINEL);
	assert_int_equal(u.hosts[0].port, 26379);
	assert_string_equal(u.addr, "tls:sentinel://s1:26379,s2:26380/mymaster");

	assert_int_equal(redis_url_parse("rediss://a,b", &u, err, sizeof(err)), -1);
	assert_string_equal(err, "one host only (use cluster+tls:// or sentinel+tls:// for several)");
	assert_int_equal(redis_url_parse("redis+tls://a", &u, err, sizeof(err)), -1);
	assert_int_equal(redis_url_parse("unix+tls:///x", &u, err, sizeof(err)), -1);
	assert_int_equal(redis_url_parse("rediss://", &u, err, sizeof(err)), -1);
}

/* Parse <text> and validate; <err> holds the reason on -1. */
static int parse_validate(const char *text, char *err)
{
	struct config c;
	int rc;

	rc = parse(&c, text, err);
	if (rc == 0)
		rc = config_validate(&c, err, CONFIG_ERR_LEN);
	config_release(&c);
	return rc;
}

/* redis-tls-*: on a build without TLS every one (and a TLS URL) is an
 * error that says how to build with TLS; with TLS, files must exist and be
 * readable at parse time, the URL must be a TLS one, cert and key go
 * together. No message repeats a URL (it may hold a password). */
static void test_tls_directives(void **state)
{
	static const char *const directives[] = {
		"redis-tls-ca", "redis-tls-ca-dir", "redis-tls-cert", "redis-tls-key",
		"redis-tls-server-name", "redis-tls-verify",
	};
	char dir[] = "/tmp/test_config_tls.XXXXXX", ca[64], key[64], text[512];
	char err[CONFIG_ERR_LEN];
	struct config c;
	size_t i;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
	snprintf(key, sizeof(key), "%s/key.pem", dir);
	f = fopen(ca, "w");
	assert_non_null(f);
	fclose(f);
	f = fopen(key, "w");
	assert_non_null(f);
	fclose(f);

	if (!SPOA_TLS) {
		assert_int_equal(parse(&c, "\nredis rediss://u:s3cret@h:6380\n", err), -1);
		assert_string_equal(err, "t.conf:2: redis: a TLS URL: this build has no TLS; "
		                    "build with make WITH_TLS=1");
		config_release(&c);
		assert_int_equal(parse(&c, "redis cluster+tls://a:1\n", err), -1);
		assert_non_null(strstr(err, "this build has no TLS"));
		config_release(&c);
		for (i = 0; i < sizeof(directives) / sizeof(directives[0]); i++) {
			snprintf(text, sizeof(text), "policy p 1/s\n%s %s\n", directives[i],
			         strstr(directives[i], "verify") ? "on" : ca);
			assert_int_equal(parse(&c, text, err), -1);
			snprintf(text, sizeof(text), "t.conf:2: %s: this build has no TLS; "
			         "build with make WITH_TLS=1", directives[i]);
			assert_string_equal(err, text);
			config_release(&c);
		}
		goto out;
	}

	assert_int_equal(parse(&c, "policy p 1/s\nredis rediss://h\n", err), 0);
	assert_true(c.tls.verify);
	assert_false(c.tls.any);
	config_release(&c);
	snprintf(text, sizeof(text), "policy p 1/s\nredis rediss://h\nredis-tls-ca %s\n"
	         "redis-tls-ca-dir %s\nredis-tls-cert %s\nredis-tls-key %s\n"
	         "redis-tls-server-name redis.example.com\nredis-tls-verify off\n", ca, dir, ca, key);
	assert_int_equal(parse(&c, text, err), 0);
	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
	assert_string_equal(c.tls.ca, ca);
	assert_string_equal(c.tls.ca_dir, dir);
	assert_string_equal(c.tls.key, key);
	assert_string_equal(c.tls.server_name, "redis.example.com");
	assert_false(c.tls.verify);
	config_release(&c);

	assert_int_equal(parse(&c, "redis-tls-ca /nonexistent/ca.pem\n", err), -1);
	assert_string_equal(err, "t.conf:1: redis-tls-ca '/nonexistent/ca.pem': no such file");
	config_release(&c);
	snprintf(text, sizeof(text), "redis-tls-ca %s\n", dir);
	assert_int_equal(parse(&c, text, err), -1);
	assert_non_null(strstr(err, "not a regular file"));
	config_release(&c);
	snprintf(text, sizeof(text), "redis-tls-ca-dir %s\n", ca);
	assert_int_equal(parse(&c, text, err), -1);
	assert_non_null(strstr(err, "not a directory"));
	config_release(&c);
	assert_int_equal(parse(&c, "redis-tls-server-name bad/name\n", err), -1);
	assert_string_equal(err, "t.conf:1: redis-tls-server-name must be a host name; got 'bad/name'");
	config_release(&c);
	assert_int_equal(parse(&c, "redis-tls-verify maybe\n", err), -1);
	assert_string_equal(err, "t.conf:1: redis-tls-verify must be on or off; got 'maybe'");
	config_release(&c);

	snprintf(text, sizeof(text), "policy p 1/s\nredis redis://u:s3cret@h\nredis-tls-ca %s\n", ca);
	assert_int_equal(parse_validate(text, err), -1);
	assert_null(strstr(err, "s3cret"));
	assert_non_null(strstr(err, "the redis URL is not TLS"));
	snprintf(text, sizeof(text), "policy p 1/s\nredis rediss://h\nredis-tls-cert %s\n", ca);
	assert_int_equal(parse_validate(text, err), -1);
	assert_non_null(strstr(err, "redis-tls-cert and redis-tls-key go together"));
	snprintf(text, sizeof(text), "policy p 1/s\nredis sentinel+tls://s/m\nredis-tls-cert %s\n"
	         "redis-tls-key %s\n", ca, key);
	assert_int_equal(parse_validate(text, err), 0);
out:
	unlink(ca);
	unlink(key);
	rmdir(dir);
}

/* A leading UTF-8 byte order mark is skipped, anywhere else it is text. */
static void test_bom(void **state)
{
	struct config c;
	char err[CONFIG_ERR_LEN];

	(void)state;
	assert_int_equal(parse(&c, "\xef\xbb\xbfpolicy a 3/1s\nthreads 2\n", err), 0);
	assert_int_equal(c.npolicies, 1);
	assert_string_equal(c.policies[0].name, "a");
	assert_int_equal(c.threads, 2);
	config_release(&c);
	assert_int_equal(parse(&c, "\xef\xbb\xbf", err), 0);
	config_release(&c);
	assert_int_equal(parse(&c, "policy a 3/1s\n\xef\xbb\xbfthreads 2\n", err), -1);
	assert_non_null(strstr(err, "t.conf:2: unknown directive"));
	config_release(&c);
}

/* A window whose limit is not below a longer window's can never decide:
 * parsed, with a warning; a useful combination is not warned about. */
static void test_dead_window_warning(void **state)
{
	struct config c;
	char err[CONFIG_ERR_LEN];

	(void)state;
	assert_int_equal(parse(&c, "policy a 10/1s 5/1m\n", err), 0);
	assert_int_equal(c.nwarnings, 1);
	assert_string_equal(c.warnings, "t.conf:1: warning: policy 'a': 10/1s can never decide: "
	                    "5/1m, a longer window with a limit no larger, always denies first\n");
	config_release(&c);
	/* equal limits: the longer window still decides first */
	assert_int_equal(parse(&c, "policy a 3/1s 100/1h 3/1m\n", err), 0);
	assert_int_equal(c.nwarnings, 1);
	assert_non_null(strstr(c.warnings, "'a': 3/1s can never decide: 3/1m"));
	config_release(&c);
	/* overrides too, with their own line */
	assert_int_equal(parse(&c, "policy a 3/1s 100/1m\noverride a jwt:k 50/1s 20/1m\n", err), 0);
	assert_int_equal(c.nwarnings, 1);
	assert_non_null(strstr(c.warnings, "t.conf:2: warning: override 'jwt:k' of 'a': 50/1s"));
	config_release(&c);
	assert_int_equal(parse(&c, "policy a 3/1s 100/1m 1000/1h\npolicy b 5/10s\n", err), 0);
	assert_int_equal(c.nwarnings, 0);
	assert_string_equal(c.warnings, "");
	config_release(&c);
}

/* A bad redis URL reads the same from the parser (a line of the file) and
 * from config_validate (a --redis flag): one formatter, two prefixes. */
static void test_redis_error_one_text(void **state)
{
	static const char *const bad[] = {
		"http://127.0.0.1:6379", "redis://u:secret@h:6379/x", "sentinel://a:1,b:2",
		"redis://127.0.0.1:0", "rediss://h:6380",
	};
	struct config c;
	char perr[CONFIG_ERR_LEN], verr[CONFIG_ERR_LEN], text[CONFIG_URL_MAX + 64];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(text, sizeof(text), "policy p 1/1s\nredis %s\n", bad[i]);
		if (parse(&c, text, perr) == 0) {      /* rediss:// on a TLS build */
			assert_true(SPOA_TLS);
			config_release(&c);
			continue;
		}
		config_release(&c);
		assert_int_equal(parse(&c, "policy p 1/1s\n", verr), 0);
		snprintf(c.path, sizeof(c.path), "f.conf");
		snprintf(c.redis, sizeof(c.redis), "%s", bad[i]);
		assert_int_equal(config_validate(&c, verr, sizeof(verr)), -1);
		config_release(&c);
		assert_true(strncmp(perr, "t.conf:2: redis: ", 17) == 0);
		assert_true(strncmp(verr, "f.conf: redis: ", 15) == 0);
		assert_string_equal(perr + 10, verr + 8);
		assert_null(strstr(perr, "secret"));
	}
}

/* An override key without the identity kind HAProxy puts before every
 * account (jwt:, key:, cert:) never matches: parsed, with a warning naming
 * the line and the key it should have been. */
static void test_override_kind_warning(void **state)
{
	static const char *const good[] = { "jwt:ACC-1", "key:PARTNER-1", "cert:svc-billing" };
	static const char *const bad[] = { "ACC-PARTNER", "jwt", "jwt:", "JWT:ACC-1", "key-1", "certs:x" };
	struct config c;
	char err[CONFIG_ERR_LEN], text[256];
	size_t i;

	(void)state;
	assert_int_equal(parse(&c, "policy payout 10/1m shadow\noverride payout ACC-PARTNER 100/1m\n", err), 0);
	assert_int_equal(c.policies[0].noverrides, 1);
	assert_int_equal(c.nwarnings, 1);
	assert_string_equal(c.warnings, "t.conf:2: warning: override 'ACC-PARTNER' of 'payout': the key "
	                    "has no identity kind (jwt:, key:, cert: or ip:), so it never matches a key the "
	                    "shipped HAProxy block sends (e.g. 'jwt:ACC-PARTNER')\n");
	config_release(&c);
	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		snprintf(text, sizeof(text), "policy p 10/1m\noverride p %s 100/1m\n", good[i]);
		assert_int_equal(parse(&c, text, err), 0);
		assert_int_equal(c.nwarnings, 0);
		config_release(&c);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(text, sizeof(text), "policy p 10/1m\noverride p %s 100/1m\n", bad[i]);
		assert_int_equal(parse(&c, text, err), 0);
		assert_int_equal(c.nwarnings, 1);
		assert_non_null(strstr(c.warnings, "t.conf:2: warning: override '"));
		config_release(&c);
	}
}

/* Many warnings: the buffer keeps whole lines, the count keeps them all. */
static void test_many_warnings(void **state)
{
	struct config c;
	char err[CONFIG_ERR_LEN], text[64 * 40];
	size_t o = 0;
	unsigned i;

	(void)state;
	for (i = 0; i < 60; i++)
		o += (size_t)snprintf(text + o, sizeof(text) - o, "policy p%u 9/1s 1/1m\n", i);
	assert_int_equal(parse(&c, text, err), 0);
	assert_int_equal(c.nwarnings, 60);
	assert_true(strlen(c.warnings) < sizeof(c.warnings));
	assert_int_equal(c.warnings[strlen(c.warnings) - 1], '\n');
	config_release(&c);
}

static void test_copy(void **state)
{
	struct config c, d;
	char err[CONFIG_ERR_LEN];

	(void)state;
	assert_int_equal(parse(&c, "policy t 3/1s\npolicy u 1/1m\noverride t K 5/1s\n"
	                           "override u L 2/1m\n", err), 0);
	assert_int_equal(config_copy(&d, &c), 0);
	assert_ptr_not_equal(d.policies[0].overrides, c.policies[0].overrides);
	assert_int_equal(d.policies[0].noverrides, 1);
	assert_memory_equal(d.policies[1].overrides[0].key, "L", 1);
	config_release(&c);
	/* The copy survives the original. */
	assert_int_equal(d.policies[0].overrides[0].win[0].limit, 5);
	assert_int_equal(config_validate(&d, err, sizeof(err)), 0);
	config_release(&d);
}

/* The one decimal parser (config, URLs, redirects, sentinel, /proc). */
static void test_decimal(void **state)
{
	uint64_t v = 7;

	(void)state;
	assert_int_equal(decimal_parse("0", 1, 10, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(decimal_parse("65535", 5, 65535, &v), 0);
	assert_int_equal(v, 65535);
	assert_int_equal(decimal_parse("18446744073709551615", 20, UINT64_MAX, &v), 0);
	assert_true(v == UINT64_MAX);
	v = 7;
	assert_int_equal(decimal_parse("65536", 5, 65535, &v), -2);
	assert_int_equal(decimal_parse("18446744073709551616", 20, UINT64_MAX, &v), -2);
	assert_int_equal(decimal_parse("", 0, 10, &v), -1);
	assert_int_equal(decimal_parse("+1", 2, 10, &v), -1);
	assert_int_equal(decimal_parse("-1", 2, 10, &v), -1);
	assert_int_equal(decimal_parse(" 1", 2, 10, &v), -1);
	assert_int_equal(decimal_parse("1x", 2, 10, &v), -1);
	assert_int_equal(decimal_parse("0x1", 3, 10, &v), -1);
	assert_int_equal(v, 7);   /* left alone on failure */
	/* only <len> bytes are read */
	assert_int_equal(decimal_parse("12junk", 2, 99, &v), 0);
	assert_int_equal(v, 12);
}

/* decimal_format: every length, the edges, and no byte past its length. */
static void test_decimal_format(void **state)
{
	static const struct { uint64_t v; const char *s; } cases[] = {
		{ 0, "0" }, { 9, "9" }, { 10, "10" }, { 99, "99" }, { 100, "100" },
		{ 1234567890, "1234567890" }, { UINT64_MAX, "18446744073709551615" },
	};
	char buf[DECIMAL_U64_LEN + 1];
	size_t i, n;
	uint64_t back;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(buf, '#', sizeof(buf));
		n = decimal_format(cases[i].v, buf);
		assert_int_equal(n, strlen(cases[i].s));
		assert_memory_equal(buf, cases[i].s, n);
		assert_int_equal(buf[n], '#');
		assert_int_equal(decimal_parse(buf, n, UINT64_MAX, &back), 0);
		assert_true(back == cases[i].v);
	}
}

/* check_routes <text> against "policy transfer 3/1s", "policy reads 10/1m
 * on-redis-error=allow":
 * the route count, or -1 with <err> set. */
static int check_routes(const char *text, char *err)
{
	struct config c;
	int rc;

	assert_int_equal(parse(&c, "policy transfer 3/1s\npolicy reads 10/1m on-redis-error=allow\n", err), 0);
	rc = config_check_routes(&c, "routes.map", text, strlen(text), err, CONFIG_ERR_LEN);
	config_release(&c);
	return rc;
}

static void test_routes(void **state)
{
	static const struct { const char *text, *err; } bad[] = {
		{ "POST/transfers transfer\nPOST/exports exports\n",
		  "routes.map:2: route 'POST/exports' names policy 'exports', which the agent's config does not define" },
		{ "POST/transfers\n", "routes.map:1: route 'POST/transfers' names no policy" },
		{ "/transfers transfer\n", "routes.map:1: route '/transfers' must be [<host>:]<METHOD>/<path prefix>[?] or [<host>:]*, e.g. POST/transfers" },
		{ "POST transfer\n", "routes.map:1: route 'POST' must be [<host>:]<METHOD>/<path prefix>[?] or [<host>:]*, e.g. POST/transfers" },
		{ "post/x transfer\n", "routes.map:1: route 'post/x': the method must be upper case letters" },
		{ "GET/a reads jws\n", "routes.map:1: route 'GET/a': identity must be jwt, key, cert, ip or <jwt|key|cert>|ip; got 'jws'" },
		{ "GET/a reads key 0\n", "routes.map:1: route 'GET/a': cost must be an integer 1..4294967295; got '0'" },
		{ "GET/a reads key 2x\n", "routes.map:1: route 'GET/a': cost must be an integer 1..4294967295; got '2x'" },
		{ "GET/a reads key 99999999999999999999\n",
		  "routes.map:1: route 'GET/a': cost must be an integer 1..4294967295; got '99999999999999999999'" },
		{ "GET/a reads key 1 x\n", "routes.map:1: route 'GET/a': too many words (<policy> [<identity> [<cost>]] [anon=<policy>] [fail=open|closed])" },
		{ "GET/a reads ip|ip\n", "routes.map:1: route 'GET/a': identity must be jwt, key, cert, ip or <jwt|key|cert>|ip; got 'ip|ip'" },
		{ "GET/a reads jwt anon=transfer\n", "routes.map:1: route 'GET/a': anon= needs the identity <kind>|ip" },
		{ "GET/a reads jwt|ip anon=nope\n", "routes.map:1: route 'GET/a' names anon policy 'nope', which the agent's config does not define" },
		{ "GET/a transfer fail=open\n", "routes.map:1: route 'GET/a': fail=open, but policy 'transfer' has no on-redis-error=allow" },
		{ "GET/a reads jwt|ip anon=transfer fail=open\n", "routes.map:1: route 'GET/a': fail=open, but policy 'transfer' has no on-redis-error=allow" },
		{ "GET/a reads fail=maybe\n", "routes.map:1: route 'GET/a': unknown word 'fail=maybe' (anon=<policy>, fail=open or fail=closed)" },
		{ "GET/a reads fail=open jwt\n", "routes.map:1: route 'GET/a': too many words (<policy> [<identity> [<cost>]] [anon=<policy>] [fail=open|closed])" },
		{ "GET/a - jwt\n", "routes.map:1: route 'GET/a': an exempt route ('-') takes no other word" },
		{ "GET/a?b reads\n", "routes.map:1: route 'GET/a?b': '?' only ends a key (the exact path)" },
		{ "API.x:GET/a reads\n", "routes.map:1: route 'API.x:GET/a': the host must be lower case letters, digits, '.' and '-', without a port" },
		{ ":GET/a reads\n", "routes.map:1: route ':GET/a': an empty host before ':'" },
		{ "GET/health -\nGET/health? reads\n",
		  "routes.map:2: route 'GET/health?' never matches: line 1 ('GET/health') comes first and is a prefix of it" },
		{ "* reads ip\n* transfer ip\n", "routes.map:2: route '*' never matches: line 1 ('*') comes first and is a prefix of it" },
		{ "GET/a reads # all reads\n",
		  "routes.map:1: a comment must be a line of its own ('#' after a route is part of its value)" },
		{ "# c\nGET/accounts/ reads\nGET/accounts/vip transfer\n",
		  "routes.map:3: route 'GET/accounts/vip' never matches: line 2 ('GET/accounts/') comes first and is a prefix of it" },
	};
	char err[CONFIG_ERR_LEN];
	size_t i;

	(void)state;
	assert_int_equal(check_routes("", err), 0);
	assert_int_equal(check_routes("# only a comment\n\n   \n", err), 0);
	assert_int_equal(check_routes("# routes\nPOST/transfers transfer\n"
	                              "GET/accounts/vip transfer cert 5\n"
	                              "\tGET/accounts/  reads  key\r\nGET/x reads", err), 4);
	/* the forms of a whole API: exempt exact path, host-scoped lines, an
	 * address identity, the account or else the address, defaults */
	assert_int_equal(check_routes("GET/healthz? -\napi.example.com:GET/tip reads ip 2 fail=open\n"
	                              "GET/tip reads jwt|ip anon=reads fail=open\nPOST/x transfer key|ip 3 fail=closed\n"
	                              "api.example.com:* transfer\n* reads ip fail=open\n", err), 6);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(check_routes(bad[i].text, err), -1);
		assert_string_equal(err, bad[i].err);
	}
}

/* The warnings check_routes' config gets from <text> (none: ""), into
 * <out> (CONFIG_WARN_LEN bytes); the route count must be <nroutes>. */
static void routes_warnings(const char *text, int nroutes, char *out)
{
	struct config c;
	char err[CONFIG_ERR_LEN];

	assert_int_equal(parse(&c, "policy transfer 3/1s\npolicy reads 10/1m on-redis-error=allow\n", err), 0);
	assert_int_equal(config_check_routes(&c, "routes.map", text, strlen(text), err, CONFIG_ERR_LEN), nroutes);
	snprintf(out, CONFIG_WARN_LEN, "%s", c.warnings);
	config_release(&c);
}

/* A method with no line of its own takes the line of the first of GET,
 * POST, PUT, PATCH, DELETE that has one for the path: a line that so takes
 * methods from a path another line limits more strictly is a warning, with
 * its file:line, naming the methods. */
static void test_routes_methods(void **state)
{
	static const struct { const char *text; int n; const char *warn; } cases[] = {
		/* issue's case: GET by address before POST with a key */
		{ "POST/api/v1/orders transfer key\nGET/api/v1/orders reads ip\n", 2,
		  "routes.map:2: warning: route 'GET/api/v1/orders' (by address) also decides PUT, PATCH, DELETE and methods no line names on its path, which line 1 ('POST/api/v1/orders') limits more strictly (a credential): give them lines of their own\n" },
		/* a shorter GET prefix, exempt; the named methods are left out */
		{ "GET/api/ -\nPOST/api/orders transfer\nDELETE/api/orders transfer\n", 3,
		  "routes.map:1: warning: route 'GET/api/' (exempt) also decides PUT, PATCH and methods no line names on its path, which line 2 ('POST/api/orders') limits more strictly (a credential): give them lines of their own\n" },
		/* no GET line: GET itself takes POST's line */
		{ "POST/x reads jwt|ip\nPUT/x transfer key\n", 2,
		  "routes.map:1: warning: route 'POST/x' (a credential or the address) also decides GET, PATCH, DELETE and methods no line names on its path, which line 2 ('PUT/x') limits more strictly (a credential): give them lines of their own\n" },
		/* host-scoped GET line against a host-less POST line */
		{ "api.example.com:GET/o reads ip\nPOST/o transfer\n", 2,
		  "routes.map:1: warning: route 'api.example.com:GET/o' (by address) also decides PUT, PATCH, DELETE and methods no line names on its path, which line 2 ('POST/o') limits more strictly (a credential): give them lines of their own\n" },
		/* every method named: nothing to say */
		{ "GET/o reads ip\nPOST/o transfer\nPUT/o transfer\nPATCH/o transfer\nDELETE/o transfer\n", 5, "" },
		/* the stricter line first in method order: it is the one taken */
		{ "GET/o transfer key\nPOST/o reads ip\n", 2, "" },
		/* paths that never meet, hosts that never meet, exact paths */
		{ "GET/a reads ip\nPOST/b transfer\n", 2, "" },
		{ "a.example:GET/o reads ip\nb.example:POST/o transfer\n", 2, "" },
		{ "GET/o? reads ip\nPOST/o/x transfer\n", 2, "" },
		/* a method outside the fallback order (PURGE) limits itself alone */
		{ "GET/o reads ip\nPURGE/o transfer\n", 2, "" },
		/* the same strictness: no warning */
		{ "GET/o reads key\nPOST/o transfer jwt\n", 2, "" },
		/* the default line takes part in no fallback */
		{ "* reads ip\nPOST/o transfer\n", 2, "" },
	};
	char warn[CONFIG_WARN_LEN];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		routes_warnings(cases[i].text, cases[i].n, warn);
		assert_string_equal(warn, cases[i].warn);
	}
}

/* The shipped routes map names only policies of the shipped agent config. */
static void test_shipped_routes(void **state)
{
	struct config c;
	char err[CONFIG_ERR_LEN];

	(void)state;
	config_init(&c);
	if (config_load_file(&c, "etc/ratelimit-spoa.conf", err, sizeof(err)) != 0)
		fail_msg("%s", err);
	if (config_check_routes_file(&c, "haproxy/routes.map", err, sizeof(err)) < 1)
		fail_msg("%s", err);
	assert_string_equal(c.warnings, "");
	assert_int_equal(config_check_routes_file(&c, "haproxy/nope.map", err, sizeof(err)), -1);
	assert_string_equal(err, "haproxy/nope.map: cannot open: No such file or directory");
	config_release(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decimal),
		cmocka_unit_test(test_decimal_format),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_strings),
		cmocka_unit_test(test_durations),
		cmocka_unit_test(test_full),
		cmocka_unit_test(test_etc_file),
		cmocka_unit_test(test_load_file_errors),
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_gcra),
		cmocka_unit_test(test_pools),
		cmocka_unit_test(test_leases),
		cmocka_unit_test(test_pool_reload_window),
		cmocka_unit_test(test_pool_reload_cluster),
		cmocka_unit_test(test_nul_byte),
		cmocka_unit_test(test_error_truncation),
		cmocka_unit_test(test_windows_and_urls),
		cmocka_unit_test(test_redis_url_one_grammar),
		cmocka_unit_test(test_validate),
		cmocka_unit_test(test_layered),
		cmocka_unit_test(test_many_overrides),
		cmocka_unit_test(test_copy),
		cmocka_unit_test(test_bom),
		cmocka_unit_test(test_dead_window_warning),
		cmocka_unit_test(test_redis_error_one_text),
		cmocka_unit_test(test_override_kind_warning),
		cmocka_unit_test(test_many_warnings),
		cmocka_unit_test(test_deny_cache_switch),
		cmocka_unit_test(test_routes),
		cmocka_unit_test(test_routes_methods),
		cmocka_unit_test(test_shipped_routes),
		cmocka_unit_test(test_redis_url_tls),
		cmocka_unit_test(test_tls_directives),
		cmocka_unit_test(test_quotas),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
