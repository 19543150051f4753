/*
 * ctl_pool - `ctl show-pool`: a pool's log read through the one reader of
 * the stored data (stored_read_pool), as its next decision counts it; and
 * the units an account holds in a pool, for reset's note.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hiredis_compat.h"

#include "ctl_int.h"
#include "redis_sync.h"
#include "stored.h"

/* The pool named x->a.pool in the configuration, or NULL with x->err. */
static const struct window_pool *ctl_find_pool(struct ctl *x)
{
	size_t i, len = strlen(x->a.pool);

	for (i = 0; i < x->cfg.npools; i++)
		if (x->cfg.pools[i].name_len == len && memcmp(x->cfg.pools[i].name, x->a.pool, len) == 0)
			return &x->cfg.pools[i];
	snprintf(x->err, sizeof(x->err), "%s: no pool '%s'", x->a.config, x->a.pool);
	x->refused = true;
	return NULL;
}

/* The names of the policies naming <pl>, "a,b" into <dst>/<cap> ("-": none). */
static void ctl_pool_policies(const struct ctl *x, const struct window_pool *pl, char *dst,
                              size_t cap, bool json)
{
	size_t i, o = 0;
	int n;

	dst[0] = '\0';
	for (i = 0; i < x->cfg.npolicies; i++) {
		const struct window_policy *p = &x->cfg.policies[i];

		if (!p->pooled || strcmp(p->pool.name, pl->name) != 0)
			continue;
		n = snprintf(dst + o, cap - o, json ? "%s\"%s\"" : "%s%s", o ? "," : "", p->name);
		if (n < 0 || (size_t)n >= cap - o)
			break;
		o += (size_t)n;
	}
	if (o == 0 && !json)
		snprintf(dst, cap, "-");
}

/* Print pool <pl> read at <now_us> (<u>, <acc>/<nacc> in units order). */
static void ctl_pool_print(struct ctl *x, const struct window_pool *pl,
                           const struct stored_usage *u, const struct stored_pool_account *acc,
                           size_t nacc)
{
	char ws[32], pols[CONFIG_MAX_POLICIES * (WINDOW_NAME_MAX + 3) + 1];
	char ea[LOG_ESCAPED_MAX(WINDOW_KEY_MAX)];
	size_t i, shown = nacc < x->a.top ? nacc : x->a.top;

	window_format_ms(pl->window_ms, ws, sizeof(ws));
	ctl_pool_policies(x, pl, pols, sizeof(pols), x->a.json);
	if (x->a.json) {
		printf("{\"pool\":\"%s\",\"limit\":%" PRIu64 ",\"window_ms\":%" PRIu64 ",\"headroom\":%"
		       PRIu64 ",\"used\":%" PRIu64 ",\"remaining\":%" PRIu64 ",\"reset\":%" PRId64
		       ",\"accounts\":%zu,\"policies\":[%s],\"top\":[", pl->name, pl->limit,
		       pl->window_ms, pl->headroom, u->used, u->remaining,
		       window_us_to_s_ceil(u->reset_us), nacc, pols);
		for (i = 0; i < shown; i++) {
			printf("%s{\"account\":", i ? "," : "");
			ctl_json_str(stdout, acc[i].account, acc[i].len);
			/* the engines' rule: at or above its share when mine * (n + 1) >= limit */
			printf(",\"units\":%" PRIu64 ",\"at_share\":%s}", acc[i].units,
			       acc[i].units * (nacc + 1) >= pl->limit ? "true" : "false");
		}
		printf("]}\n");
		return;
	}
	printf("pool %s limit %" PRIu64 "/%s headroom %" PRIu64 " used %" PRIu64 " remaining %"
	       PRIu64 " reset %" PRId64 "s accounts %zu policies %s\n", pl->name, pl->limit, ws,
	       pl->headroom, u->used, u->remaining, window_us_to_s_ceil(u->reset_us), nacc, pols);
	if (shown)
		printf("%-10s %-6s %-8s %s\n", "UNITS", "USED%", "AT-SHARE", "ACCOUNT");
	for (i = 0; i < shown; i++)
		printf("%-10" PRIu64 " %-6" PRIu64 " %-8s %s\n", acc[i].units,
		       u->used ? acc[i].units * 100 / u->used : 0,
		       acc[i].units * (nacc + 1) >= pl->limit ? "yes" : "no",
		       log_escape_text(ea, sizeof(ea), acc[i].account, acc[i].len));
}

/* See ctl_int.h. */
int ctl_show_pool(struct ctl *x)
{
	const struct window_pool *pl = ctl_find_pool(x);
	char log[WINDOW_REDIS_KEY_MAX], cut[32];
	const char *argv[5] = { "ZRANGEBYSCORE", log, cut, "+inf", "WITHSCORES" };
	size_t len[5], i, n = 0, nacc = 0;
	struct stored_entry *e = NULL;
	struct stored_pool_account *acc = NULL;
	struct stored_usage u;
	redisReply *r = NULL;
	int64_t now_us;
	int loglen, rc = 1;

	if (!pl)
		return 1;
	loglen = window_pool_key(pl, WINDOW_KEY_POOL_LOG, log, sizeof(log));
	if (loglen < 0) {
		snprintf(x->err, sizeof(x->err), "pool '%s' makes no key", pl->name);
		return 1;
	}
	now_us = redis_sync_time_us(x->rs, log, (size_t)loglen, x->err, sizeof(x->err));
	if (now_us < 0)
		return 1;
	/* the entries in the window (after the cut), oldest first: at most
	 * the pool's limit of them */
	snprintf(cut, sizeof(cut), "(%" PRId64, now_us - (int64_t)pl->window_ms * 1000);
	for (i = 0; i < 5; i++)
		len[i] = strlen(argv[i]);
	len[1] = (size_t)loglen;
	r = ctl_cmd(x, log, (size_t)loglen, 5, argv, len);
	if (!r)
		return 1;
	if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
	    (!(e = calloc(r->elements / 2, sizeof(*e))) ||
	     !(acc = calloc(r->elements / 2, sizeof(*acc))))) {
		snprintf(x->err, sizeof(x->err), "out of memory");
		goto out;
	}
	for (i = 0; e && i + 1 < r->elements; i += 2, n++) {
		e[n].member = r->element[i]->str ? r->element[i]->str : "";
		e[n].len = r->element[i]->str ? (size_t)r->element[i]->len : 0;
		e[n].score = r->element[i + 1]->str ? strtoll(r->element[i + 1]->str, NULL, 10) : 0;
	}
	if (stored_read_pool(e, n, pl, now_us, &u, acc, &nacc) == -1)
		fprintf(stderr, "ctl: pool %s holds an entry the engines refuse: its decisions "
		        "fail (read as full)\n", pl->name);
	ctl_pool_print(x, pl, &u, acc, nacc);
	rc = 0;
out:
	free(e);
	free(acc);
	freeReplyObject(r);
	return rc;
}

/* See ctl_int.h. */
int64_t ctl_pool_units(struct ctl *x)
{
	char hash[WINDOW_REDIS_KEY_MAX];
	int hlen = window_pool_key(&x->p->pool, WINDOW_KEY_POOL_ACCOUNTS, hash, sizeof(hash));
	const char *argv[3] = { "HGET", hash, x->a.account };
	size_t len[3] = { 4, 0, strlen(x->a.account) };
	redisReply *r;
	int64_t units = 0;

	if (hlen < 0) {
		snprintf(x->err, sizeof(x->err), "pool '%s' makes no key", x->p->pool.name);
		return -1;
	}
	len[1] = (size_t)hlen;
	r = ctl_cmd(x, hash, (size_t)hlen, 3, argv, len);
	if (!r)
		return -1;
	if (r->type == REDIS_REPLY_STRING)
		units = strtoll(r->str, NULL, 10);
	freeReplyObject(r);
	return units;
}
