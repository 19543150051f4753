/*
 * test_plans - usage plans in the configuration: plan and plan-default
 * lines, what they refuse (with file:line), and copy/release of the plan
 * tables. Choosing a plan per request is test_conn's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"

/* Parse <text> as "t.conf" on top of the defaults into <c> (caller releases). */
static int parse(struct config *c, const char *text, char *err)
{
	config_init(c);
	return config_parse(c, "t.conf", text, strlen(text), err, CONFIG_ERR_LEN);
}

static void test_plans_parse(void **state)
{
	static const char text[] =
		"policy api 10/1s 1000/1h\n"
		"policy bucket 10/1s algorithm=gcra\n"
		"plan-default free\n"
		"plan free api 5/1s 500/1h\n"
		"plan pro api 100/1s 100000/1h\n"
		"plan pro bucket 100/1s burst=200\n"
		"plan free bucket 2/1s\n";
	struct config c, d;
	const struct window_plan *pl;
	char err[CONFIG_ERR_LEN];

	(void)state;
	assert_int_equal(parse(&c, text, err), 0);
	assert_string_equal(c.plan_default, "free");
	assert_int_equal(c.policies[0].nplans, 2);
	pl = window_plan_find(&c.policies[0], "pro", 3);
	assert_non_null(pl);
	assert_int_equal(pl->nwin, 2);
	assert_int_equal(pl->win[0].limit, 100);
	assert_int_equal(pl->win[1].window_ms, 3600000);
	assert_null(window_plan_find(&c.policies[0], "pr", 2));
	/* a gcra policy's plan keeps its algorithm: a burst, default the limit */
	pl = window_plan_find(&c.policies[1], "pro", 3);
	assert_non_null(pl);
	assert_int_equal(pl->win[0].burst, 200);
	assert_int_equal(window_plan_find(&c.policies[1], "free", 4)->win[0].burst, 2);
	assert_true(config_plan_known(&c, "free", 4));
	assert_false(config_plan_known(&c, "gold", 4));
	/* a copy owns its own tables */
	assert_int_equal(config_copy(&d, &c), 0);
	assert_ptr_not_equal(d.policies[0].plans, c.policies[0].plans);
	assert_int_equal(window_plan_find(&d.policies[0], "pro", 3)->win[0].limit, 100);
	config_release(&c);
	assert_null(c.policies[0].plans);
	assert_int_equal(c.policies[0].nplans, 0);
	assert_int_equal(window_plan_find(&d.policies[1], "pro", 3)->win[0].burst, 200);
	config_release(&d);
}

static void test_plans_refused(void **state)
{
	static const struct {
		const char *text, *err;
	} cases[] = {
		{ "policy api 3/1s\nplan pro nope 5/1s\n", "t.conf:2: plan 'pro' for unknown policy 'nope'" },
		{ "policy api 3/1s\nplan pro api 5/1s\n\nplan pro api 6/1s\n",
		  "t.conf:4: plan 'pro' of 'api' given twice" },
		{ "policy api 3/1s\nplan-default gold\nplan pro api 5/1s\n",
		  "t.conf:2: plan-default: no policy has a plan 'gold' (write 'plan gold <policy> "
		  "<limit>/<window>...')" },
		{ "policy api 3/1s\nplan-default pro\nplan-default pro\nplan pro api 5/1s\n",
		  "t.conf:3: duplicate directive 'plan-default' (first at line 2)" },
		{ "policy g 3/1s algorithm=gcra\nplan pro g 5/1s 50/1m\n",
		  "t.conf:2: plan 'pro' of 'g': algorithm=gcra takes exactly one <limit>/<window> (the "
		  "rate; burst=<n> is the bucket), and at most one calendar quota beside it" },
		{ "policy g 3/1s algorithm=gcra max-cost=3\nplan pro g 5/1s burst=2\n",
		  "t.conf:2: plan 'pro' of 'g': max-cost=3 is above the burst (2): such a cost could "
		  "never pass" },
		{ "policy api 3/1s\nplan pro api 5/1s burst=9\n",
		  "t.conf:2: plan 'pro' of 'api': expected <limit>/<window>, got 'burst=9'" },
		{ "policy api 3/1h precision=1m\nplan pro api 9/150s\n",
		  "t.conf:2: plan 'pro' of 'api': precision=1m does not divide the 150s window" },
		{ "policy api 3/1s\nplan pro api 5/1s 6/1s\n",
		  "t.conf:2: plan 'pro' of 'api': window 1s given twice" },
		{ "policy api 3/1s 100/1h\nplan pro api 5/1s\n",
		  "t.conf:2: plan 'pro' of 'api': its windows must have the policy's lengths and quota "
		  "periods, its limits may differ (an account's units are counted in the same keys "
		  "whatever its plan)" },
		{ "policy api 3/1m\nplan short api 10/1s\n",
		  "t.conf:2: plan 'short' of 'api': its windows must have the policy's lengths and quota "
		  "periods, its limits may differ (an account's units are counted in the same keys "
		  "whatever its plan)" },
		{ "policy api 3/1s 10/day\nplan pro api 5/1s 10/month\n",
		  "t.conf:2: plan 'pro' of 'api': its windows must have the policy's lengths and quota "
		  "periods, its limits may differ (an account's units are counted in the same keys "
		  "whatever its plan)" },
		{ "policy api 3/1s\nplan pro api 0/1s\n",
		  "t.conf:2: plan 'pro' of 'api': limit must be a positive integer, got '0/1s'" },
		{ "policy api 3/1s\nplan pro api\n",
		  "t.conf:2: plan: expected 'plan <name> <policy> <limit>/<window>... [burst=<n>]'" },
		{ "policy api 3/1s\nplan p{x} api 5/1s\n",
		  "t.conf:2: plan name 'p{x}' must be 1..48 characters of A-Z a-z 0-9 _ . -" },
		{ "policy api 3/1s\nplan-default p{x}\n",
		  "t.conf:2: plan-default: plan name 'p{x}' must be 1..48 characters of A-Z a-z 0-9 _ . -" },
	};
	struct config c;
	char err[CONFIG_ERR_LEN];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(parse(&c, cases[i].text, err), -1);
		assert_string_equal(err, cases[i].err);
		config_release(&c);
	}
}

/* -c --plans MAP: a plan the config lacks, or a plan= the edge does not
 * read, is a warning with map:line; the keys themselves never show. */
static void test_plans_map_check(void **state)
{
	static const char map[] =
		"# api keys\n"
		"k-secret-1 ACC-1 plan=pro\n"
		"k-secret-2 ACC-2\n"
		"k-secret-3 ACC-3 plan=gold\n"
		"k-secret-4 plan=pro ACC-4\n"
		"svc-billing plan=free\n";
	struct config c;
	char err[CONFIG_ERR_LEN];

	(void)state;
	assert_int_equal(parse(&c, "policy api 3/1s\nplan pro api 5/1s\nplan free api 1/1s\n", err), 0);
	assert_int_equal(config_check_plans_map(&c, "keys.map", map, sizeof(map) - 1, err,
	                                        sizeof(err)), 4);
	assert_int_equal(c.nwarnings, 2);
	assert_string_equal(c.warnings,
		"keys.map:4: warning: plan 'gold' is no plan of this config: its requests get the "
		"policy's own limits (logged as unknown_plan)\n"
		"keys.map:5: warning: plan= must be the line's last word, after '<api key> <account>' "
		"or '<CN>': the edge reads no plan here\n");
	assert_null(strstr(c.warnings, "k-secret"));
	config_release(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plans_parse),
		cmocka_unit_test(test_plans_refused),
		cmocka_unit_test(test_plans_map_check),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
