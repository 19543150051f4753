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
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdatomic.h>
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
#include "limiter_reply.h"
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

/* The engines redis-engine <mode> runs on <l>'s links (l->engines): the
 * module's probe before the script's SCRIPT LOAD (auto), one of them
 * alone (script, module); a new connection decides with the script until
 * the probe says (auto), with the module from the start (module). */
static void limiter_choose_engines(struct limiter *l, enum limiter_engine_mode mode)
{
	l->engine_mode = mode;
	l->engines.all[LIMITER_ENGINE_SCRIPT] = &limiter_engine_script;
	l->engines.all[LIMITER_ENGINE_MODULE] = &limiter_engine_module;
	l->engines.n = 0;
	if (mode != LIMITER_ENGINE_ONLY_SCRIPT)
		l->engines.setup[l->engines.n++] = &limiter_engine_module;
	if (mode != LIMITER_ENGINE_ONLY_MODULE)
		l->engines.setup[l->engines.n++] = &limiter_engine_script;
	l->engines.first = mode == LIMITER_ENGINE_ONLY_MODULE ? &limiter_engine_module :
	                   &limiter_engine_script;
}

/* The oldest module protocol that can decide every policy of
 * <p>/<n> (borrowed). */
static long long limiter_protocol_needed(const struct window_policy *p, size_t n)
{
	long long need = 1;
	size_t i;

	for (i = 0; p && i < n; i++)
		if (window_policy_has_quota(&p[i]))
			return LIMITER_MODULE_PROTOCOL_QUOTA;
	for (i = 0; p && i < n; i++) {
		if (p[i].settle_hdr[0])
			return LIMITER_MODULE_PROTOCOL_SETTLE;
		if (p[i].inflight)
			need = LIMITER_MODULE_PROTOCOL_LEASES;
		if (p[i].pooled && need < LIMITER_MODULE_PROTOCOL_POOL)
			need = LIMITER_MODULE_PROTOCOL_POOL;
		if (p[i].algorithm == WINDOW_ALGO_GCRA && need < LIMITER_MODULE_PROTOCOL_GCRA)
			need = LIMITER_MODULE_PROTOCOL_GCRA;
	}
	return need;
}

/* Give memory back after a burst: each part its own (the call pool, the
 * answer queue and the deny cache; the idle batches; spare release
 * records). Contract in
 * limiter.h. */
unsigned limiter_trim(struct limiter *l)
{
	return limiter_calls_trim(l) + limiter_batch_trim(l) + limiter_releases_trim(l);
}

/* How long after the process's first limiter the 1.0.x one-window keys
 * still count, beyond the window itself: the time a rolling upgrade may
 * take to stop the last 1.0.x agent (docs/deployment.md, Upgrading). */
#define LIMITER_LEGACY_ROLL_US  (3600LL * 1000000)

/* Does a decision of <p> for <key> under <l> also count the account's
 * 1.0.x one-window key? From the process's first limiter (a reload keeps
 * it) for that window plus LIMITER_LEGACY_ROLL_US, 1.0.x agents may still
 * write it or its units still count; never on Cluster (another slot). */
static bool limiter_legacy_on(struct limiter *l, const struct window_policy *p,
                              const char *key, size_t key_len)
{
	static _Atomic int64_t first_us;
	const struct window_limit *lim;
	int64_t now = limiter_now_us(), zero = 0;
	unsigned nwin;

	if (!l->legacy_keys || l->url.mode == REDIS_URL_CLUSTER || p->algorithm == WINDOW_ALGO_GCRA)
		return false;
	atomic_compare_exchange_strong(&first_us, &zero, now);
	lim = window_limits_for(p, key, key_len, &nwin);
	return nwin == 1 &&
	       now - atomic_load(&first_us) < (int64_t)lim[0].window_ms * 1000 + LIMITER_LEGACY_ROLL_US;
}

/* Random bytes for lease ids, drawn from getrandom() a block at a time:
 * one syscall per LIMITER_LEASE_BLOCK / 16 ids instead of one per id.
 * Per thread (each worker draws its own; no lock), used front to back,
 * each byte handed out once and then wiped. */
static _Thread_local struct {
	unsigned char b[LIMITER_LEASE_BLOCK];
	size_t used;                    /* bytes handed out; LIMITER_LEASE_BLOCK: refill */
} limiter_lease_rand = { .used = LIMITER_LEASE_BLOCK };

/* Refills this thread's block whole from getrandom(). 0, or -1 (the block
 * then stays empty). */
static int limiter_lease_refill(void)
{
	size_t got = 0;

	while (got < sizeof(limiter_lease_rand.b)) {
		ssize_t n = getrandom(limiter_lease_rand.b + got, sizeof(limiter_lease_rand.b) - got, 0);

		if (n <= 0) {
			if (n == -1 && errno == EINTR)
				continue;
			return -1;
		}
		got += (size_t)n;
	}
	limiter_lease_rand.used = 0;
	return 0;
}

/* See limiter_int.h. */
int limiter_draw_lease(char *out)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char *b;
	size_t i, n = WINDOW_LEASE_ID_LEN / 2;

	out[0] = '\0';
	if (limiter_lease_rand.used + n > sizeof(limiter_lease_rand.b) && limiter_lease_refill() == -1)
		return -1;
	b = limiter_lease_rand.b + limiter_lease_rand.used;
	limiter_lease_rand.used += n;
	for (i = 0; i < n; i++) {
		out[2 * i] = hex[b[i] >> 4];
		out[2 * i + 1] = hex[b[i] & 15];
	}
	out[2 * i] = '\0';
	memset(b, 0, n);
	return 0;
}

/* Borrows <p> and <key> for the call only: a call sent to Redis keeps its
 * own copies (in a pool call owned by <l>). Runs with l->in_check set. */
static int limiter_check_now(struct limiter *l, const struct window_policy *p,
                             const char *key, size_t key_len, uint64_t cost,
                             limiter_cb cb, void *arg)
{
	struct window_policy q;
	struct window_args a;
	struct window_decision d;
	enum window_reason why;
	int rc;

	if (l->closing || !p || !cb)
		return -1;
	l->counter++;
	q = *p;
	q.legacy_key = limiter_legacy_on(l, p, key, key_len);
	q.lease_id[0] = '\0';
	q.lease_at = -1;
	/* (no lease id, no decision: window_build_args refuses it) */
	if ((p->inflight || p->settle_hdr[0]) && limiter_draw_lease(q.lease_id) == -1)
		log_warn("lease_id", "reason=\"getrandom failed\"");
	p = &q;

	/* Step 1: the request itself must be valid (never fails open). Its
	 * head ("EVALSHA" <sha>) is the engine's, made where it is sent. */
	if (window_build_args(p, "", key, key_len, cost, &a, &why) == -1) {
		window_decide_error(p, why, &d);
		if (why == WINDOW_REASON_BAD_KEY || why == WINDOW_REASON_BAD_COST)
			d.status = WINDOW_ERROR;
		return limiter_defer(l, cb, arg, &d);
	}

	q.lease_at = a.lease_at;

	/* Step 2: an account known to be denied is answered here. */
	if (limiter_call_cached(l, p, key, key_len, cost, cb, arg, &rc))
		return rc;

	/* Step 3: the call, to the link that serves the key: sent, batched,
	 * waiting for that link, or refused (limiter_batch.c, limiter_call.c).
	 * A decision never connects anything itself. */
	return limiter_batch_submit(l, p, key, key_len, cost, &a, cb, arg);
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
		/* the address as before: with its db */
		if (!limiter_link_start_main(l, u->hosts[0].host, u->hosts[0].port,
		                             u->mode == REDIS_URL_UNIX, u->addr))
			goto fail;
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
	l->stopping = true;
	limiter_sentinel_stop(l);
	limiter_cluster_stop(l);
	limiter_links_retire_all(l, why);
	l->stopping = false;
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
	limiter_script_set(&l->script, s->script, s->script_len);
	l->metrics = s->metrics;
	l->instance = limiter_random64((uint64_t)(uintptr_t)l);
	l->allow_eviction = s->allow_eviction;
	l->legacy_keys = s->legacy_keys;
	l->module_protocol_min = limiter_protocol_needed(s->policies, s->npolicies);
	limiter_choose_engines(l, s->engine);
	l->standby = s->standby;
	if (s->tls)
		l->tls_cfg = *s->tls;
	l->resolver = resolve_new(loop);
	if (!l->resolver) {
		snprintf(err, errlen, "out of memory");
		redis_url_wipe(&l->url);
		free(l);
		return NULL;
	}
	limiter_links_init(l, limiter_random64(l->instance ^ 0x5bd1e995u));
	limiter_calls_init(l, limiter_random64(l->instance ^ 0x2545f491u));
	limiter_calls_set_policies(l, s->policies, s->npolicies);
	limiter_batch_init(l, s->batch);
	l->wake = limiter_wake;
	l->on_reply = limiter_on_reply;
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
	long long needed;
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
	script_changed = limiter_script_set(&l->script, s->script, s->script_len);
	l->timeout_ms = s->timeout_ms ? s->timeout_ms : 1;
	l->allow_eviction = s->allow_eviction;
	l->legacy_keys = s->legacy_keys;
	/* (a new need for the module's protocol asks every link again) */
	needed = limiter_protocol_needed(s->policies, s->npolicies);
	engine_changed = s->engine != l->engine_mode || needed != l->module_protocol_min;
	l->module_protocol_min = needed;
	limiter_choose_engines(l, s->engine);
	limiter_batch_set_size(l, s->batch);
	/* limits or policies may have changed what a cached deny means */
	limiter_calls_set_policies(l, s->policies, s->npolicies);

	if (!redis_url_same(&u, &l->url)) {
		log_info("redis_address_changed", "from=%s to=%s", l->url.addr, u.addr);
		limiter_backend_stop(l, "address changed");
		redis_url_wipe(&l->url);
		l->url = u;
		if (s->tls)
			l->tls_cfg = *s->tls;
		rc = limiter_backend_start(l, err, errlen);
	} else {
		/* a reload is also when an operator expects a fixed Redis to be seen */
		limiter_links_reconfigure(l, script_changed, engine_changed);
	}
out:
	redis_url_wipe(&u);
	return rc;
}

/* Turning <on> off, or a new <size>, frees the cache table of <l>. */
void limiter_set_deny_cache(struct limiter *l, bool on, unsigned size)
{
	limiter_calls_set_cache(l, on, size);
}

void limiter_forget_denies(struct limiter *l)
{
	limiter_calls_forget_denies(l);
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
	if (l->health.connected && (!l->health.evicting || l->allow_eviction))
		return true;
	snprintf(why, whylen, "%s", l->health.last_error[0] ? l->health.last_error :
	         l->health.connected ? "maxmemory-policy is not noeviction" : "not connected yet");
	return false;
}

/* See limiter.h: the gauges follow <l> from now on, or no longer. */
void limiter_set_standby(struct limiter *l, bool standby)
{
	l->standby = standby;
	if (!standby) {
		limiter_set_connected(l, l->health.connected);
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
	return l->calls.unanswered + (unsigned)l->calls.nanswers;
}

/* Frees <l> and everything it owns; every call still waiting is answered
 * first (Redis calls with "unavailable", queued answers with theirs). */
void limiter_free(struct limiter *l)
{
	if (!l)
		return;
	l->closing = true;
	limiter_flush(l);   /* calls not sent yet: "unavailable" */
	limiter_call_unwait_all(l);   /* no link will be ready for them */
	/* answers every call hiredis holds with a NULL reply */
	limiter_backend_stop(l, "shutdown");
	limiter_releases_free(l);
	limiter_calls_free(l);
	limiter_batch_free(l);
	limiter_links_free(l);
	resolve_free(l->resolver);
	redis_url_wipe(&l->url);
	free(l);
}
