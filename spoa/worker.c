/*
 * worker - a thread with its own loop, limiter and connections; its side
 * of a reload is worker_reload.c's (worker_int.h: who owns what).
 */
#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ev.h>

#include "live.h"
#include "log.h"
#include "spop.h"
#include "worker_int.h"

#define WORKER_BEAT_S 0.25              /* heartbeat period (/healthz, /readyz) */
#define WORKER_TRIM_S 2.0               /* how often pools give back what a burst left */

/* One decision on its way back to its connection, kept only while debug
 * logging is on, so that the outcome can be logged with what was asked. */
struct worker_trace {
	limiter_cb cb;
	void *arg;
	unsigned worker;
	uint64_t cost;
	char policy[WINDOW_NAME_MAX + 1];
	char key[WINDOW_KEY_MAX + 1];
	size_t key_len;
};

/* Limiter callback while tracing: log <d> for the trace <arg> (owned here,
 * freed here), then pass <d> on to the connection's callback. */
static void worker_on_traced(void *arg, const struct window_decision *d)
{
	struct worker_trace *t = arg;
	char key[LOG_QUOTED_MAX(WINDOW_KEY_MAX)];

	log_quote(key, sizeof(key), t->key, t->key_len);
	log_debug("decision", "worker=%u policy=%s key=%s cost=%llu status=%s limit=%lld "
	          "remaining=%lld reset=%lld retry_after=%lld reason=%s",
	          t->worker, t->policy, key, (unsigned long long)t->cost,
	          window_status_str(d->status), (long long)d->limit,
	          (long long)d->remaining, (long long)d->reset,
	          (long long)(d->status == WINDOW_DENY ? d->retry_after : 0),
	          d->reason == WINDOW_REASON_NONE ? "-" : window_reason_str(d->reason));
	t->cb(t->arg, d);
	free(t);
}

/*
 * The connections' limiter_ops.check (<ctx> is the worker): limiter_check()
 * with its contract. At debug level each decision is wrapped in a trace so
 * it can be logged (allocated here; freed by worker_on_traced, or here when
 * the limiter refuses the call); otherwise nothing is added to the hot path.
 */
static int worker_ops_release(void *ctx, const struct window_policy *p, const char *key,
                              size_t key_len, const char *lease)
{
	struct worker *w = ctx;

	return limiter_release(w->limiter, p, key, key_len, lease);
}

static int worker_ops_settle(void *ctx, const struct window_policy *p, const char *key,
                             size_t key_len, const char *lease, uint64_t real,
                             limiter_settle_cb cb, void *arg)
{
	struct worker *w = ctx;

	return limiter_settle(w->limiter, p, key, key_len, lease, real, cb, arg);
}

static int worker_ops_check(void *ctx, const struct window_policy *p, const char *key,
                            size_t key_len, uint64_t cost, limiter_cb cb, void *arg)
{
	struct worker *w = ctx;
	struct worker_trace *t;

	if (!log_enabled(CONFIG_LOG_DEBUG) || !(t = malloc(sizeof(*t))))
		return limiter_check(w->limiter, p, key, key_len, cost, cb, arg);
	t->cb = cb;
	t->arg = arg;
	t->worker = w->id;
	t->cost = cost;
	snprintf(t->policy, sizeof(t->policy), "%s", p->name);
	t->key_len = key_len > WINDOW_KEY_MAX ? WINDOW_KEY_MAX : key_len;
	memcpy(t->key, key, t->key_len);
	if (limiter_check(w->limiter, p, key, key_len, cost, worker_on_traced, t) == -1) {
		/* the contract: -1 means the callback never runs */
		free(t);
		return -1;
	}
	return 0;
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
	unsigned prep_seq, finish_seq;
	enum reload_cmd finish;
	bool drain;
	double grace;

	(void)revents;
	pthread_mutex_lock(&w->mbox.lock);
	nfds = w->mbox.nfdq;
	memcpy(fds, w->mbox.fdq, nfds * sizeof(int));
	w->mbox.nfdq = 0;
	g = w->mbox.prep_gen;
	w->mbox.prep_gen = NULL;
	prep_seq = w->mbox.prep_seq;
	finish = w->mbox.finish;
	finish_seq = w->mbox.finish_seq;
	w->mbox.finish = RELOAD_CMD_NONE;
	drain = w->mbox.drain;
	grace = w->mbox.drain_grace;
	pthread_mutex_unlock(&w->mbox.lock);

	/* the older message first: a commit of N posted together with the
	 * prepare of N+1 commits N before N+1 begins */
	if (finish != RELOAD_CMD_NONE && (!g || reload_finish_first(prep_seq, finish_seq))) {
		worker_reload_finish(w, finish_seq, finish);
		finish = RELOAD_CMD_NONE;
	}
	if (g)
		worker_reload_prepare(w, g, prep_seq);
	if (finish != RELOAD_CMD_NONE)
		worker_reload_finish(w, finish_seq, finish);
	for (i = 0; i < nfds; i++) {
		if (w->env.draining) {
			close(fds[i]);
			conn_release(w->env.admitted);
		} else {
			conn_accept(&w->env, fds[i]);
		}
	}
	if (drain && !w->env.draining) {
		ev_timer_init(&w->grace, worker_on_grace, grace, 0.0);
		w->grace.data = w;
		ev_timer_start(loop, &w->grace);
		conn_env_drain(&w->env);
	}
}

/* The heartbeat: the loop turned, so the worker still serves (read by
 * worker_alive() from the main thread); and whether its limiter can decide,
 * with why not (worker_ready()). limiter_ready() is the limiter's own
 * verdict: every link set up, script loaded, no evicting Redis unless
 * allowed. */
static void worker_on_beat(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = t->data;
	char why[sizeof(w->health.not_ready_why)] = "";
	bool ready;

	(void)loop;
	(void)revents;
	atomic_store_explicit(&w->health.beat_us, metrics_now_us(), memory_order_relaxed);
	ready = w->limiter && limiter_ready(w->limiter, why, sizeof(why));
	/* a ctl change (reset, override) makes the denials cached here stale */
	if (w->notify.live && w->limiter && live_epoch(w->notify.live) != w->health.live_epoch) {
		w->health.live_epoch = live_epoch(w->notify.live);
		limiter_forget_denies(w->limiter);
	}
	if (!ready) {
		pthread_mutex_lock(&w->mbox.lock);
		memcpy(w->health.not_ready_why, why, sizeof(why));
		pthread_mutex_unlock(&w->mbox.lock);
	}
	atomic_store_explicit(&w->health.ready, ready, memory_order_release);
}

/* Pools grow to the largest burst; give the excess back once it passed. */
static void worker_on_trim(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = t->data;

	(void)loop;
	(void)revents;
	if (conn_notify_trim(&w->notify) + limiter_trim(w->limiter) == 0)
		return;
#ifdef __GLIBC__
	/* free() keeps what it can in the thread's arena: hand the pages just
	 * freed back to the kernel, so RSS returns after a burst */
	malloc_trim(0);
#endif
}

static void worker_on_prepare(struct ev_loop *loop, ev_prepare *p, int revents)
{
	struct worker *w = p->data;

	(void)loop;
	(void)revents;
	conn_env_flush(&w->env);
	if (w->reload.nretired)
		worker_reload_reap(w);
}

struct worker *worker_new(unsigned id, struct cfg_gen *g, const char *script,
                          size_t script_len, _Atomic unsigned *admitted,
                          char *err, size_t errlen)
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
	pthread_mutex_init(&w->mbox.lock, NULL);
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
	limiter_set_deny_cache(w->limiter, g->cfg.deny_cache, g->cfg.deny_cache_size);
	w->notify.cfg = &wc->ref;
	w->notify.ops.check = worker_ops_check;
	w->notify.ops.release = worker_ops_release;
	w->notify.ops.settle = worker_ops_settle;
	w->notify.ops.ctx = w;
	w->notify.metrics = &w->metrics;
	w->env.loop = w->loop;
	w->env.upper = &conn_notify_upper;
	w->env.upper_ctx = &w->notify;
	w->env.metrics = &w->metrics;
	w->env.admitted = admitted;
	w->env.hello_timeout = (double)g->cfg.hello_timeout_ms / 1000.0;
	w->env.frame_timeout = (double)g->cfg.frame_timeout_ms / 1000.0;
	w->env.on_idle = worker_on_idle;
	ev_async_init(&w->mbox.wake, worker_on_wake);
	w->mbox.wake.data = w;
	ev_async_start(w->loop, &w->mbox.wake);
	worker_reload_init(w);
	ev_prepare_init(&w->flush, worker_on_prepare);
	w->flush.data = w;
	ev_prepare_start(w->loop, &w->flush);
	ev_timer_init(&w->health.beat, worker_on_beat, 0.0, WORKER_BEAT_S);
	w->health.beat.data = w;
	ev_timer_start(w->loop, &w->health.beat);
	/* a worker that has not turned yet counts as alive from its creation */
	atomic_init(&w->health.beat_us, metrics_now_us());
	ev_timer_init(&w->trim, worker_on_trim, WORKER_TRIM_S, WORKER_TRIM_S);
	w->trim.data = w;
	ev_timer_start(w->loop, &w->trim);
	return w;
fail:
	if (wc)
		worker_cfg_release(&wc->ref);
	if (w->loop)
		ev_loop_destroy(w->loop);
	pthread_mutex_destroy(&w->mbox.lock);
	free(w);
	return NULL;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	ev_run(w->loop, 0);
	/* drained (or timed out): whatever is left is closed now. The
	 * limiters go first: they answer the calls still pending, which hands
	 * their requests back to the pool that conn_env_close_all() frees */
	worker_reload_free_limiters(w);
	conn_env_close_all(&w->env);
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

	pthread_mutex_lock(&w->mbox.lock);
	full = w->mbox.nfdq == WORKER_FDQ_MAX;
	if (!full)
		w->mbox.fdq[w->mbox.nfdq++] = fd;
	pthread_mutex_unlock(&w->mbox.lock);
	if (full) {
		conn_refuse(fd, SPOP_ST_RES, "agent overloaded");
		conn_release(w->env.admitted);
		return;
	}
	ev_async_send(w->loop, &w->mbox.wake);
}

/* Where verdicts go: main's loop and its async watcher (both main's). */
void worker_set_reply(struct worker *w, struct ev_loop *main_loop, struct ev_async *main_async)
{
	w->reload.main_loop = main_loop;
	w->reload.main_async = main_async;
}

/* Before worker_start(): both borrowed for the worker's lifetime. */
void worker_set_live(struct worker *w, struct live *live, struct denied *denied)
{
	w->notify.live = live;
	w->notify.denied = denied;
}

/* The worker takes its own reference to <g>. */
void worker_prepare_config(struct worker *w, struct cfg_gen *g, unsigned seq)
{
	struct cfg_gen *old;

	cfg_gen_get(g);
	pthread_mutex_lock(&w->mbox.lock);
	old = w->mbox.prep_gen;
	w->mbox.prep_gen = g;
	w->mbox.prep_seq = seq;
	pthread_mutex_unlock(&w->mbox.lock);
	if (old)
		cfg_gen_put(old);
	ev_async_send(w->loop, &w->mbox.wake);
}

void worker_finish_config(struct worker *w, unsigned seq, enum reload_cmd cmd)
{
	pthread_mutex_lock(&w->mbox.lock);
	w->mbox.finish = cmd;
	w->mbox.finish_seq = seq;
	pthread_mutex_unlock(&w->mbox.lock);
	ev_async_send(w->loop, &w->mbox.wake);
}

void worker_drain(struct worker *w, double grace)
{
	pthread_mutex_lock(&w->mbox.lock);
	w->mbox.drain = true;
	w->mbox.drain_grace = grace;
	pthread_mutex_unlock(&w->mbox.lock);
	ev_async_send(w->loop, &w->mbox.wake);
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
		/* the order of worker_main(), for the same reason */
		worker_reload_free_limiters(w);
		conn_env_close_all(&w->env);
	}
	for (i = 0; i < w->mbox.nfdq; i++) {
		close(w->mbox.fdq[i]);
		conn_release(w->env.admitted);
	}
	if (w->mbox.prep_gen)
		cfg_gen_put(w->mbox.prep_gen);
	if (w->notify.cfg && --w->notify.cfg->refs == 0)
		w->notify.cfg->release(w->notify.cfg);
	ev_loop_destroy(w->loop);
	pthread_mutex_destroy(&w->mbox.lock);
	free(w);
}

const struct metrics *worker_metrics(const struct worker *w)
{
	return &w->metrics;
}

bool worker_ready(struct worker *w, char *why, size_t whylen)
{
	if (atomic_load_explicit(&w->health.ready, memory_order_acquire))
		return true;
	pthread_mutex_lock(&w->mbox.lock);
	snprintf(why, whylen, "%s", w->health.not_ready_why[0] ? w->health.not_ready_why : "starting");
	pthread_mutex_unlock(&w->mbox.lock);
	return false;
}

bool worker_alive(const struct worker *w, uint64_t max_silence_us)
{
	int64_t last = atomic_load_explicit(&w->health.beat_us, memory_order_relaxed);

	return (int64_t)metrics_now_us() - last <= (int64_t)max_silence_us;
}
