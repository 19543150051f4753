/*
 * redis_sync - a synchronous Redis client over the agent's `redis`
 * setting (redis_sync.h). Blocking calls with a timeout: only ctl and the
 * agent's live-control thread use it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "hiredis_compat.h"

#include "cluster.h"
#include "redis_sync.h"
#include "redis_tls.h"
#include "redis_url.h"

#define REDIS_SYNC_REDIRECTS 5

/* Owned by its creator (redis_sync_new/free). */
struct redis_sync {
	struct redis_url url;
	struct redis_tls *tls;         /* with a TLS URL */
	uint64_t timeout_ms;
	/* node 0..n: the one server (redis, unix, the sentinels' primary), or
	 * the cluster's seeds then the nodes MOVED and ASK named */
	struct cluster_map map;
	redisContext *ctx[CLUSTER_NODES_MAX];
};

/* See redis_sync.h: the caller owns the result (redis_sync_free). */
struct redis_sync *redis_sync_new(const char *redis, const struct config_tls *tls,
                                  uint64_t timeout_ms, char *err, size_t errlen)
{
	struct redis_sync *s = calloc(1, sizeof(*s));
	char why[160];
	unsigned i;

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->timeout_ms = timeout_ms;
	cluster_map_init(&s->map);
	if (redis_url_parse(redis, &s->url, why, sizeof(why)) == -1) {
		snprintf(err, errlen, "redis: %s", why);
		goto fail;
	}
	if (redis_url_load_secrets(&s->url, err, errlen) == -1)
		goto fail;
	if (s->url.tls && !(s->tls = redis_tls_new(tls, err, errlen)))
		goto fail;
	if (s->url.mode == REDIS_URL_CLUSTER)
		for (i = 0; i < s->url.nhosts; i++)
			cluster_map_add(&s->map, s->url.hosts[i].host, s->url.hosts[i].port);
	else if (s->url.mode == REDIS_URL_UNIX) {
		/* a socket path has no port: the map's node holds it as is */
		memcpy(s->map.nodes[0].host, s->url.hosts[0].host, sizeof(s->map.nodes[0].host));
		s->map.nodes[0].port = 0;
		s->map.nnodes = 1;
	} else if (s->url.mode == REDIS_URL_TCP)
		cluster_map_add(&s->map, s->url.hosts[0].host, s->url.hosts[0].port);
	return s;
fail:
	redis_sync_free(s);
	return NULL;
}

/* See redis_sync.h: frees the connections <s> owns. */
void redis_sync_reset(struct redis_sync *s)
{
	unsigned i;

	for (i = 0; i < CLUSTER_NODES_MAX; i++)
		if (s->ctx[i]) {
			redisFree(s->ctx[i]);
			s->ctx[i] = NULL;
		}
	if (s->url.mode == REDIS_URL_SENTINEL)
		cluster_map_init(&s->map);   /* ask the sentinels again */
}

/* See redis_sync.h: frees <s> and all it owns. */
void redis_sync_free(struct redis_sync *s)
{
	if (!s)
		return;
	redis_sync_reset(s);
	redis_tls_free(s->tls);
	redis_url_wipe(&s->url);
	free(s);
}

/* See redis_sync.h: borrowed from <s>. */
const char *redis_sync_addr(const struct redis_sync *s)
{
	return s->url.addr;
}

/* Send <argc>/<argv> on <c> and check for +OK; 0 or -1 with <err>. */
static int rs_expect_ok(redisContext *c, int argc, const char **argv, const size_t *len,
                        const char *what, char *err, size_t errlen)
{
	redisReply *r = redisCommandArgv(c, argc, argv, len);
	int rc = 0;

	if (!r || r->type == REDIS_REPLY_ERROR) {
		snprintf(err, errlen, "%s refused: %s", what, r ? r->str : c->errstr);
		rc = -1;
	}
	if (r)
		freeReplyObject(r);
	return rc;
}

/* A new connection to <host>:<port> (port 0: a unix socket), TLS when the
 * URL says so, then AUTH (<pass>, with <user> when set) and SELECT <db>
 * (-1: none). The caller owns it (redisFree). NULL with <err>. */
static redisContext *rs_open(struct redis_sync *s, const char *host, int port,
                             const char *user, const char *pass, int db,
                             char *err, size_t errlen)
{
	struct timeval tv = { (time_t)(s->timeout_ms / 1000),
	                      (suseconds_t)(s->timeout_ms % 1000) * 1000 };
	const char *argv[3];
	size_t len[3];
	char dbs[16];
	redisContext *c;
	int argc = 0;

	c = port ? redisConnectWithTimeout(host, port, tv) : redisConnectUnixWithTimeout(host, tv);
	if (!c || c->err) {
		snprintf(err, errlen, "cannot connect to %s:%d: %s", host, port,
		         c ? c->errstr : "out of memory");
		goto fail;
	}
	if (redisSetTimeout(c, tv) != REDIS_OK) {
		snprintf(err, errlen, "cannot set the timeout on %s:%d", host, port);
		goto fail;
	}
	if (s->tls && redis_tls_start_sync(s->tls, c, host, err, errlen) == -1)
		goto fail;
	if (pass) {
		argv[argc] = "AUTH";
		len[argc++] = 4;
		if (user && user[0]) {
			argv[argc] = user;
			len[argc++] = strlen(user);
		}
		argv[argc] = pass;
		len[argc++] = strlen(pass);
		if (rs_expect_ok(c, argc, argv, len, "AUTH", err, errlen) == -1)
			goto fail;
	}
	if (db >= 0) {
		snprintf(dbs, sizeof(dbs), "%d", db);
		argv[0] = "SELECT";
		len[0] = 6;
		argv[1] = dbs;
		len[1] = strlen(dbs);
		if (rs_expect_ok(c, 2, argv, len, "SELECT", err, errlen) == -1)
			goto fail;
	}
	return c;
fail:
	if (c)
		redisFree(c);
	return NULL;
}

/* sentinel://: ask each sentinel in turn for the primary's address and
 * make it node 0. Returns 0 or -1 with <err>. */
static int rs_find_primary(struct redis_sync *s, char *err, size_t errlen)
{
	const struct redis_url *u = &s->url;
	unsigned i;

	for (i = 0; i < u->nhosts; i++) {
		redisContext *c = rs_open(s, u->hosts[i].host, u->hosts[i].port, NULL,
		                          u->has_sentinel_pass ? u->sentinel_pass : NULL, -1,
		                          err, errlen);
		redisReply *r;
		int ok = 0;

		if (!c)
			continue;
		r = redisCommand(c, "SENTINEL get-master-addr-by-name %s", u->master);
		if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
		    r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING) {
			cluster_map_init(&s->map);
			ok = cluster_map_add(&s->map, r->element[0]->str, atoi(r->element[1]->str)) == 0;
		} else {
			snprintf(err, errlen, "sentinel %s:%d does not know master '%s'",
			         u->hosts[i].host, u->hosts[i].port, u->master);
		}
		if (r)
			freeReplyObject(r);
		redisFree(c);
		if (ok)
			return 0;
	}
	return -1;
}

/* The connection to node <idx>, opened when needed. Borrowed. */
static redisContext *rs_node(struct redis_sync *s, unsigned idx, char *err, size_t errlen)
{
	const struct redis_url *u = &s->url;

	if (idx >= s->map.nnodes) {
		snprintf(err, errlen, "no such node");
		return NULL;
	}
	if (!s->ctx[idx])
		s->ctx[idx] = rs_open(s, s->map.nodes[idx].host, s->map.nodes[idx].port, u->user,
		                      u->has_pass ? u->pass : NULL,
		                      u->mode == REDIS_URL_CLUSTER ? -1 : u->db, err, errlen);
	return s->ctx[idx];
}

/* The node index for <key> (NULL: any): its slot's node when known, else
 * the first node that connects. -1 with <err>. */
static int rs_route(struct redis_sync *s, const char *key, size_t keylen, char *err,
                    size_t errlen)
{
	unsigned i;

	if (s->url.mode == REDIS_URL_SENTINEL && s->map.nnodes == 0 &&
	    rs_find_primary(s, err, errlen) == -1)
		return -1;
	if (key && s->url.mode == REDIS_URL_CLUSTER) {
		unsigned slot = cluster_key_slot(key, keylen);

		if (s->map.slot_node[slot] != CLUSTER_NO_NODE &&
		    rs_node(s, s->map.slot_node[slot], err, errlen))
			return s->map.slot_node[slot];
	}
	for (i = 0; i < s->map.nnodes; i++)
		if (rs_node(s, i, err, errlen))
			return (int)i;
	return -1;
}

/* Was <r> a MOVED or ASK? Learn it (a MOVED moves the slot), set <*to> to
 * the node to ask and <*ask>. */
static int rs_redirect(struct redis_sync *s, const redisReply *r, unsigned from, int *to,
                       int *ask)
{
	struct cluster_redirect rd;
	int idx;

	if (!r || r->type != REDIS_REPLY_ERROR || s->url.mode != REDIS_URL_CLUSTER ||
	    cluster_parse_redirect(r->str, r->len, s->map.nodes[from].host, &rd) == -1)
		return 0;
	idx = cluster_map_add(&s->map, rd.to.host, rd.to.port);
	if (idx < 0)
		return 0;
	if (rd.kind == CLUSTER_REPLY_MOVED)
		cluster_map_set_slot(&s->map, rd.slot, (unsigned)idx);
	*to = idx;
	*ask = rd.kind == CLUSTER_REPLY_ASK;
	return 1;
}

/* A connection that failed mid-command is dropped, to reconnect next time. */
static void rs_drop(struct redis_sync *s, unsigned idx)
{
	if (s->ctx[idx]) {
		redisFree(s->ctx[idx]);
		s->ctx[idx] = NULL;
	}
	if (s->url.mode == REDIS_URL_SENTINEL)
		cluster_map_init(&s->map);
}

/* See redis_sync.h: the caller owns the reply; argv borrowed. */
struct redisReply *redis_sync_command(struct redis_sync *s, const char *key, size_t keylen,
                                      int argc, const char **argv, const size_t *argvlen,
                                      char *err, size_t errlen)
{
	int idx = rs_route(s, key, keylen, err, errlen), ask = 0, hops;
	redisReply *r = NULL;

	for (hops = 0; idx >= 0 && hops <= REDIS_SYNC_REDIRECTS; hops++) {
		redisContext *c = rs_node(s, (unsigned)idx, err, errlen);
		int to;

		if (!c)
			return NULL;
		if (ask) {
			redisReply *a = redisCommand(c, "ASKING");

			if (a)
				freeReplyObject(a);
		}
		r = redisCommandArgv(c, argc, argv, argvlen);
		if (!r) {
			snprintf(err, errlen, "%s:%d: %s", s->map.nodes[idx].host, s->map.nodes[idx].port,
			         c->errstr[0] ? c->errstr : "no reply");
			rs_drop(s, (unsigned)idx);
			return NULL;
		}
		if (!rs_redirect(s, r, (unsigned)idx, &to, &ask))
			return r;
		freeReplyObject(r);
		r = NULL;
		idx = to;
	}
	if (idx >= 0)
		snprintf(err, errlen, "too many cluster redirects");
	return NULL;
}

/* See redis_sync.h: the caller owns the replies in <out>; argv borrowed. */
int redis_sync_pipeline(struct redis_sync *s, const char *key, size_t keylen, size_t n,
                        const int *argc, const char *const *argv[], const size_t *argvlen[],
                        struct redisReply **out, char *err, size_t errlen)
{
	int idx = rs_route(s, key, keylen, err, errlen), try, ask = 0;
	size_t i;

	for (try = 0; idx >= 0 && try < 2; try++) {
		redisContext *c = rs_node(s, (unsigned)idx, err, errlen);
		int to, moved = 0;

		if (!c)
			return -1;
		memset(out, 0, n * sizeof(*out));
		for (i = 0; i < n; i++)
			redisAppendCommandArgv(c, argc[i], (const char **)argv[i], argvlen[i]);
		for (i = 0; i < n; i++) {
			void *r = NULL;

			if (redisGetReply(c, &r) != REDIS_OK || !r) {
				snprintf(err, errlen, "%s:%d: %s", s->map.nodes[idx].host,
				         s->map.nodes[idx].port, c->errstr[0] ? c->errstr : "no reply");
				rs_drop(s, (unsigned)idx);
				goto fail;
			}
			out[i] = r;
			if (i == 0 && rs_redirect(s, out[0], (unsigned)idx, &to, &ask) && !ask)
				moved = 1;
		}
		if (!moved)
			return 0;
		for (i = 0; i < n; i++)
			freeReplyObject(out[i]);
		idx = to;
	}
	snprintf(err, errlen, "the pipeline's slot moved twice");
	return -1;
fail:
	for (i = 0; i < n; i++)
		if (out[i])
			freeReplyObject(out[i]);
	memset(out, 0, n * sizeof(*out));
	return -1;
}

/* See redis_sync.h: the reply is freed here. */
int64_t redis_sync_time_us(struct redis_sync *s, const char *key, size_t keylen,
                           char *err, size_t errlen)
{
	const char *argv[1] = { "TIME" };
	size_t len[1] = { 4 };
	redisReply *r = redis_sync_command(s, key, keylen, 1, argv, len, err, errlen);
	int64_t us = -1;

	if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
	    r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING)
		us = strtoll(r->element[0]->str, NULL, 10) * 1000000 +
		     strtoll(r->element[1]->str, NULL, 10);
	else if (r)
		snprintf(err, errlen, "TIME: unexpected reply");
	if (r)
		freeReplyObject(r);
	return us;
}

/* See redis_sync.h. */
int64_t redis_sync_time_ms(struct redis_sync *s, const char *key, size_t keylen,
                           char *err, size_t errlen)
{
	int64_t us = redis_sync_time_us(s, key, keylen, err, errlen);

	return us < 0 ? -1 : us / 1000;
}
