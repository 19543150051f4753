/*
 * limiter_sentinel - the primary a sentinel names. See limiter_sentinel.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>
#include "hiredis_compat.h"
#include <hiredis/async.h>

#include "decimal.h"
#include "limiter_link.h"
#include "limiter_sentinel.h"
#include "log.h"
#include "redis_open.h"
#include "resolve.h"

/* Queue AUTH for the sentinels on <ac> when they have a password (the
 * reply is not needed: a refusal shows in the next command's reply). */
static void limiter_sentinel_auth(const struct limiter *l, redisAsyncContext *ac)
{
	if (l->url.has_sentinel_pass)
		redisAsyncCommand(ac, NULL, NULL, "AUTH %s", l->url.sentinel_pass);
}

/* Connect to sentinel <idx> of the URL at address <ip> (its host, or what
 * its name resolved to), over TLS with a TLS URL. Returns the context with
 * <data> set, or NULL with <why> set; <where> names the sentinel for logs. */
static redisAsyncContext *limiter_sentinel_connect(struct limiter *l, unsigned idx, const char *ip,
                                                   void *data, char *where, size_t cap,
                                                   const char **why)
{
	const struct redis_url_host *h = &l->url.hosts[idx];
	redisAsyncContext *ac;

	redis_url_format_host(h->host, h->port, where, cap);
	ac = redis_open(l->loop, ip, h->port, (uint64_t)(limiter_stall_us(l) / 1000), l->tls,
	                h->host, data, l->sentinel->err, sizeof(l->sentinel->err));
	if (!ac)
		*why = l->sentinel->err;
	return ac;
}

/* The query to a sentinel failed or the connection closed before its
 * answer: the next attempt of <k> asks the next sentinel. */
static void limiter_sentinel_query_failed(struct limiter_link *k, const char *why)
{
	char msg[REDIS_URL_ADDR_MAX + 64];

	k->l->sentinel->query = NULL;
	snprintf(msg, sizeof(msg), "sentinel: %s", why);
	limiter_link_log_failure(k, msg);
	limiter_count_error(k->l, METRICS_REDIS_ERR_REFUSED);
	limiter_link_lost(k);
}

/* hiredis: the query connection <ac> to a sentinel finished connecting with
 * <status>; a failure makes the next attempt ask the next sentinel. */
static void limiter_sentinel_on_query_connect(const redisAsyncContext *ac, int status)
{
	struct limiter_link *k = ac->data;

	if (!k->l->sentinel || ac != k->l->sentinel->query || status == REDIS_OK)
		return;
	limiter_sentinel_query_failed(k, ac->errstr ? ac->errstr : "connect failed");
}

/* hiredis: the query connection <ac> closed; before its answer, that is a
 * failed attempt (after it, we closed it ourselves). */
static void limiter_sentinel_on_query_disconnect(const redisAsyncContext *ac, int status)
{
	struct limiter_link *k = ac->data;

	(void)status;
	if (!k->l->sentinel || ac != k->l->sentinel->query)
		return;
	limiter_sentinel_query_failed(k, "closed before answering");
}

/* A sentinel answered get-master-addr-by-name: point the link at that
 * primary and connect (ROLE confirms it), or try again later. */
static void limiter_sentinel_on_addr(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_link *k = ac->data;
	struct limiter *l = k->l;
	struct limiter_sentinel *s = l->sentinel;
	const redisReply *reply = r;
	char host[REDIS_URL_HOST_MAX];
	uint64_t port;

	(void)privdata;
	if (!s || ac != s->query)
		return;
	s->query = NULL;
	/* done with this connection: hiredis closes it once we return */
	redisAsyncDisconnect(ac);
	if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
	    reply->element[0]->type != REDIS_REPLY_STRING ||
	    reply->element[1]->type != REDIS_REPLY_STRING ||
	    reply->element[0]->len == 0 || reply->element[0]->len >= sizeof(host)) {
		log_warn("sentinel_no_primary", "master=%s reply=\"%.*s\"", l->url.master,
		         reply && reply->type == REDIS_REPLY_ERROR ? (int)reply->len : 0,
		         reply && reply->type == REDIS_REPLY_ERROR ? reply->str : "");
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		limiter_link_fail(k);
		return;
	}
	memcpy(host, reply->element[0]->str, reply->element[0]->len);
	host[reply->element[0]->len] = '\0';
	if (decimal_parse(reply->element[1]->str, reply->element[1]->len, 65535, &port) != 0 ||
	    port < 1) {
		limiter_link_fail(k);
		return;
	}
	if (strcmp(host, k->host) != 0 || (int)port != k->port)
		log_info("sentinel_primary", "master=%s addr=%s:%d", l->url.master, host, (int)port);
	s->master_known = true;
	limiter_link_move(k, host, (int)port, false);
}

/* Ask sentinel <idx> at <ip> where the primary of the URL's master is. */
static void limiter_sentinel_query_at(struct limiter_link *k, unsigned idx, const char *ip)
{
	struct limiter *l = k->l;
	struct limiter_sentinel *s = l->sentinel;
	char where[REDIS_URL_ADDR_MAX], msg[REDIS_URL_ADDR_MAX + 64];
	const char *why = NULL;
	redisAsyncContext *ac;

	ac = limiter_sentinel_connect(l, idx, ip, k, where, sizeof(where), &why);
	if (!ac) {
		snprintf(msg, sizeof(msg), "sentinel %s: %s", where, why);
		limiter_link_log_failure(k, msg);
		limiter_count_error(l, METRICS_REDIS_ERR_REFUSED);
		limiter_link_schedule_retry(k);
		return;
	}
	redisAsyncSetConnectCallback(ac, limiter_sentinel_on_query_connect);
	redisAsyncSetDisconnectCallback(ac, limiter_sentinel_on_query_disconnect);
	s->query = ac;
	log_debug("sentinel_query", "sentinel=%s master=%s", where, l->url.master);
	limiter_sentinel_auth(l, ac);
	redisAsyncCommand(ac, limiter_sentinel_on_addr, NULL,
	                  "SENTINEL get-master-addr-by-name %s", l->url.master);
	limiter_link_await(k);
}

/* The name of the sentinel to ask answered: ask it at its first address
 * (the next attempt asks the next sentinel anyway). */
static void limiter_sentinel_on_query_resolved(void *arg, const struct resolve_result *res)
{
	struct limiter_link *k = arg;
	struct limiter_sentinel *s = k->l->sentinel;
	char msg[RESOLVE_ERR_MAX + 64];

	s->query_resolving = NULL;
	if (res->status != 0) {
		snprintf(msg, sizeof(msg), "sentinel %s: resolve: %s", k->l->url.hosts[s->query_idx].host,
		         res->err);
		limiter_link_log_failure(k, msg);
		limiter_count_error(k->l, METRICS_REDIS_ERR_REFUSED);
		limiter_link_lost(k);
		return;
	}
	limiter_sentinel_query_at(k, s->query_idx, res->addrs[0].ip);
}

/* Ask the next sentinel where the primary of the URL's master is; <k>
 * stays CONNECTING meanwhile (a sentinel's name resolved first), bounded
 * by its connect timer. */
static void limiter_sentinel_query(struct limiter_link *k)
{
	struct limiter *l = k->l;
	struct limiter_sentinel *s = l->sentinel;
	unsigned idx = s->next++ % l->url.nhosts;
	const struct redis_url_host *h = &l->url.hosts[idx];

	if (resolve_is_address(h->host)) {
		limiter_sentinel_query_at(k, idx, h->host);
		return;
	}
	s->query_idx = idx;
	s->query_resolving = resolve_start(l->resolver, h->host, h->port,
	                                   limiter_sentinel_on_query_resolved, k);
	if (!s->query_resolving) {
		limiter_link_log_failure(k, "sentinel: resolve: cannot start a lookup");
		limiter_link_schedule_retry(k);
		return;
	}
	limiter_link_await(k);
}

/* Stop the lookup of the sentinel to query, if any. */
static void limiter_sentinel_stop_resolving(struct limiter_sentinel *s)
{
	if (s->query_resolving) {
		resolve_cancel(s->query_resolving);
		s->query_resolving = NULL;
	}
}

static void limiter_sentinel_subscribe(struct limiter *l);

/* The subscription is gone: try the next sentinel after a backoff. */
static void limiter_sentinel_sub_lost(struct limiter *l)
{
	struct limiter_sentinel *s = l->sentinel;
	unsigned d = s->sub_backoff_ms;

	s->sub = NULL;
	if (l->closing)
		return;
	s->sub_backoff_ms = d * 2 > LIMITER_BACKOFF_MAX_MS ? LIMITER_BACKOFF_MAX_MS : d * 2;
	ev_timer_stop(l->loop, &s->sub_retry);
	ev_timer_set(&s->sub_retry, (double)limiter_link_jitter(l, d) / 1000.0, 0.);
	ev_timer_start(l->loop, &s->sub_retry);
}

/* hiredis: the subscription connection <ac> finished connecting with
 * <status>; on failure, retry on the next sentinel. */
static void limiter_sentinel_on_sub_connect(const redisAsyncContext *ac, int status)
{
	struct limiter *l = ac->data;

	if (!l->sentinel || ac != l->sentinel->sub || status == REDIS_OK)
		return;
	limiter_sentinel_sub_lost(l);
}

/* hiredis: the subscription connection <ac> closed: subscribe again. */
static void limiter_sentinel_on_sub_disconnect(const redisAsyncContext *ac, int status)
{
	struct limiter *l = ac->data;

	(void)status;
	if (!l->sentinel || ac != l->sentinel->sub)
		return;
	log_debug("sentinel_unsubscribed", "reason=\"%s\"", ac->err && ac->errstr ? ac->errstr : "closed");
	limiter_sentinel_sub_lost(l);
}

/*
 * A message on +switch-master: "<name> <old-ip> <old-port> <new-ip>
 * <new-port>". For our master, drop the link to the old primary (its calls
 * are answered "unavailable") and connect to the new one at once.
 */
static void limiter_sentinel_on_switch(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter *l = ac->data;
	struct limiter_sentinel *s = l->sentinel;
	const redisReply *reply = r, *kind, *msg;
	char text[REDIS_URL_NAME_MAX + 2 * REDIS_URL_HOST_MAX + 32];
	char name[REDIS_URL_NAME_MAX], oldh[REDIS_URL_HOST_MAX], newh[REDIS_URL_HOST_MAX];
	int oldp, newp;
	struct limiter_link *k;

	(void)privdata;
	if (!s || ac != s->sub || !reply)
		return;
	if (reply->type == REDIS_REPLY_ERROR) {
		log_warn("sentinel_subscribe_failed", "reply=\"%.*s\"", (int)reply->len, reply->str);
		s->sub = NULL;
		redisAsyncDisconnect(ac);
		limiter_sentinel_sub_lost(l);
		return;
	}
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3)
		return;
	kind = reply->element[0];
	msg = reply->element[2];
	if (kind->type != REDIS_REPLY_STRING)
		return;
	if (kind->len == 9 && memcmp(kind->str, "subscribe", 9) == 0) {
		s->sub_backoff_ms = LIMITER_BACKOFF_MIN_MS;
		log_debug("sentinel_subscribed", "channel=+switch-master");
		return;
	}
	if (kind->len != 7 || memcmp(kind->str, "message", 7) != 0 ||
	    msg->type != REDIS_REPLY_STRING || msg->len >= sizeof(text))
		return;
	memcpy(text, msg->str, msg->len);
	text[msg->len] = '\0';
	if (sscanf(text, "%63s %255s %d %255s %d", name, oldh, &oldp, newh, &newp) != 5 ||
	    strcmp(name, l->url.master) != 0 || newp < 1 || newp > 65535)
		return;
	log_info("sentinel_switch_master", "master=%s from=%s:%d to=%s:%d", name, oldh, oldp,
	         newh, newp);
	k = l->links.main;
	if (!k)
		return;
	limiter_link_drop(k, "+switch-master");
	if (s->query) {
		redisAsyncContext *q = s->query;

		s->query = NULL;
		redisAsyncFree(q);
	}
	s->master_known = true;
	limiter_link_move(k, newh, newp, true);
}

/* Subscribe to +switch-master on sentinel <idx> at <ip>. */
static void limiter_sentinel_subscribe_at(struct limiter *l, unsigned idx, const char *ip)
{
	struct limiter_sentinel *s = l->sentinel;
	char where[REDIS_URL_ADDR_MAX];
	const char *why = NULL;
	redisAsyncContext *ac;

	ac = limiter_sentinel_connect(l, idx, ip, l, where, sizeof(where), &why);
	if (!ac) {
		limiter_sentinel_sub_lost(l);
		return;
	}
	redisAsyncSetConnectCallback(ac, limiter_sentinel_on_sub_connect);
	redisAsyncSetDisconnectCallback(ac, limiter_sentinel_on_sub_disconnect);
	s->sub = ac;
	log_debug("sentinel_subscribing", "sentinel=%s", where);
	limiter_sentinel_auth(l, ac);
	redisAsyncCommand(ac, limiter_sentinel_on_switch, NULL, "SUBSCRIBE +switch-master");
}

/* The name of the sentinel to subscribe on answered. */
static void limiter_sentinel_on_sub_resolved(void *arg, const struct resolve_result *res)
{
	struct limiter *l = arg;
	struct limiter_sentinel *s = l->sentinel;

	s->sub_resolving = NULL;
	if (res->status != 0) {
		log_debug("sentinel_resolve_failed", "sentinel=%s reason=\"%s\"",
		          l->url.hosts[s->sub_idx].host, res->err);
		limiter_sentinel_sub_lost(l);
		return;
	}
	limiter_sentinel_subscribe_at(l, s->sub_idx, res->addrs[0].ip);
}

/* Subscribe to +switch-master on the next sentinel (its name resolved
 * first). */
static void limiter_sentinel_subscribe(struct limiter *l)
{
	struct limiter_sentinel *s = l->sentinel;
	unsigned idx = s->sub_next++ % l->url.nhosts;
	const struct redis_url_host *h = &l->url.hosts[idx];

	if (resolve_is_address(h->host)) {
		limiter_sentinel_subscribe_at(l, idx, h->host);
		return;
	}
	s->sub_idx = idx;
	s->sub_resolving = resolve_start(l->resolver, h->host, h->port,
	                                 limiter_sentinel_on_sub_resolved, l);
	if (!s->sub_resolving)
		limiter_sentinel_sub_lost(l);
}

/* The subscription's backoff wait is over: subscribe again. */
static void limiter_sentinel_on_sub_retry(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter *l = w->data;

	(void)loop;
	(void)revents;
	if (l->sentinel && !l->sentinel->sub && !l->sentinel->sub_resolving && !l->closing)
		limiter_sentinel_subscribe(l);
}

/* Close the sentinel connections of <l> (their callbacks, run by the
 * frees, see they are no longer ours), stop its timer, free l->sentinel;
 * the links no longer reach it (l->topo). */
void limiter_sentinel_stop(struct limiter *l)
{
	struct limiter_sentinel *s = l->sentinel;
	redisAsyncContext *ac;

	if (!s)
		return;
	ev_timer_stop(l->loop, &s->sub_retry);
	limiter_sentinel_stop_resolving(s);
	if (s->sub_resolving) {
		resolve_cancel(s->sub_resolving);
		s->sub_resolving = NULL;
	}
	if ((ac = s->query)) {
		s->query = NULL;
		redisAsyncFree(ac);
	}
	if ((ac = s->sub)) {
		s->sub = NULL;
		redisAsyncFree(ac);
	}
	l->topo = NULL;
	l->sentinel = NULL;
	free(s);
}

/* ------------------------------------------------------------------ */
/* what the link calls (l->topo)                                        */

/* Before a connect attempt: while no sentinel has named the primary, ask
 * one (the link stays CONNECTING meanwhile). */
static bool limiter_sentinel_before_connect(struct limiter_link *k)
{
	struct limiter_sentinel *s = k->l->sentinel;

	if (!s || s->master_known)
		return false;
	limiter_sentinel_query(k);
	return true;
}

/* The connect timer of <k> fired while a sentinel was being resolved or
 * asked: give up this attempt. */
static bool limiter_sentinel_connect_timeout(struct limiter_link *k)
{
	struct limiter_sentinel *s = k->l->sentinel;

	if (!s)
		return false;
	if (s->query_resolving) {
		limiter_link_stop_resolving(k);
		limiter_link_log_failure(k, "resolve: no answer in time");
		limiter_link_lost(k);
		return true;
	}
	if (!k->ac && s->query) {
		redisAsyncContext *q = s->query;

		/* its callbacks, run by the free, see it is no longer ours */
		s->query = NULL;
		redisAsyncFree(q);
		limiter_link_log_failure(k, "sentinel did not answer in time");
		limiter_link_lost(k);
		return true;
	}
	return false;
}

/* Stop the sentinel lookup made for <k>, if any. */
static void limiter_sentinel_link_stop_resolving(struct limiter_link *k)
{
	if (k->l->sentinel && k == k->l->links.main)
		limiter_sentinel_stop_resolving(k->l->sentinel);
}

/* <k> lost its connection: whoever the primary is now, a sentinel says so
 * on the next attempt. */
static void limiter_sentinel_on_lost(struct limiter_link *k)
{
	if (k->l->sentinel && k == k->l->links.main)
		k->l->sentinel->master_known = false;
}

static const struct limiter_topo_ops limiter_sentinel_ops = {
	.role_required = true,          /* ROLE is the only check of a sentinel's word */
	.before_connect = limiter_sentinel_before_connect,
	.connect_timeout = limiter_sentinel_connect_timeout,
	.stop_resolving = limiter_sentinel_link_stop_resolving,
	.on_lost = limiter_sentinel_on_lost,
};

/* Allocates l->sentinel and the main link, both owned by <l>. See
 * limiter_sentinel.h. */
int limiter_sentinel_start(struct limiter *l)
{
	struct limiter_link *k;

	l->sentinel = calloc(1, sizeof(*l->sentinel));
	if (!l->sentinel)
		return -1;
	l->sentinel->sub_backoff_ms = LIMITER_BACKOFF_MIN_MS;
	ev_timer_init(&l->sentinel->sub_retry, limiter_sentinel_on_sub_retry, 0., 0.);
	l->sentinel->sub_retry.data = l;
	l->topo = &limiter_sentinel_ops;
	/* the primary's address is not known yet: a sentinel says it before
	 * the link's first attempt (before_connect) */
	k = limiter_link_start_main(l, "", 0, false, l->url.addr);
	if (!k)
		return -1;
	limiter_sentinel_subscribe(l);
	return 0;
}
