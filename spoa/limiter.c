/*
 * limiter - asks Redis for decisions: hiredis 0.14 async on one thread's
 * libev loop. This file: limiter_check() and the limiter's lifecycle; the
 * calls and their deadlines are limiter_call.c, batches limiter_batch.c,
 * the connections limiter_link.c, Sentinel limiter_sentinel.c, Cluster
 * routing limiter_cluster.c, the local deny cache deny_cache.c (see
 * limiter_int.h and docs/architecture.md).
 *
 * Life of a call: see limiter_call.h.
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

#include "limiter_batch.h"
#include "limiter_call.h"
#include "limiter_cluster.h"
#include "limiter_int.h"
#include "limiter_link.h"
#include "limiter_sentinel.h"
#include "log.h"

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
	/* the deny cache's table, once every entry in it expired */
	ntrim += deny_cache_trim(&l->cache, limiter_now_us());
	return ntrim;
}

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

/* Borrows <p> and <key> for the call only: a call sent to Redis keeps its
 * own copies (in a pool call owned by <l>). Runs with l->in_check set. */
static int limiter_check_now(struct limiter *l, const struct window_policy *p,
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
	int first;
	bool ready;

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
	 * slot). One not ready yet (start-up, a reconnect) is waited for, up
	 * to the call's deadline, when it can be ready by then; a decision
	 * never connects anything itself. */
	k = limiter_route(l, a.argv[3], a.argvlen[3]);
	ready = k && k->state == LIMITER_ST_READY && k->ac;
	if (!ready && !limiter_call_may_wait(l, k)) {
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		window_decide_error(p, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
		return limiter_defer(l, cb, arg, &d);
	}
	if (ready && k->evicts && !l->allow_eviction) {
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
	if (!ready) {
		if (limiter_call_queue(l, c, k) == 0)
			return 0;   /* sent when its link is ready (limiter_wake) */
		limiter_call_put(c);
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		window_decide_error(p, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
		return limiter_defer(l, cb, arg, &d);
	}
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
	first = limiter_engine_apply(k->engine, l, false, a.argv, a.argvlen);
	if (redisAsyncCommandArgv(k->ac, limiter_on_reply, c, a.argc - first, a.argv + first,
	                          a.argvlen + first) != REDIS_OK) {
		limiter_call_put(c);
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		window_decide_error(p, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
		return limiter_defer(l, cb, arg, &d);
	}
	c->engine = k->engine;
	limiter_link_hold(k);
	limiter_call_arm(l, c);
	return 0;
}

/* limiter_check_now() with every answer it gives deferred (l->in_check):
 * none reaches <cb> before this returns. Contract in limiter.h. */
int limiter_check(struct limiter *l, const struct window_policy *p,
                  const char *key, size_t key_len, uint64_t cost,
                  limiter_cb cb, void *arg)
{
	bool outer;
	int rc;

	if (!l)
		return -1;
	outer = l->in_check;
	l->in_check = true;
	rc = limiter_check_now(l, p, key, key_len, cost, cb, arg);
	l->in_check = outer;
	return rc;
}

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
		limiter_link_start(k);
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
	l->topo = NULL;
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
	l->engine_mode = s->engine;
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
	l->wake = limiter_wake;
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
	bool script_changed, engine_changed;
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
	engine_changed = s->engine != l->engine_mode;
	l->engine_mode = s->engine;
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
		/* calls in flight keep the old SHA, which Redis still knows; a
		 * link that ran the module only has none yet */
		for (i = 0; i < l->nlinks && (script_changed || engine_changed); i++) {
			struct limiter_link *k = l->links[i];

			if (k->in_use && k->state == LIMITER_ST_READY &&
			    l->engine_mode != LIMITER_ENGINE_ONLY_MODULE)
				limiter_link_send_script_load(k);
		}
		/* redis-engine changed: each ready link asks again (the script
		 * alone needs no asking) */
		for (i = 0; i < l->nlinks && engine_changed; i++) {
			struct limiter_link *k = l->links[i];

			if (!k->in_use || k->state != LIMITER_ST_READY || !k->ac)
				continue;
			if (l->engine_mode == LIMITER_ENGINE_ONLY_SCRIPT)
				k->engine = &limiter_engine_script;
			else
				limiter_link_probe_engine(k);
		}
		if (engine_changed)
			limiter_update_connected(l);
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

/* Turning <on> off, or a new <size>, frees the cache table of <l>. */
void limiter_set_deny_cache(struct limiter *l, bool on, unsigned size)
{
	l->cache_on = on;
	deny_cache_set_size(&l->cache, size);
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
	limiter_call_unwait_all(l);   /* no link will be ready for them */
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
