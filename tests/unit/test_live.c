/*
 * test_live - what the workers use of live control, without Redis or a
 * thread (test_live.deps links neither redis_sync nor hiredis): the table
 * of live overrides (live.c: live_apply() on a published table, the epoch)
 * and the denial counts (denied.c: denied_note(), then what a flush takes
 * and gives back).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "denied.h"
#include "live.h"
#include "metrics.h"

struct fixture {
	struct config cfg;
	const struct window_policy *transfer;   /* 3/1s */
	struct live *lv;
};

static int setup(void **state)
{
	static const char text[] = "policy transfer 3/1s\n";
	struct fixture *f = calloc(1, sizeof(*f));
	char err[256];

	assert_non_null(f);
	config_init(&f->cfg);
	assert_int_equal(config_parse(&f->cfg, "t.conf", text, sizeof(text) - 1, err, sizeof(err)),
	                 0);
	f->transfer = config_find_policy(&f->cfg, "transfer", 8);
	assert_non_null(f->transfer);
	f->lv = live_new();
	assert_non_null(f->lv);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	live_free(f->lv);
	config_release(&f->cfg);
	free(f);
	return 0;
}

/* Fill <e> with a rule for <account> under "transfer" ending <left_us>
 * from now: a block, or <limit>/1s. */
static void entry_set(struct live_entry *e, const char *account, bool block, uint64_t limit,
                      uint64_t left_us)
{
	size_t klen = strlen(account);

	memset(e, 0, sizeof(*e));
	memcpy(e->field, "transfer ", 9);
	memcpy(e->field + 9, account, klen);
	e->field_len = 9 + klen;
	memcpy(e->rule.policy, "transfer", 8);
	e->rule.policy_len = 8;
	memcpy(e->rule.key, account, klen);
	e->rule.key_len = klen;
	e->rule.block = block;
	if (!block) {
		e->rule.nwin = 1;
		e->rule.win[0].limit = limit;
		e->rule.win[0].window_ms = 1000;
	}
	e->expires_us = metrics_now_us() + left_us;
}

/* Publish <n> entries of <src> (copied: the table takes a heap array). */
static void publish(struct live *lv, const struct live_entry *src, size_t n)
{
	struct live_entry *tab = calloc(n, sizeof(*tab));

	assert_non_null(tab);
	memcpy(tab, src, n * sizeof(*tab));
	qsort(tab, n, sizeof(*tab), live_entry_cmp);
	live_publish(lv, tab, n, true);
}

static void test_empty_table_applies_nothing(void **state)
{
	struct fixture *f = *state;
	struct window_policy out;
	struct window_decision d;

	assert_int_equal(live_apply(f->lv, f->transfer, "alice", 5, &out, &d), LIVE_NONE);
	assert_int_equal(live_apply(NULL, f->transfer, "alice", 5, &out, &d), LIVE_NONE);
	assert_int_equal(live_epoch(f->lv), 0);
}

static void test_published_rules_apply(void **state)
{
	struct fixture *f = *state;
	struct live_entry src[4];
	struct window_policy out;
	struct window_decision d;

	entry_set(&src[0], "bob", true, 0, 10u * 1000000u);        /* blocked 10 s */
	entry_set(&src[1], "alice", false, 1, 60u * 1000000u);     /* 1/1s, under 3/1s */
	entry_set(&src[2], "carol", false, 100, 60u * 1000000u);   /* over the ceiling */
	entry_set(&src[3], "dave", true, 0, 0);                    /* expired */
	publish(f->lv, src, 4);
	assert_int_equal(live_epoch(f->lv), 1);

	memset(&d, 0, sizeof(d));
	assert_int_equal(live_apply(f->lv, f->transfer, "bob", 3, &out, &d), LIVE_BLOCK);
	assert_int_equal(d.status, WINDOW_DENY);
	assert_int_equal(d.reason, WINDOW_REASON_BLOCKED);
	assert_int_equal(d.limit, 3);
	assert_int_equal(d.remaining, 0);
	assert_true(d.retry_after >= 9 && d.retry_after <= 10);

	assert_int_equal(live_apply(f->lv, f->transfer, "alice", 5, &out, &d), LIVE_LIMITS);
	assert_int_equal(out.nwin, 1);
	assert_int_equal(out.win[0].limit, 1);
	assert_int_equal(out.win[0].window_ms, 1000);
	assert_string_equal(out.name, "transfer");

	/* refused by the ceiling, expired, or none at all: the config decides */
	assert_int_equal(live_apply(f->lv, f->transfer, "carol", 5, &out, &d), LIVE_NONE);
	assert_int_equal(live_apply(f->lv, f->transfer, "dave", 4, &out, &d), LIVE_NONE);
	assert_int_equal(live_apply(f->lv, f->transfer, "bo", 2, &out, &d), LIVE_NONE);

	/* a new table replaces the old one whole */
	publish(f->lv, &src[1], 1);
	assert_int_equal(live_epoch(f->lv), 2);
	assert_int_equal(live_apply(f->lv, f->transfer, "bob", 3, &out, &d), LIVE_NONE);
	assert_int_equal(live_apply(f->lv, f->transfer, "alice", 5, &out, &d), LIVE_LIMITS);
	live_publish(f->lv, NULL, 0, true);
	assert_int_equal(live_apply(f->lv, f->transfer, "alice", 5, &out, &d), LIVE_NONE);
	assert_int_equal(live_epoch(f->lv), 3);
	/* the live-control thread's first table: replaced, the epoch kept */
	live_publish(f->lv, NULL, 0, false);
	assert_int_equal(live_epoch(f->lv), 3);
}

/* Count of <member> among the taken tables, 0 when absent. */
static uint32_t taken_count(struct denied_entry *const taken[DENIED_SHARDS], const char *member)
{
	size_t i, j, len = strlen(member);

	for (i = 0; i < DENIED_SHARDS; i++)
		for (j = 0; taken[i] && j < DENIED_SLOTS; j++)
			if (taken[i][j].count && taken[i][j].len == len &&
			    memcmp(taken[i][j].member, member, len) == 0)
				return taken[i][j].count;
	return 0;
}

static void test_denials_counted_taken_given_back(void **state)
{
	struct denied *d = denied_new();
	struct denied_entry *taken[DENIED_SHARDS];

	(void)state;
	assert_non_null(d);
	denied_note(d, "transfer", 8, "alice", 5);
	denied_note(d, "transfer", 8, "alice", 5);
	denied_note(d, "transfer", 8, "alice", 5);
	denied_note(d, "transfer", 8, "bob", 3);
	assert_int_equal(denied_take(d, taken), 2);
	assert_int_equal(taken_count(taken, "transfer alice"), 3);
	assert_int_equal(taken_count(taken, "transfer bob"), 1);
	denied_give_back(d, taken, false);
	assert_int_equal(denied_dropped(d), 0);
	/* taken means gone from the shards */
	assert_int_equal(denied_take(d, taken), 0);
	denied_give_back(d, taken, false);

	/* a pool's refusal apart from the account's own limits */
	denied_note(d, "transfer", 8, "alice", 5);
	denied_note_pool(d, "transfer", 8, "pool-full", "alice", 5);
	denied_note_pool(d, "transfer", 8, "pool-full", "alice", 5);
	denied_note_pool(d, "transfer", 8, "pool-share", "alice", 5);
	assert_int_equal(denied_take(d, taken), 3);
	assert_int_equal(taken_count(taken, "transfer alice"), 1);
	assert_int_equal(taken_count(taken, "transfer/pool-full alice"), 2);
	assert_int_equal(taken_count(taken, "transfer/pool-share alice"), 1);
	denied_give_back(d, taken, false);

	/* a failed write drops what it held */
	denied_note(d, "transfer", 8, "alice", 5);
	denied_note(d, "transfer", 8, "alice", 5);
	assert_int_equal(denied_take(d, taken), 1);
	denied_give_back(d, taken, true);
	assert_int_equal(denied_dropped(d), 2);
	denied_free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_empty_table_applies_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_published_rules_apply, setup, teardown),
		cmocka_unit_test(test_denials_counted_taken_given_back),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
