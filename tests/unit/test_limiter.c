/*
 * test_limiter - the limiter (limiter*.c) against a scripted fake Redis
 * (fake_redis.h) on loopback sockets inside this process, on this test's
 * own libev loop. Not pure like the other unit tests: it opens sockets,
 * but only to itself, and the fake answers exactly what each test scripts,
 * so the cases a real redis-server cannot be made to produce on demand are
 * driven deterministically: a half-written reply, a stall, NOSCRIPT, an
 * evicting Redis, a replica, Cluster MOVED / ASK / TRYAGAIN.
 *
 * Waits poll for a condition with a generous deadline; nothing asserts how
 * long anything took.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "cluster.h"
#include "fake_redis.h"
#include "limiter.h"
#include "limiter_int.h"
#include "log.h"
#include "metrics.h"
#include "window.h"

#define WAIT_S       10.0
#define SCRIPT       "return 1"
#define ANSWERS_MAX  (LIMITER_WAIT_MAX + 16)
#define PAUSE_S      0.02   /* between the requests of ask_until() */

/* The script's replies: allowed, limit, remaining, reset (us), retry (us), window. */
#define REPLY_ALLOW  "*6\r\n:1\r\n:10\r\n:9\r\n:60000000\r\n:0\r\n:0\r\n"
#define REPLY_DENY   "*6\r\n:0\r\n:10\r\n:0\r\n:60000000\r\n:5000000\r\n:0\r\n"

static struct ev_loop *loop;
static ev_timer tick;

static const struct window_policy pol = {
	.name = "api", .name_len = 3, .nwin = 1, .win = { { 10, 60000 } },
	.on_error = WINDOW_ON_ERROR_DENY,
};

/* Every answer a test received, one slot per limiter_check(): the callback
 * contract says each is written exactly once. */
struct answer {
	unsigned n;
	struct window_decision d;
};
static struct answer answers[ANSWERS_MAX];
static unsigned nanswers;
static unsigned batch;          /* redis-batch of the next limiter (0: 1) */
static enum limiter_engine_mode engine; /* redis-engine of the next limiter */
static struct metrics metrics;  /* the limiter's counters */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Run the loop until <cond> holds, at most WAIT_S; then check it. */
#define WAIT(cond) do { \
	double t0_ = now_s(); \
	while (!(cond) && now_s() - t0_ < WAIT_S) \
		ev_run(loop, EVRUN_ONCE); \
	assert_true(cond); \
} while (0)

/* Set while a test is inside limiter_check(): limiter.h promises that no
 * answer is delivered there (every one comes on a later loop iteration). */
static bool inside_check;
/* Run (once) by the next answer, from inside the limiter's reply handling. */
static void (*answer_hook)(void);

static void on_answer(void *arg, const struct window_decision *d)
{
	struct answer *a = arg;
	void (*hook)(void) = answer_hook;

	assert_false(inside_check);
	a->n++;
	a->d = *d;
	answer_hook = NULL;
	if (hook)
		hook();
}

/* libev: keeps EVRUN_ONCE from sleeping long when nothing else is due. */
static void on_tick(struct ev_loop *l, ev_timer *w, int revents)
{
	(void)l;
	(void)w;
	(void)revents;
}

static int setup(void **state)
{
	(void)state;
	loop = ev_loop_new(EVFLAG_AUTO);
	if (!loop)
		return -1;
	ev_timer_init(&tick, on_tick, 0.01, 0.01);
	ev_timer_start(loop, &tick);
	memset(answers, 0, sizeof(answers));
	nanswers = 0;
	batch = 0;
	engine = LIMITER_ENGINE_AUTO;
	memset(&metrics, 0, sizeof(metrics));
	return 0;
}

/* Every answer came exactly once. */
static int teardown(void **state)
{
	unsigned i;

	(void)state;
	for (i = 0; i < nanswers; i++)
		if (answers[i].n != 1) {
			fprintf(stderr, "# answer %u came %u times\n", i, answers[i].n);
			return -1;
		}
	ev_timer_stop(loop, &tick);
	ev_loop_destroy(loop);
	loop = NULL;
	return 0;
}

/* A limiter on <url> with <timeout_ms>; the test frees it. */
static struct limiter *new_limiter(const char *url, uint64_t timeout_ms)
{
	struct limiter_settings s = {
		.redis_url = url, .timeout_ms = timeout_ms, .script = SCRIPT,
		.script_len = strlen(SCRIPT), .batch = batch,
		.metrics = &metrics, .engine = engine,
	};
	char err[256] = "";
	struct limiter *l = limiter_new(loop, &s, err, sizeof(err));

	if (!l)
		fprintf(stderr, "# limiter_new: %s\n", err);
	assert_non_null(l);
	return l;
}

static struct limiter *new_limiter_on(const struct fake_redis *f, const char *scheme,
                                      uint64_t timeout_ms)
{
	char url[64];

	snprintf(url, sizeof(url), "%s://127.0.0.1:%d", scheme, f->port);
	return new_limiter(url, timeout_ms);
}

static void wait_ready(struct limiter *l)
{
	char why[160];

	WAIT(limiter_ready(l, why, sizeof(why)));
}

/* Start one decision for <key>; its answer lands in the returned slot. */
static struct answer *start(struct limiter *l, const char *key)
{
	struct answer *a;

	assert_true(nanswers < ANSWERS_MAX);
	a = &answers[nanswers++];
	inside_check = true;
	assert_int_equal(limiter_check(l, &pol, key, strlen(key), 1, on_answer, a), 0);
	inside_check = false;
	return a;
}

/* One decision for <key>, waited for. */
static struct window_decision ask(struct limiter *l, const char *key)
{
	struct answer *a = start(l, key);

	WAIT(a->n > 0);
	return a->d;
}

/* Ask again until the answer is <status> with <reason>. */
static struct window_decision ask_until(struct limiter *l, const char *key,
                                        enum window_status status, enum window_reason reason)
{
	struct window_decision d;
	double t0 = now_s();

	for (;;) {
		double t1;

		d = ask(l, key);
		if ((d.status == status && d.reason == reason) || now_s() - t0 >= WAIT_S)
			break;
		/* let the limiter's timers move on before asking again */
		for (t1 = now_s(); now_s() - t1 < PAUSE_S;)
			ev_run(loop, EVRUN_ONCE);
	}
	assert_int_equal(d.status, status);
	assert_int_equal(d.reason, reason);
	return d;
}

/* The Redis Cluster hash slot of <key> under the test policy. */
static unsigned slot_of(const char *key)
{
	char rkey[128];

	snprintf(rkey, sizeof(rkey), "%.*s:limit:v1:{%s}:1m", (int)pol.name_len, pol.name, key);
	return cluster_key_slot(rkey, strlen(rkey));
}

/* CLUSTER SLOTS: every slot on <port>, except <slot> on <other> (when
 * <other> is not 0). */
static void slots_reply(char *buf, size_t cap, int port, unsigned slot, int other)
{
	char ranges[3][96];
	unsigned n = 0, i;
	size_t len;

	if (!other) {
		snprintf(ranges[n++], sizeof(ranges[0]), ":0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n", port);
	} else {
		if (slot > 0)
			snprintf(ranges[n++], sizeof(ranges[0]),
			         ":0\r\n:%u\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n", slot - 1, port);
		snprintf(ranges[n++], sizeof(ranges[0]),
		         ":%u\r\n:%u\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n", slot, slot, other);
		if (slot < CLUSTER_SLOTS - 1)
			snprintf(ranges[n++], sizeof(ranges[0]),
			         ":%u\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n", slot + 1, port);
	}
	len = (size_t)snprintf(buf, cap, "*%u\r\n", n);
	for (i = 0; i < n; i++)
		len += (size_t)snprintf(buf + len, cap - len, "*3\r\n%s", ranges[i]);
}

/* ------------------------------------------------------------------------ */
/* one Redis                                                                 */
/* ------------------------------------------------------------------------ */

/* One fake Redis and a limiter on it: a test scripts the fake between
 * fake_start() and one_connect(). */
static struct fake_redis f;
static struct limiter *l;

static void one_connect(uint64_t timeout_ms, bool ready)
{
	l = new_limiter_on(&f, "redis", timeout_ms);
	if (ready)
		wait_ready(l);
}

/* Nothing unexpected reached the fake; free both. */
static void one_stop(void)
{
	assert_int_equal(f.unexpected, 0);
	limiter_free(l);
	fake_stop(&f);
}

/* limiter_draw_lease(): 32 lower-case hex digits, never the same twice,
 * across more ids than one block of random bytes holds (the refill). */
static void test_lease_ids(void **state)
{
	enum { N = 3 * LIMITER_LEASE_BLOCK / (WINDOW_LEASE_ID_LEN / 2) + 7 };
	static char ids[N][WINDOW_LEASE_ID_LEN + 1];
	size_t i, j;

	(void)state;
	for (i = 0; i < N; i++) {
		assert_int_equal(limiter_draw_lease(ids[i]), 0);
		assert_int_equal(strlen(ids[i]), WINDOW_LEASE_ID_LEN);
		assert_int_equal(strspn(ids[i], "0123456789abcdef"), WINDOW_LEASE_ID_LEN);
	}
	qsort(ids, N, sizeof(ids[0]), (int (*)(const void *, const void *))strcmp);
	for (j = 1; j < N; j++)
		assert_string_not_equal(ids[j - 1], ids[j]);
}

static unsigned settles_answered, settles_unanswered;

/* A settle's caller: what it was told (a state, or none). */
static void on_settled(void *arg, const struct stored_settle *st)
{
	(void)arg;
	if (st)
		settles_answered++;
	else
		settles_unanswered++;
}

/* <p>: the test policy under settle= (and inflight=, when <inflight>). */
static void settle_policy(struct window_policy *p, uint64_t inflight)
{
	*p = pol;
	p->inflight = inflight;
	p->lease_ms = 60000;
	snprintf(p->settle_hdr, sizeof(p->settle_hdr), "x-cost");
}

/* A release's or settle's record is kept once answered and serves the
 * next one whole: a release after a settle is a release again (counted as
 * released, not read as a settle's answer). */
static void test_release_records_reused(void **state)
{
	struct window_policy p;
	const char *id = "0123456789abcdef0123456789abcdef";

	(void)state;
	settle_policy(&p, 5);
	settles_answered = settles_unanswered = 0;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_rule(&f, "EVALSHA", "*2\r\n:1\r\n:0\r\n");
	one_connect(1000, true);
	assert_int_equal(limiter_settle(l, &p, "alice", 5, id, 3, on_settled, NULL), 0);
	WAIT(settles_answered == 1);
	assert_int_equal(l->nrelease_spare, 1);
	assert_int_equal(limiter_release(l, &p, "alice", 5, id), 0);
	assert_int_equal(l->nrelease_spare, 0);
	WAIT(metrics.leases[METRICS_LEASE_RELEASED] == 1);
	assert_int_equal(l->nrelease_spare, 1);
	assert_int_equal(limiter_release(l, &p, "alice", 5, id), 0);
	WAIT(metrics.leases[METRICS_LEASE_RELEASED] == 2);
	assert_int_equal(settles_answered, 1);
	assert_int_equal(settles_unanswered, 0);
	assert_int_equal(l->nrelease_spare, 1);
	one_stop();
}

/* A settle Redis does not answer: its caller (HAProxy's response) is told
 * "no state" at redis-timeout, once, while the settle itself stays with
 * hiredis; freeing the limiter answers nobody twice. */
static void test_settle_answer_by_timeout(void **state)
{
	struct window_policy p;
	const char *id = "0123456789abcdef0123456789abcdef";

	(void)state;
	settle_policy(&p, 0);
	settles_answered = settles_unanswered = 0;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, "EVALSHA");
	fake_step(&f, FAKE_STALL, NULL);
	/* (redis-timeout 2 s: the link's stall limit, 20 s, lies past WAIT's
	 * 10 s, so only the settle's own deadline answers within it) */
	one_connect(2000, true);
	assert_int_equal(limiter_settle(l, &p, "alice", 5, id, 3, on_settled, NULL), 0);
	WAIT(settles_unanswered == 1);
	assert_int_equal(settles_answered, 0);
	assert_non_null(l->releases);          /* still held, still tried */
	one_stop();
	assert_int_equal(settles_unanswered, 1);
	assert_int_equal(settles_answered, 0);
}

/* The setup sequence, then a decision from the script's reply. */
static void test_allow(void **state)
{
	struct window_decision d;

	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, "EVALSHA " FAKE_SHA " 1 api:limit:v1:{alice}:1m");
	fake_step(&f, FAKE_SEND, REPLY_ALLOW);
	one_connect(1000, true);
	assert_int_equal(fake_hits(&f, "ROLE"), 1);
	assert_int_equal(fake_hits(&f, "CONFIG GET maxmemory-policy"), 1);
	assert_int_equal(fake_hits(&f, "SCRIPT LOAD"), 1);
	d = ask(l, "alice");
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_int_equal(d.limit, 10);
	assert_int_equal(d.remaining, 9);
	assert_true(fake_done(&f));
	one_stop();
}

/* A deny is cached: the next request of that account is answered without
 * Redis, until its retry_after. */
static void test_deny_cached(void **state)
{
	struct window_decision d;

	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, "EVALSHA");
	fake_step(&f, FAKE_SEND, REPLY_DENY);
	one_connect(1000, true);
	d = ask(l, "bob");
	assert_int_equal(d.status, WINDOW_DENY);
	assert_int_equal(d.retry_after, 5);
	d = ask(l, "bob");
	assert_int_equal(d.status, WINDOW_DENY);
	assert_true(d.retry_after >= 1 && d.retry_after <= 5);
	assert_int_equal(fake_count(&f, "EVALSHA"), 1);
	one_stop();
}

/* NOSCRIPT (Redis lost its script cache): the call is re-sent once as EVAL
 * with the script, and the script is loaded again. */
static void test_noscript(void **state)
{
	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, "EVALSHA");
	fake_step(&f, FAKE_SEND, "-NOSCRIPT No matching script. Please use EVAL.\r\n");
	fake_step(&f, FAKE_EXPECT, "EVAL " SCRIPT " 1 api:limit:v1:{carol}:1m");
	fake_step(&f, FAKE_SEND, REPLY_ALLOW);
	one_connect(1000, true);
	assert_int_equal(ask(l, "carol").status, WINDOW_ALLOW);
	WAIT(fake_hits(&f, "SCRIPT LOAD") == 2);
	assert_true(fake_done(&f));
	one_stop();
}

/* A Redis that may evict keys: decisions refused (redis-evicts-keys)
 * without a script call, until the policy is fixed and asked again. */
static void test_eviction_policy(void **state)
{
	char why[160] = "";

	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_rule(&f, "CONFIG GET maxmemory-policy",
	          "*2\r\n$16\r\nmaxmemory-policy\r\n$11\r\nallkeys-lru\r\n");
	fake_rule(&f, "EVALSHA", REPLY_ALLOW);
	one_connect(1000, false);
	ask_until(l, "dave", WINDOW_ERROR, WINDOW_REASON_REDIS_EVICTS);
	assert_false(limiter_ready(l, why, sizeof(why)));
	assert_non_null(strstr(why, "maxmemory-policy"));
	assert_int_equal(fake_count(&f, "EVALSHA"), 0);
	/* an operator sets noeviction: seen on a later request */
	fake_rule(&f, "CONFIG GET maxmemory-policy",
	          "*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n");
	ask_until(l, "dave", WINDOW_ALLOW, WINDOW_REASON_NONE);
	assert_true(limiter_ready(l, why, sizeof(why)));
	one_stop();
}

/* A ready link whose Redis is switched to an evicting policy live: the
 * link's own poll sees it (no request needed to trigger it), decisions are
 * refused, the gauge says 1; back to noeviction, they come back. */
static void test_eviction_live_switch(void **state)
{
	char why[160] = "";

	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_rule(&f, "EVALSHA", REPLY_ALLOW);
	one_connect(1000, true);
	assert_int_equal(ask(l, "erin").status, WINDOW_ALLOW);
	fake_rule(&f, "CONFIG GET maxmemory-policy",
	          "*2\r\n$16\r\nmaxmemory-policy\r\n$14\r\nallkeys-random\r\n");
	WAIT(atomic_load(&metrics.redis_unsafe_eviction) == 1);
	assert_false(limiter_ready(l, why, sizeof(why)));
	ask_until(l, "erin", WINDOW_ERROR, WINDOW_REASON_REDIS_EVICTS);
	fake_rule(&f, "CONFIG GET maxmemory-policy",
	          "*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n");
	WAIT(atomic_load(&metrics.redis_unsafe_eviction) == 0);
	ask_until(l, "erin", WINDOW_ALLOW, WINDOW_REASON_NONE);
	one_stop();
}

/* Redis's own evidence: evicted_keys grew while the policy still reads
 * noeviction (switched and back between two polls, or CONFIG refused):
 * refused the same way. The first value seen is only a baseline. */
static void test_eviction_evidence(void **state)
{
	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_rule(&f, "INFO stats", FAKE_INFO(3));
	fake_rule(&f, "EVALSHA", REPLY_ALLOW);
	one_connect(1000, true);
	assert_int_equal(ask(l, "fred").status, WINDOW_ALLOW);
	WAIT(fake_hits(&f, "INFO stats") >= 2);
	assert_int_equal(ask(l, "fred").status, WINDOW_ALLOW);
	fake_rule(&f, "INFO stats", FAKE_INFO(5));
	WAIT(atomic_load(&metrics.redis_unsafe_eviction) == 1);
	ask_until(l, "fred", WINDOW_ERROR, WINDOW_REASON_REDIS_EVICTS);
	one_stop();
}

/* The re-entrancy of limiter_check() (issue 20): a batched call queued on
 * one link, then a call for another link flushes it inside limiter_check(),
 * and that link is known to evict keys, so the flushed call is refused at
 * once. Its answer must still come on a later loop iteration, never inside
 * the second limiter_check() (on_answer asserts it). White box: the second
 * link is a copy of the first that evicts, as after a Sentinel switch. */
static void test_no_answer_inside_check(void **state)
{
	struct limiter_link other;
	struct answer *a, *b;

	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_rule(&f, "EVALSHA", REPLY_ALLOW);
	batch = 4;
	one_connect(1000, true);
	a = start(l, "ivan");
	assert_int_equal(l->batch.nqueued, 1);
	other = *l->links.main;
	other.watch.evicts = true;
	l->batch.queue[0]->link = &other;
	b = start(l, "judy");   /* flushes "ivan" to <other>: refused */
	assert_int_equal(a->n, 0);
	WAIT(a->n == 1 && b->n == 1);
	assert_int_equal(a->d.status, WINDOW_ERROR);
	assert_int_equal(a->d.reason, WINDOW_REASON_REDIS_EVICTS);
	assert_int_equal(b->d.status, WINDOW_ALLOW);
	one_stop();
}

/* redis-engine auto on a Redis with the module: RATELIMIT.DECIDE with the
 * script's KEYS and ARGV, the gauge says module. The module unloaded at
 * runtime ("unknown command"): the same call is re-sent as EVAL with the
 * script (never an allow from the error) and the link decides with the
 * script from then on. */
static void test_engine_auto_module(void **state)
{
	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_rule(&f, "COMMAND INFO ratelimit.decide", FAKE_MODULE);
	fake_step(&f, FAKE_EXPECT, "RATELIMIT.DECIDE 1 api:limit:v1:{kate}:1m 1 10 60000");
	fake_step(&f, FAKE_SEND, REPLY_ALLOW);
	fake_step(&f, FAKE_EXPECT, "RATELIMIT.DECIDE 1 api:limit:v1:{kate}:1m");
	fake_step(&f, FAKE_SEND, "-ERR unknown command 'RATELIMIT.DECIDE', with args beginning "
	          "with: '1' \r\n");
	fake_step(&f, FAKE_EXPECT, "EVAL " SCRIPT " 1 api:limit:v1:{kate}:1m");
	fake_step(&f, FAKE_SEND, REPLY_DENY);
	fake_step(&f, FAKE_EXPECT, "EVALSHA " FAKE_SHA " 1 api:limit:v1:{kate}:1m");
	fake_step(&f, FAKE_SEND, REPLY_DENY);
	one_connect(1000, true);
	assert_int_equal(atomic_load(&metrics.redis_engine[METRICS_ENGINE_MODULE]), 1);
	assert_int_equal(atomic_load(&metrics.redis_engine[METRICS_ENGINE_SCRIPT]), 0);
	assert_int_equal(ask(l, "kate").status, WINDOW_ALLOW);
	assert_int_equal(metrics.redis_replies[METRICS_ENGINE_MODULE][METRICS_REPLY_DECISION], 1);
	assert_int_equal(ask(l, "kate").status, WINDOW_DENY);
	limiter_set_deny_cache(l, false, 0);
	assert_int_equal(ask(l, "kate").status, WINDOW_DENY);
	assert_true(fake_done(&f));
	/* each reply counted under the engine that gave it: the unknown
	 * command was not an answer (re-sent as EVAL) */
	assert_int_equal(metrics.redis_replies[METRICS_ENGINE_MODULE][METRICS_REPLY_DECISION], 1);
	assert_int_equal(metrics.redis_replies[METRICS_ENGINE_MODULE][METRICS_REPLY_ERROR], 0);
	assert_int_equal(metrics.redis_replies[METRICS_ENGINE_SCRIPT][METRICS_REPLY_DECISION], 2);
	assert_int_equal(atomic_load(&metrics.redis_engine[METRICS_ENGINE_MODULE]), 0);
	assert_int_equal(atomic_load(&metrics.redis_engine[METRICS_ENGINE_SCRIPT]), 1);
	one_stop();
}

/* The module's protocol, read at connect (RATELIMIT.VERSION): one this
 * agent speaks (1, 2, 3, 4) is used; another one (5) is not: auto takes the script,
 * module refuses every decision (never an allow) and asks again. A module
 * without the command (test_engine_auto_module) speaks 1. */
static void test_engine_protocol(void **state)
{
	char why[160] = "";

	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_rule(&f, "COMMAND INFO ratelimit.decide", FAKE_MODULE);
	fake_rule(&f, "RATELIMIT.VERSION", FAKE_VERSION(1));
	fake_step(&f, FAKE_EXPECT, "RATELIMIT.DECIDE 1 api:limit:v1:{pia}:1m");
	fake_step(&f, FAKE_SEND, REPLY_ALLOW);
	one_connect(1000, true);
	assert_int_equal(atomic_load(&metrics.redis_engine[METRICS_ENGINE_MODULE]), 1);
	assert_int_equal(ask(l, "pia").status, WINDOW_ALLOW);
	assert_true(fake_done(&f));
	one_stop();

	assert_int_equal(fake_start(&f, loop), 0);
	fake_rule(&f, "COMMAND INFO ratelimit.decide", FAKE_MODULE);
	fake_rule(&f, "RATELIMIT.VERSION", FAKE_VERSION(7));
	fake_rule(&f, "RATELIMIT.DECIDE", REPLY_ALLOW);
	fake_step(&f, FAKE_EXPECT, "EVALSHA " FAKE_SHA " 1 api:limit:v1:{pia}:1m");
	fake_step(&f, FAKE_SEND, REPLY_DENY);
	one_connect(1000, true);
	assert_int_equal(atomic_load(&metrics.redis_engine[METRICS_ENGINE_SCRIPT]), 1);
	assert_int_equal(atomic_load(&metrics.redis_engine[METRICS_ENGINE_MODULE]), 0);
	assert_int_equal(ask(l, "pia").status, WINDOW_DENY);
	assert_true(fake_done(&f));
	assert_int_equal(fake_hits(&f, "RATELIMIT.DECIDE"), 0);
	one_stop();

	assert_int_equal(fake_start(&f, loop), 0);
	fake_rule(&f, "COMMAND INFO ratelimit.decide", FAKE_MODULE);
	fake_rule(&f, "RATELIMIT.VERSION", FAKE_VERSION(7));
	fake_rule(&f, "RATELIMIT.DECIDE", REPLY_ALLOW);
	engine = LIMITER_ENGINE_ONLY_MODULE;
	one_connect(1000, false);
	WAIT(fake_hits(&f, "RATELIMIT.VERSION") >= 2);
	assert_false(limiter_ready(l, why, sizeof(why)));
	assert_non_null(strstr(why, "protocol"));
	assert_int_equal(ask(l, "pia").status, WINDOW_ERROR);
	assert_int_equal(fake_hits(&f, "RATELIMIT.DECIDE"), 0);
	one_stop();
}

/* redis-engine auto on a Redis without the module: the script, as ever. */
static void test_engine_auto_script(void **state)
{
	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, "EVALSHA " FAKE_SHA " 1 api:limit:v1:{liam}:1m");
	fake_step(&f, FAKE_SEND, REPLY_ALLOW);
	one_connect(1000, true);
	assert_int_equal(fake_hits(&f, "COMMAND INFO ratelimit.decide"), 1);
	assert_int_equal(atomic_load(&metrics.redis_engine[METRICS_ENGINE_SCRIPT]), 1);
	assert_int_equal(ask(l, "liam").status, WINDOW_ALLOW);
	assert_true(fake_done(&f));
	one_stop();
}

/* redis-engine module on a Redis without it: never ready, every decision
 * an error (the test policy is fail-closed), the link asks again. */
static void test_engine_module_missing(void **state)
{
	char why[160] = "";

	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_rule(&f, "RATELIMIT.DECIDE", REPLY_ALLOW);
	engine = LIMITER_ENGINE_ONLY_MODULE;
	one_connect(1000, false);
	WAIT(fake_hits(&f, "COMMAND INFO ratelimit.decide") >= 2);
	assert_false(limiter_ready(l, why, sizeof(why)));
	assert_non_null(strstr(why, "RATELIMIT.DECIDE"));
	assert_int_equal(ask(l, "mia").status, WINDOW_ERROR);
	assert_int_equal(fake_hits(&f, "RATELIMIT.DECIDE"), 0);
	assert_int_equal(fake_hits(&f, "SCRIPT LOAD"), 0);
	one_stop();
}

/* redis-engine module, and the module unloaded at runtime: the call is
 * answered with the error (never allowed, never sent to the script), the
 * link drops and, asking again, finds no module: not ready. */
static void test_engine_module_gone(void **state)
{
	char why[160] = "";
	struct window_decision d;

	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_rule(&f, "COMMAND INFO ratelimit.decide", FAKE_MODULE);
	fake_step(&f, FAKE_EXPECT, "RATELIMIT.DECIDE 1 api:limit:v1:{noah}:1m");
	fake_step(&f, FAKE_SEND, REPLY_ALLOW);
	fake_step(&f, FAKE_EXPECT, "RATELIMIT.DECIDE 1 api:limit:v1:{noah}:1m");
	fake_step(&f, FAKE_SEND, "-ERR unknown command 'RATELIMIT.DECIDE'\r\n");
	engine = LIMITER_ENGINE_ONLY_MODULE;
	one_connect(1000, true);
	assert_int_equal(fake_hits(&f, "SCRIPT LOAD"), 0);
	assert_int_equal(ask(l, "noah").status, WINDOW_ALLOW);
	fake_rule(&f, "COMMAND INFO ratelimit.decide", FAKE_NO_MODULE);
	d = ask(l, "noah");
	assert_int_equal(d.status, WINDOW_ERROR);
	WAIT(!limiter_ready(l, why, sizeof(why)));
	assert_int_equal(ask(l, "noah").status, WINDOW_ERROR);
	assert_true(fake_done(&f));
	assert_int_equal(fake_count(&f, "EVAL"), 0);
	one_stop();
}

/* A decision made before the link's first connection is set up waits for
 * it and is answered from Redis once the link is ready. The link connects
 * on its own timer: neither limiter_new() nor limiter_check() opened a
 * connection. */
static void test_wait_first_connect(void **state)
{
	struct answer *a;

	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, "EVALSHA " FAKE_SHA " 1 api:limit:v1:{olga}:1m");
	fake_step(&f, FAKE_SEND, REPLY_ALLOW);
	one_connect(3000, false);
	a = start(l, "olga");
	assert_null(l->links.main->ac);
	assert_int_equal(l->calls.nwaiting, 1);
	WAIT(a->n == 1);
	assert_int_equal(a->d.status, WINDOW_ALLOW);
	assert_int_equal(a->d.remaining, 9);
	assert_int_equal(l->calls.nwaiting, 0);
	assert_int_equal(atomic_load(&metrics.redis_errors[METRICS_REDIS_ERR_REFUSED]), 0);
	assert_true(fake_done(&f));
	one_stop();
}

/* A link that was ready and went down is not waited for: with a deadline
 * far longer than the reconnect backoff, a decision during the outage is
 * answered "unavailable" at once (never queued), not held to its deadline. */
static void test_wait_not_after_ready(void **state)
{
	struct answer *a;

	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, "EVALSHA " FAKE_SHA " 1 api:limit:v1:{quinn}:1m");
	fake_step(&f, FAKE_SEND, REPLY_ALLOW);
	fake_step(&f, FAKE_CLOSE, NULL);
	fake_step(&f, FAKE_STALL, NULL);
	one_connect(30000, true);
	a = start(l, "quinn");
	WAIT(a->n == 1);
	assert_int_equal(a->d.status, WINDOW_ALLOW);
	WAIT(l->links.main->state != LIMITER_ST_READY);
	a = start(l, "quinn");
	assert_int_equal(l->calls.nwaiting, 0);
	WAIT(a->n == 1);
	assert_int_equal(a->d.status, WINDOW_ERROR);
	assert_int_equal(a->d.reason, WINDOW_REASON_REDIS_UNAVAILABLE);
	assert_int_equal(fake_count(&f, "EVALSHA"), 1);
	one_stop();
}

/* A link that never gets ready (a replica): a decision waits through the
 * failed attempts within its deadline, then is answered "unavailable"
 * (never sent: no script call). */
static void test_wait_deadline(void **state)
{
	struct answer *a;

	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_rule(&f, "ROLE", "*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6379\r\n"
	          "$9\r\nconnected\r\n:0\r\n");
	one_connect(3000, false);
	a = start(l, "pia");
	WAIT(fake_hits(&f, "ROLE") >= 1 && l->links.main->state == LIMITER_ST_IDLE);
	/* the first attempt failed; the next one comes within the deadline */
	assert_int_equal(a->n, 0);
	WAIT(a->n == 1);
	assert_int_equal(a->d.status, WINDOW_ERROR);
	assert_int_equal(a->d.reason, WINDOW_REASON_REDIS_UNAVAILABLE);
	assert_true(f.nconns >= 2);
	assert_int_equal(l->calls.nwaiting, 0);
	assert_int_equal(fake_count(&f, "EVALSHA"), 0);
	one_stop();
}

/* The waiting list is bounded: the call over LIMITER_WAIT_MAX is answered
 * "unavailable" at once, the others wait (here for a setup that never
 * finishes) and are answered when the limiter is freed. */
static void test_wait_bound(void **state)
{
	struct answer *first, *over = NULL;
	char key[32];
	unsigned i;

	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, "ROLE");
	fake_step(&f, FAKE_STALL, NULL);
	one_connect(5000, false);
	WAIT(fake_done(&f));
	first = start(l, "w0");
	for (i = 1; i <= LIMITER_WAIT_MAX; i++) {
		snprintf(key, sizeof(key), "w%u", i);
		over = start(l, key);
	}
	assert_int_equal(l->calls.nwaiting, LIMITER_WAIT_MAX);
	WAIT(over->n == 1);
	assert_int_equal(over->d.status, WINDOW_ERROR);
	assert_int_equal(over->d.reason, WINDOW_REASON_REDIS_UNAVAILABLE);
	assert_int_equal(first->n, 0);
	limiter_free(l);
	for (i = 0; i < LIMITER_WAIT_MAX; i++) {
		assert_int_equal(answers[nanswers - 1 - LIMITER_WAIT_MAX + i].n, 1);
		assert_int_equal(answers[nanswers - 1 - LIMITER_WAIT_MAX + i].d.reason,
		                 WINDOW_REASON_REDIS_UNAVAILABLE);
	}
	assert_int_equal(f.unexpected, 0);
	fake_stop(&f);
}

/* ROLE says replica: the link never becomes ready, and is retried. */
static void test_role_replica(void **state)
{
	struct window_decision d;
	char why[160] = "";

	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_rule(&f, "ROLE", "*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6379\r\n"
	          "$9\r\nconnected\r\n:0\r\n");
	one_connect(1000, false);
	WAIT(f.nconns >= 2);
	assert_false(limiter_ready(l, why, sizeof(why)));
	assert_non_null(strstr(why, "not a primary"));
	d = ask(l, "erin");
	assert_int_equal(d.status, WINDOW_ERROR);
	assert_int_equal(d.reason, WINDOW_REASON_REDIS_UNAVAILABLE);
	assert_int_equal(fake_count(&f, "EVALSHA"), 0);
	one_stop();
}

/* Half a reply, then the connection closes: "unavailable" at once; the
 * link reconnects and decides again. */
static void test_half_reply_then_close(void **state)
{
	struct window_decision d;

	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, "EVALSHA");
	fake_step(&f, FAKE_SEND, "*6\r\n:1\r\n:10\r\n");
	fake_step(&f, FAKE_CLOSE, NULL);
	one_connect(1000, true);
	d = ask(l, "frank");
	assert_int_equal(d.status, WINDOW_ERROR);
	assert_int_equal(d.reason, WINDOW_REASON_REDIS_UNAVAILABLE);
	/* Redis may have run it: counted as an unknown outcome */
	assert_int_equal(atomic_load(&metrics.unknown_outcome), 1);
	fake_rule(&f, "EVALSHA", REPLY_ALLOW);
	ask_until(l, "frank", WINDOW_ALLOW, WINDOW_REASON_NONE);
	assert_true(f.nconns >= 2);
	one_stop();
}

/* Half a reply, then silence: the call's own deadline answers "timeout". */
static void test_half_reply_then_timeout(void **state)
{
	struct window_decision d;

	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, "EVALSHA");
	fake_step(&f, FAKE_SEND, "*6\r\n:1\r\n");
	fake_step(&f, FAKE_STALL, NULL);
	one_connect(50, true);
	d = ask(l, "gina");
	assert_int_equal(d.status, WINDOW_ERROR);
	assert_int_equal(d.reason, WINDOW_REASON_REDIS_TIMEOUT);
	assert_true(fake_done(&f));
	one_stop();
}

/* A Redis that accepts commands and never answers: each call times out,
 * and once nothing has been answered for the stall limit (1 s here) the
 * link is dropped and made anew (the new connection answers). */
static void test_stall(void **state)
{
	struct window_decision d;

	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, "EVALSHA");
	fake_step(&f, FAKE_STALL, NULL);
	fake_rule(&f, "EVALSHA", REPLY_ALLOW);
	one_connect(20, true);
	d = ask(l, "hank");
	assert_int_equal(d.reason, WINDOW_REASON_REDIS_TIMEOUT);
	d = ask_until(l, "hank", WINDOW_ALLOW, WINDOW_REASON_NONE);
	/* the calls that timed out on the dropped link: outcome unknown */
	assert_true(atomic_load(&metrics.unknown_outcome) >= 1);
	assert_int_equal(d.remaining, 9);
	assert_true(f.nconns >= 2);
	one_stop();
}

/* ------------------------------------------------------------------------ */
/* batches (redis-batch)                                                     */
/* ------------------------------------------------------------------------ */

#define BATCH_HEAD(n, keys) "EVALSHA " FAKE_SHA " " #n " " keys " batch " #n " 1 1 "
#define KEYS3 "api:limit:v1:{alice}:1m api:limit:v1:{bob}:1m api:limit:v1:{carol}:1m"

/* Start a decision for each of <keys> in the same loop iteration. */
static void start_all(const char *const *keys, size_t n, struct answer **out)
{
	size_t i;

	for (i = 0; i < n; i++)
		out[i] = start(l, keys[i]);
}

static const char *const keys3[] = { "alice", "bob", "carol" };

/* Decisions of one iteration go out as one EVALSHA (up to redis-batch:
 * the rest in the next call), each answered from its own element. */
static void test_batch_args(void **state)
{
	struct answer *a[3];

	(void)state;
	batch = 2;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, BATCH_HEAD(2, "api:limit:v1:{alice}:1m api:limit:v1:{bob}:1m"));
	fake_step(&f, FAKE_SEND, "*2\r\n" REPLY_ALLOW REPLY_DENY);
	fake_step(&f, FAKE_EXPECT, "EVALSHA " FAKE_SHA " 1 api:limit:v1:{carol}:1m 1 ");
	fake_step(&f, FAKE_SEND, REPLY_ALLOW);
	one_connect(1000, true);
	start_all(keys3, 3, a);
	WAIT(a[0]->n && a[1]->n && a[2]->n);
	assert_int_equal(a[0]->d.status, WINDOW_ALLOW);
	assert_int_equal(a[0]->d.remaining, 9);
	assert_int_equal(a[1]->d.status, WINDOW_DENY);
	assert_int_equal(a[1]->d.retry_after, 5);
	assert_int_equal(a[2]->d.status, WINDOW_ALLOW);
	assert_int_equal(fake_count(&f, "EVALSHA"), 2);
	assert_true(fake_done(&f));
	one_stop();
}

/* After a burst of batches, limiter_trim() keeps LIMITER_BATCH_KEEP (4)
 * idle batches and frees the rest (six in flight at once here: two freed). */
static void test_batch_trim(void **state)
{
	static const char *const keys12[] = { "a0", "a1", "a2", "a3", "a4", "a5",
	                                      "a6", "a7", "a8", "a9", "aa", "ab" };
	static char heads[6][256];      /* the fake borrows its steps' text */
	struct answer *a[12];
	size_t i;

	(void)state;
	batch = 2;
	assert_int_equal(fake_start(&f, loop), 0);
	for (i = 0; i < 12; i += 2) {
		char *head = heads[i / 2];

		snprintf(head, sizeof(heads[0]), "EVALSHA %s 2 api:limit:v1:{%s}:1m api:limit:v1:{%s}:1m batch 2 ",
		         FAKE_SHA, keys12[i], keys12[i + 1]);
		fake_step(&f, FAKE_EXPECT, head);
		fake_step(&f, FAKE_SEND, "*2\r\n" REPLY_ALLOW REPLY_ALLOW);
	}
	one_connect(1000, true);
	(void)limiter_trim(l);
	start_all(keys12, 12, a);
	WAIT(a[11]->n);
	for (i = 0; i < 12; i++)
		assert_int_equal(a[i]->d.status, WINDOW_ALLOW);
	assert_int_equal(fake_count(&f, "EVALSHA"), 6);
	assert_int_equal(limiter_trim(l), 2);   /* 6 - LIMITER_BATCH_KEEP */
	assert_int_equal(limiter_trim(l), 0);
	assert_true(fake_done(&f));
	one_stop();
}

/* A batch of three: one reply answers each; an element that is an error
 * fails that decision only. */
static void test_batch_reply(void **state)
{
	struct answer *a[3];

	(void)state;
	batch = 32;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, BATCH_HEAD(3, KEYS3));
	fake_step(&f, FAKE_SEND, "*3\r\n" REPLY_DENY "-OOM command not allowed\r\n" REPLY_ALLOW);
	one_connect(1000, true);
	start_all(keys3, 3, a);
	WAIT(a[0]->n && a[1]->n && a[2]->n);
	assert_int_equal(a[0]->d.status, WINDOW_DENY);
	assert_int_equal(a[1]->d.status, WINDOW_ERROR);
	assert_int_equal(a[1]->d.reason, WINDOW_REASON_REDIS_OOM);
	assert_int_equal(a[2]->d.status, WINDOW_ALLOW);
	assert_int_equal(fake_count(&f, "EVALSHA"), 1);
	one_stop();
}

/* An error reply (or a reply of the wrong shape) fails each decision of
 * the batch, fail-closed. */
static void test_batch_error(void **state)
{
	struct answer *a[3];
	size_t i;

	(void)state;
	batch = 32;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, BATCH_HEAD(3, KEYS3));
	fake_step(&f, FAKE_SEND, "-ERR boom\r\n");
	fake_step(&f, FAKE_EXPECT, BATCH_HEAD(3, KEYS3));
	fake_step(&f, FAKE_SEND, "*2\r\n" REPLY_ALLOW REPLY_ALLOW);
	one_connect(1000, true);
	start_all(keys3, 3, a);
	WAIT(a[0]->n && a[1]->n && a[2]->n);
	for (i = 0; i < 3; i++) {
		assert_int_equal(a[i]->d.status, WINDOW_ERROR);
		assert_int_equal(a[i]->d.reason, WINDOW_REASON_REDIS_ERROR);
	}
	start_all(keys3, 3, a);
	WAIT(a[0]->n && a[1]->n && a[2]->n);
	for (i = 0; i < 3; i++) {
		assert_int_equal(a[i]->d.status, WINDOW_ERROR);
		assert_int_equal(a[i]->d.reason, WINDOW_REASON_REDIS_ERROR);
	}
	assert_true(fake_done(&f));
	one_stop();
}

/* NOSCRIPT for a batch: the batch is re-sent once as EVAL, the script
 * loaded again. */
static void test_batch_noscript(void **state)
{
	struct answer *a[3];

	(void)state;
	batch = 32;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, BATCH_HEAD(3, KEYS3));
	fake_step(&f, FAKE_SEND, "-NOSCRIPT No matching script. Please use EVAL.\r\n");
	fake_step(&f, FAKE_EXPECT, "EVAL " SCRIPT " 3 " KEYS3 " batch 3 1 1 ");
	fake_step(&f, FAKE_SEND, "*3\r\n" REPLY_ALLOW REPLY_DENY REPLY_ALLOW);
	one_connect(1000, true);
	start_all(keys3, 3, a);
	WAIT(a[0]->n && a[1]->n && a[2]->n);
	assert_int_equal(a[0]->d.status, WINDOW_ALLOW);
	assert_int_equal(a[1]->d.status, WINDOW_DENY);
	assert_int_equal(a[2]->d.status, WINDOW_ALLOW);
	WAIT(fake_hits(&f, "SCRIPT LOAD") == 2);
	assert_true(fake_done(&f));
	one_stop();
}

/* Decisions started by an answer (erin, frank: queued, their requests kept
 * as limiter_check() built them) while a later reply in the same read is a
 * batch's NOSCRIPT (carol, dave: re-sent as EVAL, built again): each batch
 * goes out with its own keys, the re-sent one built apart from the queue. */
static const char *const keys_then[] = { "erin", "frank" };
static struct answer *then_out[2];

static void start_then(void)
{
	start_all(keys_then, 2, then_out);
}

static void test_batch_kept_across_retry(void **state)
{
	static const char *const first[] = { "alice", "bob" }, *const second[] = { "carol", "dave" };
	struct answer *a[2], *b[2];

	(void)state;
	batch = 32;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, BATCH_HEAD(2, "api:limit:v1:{alice}:1m api:limit:v1:{bob}:1m"));
	fake_step(&f, FAKE_EXPECT, BATCH_HEAD(2, "api:limit:v1:{carol}:1m api:limit:v1:{dave}:1m"));
	fake_step(&f, FAKE_SEND, "*2\r\n" REPLY_ALLOW REPLY_ALLOW
	          "-NOSCRIPT No matching script. Please use EVAL.\r\n");
	fake_step(&f, FAKE_EXPECT, "EVAL " SCRIPT " 2 api:limit:v1:{carol}:1m api:limit:v1:{dave}:1m batch 2 1 1 ");
	fake_step(&f, FAKE_EXPECT, BATCH_HEAD(2, "api:limit:v1:{erin}:1m api:limit:v1:{frank}:1m"));
	fake_step(&f, FAKE_SEND, "*2\r\n" REPLY_ALLOW REPLY_DENY "*2\r\n" REPLY_DENY REPLY_ALLOW);
	one_connect(1000, true);
	start_all(first, 2, a);
	WAIT(fake_count(&f, "EVALSHA") == 1);
	start_all(second, 2, b);
	answer_hook = start_then;
	WAIT(a[0]->n && a[1]->n && b[0]->n && b[1]->n && then_out[0] && then_out[0]->n &&
	     then_out[1]->n);
	assert_int_equal(a[0]->d.status, WINDOW_ALLOW);
	assert_int_equal(b[0]->d.status, WINDOW_ALLOW);
	assert_int_equal(b[1]->d.status, WINDOW_DENY);
	assert_int_equal(then_out[0]->d.status, WINDOW_DENY);
	assert_int_equal(then_out[1]->d.status, WINDOW_ALLOW);
	assert_int_equal(f.unexpected, 0);
	assert_true(fake_done(&f));
	then_out[0] = then_out[1] = NULL;
	one_stop();
}

/* A batch with the module: RATELIMIT.DECIDE in the script's batch form
 * (same keys and arguments); the module gone (auto): the batch is re-sent
 * once as EVAL of the script, whose reply answers each call. */
static void test_batch_module(void **state)
{
	struct answer *a[3], *b[3];

	(void)state;
	batch = 32;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_rule(&f, "COMMAND INFO ratelimit.decide", FAKE_MODULE);
	fake_step(&f, FAKE_EXPECT, "RATELIMIT.DECIDE 3 " KEYS3 " batch 3 1 1 ");
	fake_step(&f, FAKE_SEND, "*3\r\n" REPLY_ALLOW REPLY_DENY REPLY_ALLOW);
	fake_step(&f, FAKE_EXPECT, "RATELIMIT.DECIDE 3 " KEYS3 " batch 3 1 1 ");
	fake_step(&f, FAKE_SEND, "-ERR unknown command 'RATELIMIT.DECIDE'\r\n");
	fake_step(&f, FAKE_EXPECT, "EVAL " SCRIPT " 3 " KEYS3 " batch 3 1 1 ");
	fake_step(&f, FAKE_SEND, "*3\r\n" REPLY_DENY REPLY_DENY REPLY_ALLOW);
	one_connect(1000, true);
	limiter_set_deny_cache(l, false, 0);
	start_all(keys3, 3, a);
	WAIT(a[0]->n && a[1]->n && a[2]->n);
	assert_int_equal(a[0]->d.status, WINDOW_ALLOW);
	assert_int_equal(a[1]->d.status, WINDOW_DENY);
	start_all(keys3, 3, b);
	WAIT(b[0]->n && b[1]->n && b[2]->n);
	assert_int_equal(b[0]->d.status, WINDOW_DENY);
	assert_int_equal(b[1]->d.status, WINDOW_DENY);
	assert_int_equal(b[2]->d.status, WINDOW_ALLOW);
	assert_true(fake_done(&f));
	assert_int_equal(atomic_load(&metrics.redis_engine[METRICS_ENGINE_SCRIPT]), 1);
	/* a batch's replies, each under the engine that answered it */
	assert_int_equal(metrics.redis_replies[METRICS_ENGINE_MODULE][METRICS_REPLY_DECISION], 3);
	assert_int_equal(metrics.redis_replies[METRICS_ENGINE_SCRIPT][METRICS_REPLY_DECISION], 3);
	one_stop();
}

/* redis-engine module, a batch, and the module unloaded at runtime: as for
 * one call (test_engine_module_gone), each call of the batch is answered
 * with the error, never re-sent to the script, counted as a missing
 * engine ("noscript") each, as one call is; the link drops. */
static void test_batch_module_gone(void **state)
{
	struct answer *a[3];
	char why[160] = "";
	size_t i;

	(void)state;
	batch = 32;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_rule(&f, "COMMAND INFO ratelimit.decide", FAKE_MODULE);
	fake_step(&f, FAKE_EXPECT, "RATELIMIT.DECIDE 3 " KEYS3 " batch 3 1 1 ");
	fake_step(&f, FAKE_SEND, "-ERR unknown command 'RATELIMIT.DECIDE'\r\n");
	engine = LIMITER_ENGINE_ONLY_MODULE;
	one_connect(1000, true);
	fake_rule(&f, "COMMAND INFO ratelimit.decide", FAKE_NO_MODULE);
	start_all(keys3, 3, a);
	WAIT(a[0]->n && a[1]->n && a[2]->n);
	for (i = 0; i < 3; i++)
		assert_int_equal(a[i]->d.status, WINDOW_ERROR);
	assert_int_equal(atomic_load(&metrics.redis_errors[METRICS_REDIS_ERR_NOSCRIPT]), 3);
	WAIT(!limiter_ready(l, why, sizeof(why)));
	assert_true(fake_done(&f));
	assert_int_equal(fake_count(&f, "EVAL"), 0);
	one_stop();
}

/* A batch answered READONLY (its primary demoted under it): as for one
 * call, each call is answered "unavailable" (counted as refused, not as a
 * script error) and the link drops to find the primary again. */
static void test_batch_readonly(void **state)
{
	struct answer *a[3];
	size_t i;

	(void)state;
	batch = 32;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, BATCH_HEAD(3, KEYS3));
	fake_step(&f, FAKE_SEND, "-READONLY You can't write against a read only replica.\r\n");
	one_connect(1000, true);
	start_all(keys3, 3, a);
	WAIT(a[0]->n && a[1]->n && a[2]->n);
	for (i = 0; i < 3; i++) {
		assert_int_equal(a[i]->d.status, WINDOW_ERROR);
		assert_int_equal(a[i]->d.reason, WINDOW_REASON_REDIS_UNAVAILABLE);
	}
	assert_int_equal(atomic_load(&metrics.redis_errors[METRICS_REDIS_ERR_REFUSED]), 3);
	assert_int_equal(atomic_load(&metrics.redis_errors[METRICS_REDIS_ERR_SCRIPT]), 0);
	WAIT(f.nconns >= 2);
	assert_true(fake_done(&f));
	one_stop();
}

/* A batch answered after its decisions' deadlines: each was answered
 * "timeout" once, and each admission Redis made anyway is counted late. */
static void test_batch_timeout(void **state)
{
	struct answer *a[3];
	struct window_decision d;
	size_t i;

	(void)state;
	batch = 32;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, BATCH_HEAD(3, KEYS3));
	/* the batch's reply comes with the next call's */
	fake_step(&f, FAKE_EXPECT, "EVALSHA " FAKE_SHA " 1 api:limit:v1:{zed}:1m");
	fake_step(&f, FAKE_SEND, "*3\r\n" REPLY_ALLOW REPLY_DENY REPLY_ALLOW);
	fake_step(&f, FAKE_SEND, REPLY_ALLOW);
	/* The batch times out because the fake holds its reply, not because
	 * the deadline is short: a 50 ms one also timed "zed" out on a loaded
	 * machine (3 late admissions instead of 2). */
	one_connect(400, true);
	start_all(keys3, 3, a);
	WAIT(a[0]->n && a[1]->n && a[2]->n);
	for (i = 0; i < 3; i++) {
		assert_int_equal(a[i]->d.status, WINDOW_ERROR);
		assert_int_equal(a[i]->d.reason, WINDOW_REASON_REDIS_TIMEOUT);
	}
	/* the eviction poll (every 0.5 s) comes meanwhile: its replies wait
	 * behind the batch's, as a real Redis orders them */
	{
		double t1 = now_s();

		while (now_s() - t1 < 0.6)
			ev_run(loop, EVRUN_ONCE);
	}
	d = ask(l, "zed");
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_int_equal(atomic_load(&metrics.late_admissions), 2);
	assert_true(fake_done(&f));
	one_stop();
}

/* limiter_free() answers a call Redis still holds, once. */
static void test_free_answers_pending(void **state)
{
	struct answer *a;

	(void)state;
	assert_int_equal(fake_start(&f, loop), 0);
	fake_step(&f, FAKE_EXPECT, "EVALSHA");
	fake_step(&f, FAKE_STALL, NULL);
	one_connect(5000, true);
	a = start(l, "ivy");
	WAIT(fake_done(&f));
	assert_int_equal(a->n, 0);
	one_stop();
	assert_int_equal(a->n, 1);
	assert_int_equal(a->d.status, WINDOW_ERROR);
	assert_int_equal(a->d.reason, WINDOW_REASON_REDIS_UNAVAILABLE);
}

/* ------------------------------------------------------------------------ */
/* Redis Cluster                                                             */
/* ------------------------------------------------------------------------ */

struct cluster2 {
	struct fake_redis a, b;
	char map[512];
	struct limiter *l;
};

/* Two nodes, every slot on <a> at first; a limiter on cluster://a, ready. */
static void cluster2_start(struct cluster2 *c)
{
	assert_int_equal(fake_start(&c->a, loop), 0);
	assert_int_equal(fake_start(&c->b, loop), 0);
	slots_reply(c->map, sizeof(c->map), c->a.port, 0, 0);
	fake_rule(&c->a, "CLUSTER SLOTS", c->map);
	fake_rule(&c->b, "CLUSTER SLOTS", c->map);
	c->l = new_limiter_on(&c->a, "cluster", 2000);
	wait_ready(c->l);
	/* cluster links skip ROLE: a seed may be a replica */
	assert_int_equal(fake_hits(&c->a, "ROLE"), 0);
}

static void cluster2_stop(struct cluster2 *c)
{
	assert_int_equal(c->a.unexpected, 0);
	assert_int_equal(c->b.unexpected, 0);
	limiter_free(c->l);
	fake_stop(&c->a);
	fake_stop(&c->b);
}

/* MOVED: the map learns the slot's new node and the call follows it. */
static void test_cluster_moved(void **state)
{
	struct cluster2 c;
	char moved[96], map[512];
	struct window_decision d;
	unsigned slot = slot_of("jane");

	(void)state;
	cluster2_start(&c);
	/* from now on the cluster says the slot moved to b */
	slots_reply(map, sizeof(map), c.a.port, slot, c.b.port);
	fake_rule(&c.a, "CLUSTER SLOTS", map);
	fake_rule(&c.b, "CLUSTER SLOTS", map);
	snprintf(moved, sizeof(moved), "-MOVED %u 127.0.0.1:%d\r\n", slot, c.b.port);
	fake_step(&c.a, FAKE_EXPECT, "EVALSHA");
	fake_step(&c.a, FAKE_SEND, moved);
	fake_step(&c.b, FAKE_EXPECT, "EVALSHA");
	fake_step(&c.b, FAKE_SEND, REPLY_ALLOW);
	d = ask(c.l, "jane");
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_true(fake_done(&c.a));
	assert_true(fake_done(&c.b));
	/* the next call of that slot goes to b directly */
	fake_rule(&c.b, "EVALSHA", REPLY_ALLOW);
	d = ask(c.l, "jane");
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_int_equal(fake_count(&c.a, "EVALSHA"), 1);
	assert_int_equal(fake_count(&c.b, "EVALSHA"), 2);
	cluster2_stop(&c);
}

/* A redirect to a node known to evict keys is refused there, as a call
 * routed to it would be: redis-evicts-keys, and no script call on it. */
static void test_cluster_redirect_evicting(void **state)
{
	struct cluster2 c;
	char moved[96], askr[96], map[512];
	struct window_decision d;
	unsigned slot = slot_of("jane"), slot2 = slot_of("kate"), on_b;

	(void)state;
	assert_int_not_equal(slot, slot2);
	cluster2_start(&c);
	fake_rule(&c.b, "CONFIG GET maxmemory-policy",
	          "*2\r\n$16\r\nmaxmemory-policy\r\n$11\r\nallkeys-lru\r\n");
	fake_rule(&c.b, "EVALSHA", REPLY_ALLOW);
	/* jane's slot moves to b: b's link is made, and its policy learnt */
	slots_reply(map, sizeof(map), c.a.port, slot, c.b.port);
	fake_rule(&c.a, "CLUSTER SLOTS", map);
	fake_rule(&c.b, "CLUSTER SLOTS", map);
	snprintf(moved, sizeof(moved), "-MOVED %u 127.0.0.1:%d\r\n", slot, c.b.port);
	fake_step(&c.a, FAKE_EXPECT, "EVALSHA");
	fake_step(&c.a, FAKE_SEND, moved);
	(void)ask(c.l, "jane");
	WAIT(atomic_load(&metrics.redis_unsafe_eviction) == 1);
	on_b = fake_count(&c.b, "EVALSHA");
	/* kate's slot is still a's; a says ASK b (mid-migration) */
	snprintf(askr, sizeof(askr), "-ASK %u 127.0.0.1:%d\r\n", slot2, c.b.port);
	fake_step(&c.a, FAKE_EXPECT, "EVALSHA");
	fake_step(&c.a, FAKE_SEND, askr);
	d = ask(c.l, "kate");
	assert_int_equal(d.status, WINDOW_ERROR);
	assert_int_equal(d.reason, WINDOW_REASON_REDIS_EVICTS);
	assert_int_equal(fake_count(&c.b, "EVALSHA"), on_b);
	assert_true(fake_done(&c.a));
	cluster2_stop(&c);
}

/* ASK: this once, ASKING then the call on the node named; the map stays. */
static void test_cluster_ask(void **state)
{
	struct cluster2 c;
	char askr[96];
	struct window_decision d;

	(void)state;
	cluster2_start(&c);
	snprintf(askr, sizeof(askr), "-ASK %u 127.0.0.1:%d\r\n", slot_of("kate"), c.b.port);
	fake_step(&c.a, FAKE_EXPECT, "EVALSHA");
	fake_step(&c.a, FAKE_SEND, askr);
	fake_step(&c.a, FAKE_EXPECT, "EVALSHA");
	fake_step(&c.a, FAKE_SEND, REPLY_ALLOW);
	fake_step(&c.b, FAKE_EXPECT, "ASKING");
	fake_step(&c.b, FAKE_SEND, "+OK\r\n");
	fake_step(&c.b, FAKE_EXPECT, "EVALSHA");
	fake_step(&c.b, FAKE_SEND, REPLY_ALLOW);
	d = ask(c.l, "kate");
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_true(fake_done(&c.b));
	/* the slot still belongs to a */
	d = ask(c.l, "kate");
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_true(fake_done(&c.a));
	cluster2_stop(&c);
}

/* TRYAGAIN (keys mid-migration): the call waits a moment and is re-sent. */
static void test_cluster_tryagain(void **state)
{
	struct cluster2 c;
	struct window_decision d;

	(void)state;
	cluster2_start(&c);
	fake_step(&c.a, FAKE_EXPECT, "EVALSHA");
	fake_step(&c.a, FAKE_SEND, "-TRYAGAIN Multiple keys request during rehashing of slot\r\n");
	fake_step(&c.a, FAKE_EXPECT, "EVALSHA");
	fake_step(&c.a, FAKE_SEND, REPLY_ALLOW);
	d = ask(c.l, "liam");
	assert_int_equal(d.status, WINDOW_ALLOW);
	assert_true(fake_done(&c.a));
	assert_int_equal(fake_count(&c.b, "EVALSHA"), 0);
	cluster2_stop(&c);
}

/* cluster://: a decision made before the slot map is known waits for it
 * and for its primary's link, then goes there. */
static void test_cluster_wait_map(void **state)
{
	struct cluster2 c;
	struct answer *a;

	(void)state;
	assert_int_equal(fake_start(&c.a, loop), 0);
	assert_int_equal(fake_start(&c.b, loop), 0);
	slots_reply(c.map, sizeof(c.map), c.a.port, 0, 0);
	fake_rule(&c.a, "CLUSTER SLOTS", c.map);
	fake_step(&c.a, FAKE_EXPECT, "EVALSHA");
	fake_step(&c.a, FAKE_SEND, REPLY_ALLOW);
	c.l = new_limiter_on(&c.a, "cluster", 3000);
	a = start(c.l, "nina");
	assert_int_equal(c.l->calls.nwaiting, 1);
	WAIT(a->n == 1);
	assert_int_equal(a->d.status, WINDOW_ALLOW);
	assert_true(fake_done(&c.a));
	cluster2_stop(&c);
}

/* CLUSTERDOWN: "unavailable", not a script error. */
static void test_cluster_down(void **state)
{
	struct cluster2 c;
	struct window_decision d;

	(void)state;
	cluster2_start(&c);
	fake_step(&c.a, FAKE_EXPECT, "EVALSHA");
	fake_step(&c.a, FAKE_SEND, "-CLUSTERDOWN The cluster is down\r\n");
	d = ask(c.l, "mona");
	assert_int_equal(d.status, WINDOW_ERROR);
	assert_int_equal(d.reason, WINDOW_REASON_REDIS_UNAVAILABLE);
	assert_true(fake_done(&c.a));
	cluster2_stop(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_allow, setup, teardown),
		cmocka_unit_test_setup_teardown(test_deny_cached, setup, teardown),
		cmocka_unit_test_setup_teardown(test_noscript, setup, teardown),
		cmocka_unit_test_setup_teardown(test_eviction_policy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_eviction_live_switch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_eviction_evidence, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_answer_inside_check, setup, teardown),
		cmocka_unit_test_setup_teardown(test_engine_auto_module, setup, teardown),
		cmocka_unit_test_setup_teardown(test_engine_protocol, setup, teardown),
		cmocka_unit_test_setup_teardown(test_engine_auto_script, setup, teardown),
		cmocka_unit_test_setup_teardown(test_engine_module_missing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_engine_module_gone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wait_first_connect, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wait_not_after_ready, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wait_deadline, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wait_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_role_replica, setup, teardown),
		cmocka_unit_test_setup_teardown(test_half_reply_then_close, setup, teardown),
		cmocka_unit_test_setup_teardown(test_half_reply_then_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stall, setup, teardown),
		cmocka_unit_test(test_lease_ids),
		cmocka_unit_test_setup_teardown(test_release_records_reused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_settle_answer_by_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_answers_pending, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_args, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_trim, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_reply, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_noscript, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_kept_across_retry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_module, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_module_gone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_readonly, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_moved, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_redirect_evicting, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_ask, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_tryagain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_wait_map, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_down, setup, teardown),
	};

	/* the limiter's warnings are expected here; errors still show */
	log_set_level(CONFIG_LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
