/*
 * limiter_health - what the links report and watch, a leaf under
 * limiter_link.c: the connected, eviction and engine gauges, why the last
 * attempt failed, and the eviction watch (the policy and evicted_keys,
 * at setup and every LIMITER_EVICT_POLL_MS). See limiter_health.h.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>
#include "hiredis_compat.h"
#include <hiredis/async.h>

#include "limiter_health.h"
#include "log.h"

/* ------------------------------------------------------------------ */
/* gauges                                                              */

_Static_assert((int)LIMITER_ENGINE_SCRIPT == (int)METRICS_ENGINE_SCRIPT &&
               (int)LIMITER_ENGINE_MODULE == (int)METRICS_ENGINE_MODULE &&
               (int)LIMITER_ENGINE_COUNT == (int)METRICS_ENGINE_COUNT,
               "an engine's id is its metrics index");

/* Set <l>'s connected gauge to <up>. */
void limiter_set_connected(struct limiter *l, bool up)
{
	l->health.connected = up;
	if (l->metrics && !l->standby)
		atomic_store_explicit(&l->metrics->redis_connected, up ? 1 : 0,
		                      memory_order_relaxed);
}

/* Recompute the redis_connected gauge: the one link is READY, or what the
 * topology says (cluster: every slot has a primary whose link is READY). */
void limiter_update_connected(struct limiter *l)
{
	bool up;

	bool engines[METRICS_ENGINE_COUNT] = { false, false };
	unsigned i;

	if (l->topo && l->topo->up)
		up = l->topo->up(l);
	else
		up = l->links.main && l->links.main->state == LIMITER_ST_READY;
	limiter_set_connected(l, up);
	for (i = 0; i < l->links.n; i++) {
		const struct limiter_link *k = l->links.all[i];

		if (k->in_use && k->state == LIMITER_ST_READY)
			engines[k->engine->id] = true;   /* the same order (limiter_engine.h) */
	}
	for (i = 0; l->metrics && !l->standby && i < METRICS_ENGINE_COUNT; i++)
		atomic_store_explicit(&l->metrics->redis_engine[i], engines[i] ? 1 : 0,
		                      memory_order_relaxed);
}

/* Remember why <l>'s last attempt failed (<what> about <addr>), for a
 * reload that waits for a new Redis to tell why it gave up. */
void limiter_note_error(struct limiter *l, const char *addr, const char *what)
{
	/* cut to fit: a reason in a log line, not a record */
	snprintf(l->health.last_error, sizeof(l->health.last_error), "%.80s: %.70s", addr, what);
}

/* Recompute the redis_unsafe_eviction gauge: a link in use evicts keys. */
void limiter_update_eviction(struct limiter *l)
{
	bool any = false;
	unsigned i;

	for (i = 0; i < l->links.n && !any; i++)
		any = l->links.all[i]->in_use && l->links.all[i]->watch.evicts;
	l->health.evicting = any;
	if (l->metrics && !l->standby)
		atomic_store_explicit(&l->metrics->redis_unsafe_eviction, any ? 1 : 0,
		                      memory_order_relaxed);
}

/*
 * Eviction. Redis may drop the windows under any maxmemory-policy but
 * noeviction (the only keys with a TTL go first under volatile-*), and the
 * limiter would then admit everything. Two signals, each refusing
 * decisions (redis-evicts-keys) unless redis-allow-eviction is set:
 *   - CONFIG GET maxmemory-policy is not noeviction (at setup, then every
 *     LIMITER_EVICT_POLL_MS: a managed service changes it live);
 *   - INFO stats's evicted_keys grew (Redis's own count of the keys it
 *     evicted: also seen where CONFIG is refused, or where the policy was
 *     switched and back between two polls); it refuses for
 *     LIMITER_EVICT_HOLD_MS after the last growth.
 * One CONFIG GET and one INFO stats per ready link per poll, pipelined,
 * never a second while one waits: a cost per link, not per decision.
 * Logged at error when the link starts refusing (and at each setup that
 * finds it so), at info when it stops. A refused CONFIG or INFO (an ACL,
 * a managed Redis) is a warning and the other signal goes on alone.
 */

/* Recompute <k>'s verdict at <now>: its policy evicts, or evicted_keys grew
 * less than the hold time ago. <why> names the signal when it turns on;
 * <setup>: log a refusal even if the link refused already. */
static void limiter_link_judge_eviction(struct limiter_link *k, int64_t now, bool setup,
                                        const char *why)
{
	struct limiter *l = k->l;
	bool grew = k->watch.evicted_seen_us &&
	            now - k->watch.evicted_seen_us < (int64_t)LIMITER_EVICT_HOLD_MS * 1000;
	bool evicts = k->watch.policy_evicts || grew;

	if (evicts)
		limiter_note_error(l, k->addr, k->watch.policy_evicts ? "maxmemory-policy is not noeviction" :
		                   "Redis evicted keys (evicted_keys grew)");
	if (evicts && (setup || !k->watch.evicts)) {
		log_error("redis_unsafe_eviction", "addr=%s %s action=\"%s\"", k->addr, why,
		          l->allow_eviction ? "deciding anyway (redis-allow-eviction yes)" :
		          "refusing decisions (reason=redis-evicts-keys)");
	} else if (!evicts && k->watch.evicts) {
		log_info("redis_eviction_safe", "addr=%s policy=noeviction", k->addr);
	}
	if (evicts != k->watch.evicts) {
		k->watch.evicts = evicts;
		limiter_update_eviction(l);
	}
}

/* CONFIG GET maxmemory-policy answered on <ac>. */
static void limiter_link_on_eviction(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_link *k = ac->data;
	const redisReply *reply = r, *v;
	bool setup = k->state == LIMITER_ST_CONNECTING;
	int64_t now = limiter_now_us();
	char why[96];

	(void)privdata;
	if (ac != k->ac || !reply)
		return;
	limiter_link_heard(k, now);
	k->watch.evict_asking = false;
	v = reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 && reply->element &&
	    reply->element[1]->type == REDIS_REPLY_STRING ? reply->element[1] : NULL;
	if (!v) {
		if (setup)
			log_warn("redis_eviction_unknown", "addr=%s reply=\"%.*s\" action=\"deciding "
			         "without knowing maxmemory-policy (give the user +config|get)\"", k->addr,
			         reply->type == REDIS_REPLY_ERROR ? (int)reply->len : 0,
			         reply->type == REDIS_REPLY_ERROR ? reply->str : "");
		k->watch.config_refused = true;
		k->watch.policy_evicts = false;
	} else {
		k->watch.policy_evicts = !(v->len == 10 && memcmp(v->str, "noeviction", 10) == 0);
	}
	snprintf(why, sizeof(why), "policy=%.*s", v ? (int)v->len : 0, v ? v->str : "");
	limiter_link_judge_eviction(k, now, setup && k->watch.policy_evicts, why);
}

/* Queue CONFIG GET maxmemory-policy on <k>'s connection. */
static void limiter_link_ask_eviction(struct limiter_link *k)
{
	if (redisAsyncCommand(k->ac, limiter_link_on_eviction, NULL,
	                      "CONFIG GET maxmemory-policy") != REDIS_OK)
		return;
	k->watch.evict_asking = true;
}

/* The value of field "evicted_keys:" in INFO text <s>/<len>, or -1. */
static long long limiter_info_evicted_keys(const char *s, size_t len)
{
	static const char name[] = "evicted_keys:";
	const size_t nlen = sizeof(name) - 1;
	long long v = 0;
	size_t i;

	for (i = 0; i + nlen < len; i++) {
		if ((i > 0 && s[i - 1] != '\n') || memcmp(s + i, name, nlen) != 0)
			continue;
		for (i += nlen; i < len && s[i] >= '0' && s[i] <= '9'; i++)
			if (v < (LLONG_MAX - 9) / 10)
				v = v * 10 + (s[i] - '0');
		return v;
	}
	return -1;
}

/* INFO stats answered on <ac>: evicted_keys against the last value seen on
 * this connection (the first one is only a baseline; a smaller one, after
 * CONFIG RESETSTAT, a new baseline). */
static void limiter_link_on_info(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_link *k = ac->data;
	const redisReply *reply = r;
	int64_t now = limiter_now_us();
	long long v;
	char why[96];

	(void)privdata;
	if (ac != k->ac || !reply)
		return;
	limiter_link_heard(k, now);
	k->watch.info_asking = false;
	v = reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_STATUS ?
	    limiter_info_evicted_keys(reply->str, reply->len) : -1;
	if (v < 0) {
		if (!k->watch.info_warned)
			log_warn("redis_eviction_evidence_unknown", "addr=%s reply=\"%.*s\" "
			         "action=\"not watching evicted_keys (give the user +info); the "
			         "maxmemory-policy check goes on\"", k->addr,
			         reply->type == REDIS_REPLY_ERROR ? (int)reply->len : 0,
			         reply->type == REDIS_REPLY_ERROR ? reply->str : "");
		k->watch.info_warned = true;
		k->watch.info_refused = true;
		return;
	}
	if (k->watch.evicted_base >= 0 && v > k->watch.evicted_base) {
		snprintf(why, sizeof(why), "evicted_keys=%lld grew_by=%lld", v, v - k->watch.evicted_base);
		k->watch.evicted_seen_us = now;
		k->watch.evicted_base = v;
		limiter_link_judge_eviction(k, now, false, why);
		return;
	}
	k->watch.evicted_base = v;
	limiter_link_judge_eviction(k, now, false, "");
}

/* Queue INFO stats on <k>'s connection, unless refused or one waits. */
static void limiter_link_ask_info(struct limiter_link *k)
{
	if (k->watch.info_refused || k->watch.info_asking)
		return;
	if (redisAsyncCommand(k->ac, limiter_link_on_info, NULL, "INFO stats") == REDIS_OK)
		k->watch.info_asking = true;
}

/* Every LIMITER_EVICT_POLL_MS on a ready link: ask both signals again (one
 * of each in flight at most), and let an old evicted_keys growth expire. */
static void limiter_link_on_evict_poll(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter_link *k = w->data;

	(void)revents;
	if (k->state != LIMITER_ST_READY || !k->ac) {
		ev_timer_stop(loop, w);
		return;
	}
	if (!k->watch.evict_asking && !k->watch.config_refused)
		limiter_link_ask_eviction(k);
	limiter_link_ask_info(k);
	limiter_link_judge_eviction(k, limiter_now_us(), false, "");
}


/* ------------------------------------------------------------------ */
/* the watch's life, at the link's moments                             */

/* <k>'s watch, once, when the link struct is made. */
void limiter_link_watch_init(struct limiter_link *k)
{
	ev_init(&k->watch.poll, limiter_link_on_evict_poll);
	k->watch.poll.repeat = LIMITER_EVICT_POLL_MS / 1000.0;
	k->watch.poll.data = k;
}

/* A new target for <k>: nothing known of its eviction yet. */
void limiter_link_watch_reset(struct limiter_link *k)
{
	k->watch.evicts = false;
	k->watch.policy_evicts = false;
	k->watch.evict_asking = false;
	k->watch.info_asking = false;
	k->watch.info_warned = false;
	k->watch.evicted_base = -1;
	k->watch.evicted_seen_us = 0;
}

/* <k>'s new connection: ask both signals as part of its setup (what the
 * last connection was refused may be allowed on this one). */
void limiter_link_watch_start(struct limiter_link *k)
{
	k->watch.config_refused = false;
	k->watch.info_refused = false;
	k->watch.info_asking = false;
	k->watch.evicted_base = -1;
	limiter_link_ask_eviction(k);
	limiter_link_ask_info(k);
}

/* <k> is ready: poll every LIMITER_EVICT_POLL_MS. */
void limiter_link_watch_poll(struct limiter_link *k)
{
	ev_timer_again(k->l->loop, &k->watch.poll);
}

/* A reload: ask <k>'s policy again now (an operator who fixed Redis
 * expects a reload to see it), unless one is in flight. */
void limiter_link_watch_recheck(struct limiter_link *k)
{
	if (!k->watch.evict_asking)
		limiter_link_ask_eviction(k);
}

/* <k> lost its connection or is retired: no poll, nothing in flight. */
void limiter_link_watch_stop(struct limiter_link *k)
{
	k->watch.evict_asking = false;
	k->watch.info_asking = false;
	ev_timer_stop(k->l->loop, &k->watch.poll);
}

/* Does <k> refuse decisions: it evicts keys and <l> does not allow it? */
bool limiter_link_refuses(const struct limiter_link *k)
{
	return k->watch.evicts && !k->l->allow_eviction;
}
