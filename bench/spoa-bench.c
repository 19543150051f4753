/*
 * spoa-bench - an SPOP load generator that plays HAProxy.
 *
 * It opens N connections to an agent, does the HELLO handshake the way
 * HAProxy 2.6/3.x does (version 2.0, max-frame-size, "pipelining"), then
 * keeps up to <depth> NOTIFY frames in flight on every connection, each one
 * carrying the message "ratelimit" with the args HAProxy sends for
 *
 *     spoe-message ratelimit
 *         args policy=str(<policy>) key=var(txn.account) cost=int(<cost>)
 *
 * that is policy (STR), key (STR), cost (INT64). ACKs are matched to their
 * NOTIFY by stream-id and frame-id, in whatever order they come back, and
 * their "status" variable is counted as allow / deny / error.
 *
 * Design rules, because a load generator must not be the bottleneck nor lie:
 *   - one libev loop per thread, connections split over threads, nothing
 *     shared on the hot path but a few relaxed atomics for stop/abort;
 *   - every buffer is sized and allocated before the run: no malloc per
 *     request (the slot of a NOTIFY in flight is an index, not an object);
 *   - latency goes into a log-linear histogram (64 sub-buckets per power of
 *     two, under 1.6% error), merged across threads at the end;
 *   - the clock is read once per batch written and once per batch read, so
 *     a latency includes the time the frame waited in our own buffers, as it
 *     would in HAProxy.
 *
 * Exit status: 0 run complete, 1 protocol or connection error (or ACKs
 * missing at the end), 2 usage, 3 --strict and some ACK said "error" or had
 * no status.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>

#include "spop.h"

#ifndef SPOA_VERSION
#define SPOA_VERSION "dev"
#endif

#define BENCH_ERR_LEN           256
#define BENCH_KEY_MAX           256         /* DESIGN: key is 1..256 bytes */
#define BENCH_NAME_MAX          64
#define BENCH_DEFAULT_FRAME     16380u      /* HAProxy's default: tune.bufsize - 4 */
#define BENCH_HIST_SUB_BITS     6
#define BENCH_HIST_SUB          (1u << BENCH_HIST_SUB_BITS)
#define BENCH_HIST_SIZE         ((64u - BENCH_HIST_SUB_BITS + 1u) * BENCH_HIST_SUB)
#define BENCH_REASONS           8
#define BENCH_MAX_OPENING       64          /* connects in progress per thread */
#define BENCH_TICK_S            0.05
#define BENCH_SETUP_TIMEOUT_S   30.0

enum bench_exit {
	BENCH_EXIT_OK = 0,
	BENCH_EXIT_PROTOCOL = 1,
	BENCH_EXIT_USAGE = 2,
	BENCH_EXIT_STRICT = 3,
	BENCH_EXIT_COUNT
};

enum bench_conn_state {
	BENCH_CONN_ST_INIT = 0,         /* not opened yet */
	BENCH_CONN_ST_CONNECTING,       /* connect() in progress */
	BENCH_CONN_ST_HELLO,            /* HAPROXY-HELLO sent, waiting AGENT-HELLO */
	BENCH_CONN_ST_READY,            /* handshake done: NOTIFYs may flow */
	BENCH_CONN_ST_CLOSED,
	BENCH_CONN_ST_COUNT
};

enum bench_status {
	BENCH_STATUS_ALLOW = 0,
	BENCH_STATUS_DENY,
	BENCH_STATUS_ERROR,
	BENCH_STATUS_NONE,              /* ACK without a (known) status variable */
	BENCH_STATUS_COUNT
};

enum bench_phase {
	BENCH_PHASE_SETUP = 0,
	BENCH_PHASE_LOAD,
	BENCH_PHASE_DRAIN,
	BENCH_PHASE_DONE,
	BENCH_PHASE_COUNT
};

enum bench_output {
	BENCH_OUT_TEXT = 0,
	BENCH_OUT_CSV,
	BENCH_OUT_JSON,
	BENCH_OUT_COUNT
};

struct bench_opts {
	char address[512];
	struct sockaddr_storage sa;
	socklen_t salen;
	unsigned conns;
	unsigned depth;
	uint64_t keys;
	uint64_t hot;
	double hot_pct;
	char policy[BENCH_NAME_MAX];
	char key_prefix[BENCH_NAME_MAX];
	int64_t cost;
	double duration_s;
	uint64_t requests;              /* 0: run for duration_s */
	unsigned threads;
	unsigned idle;
	uint32_t max_frame_size;
	uint64_t seed;
	double drain_s;
	enum bench_output output;
	bool quiet;
	bool strict;
};

/* Log-linear histogram of nanoseconds: exact below 64, then 64 buckets for
 * every power of two. */
struct bench_hist {
	uint64_t counts[BENCH_HIST_SIZE];
	uint64_t n;
	uint64_t sum_ns;
	uint64_t max_ns;
};

struct bench_reason {
	char name[32];
	uint64_t n;
};

/* One NOTIFY in flight; its index in the conn's table is the slot number. */
struct bench_slot {
	uint64_t stream_id;
	uint64_t t0_ns;
	bool busy;
};

struct bench_thread;

struct bench_conn {
	struct bench_thread *t;
	int fd;
	enum bench_conn_state state;
	bool idle;                      /* HELLO only, then silent */
	ev_io rd;
	ev_io wr;
	uint32_t frame_max;             /* negotiated (the agent's answer) */
	unsigned char *rbuf;
	size_t rlen;
	size_t rcap;
	unsigned char *wbuf;
	size_t woff;
	size_t wlen;
	size_t wcap;
	struct bench_slot *slots;
	unsigned *free_slots;           /* stack of free slot indexes */
	unsigned nfree;
	uint64_t seq;                   /* NOTIFYs sent on this conn */
};

struct bench_thread {
	unsigned id;
	pthread_t tid;
	const struct bench_opts *o;
	struct ev_loop *loop;
	ev_timer tick;
	enum bench_phase phase;
	struct bench_conn *conns;
	unsigned nconns;                /* load connections first, then idle */
	unsigned nload;
	unsigned next_open;
	unsigned opening;
	unsigned ready;
	unsigned failed;
	uint64_t quota;                 /* NOTIFYs left to send in -n mode */
	uint64_t inflight;
	uint64_t rng;
	double deadline;                /* ev_now() when sending stops */
	double drain_deadline;
	uint64_t start_ns;
	uint64_t end_ns;
	/* results */
	uint64_t sent;
	uint64_t acked;
	uint64_t status[BENCH_STATUS_COUNT];
	uint64_t proto_errors;
	uint64_t conn_errors;
	uint64_t idle_closed;
	uint64_t lost;
	struct bench_reason reasons[BENCH_REASONS];
	uint64_t reasons_other;
	struct bench_hist hist;
	char err[BENCH_ERR_LEN];        /* first error seen by this thread */
};

static atomic_bool bench_abort;         /* a protocol error: stop everyone now */
static atomic_bool bench_setup_failed;
static volatile sig_atomic_t bench_signalled;
static pthread_barrier_t bench_barrier;

static const char *const bench_status_names[BENCH_STATUS_COUNT] = {
	[BENCH_STATUS_ALLOW] = "allow",
	[BENCH_STATUS_DENY] = "deny",
	[BENCH_STATUS_ERROR] = "error",
	[BENCH_STATUS_NONE] = "none",
};

/* ------------------------------------------------------------------------
 * Small helpers: clock, PRNG, histogram.
 */

/* Monotonic nanoseconds: latencies must not jump with the wall clock. */
static uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* splitmix64: one multiply-xorshift step per key, good enough for spreading
 * keys and much cheaper than rand_r(). Advances <*s>. */
static uint64_t bench_rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15u);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

/* Uniform in [0, <n>) for <n> >= 1; the modulo bias is below 2^-40 for any
 * account count we will see. */
static uint64_t bench_rng_below(uint64_t *s, uint64_t n)
{
	return bench_rng_next(s) % n;
}

/* Bucket index of <v> nanoseconds. */
static unsigned bench_hist_index(uint64_t v)
{
	unsigned msb;

	if (v < BENCH_HIST_SUB)
		return (unsigned)v;
	msb = 63u - (unsigned)__builtin_clzll(v);
	return ((msb - BENCH_HIST_SUB_BITS + 1u) << BENCH_HIST_SUB_BITS) +
	       (unsigned)((v >> (msb - BENCH_HIST_SUB_BITS)) - BENCH_HIST_SUB);
}

/* Highest value that falls in bucket <i>. */
static uint64_t bench_hist_upper(unsigned i)
{
	unsigned b = i >> BENCH_HIST_SUB_BITS;
	uint64_t sub = i & (BENCH_HIST_SUB - 1u);

	if (b == 0)
		return i;
	return ((BENCH_HIST_SUB + sub + 1u) << (b - 1u)) - 1u;
}

/* Count one latency of <ns> nanoseconds in <h>. */
static void bench_hist_record(struct bench_hist *h, uint64_t ns)
{
	h->counts[bench_hist_index(ns)]++;
	h->n++;
	h->sum_ns += ns;
	if (ns > h->max_ns)
		h->max_ns = ns;
}

/* Add <src> into <dst>. */
static void bench_hist_merge(struct bench_hist *dst, const struct bench_hist *src)
{
	unsigned i;

	for (i = 0; i < BENCH_HIST_SIZE; i++)
		dst->counts[i] += src->counts[i];
	dst->n += src->n;
	dst->sum_ns += src->sum_ns;
	if (src->max_ns > dst->max_ns)
		dst->max_ns = src->max_ns;
}

/* Value at quantile <q> (0..1] of <h>: the upper bound of the bucket that
 * holds it, never above the exact maximum. 0 when <h> is empty. */
static uint64_t bench_hist_quantile(const struct bench_hist *h, double q)
{
	uint64_t rank, seen = 0;
	unsigned i;

	if (h->n == 0)
		return 0;
	rank = (uint64_t)(q * (double)h->n + 0.5);
	if (rank < 1)
		rank = 1;
	if (rank > h->n)
		rank = h->n;
	for (i = 0; i < BENCH_HIST_SIZE; i++) {
		seen += h->counts[i];
		if (seen >= rank) {
			uint64_t v = bench_hist_upper(i);

			return v < h->max_ns ? v : h->max_ns;
		}
	}
	return h->max_ns;
}

/* Remember the first error of thread <t>: the text in <msg> is what the
 * user sees at the end. */
static void bench_thread_error(struct bench_thread *t, const char *msg)
{
	if (t->err[0] == '\0')
		snprintf(t->err, sizeof(t->err), "%s", msg);
}

/* ------------------------------------------------------------------------
 * The frames HAProxy sends, written by the codec (spop.h) straight into a
 * connection's write buffer.
 */

/* HAPROXY-HELLO as HAProxy 2.6 writes it: supported-versions, max-frame-size
 * (UINT32), capabilities "pipelining", a random UUID as engine-id. Writes
 * into the caller's <dst>; returns bytes or -1. */
static int bench_enc_hello(unsigned char *dst, size_t cap, uint32_t max_frame,
                           uint64_t *rng)
{
	char uuid[40];
	uint64_t a = bench_rng_next(rng), b = bench_rng_next(rng);

	snprintf(uuid, sizeof(uuid), "%08x-%04x-4%03x-%04x-%012" PRIx64,
	         (unsigned)(a >> 32), (unsigned)(a >> 16) & 0xffffu,
	         (unsigned)a & 0xfffu, ((unsigned)(b >> 48) & 0x3fffu) | 0x8000u,
	         b & 0xffffffffffffu);
	return spop_encode_haproxy_hello(dst, cap, max_frame, "pipelining", false, uuid);
}

/* Decimal digits of <v> into <dst> (room for 20). Returns the length. */
static size_t bench_fmt_u64(char *dst, uint64_t v)
{
	char tmp[20];
	size_t n = 0, i;

	do {
		tmp[n++] = (char)('0' + v % 10u);
		v /= 10u;
	} while (v != 0);
	for (i = 0; i < n; i++)
		dst[i] = tmp[n - 1 - i];
	return n;
}

/* The account for the next request of thread <t>: uniform over --keys, or
 * one of the first --hot accounts with probability --hot-pct. Writes the key
 * into <key> (BENCH_KEY_MAX bytes), returns its length. */
static size_t bench_pick_key(struct bench_thread *t, char *key)
{
	const struct bench_opts *o = t->o;
	size_t plen = strlen(o->key_prefix);
	uint64_t id;

	if (o->hot > 0 && (double)bench_rng_below(&t->rng, 1000000u) < o->hot_pct * 10000.0)
		id = bench_rng_below(&t->rng, o->hot);
	else
		id = bench_rng_below(&t->rng, o->keys);
	memcpy(key, o->key_prefix, plen);
	return plen + bench_fmt_u64(key + plen, id);
}

/* One NOTIFY with message "ratelimit" {policy STR, key STR, cost INT64},
 * written into the caller's <dst>. Returns bytes or -1. */
static int bench_enc_notify(unsigned char *dst, size_t cap, const struct bench_opts *o,
                            uint64_t sid, const char *key, size_t key_len)
{
	struct spop_data policy = { .type = SPOP_T_STR, .v.s = { o->policy, strlen(o->policy) } };
	struct spop_data k = { .type = SPOP_T_STR, .v.s = { key, key_len } };
	struct spop_data cost = { .type = SPOP_T_INT64, .v.i = o->cost };
	struct spop_writer w;

	spop_notify_begin(&w, dst, cap, sid, 1);
	spop_notify_message(&w, "ratelimit", 3);
	spop_notify_arg(&w, "policy", &policy);
	spop_notify_arg(&w, "key", &k);
	spop_notify_arg(&w, "cost", &cost);
	return spop_notify_end(&w);
}

/* Upper bound of one NOTIFY's size for options <o>. */
static size_t bench_notify_max(const struct bench_opts *o)
{
	return 4 + 1 + 4 + 2 * SPOP_VARINT_MAX_LEN + 10 + 1 +
	       (7 + 1 + SPOP_VARINT_MAX_LEN + strlen(o->policy)) +
	       (4 + 1 + SPOP_VARINT_MAX_LEN + BENCH_KEY_MAX) +
	       (5 + 1 + SPOP_VARINT_MAX_LEN);
}

/* ------------------------------------------------------------------------
 * What the agent sends (AGENT-HELLO, ACK, AGENT-DISCONNECT), decoded by the
 * codec's spop_decode_frame(); here only what the bench expects of it.
 */

/* Check decoded AGENT-HELLO <h>: version "2.0", a max-frame-size in
 * [256, <ours>] and "pipelining" when <want_pipelining>. Sets <*frame_max>.
 * Returns 0 or -1 with <err>. */
static int bench_check_agent_hello(const struct spop_hello *h, uint32_t ours,
                                   bool want_pipelining, uint32_t *frame_max,
                                   char *err, size_t errlen)
{
	if (!h->has_versions || !h->has_max_frame_size || !h->has_capabilities) {
		snprintf(err, errlen, "AGENT-HELLO lacks %s", !h->has_versions ? "version" :
		         !h->has_max_frame_size ? "max-frame-size" : "capabilities");
		return -1;
	}
	if (!spop_str_eq(h->versions, SPOP_VERSION)) {
		snprintf(err, errlen, "AGENT-HELLO version is not \"2.0\"");
		return -1;
	}
	if (h->max_frame_size < SPOP_MIN_FRAME_SIZE || h->max_frame_size > ours) {
		snprintf(err, errlen, "AGENT-HELLO max-frame-size %" PRIu32
		         " outside [256, %" PRIu32 "]", h->max_frame_size, ours);
		return -1;
	}
	if (want_pipelining && !h->cap_pipelining) {
		snprintf(err, errlen, "agent did not announce pipelining (use -d 1)");
		return -1;
	}
	*frame_max = h->max_frame_size;
	return 0;
}

/* Count <reason> (an error's reason variable) in thread <t>'s small table;
 * the name is copied, <reason> is only borrowed. */
static void bench_count_reason(struct bench_thread *t, struct spop_str reason)
{
	unsigned i;

	for (i = 0; i < BENCH_REASONS; i++) {
		struct bench_reason *r = &t->reasons[i];

		if (r->n == 0) {
			size_t n = reason.len < sizeof(r->name) - 1 ? reason.len : sizeof(r->name) - 1;

			memcpy(r->name, reason.ptr, n);
			r->name[n] = '\0';
			r->n = 1;
			return;
		}
		if (strlen(r->name) == reason.len && memcmp(r->name, reason.ptr, reason.len) == 0) {
			r->n++;
			return;
		}
	}
	t->reasons_other++;
}

/* The status of decoded ACK <acts> (its "status" set-var), counting an
 * error's reason in thread <t>. */
static enum bench_status bench_ack_status(struct bench_thread *t,
                                          const struct spop_actions *acts)
{
	struct spop_str reason = { "-", 1 };
	enum bench_status st = BENCH_STATUS_NONE;
	struct spop_action a;
	struct spop_iter it;

	spop_iter_actions(acts, &it);
	while (spop_next_action(&it, &a)) {
		if (a.type != SPOP_ACT_SET_VAR || a.value.type != SPOP_T_STR)
			continue;
		if (spop_str_eq(a.name, "status")) {
			if (spop_str_eq(a.value.v.s, "allow"))
				st = BENCH_STATUS_ALLOW;
			else if (spop_str_eq(a.value.v.s, "deny"))
				st = BENCH_STATUS_DENY;
			else if (spop_str_eq(a.value.v.s, "error"))
				st = BENCH_STATUS_ERROR;
		} else if (spop_str_eq(a.name, "reason")) {
			reason = a.value.v.s;
		}
	}
	if (st == BENCH_STATUS_ERROR)
		bench_count_reason(t, reason);
	return st;
}

/* ------------------------------------------------------------------------
 * Connections.
 */

static void bench_conn_on_read(struct ev_loop *loop, ev_io *w, int revents);
static void bench_conn_on_write(struct ev_loop *loop, ev_io *w, int revents);
static void bench_thread_open_more(struct bench_thread *t);

/* Close <c> for good. <why> is NULL for a planned close; otherwise the
 * connection failed and the thread records why. */
static void bench_conn_close(struct bench_conn *c, const char *why)
{
	struct bench_thread *t = c->t;

	if (c->state == BENCH_CONN_ST_CLOSED || c->state == BENCH_CONN_ST_INIT) {
		c->state = BENCH_CONN_ST_CLOSED;
		return;
	}
	if (c->state == BENCH_CONN_ST_CONNECTING || c->state == BENCH_CONN_ST_HELLO) {
		t->opening--;
		t->failed++;
	} else if (c->state == BENCH_CONN_ST_READY) {
		t->ready--;
	}
	ev_io_stop(t->loop, &c->rd);
	ev_io_stop(t->loop, &c->wr);
	close(c->fd);
	c->fd = -1;
	c->state = BENCH_CONN_ST_CLOSED;
	if (why != NULL) {
		char msg[BENCH_ERR_LEN];

		snprintf(msg, sizeof(msg), "connection %u: %s", (unsigned)(c - t->conns), why);
		bench_thread_error(t, msg);
		t->conn_errors++;
	}
	if (!c->idle) {
		/* what was in flight will never be answered */
		t->lost += t->o->depth - c->nfree;
		t->inflight -= t->o->depth - c->nfree;
		c->nfree = t->o->depth;
	}
}

/* A protocol violation on <c>: count it, close, and stop the whole run
 * (numbers measured against a broken peer are meaningless). */
static void bench_conn_protocol_error(struct bench_conn *c, const char *why)
{
	struct bench_thread *t = c->t;
	char msg[BENCH_ERR_LEN];

	snprintf(msg, sizeof(msg), "connection %u: %s", (unsigned)(c - t->conns), why);
	bench_thread_error(t, msg);
	t->proto_errors++;
	bench_conn_close(c, NULL);
	atomic_store_explicit(&bench_abort, true, memory_order_relaxed);
}

/* Write what <c> has buffered; arms the write watcher on a short write.
 * Returns 0 or -1 (connection closed). */
static int bench_conn_flush(struct bench_conn *c)
{
	while (c->woff < c->wlen) {
		ssize_t n = write(c->fd, c->wbuf + c->woff, c->wlen - c->woff);

		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				ev_io_start(c->t->loop, &c->wr);
				return 0;
			}
			bench_conn_close(c, strerror(errno));
			return -1;
		}
		c->woff += (size_t)n;
	}
	c->woff = 0;
	c->wlen = 0;
	ev_io_stop(c->t->loop, &c->wr);
	return 0;
}

/* May thread <t> send one more NOTIFY? */
static bool bench_may_send(const struct bench_thread *t)
{
	if (t->phase != BENCH_PHASE_LOAD)
		return false;
	if (t->o->requests > 0 && t->quota == 0)
		return false;
	return true;
}

/* Fill every free slot of <c> with a new NOTIFY, then write. */
static void bench_conn_fill(struct bench_conn *c)
{
	struct bench_thread *t = c->t;
	const struct bench_opts *o = t->o;
	uint64_t now;
	int n;

	if (c->state != BENCH_CONN_ST_READY || c->idle || c->nfree == 0 || !bench_may_send(t))
		return;
	if (c->woff > 0) {
		memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
		c->wlen -= c->woff;
		c->woff = 0;
	}
	now = bench_now_ns();
	while (c->nfree > 0 && bench_may_send(t)) {
		unsigned slot = c->free_slots[c->nfree - 1];
		char key[BENCH_KEY_MAX];
		size_t klen = bench_pick_key(t, key);
		/* stream-id = seq * depth + slot + 1: unique on the conn, never 0
		 * (3.x refuses sid 0), and it names its slot, so an ACK finds
		 * its NOTIFY in O(1) whatever order it comes back in */
		uint64_t sid = c->seq * o->depth + slot + 1;

		n = bench_enc_notify(c->wbuf + c->wlen, c->wcap - c->wlen, o, sid, key, klen);
		if (n == -1) {
			/* cannot happen: wcap holds depth NOTIFYs of maximum size */
			bench_conn_protocol_error(c, "internal: write buffer overflow");
			return;
		}
		c->wlen += (size_t)n;
		c->nfree--;
		c->seq++;
		c->slots[slot].busy = true;
		c->slots[slot].stream_id = sid;
		c->slots[slot].t0_ns = now;
		t->inflight++;
		t->sent++;
		if (o->requests > 0)
			t->quota--;
	}
	bench_conn_flush(c);
}

/* Handle decoded frame <f> on <c>, received at <now>. Returns 0, or -1
 * when the connection was closed. */
static int bench_conn_frame(struct bench_conn *c, const struct spop_frame *f, uint64_t now)
{
	struct bench_thread *t = c->t;
	const struct bench_opts *o = t->o;
	uint64_t sid = f->hdr.stream_id, fid = f->hdr.frame_id;
	char err[BENCH_ERR_LEN];

	switch (f->hdr.type) {
	case SPOP_FRAME_AGENT_HELLO:
		if (c->state != BENCH_CONN_ST_HELLO) {
			snprintf(err, sizeof(err), "AGENT-HELLO after the handshake");
			goto proto;
		}
		if (bench_check_agent_hello(&f->u.hello, o->max_frame_size, o->depth > 1 && !c->idle,
		                            &c->frame_max, err, sizeof(err)) == -1)
			goto proto;
		c->state = BENCH_CONN_ST_READY;
		t->opening--;
		t->ready++;
		if (t->phase == BENCH_PHASE_SETUP)
			bench_thread_open_more(t);
		return 0;
	case SPOP_FRAME_ACK: {
		unsigned slot;
		enum bench_status st;

		if (c->state != BENCH_CONN_ST_READY) {
			snprintf(err, sizeof(err), "ACK before AGENT-HELLO");
			goto proto;
		}
		slot = sid == 0 ? o->depth : (unsigned)((sid - 1) % o->depth);
		if (slot >= o->depth || !c->slots[slot].busy ||
		    c->slots[slot].stream_id != sid || fid != 1) {
			snprintf(err, sizeof(err), "ACK for unknown stream-id %" PRIu64
			         " frame-id %" PRIu64, sid, fid);
			goto proto;
		}
		st = bench_ack_status(t, &f->u.ack);
		bench_hist_record(&t->hist, now - c->slots[slot].t0_ns);
		c->slots[slot].busy = false;
		c->free_slots[c->nfree++] = slot;
		t->inflight--;
		t->acked++;
		t->status[st]++;
		if (now > t->end_ns)
			t->end_ns = now;
		return 0;
	}
	case SPOP_FRAME_AGENT_DISCONNECT: {
		uint32_t status = f->u.disconnect.status;
		struct spop_str msg = f->u.disconnect.message;

		snprintf(err, sizeof(err), "AGENT-DISCONNECT status %" PRIu32 " (%s): %.*s",
		         status, spop_status_str(status), (int)msg.len, msg.ptr ? msg.ptr : "");
		/* status 0 is the agent draining: normal for an idle conn,
		 * a lost connection for a loaded one; anything else is a
		 * complaint about what we sent */
		if (status == SPOP_ST_NORMAL) {
			if (c->idle)
				t->idle_closed++;
			bench_conn_close(c, c->idle ? NULL : err);
			return -1;
		}
		goto proto;
	}
	default:
		snprintf(err, sizeof(err), "unexpected frame type %d", (int)f->hdr.type);
		goto proto;
	}
proto:
	bench_conn_protocol_error(c, err);
	return -1;
}

/* Decode every complete frame in <c>'s read buffer. Returns 0, or -1 when
 * the connection was closed. */
static int bench_conn_process(struct bench_conn *c)
{
	size_t off = 0;
	uint64_t now = bench_now_ns();
	uint32_t max = c->state == BENCH_CONN_ST_READY ? c->frame_max : c->t->o->max_frame_size;

	while (off < c->rlen) {
		struct spop_frame f;
		enum spop_status st = SPOP_ST_INVALID;
		int r = spop_decode_frame(c->rbuf + off, c->rlen - off, max, &f, &st);

		if (r == -1) {
			char err[BENCH_ERR_LEN];

			snprintf(err, sizeof(err), "bad frame: %s", spop_status_str(st));
			bench_conn_protocol_error(c, err);
			return -1;
		}
		if (r == 0)
			break;
		if (bench_conn_frame(c, &f, now) == -1)
			return -1;
		off += (size_t)r;
	}
	if (off > 0) {
		memmove(c->rbuf, c->rbuf + off, c->rlen - off);
		c->rlen -= off;
	}
	return 0;
}

/* Readable: pull what the agent sent into <w>'s conn, handle every whole
 * frame, refill the freed slots. <loop> and <revents> are implied. */
static void bench_conn_on_read(struct ev_loop *loop, ev_io *w, int revents)
{
	struct bench_conn *c = w->data;
	ssize_t n;

	(void)loop;
	(void)revents;
	n = read(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen);
	if (n == -1) {
		if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
			return;
		bench_conn_close(c, strerror(errno));
		return;
	}
	if (n == 0) {
		if (c->idle && c->state == BENCH_CONN_ST_READY) {
			c->t->idle_closed++;
			bench_conn_close(c, NULL);
		} else {
			bench_conn_close(c, "closed by the agent");
		}
		return;
	}
	c->rlen += (size_t)n;
	if (bench_conn_process(c) == -1)
		return;
	bench_conn_fill(c);
}

/* Send the HAPROXY-HELLO on <c> now that it is connected. */
static void bench_conn_hello(struct bench_conn *c)
{
	int n = bench_enc_hello(c->wbuf, c->wcap, c->t->o->max_frame_size, &c->t->rng);

	/* cannot fail: wcap is at least 1 KiB, a HELLO about 100 bytes */
	c->wlen = n > 0 ? (size_t)n : 0;
	c->woff = 0;
	c->state = BENCH_CONN_ST_HELLO;
	ev_io_start(c->t->loop, &c->rd);
	bench_conn_flush(c);
}

/* Writable: finish the connect (then send HELLO) or the pending writes of
 * <w>'s conn. <loop> and <revents> are implied. */
static void bench_conn_on_write(struct ev_loop *loop, ev_io *w, int revents)
{
	struct bench_conn *c = w->data;

	(void)loop;
	(void)revents;
	if (c->state == BENCH_CONN_ST_CONNECTING) {
		int soerr = 0;
		socklen_t sl = sizeof(soerr);

		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == -1)
			soerr = errno;
		if (soerr != 0) {
			bench_conn_close(c, strerror(soerr));
			return;
		}
		ev_io_stop(c->t->loop, &c->wr);
		bench_conn_hello(c);
		return;
	}
	bench_conn_flush(c);
}

/* Start connecting <c> to the target. Returns 0 or -1 (counted as failed). */
static int bench_conn_open(struct bench_conn *c)
{
	struct bench_thread *t = c->t;
	const struct bench_opts *o = t->o;
	int fd, one = 1;

	fd = socket(o->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1) {
		bench_thread_error(t, strerror(errno));
		t->failed++;
		t->conn_errors++;
		c->state = BENCH_CONN_ST_CLOSED;
		return -1;
	}
	if (o->sa.ss_family != AF_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->fd = fd;
	c->state = BENCH_CONN_ST_CONNECTING;
	t->opening++;
	ev_io_init(&c->rd, bench_conn_on_read, fd, EV_READ);
	ev_io_init(&c->wr, bench_conn_on_write, fd, EV_WRITE);
	c->rd.data = c;
	c->wr.data = c;
	if (connect(fd, (const struct sockaddr *)&o->sa, o->salen) == -1 && errno != EINPROGRESS) {
		bench_conn_close(c, strerror(errno));
		return -1;
	}
	ev_io_start(t->loop, &c->wr);
	return 0;
}

/* Allocates <c>'s buffers and slot table; bench_conn_release() frees them.
 * Idle connections get small buffers: they only ever see AGENT-HELLO. */
static int bench_conn_alloc(struct bench_conn *c, struct bench_thread *t, bool idle)
{
	const struct bench_opts *o = t->o;
	unsigned i;

	memset(c, 0, sizeof(*c));
	c->t = t;
	c->fd = -1;
	c->idle = idle;
	c->state = BENCH_CONN_ST_INIT;
	c->rcap = idle ? 4096u : 2u * ((size_t)o->max_frame_size + 4u);
	c->wcap = 1024u + (idle ? 0u : o->depth * bench_notify_max(o));
	c->rbuf = malloc(c->rcap);
	c->wbuf = malloc(c->wcap);
	if (!idle) {
		c->slots = calloc(o->depth, sizeof(*c->slots));
		c->free_slots = calloc(o->depth, sizeof(*c->free_slots));
	}
	if (c->rbuf == NULL || c->wbuf == NULL ||
	    (!idle && (c->slots == NULL || c->free_slots == NULL)))
		return -1;
	if (!idle) {
		/* pop order 0, 1, 2...: the stack holds them reversed */
		for (i = 0; i < o->depth; i++)
			c->free_slots[i] = o->depth - 1 - i;
		c->nfree = o->depth;
	}
	return 0;
}

/* Frees what bench_conn_alloc() allocated in <c>. */
static void bench_conn_release(struct bench_conn *c)
{
	free(c->rbuf);
	c->rbuf = NULL;
	free(c->wbuf);
	c->wbuf = NULL;
	free(c->slots);
	c->slots = NULL;
	free(c->free_slots);
	c->free_slots = NULL;
}

/* Say goodbye like HAProxy does on shutdown, best effort, and close. */
static void bench_conn_goodbye(struct bench_conn *c)
{
	int n;

	if (c->state != BENCH_CONN_ST_READY)
		return;
	if (c->woff == c->wlen) {
		n = spop_encode_haproxy_disconnect(c->wbuf, c->wcap, SPOP_ST_NORMAL, "normal");
		if (n > 0 && write(c->fd, c->wbuf, (size_t)n) == -1) {
			/* the agent may already be gone: nothing to report */
		}
	}
	c->wlen = c->woff = 0;
	bench_conn_close(c, NULL);
}

/* ------------------------------------------------------------------------
 * Threads.
 */

/* Open connections of <t> until BENCH_MAX_OPENING are in progress, so that
 * 1,000 idle connections do not overflow the agent's listen backlog. */
static void bench_thread_open_more(struct bench_thread *t)
{
	while (t->next_open < t->nconns && t->opening < BENCH_MAX_OPENING)
		bench_conn_open(&t->conns[t->next_open++]);
}

/* Every BENCH_TICK_S on <loop>: move <w>'s thread through its phases (setup
 * done, time up or count reached, drain done or timed out) and obey abort
 * and signals. */
static void bench_thread_on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct bench_thread *t = w->data;
	double now = ev_now(loop);

	(void)revents;
	if (atomic_load_explicit(&bench_abort, memory_order_relaxed)) {
		ev_break(loop, EVBREAK_ALL);
		return;
	}
	switch (t->phase) {
	case BENCH_PHASE_SETUP:
		bench_thread_open_more(t);
		if (t->ready + t->failed == t->nconns || now >= t->deadline) {
			if (t->ready + t->failed != t->nconns)
				bench_thread_error(t, "handshake timed out");
			ev_break(loop, EVBREAK_ALL);
		}
		return;
	case BENCH_PHASE_LOAD:
		if (bench_signalled || now >= t->deadline ||
		    (t->o->requests > 0 && t->quota == 0)) {
			t->phase = BENCH_PHASE_DRAIN;
			t->drain_deadline = now + t->o->drain_s;
		}
		break;
	case BENCH_PHASE_DRAIN:
		if (now >= t->drain_deadline) {
			/* bench_conn_close() counts them as lost */
			bench_thread_error(t, "some NOTIFYs were never acknowledged");
			ev_break(loop, EVBREAK_ALL);
			return;
		}
		break;
	case BENCH_PHASE_DONE:
	case BENCH_PHASE_COUNT:
		ev_break(loop, EVBREAK_ALL);
		return;
	}
	if (t->phase == BENCH_PHASE_DRAIN && t->inflight == 0) {
		t->phase = BENCH_PHASE_DONE;
		ev_break(loop, EVBREAK_ALL);
	}
}

/* One client thread <arg> (a struct bench_thread): its connections, its
 * loop, its counters. Borrows the options; owns nothing it must free (main
 * releases the buffers after the join). */
static void *bench_thread_main(void *arg)
{
	struct bench_thread *t = arg;
	const struct bench_opts *o = t->o;
	unsigned i;

	/* Step 1: connect and handshake every connection of this thread. */
	t->phase = BENCH_PHASE_SETUP;
	t->deadline = ev_now(t->loop) + BENCH_SETUP_TIMEOUT_S;
	ev_timer_init(&t->tick, bench_thread_on_tick, 0.0, BENCH_TICK_S);
	t->tick.data = t;
	ev_timer_again(t->loop, &t->tick);
	bench_thread_open_more(t);
	if (t->nconns > 0)
		ev_run(t->loop, 0);
	if (t->failed > 0 || t->ready != t->nconns)
		atomic_store_explicit(&bench_setup_failed, true, memory_order_relaxed);

	/* Step 2: everyone starts the clock together. */
	pthread_barrier_wait(&bench_barrier);
	if (atomic_load_explicit(&bench_setup_failed, memory_order_relaxed) ||
	    atomic_load_explicit(&bench_abort, memory_order_relaxed))
		goto out;

	/* Step 3: load until the duration or the count is done, then drain. */
	if (t->id == 0 && o->idle > 0)
		fprintf(stderr, "spoa-bench: %u idle connection(s) ready\n", o->idle);
	ev_now_update(t->loop);
	t->phase = BENCH_PHASE_LOAD;
	t->deadline = o->requests > 0 ? ev_now(t->loop) + 1e9 : ev_now(t->loop) + o->duration_s;
	t->start_ns = bench_now_ns();
	t->end_ns = t->start_ns;
	for (i = 0; i < t->nload; i++)
		bench_conn_fill(&t->conns[i]);
	ev_run(t->loop, 0);
	if (o->requests == 0 && t->nload == 0)
		t->end_ns = bench_now_ns();

out:
	/* Step 4: goodbye frames, then close everything. */
	ev_timer_stop(t->loop, &t->tick);
	for (i = 0; i < t->nconns; i++)
		bench_conn_goodbye(&t->conns[i]);
	for (i = 0; i < t->nconns; i++)
		if (t->conns[i].state != BENCH_CONN_ST_CLOSED && t->conns[i].state != BENCH_CONN_ST_INIT)
			bench_conn_close(&t->conns[i], NULL);
	return NULL;
}

/* ------------------------------------------------------------------------
 * Options and report.
 */

/* The --help text, on <out>. */
static void bench_usage(FILE *out)
{
	fprintf(out,
"usage: spoa-bench [options]\n"
"\n"
"An SPOP load generator that plays HAProxy against a rate-limit agent: it opens\n"
"connections, does the HELLO handshake (version 2.0, pipelining), then keeps NOTIFY\n"
"frames in flight, each with the message \"ratelimit\" and the args policy (STR),\n"
"key (STR), cost (INT64), exactly as HAProxy sends them. It prints throughput,\n"
"latency percentiles and the allow/deny/error counts from the ACKs' status var.\n"
"\n"
"Target and load:\n"
"  -a, --address ADDR     agent address: host:port, [v6]:port or unix:/path\n"
"                         (default 127.0.0.1:12345)\n"
"  -c, --connections N    load connections (default 8); 0 with --idle only\n"
"  -d, --depth N          NOTIFYs in flight per connection (default 16);\n"
"                         1 = one at a time, >1 needs the agent's pipelining\n"
"  -T, --threads N        client threads, connections split over them (default 1)\n"
"  -t, --duration TIME    run for TIME: 10, 10s, 500ms, 1m (default 5s)\n"
"  -n, --requests N       send exactly N NOTIFYs instead of running for a duration\n"
"      --idle N           also open N idle connections (HELLO, then silent) and hold\n"
"                         them for the run, e.g. to measure the agent's memory\n"
"\n"
"Message:\n"
"  -p, --policy NAME      policy arg (default \"transfer\")\n"
"  -k, --keys N           accounts, keys uniform over <prefix>0..<prefix>N-1 (default 10000)\n"
"      --hot N            a hot set: the first N accounts ...\n"
"      --hot-pct P        ... receive P%% of the requests (0..100, default 0)\n"
"      --key-prefix S     key prefix (default \"ACC-\")\n"
"      --cost N           cost arg, INT64 (default 1)\n"
"\n"
"Protocol:\n"
"      --max-frame-size N max-frame-size offered in HELLO (default 16380, as HAProxy)\n"
"      --drain-timeout T  after the run, wait at most T for the last ACKs (default 5s)\n"
"      --seed N           PRNG seed for the keys (default: time-based)\n"
"\n"
"Output:\n"
"      --csv              print one CSV line (columns: see --csv-header)\n"
"      --csv-header       print the CSV header line and exit\n"
"      --json             print one JSON object on one line\n"
"  -q, --quiet            no text report (implied by --csv/--json)\n"
"      --strict           exit 3 if any ACK says \"error\" or carries no status\n"
"  -h, --help             this text\n"
"  -V, --version          print the version\n"
"\n"
"Latency is measured from the write of a NOTIFY to the read of its ACK, in a\n"
"log-linear histogram (<1.6%% error); percentiles are bucket upper bounds.\n"
"ACKs are matched by stream-id and frame-id and may arrive in any order.\n"
"\n"
"Exit status: 0 done; 1 protocol or connection error, or ACKs missing after the\n"
"drain; 2 usage; 3 --strict and some ACK said \"error\" or had no status.\n"
"\n"
"Example: spoa-bench -a 127.0.0.1:12345 -c 16 -d 16 -T 2 -t 10s -k 10000 \\\n"
"            --hot 5 --hot-pct 20 -p transfer\n");
}

static const char bench_csv_header[] =
	"target,threads,connections,depth,keys,hot,hot_pct,policy,duration_s,"
	"sent,acked,msgs_per_s,p50_us,p99_us,p999_us,max_us,mean_us,"
	"allow,deny,error,no_status,protocol_errors,connection_errors,lost";

/* Parse an unsigned integer in [<lo>, <hi>] from <s>. Returns 0 or -1. */
static int bench_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (*s == '\0' || *s == '-')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* Parse a duration "<n>[ms|s|m]" (bare number = seconds) into <*secs>. */
static int bench_parse_seconds(const char *s, double *secs)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || v < 0)
		return -1;
	if (*end == '\0' || strcmp(end, "s") == 0)
		*secs = v;
	else if (strcmp(end, "ms") == 0)
		*secs = v / 1000.0;
	else if (strcmp(end, "m") == 0)
		*secs = v * 60.0;
	else
		return -1;
	return 0;
}

/* Resolve <o->address> into <o->sa>. Returns 0 or -1 with <err>. */
static int bench_resolve(struct bench_opts *o, char *err, size_t errlen)
{
	struct addrinfo hints, *res = NULL;
	char host[256], *colon;
	const char *port;
	int rc;

	memset(&o->sa, 0, sizeof(o->sa));
	if (strncmp(o->address, "unix:", 5) == 0) {
		struct sockaddr_un *un = (struct sockaddr_un *)&o->sa;
		const char *path = o->address + 5;

		if (strlen(path) == 0 || strlen(path) >= sizeof(un->sun_path)) {
			snprintf(err, errlen, "bad unix socket path: %.200s", path);
			return -1;
		}
		un->sun_family = AF_UNIX;
		memcpy(un->sun_path, path, strlen(path) + 1);
		o->salen = (socklen_t)sizeof(*un);
		return 0;
	}
	if (snprintf(host, sizeof(host), "%s", o->address) >= (int)sizeof(host)) {
		snprintf(err, errlen, "address too long");
		return -1;
	}
	colon = strrchr(host, ':');
	if (colon == NULL || colon[1] == '\0') {
		snprintf(err, errlen, "address needs host:port or unix:/path: %.200s", o->address);
		return -1;
	}
	*colon = '\0';
	port = colon + 1;
	if (host[0] == '[') {
		size_t hl = strlen(host);

		if (hl < 2 || host[hl - 1] != ']') {
			snprintf(err, errlen, "bad IPv6 address: %.200s", o->address);
			return -1;
		}
		host[hl - 1] = '\0';
		memmove(host, host + 1, hl - 1);
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	rc = getaddrinfo(host, port, &hints, &res);
	if (rc != 0) {
		snprintf(err, errlen, "%.200s: %s", o->address, gai_strerror(rc));
		return -1;
	}
	memcpy(&o->sa, res->ai_addr, res->ai_addrlen);
	o->salen = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

enum bench_longopt {
	BENCH_OPT_IDLE = 256,
	BENCH_OPT_HOT,
	BENCH_OPT_HOT_PCT,
	BENCH_OPT_KEY_PREFIX,
	BENCH_OPT_COST,
	BENCH_OPT_MAX_FRAME,
	BENCH_OPT_DRAIN,
	BENCH_OPT_SEED,
	BENCH_OPT_CSV,
	BENCH_OPT_CSV_HEADER,
	BENCH_OPT_JSON,
	BENCH_OPT_STRICT,
	BENCH_OPT_COUNT
};

/* Fill <o> from <argc>/<argv>. Returns 0, 1 when the program should exit 0
 * (help, version), or -1 with <err>. */
static int bench_parse_args(int argc, char **argv, struct bench_opts *o,
                            char *err, size_t errlen)
{
	static const struct option longopts[] = {
		{ "address", required_argument, NULL, 'a' },
		{ "connections", required_argument, NULL, 'c' },
		{ "depth", required_argument, NULL, 'd' },
		{ "keys", required_argument, NULL, 'k' },
		{ "policy", required_argument, NULL, 'p' },
		{ "duration", required_argument, NULL, 't' },
		{ "requests", required_argument, NULL, 'n' },
		{ "threads", required_argument, NULL, 'T' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "idle", required_argument, NULL, BENCH_OPT_IDLE },
		{ "hot", required_argument, NULL, BENCH_OPT_HOT },
		{ "hot-pct", required_argument, NULL, BENCH_OPT_HOT_PCT },
		{ "key-prefix", required_argument, NULL, BENCH_OPT_KEY_PREFIX },
		{ "cost", required_argument, NULL, BENCH_OPT_COST },
		{ "max-frame-size", required_argument, NULL, BENCH_OPT_MAX_FRAME },
		{ "drain-timeout", required_argument, NULL, BENCH_OPT_DRAIN },
		{ "seed", required_argument, NULL, BENCH_OPT_SEED },
		{ "csv", no_argument, NULL, BENCH_OPT_CSV },
		{ "csv-header", no_argument, NULL, BENCH_OPT_CSV_HEADER },
		{ "json", no_argument, NULL, BENCH_OPT_JSON },
		{ "strict", no_argument, NULL, BENCH_OPT_STRICT },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t v;
	int ch;
	bool seeded = false;

	memset(o, 0, sizeof(*o));
	snprintf(o->address, sizeof(o->address), "127.0.0.1:12345");
	snprintf(o->policy, sizeof(o->policy), "transfer");
	snprintf(o->key_prefix, sizeof(o->key_prefix), "ACC-");
	o->conns = 8;
	o->depth = 16;
	o->keys = 10000;
	o->cost = 1;
	o->duration_s = 5.0;
	o->threads = 1;
	o->max_frame_size = BENCH_DEFAULT_FRAME;
	o->drain_s = 5.0;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":a:c:d:k:p:t:n:T:qhV", longopts, NULL)) != -1) {
		const char *arg = optarg;

		switch (ch) {
		case 'a':
			if (snprintf(o->address, sizeof(o->address), "%s", arg) >= (int)sizeof(o->address))
				goto bad;
			break;
		case 'c':
			if (bench_parse_u64(arg, 0, 100000, &v) == -1)
				goto bad;
			o->conns = (unsigned)v;
			break;
		case 'd':
			if (bench_parse_u64(arg, 1, 4096, &v) == -1)
				goto bad;
			o->depth = (unsigned)v;
			break;
		case 'k':
			if (bench_parse_u64(arg, 1, UINT64_MAX, &o->keys) == -1)
				goto bad;
			break;
		case 'p':
			if (arg[0] == '\0' ||
			    snprintf(o->policy, sizeof(o->policy), "%s", arg) >= (int)sizeof(o->policy))
				goto bad;
			break;
		case 't':
			if (bench_parse_seconds(arg, &o->duration_s) == -1 || o->duration_s <= 0)
				goto bad;
			break;
		case 'n':
			if (bench_parse_u64(arg, 1, UINT64_MAX, &o->requests) == -1)
				goto bad;
			break;
		case 'T':
			if (bench_parse_u64(arg, 1, 256, &v) == -1)
				goto bad;
			o->threads = (unsigned)v;
			break;
		case 'q':
			o->quiet = true;
			break;
		case 'h':
			bench_usage(stdout);
			return 1;
		case 'V':
			printf("spoa-bench %s\n", SPOA_VERSION);
			return 1;
		case BENCH_OPT_IDLE:
			if (bench_parse_u64(arg, 0, 1000000, &v) == -1)
				goto bad;
			o->idle = (unsigned)v;
			break;
		case BENCH_OPT_HOT:
			if (bench_parse_u64(arg, 0, UINT64_MAX, &o->hot) == -1)
				goto bad;
			break;
		case BENCH_OPT_HOT_PCT: {
			char *end;

			errno = 0;
			o->hot_pct = strtod(arg, &end);
			if (errno != 0 || end == arg || *end != '\0' || o->hot_pct < 0 || o->hot_pct > 100)
				goto bad;
			break;
		}
		case BENCH_OPT_KEY_PREFIX:
			/* room for 20 digits under the 256-byte key limit */
			if (strlen(arg) > BENCH_KEY_MAX - 20 ||
			    snprintf(o->key_prefix, sizeof(o->key_prefix), "%s", arg) >= (int)sizeof(o->key_prefix))
				goto bad;
			break;
		case BENCH_OPT_COST:
			if (bench_parse_u64(arg, 0, INT64_MAX, &v) == -1)
				goto bad;
			o->cost = (int64_t)v;
			break;
		case BENCH_OPT_MAX_FRAME:
			if (bench_parse_u64(arg, SPOP_MIN_FRAME_SIZE, SPOP_MAX_FRAME_SIZE, &v) == -1)
				goto bad;
			o->max_frame_size = (uint32_t)v;
			break;
		case BENCH_OPT_DRAIN:
			if (bench_parse_seconds(arg, &o->drain_s) == -1)
				goto bad;
			break;
		case BENCH_OPT_SEED:
			if (bench_parse_u64(arg, 0, UINT64_MAX, &o->seed) == -1)
				goto bad;
			seeded = true;
			break;
		case BENCH_OPT_CSV:
			o->output = BENCH_OUT_CSV;
			break;
		case BENCH_OPT_CSV_HEADER:
			printf("%s\n", bench_csv_header);
			return 1;
		case BENCH_OPT_JSON:
			o->output = BENCH_OUT_JSON;
			break;
		case BENCH_OPT_STRICT:
			o->strict = true;
			break;
		case ':':
			snprintf(err, errlen, "option %s needs a value", argv[optind - 1]);
			return -1;
		default:
			snprintf(err, errlen, "unknown option %s", argv[optind - 1]);
			return -1;
		}
		continue;
bad:
		/* "--opt value" leaves optarg as its own argv word; "--opt=value"
		 * and "-cVALUE" point inside one */
		snprintf(err, errlen, "bad value '%s' for %s", arg,
		         optind >= 2 && argv[optind - 1] == optarg ? argv[optind - 2] : argv[optind - 1]);
		return -1;
	}
	if (optind < argc) {
		snprintf(err, errlen, "unexpected argument '%s'", argv[optind]);
		return -1;
	}
	if (o->conns == 0 && o->idle == 0) {
		snprintf(err, errlen, "nothing to do: -c 0 and no --idle");
		return -1;
	}
	if (o->conns == 0 && o->requests > 0) {
		snprintf(err, errlen, "-n needs load connections (-c)");
		return -1;
	}
	if (o->hot > o->keys) {
		snprintf(err, errlen, "--hot %" PRIu64 " is more than --keys %" PRIu64, o->hot, o->keys);
		return -1;
	}
	if (o->hot_pct > 0 && o->hot == 0) {
		snprintf(err, errlen, "--hot-pct needs --hot N");
		return -1;
	}
	if (o->threads > o->conns + o->idle)
		o->threads = o->conns + o->idle;
	if (!seeded)
		o->seed = bench_now_ns() ^ ((uint64_t)getpid() << 32);
	if (bench_resolve(o, err, errlen) == -1)
		return -1;
	return 0;
}

/* Everything the threads measured, added up. */
struct bench_total {
	uint64_t sent;
	uint64_t acked;
	uint64_t status[BENCH_STATUS_COUNT];
	uint64_t proto_errors;
	uint64_t conn_errors;
	uint64_t idle_closed;
	uint64_t lost;
	uint64_t reasons_other;
	struct bench_reason reasons[BENCH_REASONS];
	double elapsed_s;
	struct bench_hist hist;
	const char *err;
};

/* Sum <n> threads <ts> into <tot>. */
static void bench_total_sum(struct bench_total *tot, const struct bench_thread *ts, unsigned n)
{
	uint64_t start = UINT64_MAX, end = 0;
	unsigned i, j, k;

	memset(tot, 0, sizeof(*tot));
	for (i = 0; i < n; i++) {
		const struct bench_thread *t = &ts[i];

		tot->sent += t->sent;
		tot->acked += t->acked;
		for (j = 0; j < BENCH_STATUS_COUNT; j++)
			tot->status[j] += t->status[j];
		tot->proto_errors += t->proto_errors;
		tot->conn_errors += t->conn_errors;
		tot->idle_closed += t->idle_closed;
		tot->lost += t->lost;
		tot->reasons_other += t->reasons_other;
		for (j = 0; j < BENCH_REASONS && t->reasons[j].n > 0; j++) {
			for (k = 0; k < BENCH_REASONS; k++) {
				if (tot->reasons[k].n == 0) {
					tot->reasons[k] = t->reasons[j];
					break;
				}
				if (strcmp(tot->reasons[k].name, t->reasons[j].name) == 0) {
					tot->reasons[k].n += t->reasons[j].n;
					break;
				}
			}
			if (k == BENCH_REASONS)
				tot->reasons_other += t->reasons[j].n;
		}
		bench_hist_merge(&tot->hist, &t->hist);
		if (t->start_ns != 0 && t->start_ns < start)
			start = t->start_ns;
		if (t->end_ns > end)
			end = t->end_ns;
		if (tot->err == NULL && t->err[0] != '\0')
			tot->err = t->err;
	}
	tot->elapsed_s = end > start ? (double)(end - start) / 1e9 : 0.0;
}

/* Print <s> as a JSON string body (the values we print are plain ASCII
 * names, but a policy or address could hold a quote). */
static void bench_json_str(const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", (unsigned)(unsigned char)*s);
		else
			putchar(*s);
	}
}

/* Print <tot> for options <o> in the chosen output format. */
static void bench_report(const struct bench_opts *o, const struct bench_total *tot)
{
	double rate = tot->elapsed_s > 0 ? (double)tot->acked / tot->elapsed_s : 0.0;
	double p50 = (double)bench_hist_quantile(&tot->hist, 0.50) / 1e3;
	double p99 = (double)bench_hist_quantile(&tot->hist, 0.99) / 1e3;
	double p999 = (double)bench_hist_quantile(&tot->hist, 0.999) / 1e3;
	double max = (double)tot->hist.max_ns / 1e3;
	double mean = tot->hist.n ? (double)tot->hist.sum_ns / (double)tot->hist.n / 1e3 : 0.0;
	unsigned i;

	if (o->output == BENCH_OUT_CSV) {
		printf("%s,%u,%u,%u,%" PRIu64 ",%" PRIu64 ",%g,%s,%.3f,%" PRIu64 ",%" PRIu64
		       ",%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%" PRIu64 ",%" PRIu64 ",%" PRIu64
		       ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 "\n",
		       o->address, o->threads, o->conns, o->depth, o->keys, o->hot, o->hot_pct,
		       o->policy, tot->elapsed_s, tot->sent, tot->acked, rate, p50, p99, p999,
		       max, mean, tot->status[BENCH_STATUS_ALLOW], tot->status[BENCH_STATUS_DENY],
		       tot->status[BENCH_STATUS_ERROR], tot->status[BENCH_STATUS_NONE],
		       tot->proto_errors, tot->conn_errors, tot->lost);
		return;
	}
	if (o->output == BENCH_OUT_JSON) {
		printf("{\"target\":\"");
		bench_json_str(o->address);
		printf("\",\"threads\":%u,\"connections\":%u,\"depth\":%u,\"idle\":%u,"
		       "\"keys\":%" PRIu64 ",\"hot\":%" PRIu64 ",\"hot_pct\":%g,\"policy\":\"",
		       o->threads, o->conns, o->depth, o->idle, o->keys, o->hot, o->hot_pct);
		bench_json_str(o->policy);
		printf("\",\"duration_s\":%.3f,\"sent\":%" PRIu64 ",\"acked\":%" PRIu64
		       ",\"msgs_per_s\":%.1f,\"latency_us\":{\"p50\":%.1f,\"p99\":%.1f,"
		       "\"p999\":%.1f,\"max\":%.1f,\"mean\":%.1f},\"allow\":%" PRIu64
		       ",\"deny\":%" PRIu64 ",\"error\":%" PRIu64 ",\"no_status\":%" PRIu64
		       ",\"protocol_errors\":%" PRIu64 ",\"connection_errors\":%" PRIu64
		       ",\"idle_closed\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"error_reasons\":{",
		       tot->elapsed_s, tot->sent, tot->acked, rate, p50, p99, p999, max, mean,
		       tot->status[BENCH_STATUS_ALLOW], tot->status[BENCH_STATUS_DENY],
		       tot->status[BENCH_STATUS_ERROR], tot->status[BENCH_STATUS_NONE],
		       tot->proto_errors, tot->conn_errors, tot->idle_closed, tot->lost);
		for (i = 0; i < BENCH_REASONS && tot->reasons[i].n > 0; i++) {
			printf("%s\"", i ? "," : "");
			bench_json_str(tot->reasons[i].name);
			printf("\":%" PRIu64, tot->reasons[i].n);
		}
		printf("}}\n");
		return;
	}
	if (o->quiet)
		return;
	printf("spoa-bench %s -> %s: %u thread(s), %u connection(s) x depth %u",
	       SPOA_VERSION, o->address, o->threads, o->conns, o->depth);
	if (o->idle > 0)
		printf(", %u idle", o->idle);
	printf("\n  keys       %" PRIu64 " accounts", o->keys);
	if (o->hot > 0)
		printf(", hot %" PRIu64 " get %g%%", o->hot, o->hot_pct);
	printf(", policy \"%s\", cost %" PRId64 "\n", o->policy, o->cost);
	printf("  requests   %" PRIu64 " sent, %" PRIu64 " acked in %.3f s\n",
	       tot->sent, tot->acked, tot->elapsed_s);
	printf("  throughput %.1f msgs/s\n", rate);
	printf("  latency    p50 %.1f us  p99 %.1f us  p99.9 %.1f us  max %.1f us  (mean %.1f us)\n",
	       p50, p99, p999, max, mean);
	printf("  status    ");
	for (i = 0; i < BENCH_STATUS_COUNT; i++)
		printf(" %s %" PRIu64, bench_status_names[i], tot->status[i]);
	printf("\n");
	if (tot->status[BENCH_STATUS_ERROR] > 0) {
		printf("  reasons   ");
		for (i = 0; i < BENCH_REASONS && tot->reasons[i].n > 0; i++)
			printf(" %s %" PRIu64, tot->reasons[i].name, tot->reasons[i].n);
		if (tot->reasons_other > 0)
			printf(" (others) %" PRIu64, tot->reasons_other);
		printf("\n");
	}
	printf("  errors     protocol %" PRIu64 ", connection %" PRIu64 ", lost %" PRIu64,
	       tot->proto_errors, tot->conn_errors, tot->lost);
	if (tot->idle_closed > 0)
		printf(", idle closed by agent %" PRIu64, tot->idle_closed);
	printf("\n");
}

/* SIGINT/SIGTERM (<sig>): stop sending, drain, report as usual. */
static void bench_on_signal(int sig)
{
	(void)sig;
	bench_signalled = 1;
}

/* Make room for every socket we will open (1,000 idle connections and more). */
static void bench_raise_nofile(unsigned need)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == -1)
		return;
	if (rl.rlim_cur >= need + 64u)
		return;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need + 64u ?
	              need + 64u : rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
}

/* Owns the thread table and every connection's buffers; frees all before
 * returning. */
int main(int argc, char **argv)
{
	struct bench_opts o;
	struct bench_thread *ts = NULL;
	struct bench_total *tot = NULL;
	struct sigaction sa;
	char err[BENCH_ERR_LEN] = "";
	int rc, ret = BENCH_EXIT_PROTOCOL;
	unsigned i, j, started = 0;
	bool barrier = false;

	rc = bench_parse_args(argc, argv, &o, err, sizeof(err));
	if (rc == 1)
		return BENCH_EXIT_OK;
	if (rc == -1) {
		fprintf(stderr, "spoa-bench: %s (try --help)\n", err);
		return BENCH_EXIT_USAGE;
	}
	if (o.output != BENCH_OUT_TEXT)
		o.quiet = true;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	sa.sa_handler = bench_on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	bench_raise_nofile(o.conns + o.idle);

	/* bench_parse_args() refuses "nothing to do", so threads >= 1; said
	 * again for the analyzer (make lint), which cannot follow it there */
	if (o.threads == 0)
		o.threads = 1;
	ts = calloc(o.threads, sizeof(*ts));
	tot = calloc(1, sizeof(*tot));
	if (ts == NULL || tot == NULL) {
		fprintf(stderr, "spoa-bench: out of memory\n");
		goto out;
	}

	/* Step 1: split load and idle connections over the threads. */
	for (i = 0; i < o.threads; i++) {
		struct bench_thread *t = &ts[i];
		unsigned nl = o.conns / o.threads + (i < o.conns % o.threads ? 1u : 0u);
		unsigned ni = o.idle / o.threads + (i < o.idle % o.threads ? 1u : 0u);

		t->id = i;
		t->o = &o;
		t->rng = o.seed + 0x632be59bd9b4e019u * (i + 1u);
		t->nload = nl;
		t->nconns = nl + ni;
		if (o.requests > 0)
			t->quota = o.requests / o.threads + (i < o.requests % o.threads ? 1u : 0u);
		t->loop = ev_loop_new(EVFLAG_AUTO);
		t->conns = calloc(t->nconns ? t->nconns : 1u, sizeof(*t->conns));
		if (t->loop == NULL || t->conns == NULL) {
			fprintf(stderr, "spoa-bench: out of memory\n");
			goto out;
		}
		for (j = 0; j < t->nconns; j++) {
			if (bench_conn_alloc(&t->conns[j], t, j >= nl) == -1) {
				fprintf(stderr, "spoa-bench: out of memory\n");
				goto out;
			}
		}
	}

	/* Step 2: run. */
	if (pthread_barrier_init(&bench_barrier, NULL, o.threads) != 0) {
		fprintf(stderr, "spoa-bench: pthread_barrier_init failed\n");
		goto out;
	}
	barrier = true;
	for (i = 0; i < o.threads; i++) {
		if (pthread_create(&ts[i].tid, NULL, bench_thread_main, &ts[i]) != 0) {
			/* the barrier would wait forever for this thread */
			fprintf(stderr, "spoa-bench: pthread_create failed\n");
			abort();
		}
		started++;
	}
	for (i = 0; i < started; i++)
		pthread_join(ts[i].tid, NULL);

	/* Step 3: report. */
	bench_total_sum(tot, ts, o.threads);
	bench_report(&o, tot);
	if (tot->err != NULL)
		fprintf(stderr, "spoa-bench: %s\n", tot->err);
	if (atomic_load(&bench_setup_failed))
		fprintf(stderr, "spoa-bench: handshake failed on some connections\n");
	if (atomic_load(&bench_setup_failed) || atomic_load(&bench_abort) ||
	    tot->proto_errors > 0 || tot->conn_errors > 0 || tot->lost > 0)
		ret = BENCH_EXIT_PROTOCOL;
	else if (o.strict && (tot->status[BENCH_STATUS_ERROR] > 0 || tot->status[BENCH_STATUS_NONE] > 0))
		ret = BENCH_EXIT_STRICT;
	else
		ret = BENCH_EXIT_OK;

out:
	if (barrier)
		pthread_barrier_destroy(&bench_barrier);
	for (i = 0; ts != NULL && i < o.threads; i++) {
		if (ts[i].conns != NULL)
			for (j = 0; j < ts[i].nconns; j++)
				bench_conn_release(&ts[i].conns[j]);
		free(ts[i].conns);
		ts[i].conns = NULL;
		if (ts[i].loop != NULL)
			ev_loop_destroy(ts[i].loop);
	}
	free(ts);
	ts = NULL;
	free(tot);
	tot = NULL;
	return ret;
}
