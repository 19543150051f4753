/*
 * worker_reload - a reload on the worker's side (worker.h has the protocol,
 * reload.h the states): the generation prepared beside the serving one,
 * the verdict for main, the commit or the abort, and the old limiters a
 * commit retires until their calls are answered. Worker thread only, but
 * the verdict (under the mailbox's lock) and the generations' counts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "worker_int.h"

#define WORKER_PREPARE_MIN_S 3.0        /* a new Redis gets at least this to be set up */
#define WORKER_PREPARE_MAX_S 30.0
#define WORKER_PREPARE_POLL_S 0.02

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

/* conn_cfg_ref.release: drops <ref>'s generation and frees <ref>. */
void worker_cfg_release(struct conn_cfg_ref *ref)
{
	struct worker_cfg *wc = (struct worker_cfg *)ref;

	cfg_gen_put(wc->gen);
	free(wc);
}

/* Wrap <g> for this worker (one ref: "current"). Returns NULL on ENOMEM. */
struct worker_cfg *worker_cfg_new(struct cfg_gen *g)
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

/* <s> borrows from <c> (URL, TLS, policies) and <w> (script, counters). */
void worker_fill_settings(struct worker *w, const struct config *c,
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
	s->legacy_keys = c->legacy_keys;
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

int worker_reload_step(enum reload_state *st, enum reload_event ev, int worker, unsigned seq)
{
	char err[96];

	if (reload_step(st, ev, err, sizeof(err)) == 0)
		return 0;
	if (worker < 0)
		log_error("reload_bug", "seq=%u reason=\"%s\"", seq, err);
	else
		log_error("reload_bug", "worker=%d seq=%u reason=\"%s\"", worker, seq, err);
	return -1;
}

/* This worker's reload moves on <ev> (worker_reload_step). */
static int worker_reload_move(struct worker *w, enum reload_event ev)
{
	return worker_reload_step(&w->reload.state, ev, (int)w->id, w->reload.seq);
}

/* The verdict on the staged reload (READY or FAILED), posted for main
 * under the mailbox lock, and main's loop woken. */
static void worker_post_verdict(struct worker *w, bool ok, const char *err)
{
	if (worker_reload_move(w, ok ? RELOAD_EV_READY : RELOAD_EV_FAIL) == -1)
		return;
	pthread_mutex_lock(&w->mbox.lock);
	w->reload.verdict_seq = w->reload.seq;
	w->reload.verdict_ok = ok;
	snprintf(w->reload.verdict_err, sizeof(w->reload.verdict_err), "%s", ok ? "" : err);
	pthread_mutex_unlock(&w->mbox.lock);
	if (!ok)
		log_error("reload_failed", "worker=%u reason=\"%s\"", w->id, err);
	if (w->reload.main_loop)
		ev_async_send(w->reload.main_loop, w->reload.main_async);
}

/* Free the old limiters whose calls have all been answered (from the
 * prepare watcher: never inside a limiter callback). */
void worker_reload_reap(struct worker *w)
{
	unsigned i = 0;

	while (i < w->reload.nretired) {
		if (limiter_pending(w->reload.retired[i]) == 0) {
			limiter_free(w->reload.retired[i]);
			w->reload.retired[i] = w->reload.retired[--w->reload.nretired];
		} else {
			i++;
		}
	}
}

/* Abort the staged reload, if any: the new limiter (if any) is freed. */
static void worker_drop_staged(struct worker *w)
{
	if (w->reload.state != RELOAD_IDLE)
		worker_reload_move(w, RELOAD_EV_ABORT);
	ev_timer_stop(w->loop, &w->reload.poll);
	if (w->reload.next) {
		limiter_free(w->reload.next);
		w->reload.next = NULL;
	}
	if (w->reload.staged) {
		cfg_gen_put(w->reload.staged);
		w->reload.staged = NULL;
	}
}

/* Poll the new limiter: set up in time, or not. */
static void worker_on_prep_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = t->data;
	char why[200];

	(void)revents;
	if (w->reload.state != RELOAD_PREPARING || !w->reload.next) {
		ev_timer_stop(loop, t);
		return;
	}
	if (limiter_ready(w->reload.next, why, sizeof(why))) {
		ev_timer_stop(loop, t);
		worker_post_verdict(w, true, "");
		return;
	}
	if (ev_now(loop) < w->reload.deadline)
		return;
	ev_timer_stop(loop, t);
	{
		char err[256];

		snprintf(err, sizeof(err), "new redis not ready: %s", why);
		worker_post_verdict(w, false, err);
	}
}

void worker_reload_init(struct worker *w)
{
	ev_timer_init(&w->reload.poll, worker_on_prep_timer, WORKER_PREPARE_POLL_S,
	              WORKER_PREPARE_POLL_S);
	w->reload.poll.data = w;
}

/*
 * Phase one of a reload (see worker.h): take <g> (the mailbox's reference
 * passes to w->reload.staged) and check it. Same Redis: ready at once. Another
 * Redis (or new credentials): a second limiter, standby, connects and sets
 * up beside the one that serves; the verdict comes when it is ready or
 * when the deadline passes.
 */
void worker_reload_prepare(struct worker *w, struct cfg_gen *g, unsigned seq)
{
	struct limiter_settings s;
	char err[256];
	double limit;
	int same;

	worker_drop_staged(w);          /* a previous, unfinished one */
	w->reload.seq = seq;
	if (worker_reload_move(w, RELOAD_EV_PREPARE) == -1) {
		cfg_gen_put(g);
		return;
	}
	w->reload.staged = g;
	worker_fill_settings(w, &g->cfg, &s);
	same = limiter_same_redis(w->limiter, s.redis_url, err, sizeof(err));
	if (same == -1) {
		worker_post_verdict(w, false, err);
		return;
	}
	if (same == 1) {
		worker_post_verdict(w, true, "");
		return;
	}
	s.standby = true;
	w->reload.next = limiter_new(w->loop, &s, err, sizeof(err));
	if (!w->reload.next) {
		worker_post_verdict(w, false, err);
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
	w->reload.deadline = ev_now(w->loop) + limit;
	ev_timer_set(&w->reload.poll, WORKER_PREPARE_POLL_S, WORKER_PREPARE_POLL_S);
	ev_timer_start(w->loop, &w->reload.poll);
}

/* Phase two of a reload: switch to the staged generation (new requests use
 * it, requests in flight keep theirs until they finish; a new Redis takes
 * over and the old one drains), or drop it. A command for another reload
 * than the staged one is stale (that reload was replaced): ignored. */
void worker_reload_finish(struct worker *w, unsigned seq, enum reload_cmd cmd)
{
	struct cfg_gen *g = w->reload.staged;
	struct worker_cfg *wc;
	struct limiter_settings s;
	char err[256];

	if (w->reload.state == RELOAD_IDLE || seq != w->reload.seq)
		return;
	if (cmd == RELOAD_CMD_ABORT) {
		worker_drop_staged(w);
		return;
	}
	if (worker_reload_move(w, reload_cmd_event(cmd)) == -1)
		return;         /* not READY: the next prepare or the end drops it */
	ev_timer_stop(w->loop, &w->reload.poll);
	wc = worker_cfg_new(g);
	if (!wc) {
		/* main counted success: say loudly that this worker did not */
		log_error("reload_failed", "worker=%u reason=\"out of memory\"", w->id);
		worker_drop_staged(w);
		return;
	}
	worker_fill_settings(w, &g->cfg, &s);
	if (w->reload.next) {
		struct limiter *old = w->limiter;

		w->limiter = w->reload.next;
		w->reload.next = NULL;
		limiter_set_standby(old, true);
		limiter_set_standby(w->limiter, false);
		if (w->reload.nretired < WORKER_RETIRED_MAX)
			w->reload.retired[w->reload.nretired++] = old;
		else
			limiter_free(old);   /* reloads faster than calls finish */
		log_info("redis_address_changed", "worker=%u from=%s to=%s", w->id,
		         limiter_addr(old), limiter_addr(w->limiter));
	} else if (limiter_reconfigure(w->limiter, &s, err, sizeof(err)) == -1) {
		/* prepared a moment ago: only a secret file changed in between */
		log_error("reload_failed", "worker=%u reason=\"%s\"", w->id, err);
	}
	limiter_set_deny_cache(w->limiter, g->cfg.deny_cache, g->cfg.deny_cache_size);
	worker_remap_metrics(w, w->notify.cfg->cfg, &g->cfg);
	if (--w->notify.cfg->refs == 0)
		w->notify.cfg->release(w->notify.cfg);
	w->notify.cfg = &wc->ref;
	/* deadlines armed from now on use the new values */
	w->env.hello_timeout = (double)g->cfg.hello_timeout_ms / 1000.0;
	w->env.frame_timeout = (double)g->cfg.frame_timeout_ms / 1000.0;
	log_info("config_applied", "worker=%u policies=%zu", w->id, g->cfg.npolicies);
	/* the staged reference, dropped last: <wc> holds its own */
	w->reload.staged = NULL;
	cfg_gen_put(g);
}

/* Free every limiter of <w>: the one serving, one being prepared, the
 * retired ones still draining (their calls are answered "unavailable"). */
void worker_reload_free_limiters(struct worker *w)
{
	worker_drop_staged(w);
	while (w->reload.nretired)
		limiter_free(w->reload.retired[--w->reload.nretired]);
	limiter_free(w->limiter);
	w->limiter = NULL;
}

int worker_config_result(struct worker *w, unsigned seq, bool *ok, char *err, size_t errlen)
{
	int have;

	pthread_mutex_lock(&w->mbox.lock);
	have = w->reload.verdict_seq == seq;
	if (have) {
		*ok = w->reload.verdict_ok;
		snprintf(err, errlen, "%s", w->reload.verdict_err);
	}
	pthread_mutex_unlock(&w->mbox.lock);
	return have;
}
