/*
 * spoa-bench: one client thread. Its loop moves through setup (connect and
 * handshake), load (until the duration or the count), drain (the last
 * ACKs) and goodbye; the threads start the clock together at a barrier.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <ev.h>

#include "bench.h"

atomic_bool bench_abort;         /* a protocol error: stop everyone now */
atomic_bool bench_setup_failed;
volatile sig_atomic_t bench_signalled;
pthread_barrier_t bench_barrier;

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
void *bench_thread_main(void *arg)
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
