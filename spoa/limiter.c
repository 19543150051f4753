/*
 * limiter - asks Redis for decisions: hiredis 0.14 async on one thread's
 * libev loop. This file: calls, deadlines, the call pool and the
 * limiter's lifecycle; the connections are limiter_link.c, Sentinel
 * limiter_sentinel.c, Cluster routing limiter_cluster.c, the local deny
 * cache deny_cache.c (see limiter_int.h and docs/architecture.md).
 *
 * Life of a call (struct limiter_call):
 *   limiter_check() validates, looks in the local deny cache, and either
 *   answers at once (queued, delivered on the next loop iteration) or takes
 *   a call from the pool, sends EVALSHA and arms the call's own deadline.
 *   The call is answered exactly once, by whichever comes first: the reply,
 *   the deadline, the loss of the connection, or limiter_free(). hiredis
 *   holds the call as privdata until it hands it back (reply or NULL), so a
 *   call answered by its deadline stays out of the pool until then, and its
 *   late reply is ignored.
 *
 * Never call limiter_free() from inside a limiter_cb: the callback may be
 * running inside hiredis, which still holds the limiter's calls.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>
#include "hiredis_compat.h"
#include <hiredis/async.h>

#include "limiter_cluster.h"
#include "limiter_int.h"
#include "limiter_link.h"
#include "limiter_sentinel.h"
#include "log.h"

/* ------------------------------------------------------------------ */
/* small helpers                                                       */

/* 64 random bits from the kernel, or a weaker mix of <salt>, time and pid
 * when getrandom() is unavailable (uniqueness, not secrecy, is needed). */
static uint64_t limiter_random64(uint64_t salt)
{
	uint64_t v = 0;
	struct timespec ts;

	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v) && v)
		return v;
	clock_gettime(CLOCK_REALTIME, &ts);
	v = salt ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
	    ((uint64_t)getpid() << 40);
	return v ? v : 0x9e3779b97f4a7c15ULL;
}

/* ------------------------------------------------------------------ */
/* answers that need no Redis                                          */

/* Queue <d> for <cb>/<arg>, delivered on the next loop iteration (never from
 * inside limiter_check(), so callers need not be reentrant). The queue is
 * owned by <l>, grows by doubling and is reused. Returns 0, or -1 when
 * memory runs out. */
static int limiter_defer(struct limiter *l, limiter_cb cb, void *arg,
                         const struct window_decision *d)
{
	struct limiter_answer *a;

	if (l->nanswers == l->answers_cap) {
		size_t cap = l->answers_cap ? l->answers_cap * 2 : 64;

		a = realloc(l->answers, cap * sizeof(*a));
		if (!a)
			return -1;
		l->answers = a;
		l->answers_cap = cap;
	}
	a = &l->answers[l->nanswers++];
	a->cb = cb;
	a->arg = arg;
	a->d = *d;
	if (!ev_is_active(&l->kick))
		ev_timer_start(l->loop, &l->kick);
	return 0;
}

/* Deliver the answers queued before this iteration. A callback may queue
 * new ones (it may call limiter_check()); they wait for the next round. */
static void limiter_on_kick(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter *l = w->data;
	size_t n = l->nanswers, i;

	(void)loop;
	(void)revents;
	for (i = 0; i < n; i++) {
		/* a copy: a callback may grow (move) the array */
		struct limiter_answer a = l->answers[i];

		a.cb(a.arg, &a.d);
	}
	memmove(l->answers, l->answers + n, (l->nanswers - n) * sizeof(*l->answers));
	l->nanswers -= n;
	if (l->nanswers && !ev_is_active(&l->kick))
		ev_timer_start(l->loop, &l->kick);
}

/* ------------------------------------------------------------------ */
/* call pool                                                           */

/* Take a call from <l>'s pool, growing it by a chunk when empty; the pool
 * owns the memory (freed by limiter_free()). NULL when memory runs out. */
static struct limiter_call *limiter_call_get(struct limiter *l)
{
	struct limiter_call *c;

	if (!l->free_calls) {
		struct limiter_chunk *ch = calloc(1, sizeof(*ch));
		unsigned i;

		if (!ch)
			return NULL;
		ch->next = l->chunks;
		l->chunks = ch;
		for (i = LIMITER_POOL_CHUNK; i-- > 0;) {
			ch->calls[i].chunk = ch;
			ch->calls[i].next = l->free_calls;
			l->free_calls = &ch->calls[i];
		}
		ch->nfree = LIMITER_POOL_CHUNK;
		l->ncalls += LIMITER_POOL_CHUNK;
	}
	c = l->free_calls;
	l->free_calls = c->next;
	c->chunk->nfree--;
	c->next = NULL;
	c->l = l;
	return c;
}

/* Give <c> back to its limiter's pool, which owns it (hiredis no longer
 * holds it). */
static void limiter_call_put(struct limiter_call *c)
{
	struct limiter *l = c->l;

	c->cb = NULL;
	c->arg = NULL;
	c->next = l->free_calls;
	l->free_calls = c;
	c->chunk->nfree++;
}

/*
 * Give memory back after a burst: every chunk of <l>'s pool whose calls are
 * all free is freed, except the newest LIMITER_POOL_KEEP (the calls in use
 * now stay where they are), idle batches above LIMITER_BATCH_KEEP (those
 * in flight are not on the freelist), and an empty answer queue is dropped.
 * Contract in limiter.h.
 */
unsigned limiter_trim(struct limiter *l)
{
	struct limiter_chunk *ch, **pp;
	struct limiter_call **cp;
	struct limiter_batch *b, **bp;
	unsigned kept = 0, ntrim = 0;

	for (ch = l->chunks; ch; ch = ch->next) {
		ch->trim = kept >= LIMITER_POOL_KEEP && ch->nfree == LIMITER_POOL_CHUNK;
		if (ch->trim)
			ntrim++;
		else
			kept++;
	}
	if (ntrim) {
		for (cp = &l->free_calls; *cp;) {
			if ((*cp)->chunk->trim)
				*cp = (*cp)->next;
			else
				cp = &(*cp)->next;
		}
		for (pp = &l->chunks; (ch = *pp);) {
			if (ch->trim) {
				*pp = ch->next;
				free(ch);
			} else {
				pp = &ch->next;
			}
		}
		l->ncalls -= ntrim * LIMITER_POOL_CHUNK;
	}
	kept = 0;
	bp = &l->free_batches;
	while ((b = *bp) != NULL) {
		if (kept < LIMITER_BATCH_KEEP) {
			kept++;
			bp = &b->next;
		} else {
			*bp = b->next;
			free(b);
			ntrim++;
		}
	}
	if (l->nanswers == 0 && l->answers_cap > LIMITER_ANSWERS_KEEP) {
		free(l->answers);
		l->answers = NULL;
		l->answers_cap = 0;
		ntrim++;
	}
	return ntrim;
}

/* Answer <c> with <d>, once: later answers of the same call are no-ops. */
static void limiter_call_answer(struct limiter_call *c, const struct window_decision *d)
{
	struct limiter *l = c->l;
	limiter_cb cb = c->cb;

	if (!cb)
		return;
	c->cb = NULL;
	ev_timer_stop(l->loop, &c->deadline);
	l->unanswered--;
	cb(c->arg, d);
}

/* ------------------------------------------------------------------ */
/* policy names                                                        */

/* Index of policy <p> in the table given by the settings, or UINT_MAX. */
static unsigned limiter_policy_index(const struct limiter *l, const struct window_policy *p)
{
	size_t i;

	for (i = 0; i < l->npolicies; i++)
		if (l->policy_name_len[i] == p->name_len &&
		    memcmp(l->policy_names[i], p->name, p->name_len) == 0)
			return (unsigned)i;
	return UINT_MAX;
}

/* Copy the policy names of <s> into <l> (nothing stays borrowed). */
static void limiter_copy_policy_names(struct limiter *l, const struct limiter_settings *s)
{
	size_t i, n = s->policies ? s->npolicies : 0;

	if (n > CONFIG_MAX_POLICIES)
		n = CONFIG_MAX_POLICIES;
	for (i = 0; i < n; i++) {
		size_t len = s->policies[i].name_len;

		if (len > WINDOW_NAME_MAX)
			len = WINDOW_NAME_MAX;
		memcpy(l->policy_names[i], s->policies[i].name, len);
		l->policy_name_len[i] = len;
	}
	l->npolicies = n;
}

/* ------------------------------------------------------------------ */
/* calls                                                               */

static void limiter_on_reply(redisAsyncContext *ac, void *r, void *privdata);

/*
 * (Re-)send call <c> as EVALSHA on link <k> (ASKING first when <asking>),
 * or on the link its key routes to when <k> is NULL. The link may still be
 * connecting: hiredis sends once its setup is through. Returns 0 when
 * hiredis holds <c>, -1 when it could not be sent (a link known to evict
 * keys: <c> answered redis-evicts-keys already).
 */
int limiter_call_send(struct limiter *l, struct limiter_call *c, struct limiter_link *k,
                      bool asking)
{
	struct window_args a;
	enum window_reason why;

	if (window_build_args(&c->policy, l->sha, c->key, c->key_len, c->cost, &a,
	                      &why) == -1)
		return -1;
	if (!k)
		k = limiter_route(l, a.argv[3], a.argvlen[3]);
	if (!k || !k->ac)
		return -1;
	if (k->evicts && !l->allow_eviction) {
		/* A redirect or a re-route may name a node known to evict keys:
		 * the refusal limiter_check() gives for one, answered here (the
		 * caller's own answer is then a no-op). A node still connecting
		 * is not known yet: its check comes with its setup. */
		struct window_decision d;

		window_decide_error(&c->policy, WINDOW_REASON_REDIS_EVICTS, &d);
		limiter_call_answer(c, &d);
		return -1;
	}
	if (asking && redisAsyncCommand(k->ac, NULL, NULL, "ASKING") != REDIS_OK)
		return -1;
	if (redisAsyncCommandArgv(k->ac, limiter_on_reply, c, a.argc, a.argv, a.argvlen) != REDIS_OK)
		return -1;
	c->redirects++;
	c->asking = asking;
	c->retried = false;
	c->link = k;
	limiter_link_hold(k);
	return 0;
}

/*
 * Re-send call <c> as EVAL with the full script on link <k>, whose context
 * <ac> answered NOSCRIPT (Redis lost its script cache: restarted, failed
 * over, SCRIPT FLUSH), and re-load the script there once so later calls
 * find it again. Returns 0, or -1 when it cannot be sent.
 */
static int limiter_call_retry_eval(struct limiter *l, struct limiter_link *k,
                                   redisAsyncContext *ac, struct limiter_call *c)
{
	struct window_args a;
	enum window_reason why;

	if (ac != k->ac)
		return -1;
	if (window_build_args(&c->policy, "", c->key, c->key_len, c->cost, &a,
	                      &why) == -1)
		return -1;
	a.argv[0] = "EVAL";
	a.argvlen[0] = 4;
	a.argv[1] = l->script;
	a.argvlen[1] = l->script_len;
	if (c->asking && redisAsyncCommand(ac, NULL, NULL, "ASKING") != REDIS_OK)
		return -1;
	if (redisAsyncCommandArgv(ac, limiter_on_reply, c, a.argc, a.argv, a.argvlen) != REDIS_OK)
		return -1;
	c->retried = true;
	limiter_link_hold(k);
	if (!k->script_loading && k->state == LIMITER_ST_READY)
		limiter_link_send_script_load(k);
	return 0;
}


/* TRYAGAIN (the keys of a slot are mid-migration): park <c>; the park
 * timer re-sends it LIMITER_TRYAGAIN_MS later, its deadline still running. */
void limiter_call_park(struct limiter *l, struct limiter_call *c)
{
	c->next = l->parked;
	l->parked = c;
	if (!ev_is_active(&l->park)) {
		ev_timer_set(&l->park, LIMITER_TRYAGAIN_MS / 1000.0, 0.);
		ev_timer_start(l->loop, &l->park);
	}
}

/* Re-send the parked calls that still wait (else answer "unavailable"),
 * return the others to the pool. */
static void limiter_on_park(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter *l = w->data;
	struct limiter_call *c = l->parked, *next;
	struct window_decision d;

	(void)loop;
	(void)revents;
	l->parked = NULL;
	for (; c; c = next) {
		next = c->next;
		c->next = NULL;
		if (c->cb && !l->closing && limiter_call_send(l, c, NULL, false) == 0)
			continue;
		if (c->cb) {
			window_decide_error(&c->policy, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
			limiter_call_answer(c, &d);
		}
		limiter_call_put(c);
	}
}

/* Log a script error (<oom>: Redis over maxmemory) at warn, rate-limited
 * (log_limited), so a broken script cannot flood the log. */
static void limiter_warn_reply(const struct limiter_link *k, const struct window_reply *v,
                               bool oom)
{
	bool err = v->kind == WINDOW_REPLY_ERROR;

	log_limited(CONFIG_LOG_WARN, oom ? "redis_oom" : "redis_script_error",
	            oom ? "redis_oom" : "redis_script_error", "addr=%s reply=\"%.*s\"", k->addr,
	            err ? (int)v->len : 0, err ? v->str : "");
}

/* The view window.c reads of <r> (borrowed: <v> points into it until
 * hiredis frees <r>): an error's text, or an array's integers. */
static void limiter_reply_view(const redisReply *r, struct window_reply *v)
{
	size_t i;

	memset(v, 0, sizeof(*v));
	if (!r)
		return;
	if (r->type == REDIS_REPLY_ERROR && r->str) {
		v->kind = WINDOW_REPLY_ERROR;
		v->str = r->str;
		v->len = r->len;
		return;
	}
	if (r->type != REDIS_REPLY_ARRAY || (r->elements && !r->element))
		return;
	for (i = 0; i < r->elements; i++) {
		if (!r->element[i] || r->element[i]->type != REDIS_REPLY_INTEGER)
			return;
		if (i < WINDOW_REPLY_INTS)
			v->v[i] = r->element[i]->integer;
	}
	v->kind = WINDOW_REPLY_INTEGERS;
	v->n = r->elements;
}

/*
 * Answer call <c> from its script result <view> (an error or the integers,
 * borrowed) that Redis gave on link <k> at <now>: the decision, the deny
 * cache, the metrics. A call answered already (its deadline) only counts a
 * late admission. The caller recycles <c>.
 */
static void limiter_call_finish(struct limiter *l, struct limiter_link *k,
                                struct limiter_call *c, const struct window_reply *view,
                                int64_t now)
{
	struct window_decision d;

	if (!c->cb) {
		/* The deadline answered first (error/redis-timeout), yet Redis ran
		 * the script: an admission it recorded is one the client never got.
		 * Counted so that operators can size redis-timeout. */
		if (window_decide_reply(&c->policy, view, &d) == 0 && d.status == WINDOW_ALLOW &&
		    l->metrics)
			metrics_add(&l->metrics->late_admissions, 1);
		return;
	}

	if (l->metrics)
		metrics_observe_redis_latency(l->metrics, (uint64_t)(now - c->sent_us));
	if (window_decide_reply(&c->policy, view, &d) == -1) {
		/* over maxmemory: fail-closed like any Redis error, named apart */
		bool oom = d.reason == WINDOW_REASON_REDIS_OOM;

		limiter_count_error(l, oom ? METRICS_REDIS_ERR_OOM : METRICS_REDIS_ERR_SCRIPT);
		limiter_warn_reply(k, view, oom);
	} else if (c->cacheable && d.status == WINDOW_DENY) {
		deny_cache_store(&l->cache, c->policy.name, c->policy.name_len, c->key, c->key_len,
		                 c->cost, c->sent_us, &d, now);
	}
	limiter_call_answer(c, &d);
}

/*
 * hiredis hands call <privdata> back on <ac>: with the script's reply <r>
 * (borrowed: hiredis frees it after this returns), or NULL when the
 * connection is gone. Cluster redirects and TRYAGAIN send it on again;
 * NOSCRIPT re-sends it once as EVAL; CLUSTERDOWN and READONLY (a primary
 * lost or demoted) are answered "unavailable"; otherwise the call is
 * answered from the reply if it still waits, then returns to the pool.
 */
static void limiter_on_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_call *c = privdata;
	struct limiter *l = c->l;
	struct limiter_link *k = c->link;
	const redisReply *reply = r;
	struct window_reply view;
	struct window_decision d;
	int64_t now = limiter_now_us();

	k->held--;
	l->held--;
	if (!reply) {
		/* Sent, and the connection is lost before the reply: Redis may
		 * have run it. Counted whether it is answered now (unavailable)
		 * or was already (timeout). */
		if (l->metrics)
			metrics_add(&l->metrics->unknown_outcome, 1);
		/* The connection is going. A callback below may call
		 * limiter_check(): hiredis refuses new commands on a dying context,
		 * so those are answered "unavailable" too. */
		if (c->cb) {
			limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
			window_decide_error(&c->policy, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
			limiter_call_answer(c, &d);
		}
		goto recycle;
	}
	k->quiet_since_us = now;
	limiter_reply_view(reply, &view);
	if (reply->type == REDIS_REPLY_ERROR) {
		switch (cluster_classify_error(reply->str, reply->len)) {
		case CLUSTER_REPLY_MOVED:
		case CLUSTER_REPLY_ASK:
			if (limiter_cluster_redirect(l, c, reply) == 0)
				return;   /* hiredis holds it again */
			break;
		case CLUSTER_REPLY_TRYAGAIN:
			if (c->cb && c->redirects < LIMITER_REDIRECTS_MAX) {
				limiter_call_park(l, c);
				return;
			}
			break;
		case CLUSTER_REPLY_CLUSTERDOWN:
			/* the cluster lost a primary and has not promoted its replica */
			limiter_topo_refresh(l, "clusterdown");
			goto unavailable;
		case CLUSTER_REPLY_READONLY:
			/* our primary became a replica (failover): find the new one */
			log_warn("redis_read_only", "addr=%s", k->addr);
			limiter_link_drop(k, "primary demoted to replica");
			limiter_topo_refresh(l, "readonly");
			goto unavailable;
		default:
			break;
		}
	}
	if (window_reply_is_noscript(&view)) {
		limiter_count_error(l, METRICS_REDIS_ERR_NOSCRIPT);
		if (!c->cb) {
			/* answered already: nothing to retry, but reload for the others */
			if (!k->script_loading && ac == k->ac && k->state == LIMITER_ST_READY)
				limiter_link_send_script_load(k);
			goto recycle;
		}
		if (!c->retried) {
			if (limiter_call_retry_eval(l, k, ac, c) == 0)
				return;   /* hiredis holds it again */
		}
	}
	limiter_call_finish(l, k, c, &view, now);
	goto recycle;

unavailable:
	/* Redis is there but cannot take writes for this key now: the same
	 * answer as a lost connection, not a script error. */
	if (c->cb) {
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		window_decide_error(&c->policy, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
		limiter_call_answer(c, &d);
	}
recycle:
	limiter_call_put(c);
}

/* ------------------------------------------------------------------ */
/* batches (redis-batch)                                               */

static void limiter_on_batch_reply(redisAsyncContext *ac, void *r, void *privdata);

/* A batch from <l>'s pool (which owns it, freed by limiter_free()), or NULL
 * when memory runs out. */
static struct limiter_batch *limiter_batch_get(struct limiter *l)
{
	struct limiter_batch *b = l->free_batches;

	if (b)
		l->free_batches = b->next;
	else if (!(b = malloc(sizeof(*b))))
		return NULL;
	b->l = l;
	b->next = NULL;
	b->retried = false;
	b->n = 0;
	return b;
}

/* Give <b> back to its limiter's pool (hiredis no longer holds it). */
static void limiter_batch_put(struct limiter_batch *b)
{
	b->next = b->l->free_batches;
	b->l->free_batches = b;
}

/* Answer <c> "unavailable" if it still waits (a refused error), and return
 * it to the pool: hiredis does not hold it. <defer>: on the next loop
 * iteration (limiter_flush() may run inside limiter_check()). */
static void limiter_call_fail(struct limiter *l, struct limiter_call *c, bool defer)
{
	struct window_decision d;
	limiter_cb cb = c->cb;

	if (cb) {
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		window_decide_error(&c->policy, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
		if (defer) {
			c->cb = NULL;
			ev_timer_stop(l->loop, &c->deadline);
			l->unanswered--;
			if (limiter_defer(l, cb, c->arg, &d) == -1)
				cb(c->arg, &d);
		} else {
			limiter_call_answer(c, &d);
		}
	}
	limiter_call_put(c);
}

/* limiter_call_fail() each call of <b> (<defer> as there), and give <b>
 * back to the pool. */
static void limiter_batch_fail(struct limiter_batch *b, bool defer)
{
	unsigned i;

	for (i = 0; i < b->n; i++)
		limiter_call_fail(b->l, b->calls[i], defer);
	limiter_batch_put(b);
}

/* Grow <l>'s batch scratch to <n> decisions. Returns 0, or -1 when memory
 * runs out (the scratch stays as it was: <l> owns it). */
static int limiter_batch_scratch(struct limiter *l, size_t n)
{
	struct window_args *a;
	const char **v;
	size_t *vl;
	char *nums;

	if (n <= l->bcap)
		return 0;
	a = realloc(l->bargs, n * sizeof(*a));
	if (a)
		l->bargs = a;
	v = realloc(l->bargv, WINDOW_BATCH_ARGC(n) * sizeof(*v));
	if (v)
		l->bargv = v;
	vl = realloc(l->bargvlen, WINDOW_BATCH_ARGC(n) * sizeof(*vl));
	if (vl)
		l->bargvlen = vl;
	nums = realloc(l->bnums, WINDOW_BATCH_NUMS(n));
	if (nums)
		l->bnums = nums;
	if (!a || !v || !vl || !nums)
		return -1;
	l->bcap = n;
	return 0;
}

/* Send batch <b> on its link: EVALSHA, or EVAL with the whole script when
 * <eval> (after NOSCRIPT, as one call would be re-sent). hiredis holds <b>
 * and its calls when this returns 0; -1: nothing was sent. */
static int limiter_batch_send(struct limiter *l, struct limiter_batch *b, bool eval)
{
	struct limiter_link *k = b->link;
	enum window_reason why;
	unsigned i;
	int argc;

	if (!k->ac || limiter_batch_scratch(l, b->n) == -1)
		return -1;
	for (i = 0; i < b->n; i++) {
		struct limiter_call *c = b->calls[i];

		if (window_build_args(&c->policy, "", c->key, c->key_len, c->cost,
		                      &l->bargs[i], &why) == -1)
			return -1;
	}
	argc = eval ? window_build_batch(l->bargs, b->n, "EVAL", l->script, l->script_len,
	                                 l->bargv, l->bargvlen, l->bnums)
	            : window_build_batch(l->bargs, b->n, "EVALSHA", l->sha, strlen(l->sha),
	                                 l->bargv, l->bargvlen, l->bnums);
	if (argc == -1 ||
	    redisAsyncCommandArgv(k->ac, limiter_on_batch_reply, b, argc, l->bargv,
	                          l->bargvlen) != REDIS_OK)
		return -1;
	b->retried = eval;
	for (i = 0; i < b->n; i++)
		limiter_link_hold(k);
	return 0;
}

/*
 * Send what limiter_check() queued in this loop iteration: one call as
 * today (EVALSHA of one decision), several as one batch. Calls answered
 * meanwhile (limiter_free()) are not sent; a link that went away answers
 * them "unavailable", as a send that fails would.
 */
static void limiter_flush(struct limiter *l)
{
	struct limiter_link *k;
	struct limiter_batch *b;
	unsigned i, n = l->nqueued;

	if (n == 0)
		return;
	l->nqueued = 0;
	k = l->queue[0]->link;
	if (n == 1) {
		/* alone: exactly the call redis-batch 1 sends */
		struct limiter_call *c = l->queue[0];

		if (!l->closing && c->cb && limiter_call_send(l, c, k, false) == 0)
			c->redirects = 0;
		else
			limiter_call_fail(l, c, true);
		return;
	}
	b = limiter_batch_get(l);
	if (!b) {
		for (i = 0; i < n; i++)
			limiter_call_fail(l, l->queue[i], true);
		return;
	}
	b->link = k;
	b->n = n;
	memcpy(b->calls, l->queue, n * sizeof(b->calls[0]));
	if (l->closing || limiter_batch_send(l, b, false) == -1)
		limiter_batch_fail(b, true);
}

/* The loop is about to wait: send this iteration's calls. */
static void limiter_on_flush(struct ev_loop *loop, ev_prepare *w, int revents)
{
	struct limiter *l = w->data;

	(void)revents;
	ev_prepare_stop(loop, w);
	limiter_flush(l);
}

/*
 * hiredis hands batch <privdata> back on <ac>: with the script's reply <r>
 * (borrowed), or NULL when the connection is gone. An array of one result
 * per call answers each call as its own reply would; an error answers
 * every call with it (NOSCRIPT: the batch is re-sent once as EVAL; READONLY
 * or CLUSTERDOWN: "unavailable"). Then the calls return to the pool.
 */
static void limiter_on_batch_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_batch *b = privdata;
	struct limiter *l = b->l;
	struct limiter_link *k = b->link;
	const redisReply *reply = r;
	struct window_reply view;
	int64_t now = limiter_now_us();
	unsigned i, waiting = 0;

	k->held -= b->n;
	l->held -= b->n;
	if (!reply) {
		/* as for one call: each may or may not have been recorded */
		if (l->metrics)
			metrics_add(&l->metrics->unknown_outcome, b->n);
		goto unavailable;
	}
	k->quiet_since_us = now;
	limiter_reply_view(reply, &view);
	if (reply->type == REDIS_REPLY_ERROR) {
		switch (cluster_classify_error(reply->str, reply->len)) {
		case CLUSTER_REPLY_CLUSTERDOWN:
			goto unavailable;
		case CLUSTER_REPLY_READONLY:
			log_warn("redis_read_only", "addr=%s", k->addr);
			limiter_link_drop(k, "primary demoted to replica");
			goto unavailable;
		default:
			break;
		}
	}
	if (window_reply_is_noscript(&view)) {
		/* keep the calls that still wait, re-send them as EVAL */
		for (i = 0; i < b->n; i++) {
			limiter_count_error(l, METRICS_REDIS_ERR_NOSCRIPT);
			if (b->calls[i]->cb)
				b->calls[waiting++] = b->calls[i];
			else
				limiter_call_put(b->calls[i]);
		}
		b->n = waiting;
		if (!waiting || b->retried || ac != k->ac || limiter_batch_send(l, b, true) == -1) {
			if (!k->script_loading && ac == k->ac && k->state == LIMITER_ST_READY)
				limiter_link_send_script_load(k);
			if (!waiting) {
				limiter_batch_put(b);
				return;
			}
		} else {
			if (!k->script_loading && k->state == LIMITER_ST_READY)
				limiter_link_send_script_load(k);
			return;   /* hiredis holds it again */
		}
	}
	for (i = 0; i < b->n; i++) {
		struct limiter_call *c = b->calls[i];
		struct window_reply one = view;

		if (reply->type == REDIS_REPLY_ARRAY && reply->elements == b->n && reply->element)
			limiter_reply_view(reply->element[i], &one);
		else if (reply->type != REDIS_REPLY_ERROR)
			memset(&one, 0, sizeof(one));   /* not a batch's reply: an error each */
		limiter_call_finish(l, k, c, &one, now);
		limiter_call_put(c);
	}
	limiter_batch_put(b);
	return;

unavailable:
	/* as for one call: a lost connection, or a Redis that cannot write */
	limiter_batch_fail(b, false);
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
	limiter_count_error(l, METRICS_REDIS_ERR_TIMEOUT);
	window_decide_error(&c->policy, WINDOW_REASON_REDIS_TIMEOUT, &d);
	limiter_call_answer(c, &d);
	/* <c> may be recycled by limiter_link_drop() below: not used after this */
	if (k && k->ac && k->held > 0 &&
	    limiter_now_us() - k->quiet_since_us >= limiter_stall_us(l)) {
		log_warn("redis_stalled", "addr=%s waiting=%u", k->addr, k->held);
		limiter_link_drop(k, "no reply within the stall limit");
	}
}

/* <c> waits for its answer from now: count it, arm its deadline. */
static void limiter_call_arm(struct limiter *l, struct limiter_call *c)
{
	l->unanswered++;
	ev_timer_init(&c->deadline, limiter_on_deadline, (double)l->timeout_ms / 1000.0, 0.);
	c->deadline.data = c;
	ev_timer_start(l->loop, &c->deadline);
}

/* Borrows <p> and <key> for the call only: a call sent to Redis keeps its
 * own copies (in a pool call owned by <l>). Contract in limiter.h. */
int limiter_check(struct limiter *l, const struct window_policy *p,
                  const char *key, size_t key_len, uint64_t cost,
                  limiter_cb cb, void *arg)
{
	struct window_args a;
	struct window_decision d;
	struct limiter_call *c;
	struct limiter_link *k;
	enum window_reason why;
	const struct window_limit *lim;
	unsigned nwin;
	int64_t now;

	if (l->closing || !p || !cb)
		return -1;

	/* Step 1: the request itself must be valid (never fails open). */
	l->counter++;
	if (window_build_args(p, l->sha, key, key_len, cost, &a, &why) == -1) {
		window_decide_error(p, why, &d);
		if (why == WINDOW_REASON_BAD_KEY || why == WINDOW_REASON_BAD_COST)
			d.status = WINDOW_ERROR;
		return limiter_defer(l, cb, arg, &d);
	}

	/* Step 2: an account known to be denied is answered here. */
	now = limiter_now_us();
	if (l->cache_on && !p->shadow &&
	    deny_cache_lookup(&l->cache, p->name, p->name_len, key, key_len, cost, now, &d)) {
		unsigned idx = limiter_policy_index(l, p);

		if (l->metrics && idx < CONFIG_MAX_POLICIES)
			metrics_add(&l->metrics->cache_denies[idx], 1);
		log_debug("deny_cache_hit", "policy=%.*s retry_after=%lld", (int)p->name_len,
		          p->name, (long long)d.retry_after);
		return limiter_defer(l, cb, arg, &d);
	}

	/* Step 3: the link that serves the key (a cluster: the primary of its
	 * slot); without a ready one, or over the bound, no queue. */
	k = limiter_route(l, a.argv[3], a.argvlen[3]);
	if (!k || k->state != LIMITER_ST_READY || !k->ac) {
		if (l->cluster && !k)
			limiter_topo_refresh(l, "slot without primary");
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		window_decide_error(p, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
		return limiter_defer(l, cb, arg, &d);
	}
	if (k->evicts && !l->allow_eviction) {
		/* the link's eviction poll sees it fixed (limiter_link.c) */
		window_decide_error(p, WINDOW_REASON_REDIS_EVICTS, &d);
		return limiter_defer(l, cb, arg, &d);
	}
	if (l->held >= LIMITER_MAX_HELD || !(c = limiter_call_get(l))) {
		window_decide_error(p, WINDOW_REASON_OVERLOAD, &d);
		return limiter_defer(l, cb, arg, &d);
	}

	/* Step 4: send, and arm the call's own deadline. */
	c->cb = cb;
	c->arg = arg;
	c->sent_us = now;
	c->retried = false;
	c->asking = false;
	c->redirects = 0;
	c->link = k;
	c->cacheable = l->cache_on && !p->shadow;
	c->cost = cost;
	c->policy = *p;
	lim = window_limits_for(p, key, key_len, &nwin);
	c->policy.nwin = nwin;
	memcpy(c->policy.win, lim, nwin * sizeof(*lim));
	c->policy.overrides = NULL;
	c->policy.noverrides = 0;
	memcpy(c->key, key, key_len);
	c->key_len = key_len;
	if (l->batch > 1 && !l->cluster) {
		/* batched: sent by limiter_flush() before the loop next waits
		 * (or now, when the batch is full); its deadline runs from now */
		if (l->nqueued && l->queue[0]->link != k)
			limiter_flush(l);   /* the primary moved (sentinel) */
		limiter_call_arm(l, c);
		l->queue[l->nqueued++] = c;
		if (l->nqueued >= l->batch)
			limiter_flush(l);
		else if (!ev_is_active(&l->flush))
			ev_prepare_start(l->loop, &l->flush);
		return 0;
	}
	if (redisAsyncCommandArgv(k->ac, limiter_on_reply, c, a.argc, a.argv, a.argvlen) != REDIS_OK) {
		limiter_call_put(c);
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		window_decide_error(p, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
		return limiter_defer(l, cb, arg, &d);
	}
	limiter_link_hold(k);
	limiter_call_arm(l, c);
	return 0;
}

/* ------------------------------------------------------------------ */
/* lifecycle                                                           */

/* Start talking to what l->url names: one link (redis://, unix://), one
 * link found through the sentinels plus the +switch-master subscription
 * (sentinel://), or the seeds of a cluster (cluster://). <l> owns what is
 * allocated here; limiter_backend_stop() undoes it. Returns 0, or -1 with
 * <err> when memory runs out. */
static int limiter_backend_start(struct limiter *l, char *err, size_t errlen)
{
	const struct redis_url *u = &l->url;
	struct limiter_link *k;

	if (u->tls) {
		/* one TLS context per limiter generation: certificates read now */
		l->tls = redis_tls_new(&l->tls_cfg, err, errlen);
		if (!l->tls)
			return -1;
	}
	switch (u->mode) {
	case REDIS_URL_CLUSTER:
		if (limiter_cluster_start(l) == -1)
			goto fail;
		return 0;
	case REDIS_URL_SENTINEL:
		if (limiter_sentinel_start(l) == -1)
			goto fail;
		return 0;
	default:
		k = limiter_link_get(l, u->hosts[0].host, u->hosts[0].port, u->mode == REDIS_URL_UNIX);
		if (!k)
			goto fail;
		/* the address as before: with its db */
		snprintf(k->addr, sizeof(k->addr), "%s", u->addr);
		l->main_link = k;
		limiter_update_connected(l);
		limiter_link_connect(k);
		return 0;
	}

fail:
	snprintf(err, errlen, "out of memory");
	return -1;
}

/* Stop everything limiter_backend_start() started: every call hiredis holds
 * is answered "unavailable" (as <why> says in the log). Links stay
 * allocated (retired) until limiter_free(). */
static void limiter_backend_stop(struct limiter *l, const char *why)
{
	unsigned i;

	l->stopping = true;
	limiter_sentinel_stop(l);
	l->main_link = NULL;
	for (i = 0; i < l->nlinks; i++)
		if (l->links[i]->in_use)
			limiter_link_retire(l->links[i], why);
	l->stopping = false;
	limiter_cluster_stop(l);
	free(l->sentinel); l->sentinel = NULL;
	redis_tls_free(l->tls); l->tls = NULL;
	limiter_set_connected(l, false);
}

/* redis_url_parse() of <s> into <u>, its reason prefixed "redis: " in
 * <err>. Returns 0 or -1. */
static int limiter_parse_url(const char *s, struct redis_url *u, char *err, size_t errlen)
{
	char why[128];

	if (redis_url_parse(s, u, why, sizeof(why)) == 0)
		return 0;
	snprintf(err, errlen, "redis: %s", why);
	return -1;
}

/* redis-batch <n> for <l> (0 and 1: one script call per decision). */
static void limiter_set_batch(struct limiter *l, unsigned n)
{
	l->batch = n < 1 ? 1 : n > LIMITER_BATCH_MAX ? LIMITER_BATCH_MAX : n;
}

/* Allocates the limiter; the caller owns it and frees it with limiter_free(). */
struct limiter *limiter_new(struct ev_loop *loop, const struct limiter_settings *s,
                            char *err, size_t errlen)
{
	struct limiter *l;

	if (!loop || !s || !s->script || !s->script_len) {
		snprintf(err, errlen, "limiter: missing loop or script");
		return NULL;
	}
	l = calloc(1, sizeof(*l));
	if (!l) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (limiter_parse_url(s->redis_url, &l->url, err, errlen) == -1 ||
	    redis_url_load_secrets(&l->url, err, errlen) == -1) {
		redis_url_wipe(&l->url);
		free(l);
		return NULL;
	}
	l->loop = loop;
	l->timeout_ms = s->timeout_ms ? s->timeout_ms : 1;
	l->script = s->script;
	l->script_len = s->script_len;
	l->metrics = s->metrics;
	l->instance = limiter_random64((uint64_t)(uintptr_t)l);
	l->rng = limiter_random64(l->instance ^ 0x5bd1e995u);
	deny_cache_init(&l->cache, limiter_random64(l->rng));
	l->cache_on = true;
	l->allow_eviction = s->allow_eviction;
	l->standby = s->standby;
	limiter_copy_policy_names(l, s);
	if (s->tls)
		l->tls_cfg = *s->tls;
	l->resolver = resolve_new(loop);
	if (!l->resolver) {
		snprintf(err, errlen, "out of memory");
		redis_url_wipe(&l->url);
		free(l);
		return NULL;
	}
	ev_timer_init(&l->kick, limiter_on_kick, 0., 0.);
	l->kick.data = l;
	ev_timer_init(&l->park, limiter_on_park, 0., 0.);
	l->park.data = l;
	ev_prepare_init(&l->flush, limiter_on_flush);
	l->flush.data = l;
	limiter_set_batch(l, s->batch);
	limiter_set_connected(l, false);
	if (limiter_backend_start(l, err, errlen) == -1) {
		limiter_free(l);
		return NULL;
	}
	return l;
}

/* Borrows <s>'s script until limiter_free() or the next reconfigure; the URL
 * and policy names are copied (a new URL or new secrets restart the
 * connections). Contract in limiter.h. */
int limiter_reconfigure(struct limiter *l, const struct limiter_settings *s,
                        char *err, size_t errlen)
{
	struct redis_url u;
	bool script_changed;
	unsigned i;
	int rc = 0;

	if (!s || !s->script || !s->script_len) {
		snprintf(err, errlen, "limiter: missing script");
		return -1;
	}
	if (limiter_parse_url(s->redis_url, &u, err, errlen) == -1)
		return -1;
	if (redis_url_load_secrets(&u, err, errlen) == -1) {
		rc = -1;
		goto out;
	}
	script_changed = s->script_len != l->script_len ||
	                 memcmp(s->script, l->script, s->script_len) != 0;
	l->script = s->script;
	l->script_len = s->script_len;
	l->timeout_ms = s->timeout_ms ? s->timeout_ms : 1;
	l->allow_eviction = s->allow_eviction;
	limiter_flush(l);   /* calls queued under the old settings go as they were */
	limiter_set_batch(l, s->batch);
	limiter_copy_policy_names(l, s);
	/* limits or policies may have changed what a cached deny means */
	deny_cache_clear(&l->cache);

	if (!redis_url_same(&u, &l->url)) {
		log_info("redis_address_changed", "from=%s to=%s", l->url.addr, u.addr);
		limiter_backend_stop(l, "address changed");
		redis_url_wipe(&l->url);
		l->url = u;
		if (s->tls)
			l->tls_cfg = *s->tls;
		rc = limiter_backend_start(l, err, errlen);
	} else {
		/* calls in flight keep the old SHA, which Redis still knows */
		for (i = 0; i < l->nlinks && script_changed; i++) {
			struct limiter_link *k = l->links[i];

			if (k->in_use && k->state == LIMITER_ST_READY)
				limiter_link_send_script_load(k);
		}
		/* a reload is when an operator expects a fixed Redis to be seen */
		for (i = 0; i < l->nlinks; i++) {
			struct limiter_link *k = l->links[i];

			if (k->in_use && k->state == LIMITER_ST_READY && k->ac && !k->evict_asking)
				limiter_link_ask_eviction(k);
		}
	}
out:
	redis_url_wipe(&u);
	return rc;
}

/* Turning <on> off frees the cache table of <l>. */
void limiter_set_deny_cache(struct limiter *l, bool on)
{
	l->cache_on = on;
	if (!on)
		deny_cache_clear(&l->cache);
}

/* Parses <url> and its secrets (the environment, password files) and
 * compares them with what <l> runs on. See limiter.h. */
int limiter_same_redis(const struct limiter *l, const char *url, char *err, size_t errlen)
{
	struct redis_url u;
	int rc = -1;

	if (limiter_parse_url(url, &u, err, errlen) == -1)
		return -1;
	/* over TLS a reload always sets up new connections: the certificate
	 * files are read again (renewed ones at the same paths included) */
	if (redis_url_load_secrets(&u, err, errlen) == 0)
		rc = redis_url_same(&u, &l->url) && !u.tls ? 1 : 0;
	redis_url_wipe(&u);
	return rc;
}

/* See limiter.h. */
bool limiter_ready(const struct limiter *l, char *why, size_t whylen)
{
	if (l->connected && (!l->evicting || l->allow_eviction))
		return true;
	snprintf(why, whylen, "%s", l->last_error[0] ? l->last_error :
	         l->connected ? "maxmemory-policy is not noeviction" : "not connected yet");
	return false;
}

/* See limiter.h: the gauges follow <l> from now on, or no longer. */
void limiter_set_standby(struct limiter *l, bool standby)
{
	l->standby = standby;
	if (!standby) {
		limiter_set_connected(l, l->connected);
		limiter_update_eviction(l);
	}
}

/* Borrowed from <l>: the display form of its URL. */
const char *limiter_addr(const struct limiter *l)
{
	return l->url.addr;
}

/* Calls of <l> whose callback has not run yet: sent and unanswered, plus
 * answers queued for the next loop iteration. */
unsigned limiter_pending(const struct limiter *l)
{
	return l->unanswered + (unsigned)l->nanswers;
}

/* Frees <l> and everything it owns; every call still waiting is answered
 * first (Redis calls with "unavailable", queued answers with theirs). */
void limiter_free(struct limiter *l)
{
	struct limiter_chunk *ch;
	unsigned i;

	if (!l)
		return;
	l->closing = true;
	limiter_flush(l);   /* calls not sent yet: "unavailable" */
	ev_prepare_stop(l->loop, &l->flush);
	/* answers every call hiredis holds with a NULL reply */
	limiter_backend_stop(l, "shutdown");
	limiter_on_park(l->loop, &l->park, 0);
	ev_timer_stop(l->loop, &l->park);
	ev_timer_stop(l->loop, &l->kick);
	while (l->nanswers)
		limiter_on_kick(l->loop, &l->kick, 0);
	ev_timer_stop(l->loop, &l->kick);
	for (i = 0; i < l->nlinks; i++) {
		free(l->links[i]); l->links[i] = NULL;
	}
	while ((ch = l->chunks)) {
		l->chunks = ch->next;
		free(ch);
	}
	free(l->answers); l->answers = NULL;
	while (l->free_batches) {
		struct limiter_batch *b = l->free_batches;

		l->free_batches = b->next;
		free(b);
	}
	free(l->bargs); l->bargs = NULL;
	free(l->bargv); l->bargv = NULL;
	free(l->bargvlen); l->bargvlen = NULL;
	free(l->bnums); l->bnums = NULL;
	deny_cache_clear(&l->cache);
	resolve_free(l->resolver);
	redis_url_wipe(&l->url);
	free(l);
}
