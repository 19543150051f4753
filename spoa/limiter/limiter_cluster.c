/*
 * limiter_cluster - Redis Cluster routing on the limiter's links (the pure
 * parts, slot hashing and reply parsing, are cluster.c). See
 * limiter_cluster.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "limiter_cluster.h"
#include "limiter_link.h"
#include "log.h"

/* The link of map node <idx>, made when new (it connects on its own
 * time); NULL when out of links. Never on a decision's path: the map's
 * reply and a redirect's make links, a decision only reads cl->route. */
static struct limiter_link *limiter_cluster_link(struct limiter *l, unsigned idx)
{
	struct limiter_cluster *cl = l->cluster;
	const struct cluster_addr *n = &cl->map.nodes[idx];
	struct limiter_link *k = cl->route[idx];

	if (k && k->in_use && k->port == n->port && strcmp(k->host, n->host) == 0)
		return k;
	k = limiter_link_get(l, n->host, n->port, false);
	cl->route[idx] = k;
	if (k && !k->attempted)
		limiter_link_start(k);
	return k;
}

/* The map changed: a link for each primary in it, and the links nobody
 * routes to any more (a failed primary, a seed that is a replica) retired. */
static void limiter_cluster_apply(struct limiter *l)
{
	struct limiter_cluster *cl = l->cluster;
	unsigned i, j;

	memset(cl->route, 0, sizeof(cl->route));
	for (i = 0; i < cl->map.nnodes; i++)
		limiter_cluster_link(l, i);
	for (i = 0; i < l->links.n; i++) {
		struct limiter_link *k = l->links.all[i];
		bool routed = false;

		if (!k || !k->in_use)
			continue;
		for (j = 0; j < cl->map.nnodes && !routed; j++)
			routed = cl->route[j] == k;
		if (!routed)
			limiter_link_retire(k, "not a primary in the slot map");
	}
	limiter_update_connected(l);
	if (l->wake)
		l->wake(l);   /* calls that waited for a slot's primary */
}

/* No link can answer CLUSTER SLOTS: (re)connect the seeds of the URL. */
static void limiter_cluster_seed(struct limiter *l)
{
	unsigned i;

	for (i = 0; i < l->url.nhosts; i++) {
		struct limiter_link *k = limiter_link_get(l, l->url.hosts[i].host,
		                                          l->url.hosts[i].port, false);

		if (k && !k->attempted)
			limiter_link_start(k);
	}
}

/* Nodes in the tree of reply <r>. */
static size_t limiter_view_count(const redisReply *r)
{
	size_t n = 1, i;

	if (r && r->type == REDIS_REPLY_ARRAY && r->element)
		for (i = 0; i < r->elements; i++)
			n += limiter_view_count(r->element[i]);
	return n;
}

/* Fill <v> from <r> (borrowed: strings point into it), an array's
 * elements taken in a row from <*pool>. */
static void limiter_view_fill(const redisReply *r, struct cluster_view *v,
                              struct cluster_view **pool)
{
	struct cluster_view *el;
	size_t i;

	memset(v, 0, sizeof(*v));
	if (!r)
		return;
	switch (r->type) {
	case REDIS_REPLY_INTEGER:
		v->type = CLUSTER_VIEW_INTEGER;
		v->integer = r->integer;
		break;
	case REDIS_REPLY_NIL:
		v->type = CLUSTER_VIEW_NIL;
		break;
	case REDIS_REPLY_STRING:
	case REDIS_REPLY_ERROR:
		v->type = r->type == REDIS_REPLY_STRING ? CLUSTER_VIEW_STRING : CLUSTER_VIEW_ERROR;
		v->str = r->str;
		v->len = r->len;
		break;
	case REDIS_REPLY_ARRAY:
		if (r->elements && !r->element)
			break;   /* not an array we can read */
		v->type = CLUSTER_VIEW_ARRAY;
		v->elements = r->elements;
		v->element = el = *pool;
		*pool += r->elements;
		for (i = 0; i < r->elements; i++)
			limiter_view_fill(r->element[i], &el[i], pool);
		break;
	default:
		break;
	}
}

/* The view cluster.c reads of CLUSTER SLOTS reply <r>, in one allocation
 * the caller frees (its strings are borrowed from <r>). NULL when memory
 * runs out. */
static struct cluster_view *limiter_view_new(const redisReply *r)
{
	struct cluster_view *nodes = calloc(limiter_view_count(r), sizeof(*nodes)), *pool;

	if (!nodes)
		return NULL;
	pool = nodes + 1;
	limiter_view_fill(r, nodes, &pool);
	return nodes;
}

/* CLUSTER SLOTS answered <r> on <ac> of link <privdata> (borrowed, freed by
 * hiredis after this returns): a new map replaces the old one and the links
 * follow it; a bad reply keeps the old map. */
static void limiter_cluster_on_slots(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_link *k = privdata;
	struct limiter *l = k->l;
	struct limiter_cluster *cl = l->cluster;
	const redisReply *reply = r;
	struct cluster_view *view;
	char err[160];
	int rc;

	if (!cl || ac != cl->topo_ac)
		return;
	cl->topo_ac = NULL;
	if (!reply)
		return;   /* that link went away; the tick asks another */
	view = limiter_view_new(reply);
	if (!view)
		snprintf(err, sizeof(err), "out of memory");
	rc = view ? cluster_map_from_slots(&cl->next, view, k->host, err, sizeof(err)) : -1;
	free(view);
	if (rc == -1) {
		log_warn("cluster_slots_failed", "via=%s reason=\"%s\"", k->addr, err);
		limiter_count_error(l, METRICS_REDIS_ERR_SCRIPT);
		return;
	}
	cl->topo_dirty = false;
	if (cl->have_map && cluster_map_equal(&cl->map, &cl->next))
		return;
	log_info("cluster_topology", "via=%s primaries=%u slots=%u", k->addr, cl->next.nnodes,
	         cl->next.covered);
	memcpy(&cl->map, &cl->next, sizeof(cl->map));
	cl->have_map = true;
	limiter_cluster_apply(l);
}

/* Ask a ready link for CLUSTER SLOTS (<why> for the debug log), unless one
 * is in flight or the last was sent less than LIMITER_TOPO_MIN_MS ago (the
 * tick then asks); with no ready link, connect the seeds. */
void limiter_topo_refresh(struct limiter *l, const char *why)
{
	struct limiter_cluster *cl = l->cluster;
	struct limiter_link *k = NULL;
	int64_t now = limiter_now_us();
	unsigned i;

	if (!cl || l->closing)
		return;
	cl->topo_dirty = true;
	if (cl->topo_ac || now - cl->topo_last_us < LIMITER_TOPO_MIN_MS * 1000)
		return;
	/* a different node each time: one with a stale view cannot hold us */
	for (i = 0; i < l->links.n && !k; i++) {
		struct limiter_link *x = l->links.all[(i + (unsigned)l->counter) % l->links.n];

		if (x->in_use && x->state == LIMITER_ST_READY && x->ac)
			k = x;
	}
	if (!k) {
		limiter_cluster_seed(l);
		return;
	}
	if (redisAsyncCommand(k->ac, limiter_cluster_on_slots, k, "CLUSTER SLOTS") != REDIS_OK)
		return;
	cl->topo_ac = k->ac;
	cl->topo_last_us = now;
	log_debug("cluster_refresh", "via=%s why=%s", k->addr, why);
}

/* Every LIMITER_TOPO_TICK_MS: refresh when a primary is missing or a
 * redirect asked for it, and at least every LIMITER_TOPO_IDLE_MS. */
static void limiter_cluster_on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct limiter *l = w->data;
	struct limiter_cluster *cl = l->cluster;

	(void)loop;
	(void)revents;
	if (!cl)
		return;
	if (!l->health.connected || cl->topo_dirty ||
	    limiter_now_us() - cl->topo_last_us >= LIMITER_TOPO_IDLE_MS * 1000)
		limiter_topo_refresh(l, l->health.connected ? "timer" : "primary missing");
}

/* The link serving the Redis key <key>/<len> now: the only one, or the
 * primary of the key's slot. NULL while the slot has none: the map is
 * then asked for again on the next tick (nothing is connected or sent
 * here, a decision may be asking). */
struct limiter_link *limiter_route(struct limiter *l, const char *key, size_t len)
{
	struct limiter_cluster *cl = l->cluster;
	unsigned idx;

	if (!cl)
		return l->links.main;
	idx = cl->have_map ? cl->map.slot_node[cluster_key_slot(key, len)] : CLUSTER_NO_NODE;
	if (idx == CLUSTER_NO_NODE || idx >= cl->map.nnodes || !cl->route[idx]) {
		cl->topo_dirty = true;
		return NULL;
	}
	return cl->route[idx];
}


/*
 * A cluster node answered <c> with the MOVED or ASK in <reply>: learn it
 * (MOVED patches the map and asks for a refresh) and say where <c> goes,
 * within LIMITER_REDIRECTS_MAX hops: SEND to <*to> (after ASKING when
 * <*asking>), PARK it a moment, or GIVE_UP (the caller answers it). Sends
 * nothing itself: the call layer acts on the verdict.
 */
enum limiter_redirect limiter_cluster_redirect(struct limiter *l, const struct limiter_call *c,
                                               const redisReply *reply, struct limiter_link **to,
                                               bool *asking)
{
	struct limiter_cluster *cl = l->cluster;
	struct cluster_redirect rd;
	struct limiter_link *k = NULL;
	int idx;

	*to = NULL;
	*asking = false;
	if (!cl || cluster_parse_redirect(reply->str, reply->len, c->link->host, &rd) == -1)
		return LIMITER_REDIRECT_GIVE_UP;
	if (rd.kind == CLUSTER_REPLY_MOVED) {
		idx = cluster_map_add(&cl->map, rd.to.host, rd.to.port);
		if (idx >= 0 && cluster_map_set_slot(&cl->map, rd.slot, (unsigned)idx) == 0)
			k = limiter_cluster_link(l, (unsigned)idx);
		limiter_topo_refresh(l, "moved");
	} else {
		k = limiter_link_get(l, rd.to.host, rd.to.port, false);
		if (k && !k->attempted)
			limiter_link_start(k);
	}
	log_debug("cluster_redirect", "kind=%s slot=%u from=%s to=%s:%d",
	          cluster_reply_kind_str(rd.kind), rd.slot, c->link->addr, rd.to.host, rd.to.port);
	if (!c->cb || !k || c->redirects >= LIMITER_REDIRECTS_MAX)
		return LIMITER_REDIRECT_GIVE_UP;
	/* MOVED again: two nodes disagree while a migration settles (the
	 * source already points at the target, the target not yet at itself).
	 * Give them a moment rather than bounce the call between them. */
	if (rd.kind == CLUSTER_REPLY_MOVED && c->redirects >= 2)
		return LIMITER_REDIRECT_PARK;
	*to = k;
	*asking = rd.kind == CLUSTER_REPLY_ASK;
	return LIMITER_REDIRECT_SEND;
}

/* ------------------------------------------------------------------ */
/* what the links call (l->topo)                                        */

/* A link lost its connection: the map may be stale. */
static void limiter_cluster_on_lost(struct limiter_link *k)
{
	if (k->l->cluster)
		k->l->cluster->topo_dirty = true;
}

/* A link is ready: the first map, or a fresh one, can be asked there. */
static void limiter_cluster_on_ready(struct limiter_link *k)
{
	struct limiter *l = k->l;

	if (l->cluster && (!l->cluster->have_map || l->cluster->topo_dirty))
		limiter_topo_refresh(l, "connected");
}

/* Every slot has a primary whose link is ready. */
static bool limiter_cluster_up(const struct limiter *l)
{
	const struct limiter_cluster *cl = l->cluster;
	bool up;
	unsigned i;

	if (!cl || !cl->have_map || cl->map.covered != CLUSTER_SLOTS)
		return false;
	for (i = 0, up = true; i < cl->map.nnodes && up; i++)
		up = cl->route[i] && cl->route[i]->state == LIMITER_ST_READY;
	return up;
}

static const struct limiter_topo_ops limiter_cluster_ops = {
	.skip_role = true,              /* CLUSTER SLOTS names the primaries */
	.wait_lost = true,              /* a replica takes over, the map moves */
	.on_ready = limiter_cluster_on_ready,
	.on_lost = limiter_cluster_on_lost,
	.up = limiter_cluster_up,
};

/* Allocates l->cluster, owned by <l>. See limiter_cluster.h. */
int limiter_cluster_start(struct limiter *l)
{
	l->cluster = calloc(1, sizeof(*l->cluster));
	if (!l->cluster)
		return -1;
	cluster_map_init(&l->cluster->map);
	ev_timer_init(&l->cluster->topo, limiter_cluster_on_tick, LIMITER_TOPO_TICK_MS / 1000.0,
	              LIMITER_TOPO_TICK_MS / 1000.0);
	l->cluster->topo.data = l;
	l->topo = &limiter_cluster_ops;
	ev_timer_start(l->loop, &l->cluster->topo);
	limiter_cluster_seed(l);
	limiter_update_connected(l);
	return 0;
}

/* Frees l->cluster and unhooks it from the links (l->topo). */
void limiter_cluster_stop(struct limiter *l)
{
	if (!l->cluster)
		return;
	ev_timer_stop(l->loop, &l->cluster->topo);
	free(l->cluster); l->cluster = NULL;
	l->topo = NULL;
}
