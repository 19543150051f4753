/*
 * limiter_link - one connection to one Redis server: connect, the setup
 * sequence, backoff, stall limit, retire. See limiter_link.h.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <ev.h>
#include "hiredis_compat.h"
#include <hiredis/async.h>
#include <hiredis/sds.h>

#include "limiter_health.h"
#include "limiter_link.h"
#include "log.h"
#include "redis_open.h"
#include "redis_tls.h"
#include "resolve.h"

static const char *const limiter_state_names[LIMITER_ST_COUNT] = {
	[LIMITER_ST_IDLE] = "idle",
	[LIMITER_ST_CONNECTING] = "connecting",
	[LIMITER_ST_READY] = "ready",
};

/* Name of connection state <s>, for logs. */
static const char *limiter_state_str(enum limiter_state s)
{
	return s < LIMITER_ST_COUNT ? limiter_state_names[s] : "?";
}

/* ------------------------------------------------------------------ */
/* links                                                               */

static void limiter_link_on_retry(struct ev_loop *loop, ev_timer *w, int revents);
static void limiter_link_on_connect_timeout(struct ev_loop *loop, ev_timer *w, int revents);
static void limiter_link_connect_next(struct limiter_link *k);
static void limiter_link_connect(struct limiter_link *k);

/* Point <k> at <host>:<port> (<is_unix>: <host> is a socket path). */
void limiter_link_set_target(struct limiter_link *k, const char *host, int port,
                             bool is_unix)
{
	snprintf(k->host, sizeof(k->host), "%s", host);
	k->port = port;
	k->is_unix = is_unix;
	if (is_unix)
		snprintf(k->addr, sizeof(k->addr), "unix:%s", host);
	else
		redis_url_format_host(host, port, k->addr, sizeof(k->addr));
}

/*
 * A link to <host>:<port> for <l>, which owns it until limiter_free(): the
 * in-use one with that target, else a retired one that hiredis no longer
 * holds anything on, else a new one. Does not connect. NULL when
 * LIMITER_LINKS_MAX are in use or memory runs out.
 */
struct limiter_link *limiter_link_get(struct limiter *l, const char *host, int port,
                                      bool is_unix)
{
	struct limiter_link *k, *spare = NULL;
	unsigned i;

	for (i = 0; i < l->links.n; i++) {
		k = l->links.all[i];
		if (k->in_use && k->port == port && k->is_unix == is_unix &&
		    strcmp(k->host, host) == 0)
			return k;
		if (!k->in_use && !k->ac && k->held == 0 && !spare)
			spare = k;
	}
	if (!spare) {
		if (l->links.n >= LIMITER_LINKS_MAX)
			return NULL;
		spare = calloc(1, sizeof(*spare));
		if (!spare)
			return NULL;
		spare->l = l;
		ev_timer_init(&spare->retry, limiter_link_on_retry, 0., 0.);
		spare->retry.data = spare;
		ev_timer_init(&spare->connect_timer, limiter_link_on_connect_timeout, 1., 0.);
		spare->connect_timer.data = spare;
		limiter_link_watch_init(spare);
		l->links.all[l->links.n++] = spare;
	}
	k = spare;
	k->in_use = true;
	k->state = LIMITER_ST_IDLE;
	k->engine = l->engines.first;
	for (i = 0; i < LIMITER_ENGINE_COUNT; i++)
		l->engines.all[i]->link_reset(k);
	k->backoff_ms = LIMITER_BACKOFF_MIN_MS;
	k->attempted = false;
	k->was_ready = false;
	k->failures = 0;
	limiter_link_watch_reset(k);
	limiter_link_set_target(k, host, port, is_unix);
	return k;
}

/* hiredis now holds one more call on <k>. */
void limiter_link_hold(struct limiter_link *k)
{
	limiter_link_hold_n(k, 1);
}

/* hiredis now holds <n> more calls on <k> (a batch). */
void limiter_link_hold_n(struct limiter_link *k, unsigned n)
{
	if (k->held == 0)
		limiter_link_heard(k, limiter_now_us());
	k->held += n;
	k->l->links.held += n;
}

/* A wait drawn in [<d>/2, <d>] ms from <l>'s jitter generator (xorshift64*),
 * so that threads and agents do not reconnect in step. */
unsigned limiter_link_jitter(struct limiter *l, unsigned d)
{
	uint64_t *x = &l->links.rng;

	*x ^= *x >> 12;
	*x ^= *x << 25;
	*x ^= *x >> 27;
	return d / 2 + (unsigned)((*x * 0x2545f4914f6cdd1dULL) % (d / 2 + 1));
}

/* Arm <k>'s retry timer: 100 ms doubling to 2 s, with jitter. */
void limiter_link_schedule_retry(struct limiter_link *k)
{
	struct limiter *l = k->l;
	unsigned d = k->backoff_ms;
	unsigned wait = limiter_link_jitter(l, d);

	if (l->closing || !k->in_use)
		return;
	k->backoff_ms = d * 2 > LIMITER_BACKOFF_MAX_MS ? LIMITER_BACKOFF_MAX_MS : d * 2;
	ev_timer_stop(l->loop, &k->retry);
	ev_timer_set(&k->retry, (double)wait / 1000.0, 0.);
	ev_timer_start(l->loop, &k->retry);
}

/* Forget <k>'s context (hiredis frees it, or already did) and plan a retry. */
void limiter_link_lost(struct limiter_link *k)
{
	struct limiter *l = k->l;

	k->ac = NULL;
	k->state = LIMITER_ST_IDLE;
	limiter_link_watch_stop(k);
	ev_timer_stop(l->loop, &k->connect_timer);
	if (l->topo && l->topo->on_lost)
		l->topo->on_lost(k);
	limiter_update_connected(l);
	limiter_link_schedule_retry(k);
}

/*
 * Close <k>'s connection now: every call hiredis holds on it comes back
 * with a NULL reply (answered "unavailable" unless already answered) before
 * this returns, except when we are inside one of this context's callbacks,
 * where hiredis finishes the job once the callback returns.
 */
void limiter_link_drop(struct limiter_link *k, const char *why)
{
	redisAsyncContext *ac = k->ac;

	if (!ac)
		return;
	/* a planned stop is no outage: log-based alerts must not see one */
	if (k->l->stopping)
		log_info("redis_closed", "addr=%s state=%s reason=\"%s\"", k->addr,
		         limiter_state_str(k->state), why);
	else
		log_limited(CONFIG_LOG_WARN, "redis_disconnected", "redis_disconnected",
		            "addr=%s state=%s reason=\"%s\"", k->addr, limiter_state_str(k->state),
		            why);
	limiter_link_lost(k);
	redisAsyncFree(ac);
}

/* Stop using <k>: drop its connection (see limiter_link_drop) and its
 * timers. The struct stays, for reuse or for late hiredis callbacks. */
void limiter_link_retire(struct limiter_link *k, const char *why)
{
	limiter_link_stop_resolving(k);
	limiter_link_drop(k, why);
	k->in_use = false;
	k->state = LIMITER_ST_IDLE;
	limiter_update_eviction(k->l);
	ev_timer_stop(k->l->loop, &k->retry);
	ev_timer_stop(k->l->loop, &k->connect_timer);
	limiter_link_watch_stop(k);
}

/* One failed connect attempt, at warn (traffic is refused meanwhile);
 * the backoff (2 s at most) and log_limited keep it to a line a second. */
void limiter_link_log_failure(struct limiter_link *k, const char *why)
{
	k->failures++;
	limiter_note_error(k->l, k->addr, why);
	log_limited(CONFIG_LOG_WARN, "redis_connect_failed", "redis_connect_failed",
	            "addr=%s reason=\"%s\" attempt=%u", k->addr, why, k->failures);
}

/* hiredis: the TCP (or unix) connect of <ac> finished with <status>. On
 * failure hiredis frees <ac> once this returns: never free it here. */
static void limiter_link_on_connect(const redisAsyncContext *ac, int status)
{
	struct limiter_link *k = ac->data;

	if (ac != k->ac)
		return;
	if (status != REDIS_OK) {
		/* hiredis frees <ac> right after this callback; the next address
		 * of the name, if any, gets its turn */
		limiter_link_log_failure(k, ac->errstr ? ac->errstr : "connect failed");
		limiter_count_error(k->l, METRICS_REDIS_ERR_REFUSED);
		k->ac = NULL;
		limiter_link_connect_next(k);
		return;
	}
	log_debug("redis_socket_connected", "addr=%s", k->addr);
}

/* hiredis: connected context <ac> is going away (its pending calls have
 * had their NULL replies already); hiredis frees it once this returns. */
static void limiter_link_on_disconnect(const redisAsyncContext *ac, int status)
{
	struct limiter_link *k = ac->data;
	const char *why;

	(void)status;
	if (ac != k->ac)
		return;   /* we dropped it ourselves and said so */
	why = ac->errstr && ac->err ? ac->errstr : "closed";
	/* a refused handshake shows in hiredis as a closed connection */
	if (k->state == LIMITER_ST_CONNECTING && k->l->tls && *redis_tls_last_error(k->l->tls))
		why = redis_tls_last_error(k->l->tls);
	log_limited(CONFIG_LOG_WARN, "redis_disconnected", "redis_disconnected",
	            "addr=%s state=%s reason=\"%s\"", k->addr, limiter_state_str(k->state), why);
	limiter_link_lost(k);
}

/* AUTH or SELECT during setup: anything but +OK drops the connection. */
static void limiter_link_on_setup_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_link *k = ac->data;
	const redisReply *reply = r;
	const char *what = privdata;

	if (ac != k->ac || !reply)
		return;
	limiter_link_heard(k, limiter_now_us());
	if (reply->type == REDIS_REPLY_STATUS && reply->str && strcmp(reply->str, "OK") == 0)
		return;
	limiter_note_error(k->l, k->addr, strcmp(what, "auth") == 0 ? "AUTH refused" : "SELECT refused");
	/* a misconfiguration repeats on every attempt: warn once a streak */
	if (k->failures++ == 0)
		log_warn("redis_setup_failed", "addr=%s step=%s reply=\"%.*s\"", k->addr, what,
		         reply->type == REDIS_REPLY_ERROR ? (int)reply->len : 0,
		         reply->type == REDIS_REPLY_ERROR ? reply->str : "");
	limiter_count_error(k->l, METRICS_REDIS_ERR_REFUSED);
	limiter_link_drop(k, "setup failed");
}

/*
 * ROLE during setup (redis://, unix://, sentinel://): writing to a replica
 * fails every call (READONLY), and a sentinel's answer may be stale, so
 * only a primary will do. Anything else is a failed attempt: logged at
 * error once per attempt, retried with the usual backoff (the link never
 * becomes ready, so neither the backoff nor the connected gauge resets).
 * A ROLE refused outright (an ACL without +role, a managed Redis that
 * renamed it) cannot tell: warn and go on, except under Sentinel, where
 * ROLE is the only check of the sentinel's word.
 */
static void limiter_link_on_role(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_link *k = ac->data;
	const redisReply *reply = r;
	const redisReply *role;

	(void)privdata;
	if (ac != k->ac || !reply)
		return;
	limiter_link_heard(k, limiter_now_us());
	if (reply->type == REDIS_REPLY_ERROR && !(k->l->topo && k->l->topo->role_required)) {
		log_warn("redis_role_unknown", "addr=%s reply=\"%.*s\" action=\"assuming a primary\"",
		         k->addr, (int)reply->len, reply->str);
		return;
	}
	role = reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 && reply->element ?
	       reply->element[0] : NULL;
	if (role && role->type == REDIS_REPLY_STRING && role->len == 6 &&
	    memcmp(role->str, "master", 6) == 0)
		return;
	k->failures++;
	limiter_note_error(k->l, k->addr, "not a primary (ROLE)");
	log_error("redis_not_primary", "addr=%s role=\"%.*s\" attempt=%u action=\"retrying with "
	          "backoff\"", k->addr,
	          role && role->type == REDIS_REPLY_STRING ? (int)role->len : 0,
	          role && role->type == REDIS_REPLY_STRING ? role->str : "", k->failures);
	limiter_count_error(k->l, METRICS_REDIS_ERR_REFUSED);
	limiter_link_drop(k, "not a primary");
}

/* The setup of <k> is through: it takes calls, with the engine chosen. */
static void limiter_link_ready(struct limiter_link *k)
{
	struct limiter *l = k->l;

	ev_timer_stop(l->loop, &k->connect_timer);
	k->state = LIMITER_ST_READY;
	k->was_ready = true;
	k->backoff_ms = LIMITER_BACKOFF_MIN_MS;
	log_info("redis_connected", "addr=%s attempts=%u engine=%s script=%s", k->addr,
	         k->failures + 1, k->engine->name, l->script.sha[0] ? l->script.sha : "-");
	k->failures = 0;
	limiter_link_watch_poll(k);
	limiter_update_connected(l);
	if (l->topo && l->topo->on_ready)
		l->topo->on_ready(k);
	if (l->wake)
		l->wake(l);   /* calls that waited for a link */
}

/* One engine's part of <k>'s setup is through (limiter_engine.h): once
 * every part is, <k> is ready. A ready link (asked again by a reload)
 * stays as it is. */
void limiter_link_setup_done(struct limiter_link *k)
{
	if (k->state == LIMITER_ST_CONNECTING && k->setup_pending > 0 && --k->setup_pending == 0)
		limiter_link_ready(k);
}

/* One more failed step of <k>'s attempts: true for the first of a streak
 * (a misconfiguration repeats on every attempt: said once). */
bool limiter_link_count_failure(struct limiter_link *k)
{
	return k->failures++ == 0;
}

/* CONNECTING lasted longer than the stall limit (e.g. a frozen Redis that
 * still accepts TCP, or a sentinel that does not answer): give up this
 * attempt. */
static void limiter_link_on_connect_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter_link *k = w->data;
	struct limiter *l = k->l;

	(void)loop;
	(void)revents;
	if (k->state != LIMITER_ST_CONNECTING)
		return;
	limiter_count_error(l, METRICS_REDIS_ERR_TIMEOUT);
	if (l->topo && l->topo->connect_timeout && l->topo->connect_timeout(k))
		return;
	if (k->resolving) {
		limiter_link_stop_resolving(k);
		limiter_link_log_failure(k, "resolve: no answer in time");
		limiter_link_lost(k);
		return;
	}
	if (k->ac && !k->is_unix && k->addr_next < k->addrs.naddrs) {
		redisAsyncContext *ac = k->ac;

		/* a black-holed address: the next one gets its turn */
		limiter_link_log_failure(k, "connect timeout");
		k->ac = NULL;
		redisAsyncFree(ac);
		limiter_link_connect_next(k);
		return;
	}
	limiter_note_error(l, k->addr, "setup did not finish in time");
	log_warn("redis_connect_timeout", "addr=%s", k->addr);
	limiter_link_drop(k, "connect timeout");
}

/* The backoff wait is over: try to connect again. */
static void limiter_link_on_retry(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter_link *k = w->data;

	(void)loop;
	(void)revents;
	if (k->in_use && k->state == LIMITER_ST_IDLE)
		limiter_link_connect(k);
}

/* Setup commands on <k>'s new connection: AUTH, SELECT, ROLE (not for
 * cluster links), the eviction check, SCRIPT LOAD; pipelined behind the
 * connect and the TLS handshake (hiredis sends them once connected). */
static void limiter_link_send_setup(struct limiter_link *k)
{
	struct limiter *l = k->l;
	const struct redis_url *u = &l->url;
	redisAsyncContext *ac = k->ac;
	unsigned i;

	if (u->has_pass) {
		/* "AUTH user pass" (ACL) or "AUTH pass" */
		const char *argv[3];
		size_t argvlen[3];
		int argc = 0;

		argv[argc] = "AUTH";
		argvlen[argc++] = 4;
		if (u->user[0]) {
			argv[argc] = u->user;
			argvlen[argc++] = strlen(u->user);
		}
		argv[argc] = u->pass;
		argvlen[argc++] = strlen(u->pass);
		redisAsyncCommandArgv(ac, limiter_link_on_setup_reply, (void *)"auth", argc, argv,
		                      argvlen);
	}
	if (u->db >= 0)
		redisAsyncCommand(ac, limiter_link_on_setup_reply, (void *)"select", "SELECT %d", u->db);
	/* a cluster's seeds may be replicas: CLUSTER SLOTS names the primaries */
	if (!(l->topo && l->topo->skip_role))
		redisAsyncCommand(ac, limiter_link_on_role, NULL, "ROLE");
	limiter_link_watch_start(k);
	/* the engines' parts (redis-engine: the module's probe, the script's
	 * SCRIPT LOAD), asked at every connection (a failover may lose the
	 * module); the link is ready once each said so */
	k->engine = l->engines.first;
	k->setup_pending = l->engines.n;
	for (i = 0; i < l->engines.n; i++)
		l->engines.setup[i]->setup(k);
}

/* (Re)arm <k>'s connect timer: the stall limit from now. */
static void limiter_link_arm_connect_timer(struct limiter_link *k)
{
	struct limiter *l = k->l;

	ev_timer_stop(l->loop, &k->connect_timer);
	ev_timer_set(&k->connect_timer, (double)limiter_stall_us(l) / 1e6, 0.);
	ev_timer_start(l->loop, &k->connect_timer);
}

/*
 * Connect <k> to the next address of its last lookup (or its unix socket);
 * when none is left, the attempt has failed: back off (limiter_link_lost).
 * The context created is owned by <k>, freed through limiter_link_drop()
 * or by hiredis on a connection error. Each address gets the stall limit
 * for connect, TLS handshake and setup.
 */
static void limiter_link_connect_next(struct limiter_link *k)
{
	struct limiter *l = k->l;
	char err[256];
	int port = 0;

	for (;;) {
		redisAsyncContext *ac;

		if (k->is_unix) {
			if (k->addr_next++ > 0)
				break;
			snprintf(k->ip, sizeof(k->ip), "unix");
		} else {
			const struct resolve_addr *a;

			if (k->addr_next >= k->addrs.naddrs)
				break;
			a = &k->addrs.addrs[k->addr_next++];
			snprintf(k->ip, sizeof(k->ip), "%s", a->ip);
			port = a->port;
		}
		ac = redis_open(l->loop, k->is_unix ? k->host : k->ip, port,
		                (uint64_t)(limiter_stall_us(l) / 1000), l->tls, k->host, k, err,
		                sizeof(err));
		if (!ac) {
			limiter_link_log_failure(k, err);
			limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
			continue;
		}
		redisAsyncSetConnectCallback(ac, limiter_link_on_connect);
		redisAsyncSetDisconnectCallback(ac, limiter_link_on_disconnect);
		k->ac = ac;
		k->state = LIMITER_ST_CONNECTING;
		if (l->tls && redis_tls_verify_off(l->tls))
			log_warn("redis_tls_unverified", "addr=%s ip=%s action=\"not verifying the "
			         "server's certificate (redis-tls-verify off)\"", k->addr, k->ip);
		log_debug("redis_connecting", "addr=%s ip=%s tls=%s", k->addr, k->ip,
		          l->tls ? "yes" : "no");
		limiter_link_send_setup(k);
		limiter_link_arm_connect_timer(k);
		return;
	}
	limiter_link_lost(k);
}

/* The lookup of <k>'s host answered (on the loop): try its addresses. */
static void limiter_link_on_resolved(void *arg, const struct resolve_result *res)
{
	struct limiter_link *k = arg;
	char msg[RESOLVE_ERR_MAX + 32];

	k->resolving = NULL;
	if (!k->in_use || k->l->closing)
		return;
	if (res->status != 0) {
		snprintf(msg, sizeof(msg), "resolve: %s", res->err);
		limiter_link_log_failure(k, msg);
		limiter_count_error(k->l, METRICS_REDIS_ERR_REFUSED);
		limiter_link_lost(k);
		return;
	}
	k->addrs = *res;
	k->addr_next = 0;
	limiter_link_connect_next(k);
}

/* Stop <k>'s lookup in flight, if any (its answer will not come), and the
 * sentinel lookup made for it. */
void limiter_link_stop_resolving(struct limiter_link *k)
{
	if (k->resolving) {
		resolve_cancel(k->resolving);
		k->resolving = NULL;
	}
	if (k->l->topo && k->l->topo->stop_resolving)
		k->l->topo->stop_resolving(k);
}

/*
 * One connection attempt on <k>, from its retry timer only: ask a sentinel
 * first when the primary is not known; resolve a host name again, off the
 * loop (a managed endpoint's address changes on failover; an address
 * literal needs no lookup); then limiter_link_connect_next(). The connect
 * timer bounds the lookup too.
 */
static void limiter_link_connect(struct limiter_link *k)
{
	struct limiter *l = k->l;

	if (!k->in_use || l->closing)
		return;
	if (k->attempted && l->metrics)
		metrics_add(&l->metrics->redis_reconnects, 1);
	k->attempted = true;
	limiter_link_stop_resolving(k);
	if (l->topo && l->topo->before_connect && l->topo->before_connect(k))
		return;
	k->state = LIMITER_ST_CONNECTING;
	k->addrs.naddrs = 0;
	k->addr_next = 0;
	if (!k->is_unix && resolve_is_address(k->host)) {
		struct resolve_addr *a = &k->addrs.addrs[0];

		a->family = strchr(k->host, ':') ? AF_INET6 : AF_INET;
		snprintf(a->ip, sizeof(a->ip), "%.*s", (int)sizeof(a->ip) - 1, k->host);
		a->port = k->port;
		k->addrs.naddrs = 1;
	}
	if (k->is_unix || k->addrs.naddrs) {
		limiter_link_connect_next(k);
		return;
	}
	k->resolving = resolve_start(l->resolver, k->host, k->port, limiter_link_on_resolved, k);
	if (!k->resolving) {
		limiter_link_log_failure(k, "resolve: cannot start a lookup");
		limiter_link_lost(k);
		return;
	}
	limiter_link_arm_connect_timer(k);
}

/* Connect <k> on its own time: its retry timer, due now. Whoever calls this
 * (a start, a topology that named a new address) never runs the connect
 * itself, so a decision never waits on one. */
void limiter_link_start(struct limiter_link *k)
{
	struct limiter *l = k->l;

	if (!k->in_use || l->closing || k->state != LIMITER_ST_IDLE)
		return;
	ev_timer_stop(l->loop, &k->retry);
	ev_timer_set(&k->retry, 0., 0.);
	ev_timer_start(l->loop, &k->retry);
}

/* Point <k> at <host>:<port> (a sentinel named the primary) and connect
 * there on its own time; <fresh>: a new primary, the backoff starts over. */
void limiter_link_move(struct limiter_link *k, const char *host, int port, bool fresh)
{
	limiter_link_set_target(k, host, port, false);
	k->state = LIMITER_ST_IDLE;
	if (fresh) {
		k->backoff_ms = LIMITER_BACKOFF_MIN_MS;
		k->was_ready = false;   /* a new primary: waited for like a first one */
	}
	ev_timer_stop(k->l->loop, &k->connect_timer);
	limiter_link_start(k);
}

/* Can <k> be ready within <within_us>: it is, or it was never ready yet
 * (start-up, a new node or primary) and an attempt is under way or its
 * next attempt starts by then (a link in a long backoff cannot). A link
 * that was ready and went down is not waited for (an outage answers at
 * once rather than holding every decision up to its deadline) unless the
 * topology says so: a Cluster's lost node is waited for, as its replica
 * takes over and the moved map wakes the waiting calls. */
bool limiter_link_soon(const struct limiter_link *k, int64_t within_us)
{
	ev_timer *retry = (ev_timer *)&k->retry;   /* ev_timer_remaining() only reads */

	if (!k->in_use)
		return false;
	if (k->state == LIMITER_ST_READY)
		return true;
	if (k->was_ready && !(k->l->topo && k->l->topo->wait_lost))
		return false;
	if (k->state != LIMITER_ST_IDLE)
		return true;
	return ev_is_active(retry) && ev_timer_remaining(k->l->loop, retry) * 1e6 < (double)within_us;
}

/* Can a link of <l> be ready within <within_us> (the key's slot has no
 * primary yet: any link that may answer CLUSTER SLOTS in time)? */
bool limiter_links_soon(const struct limiter *l, int64_t within_us)
{
	unsigned i;

	for (i = 0; i < l->links.n; i++)
		if (limiter_link_soon(l->links.all[i], within_us))
			return true;
	return false;
}

/* hiredis handed back <n> calls held on <k>. */
void limiter_link_release(struct limiter_link *k, unsigned n)
{
	k->held -= n;
	k->l->links.held -= n;
}

/*
 * Write what hiredis holds for ready link <k> now, from a callback of the
 * loop's own (the batch flush before the loop waits), instead of arming
 * the write watcher: that costs the loop one more wakeup and two
 * epoll_ctl per flush, one to add the watcher and one to drop it after
 * the write. What is left over (a full socket) goes on through the
 * watcher as before; a failed write drops the connection as the watcher
 * would (hiredis answers the calls it holds, synchronously).
 */
void limiter_link_write_now(struct limiter_link *k)
{
	redisAsyncContext *ac = k->ac;

	if (k->state != LIMITER_ST_READY || !ac || !(ac->c.flags & REDIS_CONNECTED) ||
	    (ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING)) || sdslen(ac->c.obuf) == 0)
		return;
	redisAsyncHandleWrite(ac);
}

/* An attempt of <k> failed where its topology worked (a sentinel's answer
 * unusable): count it, back off. */
void limiter_link_fail(struct limiter_link *k)
{
	k->failures++;
	limiter_link_lost(k);
}

/* <k>'s attempt is under way where its topology works (a sentinel asked or
 * its name resolved): CONNECTING, bounded by the connect timer. */
void limiter_link_await(struct limiter_link *k)
{
	k->state = LIMITER_ST_CONNECTING;
	limiter_link_arm_connect_timer(k);
}

/* The one link of <l> (redis://, unix://, sentinel://'s primary) to
 * <host>:<port>, shown as <addr>; it connects on its own time. NULL when
 * memory runs out. */
struct limiter_link *limiter_link_start_main(struct limiter *l, const char *host, int port,
                                             bool is_unix, const char *addr)
{
	struct limiter_link *k = limiter_link_get(l, host, port, is_unix);

	if (!k)
		return NULL;
	snprintf(k->addr, sizeof(k->addr), "%s", addr);
	l->links.main = k;
	limiter_update_connected(l);
	limiter_link_start(k);
	return k;
}

/* Retire every link of <l> in use (<why> for the log): each call hiredis
 * holds is answered "unavailable" before this returns. */
void limiter_links_retire_all(struct limiter *l, const char *why)
{
	unsigned i;

	l->links.main = NULL;
	for (i = 0; i < l->links.n; i++)
		if (l->links.all[i]->in_use)
			limiter_link_retire(l->links.all[i], why);
}

/* A reload on the same Redis (limiter_reconfigure()): a new script or a
 * new redis-engine runs the engines' setup again on each ready link (calls
 * in flight keep the old SHA, which Redis still knows; the script alone
 * needs no asking), and the eviction policy is asked again. */
void limiter_links_reconfigure(struct limiter *l, bool script_changed, bool engine_changed)
{
	unsigned i, e;

	for (i = 0; i < l->links.n; i++) {
		struct limiter_link *k = l->links.all[i];

		if (!k->in_use || k->state != LIMITER_ST_READY || !k->ac)
			continue;
		if (engine_changed && l->engine_mode == LIMITER_ENGINE_ONLY_SCRIPT)
			k->engine = l->engines.first;
		for (e = 0; e < l->engines.n && (script_changed || engine_changed); e++)
			l->engines.setup[e]->setup(k);
		limiter_link_watch_recheck(k);
	}
	if (engine_changed)
		limiter_update_connected(l);
}

/* Free every link struct of <l> (limiter_free(), once they are retired). */
void limiter_links_free(struct limiter *l)
{
	unsigned i;

	for (i = 0; i < l->links.n; i++) {
		free(l->links.all[i]);
		l->links.all[i] = NULL;
	}
	l->links.n = 0;
}

/* A call's deadline passed on <k>: if nothing at all has been answered on
 * it for the stall limit while calls wait, that Redis is frozen: drop it
 * (its calls come back "unavailable"; new ones no longer pile up). */
void limiter_link_check_stall(struct limiter_link *k)
{
	if (k->ac && k->held > 0 &&
	    limiter_now_us() - k->quiet_since_us >= limiter_stall_us(k->l)) {
		log_warn("redis_stalled", "addr=%s waiting=%u", k->addr, k->held);
		limiter_link_drop(k, "no reply within the stall limit");
	}
}

/* The links of <l>, before the first: <seed> for the backoff's jitter. */
void limiter_links_init(struct limiter *l, uint64_t seed)
{
	l->links.rng = seed ? seed : 0x9e3779b97f4a7c15ULL;
}
