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
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <ev.h>

#include "bench.h"

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
