/*
 * spoa-bench's shared definitions: the options, a connection, a thread, the
 * totals, and what each file gives the others. Which file does what:
 *
 *   spoa-bench.c     main: options, threads, run, report, exit status
 *   bench_args.c     the command line and --help
 *   bench_thread.c   one client thread's loop and phases
 *   bench_conn.c     a connection: open, HELLO, NOTIFYs in flight, ACKs
 *   bench_frame.c    the frames sent and what is expected of the answers
 *   bench_report.c   the latency histogram, the totals, the report
 *
 * They call one way: spoa-bench.c -> bench_args, bench_thread,
 * bench_conn (buffers), bench_report; bench_thread -> bench_conn ->
 * bench_frame, bench_report (the histogram). Nothing calls back up.
 */
#ifndef BENCH_H
#define BENCH_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

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
#define BENCH_LEASE_LEN         32          /* txn.rl.lease: 32 hex digits */

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
	bool split;                     /* one write per NOTIFY (HAProxy 3.x) */
	uint64_t seed;
	double drain_s;
	enum bench_output output;
	bool quiet;
	bool strict;
	bool done;                      /* --done: ratelimit-done per lease */
	int64_t done_cost;              /* --done-cost; -1: no cost arg */
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

/* One NOTIFY in flight; its index in the conn's table is the slot number.
 * With --done a slot holds its request until the ratelimit-done that ends
 * it is acknowledged too, as HAProxy's stream lives until its response. */
struct bench_slot {
	uint64_t stream_id;
	uint64_t t0_ns;
	uint16_t key_len;               /* --done: its key, in the conn's keys */
	bool busy;
	bool done;                      /* the NOTIFY in flight is its ratelimit-done */
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
	char *keys;                     /* --done: each slot's key, BENCH_KEY_MAX apart */
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
	uint64_t done_sent;
	uint64_t done_acked;
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

/* Everything the threads measured, added up. */
struct bench_total {
	uint64_t sent;
	uint64_t acked;
	uint64_t done_sent;
	uint64_t done_acked;
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

extern atomic_bool bench_abort;         /* a protocol error: stop everyone now */
extern atomic_bool bench_setup_failed;
extern volatile sig_atomic_t bench_signalled;
extern pthread_barrier_t bench_barrier;

/* The clock and the PRNG run once per request: inline, in every file. */

/* Monotonic nanoseconds: latencies must not jump with the wall clock. */
static inline uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* splitmix64: one multiply-xorshift step per key, good enough for spreading
 * keys and much cheaper than rand_r(). Advances <*s>. */
static inline uint64_t bench_rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15u);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

/* Uniform in [0, <n>) for <n> >= 1; the modulo bias is below 2^-40 for any
 * account count we will see. */
static inline uint64_t bench_rng_below(uint64_t *s, uint64_t n)
{
	return bench_rng_next(s) % n;
}

/* bench_frame.c */
int bench_enc_hello(unsigned char *dst, size_t cap, uint32_t max_frame, uint64_t *rng);
size_t bench_pick_key(struct bench_thread *t, char *key);
int bench_enc_notify(unsigned char *dst, size_t cap, const struct bench_opts *o,
                     uint64_t sid, const char *key, size_t key_len);
int bench_enc_done(unsigned char *dst, size_t cap, const struct bench_opts *o,
                   uint64_t sid, const char *key, size_t key_len, const char *lease);
size_t bench_notify_max(const struct bench_opts *o);
int bench_check_agent_hello(const struct spop_hello *h, uint32_t ours,
                            bool want_pipelining, uint32_t *frame_max,
                            char *err, size_t errlen);
enum bench_status bench_ack_status(struct bench_thread *t, const struct spop_actions *acts,
                                   struct spop_str *lease);

/* bench_conn.c */
void bench_thread_error(struct bench_thread *t, const char *msg);
int bench_conn_alloc(struct bench_conn *c, struct bench_thread *t, bool idle);
void bench_conn_release(struct bench_conn *c);
void bench_conn_fill(struct bench_conn *c);
void bench_conn_close(struct bench_conn *c, const char *why);
void bench_conn_goodbye(struct bench_conn *c);
void bench_thread_open_more(struct bench_thread *t);

/* bench_thread.c */
void *bench_thread_main(void *arg);

/* bench_args.c */
int bench_parse_args(int argc, char **argv, struct bench_opts *o, char *err, size_t errlen);

/* bench_report.c */
void bench_hist_record(struct bench_hist *h, uint64_t ns);
void bench_total_sum(struct bench_total *tot, const struct bench_thread *ts, unsigned n);
void bench_report(const struct bench_opts *o, const struct bench_total *tot);

#endif
