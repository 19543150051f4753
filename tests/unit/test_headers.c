/*
 * test_headers - RateLimit-Policy / RateLimit field values
 * (draft-ietf-httpapi-ratelimit-headers-11) as the agent sends them in
 * policy_hdr and ratelimit_hdr: every byte, and every buffer too small.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "headers.h"

static const struct window_limit one[] = { { 3, 1000, 0, 0, 0, 0 } };
static const struct window_limit api[] = { { 10, 1000, 0, 0, 0, 0 }, { 1000, 3600000, 0, 0, 0, 0 } };
static const struct window_limit odd[] = { { 5, 500, 0, 0, 0, 0 }, { 7, 90000, 0, 0, 0, 0 }, { 9, 1500, 0, 0, 0, 0 } };

static void test_window_seconds(void **state)
{
	(void)state;
	assert_int_equal(headers_window_seconds(1000), 1);
	assert_int_equal(headers_window_seconds(500), 1);
	assert_int_equal(headers_window_seconds(1), 1);
	assert_int_equal(headers_window_seconds(1500), 2);
	assert_int_equal(headers_window_seconds(60000), 60);
	assert_int_equal(headers_window_seconds(3600000), 3600);
}

static void test_policy_one_window(void **state)
{
	char buf[HEADERS_POLICY_MAX];
	int n;

	(void)state;
	n = headers_format_policy("transfer", 8, one, 1, buf, sizeof(buf));
	assert_string_equal(buf, "\"transfer\";q=3;w=1");
	assert_int_equal(n, (int)strlen(buf));
}

static void test_policy_several_windows(void **state)
{
	char buf[HEADERS_POLICY_MAX];

	(void)state;
	assert_true(headers_format_policy("api", 3, api, 2, buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "\"api-1s\";q=10;w=1, \"api-1h\";q=1000;w=3600");
	assert_true(headers_format_policy("x", 1, odd, 3, buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "\"x-500ms\";q=5;w=1, \"x-90s\";q=7;w=90, \"x-1500ms\";q=9;w=2");
	/* a quota: named by its period, w its nominal length (a month: 31 days) */
	const struct window_limit quota[] = {
		{ .limit = 10, .window_ms = 1000 },
		{ .limit = 10000, .window_ms = 31 * 86400000ULL, .cal = WINDOW_CAL_MONTH, .anchor = 1 },
	};
	assert_true(headers_format_policy("api", 3, quota, 2, buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "\"api-1s\";q=10;w=1, \"api-month\";q=10000;w=2678400");
}

static void test_ratelimit(void **state)
{
	char buf[HEADERS_RATELIMIT_MAX];

	(void)state;
	assert_true(headers_format_ratelimit("transfer", 8, one, 1, 0, 2, 1, buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "\"transfer\";r=2;t=1");
	/* the deciding window of a multi-window policy names its own item */
	assert_true(headers_format_ratelimit("api", 3, api, 2, 1, 0, 3599, buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "\"api-1h\";r=0;t=3599");
	assert_true(headers_format_ratelimit("api", 3, api, 2, 0, 9, 0, buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "\"api-1s\";r=9;t=0");
}

/* a pool is its own item ("pool-<name>"), after the policy's; every
 * buffer too small for it is refused, never cut */
static void test_pool_items(void **state)
{
	struct window_pool pool = { .name = "transfers", .name_len = 9, .limit = 5,
	                            .window_ms = 60000, .headroom = 2 };
	char buf[HEADERS_POLICY_MAX];
	size_t cap;
	int n, m;

	(void)state;
	n = headers_format_policy("transfer", 8, one, 1, buf, sizeof(buf));
	n = headers_append_pool_policy(&pool, buf, sizeof(buf), (size_t)n);
	assert_string_equal(buf, "\"transfer\";q=3;w=1, \"pool-transfers\";q=5;w=60");
	assert_int_equal(n, (int)strlen(buf));
	m = headers_format_pool_ratelimit(&pool, 0, 42, buf, sizeof(buf));
	assert_string_equal(buf, "\"pool-transfers\";r=0;t=42");
	assert_int_equal(m, (int)strlen(buf));
	for (cap = 0; cap <= (size_t)m; cap++)
		assert_int_equal(headers_format_pool_ratelimit(&pool, 0, 42, buf, cap), -1);
	for (cap = 19; cap <= (size_t)n; cap++) {
		assert_int_equal(headers_format_policy("transfer", 8, one, 1, buf, cap), 18);
		assert_int_equal(headers_append_pool_policy(&pool, buf, cap, 18), -1);
	}
	assert_int_equal(headers_format_pool_ratelimit(&pool, -1, 1, buf, sizeof(buf)), -1);
}

static void test_refused(void **state)
{
	char buf[HEADERS_POLICY_MAX];

	(void)state;
	assert_int_equal(headers_format_policy("api", 3, api, 0, buf, sizeof(buf)), -1);
	assert_int_equal(headers_format_policy("", 0, api, 2, buf, sizeof(buf)), -1);
	assert_int_equal(headers_format_policy("api", 3, api, WINDOW_MAX_WINDOWS + 1, buf, sizeof(buf)), -1);
	assert_int_equal(headers_format_ratelimit("api", 3, api, 2, 2, 0, 0, buf, sizeof(buf)), -1);
	assert_int_equal(headers_format_ratelimit("api", 3, api, 2, 0, -1, 0, buf, sizeof(buf)), -1);
	assert_int_equal(headers_format_ratelimit("api", 3, api, 2, 0, 0, -1, buf, sizeof(buf)), -1);
}

/* Every capacity below the exact size fails without writing past it; the
 * exact size (length + NUL) succeeds. */
static void test_every_short_buffer(void **state)
{
	char buf[HEADERS_POLICY_MAX + 8];
	size_t want, cap;

	(void)state;
	want = (size_t)headers_format_policy("api", 3, api, 2, buf, sizeof(buf));
	for (cap = 0; cap <= want; cap++) {
		memset(buf, 'Z', sizeof(buf));
		assert_int_equal(headers_format_policy("api", 3, api, 2, buf, cap), -1);
		assert_int_equal(buf[cap], 'Z');
	}
	assert_int_equal(headers_format_policy("api", 3, api, 2, buf, want + 1), (int)want);
	want = (size_t)headers_format_ratelimit("api", 3, api, 2, 1, 12, 34, buf, sizeof(buf));
	for (cap = 0; cap <= want; cap++) {
		memset(buf, 'Z', sizeof(buf));
		assert_int_equal(headers_format_ratelimit("api", 3, api, 2, 1, 12, 34, buf, cap), -1);
		assert_int_equal(buf[cap], 'Z');
	}
	assert_int_equal(headers_format_ratelimit("api", 3, api, 2, 1, 12, 34, buf, want + 1), (int)want);
}

/* The largest policy the config accepts fits the documented maximum. */
static void test_largest_fits(void **state)
{
	struct window_limit big[WINDOW_MAX_WINDOWS];
	char name[WINDOW_NAME_MAX];
	char buf[HEADERS_POLICY_MAX];
	unsigned i;

	(void)state;
	memset(name, 'n', sizeof(name));
	memset(big, 0, sizeof(big));   /* (no calendar quota: the other fields 0) */
	for (i = 0; i < WINDOW_MAX_WINDOWS; i++) {
		big[i].limit = INT64_MAX;
		big[i].window_ms = UINT64_MAX - i;  /* printed in ms: the longest unit */
	}
	assert_true(headers_format_policy(name, sizeof(name), big, WINDOW_MAX_WINDOWS,
	                                  buf, sizeof(buf)) > 0);
	assert_true(headers_format_ratelimit(name, sizeof(name), big, WINDOW_MAX_WINDOWS, 3,
	                                     INT64_MAX, INT64_MAX, buf, HEADERS_RATELIMIT_MAX) > 0);
}

/* The lean answer's "vars" argument: names and "ietf" to a mask, status
 * always in, separators and unknown names tolerated. */
static void test_parse_vars(void **state)
{
	const unsigned st = HEADERS_VAR_BIT(HEADERS_VAR_STATUS);
	const unsigned ietf = st | HEADERS_VAR_BIT(HEADERS_VAR_RETRY_AFTER) |
	                      HEADERS_VAR_BIT(HEADERS_VAR_REASON) |
	                      HEADERS_VAR_BIT(HEADERS_VAR_POLICY_HDR) |
	                      HEADERS_VAR_BIT(HEADERS_VAR_RATELIMIT_HDR);
	const char *all = "status limit remaining reset retry_after reason window policy_hdr ratelimit_hdr";

	(void)state;
	assert_int_equal(headers_parse_vars("", 0), st);
	assert_int_equal(headers_parse_vars("ietf", 4), ietf);
	assert_int_equal(headers_parse_vars(all, strlen(all)), HEADERS_VARS_ALL);
	assert_int_equal(headers_parse_vars("limit", 5), st | HEADERS_VAR_BIT(HEADERS_VAR_LIMIT));
	assert_int_equal(headers_parse_vars("reset,,remaining", 16),
	                 st | HEADERS_VAR_BIT(HEADERS_VAR_RESET) | HEADERS_VAR_BIT(HEADERS_VAR_REMAINING));
	assert_int_equal(headers_parse_vars("ietf+window|bogus", 17), ietf | HEADERS_VAR_BIT(HEADERS_VAR_WINDOW));
	/* a prefix or a longer name is not a name */
	assert_int_equal(headers_parse_vars("lim limits ietff", 16), st);
	/* the length bounds the read: "limit" cut to "lim" */
	assert_int_equal(headers_parse_vars("limit", 3), st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_window_seconds),
		cmocka_unit_test(test_policy_one_window),
		cmocka_unit_test(test_policy_several_windows),
		cmocka_unit_test(test_ratelimit),
		cmocka_unit_test(test_pool_items),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_every_short_buffer),
		cmocka_unit_test(test_largest_fits),
		cmocka_unit_test(test_parse_vars),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
