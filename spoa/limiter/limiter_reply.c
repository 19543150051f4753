/*
 * limiter_reply - a decision's reply acted on, one call's or a batch's.
 * See limiter_reply.h.
 */
#include <stddef.h>

#include <ev.h>
#include "hiredis_compat.h"
#include <hiredis/async.h>

#include "limiter_call.h"
#include "limiter_cluster.h"
#include "limiter_link.h"
#include "limiter_reply.h"
#include "limiter_verdict.h"
#include "log.h"

/*
 * Act on verdict <v> for call <c>, one of those a reply answers, whose
 * own part of it is <r> (borrowed; its element in a batch's): sent on
 * (MOVED, ASK, TRYAGAIN within its hops), or answered if it still waits
 * and given back to the pool. What the reply says of the link is done
 * already, once (limiter_reply_act()).
 */
static void limiter_reply_call(struct limiter *l, struct limiter_link *k, struct limiter_call *c,
                               enum limiter_verdict v, const redisReply *r, int64_t now)
{
	struct window_reply view;
	struct limiter_link *to;
	bool asking;

	switch (v) {
	case LIMITER_VERDICT_LOST:
	case LIMITER_VERDICT_CLUSTERDOWN:
	case LIMITER_VERDICT_READONLY:
		/* Redis is gone, or there but cannot take writes for this key
		 * now: the answer of a lost connection, not a script error */
		limiter_call_fail(l, c, false);
		return;
	case LIMITER_VERDICT_REDIRECT:
		switch (limiter_cluster_redirect(l, c, r, &to, &asking)) {
		case LIMITER_REDIRECT_SEND:
			c->redirects++;
			if (limiter_call_send(l, c, to, asking) == 0)
				return;   /* hiredis holds it again, or it waits for <to> */
			break;
		case LIMITER_REDIRECT_PARK:
			limiter_call_park(l, c);
			return;
		default:
			break;
		}
		break;
	case LIMITER_VERDICT_TRYAGAIN:
		if (c->cb && c->redirects < LIMITER_REDIRECTS_MAX) {
			limiter_call_park(l, c);
			return;
		}
		break;
	default:
		break;
	}
	/* a result, or an error nothing above could act on: window.c decides */
	limiter_verdict_view(r, &view);
	limiter_call_finish(l, k, c, &view, now);
	limiter_call_put(c);
}

/*
 * See limiter_reply.h. First what the reply says of the link, once
 * however many calls it answers: heard from (a lost connection is not),
 * demoted to a replica (dropped, the cluster's map asked for), the
 * cluster down, the engine missing (its remedy, gone(); the calls that
 * still wait re-sent once as EVAL). Then each call by itself.
 */
int limiter_reply_act(struct limiter_link *k, redisAsyncContext *ac, const redisReply *r,
                      struct limiter_sent *s)
{
	struct limiter *l = k->l;
	enum limiter_verdict v = limiter_verdict_of(r, s->engine->id);
	int64_t now = limiter_now_us();
	unsigned i, waiting = 0;

	limiter_link_release(k, s->n);
	if (v != LIMITER_VERDICT_LOST)
		limiter_link_heard(k, now);
	switch (v) {
	case LIMITER_VERDICT_LOST:
		/* Sent, and the connection is lost before the reply: Redis may
		 * have run each. Counted whether answered now (unavailable) or
		 * already (timeout). The connection is going: hiredis refuses
		 * new commands on it, so a callback's limiter_check() is
		 * answered "unavailable" too. */
		if (l->metrics)
			metrics_add(&l->metrics->unknown_outcome, s->n);
		break;
	case LIMITER_VERDICT_CLUSTERDOWN:
		/* the cluster lost a primary and has not promoted its replica */
		limiter_topo_refresh(l, "clusterdown");
		break;
	case LIMITER_VERDICT_READONLY:
		/* our primary became a replica (failover): find the new one */
		log_warn("redis_read_only", "addr=%s", k->addr);
		limiter_link_drop(k, "primary demoted to replica");
		limiter_topo_refresh(l, "readonly");
		break;
	case LIMITER_VERDICT_MISSING:
		/* NOSCRIPT: Redis lost its script cache (the engine loads it
		 * again); or the module's command is gone: the script takes over
		 * (auto), or each call is answered with the error (module) */
		if (l->metrics)
			metrics_add(&l->metrics->redis_errors[METRICS_REDIS_ERR_NOSCRIPT], s->n);
		if (!s->engine->gone(k, ac))
			break;
		for (i = 0; i < s->n; i++) {
			if (s->calls[i]->cb)
				s->calls[waiting++] = s->calls[i];
			else
				limiter_call_put(s->calls[i]);   /* answered already: nothing to retry */
		}
		s->n = waiting;
		if (!waiting)
			return 0;
		if (!s->retried && ac == k->ac && s->eval(s) == 0)
			return 1;   /* hiredis holds them again */
		break;
	default:
		break;
	}
	for (i = 0; i < s->n; i++)
		limiter_reply_call(l, k, s->calls[i], v, s->batch ? limiter_verdict_element(r, s->n, i) : r,
		                   now);
	return 0;
}

/*
 * s->eval of one call: re-sent as EVAL with the whole script on its link,
 * whose context answered NOSCRIPT (Redis lost its script cache:
 * restarted, failed over, SCRIPT FLUSH) or found the module gone. Returns
 * 0, or -1 when it cannot be sent.
 */
static int limiter_reply_eval(const struct limiter_sent *s)
{
	struct limiter_call *c = s->owner;
	struct limiter *l = c->l;
	struct limiter_link *k = c->link;
	struct window_args a;
	enum window_reason why;

	if (window_build_args(&c->policy, "", c->key, c->key_len, c->cost, &a, &why) == -1)
		return -1;
	limiter_engine_apply(&limiter_engine_script, &l->script, true, a.argv, a.argvlen);
	if (c->asking && redisAsyncCommand(k->ac, NULL, NULL, "ASKING") != REDIS_OK)
		return -1;
	if (limiter_call_command(l, k->ac, limiter_on_reply, c, a.argc, a.argv, a.argvlen) != REDIS_OK)
		return -1;
	c->retried = true;
	c->engine = &limiter_engine_script;
	limiter_link_hold(k);
	return 0;
}

/* See limiter_reply.h: handed over as the calls of one reply, one here. */
void limiter_on_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_call *c = privdata;
	struct limiter_sent s = {
		.calls = &c, .n = 1, .batch = false, .retried = c->retried, .engine = c->engine,
		.eval = limiter_reply_eval, .owner = c,
	};

	limiter_reply_act(c->link, ac, r, &s);
}
