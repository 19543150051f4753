/*
 * test_resolve - host names resolved off the loop: localhost, a name that
 * does not resolve, the loop running while a lookup blocks, cancel, free
 * with a lookup still blocked.
 *
 * getaddrinfo() is interposed (this executable's definition wins over
 * libc's for resolve.o): "slow.test" blocks until the test releases it,
 * every other name goes to the real one. No DNS server is needed: localhost
 * comes from /etc/hosts and "*.invalid" never resolves.
 */
#include <dlfcn.h>
#include <netdb.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>
#include <ev.h>

#include "resolve.h"

typedef int (*gai_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

static pthread_mutex_t slow_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slow_cv = PTHREAD_COND_INITIALIZER;
static bool slow_open;                  /* released: slow.test answers */
static unsigned slow_entered, slow_left;

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res)
{
	gai_fn real = (gai_fn)(uintptr_t)dlsym(RTLD_NEXT, "getaddrinfo");

	if (node && strcmp(node, "slow.test") == 0) {
		pthread_mutex_lock(&slow_mu);
		slow_entered++;
		pthread_cond_broadcast(&slow_cv);
		while (!slow_open)
			pthread_cond_wait(&slow_cv, &slow_mu);
		slow_left++;
		pthread_cond_broadcast(&slow_cv);
		pthread_mutex_unlock(&slow_mu);
		node = "localhost";
	}
	return real(node, service, hints, res);
}

static void slow_reset(void)
{
	pthread_mutex_lock(&slow_mu);
	slow_open = false;
	slow_entered = slow_left = 0;
	pthread_mutex_unlock(&slow_mu);
}

static void slow_release(void)
{
	pthread_mutex_lock(&slow_mu);
	slow_open = true;
	pthread_cond_broadcast(&slow_cv);
	pthread_mutex_unlock(&slow_mu);
}

/* Waits until <n> lookups of slow.test have entered (or left, <left>). */
static void slow_wait(unsigned n, bool left)
{
	pthread_mutex_lock(&slow_mu);
	while ((left ? slow_left : slow_entered) < n)
		pthread_cond_wait(&slow_cv, &slow_mu);
	pthread_mutex_unlock(&slow_mu);
}

struct answer {
	int calls;
	struct resolve_result res;
};

static void on_answer(void *arg, const struct resolve_result *res)
{
	struct answer *a = arg;

	a->calls++;
	a->res = *res;
}

struct ticker {
	ev_timer t;
	int ticks;
	int stop_after;
};

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct ticker *k = (struct ticker *)w;

	(void)revents;
	if (++k->ticks >= k->stop_after)
		ev_break(loop, EVBREAK_ALL);
}

/* Runs <loop> until <a> is answered (a generous deadline: 30 s). */
static void run_until_answer(struct ev_loop *loop, struct answer *a)
{
	struct ticker k = { .stop_after = 3000 };

	ev_timer_init(&k.t, on_tick, 0.01, 0.01);
	ev_timer_start(loop, &k.t);
	while (a->calls == 0 && k.ticks < k.stop_after)
		ev_run(loop, EVRUN_ONCE);
	ev_timer_stop(loop, &k.t);
}

static void test_localhost(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct resolve *r = resolve_new(loop);
	struct answer a = { 0 };
	size_t i;
	bool loopback = false;

	(void)state;
	assert_non_null(r);
	assert_non_null(resolve_start(r, "localhost", 6380, on_answer, &a));
	assert_int_equal(a.calls, 0);           /* never inside resolve_start() */
	assert_int_equal(resolve_pending(r), 1);
	run_until_answer(loop, &a);
	assert_int_equal(a.calls, 1);
	assert_int_equal(a.res.status, 0);
	assert_true(a.res.naddrs >= 1);
	for (i = 0; i < a.res.naddrs; i++) {
		assert_int_equal(a.res.addrs[i].port, 6380);
		if (strcmp(a.res.addrs[i].ip, "127.0.0.1") == 0 || strcmp(a.res.addrs[i].ip, "::1") == 0)
			loopback = true;
	}
	assert_true(loopback);
	assert_int_equal(resolve_pending(r), 0);

	/* a literal takes the same path */
	memset(&a, 0, sizeof(a));
	assert_non_null(resolve_start(r, "::1", 7000, on_answer, &a));
	run_until_answer(loop, &a);
	assert_int_equal(a.res.status, 0);
	assert_int_equal(a.res.naddrs, 1);
	assert_string_equal(a.res.addrs[0].ip, "::1");
	assert_int_equal(a.res.addrs[0].family, AF_INET6);
	resolve_free(r);
	ev_loop_destroy(loop);
}

static void test_no_such_name(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct resolve *r = resolve_new(loop);
	struct answer a = { 0 };

	(void)state;
	assert_non_null(resolve_start(r, "no-such-host.invalid", 6379, on_answer, &a));
	run_until_answer(loop, &a);
	assert_int_equal(a.calls, 1);
	assert_int_not_equal(a.res.status, 0);
	assert_int_equal(a.res.naddrs, 0);
	assert_true(a.res.err[0] != '\0');
	resolve_free(r);
	ev_loop_destroy(loop);
}

/* While a lookup blocks, the loop keeps running timers; the answer comes
 * once the lookup returns. */
static void test_loop_runs_meanwhile(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct resolve *r = resolve_new(loop);
	struct answer a = { 0 }, b = { 0 };
	struct ticker k = { .stop_after = 20 };

	(void)state;
	slow_reset();
	assert_non_null(resolve_start(r, "slow.test", 1, on_answer, &a));
	assert_non_null(resolve_start(r, "localhost", 2, on_answer, &b));
	slow_wait(1, false);
	ev_timer_init(&k.t, on_tick, 0.001, 0.001);
	ev_timer_start(loop, &k.t);
	ev_run(loop, 0);
	ev_timer_stop(loop, &k.t);
	assert_int_equal(k.ticks, 20);
	assert_int_equal(a.calls, 0);           /* still blocked */
	run_until_answer(loop, &b);             /* another lookup is not held up */
	assert_int_equal(b.calls, 1);
	assert_int_equal(a.calls, 0);
	slow_release();
	run_until_answer(loop, &a);
	assert_int_equal(a.calls, 1);
	assert_int_equal(a.res.status, 0);
	resolve_free(r);
	ev_loop_destroy(loop);
}

/* A cancelled lookup never calls back; resolve_free() with a lookup still
 * blocked returns at once and the thread cleans up after itself. */
static void test_cancel_and_free(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct resolve *r = resolve_new(loop);
	struct answer a = { 0 }, b = { 0 }, c = { 0 };
	struct resolve_req *q;

	(void)state;
	slow_reset();
	q = resolve_start(r, "slow.test", 1, on_answer, &a);
	assert_non_null(q);
	assert_non_null(resolve_start(r, "slow.test", 1, on_answer, &c));
	slow_wait(2, false);
	resolve_cancel(q);
	assert_int_equal(resolve_pending(r), 1);
	assert_non_null(resolve_start(r, "localhost", 2, on_answer, &b));
	slow_release();
	slow_wait(2, true);
	run_until_answer(loop, &b);
	run_until_answer(loop, &c);
	assert_int_equal(a.calls, 0);
	assert_int_equal(b.calls, 1);
	assert_int_equal(c.calls, 1);

	slow_reset();
	assert_non_null(resolve_start(r, "slow.test", 1, on_answer, &a));
	slow_wait(1, false);
	resolve_free(r);                        /* the thread is still blocked */
	ev_loop_destroy(loop);
	slow_release();
	slow_wait(1, true);
	assert_int_equal(a.calls, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_localhost),
		cmocka_unit_test(test_no_such_name),
		cmocka_unit_test(test_loop_runs_meanwhile),
		cmocka_unit_test(test_cancel_and_free),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
