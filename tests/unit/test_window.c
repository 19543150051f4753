/*
 * test_window - policy math: keys, script argv, reply -> decision, merge.
 *
 * Replies are canned RESP text turned into the struct window_reply the
 * limiter hands window.c (an error's text, or an array's integers): no
 * hiredis here.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "window.h"

/* A one-window policy <name> of <limit> per <ms> into <p> (no allocation). */
static void policy_make(struct window_policy *p, const char *name, uint64_t limit,
                        uint64_t ms)
{
	memset(p, 0, sizeof(*p));
	p->name_len = strlen(name);
	memcpy(p->name, name, p->name_len);
	p->nwin = 1;
	p->win[0].limit = limit;
	p->win[0].window_ms = ms;
}

/* The view of RESP text <resp> (borrowed from it) as the limiter builds
 * it from hiredis's reply: an error's text, an array of integers only, or
 * "other" (nil, status, string, a mixed array). */
static struct window_reply view_of(const char *resp)
{
	struct window_reply v;
	const char *p, *eol = strstr(resp, "\r\n");
	long long n, i;

	memset(&v, 0, sizeof(v));
	assert_non_null(eol);
	if (resp[0] == '-') {
		v.kind = WINDOW_REPLY_ERROR;
		v.str = resp + 1;
		v.len = (size_t)(eol - resp - 1);
		return v;
	}
	if (resp[0] != '*' || (n = strtoll(resp + 1, NULL, 10)) < 0)
		return v;
	for (i = 0, p = eol + 2; i < n; i++) {
		if (*p != ':')
			return v;
		if (i < WINDOW_REPLY_INTS)
			v.v[i] = strtoll(p + 1, NULL, 10);
		p = strstr(p, "\r\n");
		assert_non_null(p);
		p += 2;
	}
	v.kind = WINDOW_REPLY_INTEGERS;
	v.n = (size_t)n;
	return v;
}

/* Append a window of <limit> per <ms> to <p>. */
static void policy_add(struct window_policy *p, uint64_t limit, uint64_t ms)
{
	p->win[p->nwin].limit = limit;
	p->win[p->nwin].window_ms = ms;
	p->nwin++;
}

/* Decide <resp> under <p> into <d>; returns window_decide_reply's result. */
static int decide(const struct window_policy *p, const char *resp, struct window_decision *d)
{
	struct window_reply v = view_of(resp);

	return window_decide_reply(p, &v, d);
}

static void assert_arg(const struct window_args *a, int i, const char *want)
{
	assert_true(i < a->argc);
	assert_int_equal(a->argvlen[i], strlen(want));
	assert_memory_equal(a->argv[i], want, strlen(want));
}

/* ---- strings ---- */

static void test_strings(void **state)
{
	(void)state;
	assert_string_equal(window_status_str(WINDOW_ALLOW), "allow");
	assert_string_equal(window_status_str(WINDOW_DENY), "deny");
	assert_string_equal(window_status_str(WINDOW_ERROR), "error");
	assert_string_equal(window_status_str(WINDOW_STATUS_COUNT), "unknown");
	assert_string_equal(window_reason_str(WINDOW_REASON_NONE), "");
	assert_string_equal(window_reason_str(WINDOW_REASON_REDIS_UNAVAILABLE), "redis-unavailable");
	assert_string_equal(window_reason_str(WINDOW_REASON_REDIS_TIMEOUT), "redis-timeout");
	assert_string_equal(window_reason_str(WINDOW_REASON_REDIS_ERROR), "redis-error");
	assert_string_equal(window_reason_str(WINDOW_REASON_UNKNOWN_POLICY), "unknown-policy");
	assert_string_equal(window_reason_str(WINDOW_REASON_BAD_KEY), "bad-key");
	assert_string_equal(window_reason_str(WINDOW_REASON_BAD_COST), "bad-cost");
	assert_string_equal(window_reason_str(WINDOW_REASON_SHADOW_DENY), "shadow-deny");
	assert_string_equal(window_reason_str(WINDOW_REASON_OVERLOAD), "overload");
	assert_string_equal(window_reason_str(WINDOW_REASON_COUNT), "");
}

static void test_rounding(void **state)
{
	(void)state;
	assert_int_equal(window_us_to_s_ceil(0), 0);
	assert_int_equal(window_us_to_s_ceil(-5), 0);
	assert_int_equal(window_us_to_s_ceil(1), 1);
	assert_int_equal(window_us_to_s_ceil(999999), 1);
	assert_int_equal(window_us_to_s_ceil(1000000), 1);
	assert_int_equal(window_us_to_s_ceil(1000001), 2);
	assert_int_equal(window_us_to_s_ceil(3600000000LL), 3600);
}

static void test_format_ms(void **state)
{
	char b[32];

	(void)state;
	assert_int_equal(window_format_ms(1000, b, sizeof(b)), 2);
	assert_string_equal(b, "1s");
	window_format_ms(3600000, b, sizeof(b));
	assert_string_equal(b, "1h");
	window_format_ms(86400000, b, sizeof(b));
	assert_string_equal(b, "24h");
	window_format_ms(60000, b, sizeof(b));
	assert_string_equal(b, "1m");
	window_format_ms(90000, b, sizeof(b));
	assert_string_equal(b, "90s");
	window_format_ms(500, b, sizeof(b));
	assert_string_equal(b, "500ms");
	window_format_ms(1500, b, sizeof(b));
	assert_string_equal(b, "1500ms");
	assert_int_equal(window_format_ms(500, b, 5), -1);
	assert_int_equal(window_format_ms(500, b, 6), 5);
}

/* The hand-written formatter gives snprintf's text, length and cut, for
 * every unit, the largest values and every buffer size. */
static void test_format_ms_as_snprintf(void **state)
{
	static const uint64_t v[] = {
		0, 1, 9, 10, 999, 1000, 1001, 59999, 60000, 61000, 3599999, 3600000,
		7200000, 86400000, 604800000, 2592000000ULL, UINT64_MAX, UINT64_MAX - 1,
		(UINT64_MAX / 3600000) * 3600000, 18446744073709000ULL,
	};
	char want[48], got[48];
	size_t i, cap;

	(void)state;
	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		const char *unit = "ms";
		uint64_t div = 1;
		int n;

		if (v[i] && v[i] % 3600000 == 0)
			unit = "h", div = 3600000;
		else if (v[i] && v[i] % 60000 == 0)
			unit = "m", div = 60000;
		else if (v[i] && v[i] % 1000 == 0)
			unit = "s", div = 1000;
		for (cap = 0; cap <= sizeof(want); cap++) {
			memset(want, 'x', sizeof(want));
			memset(got, 'x', sizeof(got));
			n = snprintf(want, cap, "%" PRIu64 "%s", v[i] / div, unit);
			assert_int_equal(window_format_ms(v[i], got, cap),
			                 (size_t)n >= cap ? -1 : n);
			assert_memory_equal(got, want, sizeof(want));
		}
	}
}

/* ---- keys and argv ---- */

static void test_args_single(void **state)
{
	struct window_policy p;
	struct window_args a;
	enum window_reason why = WINDOW_REASON_COUNT;

	(void)state;
	policy_make(&p, "transfer", 3, 1000);
	assert_int_equal(window_build_args(&p, "0123456789abcdef0123456789abcdef01234567",
	                                   "ACC-1001", 8, 1, &a, &why), 0);
	assert_int_equal(why, WINDOW_REASON_NONE);
	assert_int_equal(a.argc, 7);
	assert_int_equal(a.nkeys, 1);
	assert_arg(&a, 0, "EVALSHA");
	assert_arg(&a, 1, "0123456789abcdef0123456789abcdef01234567");
	assert_arg(&a, 2, "1");
	assert_arg(&a, 3, "transfer:limit:v1:{ACC-1001}:1s");
	assert_arg(&a, 4, "1");
	assert_arg(&a, 5, "3");
	assert_arg(&a, 6, "1000");
}

/* A batch joins each decision's keys, then "batch" n and each decision's
 * key count and arguments; a malformed part or n = 0 is refused. */
static void test_args_batch(void **state)
{
	struct window_policy p1, p2;
	struct window_args one[2];
	enum window_reason why;
	const char *argv[WINDOW_BATCH_ARGC(2)];
	size_t argvlen[WINDOW_BATCH_ARGC(2)], i, len = 0;
	char nums[WINDOW_BATCH_NUMS(2)], joined[512];
	int argc;

	(void)state;
	policy_make(&p1, "api", 10, 1000);
	policy_make(&p2, "exp", 5, 60000);
	p2.nwin = 2;
	p2.win[1].limit = 100;
	p2.win[1].window_ms = 3600000;
	assert_int_equal(window_build_args(&p1, "", "A", 1, 1, &one[0], &why), 0);
	assert_int_equal(window_build_args(&p2, "", "B", 1, 3, &one[1], &why), 0);
	argc = window_build_batch(one, 2, "EVALSHA", "sha", 3, argv, argvlen, nums);
	assert_int_equal(argc, 3 + 3 + 2 + 4 + 6);
	for (i = 0; i < (size_t)argc; i++) {
		assert_int_equal(strlen(argv[i]) >= argvlen[i], 1);
		len += (size_t)snprintf(joined + len, sizeof(joined) - len, "%s%.*s", i ? " " : "",
		                        (int)argvlen[i], argv[i]);
	}
	assert_string_equal(joined, "EVALSHA sha 3 api:limit:v1:{A}:1s exp:limit:v1:{B}:1m "
	                    "exp:limit:v1:{B}:1h batch 2 1 1 10 1000 2 3 5 60000 100 3600000");
	assert_int_equal(window_build_batch(one, 0, "EVALSHA", "sha", 3, argv, argvlen, nums), -1);
	one[1].argc--;
	assert_int_equal(window_build_batch(one, 2, "EVALSHA", "sha", 3, argv, argvlen, nums), -1);
}

/* A pooled policy (issue 37): its pool's two keys after the windows', its
 * pair <limit> "pool:<ms>:<headroom>:<account>" after theirs, alone and in
 * a batch beside a plain decision; a cost above the pool's limit is
 * bad-cost; the engines' 7th element names the pool's refusal, and a
 * 7-element reply is not a plain policy's. */
static void test_args_pool(void **state)
{
	struct window_policy p, plain;
	struct window_args one[2];
	struct window_decision d;
	enum window_reason why;
	const char *argv[WINDOW_BATCH_ARGC(2)];
	size_t argvlen[WINDOW_BATCH_ARGC(2)], i, len = 0;
	char nums[WINDOW_BATCH_NUMS(2)], joined[512];
	int argc;

	(void)state;
	policy_make(&p, "transfer", 3, 1000);
	p.pooled = true;
	memcpy(p.pool.name, "transfers", 9);
	p.pool.name_len = 9;
	p.pool.limit = 5;
	p.pool.window_ms = 1000;
	p.pool.headroom = 2;
	assert_int_equal(window_build_args(&p, "sha", "ACC:1}", 6, 1, &one[0], &why), 0);
	assert_int_equal(one[0].argc, 11);
	assert_int_equal(one[0].nkeys, 3);
	assert_arg(&one[0], 2, "3");
	assert_arg(&one[0], 3, "transfer:limit:v1:{ACC:1%7D}:1s");
	assert_arg(&one[0], 4, "transfers:pool:p1:{transfers}");
	assert_arg(&one[0], 5, "transfers:pool:a1:{transfers}");
	assert_arg(&one[0], 6, "1");
	assert_arg(&one[0], 9, "5");
	assert_arg(&one[0], 10, "pool:1000:2:ACC:1}");
	p.win[0].limit = 10;
	assert_int_equal(window_build_args(&p, "sha", "A", 1, 5, &one[1], &why), 0);
	assert_int_equal(window_build_args(&p, "sha", "A", 1, 6, &one[1], &why), -1);
	assert_int_equal(why, WINDOW_REASON_BAD_COST);
	p.win[0].limit = 3;

	policy_make(&plain, "api", 10, 1000);
	assert_int_equal(window_build_args(&plain, "", "B", 1, 1, &one[1], &why), 0);
	argc = window_build_batch(one, 2, "EVALSHA", "sha", 3, argv, argvlen, nums);
	assert_int_equal(argc, 3 + 4 + 2 + 6 + 4);
	for (i = 0; i < (size_t)argc; i++)
		len += (size_t)snprintf(joined + len, sizeof(joined) - len, "%s%.*s", i ? " " : "",
		                        (int)argvlen[i], argv[i]);
	assert_string_equal(joined, "EVALSHA sha 4 transfer:limit:v1:{ACC:1%7D}:1s "
	                    "transfers:pool:p1:{transfers} transfers:pool:a1:{transfers} "
	                    "api:limit:v1:{B}:1s batch 2 3 1 3 1000 5 pool:1000:2:ACC:1} "
	                    "1 1 10 1000");

	/* the replies: 7 integers for a pooled policy, 6 for another */
	assert_int_equal(decide(&p, "*7\r\n:0\r\n:5\r\n:0\r\n:200000\r\n:200000\r\n:1\r\n:1\r\n",
	                        &d), 0);
	assert_int_equal(d.status, WINDOW_DENY);
	assert_int_equal(d.reason, WINDOW_REASON_POOL_FULL);
	assert_int_equal(d.window, WINDOW_MAX_WINDOWS);
	assert_false(window_deny_holds(&p, 1, &d));
	assert_int_equal(decide(&p, "*7\r\n:0\r\n:5\r\n:0\r\n:200000\r\n:200000\r\n:1\r\n:2\r\n",
	                        &d), 0);
	assert_int_equal(d.reason, WINDOW_REASON_POOL_SHARE);
	assert_string_equal(window_reason_str(d.reason), "pool-share");
	assert_int_equal(decide(&p, "*7\r\n:0\r\n:3\r\n:0\r\n:200000\r\n:200000\r\n:0\r\n:0\r\n",
	                        &d), 0);
	assert_int_equal(d.reason, WINDOW_REASON_NONE);
	assert_true(window_deny_holds(&p, 1, &d));
	assert_int_equal(decide(&p, "*6\r\n:1\r\n:3\r\n:2\r\n:1000000\r\n:0\r\n:0\r\n", &d), -1);
	assert_int_equal(decide(&p, "*7\r\n:1\r\n:3\r\n:2\r\n:1000000\r\n:0\r\n:0\r\n:3\r\n",
	                        &d), -1);
	assert_int_equal(decide(&plain, "*7\r\n:1\r\n:3\r\n:2\r\n:1000000\r\n:0\r\n:0\r\n:0\r\n",
	                        &d), -1);
	/* a shadow policy: allow, shadow-deny */
	p.shadow = true;
	assert_int_equal(decide(&p, "*7\r\n:0\r\n:5\r\n:0\r\n:200000\r\n:200000\r\n:1\r\n:1\r\n",
	                        &d), 0);
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_int_equal(d.reason, WINDOW_REASON_SHADOW_DENY);
	p.shadow = false;

	/* on a Cluster (pool_tag): the account's keys in the pool's slot,
	 * "{<pool>}/<tag>", never a 1.0.x key; the pool's own unchanged */
	p.pool_tag = true;
	p.legacy_key = true;
	p.inflight = 2;
	p.lease_ms = 60000;
	memset(p.lease_id, 'a', WINDOW_LEASE_ID_LEN);
	p.lease_id[WINDOW_LEASE_ID_LEN] = '\0';
	assert_int_equal(window_build_args(&p, "sha", "ACC:1}", 6, 1, &one[0], &why), 0);
	assert_int_equal(one[0].nkeys, 4);
	assert_arg(&one[0], 3, "transfer:limit:v1:{transfers}/ACC:1%7D:1s");
	assert_arg(&one[0], 4, "transfer:inflight:l1:{transfers}/ACC:1%7D");
	assert_arg(&one[0], 5, "transfers:pool:p1:{transfers}");
	assert_arg(&one[0], 6, "transfers:pool:a1:{transfers}");
	assert_arg(&one[0], 13, "pool:1000:2:ACC:1}");
	p.precision_ms = 1000;
	p.win[0].window_ms = 60000;
	assert_int_equal(window_build_args(&p, "sha", "B", 1, 1, &one[0], &why), 0);
	assert_arg(&one[0], 3, "transfer:limit:b1:{transfers}/B:1m");

	/* the longest: names of 48, an account of 256 '}' (768 in the tag),
	 * four windows, leases and the pool on a Cluster: every key fits */
	{
		struct window_policy big;
		char acc[WINDOW_KEY_MAX], name[WINDOW_NAME_MAX + 1];
		static const uint64_t ms[WINDOW_MAX_WINDOWS] = { 1001, 60001, 3600001, 86400001 };
		unsigned w;

		memset(acc, '}', sizeof(acc));
		memset(name, 'n', WINDOW_NAME_MAX);
		name[WINDOW_NAME_MAX] = '\0';
		policy_make(&big, name, 1, ms[0]);
		big.nwin = WINDOW_MAX_WINDOWS;
		for (w = 0; w < WINDOW_MAX_WINDOWS; w++) {
			big.win[w].limit = 1000000;
			big.win[w].window_ms = ms[w];
		}
		big.pooled = big.pool_tag = true;
		big.pool = p.pool;
		memcpy(big.pool.name, name, sizeof(name));
		big.pool.name_len = WINDOW_NAME_MAX;
		big.inflight = 2;
		big.lease_ms = 86400001;
		memcpy(big.lease_id, p.lease_id, sizeof(p.lease_id));
		assert_int_equal(window_build_args(&big, "0123456789012345678901234567890123456789",
		                                   acc, sizeof(acc), 1, &one[0], &why), 0);
		assert_int_equal(one[0].nkeys, WINDOW_MAX_WINDOWS + 3);
		for (i = 0; i < one[0].nkeys; i++)
			assert_true(one[0].argvlen[3 + i] < WINDOW_REDIS_KEY_MAX);
	}
}

/* inflight= (issue 38): the leases' key after the windows' (and the 1.0.x
 * key), before a pool's; their pair <inflight> "lease:<ms>:<id>" likewise;
 * no lease id, no request; in a batch beside a plain decision. The reply's
 * index of that pair is a deny with reason in-flight and window 4, never
 * cached; an admission carries the lease id; a pool after it keeps its own
 * reason; the release's request. */
static void test_args_leases(void **state)
{
	static const char id[] = "0123456789abcdef0123456789abcdef";
	struct window_policy p, plain;
	struct window_args one[2], rel;
	struct window_decision d;
	enum window_reason why;
	const char *argv[WINDOW_BATCH_ARGC(2)];
	size_t argvlen[WINDOW_BATCH_ARGC(2)], i, len = 0;
	char nums[WINDOW_BATCH_NUMS(2)], joined[512];
	int argc;

	(void)state;
	policy_make(&p, "export", 10, 60000);
	p.inflight = 5;
	p.lease_ms = 60000;
	p.lease_id[0] = '\0';
	assert_int_equal(window_build_args(&p, "sha", "A", 1, 1, &one[0], &why), -1);
	assert_int_equal(why, WINDOW_REASON_REDIS_ERROR);
	memcpy(p.lease_id, id, sizeof(id));
	assert_int_equal(window_build_args(&p, "sha", "ACC:1}", 6, 1, &one[0], &why), 0);
	assert_int_equal(one[0].argc, 10);
	assert_int_equal(one[0].nkeys, 2);
	assert_int_equal(one[0].lease_at, 1);
	assert_arg(&one[0], 2, "2");
	assert_arg(&one[0], 3, "export:limit:v1:{ACC:1%7D}:1m");
	assert_arg(&one[0], 4, "export:inflight:l1:{ACC:1%7D}");
	assert_arg(&one[0], 8, "5");
	assert_arg(&one[0], 9, "lease:60000:0123456789abcdef0123456789abcdef");
	/* the 1.0.x key is window 1: the leases follow it */
	p.legacy_key = true;
	assert_int_equal(window_build_args(&p, "sha", "A", 1, 1, &one[1], &why), 0);
	assert_int_equal(one[1].lease_at, 2);
	assert_arg(&one[1], 5, "export:inflight:l1:{A}");
	p.legacy_key = false;

	policy_make(&plain, "api", 10, 1000);
	assert_int_equal(window_build_args(&plain, "", "B", 1, 1, &one[1], &why), 0);
	assert_int_equal(one[1].lease_at, -1);
	argc = window_build_batch(one, 2, "EVALSHA", "sha", 3, argv, argvlen, nums);
	assert_true(argc > 0);
	for (i = 0; i < (size_t)argc; i++)
		len += (size_t)snprintf(joined + len, sizeof(joined) - len, "%s%.*s", i ? " " : "",
		                        (int)argvlen[i], argv[i]);
	assert_string_equal(joined, "EVALSHA sha 3 export:limit:v1:{ACC:1%7D}:1m "
	                    "export:inflight:l1:{ACC:1%7D} api:limit:v1:{B}:1s batch 2 2 1 10 60000 "
	                    "5 lease:60000:0123456789abcdef0123456789abcdef 1 1 10 1000");

	/* the replies, read with the pair's index */
	p.lease_at = 1;
	assert_int_equal(decide(&p, "*6\r\n:0\r\n:5\r\n:0\r\n:2500000\r\n:2500000\r\n:1\r\n", &d), 0);
	assert_int_equal(d.status, WINDOW_DENY);
	assert_int_equal(d.reason, WINDOW_REASON_IN_FLIGHT);
	assert_string_equal(window_reason_str(d.reason), "in-flight");
	assert_int_equal(d.window, WINDOW_MAX_WINDOWS);
	assert_int_equal(d.retry_after, 3);
	assert_string_equal(d.lease, "");
	assert_false(window_deny_holds(&p, 1, &d));
	assert_int_equal(decide(&p, "*6\r\n:0\r\n:10\r\n:0\r\n:2500000\r\n:2500000\r\n:0\r\n", &d), 0);
	assert_int_equal(d.reason, WINDOW_REASON_NONE);
	assert_int_equal(d.window, 0);
	assert_true(window_deny_holds(&p, 1, &d));
	assert_int_equal(decide(&p, "*6\r\n:1\r\n:10\r\n:9\r\n:60000000\r\n:0\r\n:0\r\n", &d), 0);
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_string_equal(d.lease, id);
	/* beyond the pair: no index of a reply */
	assert_int_equal(decide(&p, "*6\r\n:0\r\n:5\r\n:0\r\n:2500000\r\n:2500000\r\n:5\r\n", &d), -1);
	/* a pool after the leases keeps its reason */
	p.pooled = true;
	assert_int_equal(decide(&p, "*7\r\n:0\r\n:5\r\n:0\r\n:200000\r\n:200000\r\n:2\r\n:1\r\n",
	                        &d), 0);
	assert_int_equal(d.reason, WINDOW_REASON_POOL_FULL);
	assert_int_equal(d.window, WINDOW_MAX_WINDOWS);
	p.pooled = false;
	/* a shadow policy: allow, shadow-deny, no lease */
	p.shadow = true;
	assert_int_equal(decide(&p, "*6\r\n:0\r\n:5\r\n:0\r\n:2500000\r\n:2500000\r\n:1\r\n", &d), 0);
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_int_equal(d.reason, WINDOW_REASON_SHADOW_DENY);
	assert_string_equal(d.lease, "");
	p.shadow = false;

	/* inflight= alone: the leases are the one pair, their refusal and their
	 * admission read at index 0 */
	p.nwin = 0;
	assert_int_equal(window_build_args(&p, "sha", "A", 1, 7, &one[1], &why), 0);
	assert_int_equal(one[1].lease_at, 0);
	assert_int_equal(one[1].nkeys, 1);
	assert_arg(&one[1], 2, "1");
	assert_arg(&one[1], 3, "export:inflight:l1:{A}");
	assert_arg(&one[1], 4, "7");
	assert_arg(&one[1], 5, "5");
	assert_arg(&one[1], 6, "lease:60000:0123456789abcdef0123456789abcdef");
	p.lease_at = 0;
	assert_int_equal(decide(&p, "*6\r\n:1\r\n:5\r\n:4\r\n:60000000\r\n:0\r\n:0\r\n", &d), 0);
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_int_equal(d.window, WINDOW_MAX_WINDOWS);
	assert_int_equal(d.limit, 5);
	assert_string_equal(d.lease, id);
	assert_int_equal(decide(&p, "*6\r\n:0\r\n:5\r\n:0\r\n:2500000\r\n:2500000\r\n:0\r\n", &d), 0);
	assert_int_equal(d.reason, WINDOW_REASON_IN_FLIGHT);
	p.inflight = 0;
	assert_int_equal(window_build_args(&p, "sha", "A", 1, 1, &one[1], &why), -1);
	p.inflight = 5;
	p.nwin = 1;
	p.lease_at = 1;

	/* the release */
	assert_int_equal(window_build_release(&p, "ACC:1}", 6, id, &rel), 0);
	assert_int_equal(rel.argc, 6);
	assert_arg(&rel, 2, "1");
	assert_arg(&rel, 3, "export:inflight:l1:{ACC:1%7D}");
	assert_arg(&rel, 4, "release");
	assert_arg(&rel, 5, id);
	assert_int_equal(window_build_release(&plain, "B", 1, id, &rel), -1);
	assert_int_equal(window_build_release(&p, "", 0, id, &rel), -1);
	assert_int_equal(window_build_release(&p, "B", 1, "", &rel), -1);
}

/* settle=: the decision's last pair 1 "settle:<lease ms>" and its record
 * key; the settle's own arguments (the windows, the record, the real cost) */
static void test_args_settle(void **state)
{
	static const char id[] = "0123456789abcdef0123456789abcdef";
	struct window_policy p, g;
	struct window_args a;
	struct window_decision d;
	struct window_reply r = { .kind = WINDOW_REPLY_INTEGERS, .n = 6,
	                          .v = { 1, 10, 9, 1000000, 0, 0 } };
	enum window_reason why;

	(void)state;
	policy_make(&p, "tok", 10, 1000);
	policy_add(&p, 100, 3600000);
	snprintf(p.settle_hdr, sizeof(p.settle_hdr), "x-usage-units");
	p.lease_ms = 60000;
	/* (no id drawn, no decision) */
	assert_int_equal(window_build_args(&p, "sha", "A}", 2, 2, &a, &why), -1);
	memcpy(p.lease_id, id, sizeof(id));
	assert_int_equal(window_build_args(&p, "sha", "A}", 2, 2, &a, &why), 0);
	assert_int_equal(a.nkeys, 3);
	assert_arg(&a, 2, "3");
	assert_arg(&a, 5, "tok:settle:s1:{A%7D}:0123456789abcdef0123456789abcdef");
	assert_arg(&a, 6, "2");
	assert_arg(&a, 11, "1");
	assert_arg(&a, 12, "settle:60000");
	assert_int_equal(a.argc, 13);
	/* an admission answers the id */
	assert_int_equal(window_decide_reply(&p, &r, &d), 0);
	assert_string_equal(d.lease, id);

	assert_int_equal(window_build_settle(&p, "A}", 2, id, 5, &a), 0);
	assert_int_equal(a.nkeys, 3);
	assert_int_equal(a.argc, 3 + 3 + 2 + 4);
	assert_arg(&a, 1, "");
	assert_arg(&a, 2, "3");
	assert_arg(&a, 3, "tok:limit:v1:{A%7D}:1s");
	assert_arg(&a, 4, "tok:limit:v1:{A%7D}:1h");
	assert_arg(&a, 5, "tok:settle:s1:{A%7D}:0123456789abcdef0123456789abcdef");
	assert_arg(&a, 6, "settle");
	assert_arg(&a, 7, "5");
	assert_arg(&a, 8, "10");
	assert_arg(&a, 9, "1000");
	assert_arg(&a, 10, "100");
	assert_arg(&a, 11, "3600000");
	assert_int_equal(window_build_settle(&p, "A}", 2, "abc", 5, &a), -1);
	assert_int_equal(window_build_settle(&p, "", 0, id, 5, &a), -1);

	/* a token bucket: its key, then the record; "gcra:<ms>:<burst>" */
	policy_make(&g, "tg", 10, 1000);
	g.algorithm = WINDOW_ALGO_GCRA;
	g.win[0].burst = 20;
	snprintf(g.settle_hdr, sizeof(g.settle_hdr), "x-u");
	g.lease_ms = 5000;
	memcpy(g.lease_id, id, sizeof(id));
	assert_int_equal(window_build_args(&g, "sha", "B", 1, 1, &a, &why), 0);
	assert_int_equal(a.nkeys, 2);
	assert_arg(&a, 3, "tg:limit:g1:{B}");
	assert_arg(&a, 4, "tg:settle:s1:{B}:0123456789abcdef0123456789abcdef");
	assert_arg(&a, 7, "gcra:1000:20");
	assert_arg(&a, 8, "1");
	assert_arg(&a, 9, "settle:5000");
	assert_int_equal(window_build_settle(&g, "B", 1, id, 0, &a), 0);
	assert_arg(&a, 5, "settle");
	assert_arg(&a, 6, "0");
	assert_arg(&a, 8, "gcra:1000:20");

	/* a policy without settle= has none */
	g.settle_hdr[0] = '\0';
	assert_int_equal(window_build_settle(&g, "B", 1, id, 0, &a), -1);
}

static void test_args_multi(void **state)
{
	struct window_policy p;
	struct window_args a;
	enum window_reason why;

	(void)state;
	policy_make(&p, "api", 10, 1000);
	policy_add(&p, 1000, 3600000);
	policy_add(&p, 50, 500);
	assert_int_equal(window_build_args(&p, "sha", "ACC-1", 5, 2, &a, &why), 0);
	assert_int_equal(a.nkeys, 3);
	assert_int_equal(a.argc, 3 + 3 + 1 + 6);
	assert_arg(&a, 2, "3");
	assert_arg(&a, 3, "api:limit:v1:{ACC-1}:1s");
	assert_arg(&a, 4, "api:limit:v1:{ACC-1}:1h");
	assert_arg(&a, 5, "api:limit:v1:{ACC-1}:500ms");
	assert_arg(&a, 6, "2");
	assert_arg(&a, 7, "10");
	assert_arg(&a, 8, "1000");
	assert_arg(&a, 9, "1000");
	assert_arg(&a, 10, "3600000");
	assert_arg(&a, 11, "50");
	assert_arg(&a, 12, "500");
}

/* precision=: windows longer than it go to a b1 hash with "<ms>:<precision>";
 * shorter ones stay v1 logs with the plain length; keys share the tag. */
static void test_args_precision(void **state)
{
	struct window_policy p;
	struct window_args a;
	enum window_reason why;

	(void)state;
	policy_make(&p, "exports", 10, 1000);
	policy_add(&p, 1000, 3600000);
	policy_add(&p, 30, 60000);
	p.precision_ms = 60000;
	assert_int_equal(window_build_args(&p, "sha", "ACC-1", 5, 2, &a, &why), 0);
	assert_int_equal(a.argc, 3 + 3 + 1 + 6);
	assert_arg(&a, 3, "exports:limit:v1:{ACC-1}:1s");
	assert_arg(&a, 4, "exports:limit:b1:{ACC-1}:1h");
	assert_arg(&a, 5, "exports:limit:v1:{ACC-1}:1m");
	assert_arg(&a, 8, "1000");
	assert_arg(&a, 10, "3600000:60000");
	assert_arg(&a, 12, "60000");

	/* single window: the same form, b1 */
	policy_make(&p, "big", 10000, 86400000);
	p.precision_ms = 900000;
	assert_int_equal(window_build_args(&p, "sha", "ACC-1", 5, 1, &a, &why), 0);
	assert_arg(&a, 3, "big:limit:b1:{ACC-1}:24h");
	assert_int_equal(a.argc, 7);
	assert_arg(&a, 5, "10000");
	assert_arg(&a, 6, "86400000:900000");
}

/* algorithm=gcra: one string key under g1, always with the tag (escaped
 * as the log's), the window argument "gcra:<ms>:<burst>"; a cost above
 * the burst (not the limit) is bad-cost; it works in a batch; fail-open
 * announces the burst. */
static void test_args_gcra(void **state)
{
	struct window_policy p;
	struct window_args a[2];
	struct window_decision d;
	enum window_reason why;
	const char *argv[WINDOW_BATCH_ARGC(2)];
	size_t argvlen[WINDOW_BATCH_ARGC(2)];
	char nums[WINDOW_BATCH_NUMS(2)];

	(void)state;
	policy_make(&p, "transfers", 3, 1000);
	p.algorithm = WINDOW_ALGO_GCRA;
	p.win[0].burst = 5;
	assert_int_equal(window_build_args(&p, "sha", "jwt:ACC-1}%", 11, 4, &a[0], &why), 0);
	assert_int_equal(a[0].argc, 7);
	assert_int_equal(a[0].nkeys, 1);
	assert_arg(&a[0], 0, "EVALSHA");
	assert_arg(&a[0], 2, "1");
	assert_arg(&a[0], 3, "transfers:limit:g1:{jwt:ACC-1%7D%25}");
	assert_arg(&a[0], 4, "4");
	assert_arg(&a[0], 5, "3");
	assert_arg(&a[0], 6, "gcra:1000:5");
	/* a cost above the limit but within the burst passes to Redis; above
	 * the burst never fits */
	assert_int_equal(window_build_args(&p, "sha", "K", 1, 5, &a[1], &why), 0);
	assert_int_equal(window_build_args(&p, "sha", "K", 1, 6, &a[1], &why), -1);
	assert_int_equal(why, WINDOW_REASON_BAD_COST);
	assert_int_equal(window_build_args(&p, "sha", "K", 1, 1, &a[1], &why), 0);
	assert_int_equal(window_build_batch(a, 2, "EVALSHA", "sha", 3, argv, argvlen, nums), 15);
	assert_int_equal(argvlen[14], 11);
	assert_memory_equal(argv[14], "gcra:1000:5", 11);
	/* a gcra policy without its burst is refused, not sent */
	p.win[0].burst = 0;
	assert_int_equal(window_build_args(&p, "sha", "K", 1, 1, &a[1], &why), -1);
	assert_int_equal(why, WINDOW_REASON_REDIS_ERROR);
	p.win[0].burst = 5;
	p.on_error = WINDOW_ON_ERROR_ALLOW;
	window_decide_error(&p, WINDOW_REASON_REDIS_TIMEOUT, &d);
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_int_equal(d.limit, 5);
}

/* precision= checks (config's -c): minimum, divides, bucket count; windows
 * not longer than the precision are not its concern. */
static void test_check_precision(void **state)
{
	struct window_limit w[2] = { { 10, 1000, 0, 0, 0, 0 }, { 1000, 3600000, 0, 0, 0, 0 } };
	char why[160];

	(void)state;
	assert_int_equal(window_check_precision(60000, w, 2, why, sizeof(why)), 0);
	assert_int_equal(window_check_precision(1000, w, 2, why, sizeof(why)), -1);
	assert_string_equal(why, "precision=1s gives 3600 buckets for the 1h window (at most 600)");
	assert_int_equal(window_check_precision(6000, w, 2, why, sizeof(why)), 0);
	assert_int_equal(window_check_precision(5000, w, 2, why, sizeof(why)), -1);
	assert_string_equal(why, "precision=5s gives 720 buckets for the 1h window (at most 600)");
	assert_int_equal(window_check_precision(420000, w, 2, why, sizeof(why)), -1);
	assert_string_equal(why, "precision=7m does not divide the 1h window");
	assert_int_equal(window_check_precision(999, w, 2, why, sizeof(why)), -1);
	assert_string_equal(why, "precision=999ms is below the minimum of 1s");
	/* longer than every window: nothing to check here (config says "no window") */
	assert_int_equal(window_check_precision(7200000, w, 2, why, sizeof(why)), 0);
}

/* The largest request must fit the argv and buffer sizes of window.h. */
static void test_args_worst_case(void **state)
{
	struct window_policy p;
	struct window_args a;
	enum window_reason why;
	char name[WINDOW_NAME_MAX + 1], key[WINDOW_KEY_MAX];
	unsigned i;

	(void)state;
	memset(name, 'n', WINDOW_NAME_MAX);
	name[WINDOW_NAME_MAX] = '\0';
	memset(key, 'k', sizeof(key));
	policy_make(&p, name, 1000000, 86399999);
	p.nwin = WINDOW_MAX_WINDOWS;
	for (i = 0; i < WINDOW_MAX_WINDOWS; i++) {
		p.win[i].limit = 1000000;
		p.win[i].window_ms = 86399999 - i;
	}
	assert_int_equal(window_build_args(&p, "0123456789abcdef0123456789abcdef01234567",
	                                   key, sizeof(key), 1000000, &a, &why), 0);
	assert_int_equal(a.argc, 4 + 3 * WINDOW_MAX_WINDOWS);
	assert_int_equal(a.argvlen[3], WINDOW_NAME_MAX + 11 + WINDOW_KEY_MAX + 2 + 10);
	assert_memory_equal(a.argv[3] + WINDOW_NAME_MAX + 11 + WINDOW_KEY_MAX, "}:86399999ms", 12);
	/* Every byte escaped: three times the key. */
	memset(key, '}', sizeof(key));
	assert_int_equal(window_build_args(&p, "0123456789abcdef0123456789abcdef01234567",
	                                   key, sizeof(key), 1000000, &a, &why), 0);
	assert_int_equal(a.argvlen[6], WINDOW_NAME_MAX + 11 + 3 * WINDOW_KEY_MAX + 2 + 10);
	assert_memory_equal(a.argv[6] + WINDOW_NAME_MAX + 11 + 3 * WINDOW_KEY_MAX - 3, "%7D}:86399996ms", 15);
	/* and every window bucketed, with the longest window arguments */
	p.precision_ms = 43199999;
	assert_int_equal(window_build_args(&p, "0123456789abcdef0123456789abcdef01234567",
	                                   key, sizeof(key), 1000000, &a, &why), 0);
	assert_arg(&a, 4 + 3 * WINDOW_MAX_WINDOWS - 1, "86399996:43199999");
}

/* '}' and '%' of the account are escaped inside the hash tag, so the tag
 * is never empty or cut short; everything else, '{' included, is kept,
 * whatever the number of windows. */
static void test_args_tag_escape(void **state)
{
	static const struct { const char *key, *want; } cases[] = {
		{ "}x", "api:limit:v1:{%7Dx}:1s" },
		{ "{a}b", "api:limit:v1:{{a%7Db}:1s" },
		{ "}", "api:limit:v1:{%7D}:1s" },
		{ "%7D", "api:limit:v1:{%257D}:1s" },
		{ "a}b%}", "api:limit:v1:{a%7Db%25%7D}:1s" },
		{ "{", "api:limit:v1:{{}:1s" },
		{ "ACC-1", "api:limit:v1:{ACC-1}:1s" },
	};
	struct window_policy p;
	struct window_args a;
	enum window_reason why;
	size_t i;

	(void)state;
	policy_make(&p, "api", 10, 1000);
	p.nwin = 2;
	p.win[1].limit = 1000;
	p.win[1].window_ms = 3600000;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(window_build_args(&p, "sha", cases[i].key, strlen(cases[i].key), 1,
		                                   &a, &why), 0);
		assert_arg(&a, 3, cases[i].want);
	}
	p.nwin = 1;
	assert_int_equal(window_build_args(&p, "sha", "}x%", 3, 1, &a, &why), 0);
	assert_arg(&a, 3, "api:limit:v1:{%7Dx%25}:1s");
}

/* Every key an account can have, under every algorithm, number of
 * windows and precision, for accounts made of '{', '}', ':', '%' and
 * window-like suffixes: no two (account, form, window) share a key, and
 * one account's keys share one Cluster hash tag. */
static void test_keys_injective(void **state)
{
	static const char *const acc[] = {
		"jwt:VIP", "{jwt:VIP}:1s", "{jwt:VIP}:1h", "{jwt:VIP}", "jwt:VIP}:1s", "a}:1s", "a",
		"%7D", "}", "%", "%25", "{", "{}", "}{", ":1s", "a:1s", "{a}:1s}:1s", "a%7D:1s",
		"jwt:VIP%7D:1s", "{jwt:VIP%7D:1s}:1s",
	};
	enum { NACC = sizeof(acc) / sizeof(acc[0]), NFORM = 5 };
	struct window_policy p;
	struct window_args a;
	enum window_reason why;
	size_t i, j, k;
	int f;

	(void)state;
	/* each account under each form (log, several windows, bucketed,
	 * several with buckets, GCRA; 1s or 1h first window) against every
	 * other account under every form */
	for (i = 0; i < NACC; i++) {
		for (j = i + 1; j < NACC; j++) {
			for (f = 0; f < NFORM * 2; f++) {
				struct window_args b;

				policy_make(&p, "transfer", 100, 1000);
				p.legacy_key = true;
				if (f % NFORM == 1)
					policy_add(&p, 1000, 3600000);
				if (f % NFORM == 2)
					p.precision_ms = 500;
				if (f % NFORM == 3) {
					policy_add(&p, 5000, 86400000);
					p.precision_ms = 60000;
				}
				if (f % NFORM == 4) {
					p.algorithm = WINDOW_ALGO_GCRA;
					p.win[0].burst = 100;
				}
				if (f >= NFORM)
					p.win[0].window_ms = 3600000;
				assert_int_equal(window_build_args(&p, "sha", acc[i], strlen(acc[i]), 1, &a,
				                                   &why), 0);
				for (k = 0; k < (size_t)NFORM * 2; k++) {
					struct window_policy q;
					size_t x, y;

					policy_make(&q, "transfer", 100, 1000);
					q.legacy_key = true;
					if (k % NFORM == 1)
						policy_add(&q, 1000, 3600000);
					if (k % NFORM == 2)
						q.precision_ms = 500;
					if (k % NFORM == 3) {
						policy_add(&q, 5000, 86400000);
						q.precision_ms = 60000;
					}
					if (k % NFORM == 4) {
						q.algorithm = WINDOW_ALGO_GCRA;
						q.win[0].burst = 100;
					}
					if (k >= NFORM)
						q.win[0].window_ms = 3600000;
					assert_int_equal(window_build_args(&q, "sha", acc[j], strlen(acc[j]), 1,
					                                   &b, &why), 0);
					for (x = 0; x < a.nkeys; x++)
						for (y = 0; y < b.nkeys; y++)
							if (a.argvlen[3 + x] == b.argvlen[3 + y] &&
							    memcmp(a.argv[3 + x], b.argv[3 + y], a.argvlen[3 + x]) == 0)
								fail_msg("'%s' and '%s' share key %.*s", acc[i], acc[j],
								         (int)a.argvlen[3 + x], a.argv[3 + x]);
				}
			}
		}
	}
}

/* One window with legacy_key (an upgrade): the window's key, then the
 * 1.0.x one (raw account, v1 or b1) as a second window of the same limit;
 * never for several windows, GCRA, or an account starting with '{' (its
 * raw form could be another account's tagged key). A deny from the 1.0.x
 * key is window 0. */
static void test_args_legacy(void **state)
{
	struct window_policy p;
	struct window_args a;
	struct window_decision d;
	enum window_reason why;

	(void)state;
	policy_make(&p, "hr", 5, 3600000);
	p.legacy_key = true;
	assert_int_equal(window_build_args(&p, "sha", "jwt:H1", 6, 1, &a, &why), 0);
	assert_int_equal(a.nkeys, 2);
	assert_int_equal(a.argc, 4 + 3 * 2);
	assert_arg(&a, 2, "2");
	assert_arg(&a, 3, "hr:limit:v1:{jwt:H1}:1h");
	assert_arg(&a, 4, "hr:limit:v1:jwt:H1");
	assert_arg(&a, 5, "1");
	assert_arg(&a, 6, "5");
	assert_arg(&a, 7, "3600000");
	assert_arg(&a, 8, "5");
	assert_arg(&a, 9, "3600000");
	assert_int_equal(decide(&p, "*6\r\n:0\r\n:5\r\n:0\r\n:100\r\n:100\r\n:1\r\n", &d), 0);
	assert_int_equal(d.status, WINDOW_DENY);
	assert_int_equal(d.window, 0);
	p.precision_ms = 60000;
	assert_int_equal(window_build_args(&p, "sha", "jwt:H1", 6, 1, &a, &why), 0);
	assert_arg(&a, 3, "hr:limit:b1:{jwt:H1}:1h");
	assert_arg(&a, 4, "hr:limit:b1:jwt:H1");
	assert_arg(&a, 9, "3600000:60000");
	assert_int_equal(window_build_args(&p, "sha", "{jwt:H1}:1h", 11, 1, &a, &why), 0);
	assert_int_equal(a.nkeys, 1);
	p.precision_ms = 0;
	policy_add(&p, 10, 86400000);
	assert_int_equal(window_build_args(&p, "sha", "jwt:H1", 6, 1, &a, &why), 0);
	assert_int_equal(a.nkeys, 2);
	assert_arg(&a, 4, "hr:limit:v1:{jwt:H1}:24h");
	policy_make(&p, "g", 5, 1000);
	p.legacy_key = true;
	p.algorithm = WINDOW_ALGO_GCRA;
	p.win[0].burst = 5;
	assert_int_equal(window_build_args(&p, "sha", "jwt:H1", 6, 1, &a, &why), 0);
	assert_int_equal(a.nkeys, 1);
	assert_arg(&a, 3, "g:limit:g1:{jwt:H1}");
}

/* An oversized script name cannot overflow the buffer: it is refused. */
static void test_args_overflow(void **state)
{
	struct window_policy p;
	struct window_args a;
	enum window_reason why;
	char *sha = malloc(sizeof(a.buf) + 1);

	(void)state;
	assert_non_null(sha);
	memset(sha, 's', sizeof(a.buf));
	sha[sizeof(a.buf)] = '\0';
	policy_make(&p, "transfer", 3, 1000);
	assert_int_equal(window_build_args(&p, sha, "k", 1, 1, &a, &why), -1);
	assert_int_equal(why, WINDOW_REASON_REDIS_ERROR);
	assert_int_equal(a.argc, 0);
	free(sha);
}

static void test_args_bad_key(void **state)
{
	struct window_policy p;
	struct window_args a;
	enum window_reason why;
	char key[WINDOW_KEY_MAX + 1];

	(void)state;
	memset(key, 'k', sizeof(key));
	policy_make(&p, "transfer", 3, 1000);
	assert_int_equal(window_check_key("", 0), -1);
	assert_int_equal(window_check_key(NULL, 3), -1);
	assert_int_equal(window_check_key(key, WINDOW_KEY_MAX + 1), -1);
	assert_int_equal(window_check_key(key, WINDOW_KEY_MAX), 0);
	assert_int_equal(window_build_args(&p, "sha", "", 0, 1, &a, &why), -1);
	assert_int_equal(why, WINDOW_REASON_BAD_KEY);
	assert_int_equal(window_build_args(&p, "sha", key, sizeof(key), 1, &a, &why), -1);
	assert_int_equal(why, WINDOW_REASON_BAD_KEY);
	/* Bytes travel length-delimited: an embedded NUL is kept, not cut. */
	assert_int_equal(window_build_args(&p, "sha", "a\0b", 3, 1, &a, &why), 0);
	assert_int_equal(a.argvlen[3], strlen("transfer:limit:v1:{}:1s") + 3);
	assert_memory_equal(a.argv[3], "transfer:limit:v1:{a\0b}:1s", a.argvlen[3]);
}

static void test_args_bad_cost(void **state)
{
	struct window_policy p;
	struct window_args a;
	enum window_reason why;

	(void)state;
	policy_make(&p, "transfer", 3, 1000);
	assert_int_equal(window_build_args(&p, "sha", "k", 1, 0, &a, &why), -1);
	assert_int_equal(why, WINDOW_REASON_BAD_COST);
	assert_int_equal(window_build_args(&p, "sha", "k", 1, 4, &a, &why), -1);
	assert_int_equal(why, WINDOW_REASON_BAD_COST);
	assert_int_equal(window_build_args(&p, "sha", "k", 1, 3, &a, &why), 0);
	/* The smallest limit of all windows bounds the cost. */
	p.nwin = 2;
	p.win[1].limit = 2;
	p.win[1].window_ms = 60000;
	assert_int_equal(window_build_args(&p, "sha", "k", 1, 3, &a, &why), -1);
	assert_int_equal(why, WINDOW_REASON_BAD_COST);
	assert_int_equal(window_build_args(&p, "sha", "k", 1, 2, &a, &why), 0);
	/* max-cost caps it below the limits. */
	p.max_cost = 1;
	assert_int_equal(window_build_args(&p, "sha", "k", 1, 2, &a, &why), -1);
	assert_int_equal(why, WINDOW_REASON_BAD_COST);
	assert_int_equal(window_build_args(&p, "sha", "k", 1, 1, &a, &why), 0);
}

static void test_overrides(void **state)
{
	struct window_override ov[3];
	struct window_policy p;
	struct window_args a;
	enum window_reason why;
	const struct window_limit *l;
	unsigned nwin, i;
	static const char *const keys[3] = { "ACC-VIP", "ACC-1", "ACC-10" };

	(void)state;
	memset(ov, 0, sizeof(ov));
	for (i = 0; i < 3; i++) {
		ov[i].key_len = strlen(keys[i]);
		memcpy(ov[i].key, keys[i], ov[i].key_len);
		ov[i].nwin = 1;
		ov[i].win[0].limit = 30 + i;
		ov[i].win[0].window_ms = 1000;
	}
	ov[1].nwin = 2;
	ov[1].win[1].limit = 100;
	ov[1].win[1].window_ms = 60000;
	qsort(ov, 3, sizeof(ov[0]), window_override_cmp);
	assert_memory_equal(ov[0].key, "ACC-1", 6);
	assert_memory_equal(ov[1].key, "ACC-10", 7);
	assert_memory_equal(ov[2].key, "ACC-VIP", 8);

	policy_make(&p, "transfer", 3, 1000);
	p.overrides = ov;
	p.noverrides = 3;
	l = window_limits_for(&p, "ACC-VIP", 7, &nwin);
	assert_int_equal(nwin, 1);
	assert_int_equal(l[0].limit, 30);
	l = window_limits_for(&p, "ACC-10", 6, &nwin);
	assert_int_equal(l[0].limit, 32);
	l = window_limits_for(&p, "ACC-1", 5, &nwin);
	assert_int_equal(nwin, 2);
	assert_int_equal(l[1].limit, 100);
	l = window_limits_for(&p, "ACC-2", 5, &nwin);
	assert_ptr_equal(l, p.win);
	assert_int_equal(nwin, 1);
	l = window_limits_for(&p, "ACC-VI", 6, &nwin);
	assert_ptr_equal(l, p.win);

	/* The override's limits go to the script and bound the cost. */
	assert_int_equal(window_build_args(&p, "sha", "ACC-VIP", 7, 20, &a, &why), 0);
	assert_arg(&a, 3, "transfer:limit:v1:{ACC-VIP}:1s");
	assert_arg(&a, 5, "30");
	/* Two windows for that account: the 1s window is the same key. */
	assert_int_equal(window_build_args(&p, "sha", "ACC-1", 5, 1, &a, &why), 0);
	assert_int_equal(a.nkeys, 2);
	assert_arg(&a, 3, "transfer:limit:v1:{ACC-1}:1s");
	assert_arg(&a, 4, "transfer:limit:v1:{ACC-1}:1m");
	assert_int_equal(window_build_args(&p, "sha", "ACC-2", 5, 20, &a, &why), -1);
	assert_int_equal(why, WINDOW_REASON_BAD_COST);
}

/* ---- replies ---- */

static void test_reply_allowed(void **state)
{
	struct window_policy p;
	struct window_decision d;

	(void)state;
	policy_make(&p, "transfer", 3, 1000);
	assert_int_equal(decide(&p, "*6\r\n:1\r\n:3\r\n:2\r\n:1000000\r\n:0\r\n:0\r\n", &d), 0);
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_int_equal(d.reason, WINDOW_REASON_NONE);
	assert_true(d.has_quota);
	assert_int_equal(d.limit, 3);
	assert_int_equal(d.remaining, 2);
	assert_int_equal(d.reset, 1);
	assert_int_equal(d.retry_after, 0);
	assert_int_equal(d.window, 0);

	/* Reset rounds up: 1.000001 s is 2 s, 0.02 s is 1 s. */
	assert_int_equal(decide(&p, "*6\r\n:1\r\n:3\r\n:0\r\n:1000001\r\n:0\r\n:1\r\n", &d), 0);
	assert_int_equal(d.reset, 2);
	assert_int_equal(d.window, 1);
	assert_int_equal(decide(&p, "*6\r\n:1\r\n:3\r\n:0\r\n:20000\r\n:0\r\n:0\r\n", &d), 0);
	assert_int_equal(d.reset, 1);
}

static void test_reply_denied(void **state)
{
	struct window_policy p;
	struct window_decision d;

	(void)state;
	policy_make(&p, "transfer", 3, 1000);
	assert_int_equal(decide(&p, "*6\r\n:0\r\n:3\r\n:0\r\n:934636\r\n:934636\r\n:0\r\n", &d), 0);
	assert_int_equal(d.status, WINDOW_DENY);
	assert_int_equal(d.reason, WINDOW_REASON_NONE);
	assert_true(d.has_quota);
	assert_int_equal(d.limit, 3);
	assert_int_equal(d.remaining, 0);
	assert_int_equal(d.reset, 1);
	assert_int_equal(d.retry_after, 1);
	assert_int_equal(d.retry_after_us, 934636);

	assert_int_equal(decide(&p, "*6\r\n:0\r\n:100\r\n:1\r\n:1200000\r\n:2500000\r\n:1\r\n", &d), 0);
	assert_int_equal(d.remaining, 1);
	assert_int_equal(d.reset, 2);
	assert_int_equal(d.retry_after, 3);
	assert_int_equal(d.window, 1);

	/* A deny never says "retry now". */
	assert_int_equal(decide(&p, "*6\r\n:0\r\n:3\r\n:0\r\n:0\r\n:0\r\n:0\r\n", &d), 0);
	assert_int_equal(d.retry_after, 1);
}

static void test_reply_shadow(void **state)
{
	struct window_policy p;
	struct window_decision d;

	(void)state;
	policy_make(&p, "transfer", 3, 1000);
	p.shadow = true;
	assert_int_equal(decide(&p, "*6\r\n:0\r\n:3\r\n:0\r\n:400000\r\n:400000\r\n:0\r\n", &d), 0);
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_int_equal(d.reason, WINDOW_REASON_SHADOW_DENY);
	assert_true(d.has_quota);
	assert_int_equal(d.limit, 3);
	assert_int_equal(d.remaining, 0);
	assert_int_equal(d.reset, 1);
	assert_int_equal(d.retry_after, 1);

	assert_int_equal(decide(&p, "*6\r\n:1\r\n:3\r\n:1\r\n:400000\r\n:0\r\n:0\r\n", &d), 0);
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_int_equal(d.reason, WINDOW_REASON_NONE);
}

/* Every reply that is not a script result is a redis-error decision. */
static void test_reply_errors(void **state)
{
	static const char *const bad[] = {
		"-NOSCRIPT No matching script. Please use EVAL.\r\n",
		"-ERR Error running script (call to f_x): @user_script:1: oops\r\n",
		"-BUSY Redis is busy running a script.\r\n",
		"$-1\r\n",
		"*-1\r\n",
		"*0\r\n",
		"+OK\r\n",
		":1\r\n",
		"$2\r\nhi\r\n",
		"*5\r\n:1\r\n:3\r\n:2\r\n:1000000\r\n:0\r\n",
		"*7\r\n:1\r\n:3\r\n:2\r\n:1000000\r\n:0\r\n:0\r\n:0\r\n",
		"*6\r\n$1\r\n1\r\n:3\r\n:2\r\n:1000000\r\n:0\r\n:0\r\n",
		"*6\r\n:1\r\n:3\r\n$-1\r\n:1000000\r\n:0\r\n:0\r\n",
		"*6\r\n:1\r\n:3\r\n:2\r\n:1000000\r\n:0\r\n*1\r\n:0\r\n",
		"*6\r\n:2\r\n:3\r\n:2\r\n:1000000\r\n:0\r\n:0\r\n",
		"*6\r\n:1\r\n:0\r\n:2\r\n:1000000\r\n:0\r\n:0\r\n",
		"*6\r\n:1\r\n:3\r\n:-1\r\n:1000000\r\n:0\r\n:0\r\n",
		"*6\r\n:0\r\n:3\r\n:0\r\n:-1\r\n:5\r\n:0\r\n",
		"*6\r\n:0\r\n:3\r\n:0\r\n:1\r\n:-5\r\n:0\r\n",
		"*6\r\n:1\r\n:3\r\n:2\r\n:1000000\r\n:0\r\n:4\r\n",
		"*6\r\n:1\r\n:3\r\n:2\r\n:1000000\r\n:0\r\n:-1\r\n",
	};
	struct window_policy p;
	struct window_decision d;
	size_t i;

	(void)state;
	policy_make(&p, "transfer", 3, 1000);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&d, 0x5a, sizeof(d));
		assert_int_equal(decide(&p, bad[i], &d), -1);
		assert_int_equal(d.status, WINDOW_ERROR);
		assert_int_equal(d.reason, WINDOW_REASON_REDIS_ERROR);
		assert_false(d.has_quota);
	}
	assert_int_equal(window_decide_reply(&p, NULL, &d), -1);
	assert_int_equal(d.status, WINDOW_ERROR);
}

/* <pred> on the view of RESP text <resp>. */
static bool reply_is(bool (*pred)(const struct window_reply *), const char *resp)
{
	struct window_reply v = view_of(resp);

	return pred(&v);
}

static void test_noscript(void **state)
{
	(void)state;
	assert_true(reply_is(window_reply_is_noscript, "-NOSCRIPT No matching script. Please use EVAL.\r\n"));
	assert_false(reply_is(window_reply_is_noscript, "-ERR unknown command\r\n"));
	assert_false(reply_is(window_reply_is_noscript, "+NOSCRIPT\r\n"));
	assert_false(window_reply_is_noscript(NULL));
}

/* Redis over maxmemory refuses the script's ZADD: redis-oom, fail-closed
 * (fail-open on on-redis-error=allow, like any Redis failure); any other
 * error stays redis-error. */
static void test_oom(void **state)
{
	static const char *const oom[] = {
		/* Redis 7: the ZADD's error, passed through */
		"-OOM command not allowed when used memory > 'maxmemory'. script: ab5d, on @user_script:159.\r\n",
		/* Redis 6: wrapped in a script error */
		"-ERR Error running script (call to f_ab5d): @user_script:159: "
		"OOM command not allowed when used memory > 'maxmemory'.\r\n",
	};
	struct window_policy p;
	struct window_decision d;
	size_t i;

	(void)state;
	assert_string_equal(window_reason_str(WINDOW_REASON_REDIS_OOM), "redis-oom");
	policy_make(&p, "transfer", 3, 1000);
	for (i = 0; i < sizeof(oom) / sizeof(oom[0]); i++) {
		p.on_error = WINDOW_ON_ERROR_DENY;
		assert_int_equal(decide(&p, oom[i], &d), -1);
		assert_int_equal(d.status, WINDOW_ERROR);
		assert_int_equal(d.reason, WINDOW_REASON_REDIS_OOM);
		assert_false(d.has_quota);
		p.on_error = WINDOW_ON_ERROR_ALLOW;
		assert_int_equal(decide(&p, oom[i], &d), -1);
		assert_int_equal(d.status, WINDOW_ALLOW);
		assert_int_equal(d.reason, WINDOW_REASON_REDIS_OOM);
		assert_false(d.has_quota);
	}
	assert_false(reply_is(window_reply_is_oom, "+OOM command not allowed\r\n"));
	assert_false(reply_is(window_reply_is_oom, "-ERR OOMPH\r\n"));
	assert_false(window_reply_is_oom(NULL));
	p.on_error = WINDOW_ON_ERROR_DENY;
	assert_int_equal(decide(&p, "-WRONGTYPE Operation against a key\r\n", &d), -1);
	assert_int_equal(d.reason, WINDOW_REASON_REDIS_ERROR);
}

/* The module refuses on a Redis that may evict keys with "EVICTS ...":
 * redis-evicts-keys, as the agent's own check says; fail-open allows. */
static void test_evicts(void **state)
{
	static const char evicts[] =
		"-EVICTS ratelimit: maxmemory-policy may evict keys and admit more than the limit "
		"(set noeviction, or load the module with allow-eviction)\r\n";
	struct window_policy p;
	struct window_decision d;

	(void)state;
	policy_make(&p, "transfer", 3, 1000);
	p.on_error = WINDOW_ON_ERROR_DENY;
	assert_int_equal(decide(&p, evicts, &d), -1);
	assert_int_equal(d.status, WINDOW_ERROR);
	assert_int_equal(d.reason, WINDOW_REASON_REDIS_EVICTS);
	assert_false(d.has_quota);
	p.on_error = WINDOW_ON_ERROR_ALLOW;
	assert_int_equal(decide(&p, evicts, &d), -1);
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_int_equal(d.reason, WINDOW_REASON_REDIS_EVICTS);
	assert_int_equal(d.limit, 3);
	assert_false(d.has_quota);
	assert_false(reply_is(window_reply_is_evicts, "+EVICTS ratelimit\r\n"));
	assert_false(reply_is(window_reply_is_evicts, "-ERR EVICTS\r\n"));
	assert_false(reply_is(window_reply_is_evicts, "-EVICTSX\r\n"));
	assert_false(window_reply_is_evicts(NULL));
}

static void test_fail_open(void **state)
{
	struct window_policy p;
	struct window_decision d;

	(void)state;
	policy_make(&p, "reads", 100, 60000);
	p.on_error = WINDOW_ON_ERROR_ALLOW;
	assert_int_equal(decide(&p, "-ERR boom\r\n", &d), -1);
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_int_equal(d.reason, WINDOW_REASON_REDIS_ERROR);
	assert_false(d.has_quota);
	assert_int_equal(d.limit, 100);
	assert_int_equal(d.remaining, 0);
	assert_int_equal(d.retry_after, 0);

	window_decide_error(&p, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_int_equal(d.reason, WINDOW_REASON_REDIS_UNAVAILABLE);
	assert_int_equal(d.limit, 100);
	assert_false(d.has_quota);
	window_decide_error(&p, WINDOW_REASON_REDIS_TIMEOUT, &d);
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_int_equal(d.reason, WINDOW_REASON_REDIS_TIMEOUT);

	/* A bad request is no Redis failure: error even when failing open. */
	window_decide_error(&p, WINDOW_REASON_BAD_COST, &d);
	assert_int_equal(d.status, WINDOW_ERROR);
	assert_int_equal(d.reason, WINDOW_REASON_BAD_COST);
	window_decide_error(&p, WINDOW_REASON_BAD_KEY, &d);
	assert_int_equal(d.status, WINDOW_ERROR);
	window_decide_error(&p, WINDOW_REASON_UNKNOWN_POLICY, &d);
	assert_int_equal(d.status, WINDOW_ERROR);
	window_decide_error(&p, WINDOW_REASON_OVERLOAD, &d);
	assert_int_equal(d.status, WINDOW_ERROR);
}

static void test_fail_closed(void **state)
{
	struct window_policy p;
	struct window_decision d;

	(void)state;
	policy_make(&p, "transfer", 3, 1000);
	window_decide_error(&p, WINDOW_REASON_REDIS_TIMEOUT, &d);
	assert_int_equal(d.status, WINDOW_ERROR);
	assert_int_equal(d.reason, WINDOW_REASON_REDIS_TIMEOUT);
	assert_false(d.has_quota);
	window_decide_error(NULL, WINDOW_REASON_UNKNOWN_POLICY, &d);
	assert_int_equal(d.status, WINDOW_ERROR);
	assert_int_equal(d.reason, WINDOW_REASON_UNKNOWN_POLICY);
}

/* ---- merge ---- */

static struct window_decision mk(enum window_status st, bool quota, int64_t remaining,
                                 int64_t retry_s, int64_t retry_us)
{
	struct window_decision d;

	memset(&d, 0, sizeof(d));
	d.status = st;
	d.has_quota = quota;
	d.remaining = remaining;
	d.retry_after = retry_s;
	d.retry_after_us = retry_us;
	return d;
}

static void test_merge(void **state)
{
	struct window_decision acc, d;

	(void)state;
	window_decision_init(&acc);
	assert_int_equal(acc.status, WINDOW_STATUS_COUNT);

	/* The first decision is taken as is, even a fail-open allow. */
	d = mk(WINDOW_ALLOW, false, 0, 0, 0);
	d.reason = WINDOW_REASON_REDIS_UNAVAILABLE;
	window_decision_merge(&acc, &d);
	assert_int_equal(acc.status, WINDOW_ALLOW);
	assert_int_equal(acc.reason, WINDOW_REASON_REDIS_UNAVAILABLE);

	/* An allow with quota beats one without; then least remaining wins. */
	d = mk(WINDOW_ALLOW, true, 5, 0, 0);
	window_decision_merge(&acc, &d);
	assert_true(acc.has_quota);
	assert_int_equal(acc.remaining, 5);
	d = mk(WINDOW_ALLOW, true, 2, 0, 0);
	window_decision_merge(&acc, &d);
	assert_int_equal(acc.remaining, 2);
	d = mk(WINDOW_ALLOW, true, 7, 0, 0);
	window_decision_merge(&acc, &d);
	assert_int_equal(acc.remaining, 2);
	d = mk(WINDOW_ALLOW, false, 0, 0, 0);
	window_decision_merge(&acc, &d);
	assert_true(acc.has_quota);
	assert_int_equal(acc.remaining, 2);

	/* Deny over allow; among denies the longest retry. */
	d = mk(WINDOW_DENY, true, 0, 3, 2500000);
	window_decision_merge(&acc, &d);
	assert_int_equal(acc.status, WINDOW_DENY);
	assert_int_equal(acc.retry_after, 3);
	d = mk(WINDOW_DENY, true, 0, 1, 400000);
	window_decision_merge(&acc, &d);
	assert_int_equal(acc.retry_after, 3);
	d = mk(WINDOW_DENY, true, 1, 3, 2600000);
	window_decision_merge(&acc, &d);
	assert_int_equal(acc.retry_after_us, 2600000);
	assert_int_equal(acc.remaining, 1);
	d = mk(WINDOW_ALLOW, true, 0, 0, 0);
	window_decision_merge(&acc, &d);
	assert_int_equal(acc.status, WINDOW_DENY);

	/* Error over everything; the first error is kept. */
	d = mk(WINDOW_ERROR, false, 0, 0, 0);
	d.reason = WINDOW_REASON_BAD_COST;
	window_decision_merge(&acc, &d);
	assert_int_equal(acc.status, WINDOW_ERROR);
	assert_int_equal(acc.reason, WINDOW_REASON_BAD_COST);
	d.reason = WINDOW_REASON_REDIS_TIMEOUT;
	window_decision_merge(&acc, &d);
	assert_int_equal(acc.reason, WINDOW_REASON_BAD_COST);
	d = mk(WINDOW_DENY, true, 0, 9, 9000000);
	window_decision_merge(&acc, &d);
	assert_int_equal(acc.status, WINDOW_ERROR);

	/* Order does not matter for the outcome's class. */
	window_decision_init(&acc);
	d = mk(WINDOW_DENY, true, 0, 2, 1500000);
	window_decision_merge(&acc, &d);
	d = mk(WINDOW_ALLOW, true, 0, 0, 0);
	window_decision_merge(&acc, &d);
	assert_int_equal(acc.status, WINDOW_DENY);
	assert_int_equal(acc.retry_after, 2);
}

/* Which denies the deny cache may keep: a log's always, a GCRA bucket's
 * only one unit short (its remaining grows before a bigger cost fits). */
static void test_deny_holds(void **state)
{
	struct window_policy p;
	struct window_decision d;

	(void)state;
	memset(&p, 0, sizeof(p));
	memset(&d, 0, sizeof(d));
	d.status = WINDOW_DENY;
	d.remaining = 0;
	assert_true(window_deny_holds(&p, 5, &d));
	p.algorithm = WINDOW_ALGO_GCRA;
	assert_true(window_deny_holds(&p, 1, &d));
	assert_false(window_deny_holds(&p, 2, &d));
	d.remaining = 1;
	assert_true(window_deny_holds(&p, 2, &d));
	assert_false(window_deny_holds(&p, 3, &d));
	d.status = WINDOW_ALLOW;
	assert_false(window_deny_holds(&p, 2, &d));
}

/* A calendar quota: its key names the period only (never the limit, tz or
 * anchor), its argument "cal:<kind>:<tz>:<anchor>", no 1.0.x key beside a
 * lone quota; a deny by it is reason=quota and is not kept in the deny
 * cache (its reason would be lost there). */
static void test_quota(void **state)
{
	struct window_policy p;
	struct window_args a;
	enum window_reason why;
	struct window_reply r = { .kind = WINDOW_REPLY_INTEGERS, .n = 6,
	                          .v = { 0, 100, 0, 86400000000LL, 86400000000LL, 1 } };
	struct window_decision d;

	(void)state;
	memset(&p, 0, sizeof(p));
	memcpy(p.name, "api", 3);
	p.name_len = 3;
	p.nwin = 2;
	p.win[0] = (struct window_limit){ .limit = 10, .window_ms = 1000 };
	p.win[1] = (struct window_limit){ .limit = 100, .window_ms = window_cal_ms(WINDOW_CAL_MONTH),
	                                  .cal = WINDOW_CAL_MONTH, .tz_min = -330, .anchor = 15 };
	p.legacy_key = true;
	assert_int_equal(window_build_args(&p, "sha", "jwt:A}", 6, 1, &a, &why), 0);
	assert_int_equal(a.nkeys, 2);
	assert_string_equal(a.argv[3], "api:limit:v1:{jwt:A%7D}:1s");
	assert_string_equal(a.argv[4], "api:limit:c1:{jwt:A%7D}:month");
	assert_string_equal(a.argv[8], "100");
	assert_string_equal(a.argv[9], "cal:m:-330:15");
	/* another limit, offset or anchor: the same key */
	p.win[1].limit = 5;
	p.win[1].tz_min = 60;
	p.win[1].anchor = 1;
	assert_int_equal(window_build_args(&p, "sha", "jwt:A}", 6, 1, &a, &why), 0);
	assert_string_equal(a.argv[4], "api:limit:c1:{jwt:A%7D}:month");
	assert_string_equal(a.argv[9], "cal:m:60:1");
	/* a lone quota has no 1.0.x key; the other periods */
	p.nwin = 1;
	p.win[0] = (struct window_limit){ .limit = 7, .window_ms = window_cal_ms(WINDOW_CAL_WEEK),
	                                  .cal = WINDOW_CAL_WEEK };
	assert_int_equal(window_build_args(&p, "sha", "jwt:B", 5, 1, &a, &why), 0);
	assert_int_equal(a.nkeys, 1);
	assert_string_equal(a.argv[3], "api:limit:c1:{jwt:B}:week");
	assert_string_equal(a.argv[6], "cal:w:0:1");
	assert_true(window_policy_has_quota(&p));
	/* above the quota: bad-cost, as above any limit */
	assert_int_equal(window_build_args(&p, "sha", "jwt:B", 5, 8, &a, &why), -1);
	assert_int_equal(why, WINDOW_REASON_BAD_COST);
	/* the deny names the quota when it decides */
	p.nwin = 2;
	p.win[0] = (struct window_limit){ .limit = 10, .window_ms = 1000 };
	p.win[1].cal = WINDOW_CAL_DAY;
	assert_int_equal(window_decide_reply(&p, &r, &d), 0);
	assert_int_equal(d.status, WINDOW_DENY);
	assert_int_equal(d.reason, WINDOW_REASON_QUOTA);
	assert_string_equal(window_reason_str(d.reason), "quota");
	assert_int_equal(d.retry_after, 86400);
	assert_false(window_deny_holds(&p, 1, &d));
	r.v[5] = 0;   /* the 1s window's deny: no reason */
	assert_int_equal(window_decide_reply(&p, &r, &d), 0);
	assert_int_equal(d.reason, WINDOW_REASON_NONE);
	p.shadow = true;   /* shadow: its own reason */
	r.v[5] = 1;
	assert_int_equal(window_decide_reply(&p, &r, &d), 0);
	assert_int_equal(d.reason, WINDOW_REASON_SHADOW_DENY);
	assert_string_equal(window_cal_name(WINDOW_CAL_HOUR), "hour");
	assert_int_equal(window_cal_ms(WINDOW_CAL_MONTH), 31 * 86400000ULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quota),
		cmocka_unit_test(test_strings),
		cmocka_unit_test(test_rounding),
		cmocka_unit_test(test_format_ms),
		cmocka_unit_test(test_format_ms_as_snprintf),
		cmocka_unit_test(test_args_batch),
		cmocka_unit_test(test_args_pool),
		cmocka_unit_test(test_args_leases),
		cmocka_unit_test(test_args_settle),
		cmocka_unit_test(test_args_single),
		cmocka_unit_test(test_args_multi),
		cmocka_unit_test(test_args_precision),
		cmocka_unit_test(test_args_gcra),
		cmocka_unit_test(test_check_precision),
		cmocka_unit_test(test_args_worst_case),
		cmocka_unit_test(test_args_tag_escape),
		cmocka_unit_test(test_keys_injective),
		cmocka_unit_test(test_args_legacy),
		cmocka_unit_test(test_args_overflow),
		cmocka_unit_test(test_args_bad_key),
		cmocka_unit_test(test_args_bad_cost),
		cmocka_unit_test(test_overrides),
		cmocka_unit_test(test_reply_allowed),
		cmocka_unit_test(test_reply_denied),
		cmocka_unit_test(test_reply_shadow),
		cmocka_unit_test(test_reply_errors),
		cmocka_unit_test(test_noscript),
		cmocka_unit_test(test_oom),
		cmocka_unit_test(test_evicts),
		cmocka_unit_test(test_fail_open),
		cmocka_unit_test(test_fail_closed),
		cmocka_unit_test(test_merge),
		cmocka_unit_test(test_deny_holds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
