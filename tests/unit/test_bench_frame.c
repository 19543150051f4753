/*
 * test_bench_frame - what spoa-bench writes for HAProxy's response phase
 * (--done): the ratelimit-done NOTIFY, decoded back by the agent's codec,
 * and the lease it reads from an ACK. The frames are written into guarded
 * buffers (harness.h): a write one byte too far crashes.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "spop.h"
#include "../../bench/bench.h"

#define LEASE "0123456789abcdef0123456789abcdef"

/* Options as spoa-bench --done [--done-cost <cost>] -p <policy> sets them. */
static void opts_done(struct bench_opts *o, const char *policy, int64_t cost)
{
	memset(o, 0, sizeof(*o));
	snprintf(o->policy, sizeof(o->policy), "%s", policy);
	o->cost = 1;
	o->done = true;
	o->done_cost = cost;
}

/* Owns <b>'s mapping until harness_buf_free(): <cap> bytes that end right
 * before the guard page. */
static unsigned char *guarded(struct harness_buf *b, size_t cap)
{
	assert_int_equal(harness_buf_init(b, cap), 0);
	return harness_buf_place(b, NULL, cap);
}

/* Borrows <f>: its one message, checked to be "ratelimit-done" with
 * <nargs> args, whose args are then walked by <it>. */
static void expect_done_message(const struct spop_frame *f, unsigned nargs, struct spop_iter *it)
{
	static struct spop_message m;   /* <it> walks into it after return */
	struct spop_iter mi;

	spop_iter_messages(&f->u.notify, &mi);
	assert_int_equal(spop_next_message(&mi, &m), 1);
	assert_true(spop_str_eq(m.name, "ratelimit-done"));
	assert_int_equal(m.nb_args, nargs);
	assert_int_equal(spop_next_message(&mi, &m), 0);
	spop_iter_args(&m, it);
}

/* The next arg of <it> is <name> = STR <val>. */
static void expect_str_arg(struct spop_iter *it, const char *name, const char *val)
{
	struct spop_arg a;

	assert_int_equal(spop_next_arg(it, &a), 1);
	assert_true(spop_str_eq(a.name, name));
	assert_int_equal(a.value.type, SPOP_T_STR);
	assert_true(spop_str_eq(a.value.v.s, val));
}

/* policy, key, lease as HAProxy's "spoe-message ratelimit-done" sends them,
 * in a NOTIFY of its own (frame-id 1, the stream-id given), and no cost
 * unless --done-cost. */
static void test_done_without_cost(void **state)
{
	struct harness_buf b;
	struct bench_opts o;
	struct spop_frame f;
	struct spop_iter it;
	enum spop_status st = SPOP_ST_NORMAL;
	unsigned char *dst;
	size_t cap;
	int n;

	(void)state;
	opts_done(&o, "export", -1);
	cap = bench_notify_max(&o);
	dst = guarded(&b, cap);
	n = bench_enc_done(dst, cap, &o, 77, "ACC-12", 6, LEASE);
	assert_true(n > 0 && (size_t)n <= cap);
	assert_int_equal(spop_decode_frame(dst, (size_t)n, 16380, &f, &st), n);
	assert_int_equal(f.hdr.type, SPOP_FRAME_NOTIFY);
	assert_int_equal(f.hdr.stream_id, 77);
	assert_int_equal(f.hdr.frame_id, 1);
	expect_done_message(&f, 3, &it);
	expect_str_arg(&it, "policy", "export");
	expect_str_arg(&it, "key", "ACC-12");
	expect_str_arg(&it, "lease", LEASE);
	harness_buf_free(&b);
}

/* --done-cost N: a fourth arg, cost INT64 N (what a settle= policy settles to). */
static void test_done_with_cost(void **state)
{
	struct harness_buf b;
	struct bench_opts o;
	struct spop_frame f;
	struct spop_iter it;
	struct spop_arg a;
	enum spop_status st = SPOP_ST_NORMAL;
	unsigned char *dst;
	size_t cap;
	int n;

	(void)state;
	opts_done(&o, "tokens", 5);
	cap = bench_notify_max(&o);
	dst = guarded(&b, cap);
	n = bench_enc_done(dst, cap, &o, 3, "K", 1, LEASE);
	assert_true(n > 0);
	assert_int_equal(spop_decode_frame(dst, (size_t)n, 16380, &f, &st), n);
	expect_done_message(&f, 4, &it);
	expect_str_arg(&it, "policy", "tokens");
	expect_str_arg(&it, "key", "K");
	expect_str_arg(&it, "lease", LEASE);
	assert_int_equal(spop_next_arg(&it, &a), 1);
	assert_true(spop_str_eq(a.name, "cost"));
	assert_int_equal(a.value.type, SPOP_T_INT64);
	assert_int_equal(a.value.v.i, 5);
	harness_buf_free(&b);
}

/* bench_notify_max() bounds the largest done message (the longest policy
 * and key, the largest stream-id and cost): the write buffer is sized by it. */
static void test_done_fits_notify_max(void **state)
{
	struct harness_buf b;
	struct bench_opts o;
	char policy[BENCH_NAME_MAX], key[BENCH_KEY_MAX];
	unsigned char *dst;
	size_t cap;
	int n;

	(void)state;
	memset(policy, 'p', sizeof(policy) - 1);
	policy[sizeof(policy) - 1] = '\0';
	memset(key, 'k', sizeof(key));
	opts_done(&o, policy, INT64_MAX);
	cap = bench_notify_max(&o);
	dst = guarded(&b, cap);
	n = bench_enc_done(dst, cap, &o, UINT64_MAX, key, sizeof(key), LEASE);
	assert_true(n > 0 && (size_t)n <= cap);
	/* and one byte less room is refused, not overrun */
	assert_int_equal(bench_enc_done(dst + 1, (size_t)n - 1, &o, UINT64_MAX, key, sizeof(key), LEASE), -1);
	/* without --done the bound is the ratelimit message's, as before */
	o.done = false;
	assert_true(bench_notify_max(&o) < cap);
	harness_buf_free(&b);
}

/* The lease the agent answers (txn.rl.lease) is read from the ACK beside
 * its status; asked for no lease, the status alone, as before --done. */
static void test_ack_lease(void **state)
{
	static struct bench_thread t;
	unsigned char buf[512];
	struct spop_writer w;
	struct spop_frame f;
	struct spop_str lease = { "x", 1 };
	enum spop_status st = SPOP_ST_NORMAL;
	int n;

	(void)state;
	spop_ack_begin(&w, buf, sizeof(buf), 9, 1);
	spop_ack_set_str(&w, SPOP_SCOPE_TXN, "status", "allow", 5);
	spop_ack_set_str(&w, SPOP_SCOPE_TXN, "lease", LEASE, strlen(LEASE));
	n = spop_ack_end(&w);
	assert_true(n > 0);
	assert_int_equal(spop_decode_frame(buf, (size_t)n, 16380, &f, &st), n);
	assert_int_equal(bench_ack_status(&t, &f.u.ack, &lease), BENCH_STATUS_ALLOW);
	assert_int_equal(lease.len, BENCH_LEASE_LEN);
	assert_true(spop_str_eq(lease, LEASE));
	assert_int_equal(bench_ack_status(&t, &f.u.ack, NULL), BENCH_STATUS_ALLOW);

	/* an admission without a lease (a policy without inflight=): none */
	spop_ack_begin(&w, buf, sizeof(buf), 9, 1);
	spop_ack_set_str(&w, SPOP_SCOPE_TXN, "status", "allow", 5);
	n = spop_ack_end(&w);
	assert_int_equal(spop_decode_frame(buf, (size_t)n, 16380, &f, &st), n);
	assert_int_equal(bench_ack_status(&t, &f.u.ack, &lease), BENCH_STATUS_ALLOW);
	assert_int_equal(lease.len, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_done_without_cost),
		cmocka_unit_test(test_done_with_cost),
		cmocka_unit_test(test_done_fits_notify_max),
		cmocka_unit_test(test_ack_lease),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
