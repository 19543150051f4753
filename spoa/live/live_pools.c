/*
 * live_pools - the pools' gauges read from Redis (live_pools.h), on the
 * live-control thread.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hiredis_compat.h"

#include "config.h"
#include "live_pools.h"
#include "metrics.h"
#include "redis_sync.h"
#include "stored.h"

/* Entry <i> of a WITHSCORES reply <r> (member, score) into <e>; 0 or -1. */
static int live_pools_entry(const redisReply *r, size_t i, struct stored_entry *e)
{
	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 2 * i + 2 ||
	    !r->element[2 * i]->str || !r->element[2 * i + 1]->str)
		return -1;
	e->member = r->element[2 * i]->str;
	e->len = (size_t)r->element[2 * i]->len;
	e->score = strtoll(r->element[2 * i + 1]->str, NULL, 10);
	return 0;
}

/*
 * Pool <pl>: its log's oldest entry in the window and its newest (all the
 * engines' count needs), and HLEN of its hash, in one pipeline after
 * Redis's TIME. Sets <*used>, <*active>. Returns 0 or -1 with <err>.
 */
static int live_pools_one(const struct window_pool *pl, struct redis_sync *rs, uint64_t *used,
                          uint64_t *active, char *err, size_t errlen)
{
	char log[WINDOW_REDIS_KEY_MAX], hash[WINDOW_REDIS_KEY_MAX], cut[32];
	int loglen = window_pool_key(pl, WINDOW_KEY_POOL_LOG, log, sizeof(log));
	int hashlen = window_pool_key(pl, WINDOW_KEY_POOL_ACCOUNTS, hash, sizeof(hash));
	const char *oldest[8] = { "ZRANGEBYSCORE", log, cut, "+inf", "WITHSCORES", "LIMIT", "0",
	                          "1" };
	const char *newest[5] = { "ZRANGE", log, "-1", "-1", "WITHSCORES" };
	const char *hlen[2] = { "HLEN", hash };
	size_t lo[8], ln[5], lh[2], i;
	const char *const *argv[3] = { oldest, newest, hlen };
	const size_t *argvlen[3] = { lo, ln, lh };
	const int argc[3] = { 8, 5, 2 };
	struct redisReply *out[3] = { NULL, NULL, NULL };
	struct stored_entry e[2];
	struct stored_usage u;
	int64_t now_us;
	int rc = -1;

	if (loglen < 0 || hashlen < 0) {
		snprintf(err, errlen, "pool %s: no key", pl->name);
		return -1;
	}
	now_us = redis_sync_time_us(rs, log, (size_t)loglen, err, errlen);
	if (now_us < 0)
		return -1;
	/* after the cut: an entry exactly one window old is out */
	snprintf(cut, sizeof(cut), "(%" PRId64, now_us - (int64_t)pl->window_ms * 1000);
	for (i = 0; i < 8; i++)
		lo[i] = strlen(oldest[i]);
	for (i = 0; i < 5; i++)
		ln[i] = strlen(newest[i]);
	lh[0] = 4;
	lh[1] = (size_t)hashlen;
	lo[1] = ln[1] = (size_t)loglen;
	if (redis_sync_pipeline(rs, log, (size_t)loglen, 3, argc, argv, argvlen, out, err,
	                        errlen) == -1)
		return -1;
	if (out[2]->type != REDIS_REPLY_INTEGER || out[0]->type != REDIS_REPLY_ARRAY ||
	    out[1]->type != REDIS_REPLY_ARRAY) {
		snprintf(err, errlen, "pool %s: unexpected reply (%s)", pl->name,
		         out[0]->type == REDIS_REPLY_ERROR ? out[0]->str :
		         out[2]->type == REDIS_REPLY_ERROR ? out[2]->str : "type");
		goto out;
	}
	*active = out[2]->integer > 0 ? (uint64_t)out[2]->integer : 0;
	if (out[0]->elements == 0) {
		*used = 0;
	} else if (live_pools_entry(out[0], 0, &e[0]) == -1 ||
	           live_pools_entry(out[1], 0, &e[1]) == -1) {
		snprintf(err, errlen, "pool %s: unexpected reply", pl->name);
		goto out;
	} else {
		/* a member the engines refuse reads full, as their decisions fail */
		stored_read_pool(e, 2, pl, now_us, &u, NULL, NULL);
		*used = u.used;
	}
	rc = 0;
out:
	for (i = 0; i < 3; i++)
		freeReplyObject(out[i]);
	return rc;
}

/* See live_pools.h. Borrows all. */
int live_pools_read(const struct config *cfg, struct redis_sync *rs, struct metrics *m,
                    char *err, size_t errlen)
{
	size_t j;

	for (j = 0; j < cfg->npools && j < CONFIG_MAX_POOLS; j++) {
		uint64_t used = 0, active = 0;

		if (live_pools_one(&cfg->pools[j], rs, &used, &active, err, errlen) == -1)
			return -1;
		atomic_store_explicit(&m->pool_used[j], used, memory_order_relaxed);
		atomic_store_explicit(&m->pool_accounts[j], active, memory_order_relaxed);
	}
	return 0;
}
