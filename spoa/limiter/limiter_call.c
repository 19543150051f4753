/*
 * limiter_call - one decision's call to Redis: the answer queue, the call
 * pool, sending, a result answered, the deadline, TRYAGAIN parking. See
 * limiter_call.h.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>
#include "hiredis_compat.h"
#include <hiredis/async.h>

#include "limiter_call.h"
#include "limiter_cluster.h"
#include "limiter_link.h"
#include "log.h"
#include "resp_cmd.h"

/* See limiter_call.h: the command is written into <l>'s buffer
 * (l->calls.cmd, owned by <l>, grown to the largest command, one byte more
 * than the text: hiredis's parser of the command name may look one byte
 * past a command of a single word, and finds a NUL there). */
int limiter_call_command(struct limiter *l, redisAsyncContext *ac, redisCallbackFn *fn,
                         void *privdata, int argc, const char **argv, const size_t *argvlen)
{
	struct limiter_calls *cs = &l->calls;
	long n = -1;

	if (argc < 1)
		return REDIS_ERR;
	if (cs->cmd_cap)
		n = resp_cmd_write(cs->cmd, cs->cmd_cap - 1, (size_t)argc, argv, argvlen);
	if (n == -1) {
		size_t need = resp_cmd_size((size_t)argc, argvlen), cap = LIMITER_CMD_MIN;
		char *buf;

		if (need == 0)
			return REDIS_ERR;
		while (cap < need + 1)
			cap *= 2;
		buf = realloc(cs->cmd, cap);
		if (!buf)
			return REDIS_ERR;
		cs->cmd = buf;
		cs->cmd_cap = cap;
		n = resp_cmd_write(cs->cmd, cs->cmd_cap - 1, (size_t)argc, argv, argvlen);
		if (n == -1)
			return REDIS_ERR;
	}
	cs->cmd[n] = '\0';
	return redisAsyncFormattedCommand(ac, fn, privdata, cs->cmd, (size_t)n);
}

/* Queue <d> for <cb>/<arg>, delivered on the next loop iteration (never from
 * inside limiter_check(), so callers need not be reentrant). The queue is
 * owned by <l>, grows by doubling and is reused. Returns 0, or -1 when
 * memory runs out. */
int limiter_defer(struct limiter *l, limiter_cb cb, void *arg,
                         const struct window_decision *d)
{
	struct limiter_answer *a;

	if (l->calls.nanswers == l->calls.answers_cap) {
		size_t cap = l->calls.answers_cap ? l->calls.answers_cap * 2 : 64;

		a = realloc(l->calls.answers, cap * sizeof(*a));
		if (!a)
			return -1;
		l->calls.answers = a;
		l->calls.answers_cap = cap;
	}
	a = &l->calls.answers[l->calls.nanswers++];
	a->cb = cb;
	a->arg = arg;
	a->d = *d;
	if (!ev_is_active(&l->calls.kick))
		ev_timer_start(l->loop, &l->calls.kick);
	return 0;
}

/* Deliver the answers queued before this iteration. A callback may queue
 * new ones (it may call limiter_check()); they wait for the next round. */
static void limiter_on_kick(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter *l = w->data;
	size_t n = l->calls.nanswers, i;

	(void)loop;
	(void)revents;
	for (i = 0; i < n; i++) {
		/* a copy: a callback may grow (move) the array */
		struct limiter_answer a = l->calls.answers[i];

		a.cb(a.arg, &a.d);
	}
	memmove(l->calls.answers, l->calls.answers + n, (l->calls.nanswers - n) * sizeof(*l->calls.answers));
	l->calls.nanswers -= n;
	if (l->calls.nanswers && !ev_is_active(&l->calls.kick))
		ev_timer_start(l->loop, &l->calls.kick);
}

/* Take a call from <l>'s pool, growing it by a chunk when empty; the pool
 * owns the memory (freed by limiter_free()). NULL when memory runs out. */
static struct limiter_call *limiter_call_get(struct limiter *l)
{
	struct limiter_call *c;

	if (!l->calls.free) {
		struct limiter_chunk *ch = calloc(1, sizeof(*ch));
		unsigned i;

		if (!ch)
			return NULL;
		ch->next = l->calls.chunks;
		l->calls.chunks = ch;
		for (i = LIMITER_POOL_CHUNK; i-- > 0;) {
			ch->calls[i].chunk = ch;
			ch->calls[i].next = l->calls.free;
			l->calls.free = &ch->calls[i];
		}
		ch->nfree = LIMITER_POOL_CHUNK;
		l->calls.n += LIMITER_POOL_CHUNK;
	}
	c = l->calls.free;
	l->calls.free = c->next;
	c->chunk->nfree--;
	c->next = NULL;
	c->waiting = false;
	c->pinned = false;
	c->l = l;
	return c;
}

/* Give <c> back to its limiter's pool, which owns it (hiredis no longer
 * holds it). */
void limiter_call_put(struct limiter_call *c)
{
	struct limiter *l = c->l;

	c->cb = NULL;
	c->arg = NULL;
	c->next = l->calls.free;
	l->calls.free = c;
	c->chunk->nfree++;
}

/*
 * Answer <c> with <d>, once: later answers of the same call are no-ops.
 * Inside limiter_check() (a flush there, a re-route to a link known to
 * evict keys) the answer is queued for the next loop iteration instead, as
 * limiter.h promises: a caller's callback never runs inside its own call
 * (hiredis guards the same hazard with REDIS_IN_CALLBACK). Only when the
 * queue cannot grow (out of memory) is it delivered at once.
 */
static void limiter_call_answer(struct limiter_call *c, const struct window_decision *d)
{
	struct limiter *l = c->l;
	limiter_cb cb = c->cb;

	if (!cb)
		return;
	c->cb = NULL;
	ev_timer_stop(l->loop, &c->deadline);
	l->calls.unanswered--;
	if (l->in_check && limiter_defer(l, cb, c->arg, d) == 0)
		return;
	cb(c->arg, d);
}

/*
 * Send call <c> on link <k> (ASKING first when <asking>), or on the link
 * its key routes to when <k> is NULL, with the link's engine. Returns 0
 * when hiredis holds <c>; 1 when that link is not ready (nothing done:
 * the caller may let <c> wait for it, <*to> says which, NULL: the key's
 * slot has no primary yet); -1 when it could not be sent (a link known to
 * evict keys: <c> answered redis-evicts-keys already). <built>: <c>'s
 * request as limiter_check() built it (borrowed, its head made the
 * engine's here), or NULL: built here from <c>.
 */
static int limiter_call_send_to(struct limiter *l, struct limiter_call *c, struct limiter_link *k,
                                bool asking, struct limiter_link **to, struct window_args *built)
{
	struct window_args own, *a = built;
	enum window_reason why;
	int first;

	if (!a) {
		a = &own;
		if (window_build_args(&c->policy, "", c->key, c->key_len, c->cost, a, &why) == -1)
			return -1;
	}
	if (!k)
		k = limiter_route(l, a->argv[3], a->argvlen[3]);
	*to = k;
	if (!k || k->state != LIMITER_ST_READY || !k->ac)
		return 1;
	if (limiter_link_refuses(k)) {
		/* A redirect or a re-route may name a node known to evict keys:
		 * the refusal limiter_check() gives for one, answered here (the
		 * caller's own answer is then a no-op). A node still connecting
		 * is not known yet: its check comes with its setup. */
		struct window_decision d;

		window_decide_error(&c->policy, WINDOW_REASON_REDIS_EVICTS, &d);
		limiter_call_answer(c, &d);
		return -1;
	}
	first = limiter_engine_apply(k->engine, &l->script, false, a->argv, a->argvlen);
	if (asking && redisAsyncCommand(k->ac, NULL, NULL, "ASKING") != REDIS_OK)
		return -1;
	if (limiter_call_command(l, k->ac, l->on_reply, c, a->argc - first, a->argv + first,
	                         a->argvlen + first) != REDIS_OK)
		return -1;
	c->engine = k->engine;
	c->asking = asking;
	c->retried = false;
	c->link = k;
	limiter_link_hold(k);
	return 0;
}

/* <c> (armed, not held by hiredis) waits on <l>'s list for link <k>:
 * pinned to it when <asking> (an ASK names one node), else for whichever
 * link its key routes to when one is ready. Returns 0, or -1 when the
 * list is full (LIMITER_WAIT_MAX: the caller answers <c>). */
static int limiter_call_wait(struct limiter *l, struct limiter_call *c, struct limiter_link *k,
                             bool asking)
{
	if (l->calls.nwaiting >= LIMITER_WAIT_MAX || l->closing || !c->cb)
		return -1;
	c->waiting = true;
	c->pinned = asking && k;
	c->asking = asking;
	c->link = k;
	c->next = NULL;
	c->prev = l->calls.waiting_tail;
	if (l->calls.waiting_tail)
		l->calls.waiting_tail->next = c;
	else
		l->calls.waiting = c;
	l->calls.waiting_tail = c;
	l->calls.nwaiting++;
	return 0;
}

/* Take <c> off <l>'s waiting list. */
static void limiter_call_unwait(struct limiter *l, struct limiter_call *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		l->calls.waiting = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		l->calls.waiting_tail = c->prev;
	c->next = c->prev = NULL;
	c->waiting = false;
	c->pinned = false;
	l->calls.nwaiting--;
}

/* Send <c> as limiter_call_send_to() does (with <built>, its request
 * built already, or NULL), or, when its link is not ready, let it wait for
 * that link (its deadline running). Returns 0 (sent, or waiting), or -1:
 * neither (the caller answers <c> and recycles it). */
static int limiter_call_send_built(struct limiter *l, struct limiter_call *c,
                                   struct limiter_link *k, bool asking,
                                   struct window_args *built)
{
	struct limiter_link *to;
	int rc = limiter_call_send_to(l, c, k, asking, &to, built);

	if (rc == 1)
		rc = limiter_call_wait(l, c, to, asking);
	return rc;
}

/* See limiter_call.h. */
int limiter_call_send(struct limiter *l, struct limiter_call *c, struct limiter_link *k,
                      bool asking)
{
	return limiter_call_send_built(l, c, k, asking, NULL);
}

/* See limiter_call.h: <a> is <c>'s request as limiter_check() built it. */
int limiter_call_send_args(struct limiter *l, struct limiter_call *c, struct limiter_link *k,
                           struct window_args *a)
{
	return limiter_call_send_built(l, c, k, false, a);
}

/* May a decision for link <k> (NULL: its slot has no primary yet) wait for
 * it: the waiting list has room, and a link can be ready within <l>'s
 * timeout (it is connecting, or its next attempt comes by then)? */
static bool limiter_call_may_wait(const struct limiter *l, const struct limiter_link *k)
{
	int64_t within = (int64_t)l->timeout_ms * 1000;

	if (l->closing || l->calls.nwaiting >= LIMITER_WAIT_MAX)
		return false;
	return k ? limiter_link_soon(k, within) : limiter_links_soon(l, within);
}

/*
 * A link became ready, or the cluster's map moved (l->wake): send every
 * waiting call whose link is ready now, in the order they came (two
 * decisions on one key reach Redis as they arrived). The others wait on;
 * a call whose link went is routed by its key again.
 */
void limiter_wake(struct limiter *l)
{
	struct limiter_call *c, *next;
	struct limiter_link *to;

	for (c = l->calls.waiting; c; c = next) {
		struct limiter_link *k = c->pinned && c->link->in_use ? c->link : NULL;
		int rc;

		next = c->next;
		c->sent_us = limiter_now_us();   /* its Redis latency runs from now */
		rc = limiter_call_send_to(l, c, k, k ? c->asking : false, &to, NULL);
		if (rc == 1)
			continue;
		limiter_call_unwait(l, c);
		if (rc == -1)
			limiter_call_fail(l, c, false);
	}
}

/* See limiter_call.h: at limiter_free(), nothing will be ready. */
void limiter_call_unwait_all(struct limiter *l)
{
	struct limiter_call *c;

	while ((c = l->calls.waiting)) {
		limiter_call_unwait(l, c);
		limiter_call_fail(l, c, false);
	}
}

/* See limiter_call.h: the park timer re-sends <c> LIMITER_TRYAGAIN_MS
 * later, its deadline still running. */
void limiter_call_park(struct limiter *l, struct limiter_call *c)
{
	c->next = l->calls.parked;
	l->calls.parked = c;
	if (!ev_is_active(&l->calls.park)) {
		ev_timer_set(&l->calls.park, LIMITER_TRYAGAIN_MS / 1000.0, 0.);
		ev_timer_start(l->loop, &l->calls.park);
	}
}

/* Re-send the parked calls that still wait (else answer "unavailable"),
 * return the others to the pool. */
static void limiter_on_park(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter *l = w->data;
	struct limiter_call *c = l->calls.parked, *next;
	struct window_decision d;

	(void)loop;
	(void)revents;
	l->calls.parked = NULL;
	for (; c; c = next) {
		next = c->next;
		c->next = NULL;
		c->redirects++;
		if (c->cb && !l->closing && limiter_call_send(l, c, NULL, false) == 0)
			continue;
		if (c->cb) {
			window_decide_error(&c->policy, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
			limiter_call_answer(c, &d);
		}
		limiter_call_put(c);
	}
}

/* Log a script error (<why>: Redis over maxmemory, the module refusing on
 * an evicting Redis, or any other) at warn, rate-limited (log_limited), so a
 * broken script cannot flood the log. */
static void limiter_warn_reply(const struct limiter_link *k, const struct window_reply *v,
                               enum window_reason why)
{
	bool err = v->kind == WINDOW_REPLY_ERROR;
	bool oom = why == WINDOW_REASON_REDIS_OOM, evicts = why == WINDOW_REASON_REDIS_EVICTS;

	/* the event names written out here: t_ops_reasons.py reads them */
	log_limited(CONFIG_LOG_WARN, oom ? "redis_oom" : evicts ? "redis_evicts_keys" : "redis_script_error",
	            oom ? "redis_oom" : evicts ? "redis_evicts_keys" : "redis_script_error",
	            "addr=%s reply=\"%.*s\"", k->addr, err ? (int)v->len : 0, err ? v->str : "");
}

/*
 * Answer call <c> from its script result <view> (an error or the integers,
 * borrowed) that Redis gave on link <k> at <now>: the decision, the deny
 * cache, the metrics. A call answered already (its deadline) only counts a
 * late admission. The caller recycles <c>.
 */
void limiter_call_finish(struct limiter *l, struct limiter_link *k,
                                struct limiter_call *c, const struct window_reply *view,
                                int64_t now)
{
	struct window_decision d;
	int rc = window_decide_reply(&c->policy, view, &d);

	if (l->metrics)   /* by the engine that answered (its id is its metrics index) */
		metrics_add(&l->metrics->redis_replies[c->engine->id][rc == 0 ? METRICS_REPLY_DECISION :
		            METRICS_REPLY_ERROR], 1);
	if (!c->cb) {
		/* The deadline answered first (error/redis-timeout), yet Redis ran
		 * the script: an admission it recorded is one the client never got.
		 * Counted so that operators can size redis-timeout. */
		if (rc == 0 && d.status == WINDOW_ALLOW) {
			if (l->metrics)
				metrics_add(&l->metrics->late_admissions, 1);
			if (c->cacheable)   /* it changed the window all the same */
				deny_cache_forget(&l->calls.cache, c->policy.name, c->policy.name_len,
				                  c->key, c->key_len);
		}
		return;
	}

	if (l->metrics)
		metrics_observe_redis_latency(l->metrics, (uint64_t)(now - c->sent_us));
	if (rc == -1) {
		/* over maxmemory, or the module refusing on an evicting Redis:
		 * fail-closed like any Redis error, each named apart */
		enum metrics_redis_error kind = d.reason == WINDOW_REASON_REDIS_OOM ? METRICS_REDIS_ERR_OOM :
		                              d.reason == WINDOW_REASON_REDIS_EVICTS ? METRICS_REDIS_ERR_EVICTS :
		                              METRICS_REDIS_ERR_SCRIPT;

		limiter_count_error(l, kind);
		limiter_warn_reply(k, view, d.reason);
	} else if (c->cacheable && window_deny_holds(&c->policy, c->cost, &d)) {
		deny_cache_store(&l->calls.cache, c->policy.name, c->policy.name_len, c->key, c->key_len,
		                 deny_cache_rule(&c->policy, c->policy.win, c->policy.nwin), c->cost,
		                 c->sent_us, &d, now);
	} else if (c->cacheable) {
		/* an admission changed the window a cached deny describes (or a
		 * deny whose numbers do not hold replaces what was cached) */
		deny_cache_forget(&l->calls.cache, c->policy.name, c->policy.name_len, c->key, c->key_len);
	}
	limiter_call_answer(c, &d);
}

/* Answer <c> "unavailable" if it still waits (a refused error), and return
 * it to the pool: hiredis does not hold it. <defer>: on the next loop
 * iteration (limiter_flush() may run inside limiter_check()). */
void limiter_call_fail(struct limiter *l, struct limiter_call *c, bool defer)
{
	struct window_decision d;
	limiter_cb cb = c->cb;

	if (cb) {
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		window_decide_error(&c->policy, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
		if (defer) {
			c->cb = NULL;
			ev_timer_stop(l->loop, &c->deadline);
			l->calls.unanswered--;
			if (limiter_defer(l, cb, c->arg, &d) == -1)
				cb(c->arg, &d);
		} else {
			limiter_call_answer(c, &d);
		}
	}
	limiter_call_put(c);
}

/* A call's deadline passed: answer "timeout" now; hiredis keeps the call
 * until Redis replies or the connection goes. If nothing at all has been
 * answered on its link for the stall limit while calls wait, that Redis is
 * frozen: drop it. */
static void limiter_on_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter_call *c = w->data;
	struct limiter *l = c->l;
	struct limiter_link *k = c->link;
	struct window_decision d;

	(void)loop;
	(void)revents;
	if (c->waiting) {
		/* never sent: no link was ready within its deadline (start-up,
		 * a reconnect), nothing recorded; hiredis does not hold it */
		limiter_call_unwait(l, c);
		limiter_call_fail(l, c, false);
		return;
	}
	limiter_count_error(l, METRICS_REDIS_ERR_TIMEOUT);
	window_decide_error(&c->policy, WINDOW_REASON_REDIS_TIMEOUT, &d);
	limiter_call_answer(c, &d);
	/* <c> may be recycled by the link's drop: not used after this */
	if (k)
		limiter_link_check_stall(k);
}

/* <c> waits for its answer from now: count it, arm its deadline. */
static void limiter_call_arm(struct limiter *l, struct limiter_call *c)
{
	l->calls.unanswered++;
	ev_timer_init(&c->deadline, limiter_on_deadline, (double)l->timeout_ms / 1000.0, 0.);
	c->deadline.data = c;
	ev_timer_start(l->loop, &c->deadline);
}

/* ------------------------------------------------------------------ */
/* a decision's call, from limiter_check() on                           */

/* See limiter_call.h: the deny cache's lookup site. The hit is counted
 * in cache_denies[index of <p> in the settings' table]. */
bool limiter_call_cached(struct limiter *l, const struct window_policy *p, const char *key,
                         size_t key_len, uint64_t cost, limiter_cb cb, void *arg, int *rc)
{
	struct limiter_calls *cs = &l->calls;
	struct window_decision d;
	const struct window_limit *lim;
	unsigned nwin;
	size_t i;

	if (!cs->cache_on || p->shadow || deny_cache_bytes(&cs->cache) == 0)
		return false;
	/* the limits that apply now: an entry made under others (a live
	 * override since ended, or begun) is not answered */
	lim = window_limits_for(p, key, key_len, &nwin);
	if (!deny_cache_lookup(&cs->cache, p->name, p->name_len, key, key_len,
	                       deny_cache_rule(p, lim, nwin), cost, limiter_now_us(), &d))
		return false;
	*rc = limiter_defer(l, cb, arg, &d);
	log_debug("deny_cache_hit", "policy=%.*s retry_after=%lld", (int)p->name_len,
	          p->name, (long long)d.retry_after);
	for (i = 0; i < cs->npolicies && l->metrics; i++)
		if (cs->policy_name_len[i] == p->name_len &&
		    memcmp(cs->policy_names[i], p->name, p->name_len) == 0) {
			metrics_add(&l->metrics->cache_denies[i], 1);
			break;
		}
	return true;
}

/* Answer <cb>/<arg> with <p>'s error decision for <why> on the next loop
 * iteration (a refused call counted as such). Returns limiter_defer()'s. */
static int limiter_call_refuse(struct limiter *l, const struct window_policy *p,
                               enum window_reason why, limiter_cb cb, void *arg)
{
	struct window_decision d;

	if (why == WINDOW_REASON_REDIS_UNAVAILABLE)
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
	window_decide_error(p, why, &d);
	return limiter_defer(l, cb, arg, &d);
}

/* See limiter_call.h. Borrows <p> and <key>: the call keeps copies. */
int limiter_call_take(struct limiter *l, const struct window_policy *p, const char *key,
                      size_t key_len, uint64_t cost, const struct window_args *a,
                      limiter_cb cb, void *arg, struct limiter_call **out)
{
	struct limiter_link *k = limiter_route(l, a->argv[3], a->argvlen[3]);
	bool ready = k && k->state == LIMITER_ST_READY && k->ac;
	enum window_reason why = WINDOW_REASON_NONE;
	const struct window_limit *lim;
	struct limiter_call *c = NULL;
	unsigned nwin;

	*out = NULL;
	/* a link not ready is waited for when it can be ready within the
	 * deadline; a decision never connects anything itself */
	if (!ready && !limiter_call_may_wait(l, k))
		why = WINDOW_REASON_REDIS_UNAVAILABLE;
	else if (ready && limiter_link_refuses(k))   /* its watch sees it fixed */
		why = WINDOW_REASON_REDIS_EVICTS;
	lim = window_limits_for(p, key, key_len, &nwin);
	if (why == WINDOW_REASON_NONE &&
	    (l->links.held >= LIMITER_MAX_HELD || !(c = limiter_call_get(l))))
		why = WINDOW_REASON_OVERLOAD;
	if (!c)
		return limiter_call_refuse(l, p, why, cb, arg);
	c->cb = cb;
	c->arg = arg;
	c->sent_us = limiter_now_us();
	c->retried = false;
	c->asking = false;
	c->redirects = 0;
	c->link = k;
	c->cacheable = l->calls.cache_on && !p->shadow;
	c->cost = cost;
	c->policy = *p;
	c->policy.nwin = nwin;
	memcpy(c->policy.win, lim, nwin * sizeof(*lim));
	c->policy.overrides = NULL;
	c->policy.noverrides = 0;
	memcpy(c->key, key, key_len);
	c->key_len = key_len;
	limiter_call_arm(l, c);
	if (ready) {
		*out = c;
		return 0;
	}
	if (limiter_call_wait(l, c, k, false) == 0)
		return 0;   /* sent when its link is ready (limiter_wake()) */
	l->calls.unanswered--;
	ev_timer_stop(l->loop, &c->deadline);
	limiter_call_put(c);
	return limiter_call_refuse(l, p, WINDOW_REASON_REDIS_UNAVAILABLE, cb, arg);
}

/* See limiter_call.h: <a> is the request limiter_check() built. */
int limiter_call_start(struct limiter *l, struct limiter_call *c, struct limiter_link *k,
                       struct window_args *a)
{
	int first = limiter_engine_apply(k->engine, &l->script, false, a->argv, a->argvlen);

	if (limiter_call_command(l, k->ac, l->on_reply, c, a->argc - first, a->argv + first,
	                         a->argvlen + first) != REDIS_OK) {
		limiter_call_fail(l, c, true);
		return 0;
	}
	c->engine = k->engine;
	limiter_link_hold(k);
	return 0;
}

/* ------------------------------------------------------------------ */
/* the calls' life with the limiter's                                   */

/* See limiter_call.h. */
void limiter_calls_init(struct limiter *l, uint64_t seed)
{
	ev_timer_init(&l->calls.kick, limiter_on_kick, 0., 0.);
	l->calls.kick.data = l;
	ev_timer_init(&l->calls.park, limiter_on_park, 0., 0.);
	l->calls.park.data = l;
	deny_cache_init(&l->calls.cache, seed);
	l->calls.cache_on = true;
}

/* See limiter_call.h: the names are copied, nothing stays borrowed. */
void limiter_calls_set_policies(struct limiter *l, const struct window_policy *policies,
                                size_t n)
{
	struct limiter_calls *cs = &l->calls;
	size_t i;

	if (!policies)
		n = 0;
	if (n > CONFIG_MAX_POLICIES)
		n = CONFIG_MAX_POLICIES;
	for (i = 0; i < n; i++) {
		size_t len = policies[i].name_len;

		if (len > WINDOW_NAME_MAX)
			len = WINDOW_NAME_MAX;
		memcpy(cs->policy_names[i], policies[i].name, len);
		cs->policy_name_len[i] = len;
	}
	cs->npolicies = n;
	/* limits or policies may have changed what a cached deny means */
	deny_cache_clear(&cs->cache);
}

/* See limiter_call.h: off, or a new size, frees the cache's table. */
void limiter_calls_set_cache(struct limiter *l, bool on, unsigned size)
{
	l->calls.cache_on = on;
	deny_cache_set_size(&l->calls.cache, size);
	if (!on)
		deny_cache_clear(&l->calls.cache);
}

/* See limiter_call.h. */
void limiter_calls_forget_denies(struct limiter *l)
{
	deny_cache_clear(&l->calls.cache);
}

/*
 * Give memory back after a burst: every chunk of the pool whose calls are
 * all free is freed, except the newest LIMITER_POOL_KEEP (the calls in use
 * now stay where they are), an empty answer queue is dropped, and the deny
 * cache's table once every entry in it expired. Returns the blocks freed.
 */
unsigned limiter_calls_trim(struct limiter *l)
{
	struct limiter_calls *cs = &l->calls;
	struct limiter_chunk *ch, **pp;
	struct limiter_call **cp;
	unsigned kept = 0, ntrim = 0;

	for (ch = cs->chunks; ch; ch = ch->next) {
		ch->trim = kept >= LIMITER_POOL_KEEP && ch->nfree == LIMITER_POOL_CHUNK;
		if (ch->trim)
			ntrim++;
		else
			kept++;
	}
	if (ntrim) {
		for (cp = &cs->free; *cp;) {
			if ((*cp)->chunk->trim)
				*cp = (*cp)->next;
			else
				cp = &(*cp)->next;
		}
		for (pp = &cs->chunks; (ch = *pp);) {
			if (ch->trim) {
				*pp = ch->next;
				free(ch);
			} else {
				pp = &ch->next;
			}
		}
		cs->n -= ntrim * LIMITER_POOL_CHUNK;
	}
	if (cs->cmd_cap > LIMITER_CMD_KEEP) {
		free(cs->cmd);
		cs->cmd = NULL;
		cs->cmd_cap = 0;
		ntrim++;
	}
	if (cs->nanswers == 0 && cs->answers_cap > LIMITER_ANSWERS_KEEP) {
		free(cs->answers);
		cs->answers = NULL;
		cs->answers_cap = 0;
		ntrim++;
	}
	return ntrim + deny_cache_trim(&cs->cache, limiter_now_us());
}

/* See limiter_call.h. Frees what the calls own: the pool's chunks, the
 * answer queue, the deny cache. */
void limiter_calls_free(struct limiter *l)
{
	struct limiter_calls *cs = &l->calls;
	struct limiter_chunk *ch;

	limiter_on_park(l->loop, &cs->park, 0);
	ev_timer_stop(l->loop, &cs->park);
	ev_timer_stop(l->loop, &cs->kick);
	while (cs->nanswers)
		limiter_on_kick(l->loop, &cs->kick, 0);
	ev_timer_stop(l->loop, &cs->kick);
	while ((ch = cs->chunks)) {
		cs->chunks = ch->next;
		free(ch);
	}
	free(cs->answers);
	cs->answers = NULL;
	free(cs->cmd);
	cs->cmd = NULL;
	cs->cmd_cap = 0;
	deny_cache_clear(&cs->cache);
}
