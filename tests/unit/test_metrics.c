/*
 * test_metrics - latency buckets and the Prometheus text rendering: the
 * output parses (HELP/TYPE before samples, every sample "name{labels} value")
 * and sums the per-thread blocks.
 */
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "metrics.h"

#define OUT_CAP (64 * 1024)

/* A config with policies "transfer" and "reads" (no allocation). */
static void config_two(struct config *c)
{
	char err[CONFIG_ERR_LEN];
	static const char text[] = "policy transfer 3/1s\npolicy reads 100/1m on-redis-error=allow\n";

	config_init(c);
	assert_int_equal(config_parse(c, "t", text, strlen(text), err, sizeof(err)), 0);
}

/* Does <text> hold the whole line <line>? */
static int has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	const char *p = text;

	while ((p = strstr(p, line)) != NULL) {
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return 1;
		p += n;
	}
	return 0;
}

static void assert_line(const char *text, const char *line)
{
	if (!has_line(text, line))
		fail_msg("missing line: %s", line);
}

/*
 * Check the exposition format line by line: comments are "# HELP name text"
 * or "# TYPE name counter|gauge|histogram", each family is declared once and
 * before its samples, samples match name{labels} value. Returns the number
 * of samples.
 */
static int check_format(const char *text)
{
	regex_t sample, help, type;
	char families[64][96];
	int nfam = 0, nsamples = 0, i;
	const char *p = text;

	assert_int_equal(regcomp(&sample,
		"^(ratelimit_spoa_[a-z_]+)"
		"(\\{[a-z_]+=\"([^\"\\\\]|\\\\.)*\"(,[a-z_]+=\"([^\"\\\\]|\\\\.)*\")*\\})?"
		" [0-9]+(\\.[0-9]+)?$", REG_EXTENDED), 0);
	assert_int_equal(regcomp(&help, "^# HELP (ratelimit_spoa_[a-z_]+) [^ ].*$", REG_EXTENDED), 0);
	assert_int_equal(regcomp(&type, "^# TYPE (ratelimit_spoa_[a-z_]+) (counter|gauge|histogram)$",
	                         REG_EXTENDED), 0);
	assert_true(strlen(text) > 0);
	assert_int_equal(text[strlen(text) - 1], '\n');
	while (*p) {
		const char *eol = strchr(p, '\n');
		char line[512], name[96];
		regmatch_t m[2];
		size_t len;

		assert_non_null(eol);
		len = (size_t)(eol - p);
		assert_true(len < sizeof(line));
		memcpy(line, p, len);
		line[len] = '\0';
		p = eol + 1;

		if (regexec(&help, line, 2, m, 0) == 0)
			continue;
		if (regexec(&type, line, 2, m, 0) == 0) {
			len = (size_t)(m[1].rm_eo - m[1].rm_so);
			for (i = 0; i < nfam; i++)
				if (strlen(families[i]) == len && memcmp(families[i], line + m[1].rm_so, len) == 0)
					fail_msg("family declared twice: %s", line);
			assert_true(nfam < 64);
			memcpy(families[nfam], line + m[1].rm_so, len);
			families[nfam][len] = '\0';
			nfam++;
			continue;
		}
		if (regexec(&sample, line, 2, m, 0) != 0)
			fail_msg("not a sample line: '%s'", line);
		len = (size_t)(m[1].rm_eo - m[1].rm_so);
		memcpy(name, line + m[1].rm_so, len);
		name[len] = '\0';
		/* A sample belongs to the family declared last (histogram parts
		 * carry a suffix). */
		assert_true(nfam > 0);
		if (strcmp(name, families[nfam - 1]) != 0) {
			size_t fl = strlen(families[nfam - 1]);

			if (strncmp(name, families[nfam - 1], fl) != 0 ||
			    (strcmp(name + fl, "_bucket") && strcmp(name + fl, "_sum") &&
			     strcmp(name + fl, "_count")))
				fail_msg("sample %s outside its family %s", name, families[nfam - 1]);
		}
		nsamples++;
	}
	regfree(&sample);
	regfree(&help);
	regfree(&type);
	return nsamples;
}

static void test_buckets(void **state)
{
	struct metrics *m = calloc(1, sizeof(*m));

	(void)state;
	assert_non_null(m);
	metrics_observe_redis_latency(m, 0);
	metrics_observe_redis_latency(m, 100);        /* le is inclusive */
	metrics_observe_redis_latency(m, 101);
	metrics_observe_redis_latency(m, 1000);
	metrics_observe_redis_latency(m, 2500000);
	metrics_observe_redis_latency(m, 2500001);
	metrics_observe_redis_latency(m, 60000000);
	assert_int_equal(m->redis_latency[0], 2);
	assert_int_equal(m->redis_latency[1], 1);
	assert_int_equal(m->redis_latency[3], 1);
	assert_int_equal(m->redis_latency[13], 1);
	assert_int_equal(m->redis_latency[14], 2);
	assert_int_equal(m->redis_latency_count, 7);
	assert_int_equal(m->redis_latency_sum_us, 0 + 100 + 101 + 1000 + 2500000 + 2500001 + 60000000);
	free(m);
}

/* Decision buckets: 25 us .. 1 s, le inclusive, +Inf last; shadow-deny
 * apart from allow; out-of-range policy or status is not counted. */
static void test_decision_buckets(void **state)
{
	struct metrics *m = calloc(1, sizeof(*m));
	struct window_decision d = { .status = WINDOW_ALLOW };
	static const uint64_t us[] = { 0, 25, 26, 50, 999, 1000, 1001, 1000000, 1000001, 90000000 };
	static const unsigned bucket[] = { 0, 0, 1, 1, 5, 5, 6, 14, 15, 15 };
	uint64_t sum = 0, before;
	size_t i;

	(void)state;
	assert_non_null(m);
	for (i = 0; i < sizeof(us) / sizeof(us[0]); i++) {
		before = m->decision_latency[2][WINDOW_ALLOW][bucket[i]];
		metrics_observe_decision(m, 2, &d, us[i]);
		sum += us[i];
		if (m->decision_latency[2][WINDOW_ALLOW][bucket[i]] != before + 1)
			fail_msg("%llu us not in bucket %u", (unsigned long long)us[i], bucket[i]);
	}
	assert_int_equal(m->decision_latency[2][WINDOW_ALLOW][0], 2);
	assert_int_equal(m->decision_latency[2][WINDOW_ALLOW][1], 2);
	assert_int_equal(m->decision_latency[2][WINDOW_ALLOW][5], 2);
	assert_int_equal(m->decision_latency[2][WINDOW_ALLOW][6], 1);
	assert_int_equal(m->decision_latency[2][WINDOW_ALLOW][14], 1);
	assert_int_equal(m->decision_latency[2][WINDOW_ALLOW][METRICS_DEC_BUCKETS], 2);
	assert_int_equal(m->decision_latency_sum_us[2][WINDOW_ALLOW], sum);

	d.reason = WINDOW_REASON_SHADOW_DENY;
	metrics_observe_decision(m, 2, &d, 10);
	assert_int_equal(m->decision_latency[2][METRICS_DEC_SHADOW_DENY][0], 1);
	assert_int_equal(m->decision_latency[2][WINDOW_ALLOW][0], 2);
	d.reason = WINDOW_REASON_REDIS_UNAVAILABLE;
	d.status = WINDOW_ERROR;
	metrics_observe_decision(m, 2, &d, 10);
	assert_int_equal(m->decision_latency[2][WINDOW_ERROR][0], 1);

	d.status = WINDOW_STATUS_COUNT;          /* nothing decided */
	metrics_observe_decision(m, 2, &d, 10);
	d.status = WINDOW_DENY;
	metrics_observe_decision(m, CONFIG_MAX_POLICIES, &d, 10);
	assert_int_equal(m->decision_latency[2][WINDOW_DENY][0], 0);
	free(m);
}

/* A reload that moves policies moves every per-policy counter with them. */
static void test_move_policies(void **state)
{
	struct metrics *m = calloc(1, sizeof(*m));
	struct window_decision d = { .status = WINDOW_DENY };
	size_t from[3] = { 1, CONFIG_MAX_POLICIES, 0 };

	(void)state;
	assert_non_null(m);
	metrics_add(&m->decisions[0][WINDOW_ALLOW], 5);
	metrics_add(&m->shadow_denies[0], 6);
	metrics_add(&m->cache_denies[1], 7);
	metrics_add(&m->decisions[4][WINDOW_DENY], 8);     /* a policy dropped */
	metrics_observe_decision(m, 1, &d, 30);
	metrics_add(&m->redis_reconnects, 9);               /* not per policy */

	metrics_move_policies(m, from, 3);
	assert_int_equal(m->decisions[2][WINDOW_ALLOW], 5);
	assert_int_equal(m->shadow_denies[2], 6);
	assert_int_equal(m->cache_denies[0], 7);
	assert_int_equal(m->decision_latency[0][WINDOW_DENY][1], 1);
	assert_int_equal(m->decision_latency_sum_us[0][WINDOW_DENY], 30);
	assert_int_equal(m->decisions[0][WINDOW_ALLOW], 0);
	assert_int_equal(m->cache_denies[1], 0);            /* new: starts at 0 */
	assert_int_equal(m->decision_latency[1][WINDOW_DENY][1], 0);
	assert_int_equal(m->decisions[4][WINDOW_DENY], 0);
	assert_int_equal(m->redis_reconnects, 9);
	free(m);
}

static void test_render_empty(void **state)
{
	struct metrics *m = calloc(1, sizeof(*m));
	const struct metrics *ms[1];
	char *out = malloc(OUT_CAP);
	int n;

	(void)state;
	assert_non_null(m);
	assert_non_null(out);
	ms[0] = m;
	/* No config: no per-policy series, still well formed. */
	n = metrics_render(ms, 1, NULL, "0.1.0", out, OUT_CAP);
	assert_true(n > 0);
	assert_int_equal((size_t)n, strlen(out));
	check_format(out);
	assert_line(out, "ratelimit_spoa_build_info{version=\"0.1.0\"} 1");
	assert_line(out, "ratelimit_spoa_redis_call_duration_seconds_bucket{le=\"+Inf\"} 0");
	assert_line(out, "ratelimit_spoa_redis_call_duration_seconds_sum 0.000000");
	assert_line(out, "# TYPE ratelimit_spoa_decisions_total counter");
	assert_null(strstr(out, "policy=\""));
	free(out);
	free(m);
}

static void test_render_sums(void **state)
{
	struct metrics *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	const struct metrics *ms[3];
	struct config c;
	char *out = malloc(OUT_CAP);
	int n, samples;

	(void)state;
	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(out);
	config_two(&c);

	metrics_add(&a->decisions[0][WINDOW_ALLOW], 3);
	metrics_add(&b->decisions[0][WINDOW_ALLOW], 4);
	metrics_add(&b->decisions[0][WINDOW_DENY], 2);
	metrics_add(&a->decisions[1][WINDOW_ERROR], 1);
	metrics_add(&a->shadow_denies[1], 5);
	metrics_add(&b->cache_denies[0], 6);
	metrics_add(&a->errors_by_reason[WINDOW_REASON_REDIS_TIMEOUT], 7);
	metrics_add(&b->errors_by_reason[WINDOW_REASON_REDIS_TIMEOUT], 1);
	metrics_add(&a->redis_errors[METRICS_REDIS_ERR_NOSCRIPT], 2);
	metrics_add(&b->redis_reconnects, 3);
	metrics_add(&a->redis_connected, 1);
	metrics_add(&b->redis_connected, 1);
	metrics_add(&a->conn_accepted, 10);
	metrics_add(&b->conn_accepted, 5);
	metrics_add(&a->conn_open, 3);
	metrics_sub(&a->conn_open, 1);
	metrics_add(&b->conn_rejected, 9);
	metrics_add(&a->frames_in[3], 100);
	metrics_add(&b->frames_in[3], 50);
	metrics_add(&a->frames_out[3], 150);
	metrics_add(&b->malformed[SPOP_ST_TOO_BIG], 1);
	metrics_add(&a->notify_inflight, 4);
	metrics_add(&b->config_reloads[METRICS_RELOAD_SUCCESS], 2);
	metrics_add(&a->config_reloads[METRICS_RELOAD_FAILURE], 1);
	metrics_add(&a->redis_replies[METRICS_ENGINE_MODULE][METRICS_REPLY_ERROR], 1);
	metrics_add(&b->redis_replies[METRICS_ENGINE_MODULE][METRICS_REPLY_ERROR], 2);
	metrics_add(&a->live_decisions[METRICS_LIVE_BLOCK], 2);
	metrics_add(&b->live_decisions[METRICS_LIVE_BLOCK], 3);
	metrics_add(&a->unknown_plans, 1);
	metrics_add(&b->unknown_plans, 6);
	metrics_add(&b->live_overrides, 4);
	metrics_observe_redis_latency(a, 80);
	metrics_observe_redis_latency(b, 300);
	metrics_observe_redis_latency(b, 3000000);
	{
		struct window_decision d = { .status = WINDOW_DENY };

		metrics_observe_decision(a, 0, &d, 20);
		metrics_observe_decision(b, 0, &d, 60);
		d.status = WINDOW_ALLOW;
		d.reason = WINDOW_REASON_SHADOW_DENY;
		metrics_observe_decision(b, 1, &d, 2000000);
	}

	ms[0] = a;
	ms[1] = NULL;   /* a thread that has not started */
	ms[2] = b;
	n = metrics_render(ms, 3, &c, "0.1.0", out, OUT_CAP);
	assert_true(n > 0);
	samples = check_format(out);
	/* 2 policies x (4 statuses + shadow + cache) + reasons
	 * + 2 policies x 4 statuses x 18 decision histogram + 17 Redis histogram
	 * + every redis error kind + 8 scalars + 2 engines + 2 engines x 2 results of
	 * the replies + 8 frames + 14 statuses + inflight + 2 reload results + build_info
	 * + the live overrides gauge, its 2 decision kinds, denied_dropped
	 * + unknown_plan_total + the lease events + the settle events */
	assert_int_equal(samples, 2 * 6 + (WINDOW_REASON_COUNT - 1) + 2 * 4 * 18 + 17 +
	                 METRICS_REDIS_ERR_COUNT + 8 + METRICS_ENGINE_COUNT +
	                 METRICS_ENGINE_COUNT * METRICS_REPLY_COUNT + 8 + 14 + 1 + 2 + 1 +
	                 1 + METRICS_LIVE_COUNT + 1 + 1 + METRICS_LEASE_COUNT +
	                 METRICS_SETTLE_COUNT);
	assert_line(out, "ratelimit_spoa_leases_total{event=\"release-failed\"} 0");
	assert_line(out, "ratelimit_spoa_settles_total{event=\"refunded\"} 0");
	assert_line(out, "ratelimit_spoa_live_override_decisions_total{kind=\"block\"} 5");
	assert_line(out, "ratelimit_spoa_live_override_decisions_total{kind=\"limits\"} 0");
	assert_line(out, "ratelimit_spoa_live_overrides 4");
	/* summed over the threads */
	assert_line(out, "ratelimit_spoa_unknown_plan_total 7");
	assert_line(out, "ratelimit_spoa_redis_replies_total{engine=\"module\",result=\"error\"} 3");
	assert_line(out, "ratelimit_spoa_redis_replies_total{engine=\"script\",result=\"decision\"} 0");

	assert_line(out, "ratelimit_spoa_decisions_total{policy=\"transfer\",status=\"allow\"} 7");
	assert_line(out, "ratelimit_spoa_decisions_total{policy=\"transfer\",status=\"deny\"} 2");
	assert_line(out, "ratelimit_spoa_decisions_total{policy=\"transfer\",status=\"error\"} 0");
	assert_line(out, "ratelimit_spoa_decisions_total{policy=\"reads\",status=\"error\"} 1");
	assert_line(out, "ratelimit_spoa_shadow_denies_total{policy=\"reads\"} 5");
	assert_line(out, "ratelimit_spoa_decisions_total{policy=\"reads\",status=\"shadow-deny\"} 5");
	assert_line(out, "ratelimit_spoa_local_cache_answers_total{policy=\"transfer\"} 6");
	assert_line(out, "ratelimit_spoa_errors_total{reason=\"redis-timeout\"} 8");
	assert_line(out, "ratelimit_spoa_errors_total{reason=\"redis-unavailable\"} 0");
	assert_line(out, "ratelimit_spoa_redis_errors_total{kind=\"noscript\"} 2");
	assert_line(out, "ratelimit_spoa_redis_errors_total{kind=\"timeout\"} 0");
	assert_line(out, "ratelimit_spoa_redis_errors_total{kind=\"oom\"} 0");
	assert_line(out, "ratelimit_spoa_errors_total{reason=\"redis-oom\"} 0");
	assert_line(out, "ratelimit_spoa_redis_reconnects_total 3");
	assert_line(out, "ratelimit_spoa_redis_connected 2");
	assert_line(out, "ratelimit_spoa_connections_accepted_total 15");
	assert_line(out, "ratelimit_spoa_connections_open 2");
	assert_line(out, "ratelimit_spoa_connections_rejected_total 9");
	assert_line(out, "ratelimit_spoa_frames_received_total{type=\"notify\"} 150");
	assert_line(out, "ratelimit_spoa_frames_sent_total{type=\"ack\"} 150");
	assert_line(out, "ratelimit_spoa_malformed_frames_total{status=\"too-big\"} 1");
	assert_line(out, "ratelimit_spoa_notify_inflight 4");
	assert_line(out, "ratelimit_spoa_config_reloads_total{result=\"success\"} 2");
	assert_line(out, "ratelimit_spoa_config_reloads_total{result=\"failure\"} 1");

	/* Cumulative buckets; +Inf equals _count. */
	assert_line(out, "# TYPE ratelimit_spoa_redis_call_duration_seconds histogram");
	assert_line(out, "ratelimit_spoa_redis_call_duration_seconds_bucket{le=\"0.0001\"} 1");
	assert_line(out, "ratelimit_spoa_redis_call_duration_seconds_bucket{le=\"0.00025\"} 1");
	assert_line(out, "ratelimit_spoa_redis_call_duration_seconds_bucket{le=\"0.0005\"} 2");
	assert_line(out, "ratelimit_spoa_redis_call_duration_seconds_bucket{le=\"2.5\"} 2");
	assert_line(out, "ratelimit_spoa_redis_call_duration_seconds_bucket{le=\"+Inf\"} 3");
	assert_line(out, "ratelimit_spoa_redis_call_duration_seconds_count 3");
	assert_line(out, "ratelimit_spoa_redis_call_duration_seconds_sum 3.000380");

	/* The decision histogram, per policy and status, summed over threads. */
	assert_line(out, "# TYPE ratelimit_spoa_decision_duration_seconds histogram");
	assert_line(out, "ratelimit_spoa_decision_duration_seconds_bucket"
	            "{policy=\"transfer\",status=\"deny\",le=\"0.000025\"} 1");
	assert_line(out, "ratelimit_spoa_decision_duration_seconds_bucket"
	            "{policy=\"transfer\",status=\"deny\",le=\"0.0001\"} 2");
	assert_line(out, "ratelimit_spoa_decision_duration_seconds_bucket"
	            "{policy=\"transfer\",status=\"deny\",le=\"+Inf\"} 2");
	assert_line(out, "ratelimit_spoa_decision_duration_seconds_sum"
	            "{policy=\"transfer\",status=\"deny\"} 0.000080");
	assert_line(out, "ratelimit_spoa_decision_duration_seconds_count"
	            "{policy=\"transfer\",status=\"deny\"} 2");
	assert_line(out, "ratelimit_spoa_decision_duration_seconds_count"
	            "{policy=\"transfer\",status=\"allow\"} 0");
	assert_line(out, "ratelimit_spoa_decision_duration_seconds_bucket"
	            "{policy=\"reads\",status=\"shadow-deny\",le=\"1\"} 0");
	assert_line(out, "ratelimit_spoa_decision_duration_seconds_bucket"
	            "{policy=\"reads\",status=\"shadow-deny\",le=\"+Inf\"} 1");
	assert_line(out, "ratelimit_spoa_decision_duration_seconds_sum"
	            "{policy=\"reads\",status=\"shadow-deny\"} 2.000000");
	assert_line(out, "ratelimit_spoa_decision_duration_seconds_count"
	            "{policy=\"reads\",status=\"allow\"} 0");
	free(out);
	free(a);
	free(b);
}

/* Too small a buffer is -1, never an overrun; an exact fit works. */
static void test_render_capacity(void **state)
{
	struct metrics *m = calloc(1, sizeof(*m));
	const struct metrics *ms[1];
	struct config c;
	char *out = malloc(OUT_CAP), *small;
	int n;

	(void)state;
	assert_non_null(m);
	assert_non_null(out);
	config_two(&c);
	ms[0] = m;
	n = metrics_render(ms, 1, &c, "0.1.0", out, OUT_CAP);
	assert_true(n > 0);
	/* An exact-size heap buffer: valgrind/ASan catch a byte too far. */
	small = malloc((size_t)n + 1);
	assert_non_null(small);
	assert_int_equal(metrics_render(ms, 1, &c, "0.1.0", small, (size_t)n + 1), n);
	assert_string_equal(small, out);
	assert_int_equal(metrics_render(ms, 1, &c, "0.1.0", small, (size_t)n), -1);
	assert_int_equal(metrics_render(ms, 1, &c, "0.1.0", small, 10), -1);
	assert_int_equal(metrics_render(ms, 1, &c, "0.1.0", small, 0), -1);
	free(small);
	free(out);
	free(m);
}

static void test_render_version_escaped(void **state)
{
	struct metrics *m = calloc(1, sizeof(*m));
	const struct metrics *ms[1];
	char *out = malloc(OUT_CAP);

	(void)state;
	assert_non_null(m);
	assert_non_null(out);
	ms[0] = m;
	assert_true(metrics_render(ms, 1, NULL, "1.0 \"x\"\\\n", out, OUT_CAP) > 0);
	assert_line(out, "ratelimit_spoa_build_info{version=\"1.0 \\\"x\\\"\\\\\\n\"} 1");
	check_format(out);
	free(out);
	free(m);
}

/* The pool families: refusals of the policies naming a pool summed under
 * it, the gauges by the pool's index, a pool without traffic at 0; and a
 * reload that moves the policies moves their pool refusals with them. */
static void test_render_pools(void **state)
{
	static const char text[] = "pool backend 20/1s headroom=2\npool idle 5/1m\n"
	                           "policy api 10/1s pool=backend\npolicy plain 3/1s\n"
	                           "policy export 10/1s pool=backend\n";
	struct metrics *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	const struct metrics *ms[2] = { a, b };
	size_t from[3] = { 2, 1, 0 };
	char err[CONFIG_ERR_LEN], *out = malloc(OUT_CAP);
	struct config c;

	(void)state;
	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(out);
	config_init(&c);
	assert_int_equal(config_parse(&c, "t", text, strlen(text), err, sizeof(err)), 0);
	metrics_add(&a->pool_refusals[0][METRICS_POOL_FULL], 2);
	metrics_add(&b->pool_refusals[2][METRICS_POOL_FULL], 3);
	metrics_add(&b->pool_refusals[0][METRICS_POOL_SHARE], 4);
	metrics_add(&b->pool_used[0], 17);        /* main's block in the agent */
	metrics_add(&b->pool_accounts[0], 3);
	assert_true(metrics_render(ms, 2, &c, "0.1.0", out, OUT_CAP) > 0);
	check_format(out);
	assert_line(out, "ratelimit_spoa_pool_limit{pool=\"backend\"} 20");
	assert_line(out, "ratelimit_spoa_pool_limit{pool=\"idle\"} 5");
	assert_line(out, "ratelimit_spoa_pool_used{pool=\"backend\"} 17");
	assert_line(out, "ratelimit_spoa_pool_used{pool=\"idle\"} 0");
	assert_line(out, "ratelimit_spoa_pool_accounts_active{pool=\"backend\"} 3");
	assert_line(out, "ratelimit_spoa_pool_accounts_active{pool=\"idle\"} 0");
	assert_line(out, "ratelimit_spoa_pool_refusals_total{pool=\"backend\",reason=\"pool-full\"} 5");
	assert_line(out, "ratelimit_spoa_pool_refusals_total{pool=\"backend\",reason=\"pool-share\"} 4");
	assert_line(out, "ratelimit_spoa_pool_refusals_total{pool=\"idle\",reason=\"pool-full\"} 0");
	/* a reload reversing the policies: api (was 0) becomes 2 */
	metrics_move_policies(b, from, 3);
	assert_int_equal(b->pool_refusals[2][METRICS_POOL_SHARE], 4);
	assert_int_equal(b->pool_refusals[0][METRICS_POOL_FULL], 3);
	assert_int_equal(b->pool_refusals[0][METRICS_POOL_SHARE], 0);
	assert_int_equal(b->pool_used[0], 17);    /* not per policy */
	config_release(&c);
	free(out);
	free(a);
	free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buckets),
		cmocka_unit_test(test_decision_buckets),
		cmocka_unit_test(test_move_policies),
		cmocka_unit_test(test_render_empty),
		cmocka_unit_test(test_render_sums),
		cmocka_unit_test(test_render_capacity),
		cmocka_unit_test(test_render_version_escaped),
		cmocka_unit_test(test_render_pools),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
