/*
 * worker - a thread with its own loop, limiter and connections.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ev.h>

#include "conn.h"
#include "limiter.h"
#include "log.h"
#include "metrics.h"
#include "spop.h"
#include "worker.h"

#define WORKER_FDQ_MAX 4096

/* The per-worker view of a generation: requests in flight hold it. */
struct worker_cfg {
	struct conn_cfg_ref ref;
	struct cfg_gen *gen;
};

struct worker {
	unsigned id;
	pthread_t thread;
	bool started;
	struct ev_loop *loop;
	struct limiter *limiter;
	struct conn_env env;
	struct metrics metrics;
	const char *script;
	size_t script_len;

	ev_async wake;                  /* mailbox has something */
	ev_prepare flush;               /* write coalesced output once per iteration */
	ev_timer grace;                 /* drain deadline */

	pthread_mutex_t lock;           /* guards the mailbox below */
	int fdq[WORKER_FDQ_MAX];
	unsigned nfdq;
	struct cfg_gen *new_gen;
	bool drain;
	double drain_grace;
	_Atomic unsigned nconns;
};

struct cfg_gen *cfg_gen_new(const struct config *c)
{
	struct cfg_gen *g = calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	if (config_copy(&g->cfg, c) == -1) {
		free(g);
		return NULL;
	}
	atomic_init(&g->refs, 1);
	return g;
}

void cfg_gen_get(struct cfg_gen *g)
{
	atomic_fetch_add(&g->refs, 1);
}

void cfg_gen_put(struct cfg_gen *g)
{
	if (atomic_fetch_sub(&g->refs, 1) == 1) {
		config_release(&g->cfg);
		free(g);
	}
}

static void worker_cfg_release(struct conn_cfg_ref *ref)
{
	struct worker_cfg *wc = (struct worker_cfg *)ref;

	cfg_gen_put(wc->gen);
	free(wc);
}

/* Wrap <g> for this worker (one ref: "current"). Returns NULL on ENOMEM. */
static struct worker_cfg *worker_cfg_new(struct cfg_gen *g)
{
	struct worker_cfg *wc = calloc(1, sizeof(*wc));

	if (!wc)
		return NULL;
	cfg_gen_get(g);
	wc->gen = g;
	wc->ref.cfg = &g->cfg;
	wc->ref.refs = 1;
	wc->ref.release = worker_cfg_release;
	return wc;
}

static int worker_ops_check(void *ctx, const struct window_policy *p, const char *key,
                            size_t key_len, uint64_t cost, limiter_cb cb, void *arg)
{
	return limiter_check(ctx, p, key, key_len, cost, cb, arg);
}

static void worker_fill_settings(struct worker *w, const struct config *c,
                                 struct limiter_settings *s)
{
	memset(s, 0, sizeof(*s));
	s->redis_url = c->redis;
	s->timeout_ms = c->redis_timeout_ms;
	s->script = w->script;
	s->script_len = w->script_len;
	s->thread_id = w->id;
	s->metrics = &w->metrics;
	s->policies = c->policies;
	s->npolicies = c->npolicies;
}

/* Switch to <g> in the worker's own thread: new requests use it, requests
 * in flight keep theirs until they finish. */
static void worker_apply_config(struct worker *w, struct cfg_gen *g)
{
	struct worker_cfg *wc = worker_cfg_new(g);
	struct limiter_settings s;
	char err[256];

	cfg_gen_put(g);         /* the mailbox's reference */
	if (!wc) {
		log_error("reload_failed", "worker=%u reason=\"out of memory\"", w->id);
		return;
	}
	worker_fill_settings(w, &g->cfg, &s);
	if (limiter_reconfigure(w->limiter, &s, err, sizeof(err)) == -1)
		log_error("reload_failed", "worker=%u reason=\"%s\"", w->id, err);
	if (--w->env.cfg->refs == 0)
		w->env.cfg->release(w->env.cfg);
	w->env.cfg = &wc->ref;
	log_info("config_applied", "worker=%u policies=%zu", w->id, g->cfg.npolicies);
}

static void worker_on_idle(struct conn_env *env)
{
	struct worker *w = (struct worker *)((char *)env - offsetof(struct worker, env));

	ev_break(w->loop, EVBREAK_ALL);
}

static void worker_on_grace(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = t->data;

	(void)revents;
	log_warn("drain_timeout", "worker=%u open=%u", w->id, w->env.nconns);
	ev_break(loop, EVBREAK_ALL);
}

static void worker_on_wake(struct ev_loop *loop, ev_async *a, int revents)
{
	struct worker *w = a->data;
	int fds[WORKER_FDQ_MAX];
	unsigned nfds, i;
	struct cfg_gen *g;
	bool drain;
	double grace;

	(void)revents;
	pthread_mutex_lock(&w->lock);
	nfds = w->nfdq;
	memcpy(fds, w->fdq, nfds * sizeof(int));
	w->nfdq = 0;
	g = w->new_gen;
	w->new_gen = NULL;
	drain = w->drain;
	grace = w->drain_grace;
	pthread_mutex_unlock(&w->lock);

	if (g)
		worker_apply_config(w, g);
	for (i = 0; i < nfds; i++) {
		if (w->env.draining)
			close(fds[i]);
		else
			conn_accept(&w->env, fds[i]);
	}
	if (drain && !w->env.draining) {
		ev_timer_init(&w->grace, worker_on_grace, grace, 0.0);
		w->grace.data = w;
		ev_timer_start(loop, &w->grace);
		conn_env_drain(&w->env);
	}
	atomic_store(&w->nconns, w->env.nconns);
}

static void worker_on_prepare(struct ev_loop *loop, ev_prepare *p, int revents)
{
	struct worker *w = p->data;

	(void)loop;
	(void)revents;
	conn_env_flush(&w->env);
	atomic_store_explicit(&w->nconns, w->env.nconns, memory_order_relaxed);
}

struct worker *worker_new(unsigned id, struct cfg_gen *g, const char *script,
                          size_t script_len, char *err, size_t errlen)
{
	struct worker *w = calloc(1, sizeof(*w));
	struct worker_cfg *wc = NULL;
	struct limiter_settings s;

	if (!w) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	w->id = id;
	w->script = script;
	w->script_len = script_len;
	pthread_mutex_init(&w->lock, NULL);
	w->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
	if (!w->loop) {
		snprintf(err, errlen, "cannot create an event loop");
		goto fail;
	}
	wc = worker_cfg_new(g);
	if (!wc) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	worker_fill_settings(w, &g->cfg, &s);
	w->limiter = limiter_new(w->loop, &s, err, errlen);
	if (!w->limiter)
		goto fail;
	w->env.loop = w->loop;
	w->env.cfg = &wc->ref;
	w->env.ops.check = worker_ops_check;
	w->env.ops.ctx = w->limiter;
	w->env.metrics = &w->metrics;
	w->env.hello_timeout = 10.0;
	w->env.frame_timeout = 10.0;
	w->env.on_idle = worker_on_idle;
	ev_async_init(&w->wake, worker_on_wake);
	w->wake.data = w;
	ev_async_start(w->loop, &w->wake);
	ev_prepare_init(&w->flush, worker_on_prepare);
	w->flush.data = w;
	ev_prepare_start(w->loop, &w->flush);
	return w;
fail:
	if (wc)
		worker_cfg_release(&wc->ref);
	if (w->loop)
		ev_loop_destroy(w->loop);
	pthread_mutex_destroy(&w->lock);
	free(w);
	return NULL;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	ev_run(w->loop, 0);
	/* drained (or timed out): whatever is left is closed now */
	conn_env_close_all(&w->env);
	limiter_free(w->limiter);
	w->limiter = NULL;
	return NULL;
}

int worker_start(struct worker *w, char *err, size_t errlen)
{
	int rc = pthread_create(&w->thread, NULL, worker_main, w);

	if (rc != 0) {
		snprintf(err, errlen, "pthread_create: %s", strerror(rc));
		return -1;
	}
	w->started = true;
	return 0;
}

void worker_give_fd(struct worker *w, int fd)
{
	bool full;

	pthread_mutex_lock(&w->lock);
	full = w->nfdq == WORKER_FDQ_MAX;
	if (!full)
		w->fdq[w->nfdq++] = fd;
	pthread_mutex_unlock(&w->lock);
	if (full) {
		conn_refuse(fd, SPOP_ST_RES, "agent overloaded");
		return;
	}
	ev_async_send(w->loop, &w->wake);
}

void worker_set_config(struct worker *w, struct cfg_gen *g)
{
	struct cfg_gen *old;

	cfg_gen_get(g);
	pthread_mutex_lock(&w->lock);
	old = w->new_gen;
	w->new_gen = g;
	pthread_mutex_unlock(&w->lock);
	if (old)
		cfg_gen_put(old);
	ev_async_send(w->loop, &w->wake);
}

void worker_drain(struct worker *w, double grace)
{
	pthread_mutex_lock(&w->lock);
	w->drain = true;
	w->drain_grace = grace;
	pthread_mutex_unlock(&w->lock);
	ev_async_send(w->loop, &w->wake);
}

void worker_join(struct worker *w)
{
	if (w->started)
		pthread_join(w->thread, NULL);
	w->started = false;
}

void worker_free(struct worker *w)
{
	unsigned i;

	if (!w)
		return;
	if (w->limiter) {
		conn_env_close_all(&w->env);
		limiter_free(w->limiter);
	}
	for (i = 0; i < w->nfdq; i++)
		close(w->fdq[i]);
	if (w->new_gen)
		cfg_gen_put(w->new_gen);
	if (w->env.cfg && --w->env.cfg->refs == 0)
		w->env.cfg->release(w->env.cfg);
	ev_loop_destroy(w->loop);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

const struct metrics *worker_metrics(const struct worker *w)
{
	return &w->metrics;
}

unsigned worker_nconns(const struct worker *w)
{
	return atomic_load_explicit(&w->nconns, memory_order_relaxed);
}
