/*
 * test_ctl - the pure parts of live control: ctl's command line, --for
 * durations, a live override's encoding in Redis (and its refusals), the
 * ceiling a live override must stay under, the live-max directive, and the
 * key forms ctl reads and deletes (the agent's own key builder).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "ctl_args.h"
#include "ctl_keys.h"
#include "live_rule.h"

/* Parse the words of <line> (at most 16) as ctl's argv into <a>. */
static int parse_line(const char *line, struct ctl_args *a, char *err, size_t errlen)
{
	static char buf[1024];
	char *argv[17];
	int argc = 0;
	char *tok;

	snprintf(buf, sizeof(buf), "%s", line);
	for (tok = strtok(buf, " "); tok && argc < 16; tok = strtok(NULL, " "))
		argv[argc++] = tok;
	argv[argc] = NULL;
	return ctl_parse_args(argc, argv, a, err, errlen);
}

static void test_args_ok(void **state)
{
	struct ctl_args a;
	char err[256] = "";

	(void)state;
	assert_int_equal(parse_line("ctl -c /x.conf show transfer jwt:A --json", &a, err,
	                            sizeof(err)), 0);
	assert_int_equal(a.cmd, CTL_CMD_SHOW);
	assert_string_equal(a.config, "/x.conf");
	assert_string_equal(a.policy, "transfer");
	assert_string_equal(a.account, "jwt:A");
	assert_true(a.json);

	assert_int_equal(parse_line("ctl override api jwt:B 10/1s 500/h --for 2h --reason slow",
	                            &a, err, sizeof(err)), 0);
	assert_string_equal(a.config, CTL_DEFAULT_CONFIG);
	assert_int_equal(a.rule.nwin, 2);
	assert_int_equal(a.rule.win[1].limit, 500);
	assert_int_equal(a.rule.win[1].window_ms, 3600000);
	assert_int_equal(a.for_ms, 7200000);
	assert_string_equal(a.rule.reason, "slow");
	assert_string_equal(a.rule.policy, "api");
	assert_string_equal(a.rule.key, "jwt:B");
	assert_false(a.rule.block);

	assert_int_equal(parse_line("ctl override api jwt:B block --for 1d", &a, err, sizeof(err)), 0);
	assert_true(a.rule.block);
	assert_int_equal(a.for_ms, 86400000);
	assert_int_equal(parse_line("ctl override api jwt:B --remove", &a, err, sizeof(err)), 0);
	assert_true(a.remove);

	assert_int_equal(parse_line("ctl top-denied --minutes 60 --policy api --count 3", &a, err,
	                            sizeof(err)), 0);
	assert_int_equal(a.minutes, 60);
	assert_int_equal(a.count, 3);
	assert_string_equal(a.only_policy, "api");
	assert_int_equal(parse_line("ctl top-denied", &a, err, sizeof(err)), 0);
	assert_int_equal(a.minutes, 5);
	assert_int_equal(a.count, 10);

	assert_int_equal(parse_line("ctl show-pool backend --top 3 --json", &a, err, sizeof(err)), 0);
	assert_int_equal(a.cmd, CTL_CMD_SHOW_POOL);
	assert_string_equal(a.pool, "backend");
	assert_int_equal(a.top, 3);
	assert_true(a.json);
	assert_null(a.policy);
	assert_int_equal(parse_line("ctl show-pool backend", &a, err, sizeof(err)), 0);
	assert_int_equal(a.top, 10);
	assert_true(strstr(ctl_usage(CTL_CMD_SHOW_POOL), "--top N") != NULL);

	assert_int_equal(parse_line("ctl reset api --help", &a, err, sizeof(err)), 0);
	assert_true(a.help);
	assert_int_equal(a.cmd, CTL_CMD_RESET);
	assert_int_equal(parse_line("ctl", &a, err, sizeof(err)), 0);
	assert_true(a.help);
	assert_true(strstr(ctl_usage(CTL_CMD_OVERRIDE), "--for DURATION") != NULL);
}

static void test_args_refused(void **state)
{
	static const char *const bad[] = {
		"ctl frob",                                       /* unknown command */
		"ctl show transfer",                              /* no account */
		"ctl show transfer a b",                          /* one too many */
		"ctl override api jwt:B 10/1s",                   /* no --for */
		"ctl override api jwt:B --for 1m",                /* no limits */
		"ctl override api jwt:B 10/1s --for 8d",          /* over 7 days */
		"ctl override api jwt:B 10/1s --for 500ms",       /* under 1 s */
		"ctl override api jwt:B 10/1s --for soon",
		"ctl override api jwt:B block 10/1s --for 1m",    /* both */
		"ctl override api jwt:B 0/1s --for 1m",
		"ctl override api jwt:B 10/0s --for 1m",
		"ctl override api jwt:B 10/25h --for 1m",
		"ctl override api jwt:B 10/1s 20/1000ms --for 1m", /* same window twice */
		"ctl override api jwt:B 1/1s 2/2s 3/3s 4/4s 5/5s --for 1m",
		"ctl override api jwt:B 10/1s --remove",
		"ctl show api jwt:B --for 1m",                    /* not show's option */
		"ctl top-denied --minutes 61",
		"ctl top-denied --count 0",
		"ctl overrides --minutes",
		"ctl show-pool",                                  /* no pool */
		"ctl show-pool backend extra",
		"ctl show-pool backend --top 0",
		"ctl show-pool backend --top 1001",
		"ctl top-denied --top 3",                         /* show-pool's option */
	};
	struct ctl_args a;
	char err[256];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		if (parse_line(bad[i], &a, err, sizeof(err)) != -1)
			fail_msg("accepted: %s", bad[i]);
		assert_true(err[0] != '\0');
	}
}

static void test_for(void **state)
{
	uint64_t ms;

	(void)state;
	assert_int_equal(live_rule_parse_for("30s", 3, &ms), 0);
	assert_int_equal(ms, 30000);
	assert_int_equal(live_rule_parse_for("10m", 3, &ms), 0);
	assert_int_equal(ms, 600000);
	assert_int_equal(live_rule_parse_for("7d", 2, &ms), 0);
	assert_int_equal(ms, 7ull * 86400000);
	assert_int_equal(live_rule_parse_for("1000ms", 6, &ms), 0);
	assert_int_equal(live_rule_parse_for("999ms", 5, &ms), -1);
	assert_int_equal(live_rule_parse_for("169h", 4, &ms), -1);
	assert_int_equal(live_rule_parse_for("d", 1, &ms), -1);
	assert_int_equal(live_rule_parse_for("-1s", 3, &ms), -1);
	assert_int_equal(live_rule_parse_for("", 0, &ms), -1);
}

/* A rule for policy "api", account "jwt:ACC 1" (a space: still one field). */
static void rule_make(struct live_rule *r)
{
	memset(r, 0, sizeof(*r));
	strcpy(r->policy, "api");
	r->policy_len = 3;
	strcpy(r->key, "jwt:ACC 1");
	r->key_len = 9;
	r->nwin = 2;
	r->win[0].limit = 10;
	r->win[0].window_ms = 1000;
	r->win[1].limit = 500;
	r->win[1].window_ms = 3600000;
	r->expires_ms = 1796364939474;
	r->set_ms = 1796364879474;
	strcpy(r->who, "alice@ops-1");
	strcpy(r->reason, "batch job 50% over, \"loop\"");
}

static void test_encoding(void **state)
{
	struct live_rule r, back;
	char v[LIVE_VALUE_MAX], f[LIVE_FIELD_MAX];
	int n;

	(void)state;
	rule_make(&r);
	n = live_rule_encode(&r, v, sizeof(v));
	assert_true(n > 0);
	assert_string_equal(v, "v1 1796364939474 1796364879474 10/1s,500/1h alice@ops-1 "
	                       "batch%20job%2050%25%20over,%20\"loop\"");
	memset(&back, 0, sizeof(back));
	assert_int_equal(live_rule_decode(v, (size_t)n, &back), 0);
	assert_int_equal(back.nwin, 2);
	assert_int_equal(back.win[1].window_ms, 3600000);
	assert_int_equal(back.expires_ms, r.expires_ms);
	assert_int_equal(back.set_ms, r.set_ms);
	assert_string_equal(back.who, r.who);
	assert_string_equal(back.reason, r.reason);
	assert_false(back.block);

	n = live_rule_field(&r, f, sizeof(f));
	assert_int_equal(n, 13);
	assert_memory_equal(f, "api jwt:ACC 1", 13);
	assert_int_equal(live_rule_parse_field(f, (size_t)n, &back), 0);
	assert_string_equal(back.policy, "api");
	assert_string_equal(back.key, "jwt:ACC 1");

	/* a block, an empty reason and who */
	r.block = true;
	r.nwin = 0;
	r.who[0] = r.reason[0] = '\0';
	n = live_rule_encode(&r, v, sizeof(v));
	assert_string_equal(v, "v1 1796364939474 1796364879474 block - -");
	assert_int_equal(live_rule_decode(v, (size_t)n, &back), 0);
	assert_true(back.block);
	assert_string_equal(back.who, "");
	assert_string_equal(back.reason, "");
	/* a reason of just "-" is not the empty one */
	strcpy(r.reason, "-");
	n = live_rule_encode(&r, v, sizeof(v));
	assert_int_equal(live_rule_decode(v, (size_t)n, &back), 0);
	assert_string_equal(back.reason, "-");
}

static void test_decoding_refused(void **state)
{
	static const char *const bad[] = {
		"", "v2 1 1 block - -", "v1 x 1 block - -", "v1 1 1 blocked - -",
		"v1 1 1 0/1s - -", "v1 1 1 10/1s - - extra", "v1 1 1 10/1s -",
		"v1 1 1 10/1s - %4", "v1 1 1 10/1s - %zz", "v1 1 1 10/1s,10/1s - -",
		"v1  1 1 block - -",
	};
	struct live_rule r;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (live_rule_decode(bad[i], strlen(bad[i]), &r) != -1)
			fail_msg("decoded: '%s'", bad[i]);
	assert_int_equal(live_rule_parse_field("api", 3, &r), -1);
	assert_int_equal(live_rule_parse_field(" jwt:A", 6, &r), -1);
	assert_int_equal(live_rule_parse_field("api ", 4, &r), -1);
}

/* Parse <text> as a config into <c>. */
static void load(struct config *c, const char *text)
{
	char err[CONFIG_ERR_LEN];

	config_init(c);
	if (config_parse(c, "t.conf", text, strlen(text), err, sizeof(err)) != 0)
		fail_msg("%s", err);
}

/* <limits> ("10/1s 500/1h", or "block") as a rule for <key>. */
static void rule_of(struct live_rule *r, const char *key, const char *limits)
{
	char why[128], buf[128], *tok;

	memset(r, 0, sizeof(*r));
	r->key_len = strlen(key);
	memcpy(r->key, key, r->key_len);
	snprintf(buf, sizeof(buf), "%s", limits);
	for (tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
		if (strcmp(tok, "block") == 0)
			r->block = true;
		else if (live_rule_parse_limit(tok, strlen(tok), r->win, &r->nwin, why, sizeof(why)))
			fail_msg("%s: %s", tok, why);
	}
}

static int check(const struct config *c, const char *policy, const char *key,
                 const char *limits)
{
	struct live_rule r;
	char why[256] = "";
	int rc;

	rule_of(&r, key, limits);
	rc = live_rule_check(config_find_policy(c, policy, strlen(policy)), &r, why, sizeof(why));
	assert_true(rc == 0 || strlen(why) > 0);
	return rc;
}

/* A live override of a token bucket: one rate, no faster than the
 * ceiling's (exactly), and its bucket the rate's limit under the ceiling's
 * burst. */
static void test_ceiling_gcra(void **state)
{
	struct config c;
	struct live_rule r;

	(void)state;
	load(&c, "policy bucket 3/1s algorithm=gcra burst=5\n"
	         "override bucket jwt:VIP 10/1s burst=20\n"
	         "policy open 2/1s algorithm=gcra\n"
	         "live-max open 10/1s\n");
	assert_int_equal(check(&c, "bucket", "jwt:A", "block"), 0);
	assert_int_equal(check(&c, "bucket", "jwt:A", "3/1s"), 0);
	assert_int_equal(check(&c, "bucket", "jwt:A", "180/1m"), 0);   /* the same rate */
	assert_int_equal(check(&c, "bucket", "jwt:A", "181/1m"), -1);
	assert_int_equal(check(&c, "bucket", "jwt:A", "4/1s"), -1);
	assert_int_equal(check(&c, "bucket", "jwt:A", "1/1s 2/1m"), -1); /* one rate */
	assert_int_equal(check(&c, "bucket", "jwt:VIP", "10/1s"), 0);
	assert_int_equal(check(&c, "bucket", "jwt:VIP", "11/1s"), -1);
	assert_int_equal(check(&c, "open", "jwt:A", "10/1s"), 0);
	assert_int_equal(check(&c, "open", "jwt:A", "11/1s"), -1);
	/* the bucket: the rate's limit, at most the ceiling's burst */
	rule_of(&r, "jwt:A", "2/1s");
	assert_int_equal(live_rule_gcra_burst(config_find_policy(&c, "bucket", 6), &r), 2);
	rule_of(&r, "jwt:A", "180/1m");
	assert_int_equal(live_rule_gcra_burst(config_find_policy(&c, "bucket", 6), &r), 5);
	rule_of(&r, "jwt:VIP", "10/1s");
	assert_int_equal(live_rule_gcra_burst(config_find_policy(&c, "bucket", 6), &r), 10);
	rule_of(&r, "jwt:A", "10/1s");
	assert_int_equal(live_rule_gcra_burst(config_find_policy(&c, "open", 4), &r), 10);
	config_release(&c);
}

static void test_ceiling(void **state)
{
	struct config c;

	(void)state;
	load(&c, "policy transfer 3/1s\n"
	         "override transfer jwt:VIP 30/1s\n"
	         "policy api 10/1s 100/1h\n"
	         "live-max api 50/1s 200/1h\n"
	         "policy exports 10/1s 1000/1h precision=1m\n");
	/* without live-max: only at or below the account's configured limits */
	assert_int_equal(check(&c, "transfer", "jwt:A", "block"), 0);
	assert_int_equal(check(&c, "transfer", "jwt:A", "3/1s"), 0);
	assert_int_equal(check(&c, "transfer", "jwt:A", "1/1s"), 0);
	assert_int_equal(check(&c, "transfer", "jwt:A", "4/1s"), -1);
	/* a longer window with a limit no larger bounds the 1 s window too */
	assert_int_equal(check(&c, "transfer", "jwt:A", "3/1h"), 0);
	assert_int_equal(check(&c, "transfer", "jwt:A", "4/1h"), -1);
	/* 1/500ms allows 2 in a second; 2/500ms allows 4 */
	assert_int_equal(check(&c, "transfer", "jwt:A", "1/500ms"), 0);
	assert_int_equal(check(&c, "transfer", "jwt:A", "2/500ms"), -1);
	/* 3 per 300ms: a second spans 4 of them, 12 > 3 */
	assert_int_equal(check(&c, "transfer", "jwt:A", "1/300ms"), -1);
	/* the VIP's configured 30/1s is its ceiling */
	assert_int_equal(check(&c, "transfer", "jwt:VIP", "20/1s"), 0);
	assert_int_equal(check(&c, "transfer", "jwt:VIP", "31/1s"), -1);
	/* live-max: every one of its windows must be implied */
	assert_int_equal(check(&c, "api", "jwt:A", "40/1s 200/1h"), 0);
	assert_int_equal(check(&c, "api", "jwt:A", "40/1s"), -1);
	assert_int_equal(check(&c, "api", "jwt:A", "50/1s 201/1h"), -1);
	/* 100 an hour may all come in one second: over 50/1s */
	assert_int_equal(check(&c, "api", "jwt:A", "100/1h"), -1);
	assert_int_equal(check(&c, "api", "jwt:A", "50/1h"), 0);
	assert_int_equal(check(&c, "api", "jwt:A", "51/1s 10/1h"), 0);
	/* the shape of a config override: precision= must divide its windows */
	assert_int_equal(check(&c, "exports", "jwt:A", "5/1s 900/1h"), 0);
	assert_int_equal(check(&c, "exports", "jwt:A", "5/1s 900/90s"), -1);
	config_release(&c);
}

static void test_live_max_directive(void **state)
{
	static const char *const bad[] = {
		"live-max nope 5/1s\n",
		"policy a 3/1s\nlive-max a\n",
		"policy a 3/1s\nlive-max a 5/1s\nlive-max a 6/1s\n",
		"policy a 3/1s\nlive-max a fast\n",
		"policy a 3/1s\nlive-max a 5/1s 6/1000ms\n",
		"policy a 3/1s 100/1h precision=1m\nlive-max a 5/90s\n",
	};
	struct config c;
	char err[CONFIG_ERR_LEN];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		config_init(&c);
		err[0] = '\0';
		if (config_parse(&c, "t.conf", bad[i], strlen(bad[i]), err, sizeof(err)) != -1)
			fail_msg("accepted: %s", bad[i]);
		assert_non_null(strstr(err, "t.conf:"));
		config_release(&c);
	}
	load(&c, "policy a 3/1s\nlive-max a 5/1s 100/1h\n");
	assert_int_equal(c.policies[0].live_nwin, 2);
	assert_int_equal(c.policies[0].live_win[1].limit, 100);
	config_release(&c);
}

static void test_keys(void **state)
{
	struct config c;
	struct ctl_key k[CTL_KEYS_MAX];
	const struct window_policy *p;
	struct window_limit one = { 2, 1000, 0, 0, 0, 0 }, two[2] = { { 2, 1000, 0, 0, 0, 0 }, { 50, 3600000, 0, 0, 0, 0 } };
	int n;

	(void)state;
	load(&c, "policy transfer 3/1s\npolicy exports 10/1s 1000/1h precision=1m\n");
	p = config_find_policy(&c, "transfer", 8);
	n = ctl_keys_for(p, p->win, p->nwin, "jwt:A}", 6, k, 0);
	/* one window: its own key, and the 1.0.x form an upgrade may hold */
	assert_int_equal(n, 2);
	assert_string_equal(k[0].name, "transfer:limit:v1:{jwt:A%7D}:1s");
	assert_int_equal(k[0].kind, CTL_KEY_LOG);
	assert_false(k[0].legacy);
	assert_string_equal(k[1].name, "transfer:limit:v1:jwt:A}");
	assert_true(k[1].legacy);
	assert_int_equal(k[1].lim.window_ms, 1000);
	/* a live override with two windows: its 1s key is the same key */
	n = ctl_keys_for(p, two, 2, "jwt:A}", 6, k, (size_t)n);
	assert_int_equal(n, 3);
	assert_string_equal(k[2].name, "transfer:limit:v1:{jwt:A%7D}:1h");
	/* the same forms again add nothing */
	n = ctl_keys_for(p, &one, 1, "jwt:A}", 6, k, (size_t)n);
	assert_int_equal(n, 3);
	/* an account whose raw 1.0.x key would be another's tagged key
	 * ("{jwt:VIP}:1s" is jwt:VIP's 1s window): no 1.0.x form */
	n = ctl_keys_for(p, p->win, p->nwin, "{jwt:VIP}:1s", 12, k, 0);
	assert_int_equal(n, 1);
	assert_string_equal(k[0].name, "transfer:limit:v1:{{jwt:VIP%7D:1s}:1s");

	p = config_find_policy(&c, "exports", 7);
	n = ctl_keys_for(p, p->win, p->nwin, "jwt:B", 5, k, 0);
	assert_int_equal(n, 2);
	assert_string_equal(k[0].name, "exports:limit:v1:{jwt:B}:1s");
	assert_int_equal(k[0].kind, CTL_KEY_LOG);
	assert_string_equal(k[1].name, "exports:limit:b1:{jwt:B}:1h");
	assert_int_equal(k[1].kind, CTL_KEY_BUCKETS);
	assert_int_equal(k[1].lim.limit, 1000);
	/* a one-window override of a bucketed window: b1 in both forms */
	two[0] = (struct window_limit){ 20, 3600000, 0, 0, 0, 0 };
	n = ctl_keys_for(p, two, 1, "jwt:B", 5, k, 0);
	assert_int_equal(n, 2);
	assert_string_equal(k[0].name, "exports:limit:b1:{jwt:B}:1h");
	assert_string_equal(k[1].name, "exports:limit:b1:jwt:B");
	assert_int_equal(k[1].kind, CTL_KEY_BUCKETS);
	assert_int_equal(ctl_keys_for(p, p->win, p->nwin, "", 0, k, 0), -1);
	config_release(&c);

	/* a pooled policy: the account's windows only, never its pool's keys
	 * (shared by every account: show and reset leave them alone) */
	load(&c, "pool backend 5/1s\npolicy api 3/1s pool=backend\n");
	p = config_find_policy(&c, "api", 3);
	n = ctl_keys_for(p, p->win, p->nwin, "jwt:A", 5, k, 0);
	assert_true(n >= 1);
	assert_string_equal(k[0].name, "api:limit:v1:{jwt:A}:1s");
	for (int i = 0; i < n; i++)
		if (strstr(k[i].name, ":pool:"))
			fail_msg("a pool's key among the account's: %s", k[i].name);
	config_release(&c);
}

/* A pooled policy on a Cluster: show and reset name the keys the agent
 * writes, under the pool's hash tag (no 1.0.x form), never the pool's. */
static void test_keys_pool_tag(void **state)
{
	struct config c;
	struct ctl_key k[CTL_KEYS_MAX];
	const struct window_policy *p;
	int n;

	(void)state;
	load(&c, "redis cluster://127.0.0.1:7000\npool backend 10/1s\n"
	         "policy api 3/1s 100/1h pool=backend\npolicy one 3/1s pool=backend\n");
	config_tag_pool_accounts(&c);
	p = config_find_policy(&c, "api", 3);
	n = ctl_keys_for(p, p->win, p->nwin, "jwt:A}", 6, k, 0);
	assert_int_equal(n, 2);
	assert_string_equal(k[0].name, "api:limit:v1:{backend}/jwt:A%7D:1s");
	assert_string_equal(k[1].name, "api:limit:v1:{backend}/jwt:A%7D:1h");
	p = config_find_policy(&c, "one", 3);
	n = ctl_keys_for(p, p->win, p->nwin, "jwt:A", 5, k, 0);
	assert_int_equal(n, 1);
	assert_string_equal(k[0].name, "one:limit:v1:{backend}/jwt:A:1s");
	assert_false(k[0].legacy);
	config_release(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_args_ok),
		cmocka_unit_test(test_args_refused),
		cmocka_unit_test(test_for),
		cmocka_unit_test(test_encoding),
		cmocka_unit_test(test_decoding_refused),
		cmocka_unit_test(test_ceiling),
		cmocka_unit_test(test_ceiling_gcra),
		cmocka_unit_test(test_live_max_directive),
		cmocka_unit_test(test_keys),
		cmocka_unit_test(test_keys_pool_tag),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
