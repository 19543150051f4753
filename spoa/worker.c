/*
 * worker - a thread with its own loop, limiter and connections.
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

#include "conn.h"
#include "limiter.h"
#include "live.h"
#include "log.h"
#include "metrics.h"
#include "spop.h"
#include "worker.h"

#define WORKER_FDQ_MAX 4096
#define WORKER_RETIRED_MAX 8            /* old limiters draining after reloads */
#define WORKER_PREPARE_MIN_S 3.0        /* a new Redis gets at least this to be set up */
#define WORKER_PREPARE_MAX_S 30.0
#define WORKER_PREPARE_POLL_S 0.02
#define WORKER_BEAT_S 0.25              /* heartbeat period (/healthz, /readyz) */
#define WORKER_TRIM_S 2.0               /* how often pools give back what a burst left */

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
	ev_timer beat;                  /* proves the loop turns, publishes readiness */
	_Atomic int64_t beat_us;        /* monotonic, last turn of <beat> */
	_Atomic bool ready;             /* the serving limiter can decide (/readyz) */
	char not_ready_why[160];        /* why not, under <lock> */
	ev_timer trim;                  /* WORKER_TRIM_S, repeating */
	uint64_t live_epoch;            /* live_epoch() when the deny cache was last emptied */

	pthread_mutex_t lock;           /* guards the mailbox below */
	int fdq[WORKER_FDQ_MAX];
	unsigned nfdq;
	struct cfg_gen *prep_gen;       /* reload: prepare this (seq prep_seq) */
	unsigned prep_seq;
	int finish_cmd;                 /* reload: 1 commit, -1 abort, 0 none */
	unsigned finish_seq;
	unsigned verdict_seq;           /* reload: verdict posted for this seq */
	bool verdict_ok;
	char verdict_err[256];
	struct ev_loop *main_loop;      /* where verdicts are announced */
	struct ev_async *main_async;
	bool drain;
	double drain_grace;

	/* reload state, worker thread only */
	struct cfg_gen *staged;         /* prepared, not committed yet */
	unsigned staged_seq;
	struct limiter *next;           /* the new Redis being set up, or NULL */
	ev_timer prep_timer;            /* polls <next> until ready or the deadline */
	double prep_deadline;
	struct limiter *retired[WORKER_RETIRED_MAX];   /* draining old limiters */
	unsigned nretired;
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
	s->batch = c->redis_batch;
	s->allow_eviction = c->redis_allow_eviction;
	s->engine = (enum limiter_engine_mode)c->redis_engine;   /* same order */
	s->tls = &c->tls;
	s->script = w->script;
	s->script_len = w->script_len;
	s->metrics = &w->metrics;
	s->policies = c->policies;
	s->npolicies = c->npolicies;
	s->legacy_keys = true;
}

/* Per-policy counters follow their policy's name from <prev> to <next>;
 * a policy new in <next> starts at 0, one gone from it is dropped. Main
 * keeps indices stable when it can (then nothing moves). Worker thread
 * only: it is the counters' only writer. */
static void worker_remap_metrics(struct worker *w, const struct config *prev,
                                 const struct config *next)
{
	size_t from[CONFIG_MAX_POLICIES], j;
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
	metrics_move_policies(&w->metrics, from, next->npolicies);
}

/* Post the verdict on reload <seq> for main (under the mailbox lock) and
 * wake main's loop. */
static void worker_post_verdict(struct worker *w, unsigned seq, bool ok, const char *err)
{
	pthread_mutex_lock(&w->lock);
	w->verdict_seq = seq;
	w->verdict_ok = ok;
	snprintf(w->verdict_err, sizeof(w->verdict_err), "%s", ok ? "" : err);
	pthread_mutex_unlock(&w->lock);
	if (!ok)
		log_error("reload_failed", "worker=%u reason=\"%s\"", w->id, err);
	if (w->main_loop)
		ev_async_send(w->main_loop, w->main_async);
}

/* Free the old limiters whose calls have all been answered (from the
 * prepare watcher: never inside a limiter callback). */
static void worker_reap_retired(struct worker *w)
{
	unsigned i = 0;

	while (i < w->nretired) {
		if (limiter_pending(w->retired[i]) == 0) {
			limiter_free(w->retired[i]);
			w->retired[i] = w->retired[--w->nretired];
		} else {
			i++;
		}
	}
}

/* Stop preparing: the new limiter (if any) is freed. */
static void worker_drop_staged(struct worker *w)
{
	ev_timer_stop(w->loop, &w->prep_timer);
	if (w->next) {
		limiter_free(w->next);
		w->next = NULL;
	}
	if (w->staged) {
		cfg_gen_put(w->staged);
		w->staged = NULL;
	}
}

/* Poll the new limiter: set up in time, or not. */
static void worker_on_prep_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = t->data;
	char why[200];

	(void)revents;
	if (!w->next) {
		ev_timer_stop(loop, t);
		return;
	}
	if (limiter_ready(w->next, why, sizeof(why))) {
		ev_timer_stop(loop, t);
		worker_post_verdict(w, w->staged_seq, true, "");
		return;
	}
	if (ev_now(loop) < w->prep_deadline)
		return;
	ev_timer_stop(loop, t);
	{
		char err[256];

		snprintf(err, sizeof(err), "new redis not ready: %s", why);
		worker_post_verdict(w, w->staged_seq, false, err);
	}
}

/*
 * Phase one of a reload (see worker.h): take <g> (the mailbox's reference
 * passes to w->staged) and check it. Same Redis: ready at once. Another
 * Redis (or new credentials): a second limiter, standby, connects and sets
 * up beside the one that serves; the verdict comes when it is ready or
 * when the deadline passes.
 */
static void worker_prepare(struct worker *w, struct cfg_gen *g, unsigned seq)
{
	struct limiter_settings s;
	char err[256];
	double limit;
	int same;

	worker_drop_staged(w);          /* a previous, unfinished one */
	w->staged = g;
	w->staged_seq = seq;
	worker_fill_settings(w, &g->cfg, &s);
	same = limiter_same_redis(w->limiter, s.redis_url, err, sizeof(err));
	if (same == -1) {
		worker_post_verdict(w, seq, false, err);
		return;
	}
	if (same == 1) {
		worker_post_verdict(w, seq, true, "");
		return;
	}
	s.standby = true;
	w->next = limiter_new(w->loop, &s, err, sizeof(err));
	if (!w->next) {
		worker_post_verdict(w, seq, false, err);
		return;
	}
	log_info("redis_preparing", "worker=%u", w->id);
	/* a few seconds (several connect attempts with backoff), more for a
	 * slow Redis: twice its redis-timeout, up to 30 s */
	limit = (double)g->cfg.redis_timeout_ms * 2 / 1000.0;
	if (limit < WORKER_PREPARE_MIN_S)
		limit = WORKER_PREPARE_MIN_S;
	if (limit > WORKER_PREPARE_MAX_S)
		limit = WORKER_PREPARE_MAX_S;
	w->prep_deadline = ev_now(w->loop) + limit;
	ev_timer_set(&w->prep_timer, WORKER_PREPARE_POLL_S, WORKER_PREPARE_POLL_S);
	ev_timer_start(w->loop, &w->prep_timer);
}

/* Phase two of a reload: switch to the staged generation (new requests use
 * it, requests in flight keep theirs until they finish; a new Redis takes
 * over and the old one drains), or drop it. */
static void worker_finish(struct worker *w, unsigned seq, bool commit)
{
	struct cfg_gen *g = w->staged;
	struct worker_cfg *wc;
	struct limiter_settings s;
	char err[256];

	if (!g || seq != w->staged_seq)
		return;
	if (!commit) {
		worker_drop_staged(w);
		return;
	}
	ev_timer_stop(w->loop, &w->prep_timer);
	wc = worker_cfg_new(g);
	if (!wc) {
		/* main counted success: say loudly that this worker did not */
		log_error("reload_failed", "worker=%u reason=\"out of memory\"", w->id);
		worker_drop_staged(w);
		return;
	}
	worker_fill_settings(w, &g->cfg, &s);
	if (w->next) {
		struct limiter *old = w->limiter;

		w->limiter = w->next;
		w->next = NULL;
		limiter_set_standby(old, true);
		limiter_set_standby(w->limiter, false);
		if (w->nretired < WORKER_RETIRED_MAX)
			w->retired[w->nretired++] = old;
		else
			limiter_free(old);   /* reloads faster than calls finish */
		log_info("redis_address_changed", "worker=%u from=%s to=%s", w->id,
		         limiter_addr(old), limiter_addr(w->limiter));
	} else if (limiter_reconfigure(w->limiter, &s, err, sizeof(err)) == -1) {
		/* prepared a moment ago: only a secret file changed in between */
		log_error("reload_failed", "worker=%u reason=\"%s\"", w->id, err);
	}
	limiter_set_deny_cache(w->limiter, g->cfg.deny_cache, g->cfg.deny_cache_size);
	worker_remap_metrics(w, w->env.cfg->cfg, &g->cfg);
	if (--w->env.cfg->refs == 0)
		w->env.cfg->release(w->env.cfg);
	w->env.cfg = &wc->ref;
	/* deadlines armed from now on use the new values */
	w->env.hello_timeout = (double)g->cfg.hello_timeout_ms / 1000.0;
	w->env.frame_timeout = (double)g->cfg.frame_timeout_ms / 1000.0;
	log_info("config_applied", "worker=%u policies=%zu", w->id, g->cfg.npolicies);
	/* the staged reference, dropped last: <wc> holds its own */
	w->staged = NULL;
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
	unsigned prep_seq, finish_seq;
	int finish_cmd;
	bool drain;
	double grace;

	(void)revents;
	pthread_mutex_lock(&w->lock);
	nfds = w->nfdq;
	memcpy(fds, w->fdq, nfds * sizeof(int));
	w->nfdq = 0;
	g = w->prep_gen;
	w->prep_gen = NULL;
	prep_seq = w->prep_seq;
	finish_cmd = w->finish_cmd;
	finish_seq = w->finish_seq;
	w->finish_cmd = 0;
	drain = w->drain;
	grace = w->drain_grace;
	pthread_mutex_unlock(&w->lock);

	if (g)
		worker_prepare(w, g, prep_seq);
	if (finish_cmd)
		worker_finish(w, finish_seq, finish_cmd > 0);
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
	char why[sizeof(w->not_ready_why)] = "";
	bool ready;

	(void)loop;
	(void)revents;
	atomic_store_explicit(&w->beat_us, metrics_now_us(), memory_order_relaxed);
	ready = w->limiter && limiter_ready(w->limiter, why, sizeof(why));
	/* a ctl change (reset, override) makes the denials cached here stale */
	if (w->env.live && w->limiter && live_epoch(w->env.live) != w->live_epoch) {
		w->live_epoch = live_epoch(w->env.live);
		limiter_forget_denies(w->limiter);
	}
	if (!ready) {
		pthread_mutex_lock(&w->lock);
		memcpy(w->not_ready_why, why, sizeof(why));
		pthread_mutex_unlock(&w->lock);
	}
	atomic_store_explicit(&w->ready, ready, memory_order_release);
}

/* Pools grow to the largest burst; give the excess back once it passed. */
static void worker_on_trim(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = t->data;

	(void)loop;
	(void)revents;
	if (conn_env_trim(&w->env) + limiter_trim(w->limiter) == 0)
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
	if (w->nretired)
		worker_reap_retired(w);
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
	limiter_set_deny_cache(w->limiter, g->cfg.deny_cache, g->cfg.deny_cache_size);
	w->env.loop = w->loop;
	w->env.cfg = &wc->ref;
	w->env.ops.check = worker_ops_check;
	w->env.upper = &conn_notify_upper;
	w->env.ops.ctx = w;
	w->env.metrics = &w->metrics;
	w->env.admitted = admitted;
	w->env.hello_timeout = (double)g->cfg.hello_timeout_ms / 1000.0;
	w->env.frame_timeout = (double)g->cfg.frame_timeout_ms / 1000.0;
	w->env.on_idle = worker_on_idle;
	ev_async_init(&w->wake, worker_on_wake);
	w->wake.data = w;
	ev_async_start(w->loop, &w->wake);
	ev_timer_init(&w->prep_timer, worker_on_prep_timer, WORKER_PREPARE_POLL_S,
	              WORKER_PREPARE_POLL_S);
	w->prep_timer.data = w;
	ev_prepare_init(&w->flush, worker_on_prepare);
	w->flush.data = w;
	ev_prepare_start(w->loop, &w->flush);
	ev_timer_init(&w->beat, worker_on_beat, 0.0, WORKER_BEAT_S);
	w->beat.data = w;
	ev_timer_start(w->loop, &w->beat);
	/* a worker that has not turned yet counts as alive from its creation */
	atomic_init(&w->beat_us, metrics_now_us());
	ev_timer_init(&w->trim, worker_on_trim, WORKER_TRIM_S, WORKER_TRIM_S);
	w->trim.data = w;
	ev_timer_start(w->loop, &w->trim);
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

/* Free every limiter of <w>: the one serving, one being prepared, the
 * retired ones still draining (their calls are answered "unavailable"). */
static void worker_free_limiters(struct worker *w)
{
	worker_drop_staged(w);
	while (w->nretired)
		limiter_free(w->retired[--w->nretired]);
	limiter_free(w->limiter);
	w->limiter = NULL;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	ev_run(w->loop, 0);
	/* drained (or timed out): whatever is left is closed now. The
	 * limiters go first: they answer the calls still pending, which hands
	 * their requests back to the pool that conn_env_close_all() frees */
	worker_free_limiters(w);
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

	pthread_mutex_lock(&w->lock);
	full = w->nfdq == WORKER_FDQ_MAX;
	if (!full)
		w->fdq[w->nfdq++] = fd;
	pthread_mutex_unlock(&w->lock);
	if (full) {
		conn_refuse(fd, SPOP_ST_RES, "agent overloaded");
		conn_release(w->env.admitted);
		return;
	}
	ev_async_send(w->loop, &w->wake);
}

/* Where verdicts go: main's loop and its async watcher (both main's). */
void worker_set_reply(struct worker *w, struct ev_loop *main_loop, struct ev_async *main_async)
{
	w->main_loop = main_loop;
	w->main_async = main_async;
}

/* Before worker_start(): both borrowed for the worker's lifetime. */
void worker_set_live(struct worker *w, struct live *live, struct denied *denied)
{
	w->env.live = live;
	w->env.denied = denied;
}

/* The worker takes its own reference to <g>. */
void worker_prepare_config(struct worker *w, struct cfg_gen *g, unsigned seq)
{
	struct cfg_gen *old;

	cfg_gen_get(g);
	pthread_mutex_lock(&w->lock);
	old = w->prep_gen;
	w->prep_gen = g;
	w->prep_seq = seq;
	pthread_mutex_unlock(&w->lock);
	if (old)
		cfg_gen_put(old);
	ev_async_send(w->loop, &w->wake);
}

int worker_config_result(struct worker *w, unsigned seq, bool *ok, char *err, size_t errlen)
{
	int have;

	pthread_mutex_lock(&w->lock);
	have = w->verdict_seq == seq;
	if (have) {
		*ok = w->verdict_ok;
		snprintf(err, errlen, "%s", w->verdict_err);
	}
	pthread_mutex_unlock(&w->lock);
	return have;
}

void worker_finish_config(struct worker *w, unsigned seq, bool commit)
{
	pthread_mutex_lock(&w->lock);
	w->finish_cmd = commit ? 1 : -1;
	w->finish_seq = seq;
	pthread_mutex_unlock(&w->lock);
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
		/* the order of worker_main(), for the same reason */
		worker_free_limiters(w);
		conn_env_close_all(&w->env);
	}
	for (i = 0; i < w->nfdq; i++) {
		close(w->fdq[i]);
		conn_release(w->env.admitted);
	}
	if (w->prep_gen)
		cfg_gen_put(w->prep_gen);
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

bool worker_ready(struct worker *w, char *why, size_t whylen)
{
	if (atomic_load_explicit(&w->ready, memory_order_acquire))
		return true;
	pthread_mutex_lock(&w->lock);
	snprintf(why, whylen, "%s", w->not_ready_why[0] ? w->not_ready_why : "starting");
	pthread_mutex_unlock(&w->lock);
	return false;
}

bool worker_alive(const struct worker *w, uint64_t max_silence_us)
{
	int64_t last = atomic_load_explicit(&w->beat_us, memory_order_relaxed);

	return (int64_t)metrics_now_us() - last <= (int64_t)max_silence_us;
}
