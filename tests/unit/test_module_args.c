/*
 * test_module_args - the Redis module's pure half (module/rl_args.c):
 * RATELIMIT.DECIDE's argument layout, numbers and their bounds, stored
 * members, bucket ends. Compiled in (the module is not an agent object).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../module/rl_args.c"

#define MAXA 64

/* Splits <s> at spaces into <a> (borrowing <s>); the count. */
static size_t args_of(const char *s, struct rl_arg *a)
{
	size_t n = 0;
	const char *p = s;

	while (*p && n < MAXA) {
		const char *e = strchr(p, ' ');
		size_t len = e ? (size_t)(e - p) : strlen(p);

		a[n].p = p;
		a[n].len = len;
		n++;
		if (!e)
			break;
		p = e + 1;
	}
	return n;
}

static int parse_int(const char *s, int64_t *v)
{
	return rl_args_parse_int(s, strlen(s), v);
}

static void test_int(void **state)
{
	int64_t v = 0;

	(void)state;
	assert_int_equal(parse_int("0", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(parse_int("007", &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(parse_int("-12", &v), 0);
	assert_int_equal(v, -12);
	assert_int_equal(parse_int("999999999999999999", &v), 0);
	assert_true(v == 999999999999999999LL);
	assert_int_equal(parse_int("1000000000000000000", &v), -1);   /* 19 digits */
	assert_int_equal(parse_int("", &v), -1);
	assert_int_equal(parse_int("-", &v), -1);
	assert_int_equal(parse_int("+1", &v), -1);
	assert_int_equal(parse_int(" 1", &v), -1);
	assert_int_equal(parse_int("1 ", &v), -1);
	assert_int_equal(parse_int("1.5", &v), -1);
	assert_int_equal(parse_int("1e3", &v), -1);
	assert_int_equal(parse_int("nan", &v), -1);
	assert_int_equal(parse_int("0x10", &v), -1);
}

static enum rl_err single(const char *s, size_t nkeys, struct rl_decision *d)
{
	struct rl_arg a[MAXA];
	size_t n = args_of(s, a);

	return rl_args_parse_single(a, n, nkeys, d);
}

static void test_single(void **state)
{
	struct rl_decision d;

	(void)state;
	assert_int_equal(single("2 3 1000", 1, &d), RL_OK);
	assert_int_equal(d.nwin, 1);
	assert_true(d.cost == 2 && d.w[0].limit == 3 && d.w[0].win_ms == 1000 && d.w[0].prec_ms == 0);
	assert_int_equal(single("1 10 10000 5 3600000:60000", 2, &d), RL_OK);
	assert_true(d.w[1].limit == 5 && d.w[1].win_ms == 3600000 && d.w[1].prec_ms == 60000);
	/* arity */
	assert_int_equal(single("1 3", 1, &d), RL_ERR_ARGS);
	assert_int_equal(single("1 3 1000 4", 1, &d), RL_ERR_ARGS);
	assert_int_equal(single("1 3 1000", 2, &d), RL_ERR_ARGS);
	assert_int_equal(single("1 3 1000", 0, &d), RL_ERR_ARGS);
	/* cost */
	assert_int_equal(single("0 3 1000", 1, &d), RL_ERR_ARGS);
	assert_int_equal(single("-1 3 1000", 1, &d), RL_ERR_ARGS);
	assert_int_equal(single("x 3 1000", 1, &d), RL_ERR_ARGS);
	assert_int_equal(single("1000000000000000 1000000000000000 1000", 1, &d), RL_OK);
	assert_int_equal(single("1000000000000001 1000000000000000 1000", 1, &d), RL_ERR_ARGS);
	/* limits and windows */
	assert_int_equal(single("1 0 1000", 1, &d), RL_ERR_WINDOW);
	assert_int_equal(single("1 1000000000000001 1000", 1, &d), RL_ERR_WINDOW);
	assert_int_equal(single("1 3 0", 1, &d), RL_ERR_WINDOW);
	assert_int_equal(single("1 3 1000000000000", 1, &d), RL_OK);
	assert_int_equal(single("1 3 1000000000001", 1, &d), RL_ERR_WINDOW);
	assert_int_equal(single("1 3 1000:0", 1, &d), RL_ERR_WINDOW);
	assert_int_equal(single("1 3 1000:", 1, &d), RL_ERR_WINDOW);
	assert_int_equal(single("1 3 :100", 1, &d), RL_ERR_WINDOW);
	assert_int_equal(single("1 3 1000:-1", 1, &d), RL_ERR_WINDOW);
	assert_int_equal(single("1 3 -1000:1", 1, &d), RL_ERR_WINDOW);
	assert_int_equal(single("1 3 1000:10:1", 1, &d), RL_ERR_WINDOW);
	assert_int_equal(single("1 3 1000 0 5", 2, &d), RL_ERR_WINDOW);
}

/* GCRA: "gcra:<ms>:<burst>" parsed and bounded (burst * ms * 1000 <=
 * 2^52), one window only; the stored "<tat>:<frac>"; the decision's
 * arithmetic at the edges the contract table names, and at the bounds
 * (no overflow: UBSan would say). */
static void test_gcra(void **state)
{
	struct rl_decision d;
	struct rl_gcra g;
	struct rl_window w = { .limit = 3, .win_ms = 1000, .burst = 3 };
	struct rl_gcra_value v, old;
	char buf[96];

	(void)state;
	assert_int_equal(single("1 3 gcra:1000:3", 1, &d), RL_OK);
	assert_true(d.w[0].limit == 3 && d.w[0].win_ms == 1000 && d.w[0].burst == 3 && d.w[0].prec_ms == 0);
	assert_int_equal(single("1 3 1000", 1, &d), RL_OK);
	assert_int_equal(d.w[0].burst, 0);
	assert_int_equal(single("1 3 gcra:1000:0", 1, &d), RL_ERR_WINDOW);
	assert_int_equal(single("1 3 gcra:0:3", 1, &d), RL_ERR_WINDOW);
	assert_int_equal(single("1 3 gcra:1000", 1, &d), RL_ERR_WINDOW);
	assert_int_equal(single("1 3 gcra:", 1, &d), RL_ERR_WINDOW);
	assert_int_equal(single("1 3 gcra:-1:3", 1, &d), RL_ERR_WINDOW);
	assert_int_equal(single("1 3 gcra:1000:3:1", 1, &d), RL_ERR_WINDOW);
	/* 2^52 us exactly, and one ms more */
	assert_int_equal(single("1 1 gcra:4503599627:1000", 1, &d), RL_OK);
	assert_int_equal(single("1 1 gcra:4503599628:1000", 1, &d), RL_ERR_WINDOW);
	assert_int_equal(single("1 3 gcra:1000:3 5 1000", 2, &d), RL_ERR_WINDOW);
	assert_int_equal(single("1 5 1000 3 gcra:1000:3", 2, &d), RL_ERR_WINDOW);

	assert_int_equal(rl_args_parse_gcra("123:4", 5, &v), 0);
	assert_true(v.tat == 123 && v.frac == 4 && v.win_ms == 0);
	assert_int_equal(rl_args_parse_gcra("9007199254740992:0", 18, &v), 0);
	assert_int_equal(rl_args_parse_gcra("9007199254740993:0", 18, &v), -1);
	assert_int_equal(rl_args_parse_gcra("1:-1", 4, &v), -1);
	assert_int_equal(rl_args_parse_gcra("-1:1", 4, &v), -1);
	assert_int_equal(rl_args_parse_gcra("12", 2, &v), -1);
	assert_int_equal(rl_args_parse_gcra("1:2:3", 5, &v), -1);
	assert_int_equal(rl_args_parse_gcra(":2", 2, &v), -1);
	assert_int_equal(rl_args_parse_gcra("4000000000333333:1", 18, &v), 0);
	assert_int_equal(rl_args_format_gcra(buf, sizeof(buf), &v), 18);
	assert_string_equal(buf, "4000000000333333:1");
	/* the form with the rate it was written under */
	assert_int_equal(rl_args_parse_gcra("500:1:1000:10:400", 17, &v), 0);
	assert_true(v.tat == 500 && v.frac == 1 && v.win_ms == 1000 && v.limit == 10 && v.owed == 400);
	assert_int_equal(rl_args_format_gcra(buf, sizeof(buf), &v), 17);
	assert_string_equal(buf, "500:1:1000:10:400");
	assert_int_equal(rl_args_parse_gcra("500:1:0:10:400", 14, &v), -1);
	assert_int_equal(rl_args_parse_gcra("500:1:1000:0:400", 16, &v), -1);
	assert_int_equal(rl_args_parse_gcra("500:1:1000:10:501", 17, &v), -1);
	assert_int_equal(rl_args_parse_gcra("500:1:1000000000001:10:1", 24, &v), -1);
	assert_int_equal(rl_args_parse_gcra("500:1:1000:1000000000000001:1", 29, &v), -1);
	assert_int_equal(rl_args_parse_gcra("500:1:1000:10", 13, &v), -1);
	assert_int_equal(rl_args_parse_gcra("500:1:1000:10:1:1", 17, &v), -1);
	assert_int_equal(rl_args_parse_gcra("500:1:1000::1", 13, &v), -1);

	/* empty, 3/1s burst 3: T = 333333 + 1/3 us */
	assert_int_equal(rl_args_gcra(&w, 1, 1000000, NULL, &g), 0);
	assert_true(g.allowed == 1 && g.remaining == 2 && g.reset == 333334 && g.retry == 0);
	assert_true(g.tat == 1333333 && g.frac == 1 && g.ttl_ms == 335);
	/* full at now: one us before the boundary, then at it */
	v = (struct rl_gcra_value){ 1000000, 0, 0, 0, 0 };
	rl_args_gcra(&w, 1, 333333, &v, &g);
	assert_true(g.allowed == 0 && g.retry == 1 && g.reset == 666667 && g.remaining == 0);
	rl_args_gcra(&w, 1, 333334, &v, &g);
	assert_true(g.allowed == 1 && g.tat == 1333333 && g.frac == 1);
	/* the same in the form with its rate: the same answers */
	v = (struct rl_gcra_value){ 1000000, 0, 1000, 3, 1000000 };
	rl_args_gcra(&w, 1, 333333, &v, &g);
	assert_true(g.allowed == 0 && g.retry == 1 && g.reset == 666667 && g.remaining == 0);
	rl_args_gcra(&w, 1, 333334, &v, &g);
	assert_true(g.allowed == 1 && g.tat == 1333333 && g.frac == 1);
	/* cost above the burst: the whole bucket's time */
	rl_args_gcra(&w, 4, 0, NULL, &g);
	assert_true(g.allowed == 0 && g.retry == 1000000 && g.remaining == 3);
	/* a change of rate (issue 35): 10/1s burst 5 drained at 0, read 1 ms
	 * later under 2/1s burst 5: 5 units = 2.5 s owed, denied */
	old = (struct rl_gcra_value){ 500000, 0, 1000, 10, 500000 };
	w = (struct rl_window){ .limit = 2, .win_ms = 1000, .burst = 5 };
	assert_int_equal(rl_args_gcra(&w, 1, 1000, &old, &g), 0);
	assert_true(g.allowed == 0 && g.reset == 2499000 && g.retry == 499000 && g.remaining == 0);
	/* an override 1/1h admitted at 0, read at 4 s under 3/1s: full */
	old = (struct rl_gcra_value){ 3600000000LL, 0, 3600000, 1, 3600000000LL };
	w = (struct rl_window){ .limit = 3, .win_ms = 1000, .burst = 3 };
	rl_args_gcra(&w, 1, 4000000, &old, &g);
	assert_true(g.allowed == 1 && g.remaining == 2 && g.reset == 333334);
	/* written more than 2^52 us after now: not ours */
	old = (struct rl_gcra_value){ RL_GCRA_MAX_SPAN + 1, 0, 1000, 3, 0 };
	assert_int_equal(rl_args_gcra(&w, 1, 0, &old, &g), -1);
	old.tat = RL_GCRA_MAX_SPAN;
	assert_int_equal(rl_args_gcra(&w, 1, 0, &old, &g), 0);
	assert_true(g.allowed == 0 && g.reset == RL_GCRA_MAX_SPAN);
	/* the largest owed units at the largest rates: no overflow */
	old = (struct rl_gcra_value){ RL_MAX_MEMBER, RL_MAX_UNITS - 1, RL_MAX_MS, RL_MAX_UNITS, RL_MAX_MEMBER };
	w = (struct rl_window){ .limit = 1, .win_ms = 4503599627, .burst = 1000 };
	assert_int_equal(rl_args_gcra(&w, 1, 1, &old, &g), 0);
	assert_true(g.allowed == 0 && g.remaining == 0 && g.reset == 4503599626999999LL);
	old = (struct rl_gcra_value){ 1000000, 999999999999999LL, 1000000000000LL, 1000000000000000LL, 1 };
	assert_int_equal(rl_args_gcra(&w, 1, 999999, &old, &g), 0);
	assert_true(g.allowed == 1);
	w = (struct rl_window){ .limit = 3, .win_ms = 1000, .burst = 3 };
	/* at the bounds: the largest span, a TAT far ahead, the largest limit */
	w.limit = 1;
	w.win_ms = 4503599627;
	w.burst = 1000;
	rl_args_gcra(&w, 1000, 0, NULL, &g);
	assert_true(g.allowed == 1 && g.tat == 4503599627000000LL && g.remaining == 0);
	v = (struct rl_gcra_value){ 9007199254740992LL, 999, 0, 0, 0 };
	rl_args_gcra(&w, 1, -4000000000000000LL, &v, &g);
	assert_true(g.allowed == 0 && g.remaining == 0);
	w.limit = 1000000000000000LL;
	w.win_ms = 1;
	w.burst = 1;
	v = (struct rl_gcra_value){ 0, 999999999999999LL, 0, 0, 0 };
	rl_args_gcra(&w, 1, 0, &v, &g);
	assert_true(g.allowed == 0 && g.retry == 1);
}

static enum rl_err batch(const char *s, size_t nkeys, size_t *n)
{
	struct rl_arg a[MAXA];
	size_t na = args_of(s, a);

	assert_true(rl_args_is_batch(a, na));
	return rl_args_batch_check(a, na, nkeys, n);
}

static void test_batch(void **state)
{
	struct rl_arg a[MAXA];
	struct rl_decision d;
	struct rl_batch_iter it = { 0, 2 };
	size_t n = 0, na;

	(void)state;
	assert_int_equal(batch("batch 2 2 1 3 1000 5 3600000:60000 1 2 10 1000", 3, &n), RL_OK);
	assert_int_equal(n, 2);
	assert_int_equal(batch("batch 1 1 1 3 1000", 1, &n), RL_OK);
	assert_int_equal(batch("batch 0 1 1 3 1000", 1, &n), RL_ERR_BATCH);
	assert_int_equal(batch("batch 2 1 1 3 1000", 1, &n), RL_ERR_BATCH);           /* count above */
	assert_int_equal(batch("batch 1 1 1 3 1000 1 1 3 1000", 2, &n), RL_ERR_BATCH); /* below */
	assert_int_equal(batch("batch 1 2 1 3 1000 3 1000", 1, &n), RL_ERR_BATCH);     /* keys */
	assert_int_equal(batch("batch 1 1 1 3 1000", 2, &n), RL_ERR_BATCH);            /* keys left */
	assert_int_equal(batch("batch 1 1 1 3", 1, &n), RL_ERR_BATCH);                 /* cut short */
	assert_int_equal(batch("batch 1 0 1", 1, &n), RL_ERR_BATCH);
	assert_int_equal(batch("batch x 1 1 3 1000", 1, &n), RL_ERR_BATCH);
	assert_int_equal(batch("batch", 1, &n), RL_ERR_BATCH);
	assert_int_equal(batch("batch 99999999999999999 1 1 3 1000", 1, &n), RL_ERR_BATCH);

	/* a bad decision is its own error; the walk goes on */
	na = args_of("batch 3 1 1 3 1000 1 0 3 1000 2 1 3 1000 4 1000:100", a);
	assert_int_equal(rl_args_batch_check(a, na, 4, &n), RL_OK);
	assert_int_equal(rl_args_batch_next(a, &it, &d), RL_OK);
	assert_int_equal(d.key0, 0);
	assert_int_equal(rl_args_batch_next(a, &it, &d), RL_ERR_ARGS);
	assert_int_equal(rl_args_batch_next(a, &it, &d), RL_OK);
	assert_int_equal(d.key0, 2);
	assert_int_equal(d.nwin, 2);
	assert_true(d.w[1].prec_ms == 100);
	assert_int_equal(it.ki, 4);
	assert_int_equal(it.ai, na);
	/* "batch" is the batch form only spelled so */
	na = args_of("BATCH 1 1 1 3 1000", a);
	assert_false(rl_args_is_batch(a, na));
}

static int member(const char *s, int64_t *cum, int64_t *cost)
{
	return rl_args_parse_member(s, strlen(s), cum, cost);
}

static void test_member(void **state)
{
	int64_t cum = 0, cost = 0;
	char buf[48];

	(void)state;
	assert_int_equal(member("f4240:f4240", &cum, &cost), 0);
	assert_true(cum == 1000000 && cost == 1000000);
	assert_int_equal(member("A:b", &cum, &cost), 0);
	assert_true(cum == 10 && cost == 11);
	assert_int_equal(member("00001:1", &cum, &cost), 0);
	assert_int_equal(member("20000000000000:1", &cum, &cost), 0);      /* 2^53 */
	assert_int_equal(member("20000000000001:1", &cum, &cost), -1);     /* above */
	assert_int_equal(member("0123456789abcdef-0-1:1", &cum, &cost), -1);
	assert_int_equal(member("1:1:5f5e100", &cum, &cost), -1);
	assert_int_equal(member("1:", &cum, &cost), -1);
	assert_int_equal(member(":1", &cum, &cost), -1);
	assert_int_equal(member("11", &cum, &cost), -1);
	assert_int_equal(member("", &cum, &cost), -1);
	assert_int_equal(member("g:1", &cum, &cost), -1);
	assert_int_equal(rl_args_format_member(buf, sizeof(buf), 255, 16), 5);
	assert_string_equal(buf, "ff:10");
	assert_int_equal(rl_args_format_member(buf, sizeof(buf), 0, 0), 3);
	assert_string_equal(buf, "0:0");
	assert_int_equal(rl_args_format_member(buf, 3, 255, 16), 0);       /* too small */
}

static void test_bucket_end(void **state)
{
	(void)state;
	/* (floor(floor(now / 1000) / p) + 1) * p */
	assert_true(rl_args_bucket_end(3600000000LL, 60000) == 3660000);
	assert_true(rl_args_bucket_end(3659999999LL, 60000) == 3660000);
	assert_true(rl_args_bucket_end(3660000000LL, 60000) == 3720000);
	assert_true(rl_args_bucket_end(999, 1) == 1);
	assert_true(rl_args_bucket_end(0, 100) == 100);
	assert_true(rl_args_bucket_end(-1, 100) == 0);
	assert_true(rl_args_bucket_end(-100001, 100) == -100);
}

/* Days of month <m> of year <y>, the plain rule (the test's own calendar). */
static int month_days(int64_t y, int64_t m)
{
	static const int d[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

	return d[m - 1] + (m == 2 && leap);
}

#define US_DAY 86400000000LL

/* Every day from 1899-01-01 to 2101-12-31 (1900 and 2100 not leap, 2000
 * leap), counted one by one: both conversions agree with the count; and
 * at every day boundary under offsets of -14:00 .. +14:00 each period
 * holds the microsecond before or after it as the calendar says: a day
 * from 00:00, a week from Monday 00:00, a month from its anchor day. */
static void test_calendar(void **state)
{
	static const int64_t tzs[] = { -840, -330, -60, 0, 60, 330, 840 };
	static const int64_t anchors[] = { 1, 15, 28 };
	int64_t y = 1899, m = 1, d = 1, z = rl_cal_days_from_civil(1899, 1, 1), wd, ny, nm, nd;
	size_t t, a, days = 0;

	(void)state;
	/* 1899-01-01 was a Sunday: 25567 + 365 days before 1970 */
	assert_int_equal(z, -25567 - 365);
	assert_int_equal(rl_cal_days_from_civil(1970, 1, 1), 0);
	assert_int_equal(rl_cal_days_from_civil(2000, 3, 1), 11017);
	wd = 6;   /* days since Monday */
	for (; y <= 2101; z++, days++, wd = (wd + 1) % 7) {
		assert_int_equal(rl_cal_days_from_civil(y, m, d), z);
		rl_cal_civil_from_days(z, &ny, &nm, &nd);
		assert_int_equal(ny, y);
		assert_int_equal(nm, m);
		assert_int_equal(nd, d);
		/* the boundary at 00:00 of this day, in each offset */
		for (t = 0; t < sizeof(tzs) / sizeof(tzs[0]); t++) {
			struct rl_window w = { .limit = 1, .tz_min = tzs[t], .anchor = 1 };
			int64_t b = z * US_DAY - tzs[t] * 60000000LL, st, en;

			w.cal = RL_CAL_DAY;
			rl_cal_period(&w, b, &st, &en);
			assert_true(st == b && en == b + US_DAY);
			rl_cal_period(&w, b - 1, &st, &en);
			assert_true(st == b - US_DAY && en == b);
			w.cal = RL_CAL_HOUR;
			rl_cal_period(&w, b + 3600000000LL - 1, &st, &en);
			assert_true(st == b && en == b + 3600000000LL);
			w.cal = RL_CAL_WEEK;
			rl_cal_period(&w, b, &st, &en);
			assert_true(st == b - wd * US_DAY && en == st + 7 * US_DAY);
			rl_cal_period(&w, b - 1, &st, &en);
			assert_true(wd == 0 ? en == b : en == b + (7 - wd) * US_DAY);
			w.cal = RL_CAL_MONTH;
			for (a = 0; a < sizeof(anchors) / sizeof(anchors[0]); a++) {
				int64_t py = m == 1 ? y - 1 : y, pm = m == 1 ? 12 : m - 1;
				int64_t start_days, len;

				w.anchor = anchors[a];
				rl_cal_period(&w, b, &st, &en);
				/* the period began on the anchor day of this month or the last */
				start_days = d >= w.anchor ? z - (d - w.anchor)
				                           : z - d - (month_days(py, pm) - w.anchor);
				len = d >= w.anchor ? month_days(y, m) : month_days(py, pm);
				if (st != start_days * US_DAY - tzs[t] * 60000000LL ||
				    en != st + len * US_DAY)
					fail_msg("%lld-%02lld-%02lld tz %lld anchor %lld: [%lld, %lld)",
					         (long long)y, (long long)m, (long long)d, (long long)tzs[t],
					         (long long)w.anchor, (long long)st, (long long)en);
				/* the last microsecond before the anchor day is the last period's */
				if (d == w.anchor) {
					rl_cal_period(&w, b - 1, &st, &en);
					assert_true(en == b);
				}
			}
		}
		if (++d > month_days(y, m)) {
			d = 1;
			if (++m > 12) {
				m = 1;
				y++;
			}
		}
	}
	assert_int_equal(days, 203 * 365 + 49);
}

/* "cal:<kind>:<tz>:<anchor>" and a counter "<end>:<units>". */
static void test_quota_args(void **state)
{
	struct rl_arg a[MAXA];
	struct rl_decision d;
	struct rl_quota_value v;
	char buf[64];

	(void)state;
	assert_int_equal(rl_args_parse_single(a, args_of("1 10 cal:m:-330:15", a), 1, &d), RL_OK);
	assert_int_equal(d.w[0].cal, RL_CAL_MONTH);
	assert_int_equal(d.w[0].tz_min, -330);
	assert_int_equal(d.w[0].anchor, 15);
	assert_int_equal(rl_args_parse_single(a, args_of("1 10 cal:h:840:1", a), 1, &d), RL_OK);
	assert_int_equal(d.w[0].cal, RL_CAL_HOUR);
	assert_int_equal(rl_args_parse_single(a, args_of("1 10 1000 5 cal:w:0:1", a), 2, &d), RL_OK);
	assert_int_equal(d.w[1].cal, RL_CAL_WEEK);
	assert_int_equal(d.w[0].cal, RL_CAL_NONE);
	static const char *const bad[] = {
		"1 10 cal:m:841:1", "1 10 cal:m:-841:1", "1 10 cal:m:0:29", "1 10 cal:m:0:0",
		"1 10 cal:y:0:1", "1 10 cal:m:+1:1", "1 10 cal:m:0", "1 10 cal:m::1", "1 10 cal:m:-:1",
		"1 10 cal:mm:0:1", "1 10 cal:", "1 10 cal:m:0:-1",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (rl_args_parse_single(a, args_of(bad[i], a), 1, &d) != RL_ERR_WINDOW)
			fail_msg("'%s' parsed", bad[i]);
	assert_int_equal(rl_args_parse_quota("4002566400000000:3", 18, &v), 0);
	assert_int_equal(v.end, 4002566400000000LL);
	assert_int_equal(v.units, 3);
	assert_int_equal(rl_args_format_quota(buf, sizeof(buf), &v), 18);
	assert_string_equal(buf, "4002566400000000:3");
	assert_int_equal(rl_args_parse_quota("1:2:3", 5, &v), -1);
	assert_int_equal(rl_args_parse_quota("-1:2", 4, &v), -1);
	assert_int_equal(rl_args_parse_quota("abc", 3, &v), -1);
	v = (struct rl_quota_value){ 4002566400000000LL, 3 };
	/* (one byte short of the text and its NUL; a size the compiler cannot see) */
	assert_int_equal(rl_args_format_quota(buf, (size_t)atoi("18"), &v), 0);
}

static void test_err_text(void **state)
{
	(void)state;
	assert_null(rl_args_err_text(RL_OK));
	assert_string_equal(rl_args_err_text(RL_ERR_ARGS), "ERR sliding_window: bad arguments");
	assert_string_equal(rl_args_err_text(RL_ERR_WINDOW), "ERR sliding_window: bad limit or window");
	assert_string_equal(rl_args_err_text(RL_ERR_BATCH), "ERR sliding_window: bad batch");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_int),        cmocka_unit_test(test_single),
		cmocka_unit_test(test_batch),      cmocka_unit_test(test_member),
		cmocka_unit_test(test_bucket_end), cmocka_unit_test(test_err_text),
		cmocka_unit_test(test_gcra),
		cmocka_unit_test(test_calendar),   cmocka_unit_test(test_quota_args),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
