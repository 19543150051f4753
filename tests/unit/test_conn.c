/*
 * test_conn - the connection state machine driven over a socketpair with a
 * fake limiter (no Redis): handshake, NOTIFY -> ACK, out-of-order ACKs,
 * input validation, malformed frames, disconnects, draining, and a request
 * that outlives its connection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>

#include <cmocka.h>
#include <ev.h>

#include "config.h"
#include "conn.h"
#include "conn_notify.h"
#include "metrics.h"
#include "spop.h"
#include "window.h"

/* ------------------------------------------------------------ fake limiter */

#define FAKE_MAX 256

struct fake_call {
	const struct window_policy *p;
	char key[300];
	size_t key_len;
	uint64_t cost;
	limiter_cb cb;
	void *arg;
	/* the limits asked with (<p> may be the caller's copy for the call) */
	unsigned nwin;
	uint64_t limit0;
};

struct fake {
	bool sync;                      /* answer inside check() */
	enum window_status status;
	unsigned window;                /* the deciding window (sync answers) */
	struct fake_call calls[FAKE_MAX];
	unsigned ncalls;
	const char *lease;              /* answered on an allow, when set */
	struct fake_call releases[8];   /* ops.release's: key; lease in arg */
	char release_ids[8][40];
	unsigned nreleases;
};

static struct fake fake;

static int fake_check(void *ctx, const struct window_policy *p, const char *key,
                      size_t key_len, uint64_t cost, limiter_cb cb, void *arg)
{
	struct fake_call *c = &fake.calls[fake.ncalls++];

	(void)ctx;
	c->p = p;
	c->limit0 = window_limits_for(p, key, key_len, &c->nwin)[0].limit;
	memcpy(c->key, key, key_len);
	c->key_len = key_len;
	c->cost = cost;
	c->cb = cb;
	c->arg = arg;
	if (fake.sync) {
		struct window_decision d = { .status = fake.status, .has_quota = true,
		                             .limit = 3, .remaining = 2, .reset = 1,
		                             .retry_after = fake.status == WINDOW_DENY ? 1 : 0,
		                             .window = fake.window };

		if (fake.lease && fake.status == WINDOW_ALLOW)
			snprintf(d.lease, sizeof(d.lease), "%s", fake.lease);
		cb(arg, &d);
	}
	return 0;
}

static int fake_release(void *ctx, const struct window_policy *p, const char *key,
                        size_t key_len, const char *lease)
{
	struct fake_call *c = &fake.releases[fake.nreleases];

	(void)ctx;
	c->p = p;
	memcpy(c->key, key, key_len);
	c->key_len = key_len;
	snprintf(fake.release_ids[fake.nreleases++], sizeof(fake.release_ids[0]), "%s", lease);
	return 0;
}

/* Answer call <i> with <status> and <remaining>. */
static void fake_answer(unsigned i, enum window_status status, int64_t remaining)
{
	struct window_decision d = { .status = status, .has_quota = true, .limit = 3,
	                             .remaining = remaining, .reset = 1,
	                             .retry_after = status == WINDOW_DENY ? 1 : 0 };

	fake.calls[i].cb(fake.calls[i].arg, &d);
}

/* ---------------------------------------------------------------- fixture */

struct fixture {
	struct ev_loop *loop;
	struct conn_env env;
	struct conn_notify_env notify;
	struct conn_cfg_ref ref;
	struct config cfg;
	struct metrics metrics;
	int peer;                       /* our (HAProxy's) end */
	bool idle_called;
};

static void fixture_release(struct conn_cfg_ref *ref)
{
	(void)ref;
}

static void fixture_on_idle(struct conn_env *env)
{
	struct fixture *f = (struct fixture *)((char *)env - offsetof(struct fixture, env));

	f->idle_called = true;
}

/* max-frame-size the next HELLO offers (setup() resets it). */
static uint32_t hello_max_frame = 16380;

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char err[256];
	int sv[2];
	static const char text[] = "policy transfer 3/1s\npolicy reads 100/1m on-redis-error=allow\n"
		"policy a-policy-name-of-the-longest-length-480000000000 1/1s 2/1m 3/1h 4/2h\n"
		"policy export 3/1s inflight=2\n"
		"pool transfers 5/1m headroom=2\npolicy pooled 3/1s pool=transfers\n";

	assert_non_null(f);
	memset(&fake, 0, sizeof(fake));
	fake.sync = true;
	fake.status = WINDOW_ALLOW;
	hello_max_frame = 16380;
	config_init(&f->cfg);
	assert_int_equal(config_parse(&f->cfg, "t.conf", text, sizeof(text) - 1, err, sizeof(err)), 0);
	f->ref.cfg = &f->cfg;
	f->ref.refs = 1;
	f->ref.release = fixture_release;
	f->loop = ev_loop_new(EVFLAG_AUTO);
	f->notify.cfg = &f->ref;
	f->notify.ops.check = fake_check;
	f->notify.ops.release = fake_release;
	f->notify.metrics = &f->metrics;
	f->env.loop = f->loop;
	f->env.upper = &conn_notify_upper;
	f->env.upper_ctx = &f->notify;
	f->env.metrics = &f->metrics;
	f->env.hello_timeout = 5.0;
	f->env.frame_timeout = 5.0;
	f->env.on_idle = fixture_on_idle;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	f->peer = sv[0];
	assert_int_equal(conn_accept(&f->env, sv[1]), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	conn_env_close_all(&f->env);
	close(f->peer);
	ev_loop_destroy(f->loop);
	config_release(&f->cfg);
	free(f);
	return 0;
}

/* Let the connection run: read, process, and flush. */
static void pump(struct fixture *f)
{
	int i;

	for (i = 0; i < 4; i++) {
		ev_run(f->loop, EVRUN_NOWAIT);
		conn_env_flush(&f->env);
	}
}

static void peer_send(struct fixture *f, const unsigned char *b, size_t n)
{
	assert_int_equal(write(f->peer, b, n), (ssize_t)n);
	pump(f);
}

/* Read one whole frame the agent sent; returns its size, 0 on EOF, -1 when
 * nothing is there. */
static ssize_t peer_read_frame(struct fixture *f, unsigned char *buf, size_t cap)
{
	size_t have = 0, want = 4;
	ssize_t n;
	int tries = 0;

	while (have < want) {
		n = read(f->peer, buf + have, want - have);
		if (n == 0)
			return 0;
		if (n < 0) {
			if (++tries > 50)
				return -1;
			pump(f);
			continue;
		}
		have += (size_t)n;
		if (have == 4)
			want = 4 + ((size_t)buf[0] << 24 | (size_t)buf[1] << 16 | (size_t)buf[2] << 8 | buf[3]);
		assert_true(want <= cap);
	}
	return (ssize_t)have;
}

/* ------------------------------------------------------- frame building */

struct wbuf {
	unsigned char b[4096];
	size_t n;
};

static void w_byte(struct wbuf *w, unsigned char c)
{
	w->b[w->n++] = c;
}

static void w_varint(struct wbuf *w, uint64_t v)
{
	int n = spop_encode_varint(v, w->b + w->n, sizeof(w->b) - w->n);

	assert_true(n > 0);
	w->n += (size_t)n;
}

static void w_str(struct wbuf *w, const char *s, size_t len)
{
	w_varint(w, len);
	memcpy(w->b + w->n, s, len);
	w->n += len;
}

static void w_begin(struct wbuf *w, unsigned type, uint64_t sid, uint64_t fid)
{
	w->n = 4;
	w_byte(w, (unsigned char)type);
	w_byte(w, 0); w_byte(w, 0); w_byte(w, 0); w_byte(w, 1);   /* FIN */
	w_varint(w, sid);
	w_varint(w, fid);
}

static void w_end(struct wbuf *w)
{
	size_t len = w->n - 4;

	w->b[0] = (unsigned char)(len >> 24);
	w->b[1] = (unsigned char)(len >> 16);
	w->b[2] = (unsigned char)(len >> 8);
	w->b[3] = (unsigned char)len;
}

static void build_hello(struct wbuf *w, const char *caps, bool healthcheck)
{
	w_begin(w, SPOP_FRAME_HAPROXY_HELLO, 0, 0);
	w_str(w, "supported-versions", 18);
	w_byte(w, SPOP_T_STR);
	w_str(w, "2.0", 3);
	w_str(w, "max-frame-size", 14);
	w_byte(w, SPOP_T_UINT32);
	w_varint(w, hello_max_frame);
	w_str(w, "capabilities", 12);
	w_byte(w, SPOP_T_STR);
	w_str(w, caps, strlen(caps));
	if (healthcheck) {
		w_str(w, "healthcheck", 11);
		w_byte(w, 0x11);
	}
	w_end(w);
}

/* A NOTIFY "ratelimit" with policy, key (type <ktype>) and optional cost. */
static void build_notify(struct wbuf *w, uint64_t sid, uint64_t fid, const char *msg,
                         const char *policy, unsigned ktype, const char *key, size_t klen,
                         int64_t cost)
{
	w_begin(w, SPOP_FRAME_NOTIFY, sid, fid);
	w_str(w, msg, strlen(msg));
	w_byte(w, cost ? 3 : 2);
	w_str(w, "policy", 6);
	w_byte(w, SPOP_T_STR);
	w_str(w, policy, strlen(policy));
	w_str(w, "key", 3);
	w_byte(w, (unsigned char)ktype);
	if (ktype == SPOP_T_STR || ktype == SPOP_T_BIN) {
		w_str(w, key, klen);
	} else if (ktype == SPOP_T_IPV4) {
		memcpy(w->b + w->n, "\x7f\x00\x00\x01", 4);
		w->n += 4;
	}
	if (cost) {
		w_str(w, "cost", 4);
		w_byte(w, SPOP_T_INT64);
		w_varint(w, (uint64_t)cost);
	}
	w_end(w);
}

/* A "ratelimit" NOTIFY with policy, key, cost 1 and, when <plan> is not
 * NULL, a string arg plan (last, as spoe-ratelimit.conf sends it). */
static void build_notify_plan(struct wbuf *w, uint64_t sid, const char *policy,
                              const char *key, const char *plan)
{
	w_begin(w, SPOP_FRAME_NOTIFY, sid, 1);
	w_str(w, "ratelimit", 9);
	w_byte(w, plan ? 4 : 3);
	w_str(w, "policy", 6);
	w_byte(w, SPOP_T_STR);
	w_str(w, policy, strlen(policy));
	w_str(w, "key", 3);
	w_byte(w, SPOP_T_STR);
	w_str(w, key, strlen(key));
	w_str(w, "cost", 4);
	w_byte(w, SPOP_T_INT64);
	w_varint(w, 1);
	if (plan) {
		w_str(w, "plan", 4);
		w_byte(w, SPOP_T_STR);
		w_str(w, plan, strlen(plan));
	}
	w_end(w);
}

/* ----------------------------------------------------- reading ACKs back */

struct ack {
	unsigned type;
	uint64_t sid, fid;
	char status[16], reason[32], policy_hdr[512], ratelimit_hdr[128], pool[64], lease[40];
	int64_t limit, remaining, reset, retry_after, window;
	int64_t pool_limit, pool_remaining, pool_reset;
	bool has_retry, has_unset;
	uint32_t disco_status;
};

/* Parse an agent frame (AGENT-HELLO, ACK or AGENT-DISCONNECT) in <b>/<n>. */
static void parse_agent_frame(const unsigned char *b, size_t n, struct ack *a)
{
	const unsigned char *p = b + 9, *end = b + n;
	uint64_t v;
	int r;

	memset(a, 0, sizeof(*a));
	a->limit = a->remaining = a->reset = a->retry_after = a->window = -1;
	a->pool_limit = a->pool_remaining = a->pool_reset = -1;
	a->type = b[4];
	assert_int_equal(b[8] & 1, 1);      /* FIN on every frame */
	r = spop_decode_varint(p, (size_t)(end - p), &a->sid);
	assert_true(r > 0);
	p += r;
	r = spop_decode_varint(p, (size_t)(end - p), &a->fid);
	assert_true(r > 0);
	p += r;
	if (a->type == SPOP_FRAME_ACK) {
		while (p < end) {
			unsigned action = *p++, nargs = *p++, scope = *p++;
			struct spop_data d;
			char name[64];

			assert_int_equal(scope, SPOP_SCOPE_TXN);
			r = spop_decode_varint(p, (size_t)(end - p), &v);
			assert_true(r > 0 && v < sizeof(name));
			p += r;
			memcpy(name, p, v);
			name[v] = '\0';
			p += v;
			if (action == 2) {
				assert_int_equal(nargs, 2);
				a->has_unset = true;
				continue;
			}
			assert_int_equal(action, 1);
			assert_int_equal(nargs, 3);
			r = spop_decode_data(p, (size_t)(end - p), &d);
			assert_true(r > 0);
			p += r;
			if (!strcmp(name, "status")) {
				memcpy(a->status, d.v.s.ptr, d.v.s.len);
			} else if (!strcmp(name, "reason")) {
				memcpy(a->reason, d.v.s.ptr, d.v.s.len);
			} else if (!strcmp(name, "lease")) {
				assert_true(d.v.s.len < sizeof(a->lease));
				memcpy(a->lease, d.v.s.ptr, d.v.s.len);
			} else if (!strcmp(name, "policy_hdr")) {
				assert_true(d.v.s.len < sizeof(a->policy_hdr));
				memcpy(a->policy_hdr, d.v.s.ptr, d.v.s.len);
			} else if (!strcmp(name, "ratelimit_hdr")) {
				assert_true(d.v.s.len < sizeof(a->ratelimit_hdr));
				memcpy(a->ratelimit_hdr, d.v.s.ptr, d.v.s.len);
			} else if (!strcmp(name, "window")) {
				a->window = d.v.i;
			} else if (!strcmp(name, "pool")) {
				assert_true(d.v.s.len < sizeof(a->pool));
				memcpy(a->pool, d.v.s.ptr, d.v.s.len);
			} else if (!strcmp(name, "pool_limit")) {
				a->pool_limit = d.v.i;
			} else if (!strcmp(name, "pool_remaining")) {
				a->pool_remaining = d.v.i;
			} else if (!strcmp(name, "pool_reset")) {
				a->pool_reset = d.v.i;
			} else if (!strcmp(name, "limit")) {
				a->limit = d.v.i;
			} else if (!strcmp(name, "remaining")) {
				a->remaining = d.v.i;
			} else if (!strcmp(name, "reset")) {
				a->reset = d.v.i;
			} else if (!strcmp(name, "retry_after")) {
				a->retry_after = d.v.i;
				a->has_retry = true;
			}
		}
	} else if (a->type == SPOP_FRAME_AGENT_DISCONNECT) {
		struct spop_frame f;
		enum spop_status st;
		unsigned char copy[1024];

		/* decode it as if HAProxy had sent it: same KV layout */
		memcpy(copy, b, n);
		copy[4] = SPOP_FRAME_HAPROXY_DISCONNECT;
		assert_int_equal(spop_decode_frame(copy, n, 1 << 20, &f, &st), (int)n);
		a->disco_status = f.u.disconnect.status;
	}
}

static void expect_frame(struct fixture *f, struct ack *a)
{
	unsigned char buf[2048];
	ssize_t n = peer_read_frame(f, buf, sizeof(buf));

	assert_true(n > 0);
	parse_agent_frame(buf, (size_t)n, a);
}

static void expect_eof(struct fixture *f)
{
	unsigned char buf[64];

	assert_int_equal(peer_read_frame(f, buf, sizeof(buf)), 0);
}

static void handshake(struct fixture *f)
{
	struct wbuf w;
	struct ack a;

	build_hello(&w, "pipelining", false);
	peer_send(f, w.b, w.n);
	expect_frame(f, &a);
	assert_int_equal(a.type, SPOP_FRAME_AGENT_HELLO);
}

/* ------------------------------------------------------------------ tests */

static void test_hello_answers_agent_hello(void **state)
{
	struct fixture *f = *state;
	unsigned char buf[512];
	struct wbuf w;
	ssize_t n;

	build_hello(&w, "pipelining,async", false);
	peer_send(f, w.b, w.n);
	n = peer_read_frame(f, buf, sizeof(buf));
	assert_true(n > 9);
	assert_int_equal(buf[4], SPOP_FRAME_AGENT_HELLO);
	/* version 2.0, HAProxy's size echoed, only pipelining announced */
	assert_non_null(memmem(buf, (size_t)n, "\x07version\x08\x03" "2.0", 13));
	assert_non_null(memmem(buf, (size_t)n, "\x0emax-frame-size\x03\xfc\xf0\x06", 19));
	assert_non_null(memmem(buf, (size_t)n, "\x0c" "capabilities\x08\x0apipelining", 25));
	assert_null(memmem(buf, (size_t)n, "async", 5));
}

static void test_healthcheck_closes(void **state)
{
	struct fixture *f = *state;
	struct wbuf w;
	struct ack a;

	build_hello(&w, "", true);
	peer_send(f, w.b, w.n);
	expect_frame(f, &a);
	assert_int_equal(a.type, SPOP_FRAME_AGENT_HELLO);
	expect_eof(f);
	assert_int_equal(f->env.nconns, 0);
}

static void test_notify_allow(void **state)
{
	struct fixture *f = *state;
	struct wbuf w;
	struct ack a;

	handshake(f);
	build_notify(&w, 7, 1, "ratelimit", "transfer", SPOP_T_STR, "ACC-1001", 8, 1);
	peer_send(f, w.b, w.n);
	expect_frame(f, &a);
	assert_int_equal(a.type, SPOP_FRAME_ACK);
	assert_int_equal(a.sid, 7);
	assert_int_equal(a.fid, 1);
	assert_string_equal(a.status, "allow");
	assert_int_equal(a.limit, 3);
	assert_int_equal(a.remaining, 2);
	assert_int_equal(a.reset, 1);
	assert_false(a.has_retry);
	/* the draft's fields, preformatted, and the deciding window */
	assert_int_equal(a.window, 1);
	assert_string_equal(a.policy_hdr, "\"transfer\";q=3;w=1");
	assert_string_equal(a.ratelimit_hdr, "\"transfer\";r=2;t=1");
	assert_int_equal(fake.ncalls, 1);
	assert_memory_equal(fake.calls[0].key, "ACC-1001", 8);
	assert_int_equal(fake.calls[0].cost, 1);
	assert_string_equal(fake.calls[0].p->name, "transfer");
}

/* A pooled policy: the pool is its own item of RateLimit-Policy on every
 * answer, and the RateLimit item when it decided, so that a client tells
 * "you are out" (the policy's item) from "the service is full" (the pool's). */
static void test_notify_pooled_headers(void **state)
{
	struct fixture *f = *state;
	struct wbuf w;
	struct ack a;

	handshake(f);
	build_notify(&w, 5, 1, "ratelimit", "pooled", SPOP_T_STR, "ACC-1001", 8, 1);
	peer_send(f, w.b, w.n);
	expect_frame(f, &a);
	assert_string_equal(a.status, "allow");
	assert_string_equal(a.policy_hdr, "\"pooled\";q=3;w=1, \"pool-transfers\";q=5;w=60");
	assert_string_equal(a.ratelimit_hdr, "\"pooled\";r=2;t=1");
	assert_int_equal(a.window, 1);
	assert_string_equal(a.pool, "transfers");
	assert_int_equal(a.pool_limit, 5);
	assert_int_equal(a.pool_remaining, -1);

	/* the pool refused: its item answers, its window */
	fake.status = WINDOW_DENY;
	fake.window = WINDOW_MAX_WINDOWS;
	build_notify(&w, 5, 2, "ratelimit", "pooled", SPOP_T_STR, "ACC-1001", 8, 1);
	peer_send(f, w.b, w.n);
	expect_frame(f, &a);
	assert_string_equal(a.status, "deny");
	assert_string_equal(a.policy_hdr, "\"pooled\";q=3;w=1, \"pool-transfers\";q=5;w=60");
	assert_string_equal(a.ratelimit_hdr, "\"pool-transfers\";r=2;t=1");
	assert_int_equal(a.window, 60);
	assert_string_equal(a.pool, "transfers");
	assert_int_equal(a.pool_limit, 5);
	assert_int_equal(a.pool_remaining, 2);
	assert_int_equal(a.pool_reset, 1);

	/* a policy without a pool: nothing of a pool */
	fake.window = 0;
	build_notify(&w, 5, 3, "ratelimit", "transfer", SPOP_T_STR, "ACC-1001", 8, 1);
	peer_send(f, w.b, w.n);
	expect_frame(f, &a);
	assert_string_equal(a.policy_hdr, "\"transfer\";q=3;w=1");
	assert_string_equal(a.pool, "");
	assert_int_equal(a.pool_limit, -1);
}

static void test_notify_deny_has_retry_after(void **state)
{
	struct fixture *f = *state;
	struct wbuf w;
	struct ack a;

	fake.status = WINDOW_DENY;
	handshake(f);
	build_notify(&w, 9, 2, "ratelimit", "transfer", SPOP_T_STR, "ACC-1001", 8, 0);
	peer_send(f, w.b, w.n);
	expect_frame(f, &a);
	assert_string_equal(a.status, "deny");
	assert_true(a.has_retry);
	assert_int_equal(a.retry_after, 1);
	assert_int_equal(fake.calls[0].cost, 1);    /* default cost */
}

static void test_pipelined_acks_out_of_order(void **state)
{
	struct fixture *f = *state;
	struct wbuf w1, w2;
	unsigned char both[8192];
	struct ack a;

	fake.sync = false;
	handshake(f);
	build_notify(&w1, 1, 1, "ratelimit", "transfer", SPOP_T_STR, "A", 1, 1);
	build_notify(&w2, 3, 1, "ratelimit", "transfer", SPOP_T_STR, "B", 1, 1);
	memcpy(both, w1.b, w1.n);
	memcpy(both + w1.n, w2.b, w2.n);
	peer_send(f, both, w1.n + w2.n);
	assert_int_equal(fake.ncalls, 2);
	fake_answer(1, WINDOW_DENY, 0);
	pump(f);
	expect_frame(f, &a);
	assert_int_equal(a.sid, 3);
	assert_string_equal(a.status, "deny");
	fake_answer(0, WINDOW_ALLOW, 2);
	pump(f);
	expect_frame(f, &a);
	assert_int_equal(a.sid, 1);
	assert_string_equal(a.status, "allow");
}

static void test_byte_by_byte(void **state)
{
	struct fixture *f = *state;
	struct wbuf h, n;
	unsigned char all[8192];
	size_t i, len;
	struct ack a;

	build_hello(&h, "pipelining", false);
	build_notify(&n, 5, 1, "ratelimit", "transfer", SPOP_T_STR, "ACC-1", 5, 1);
	memcpy(all, h.b, h.n);
	memcpy(all + h.n, n.b, n.n);
	len = h.n + n.n;
	for (i = 0; i < len; i++)
		peer_send(f, all + i, 1);
	expect_frame(f, &a);
	assert_int_equal(a.type, SPOP_FRAME_AGENT_HELLO);
	expect_frame(f, &a);
	assert_int_equal(a.type, SPOP_FRAME_ACK);
	assert_int_equal(a.sid, 5);
	assert_string_equal(a.status, "allow");
}

static void expect_error_reason(struct fixture *f, struct wbuf *w, const char *reason)
{
	struct ack a;

	peer_send(f, w->b, w->n);
	expect_frame(f, &a);
	assert_int_equal(a.type, SPOP_FRAME_ACK);
	assert_string_equal(a.status, "error");
	assert_string_equal(a.reason, reason);
	/* an error names no window: HAProxy sends no RateLimit headers */
	assert_int_equal(a.window, -1);
	assert_string_equal(a.policy_hdr, "");
	assert_string_equal(a.ratelimit_hdr, "");
}

/* The ACK for the 4-window policy with a 48-byte name after a HELLO that
 * offered <max_frame>, into <a>. */
static void decide_longest_policy(struct fixture *f, uint32_t max_frame, struct ack *a)
{
	static const char name[] = "a-policy-name-of-the-longest-length-480000000000";
	struct wbuf w;

	assert_int_equal(strlen(name), WINDOW_NAME_MAX);
	hello_max_frame = max_frame;
	handshake(f);
	build_notify(&w, 1, 1, "ratelimit", name, SPOP_T_STR, "ACC-1", 5, 1);
	peer_send(f, w.b, w.n);
	expect_frame(f, a);
	assert_string_equal(a->status, "allow");
	assert_int_equal(a->remaining, 2);
}

/* The header values of the largest policy fit a default frame. */
static void test_header_vars_respect_max_frame(void **state)
{
	struct ack a;

	decide_longest_policy(*state, 16380, &a);
	assert_int_equal(a.window, 1);
	assert_true(strlen(a.policy_hdr) > 200);
	assert_non_null(strstr(a.policy_hdr, "-2h\";q=4;w=7200"));
	assert_string_equal(a.ratelimit_hdr,
	                    "\"a-policy-name-of-the-longest-length-480000000000-1s\";r=2;t=1");
}

/* At the smallest frame HAProxy may negotiate (256) they are left out, all
 * of them, and the decision still goes through. */
static void test_header_vars_left_out_of_a_small_frame(void **state)
{
	struct fixture *f = *state;
	struct wbuf w;
	struct ack a;

	decide_longest_policy(f, 256, &a);
	assert_int_equal(a.window, -1);
	assert_string_equal(a.policy_hdr, "");
	assert_string_equal(a.ratelimit_hdr, "");
	/* the connection stays usable */
	build_notify(&w, 2, 1, "ratelimit", "transfer", SPOP_T_STR, "ACC-1", 5, 1);
	peer_send(f, w.b, w.n);
	expect_frame(f, &a);
	assert_string_equal(a.policy_hdr, "\"transfer\";q=3;w=1");
}

static void test_bad_input_is_error_not_decision(void **state)
{
	struct fixture *f = *state;
	char big[300];
	struct wbuf w;

	memset(big, 'x', sizeof(big));
	handshake(f);
	build_notify(&w, 1, 1, "ratelimit", "nope", SPOP_T_STR, "ACC-1", 5, 1);
	expect_error_reason(f, &w, "unknown-policy");
	build_notify(&w, 2, 1, "ratelimit", "transfer", SPOP_T_NULL, NULL, 0, 1);
	expect_error_reason(f, &w, "bad-key");
	build_notify(&w, 3, 1, "ratelimit", "transfer", SPOP_T_IPV4, NULL, 0, 1);
	expect_error_reason(f, &w, "bad-key");
	build_notify(&w, 4, 1, "ratelimit", "transfer", SPOP_T_STR, "", 0, 1);
	expect_error_reason(f, &w, "bad-key");
	build_notify(&w, 5, 1, "ratelimit", "transfer", SPOP_T_STR, big, 257, 1);
	expect_error_reason(f, &w, "bad-key");
	build_notify(&w, 6, 1, "ratelimit", "transfer", SPOP_T_STR, "ACC-1", 5, -1);
	expect_error_reason(f, &w, "bad-cost");
	/* fail-open policies never fail open on bad input */
	build_notify(&w, 7, 1, "ratelimit", "reads", SPOP_T_NULL, NULL, 0, 1);
	expect_error_reason(f, &w, "bad-key");
	assert_int_equal(fake.ncalls, 0);
	/* a 256-byte key is fine */
	build_notify(&w, 8, 1, "ratelimit", "transfer", SPOP_T_BIN, big, 256, 1);
	peer_send(f, w.b, w.n);
	assert_int_equal(fake.ncalls, 1);
}

static void test_other_message_acked_with_action(void **state)
{
	struct fixture *f = *state;
	struct wbuf w;
	struct ack a;

	handshake(f);
	build_notify(&w, 11, 4, "something-else", "transfer", SPOP_T_STR, "A", 1, 1);
	peer_send(f, w.b, w.n);
	expect_frame(f, &a);
	assert_int_equal(a.type, SPOP_FRAME_ACK);
	assert_int_equal(a.sid, 11);
	assert_int_equal(a.fid, 4);
	assert_true(a.has_unset);
	assert_int_equal(fake.ncalls, 0);
}

/* A "ratelimit-done" NOTIFY (tests/unit: HAProxy's response phase) with
 * args policy, key, lease. */
static void build_done(struct wbuf *w, uint64_t sid, const char *policy, const char *key,
                       const char *lease)
{
	w_begin(w, SPOP_FRAME_NOTIFY, sid, 1);
	w_str(w, "ratelimit-done", 14);
	w_byte(w, 3);
	w_str(w, "policy", 6);
	w_byte(w, SPOP_T_STR);
	w_str(w, policy, strlen(policy));
	w_str(w, "key", 3);
	w_byte(w, SPOP_T_STR);
	w_str(w, key, strlen(key));
	w_str(w, "lease", 5);
	w_byte(w, SPOP_T_STR);
	w_str(w, lease, strlen(lease));
	w_end(w);
}

/* inflight= (issue 38): an admission's lease is txn.rl.lease; a
 * "ratelimit-done" message hands its lease to the release op and is
 * ACKed at once with the harmless unset-var, no decision; one of a policy
 * without inflight=, or with a lease of another length, releases nothing. */
static void test_leases(void **state)
{
	static const char id[] = "0123456789abcdef0123456789abcdef";
	struct fixture *f = *state;
	struct wbuf w;
	struct ack a;

	handshake(f);
	fake.lease = id;
	build_notify(&w, 1, 1, "ratelimit", "export", SPOP_T_STR, "ACC-1", 5, 1);
	peer_send(f, w.b, w.n);
	expect_frame(f, &a);
	assert_string_equal(a.status, "allow");
	assert_string_equal(a.lease, id);
	assert_int_equal(atomic_load(&f->metrics.leases[METRICS_LEASE_TAKEN]), 1);

	build_done(&w, 3, "export", "ACC-1", id);
	peer_send(f, w.b, w.n);
	expect_frame(f, &a);
	assert_int_equal(a.type, SPOP_FRAME_ACK);
	assert_int_equal(a.sid, 3);
	assert_true(a.has_unset);
	assert_string_equal(a.status, "");
	assert_int_equal(fake.ncalls, 1);
	assert_int_equal(fake.nreleases, 1);
	assert_string_equal(fake.releases[0].p->name, "export");
	assert_memory_equal(fake.releases[0].key, "ACC-1", 5);
	assert_string_equal(fake.release_ids[0], id);

	/* ignored: a policy without inflight=, a short lease, an unknown policy */
	build_done(&w, 5, "transfer", "ACC-1", id);
	peer_send(f, w.b, w.n);
	expect_frame(f, &a);
	assert_true(a.has_unset);
	build_done(&w, 7, "export", "ACC-1", "0123");
	peer_send(f, w.b, w.n);
	expect_frame(f, &a);
	build_done(&w, 9, "nope", "ACC-1", id);
	peer_send(f, w.b, w.n);
	expect_frame(f, &a);
	assert_int_equal(fake.nreleases, 1);
	assert_int_equal(fake.ncalls, 1);
}

static void test_notify_before_hello(void **state)
{
	struct fixture *f = *state;
	struct wbuf w;
	struct ack a;

	build_notify(&w, 1, 1, "ratelimit", "transfer", SPOP_T_STR, "A", 1, 1);
	peer_send(f, w.b, w.n);
	expect_frame(f, &a);
	assert_int_equal(a.type, SPOP_FRAME_AGENT_DISCONNECT);
	assert_int_equal(a.disco_status, SPOP_ST_INVALID);
	expect_eof(f);
}

static void test_oversized_length_rejected_before_buffering(void **state)
{
	struct fixture *f = *state;
	static const unsigned char huge[] = { 0x7f, 0xff, 0xff, 0xff, 0x01 };
	struct ack a;

	handshake(f);
	peer_send(f, huge, sizeof(huge));
	expect_frame(f, &a);
	assert_int_equal(a.type, SPOP_FRAME_AGENT_DISCONNECT);
	assert_int_equal(a.disco_status, SPOP_ST_TOO_BIG);
	expect_eof(f);
	assert_int_equal(f->metrics.malformed[SPOP_ST_TOO_BIG], 1);
}

static void test_zero_length_rejected(void **state)
{
	struct fixture *f = *state;
	static const unsigned char zero[] = { 0, 0, 0, 0 };
	struct ack a;

	handshake(f);
	peer_send(f, zero, sizeof(zero));
	expect_frame(f, &a);
	assert_int_equal(a.type, SPOP_FRAME_AGENT_DISCONNECT);
	assert_int_equal(a.disco_status, SPOP_ST_INVALID);
}

static void test_haproxy_disconnect(void **state)
{
	struct fixture *f = *state;
	struct wbuf w;
	struct ack a;

	handshake(f);
	w_begin(&w, SPOP_FRAME_HAPROXY_DISCONNECT, 0, 0);
	w_str(&w, "status-code", 11);
	w_byte(&w, SPOP_T_UINT32);
	w_varint(&w, 0);
	w_str(&w, "message", 7);
	w_byte(&w, SPOP_T_STR);
	w_str(&w, "normal", 6);
	w_end(&w);
	peer_send(f, w.b, w.n);
	expect_frame(f, &a);
	assert_int_equal(a.type, SPOP_FRAME_AGENT_DISCONNECT);
	assert_int_equal(a.disco_status, 0);
	expect_eof(f);
}

static void test_request_outlives_conn(void **state)
{
	struct fixture *f = *state;
	struct wbuf w;

	fake.sync = false;
	handshake(f);
	build_notify(&w, 1, 1, "ratelimit", "transfer", SPOP_T_STR, "A", 1, 1);
	peer_send(f, w.b, w.n);
	close(f->peer);
	f->peer = -1;
	pump(f);
	assert_int_equal(f->env.nconns, 0);
	/* the late decision must find no conn and free the request (ASan/valgrind) */
	fake_answer(0, WINDOW_ALLOW, 2);
	f->peer = open("/dev/null", O_RDONLY);
}

static void test_drain_waits_for_inflight(void **state)
{
	struct fixture *f = *state;
	struct wbuf w;
	struct ack a;

	fake.sync = false;
	handshake(f);
	build_notify(&w, 1, 1, "ratelimit", "transfer", SPOP_T_STR, "A", 1, 1);
	peer_send(f, w.b, w.n);
	conn_env_drain(&f->env);
	pump(f);
	assert_int_equal(f->env.nconns, 1);         /* still waiting for its decision */
	fake_answer(0, WINDOW_ALLOW, 2);
	pump(f);
	expect_frame(f, &a);
	assert_int_equal(a.type, SPOP_FRAME_ACK);
	expect_frame(f, &a);
	assert_int_equal(a.type, SPOP_FRAME_AGENT_DISCONNECT);
	assert_int_equal(a.disco_status, 0);
	expect_eof(f);
	assert_true(f->idle_called);
}

static void test_max_inflight_sheds(void **state)
{
	struct fixture *f = *state;
	struct wbuf w;
	struct ack a;
	unsigned i;

	fake.sync = false;
	f->cfg.max_inflight = 2;
	handshake(f);
	for (i = 1; i <= 3; i++) {
		build_notify(&w, i, 1, "ratelimit", "transfer", SPOP_T_STR, "A", 1, 1);
		peer_send(f, w.b, w.n);
	}
	assert_int_equal(fake.ncalls, 2);
	expect_frame(f, &a);
	assert_int_equal(a.sid, 3);
	assert_string_equal(a.status, "error");
	assert_string_equal(a.reason, "overload");
	fake_answer(0, WINDOW_ALLOW, 2);
	fake_answer(1, WINDOW_ALLOW, 1);
}

/* A NOTIFY of <n> "ratelimit" messages (keys K0, K1, ...) and <nother>
 * messages of another name. */
static void build_notify_n(struct wbuf *w, uint64_t sid, unsigned n, unsigned nother)
{
	char key[16];
	unsigned i;

	w_begin(w, SPOP_FRAME_NOTIFY, sid, 1);
	for (i = 0; i < n + nother; i++) {
		const char *name = i < n ? "ratelimit" : "other";

		w_str(w, name, strlen(name));
		w_byte(w, 2);
		w_str(w, "policy", 6);
		w_byte(w, SPOP_T_STR);
		w_str(w, "transfer", 8);
		w_str(w, "key", 3);
		w_byte(w, SPOP_T_STR);
		snprintf(key, sizeof(key), "K%u", i);
		w_str(w, key, strlen(key));
	}
	w_end(w);
}

/* Send a NOTIFY of <n> "ratelimit" messages as stream <sid>. */
static void send_n(struct fixture *f, uint64_t sid, unsigned n)
{
	struct wbuf w;

	build_notify_n(&w, sid, n, 0);
	peer_send(f, w.b, w.n);
}

/* The next frame is the ACK of <sid> with status <status>, reason <reason>. */
static void expect_ack(struct fixture *f, uint64_t sid, const char *status, const char *reason)
{
	struct ack a;

	expect_frame(f, &a);
	assert_int_equal(a.sid, sid);
	assert_string_equal(a.status, status);
	assert_string_equal(a.reason, reason);
}

/* Answer the fake calls <from>..<to>-1 with allow. */
static void answer_range(unsigned from, unsigned to)
{
	for (; from < to; from++)
		fake_answer(from, WINDOW_ALLOW, 1);
}

/* Two or more "ratelimit" messages in one NOTIFY: error too-many-messages
 * and nothing asked, whatever max-notify-messages says (their decisions
 * could not be all-or-nothing: one could count a unit while another
 * denies). One "ratelimit" message among others is decided. */
static void test_notify_one_ratelimit_message(void **state)
{
	struct fixture *f = *state;
	struct wbuf w;

	fake.sync = false;
	assert_int_equal(f->cfg.max_notify_messages, 16);
	handshake(f);
	send_n(f, 1, 2);
	expect_ack(f, 1, "error", "too-many-messages");
	assert_int_equal(fake.ncalls, 0);
	assert_int_equal(f->metrics.errors_by_reason[WINDOW_REASON_TOO_MANY_MESSAGES], 1);
	send_n(f, 3, 17);
	expect_ack(f, 3, "error", "too-many-messages");
	assert_int_equal(fake.ncalls, 0);

	/* one among other messages: decided, the deny is the whole answer */
	build_notify_n(&w, 5, 1, 5);
	peer_send(f, w.b, w.n);
	assert_int_equal(fake.ncalls, 1);
	fake_answer(0, WINDOW_DENY, 0);
	expect_ack(f, 5, "deny", "");

	/* a config that raised max-notify-messages still gets one */
	f->cfg.max_notify_messages = 1024;
	send_n(f, 7, 2);
	expect_ack(f, 7, "error", "too-many-messages");
	assert_int_equal(fake.ncalls, 1);
}

/* max-inflight counts decisions ("ratelimit" messages), not NOTIFYs: a
 * NOTIFY without one takes no room, and an answered decision frees its
 * room. */
static void test_max_inflight_counts_decisions(void **state)
{
	struct fixture *f = *state;
	struct wbuf w;

	fake.sync = false;
	f->cfg.max_inflight = 2;
	handshake(f);
	send_n(f, 1, 1);
	send_n(f, 3, 1);
	assert_int_equal(fake.ncalls, 2);
	build_notify_n(&w, 5, 0, 3);
	peer_send(f, w.b, w.n);
	expect_ack(f, 5, "", "");
	send_n(f, 7, 1);
	expect_ack(f, 7, "error", "overload");
	assert_int_equal(fake.ncalls, 2);
	answer_range(0, 1);
	expect_ack(f, 1, "allow", "");
	send_n(f, 9, 1);
	assert_int_equal(fake.ncalls, 3);
	answer_range(1, 3);
	expect_ack(f, 3, "allow", "");
	expect_ack(f, 9, "allow", "");
}

/* Errors give their in-flight room back: more than max-inflight NOTIFYs
 * refused one after another (bad input, or a limiter that answers error),
 * then a valid one is decided, not shed as overload. */
static void test_errors_free_inflight_room(void **state)
{
	struct fixture *f = *state;
	struct wbuf w;
	unsigned i;

	fake.sync = false;
	f->cfg.max_inflight = 2;
	handshake(f);
	for (i = 0; i < 5; i++) {
		build_notify(&w, 2 * i + 1, 1, "ratelimit", "nope", SPOP_T_STR, "A", 1, 1);
		peer_send(f, w.b, w.n);
		expect_ack(f, 2 * i + 1, "error", "unknown-policy");
		build_notify(&w, 2 * i + 101, 1, "ratelimit", "transfer", SPOP_T_NULL, NULL, 0, 1);
		peer_send(f, w.b, w.n);
		expect_ack(f, 2 * i + 101, "error", "bad-key");
	}
	assert_int_equal(fake.ncalls, 0);
	for (i = 0; i < 5; i++) {
		build_notify(&w, 2 * i + 201, 1, "ratelimit", "transfer", SPOP_T_STR, "A", 1, 1);
		peer_send(f, w.b, w.n);
		assert_int_equal(fake.ncalls, i + 1);
		fake_answer(i, WINDOW_ERROR, 0);
		pump(f);
		expect_ack(f, 2 * i + 201, "error", "");
	}
	build_notify(&w, 301, 1, "ratelimit", "transfer", SPOP_T_STR, "A", 1, 1);
	peer_send(f, w.b, w.n);
	assert_int_equal(fake.ncalls, 6);
	fake_answer(5, WINDOW_ALLOW, 2);
	expect_ack(f, 301, "allow", "");
}

/* After a burst the request pool gives back all but a low-water mark. */
static void test_request_pool_trim(void **state)
{
	struct fixture *f = *state;
	unsigned i;

	fake.sync = false;
	f->cfg.max_inflight = 1000;
	handshake(f);
	/* 100 in flight at once, then all answered: 100 pooled */
	for (i = 0; i < 100; i++)
		send_n(f, 2 * i + 1, 1);
	assert_int_equal(fake.ncalls, 100);
	answer_range(0, 100);
	assert_int_equal(f->notify.nfree_reqs, 100);
	assert_int_equal(conn_notify_trim(&f->notify), 36);
	assert_int_equal(f->notify.nfree_reqs, 64);
	assert_int_equal(conn_notify_trim(&f->notify), 0);
	/* the pool still serves */
	send_n(f, 999, 1);
	assert_int_equal(fake.ncalls, 101);
	assert_int_equal(f->notify.nfree_reqs, 63);
	fake_answer(100, WINDOW_ALLOW, 1);
}

/* Plans: the arg picks the plan's limits, an account's override line beats
 * its plan, no arg is plan-default's, an unknown plan is the policy's own
 * (counted), and a plan the policy lacks is the policy's own (not counted). */
static void test_notify_plan_chooses_limits(void **state)
{
	static const char more[] = "plan free transfer 1/1s\nplan pro transfer 30/1s\n"
		"plan pro reads 1000/1m\noverride transfer jwt:VIP 7/1s\nplan-default free\n";
	static const struct {
		const char *policy, *key, *plan;
		unsigned nwin;
		uint64_t limit0;
		const char *policy_hdr;
		uint64_t unknown;
	} cases[] = {
		{ "transfer", "jwt:A", "pro", 1, 30, "\"transfer\";q=30;w=1", 0 },
		{ "transfer", "jwt:A", "free", 1, 1, "\"transfer\";q=1;w=1", 0 },
		{ "transfer", "jwt:A", NULL, 1, 1, "\"transfer\";q=1;w=1", 0 },
		{ "transfer", "jwt:A", "", 1, 1, "\"transfer\";q=1;w=1", 0 },
		{ "transfer", "jwt:VIP", "pro", 1, 7, "\"transfer\";q=7;w=1", 0 },
		{ "transfer", "jwt:A", "gold", 1, 3, "\"transfer\";q=3;w=1", 1 },
		{ "reads", "jwt:A", "free", 1, 100, "\"reads\";q=100;w=60", 0 },
		{ "reads", "jwt:A", "pro", 1, 1000, "\"reads\";q=1000;w=60", 0 },
	};
	struct fixture *f = *state;
	char err[CONFIG_ERR_LEN];
	struct wbuf w;
	struct ack a;
	size_t i;

	assert_int_equal(config_parse(&f->cfg, "more.conf", more, sizeof(more) - 1, err,
	                              sizeof(err)), 0);
	handshake(f);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t before = atomic_load(&f->metrics.unknown_plans);

		build_notify_plan(&w, i + 1, cases[i].policy, cases[i].key, cases[i].plan);
		peer_send(f, w.b, w.n);
		expect_frame(f, &a);
		assert_string_equal(a.status, "allow");
		assert_int_equal(fake.ncalls, i + 1);
		assert_int_equal(fake.calls[i].nwin, cases[i].nwin);
		assert_int_equal(fake.calls[i].limit0, cases[i].limit0);
		assert_string_equal(a.policy_hdr, cases[i].policy_hdr);
		assert_int_equal(atomic_load(&f->metrics.unknown_plans) - before, cases[i].unknown);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_hello_answers_agent_hello, setup, teardown),
		cmocka_unit_test_setup_teardown(test_healthcheck_closes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_notify_allow, setup, teardown),
		cmocka_unit_test_setup_teardown(test_notify_pooled_headers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_notify_deny_has_retry_after, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pipelined_acks_out_of_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_byte_by_byte, setup, teardown),
		cmocka_unit_test_setup_teardown(test_header_vars_respect_max_frame, setup, teardown),
		cmocka_unit_test_setup_teardown(test_header_vars_left_out_of_a_small_frame, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_input_is_error_not_decision, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_message_acked_with_action, setup, teardown),
		cmocka_unit_test_setup_teardown(test_leases, setup, teardown),
		cmocka_unit_test_setup_teardown(test_notify_before_hello, setup, teardown),
		cmocka_unit_test_setup_teardown(test_oversized_length_rejected_before_buffering, setup, teardown),
		cmocka_unit_test_setup_teardown(test_zero_length_rejected, setup, teardown),
		cmocka_unit_test_setup_teardown(test_haproxy_disconnect, setup, teardown),
		cmocka_unit_test_setup_teardown(test_request_outlives_conn, setup, teardown),
		cmocka_unit_test_setup_teardown(test_drain_waits_for_inflight, setup, teardown),
		cmocka_unit_test_setup_teardown(test_max_inflight_sheds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_notify_one_ratelimit_message, setup, teardown),
		cmocka_unit_test_setup_teardown(test_max_inflight_counts_decisions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_errors_free_inflight_room, setup, teardown),
		cmocka_unit_test_setup_teardown(test_request_pool_trim, setup, teardown),
		cmocka_unit_test_setup_teardown(test_notify_plan_chooses_limits, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
