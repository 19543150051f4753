/*
 * test_deny_cache - the limiter's local deny cache on its own (no I/O, no
 * clock: the tests pass the monotonic time): a hit counts down from the
 * cached deadlines, only the cost denied is answered, an entry answers
 * only until its reset, an admission forgets it, expiry, replacement of
 * the same key, eviction of the entry that expires first, clear, the
 * configured size, the table given back once no entry is live, and an
 * entry answered only under the limits (rule) that made it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "deny_cache.h"

#define S 1000000   /* one second in microseconds */
#define RULE 7      /* the rule the entries are made and asked under */

static struct window_decision deny(int64_t retry_after_us, int64_t reset_s)
{
	struct window_decision d;

	memset(&d, 0, sizeof(d));
	d.status = WINDOW_DENY;
	d.has_quota = true;
	d.limit = 10;
	d.remaining = 0;
	d.retry_after_us = retry_after_us;
	d.retry_after = window_us_to_s_ceil(retry_after_us);
	d.reset = reset_s;
	d.reset_us = reset_s * S;
	d.window = 60;
	return d;
}

static void store(struct deny_cache *dc, const char *key, uint64_t cost, int64_t sent,
                  int64_t retry_us, int64_t now)
{
	struct window_decision d = deny(retry_us, 60);

	deny_cache_store(dc, "api", 3, key, strlen(key), RULE, cost, sent, &d, now);
}

static bool lookup(struct deny_cache *dc, const char *key, uint64_t cost, int64_t now,
                   struct window_decision *d)
{
	return deny_cache_lookup(dc, "api", 3, key, strlen(key), RULE, cost, now, d);
}

static void test_empty(void **state)
{
	struct deny_cache dc;
	struct window_decision d;

	(void)state;
	deny_cache_init(&dc, 42);
	assert_false(lookup(&dc, "k", 1, 0, &d));
	assert_null(dc.slots);   /* nothing allocated before the first deny */
	deny_cache_clear(&dc);
}

static void test_hit_counts_down(void **state)
{
	struct deny_cache dc;
	struct window_decision d;

	(void)state;
	deny_cache_init(&dc, 42);
	/* sent at 10 s, answered at 10.1 s: denied for 5 s from the send */
	store(&dc, "k", 1, 10 * S, 5 * S, 10 * S + S / 10);
	assert_true(lookup(&dc, "k", 1, 11 * S, &d));
	assert_int_equal(d.status, WINDOW_DENY);
	assert_int_equal(d.retry_after_us, 4 * S);
	assert_int_equal(d.retry_after, 4);
	assert_int_equal(d.limit, 10);
	assert_int_equal(d.remaining, 0);
	assert_int_equal(d.window, 60);
	/* reset counts down from its own deadline (10 s + 60 s) */
	assert_int_equal(d.reset, 59);
	assert_int_equal(d.reset_us, 59 * S);
	/* less than a second left still says 1 */
	assert_true(lookup(&dc, "k", 1, 15 * S - 1, &d));
	assert_int_equal(d.retry_after, 1);
	/* another key, another policy: not cached */
	assert_false(lookup(&dc, "other", 1, 11 * S, &d));
	assert_false(deny_cache_lookup(&dc, "web", 3, "k", 1, RULE, 1, 11 * S, &d));
	deny_cache_clear(&dc);
}

static void test_expiry_and_cost(void **state)
{
	struct deny_cache dc;
	struct window_decision d;

	(void)state;
	deny_cache_init(&dc, 7);
	store(&dc, "k", 5, 0, 2 * S, 0);
	assert_true(lookup(&dc, "k", 5, S, &d));
	/* at the deadline the request may pass, and the entry is emptied */
	assert_false(lookup(&dc, "k", 5, 2 * S, &d));
	assert_false(lookup(&dc, "k", 5, S, &d));
	/* a deny already over when it arrives is not stored */
	store(&dc, "late", 1, 0, S, 2 * S);
	assert_false(lookup(&dc, "late", 1, 0, &d));
	store(&dc, "zero", 1, 0, 0, 0);
	assert_false(lookup(&dc, "zero", 1, 0, &d));
	deny_cache_clear(&dc);
}

static void test_replace_and_clear(void **state)
{
	struct deny_cache dc;
	struct window_decision d;

	(void)state;
	deny_cache_init(&dc, 9);
	store(&dc, "k", 1, 0, 10 * S, 0);
	store(&dc, "k", 1, 0, 3 * S, 0);   /* the same key: replaced, not added */
	assert_true(lookup(&dc, "k", 1, S, &d));
	assert_int_equal(d.retry_after_us, 2 * S);
	deny_cache_clear(&dc);
	assert_null(dc.slots);
	assert_false(lookup(&dc, "k", 1, S, &d));
	/* oversized names or keys are never stored (nor read past) */
	{
		char big[WINDOW_KEY_MAX + 2];
		struct window_decision x = deny(S, 1);

		memset(big, 'a', sizeof(big));
		deny_cache_store(&dc, "api", 3, big, sizeof(big), RULE, 1, 0, &x, 0);
		assert_false(deny_cache_lookup(&dc, "api", 3, big, sizeof(big), RULE, 1, 0, &d));
	}
	deny_cache_clear(&dc);
}

/* More keys than slots: the table stays bounded, every lookup answers from
 * what it holds, and the newest denies are found (an entry that expires
 * first is the one given up). */
static void test_bounded(void **state)
{
	struct deny_cache dc;
	struct window_decision d;
	char key[32];
	unsigned i, found = 0;

	(void)state;
	deny_cache_init(&dc, 1);
	for (i = 0; i < 2 * DENY_CACHE_SLOTS; i++) {
		snprintf(key, sizeof(key), "k%u", i);
		store(&dc, key, 1, 0, (int64_t)(i + 1) * 1000 + S, 0);
	}
	for (i = 0; i < 2 * DENY_CACHE_SLOTS; i++) {
		snprintf(key, sizeof(key), "k%u", i);
		found += lookup(&dc, key, 1, 1, &d);
	}
	assert_true(found <= DENY_CACHE_SLOTS);
	assert_true(found > DENY_CACHE_SLOTS / 2);
	/* the last one stored always stays */
	snprintf(key, sizeof(key), "k%u", 2 * DENY_CACHE_SLOTS - 1);
	assert_true(lookup(&dc, key, 1, 1, &d));
	deny_cache_clear(&dc);
}

/* deny-cache-size: rounded up to a power of two (at least the probe
 * window), and the table holds no more than that. */
static void test_size(void **state)
{
	struct deny_cache dc;
	struct window_decision d;
	char key[32];
	unsigned i, found = 0;

	(void)state;
	deny_cache_init(&dc, 3);
	assert_int_equal(dc.nslots, DENY_CACHE_SLOTS);
	deny_cache_set_size(&dc, 1);
	assert_int_equal(dc.nslots, DENY_CACHE_PROBES);
	deny_cache_set_size(&dc, 100);
	assert_int_equal(dc.nslots, 128);
	for (i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "k%u", i);
		store(&dc, key, 1, 0, 10 * S, 0);
	}
	assert_int_equal(deny_cache_bytes(&dc), 128 * deny_cache_entry_size());
	for (i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "k%u", i);
		found += lookup(&dc, key, 1, 1, &d);
	}
	assert_true(found <= 128 && found > 64);
	/* a new size empties it */
	deny_cache_set_size(&dc, 4096);
	assert_int_equal(deny_cache_bytes(&dc), 0);
	assert_false(lookup(&dc, "k999", 1, 1, &d));
	deny_cache_clear(&dc);
}

/* The table is given back once no entry in it can be live (the latest
 * deadline passed), not before; the next deny maps it again. */
static void test_trim_when_none_live(void **state)
{
	struct deny_cache dc;
	struct window_decision d;

	(void)state;
	deny_cache_init(&dc, 5);
	assert_int_equal(deny_cache_trim(&dc, 0), 0);       /* nothing mapped */
	store(&dc, "a", 1, 0, 2 * S, 0);
	store(&dc, "b", 1, S, 5 * S, S);                     /* live until 6 s */
	store(&dc, "c", 1, 2 * S, 1 * S, 2 * S);             /* until 3 s */
	assert_int_equal(deny_cache_bytes(&dc), DENY_CACHE_SLOTS * deny_cache_entry_size());
	assert_int_equal(deny_cache_trim(&dc, 4 * S), 0);   /* "b" still live */
	assert_true(lookup(&dc, "b", 1, 4 * S, &d));
	assert_non_null(dc.slots);
	assert_int_equal(deny_cache_trim(&dc, 6 * S), 1);
	assert_null(dc.slots);
	assert_int_equal(deny_cache_bytes(&dc), 0);
	assert_false(lookup(&dc, "b", 1, 6 * S, &d));
	store(&dc, "d", 1, 7 * S, S, 7 * S);
	assert_true(lookup(&dc, "d", 1, 7 * S, &d));
	assert_int_equal(deny_cache_trim(&dc, 7 * S), 0);
	assert_int_equal(deny_cache_trim(&dc, 8 * S), 1);
	deny_cache_clear(&dc);
}

/* The case (policy 5/10s): a deny of cost 2 is not an answer for
 * cost 1 (it may pass) nor for cost 3 (it waits longer); asking Redis
 * empties the entry, since that call may be admitted. */
static void test_only_the_cost_denied(void **state)
{
	struct deny_cache dc;
	struct window_decision d = deny(6 * S, 6);

	(void)state;
	deny_cache_init(&dc, 11);
	d.remaining = 1;
	deny_cache_store(&dc, "api", 3, "k", 1, RULE, 2, 0, &d, 0);
	assert_true(lookup(&dc, "k", 2, S / 10, &d));
	assert_int_equal(d.remaining, 1);
	assert_false(lookup(&dc, "k", 3, S / 10, &d));
	assert_false(lookup(&dc, "k", 2, S / 10, &d));   /* emptied by the miss */
	d = deny(6 * S, 6);
	deny_cache_store(&dc, "api", 3, "k", 1, RULE, 2, 0, &d, 0);
	assert_false(lookup(&dc, "k", 1, S / 10, &d));
	assert_false(lookup(&dc, "k", 2, S / 10, &d));
	deny_cache_clear(&dc);
}

/* An admission seen on the key forgets its deny; other keys keep theirs. */
static void test_admission_forgets(void **state)
{
	struct deny_cache dc;
	struct window_decision d;

	(void)state;
	deny_cache_init(&dc, 13);
	deny_cache_forget(&dc, "api", 3, "k", 1);   /* nothing mapped: no-op */
	store(&dc, "k", 1, 0, 5 * S, 0);
	store(&dc, "j", 1, 0, 5 * S, 0);
	deny_cache_forget(&dc, "api", 3, "k", 1);
	assert_false(lookup(&dc, "k", 1, S, &d));
	assert_true(lookup(&dc, "j", 1, S, &d));
	deny_cache_forget(&dc, "web", 3, "j", 1);   /* another policy */
	assert_true(lookup(&dc, "j", 1, S, &d));
	deny_cache_clear(&dc);
}

/* Time passing: until the reset the numbers are Redis's, counted down;
 * from the reset an entry left the window (remaining grew), so Redis is
 * asked even though the retry deadline for this cost is later. A deny
 * whose reset already passed when it arrives is not stored. */
static void test_until_reset(void **state)
{
	struct deny_cache dc;
	struct window_decision d = deny(8 * S, 6);

	(void)state;
	deny_cache_init(&dc, 17);
	d.reset_us = 5 * S + S / 2;   /* the first entry leaves at 5.5 s */
	deny_cache_store(&dc, "api", 3, "k", 1, RULE, 2, S, &d, S);
	assert_true(lookup(&dc, "k", 2, 4 * S, &d));
	assert_int_equal(d.retry_after_us, 5 * S);
	assert_int_equal(d.retry_after, 5);
	assert_int_equal(d.reset_us, 2 * S + S / 2);
	assert_int_equal(d.reset, 3);
	assert_true(lookup(&dc, "k", 2, 6 * S + S / 2 - 1, &d));
	assert_false(lookup(&dc, "k", 2, 6 * S + S / 2, &d));
	/* the trim follows the reset too */
	assert_int_equal(deny_cache_trim(&dc, 6 * S + S / 2), 1);
	d = deny(8 * S, 6);
	d.reset_us = S;
	deny_cache_store(&dc, "api", 3, "k", 1, RULE, 2, 0, &d, S);
	assert_false(lookup(&dc, "k", 2, S, &d));
	deny_cache_clear(&dc);
}

/* policy 3/1s; a live override 1/1h denies with Retry-After ~1 h; once it
 * ends (expiry or removal) the policy's limits apply again, and the deny
 * the override made must not be answered (it once was, for an hour) */
static void test_only_the_rule_denied(void **state)
{
	struct window_policy p;
	struct window_limit live = { .limit = 1, .window_ms = 3600 * 1000 }, raised[2];
	struct window_decision d = deny((int64_t)3598 * S, 3598);
	uint64_t under_live, under_policy;
	struct deny_cache dc;

	(void)state;
	memset(&p, 0, sizeof(p));
	p.nwin = 1;
	p.win[0].limit = 3;
	p.win[0].window_ms = 1000;
	under_live = deny_cache_rule(&p, &live, 1);
	under_policy = deny_cache_rule(&p, p.win, p.nwin);
	assert_true(under_live != under_policy);
	/* the same limits give the same rule, whoever set them */
	assert_true(deny_cache_rule(&p, &live, 1) == under_live);

	deny_cache_init(&dc, 42);
	deny_cache_store(&dc, "transfer", 8, "jwt:X", 5, under_live, 1, 0, &d, 0);
	assert_true(deny_cache_lookup(&dc, "transfer", 8, "jwt:X", 5, under_live, 1, 3 * S,
	                              &d));
	/* the override ended: its deny is not the policy's answer, and is gone */
	assert_false(deny_cache_lookup(&dc, "transfer", 8, "jwt:X", 5, under_policy, 1,
	                               3 * S, &d));
	assert_false(deny_cache_lookup(&dc, "transfer", 8, "jwt:X", 5, under_live, 1,
	                               3 * S, &d));

	/* a raising override: the policy's deny is not its answer either */
	d = deny(S / 2, 1);
	deny_cache_store(&dc, "transfer", 8, "jwt:X", 5, under_policy, 1, 4 * S, &d, 4 * S);
	raised[0].limit = 10;
	raised[0].window_ms = 1000;
	raised[0].burst = 0;
	assert_false(deny_cache_lookup(&dc, "transfer", 8, "jwt:X", 5,
	                               deny_cache_rule(&p, raised, 1), 1, 4 * S, &d));
	/* every part of the limits counts: burst, another window, precision,
	 * the algorithm */
	raised[0] = p.win[0];
	raised[0].burst = 5;
	assert_true(deny_cache_rule(&p, raised, 1) != under_policy);
	raised[0] = p.win[0];
	raised[1].limit = 100;
	raised[1].window_ms = 3600 * 1000;
	raised[1].burst = 0;
	assert_true(deny_cache_rule(&p, raised, 2) != under_policy);
	p.precision_ms = 100;
	assert_true(deny_cache_rule(&p, p.win, p.nwin) != under_policy);
	p.precision_ms = 0;
	p.algorithm = WINDOW_ALGO_GCRA;
	assert_true(deny_cache_rule(&p, p.win, p.nwin) != under_policy);
	deny_cache_clear(&dc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_hit_counts_down),
		cmocka_unit_test(test_expiry_and_cost),
		cmocka_unit_test(test_replace_and_clear),
		cmocka_unit_test(test_bounded),
		cmocka_unit_test(test_size),
		cmocka_unit_test(test_trim_when_none_live),
		cmocka_unit_test(test_only_the_cost_denied),
		cmocka_unit_test(test_admission_forgets),
		cmocka_unit_test(test_until_reset),
		cmocka_unit_test(test_only_the_rule_denied),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
