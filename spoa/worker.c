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

/* Copy <src>/<len> into <dst>/<cap> with '"' and '\\' escaped, so a key from
 * the network cannot close its quotes and forge fields (log_event escapes
 * control bytes). Always NUL-terminates; cuts what does not fit. */
static void worker_quote(char *dst, size_t cap, const char *src, size_t len)
{
	size_t o = 0, i;

	for (i = 0; i < len && o + 3 < cap; i++) {
		if (src[i] == '"' || src[i] == '\\')
			dst[o++] = '\\';
		dst[o++] = src[i];
	}
	dst[o] = '\0';
}

/* Limiter callback while tracing: log <d> for the trace <arg> (owned here,
 * freed here), then pass <d> on to the connection's callback. */
static void worker_on_traced(void *arg, const struct window_decision *d)
{
	struct worker_trace *t = arg;
	char key[2 * WINDOW_KEY_MAX + 1];

	worker_quote(key, sizeof(key), t->key, t->key_len);
	log_debug("decision", "worker=%u policy=%s key=\"%s\" cost=%llu status=%s limit=%lld "
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

static void worker_fill_settings(struct worker *w, const struct config *c,
                                 struct limiter_settings *s)
{
	memset(s, 0, sizeof(*s));
	s->redis_url = c->redis;
	s->timeout_ms = c->redis_timeout_ms;
	s->allow_eviction = c->redis_allow_eviction;
	s->script = w->script;
	s->script_len = w->script_len;
	s->thread_id = w->id;
	s->metrics = &w->metrics;
	s->policies = c->policies;
	s->npolicies = c->npolicies;
}

/* Per-policy counters follow their policy's name from <prev> to <next>;
 * a policy new in <next> starts at 0, one gone from it is dropped. Main
 * keeps indices stable when it can (then nothing moves). Worker thread
 * only: it is the counters' only writer. */
static void worker_remap_metrics(struct worker *w, const struct config *prev,
                                 const struct config *next)
{
	struct {
		uint64_t decisions[WINDOW_STATUS_COUNT];
		uint64_t shadow, cache;
	} v[CONFIG_MAX_POLICIES];
	struct metrics *m = &w->metrics;
	size_t from[CONFIG_MAX_POLICIES], i, j, s;
	bool moved = false;

	for (j = 0; j < next->npolicies; j++) {
		const struct window_policy *old = config_find_policy(prev, next->policies[j].name,
		                                                     next->policies[j].name_len);

		from[j] = old ? (size_t)(old - prev->policies) : CONFIG_MAX_POLICIES;
		if (from[j] != j)
			moved = true;
	}
	if (!moved && next->npolicies == prev->npolicies)
		return;
	memset(v, 0, sizeof(v));
	for (j = 0; j < next->npolicies; j++) {
		i = from[j];
		if (i >= CONFIG_MAX_POLICIES)
			continue;
		for (s = 0; s < WINDOW_STATUS_COUNT; s++)
			v[j].decisions[s] = atomic_load_explicit(&m->decisions[i][s], memory_order_relaxed);
		v[j].shadow = atomic_load_explicit(&m->shadow_denies[i], memory_order_relaxed);
		v[j].cache = atomic_load_explicit(&m->cache_denies[i], memory_order_relaxed);
	}
	for (j = 0; j < CONFIG_MAX_POLICIES; j++) {
		for (s = 0; s < WINDOW_STATUS_COUNT; s++)
			atomic_store_explicit(&m->decisions[j][s], v[j].decisions[s], memory_order_relaxed);
		atomic_store_explicit(&m->shadow_denies[j], v[j].shadow, memory_order_relaxed);
		atomic_store_explicit(&m->cache_denies[j], v[j].cache, memory_order_relaxed);
	}
}

/* Switch to <g> in the worker's own thread: new requests use it, requests
 * in flight keep theirs until they finish. */
static void worker_apply_config(struct worker *w, struct cfg_gen *g)
{
	struct worker_cfg *wc = worker_cfg_new(g);
	struct limiter_settings s;
	char err[256];

	if (!wc) {
		log_error("reload_failed", "worker=%u reason=\"out of memory\"", w->id);
		cfg_gen_put(g);         /* the mailbox's reference */
		return;
	}
	worker_fill_settings(w, &g->cfg, &s);
	if (limiter_reconfigure(w->limiter, &s, err, sizeof(err)) == -1)
		log_error("reload_failed", "worker=%u reason=\"%s\"", w->id, err);
	limiter_set_deny_cache(w->limiter, g->cfg.deny_cache);
	worker_remap_metrics(w, w->env.cfg->cfg, &g->cfg);
	if (--w->env.cfg->refs == 0)
		w->env.cfg->release(w->env.cfg);
	w->env.cfg = &wc->ref;
	/* deadlines armed from now on use the new values */
	w->env.hello_timeout = (double)g->cfg.hello_timeout_ms / 1000.0;
	w->env.frame_timeout = (double)g->cfg.frame_timeout_ms / 1000.0;
	log_info("config_applied", "worker=%u policies=%zu", w->id, g->cfg.npolicies);
	/* the mailbox's reference, dropped last: <wc> holds its own, but
	 * keeping <g> pinned while reading it needs no argument */
	cfg_gen_put(g);
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
	limiter_set_deny_cache(w->limiter, g->cfg.deny_cache);
	w->env.loop = w->loop;
	w->env.cfg = &wc->ref;
	w->env.ops.check = worker_ops_check;
	w->env.ops.ctx = w;
	w->env.metrics = &w->metrics;
	w->env.hello_timeout = (double)g->cfg.hello_timeout_ms / 1000.0;
	w->env.frame_timeout = (double)g->cfg.frame_timeout_ms / 1000.0;
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
