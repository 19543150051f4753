/*
 * live_control - the live-control thread (live_control.h): polls Redis
 * for the live overrides, hands each new set of rules to the workers'
 * table (live.c), logs the events, flushes the denial counts. Its state is
 * owned here; main owns the struct live_control.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hiredis_compat.h"

#include "config.h"
#include "denied.h"
#include "live.h"
#include "live_control.h"
#include "live_rule.h"
#include "log.h"
#include "live_pools.h"
#include "metrics.h"
#include "redis_sync.h"

#define LIVE_REDIS_TIMEOUT_MS 400      /* below the poll interval */

/* Owned by main (live_control_new/live_control_free). */
struct live_control {
	pthread_t thread;
	bool started;
	pthread_mutex_t cmu;
	pthread_cond_t cv;
	bool stop;                     /* under cmu */
	struct config *next_cfg;       /* under cmu: a reload's, owned */
	/* the thread's own */
	struct live *live;             /* the workers' table, borrowed */
	const struct live_entry *tab;  /* what it published last (live.c's) */
	size_t n;
	struct config *cfg;            /* owned */
	struct redis_sync *rs;
	bool have_version;
	long long version;
	long long seq;                 /* newest event logged */
	struct metrics *metrics;       /* borrowed, may be NULL */
	struct denied *denied;         /* borrowed, may be NULL */
};

/* A config copy on the heap, owned by the caller. NULL when out of memory. */
static struct config *live_copy_config(const struct config *cfg)
{
	struct config *c = calloc(1, sizeof(*c));

	if (c && config_copy(c, cfg) == -1) {
		free(c);
		return NULL;
	}
	return c;
}

/* Frees a copy made by live_copy_config() (NULL: nothing). */
static void live_free_config(struct config *c)
{
	if (c) {
		config_release(c);
		free(c);
	}
}

/* Log one event of the list ("<seq> <ms> <what> <policy> <account%> <who%>
 * <detail%>"); returns its seq, or -1 when it is not one. */
static long long live_log_event(const char *s, size_t len, bool log)
{
	char w[7][3 * 400 + 2], acc[WINDOW_KEY_MAX + 1], who[LIVE_WHO_MAX + 1], det[400 + 1];
	char qa[LOG_QUOTED_MAX(WINDOW_KEY_MAX)], qw[LOG_QUOTED_MAX(LIVE_WHO_MAX)];
	char qd[LOG_QUOTED_MAX(400)], ew[4][LOG_ESCAPED_MAX(WINDOW_NAME_MAX)];
	const char *p = s, *end = s + len;
	unsigned i;

	for (i = 0; i < 7; i++) {
		const char *sp = i < 6 ? memchr(p, ' ', (size_t)(end - p)) : end;
		size_t n;

		if (!sp || p > end)
			return -1;
		n = (size_t)(sp - p);
		if (n >= sizeof(w[i]))
			return -1;
		memcpy(w[i], p, n);
		w[i][n] = '\0';
		p = sp + 1;
	}
	if (live_rule_unescape(w[4], strlen(w[4]), acc, sizeof(acc)) < 0 ||
	    live_rule_unescape(w[5], strlen(w[5]), who, sizeof(who)) < 0 ||
	    live_rule_unescape(w[6], strlen(w[6]), det, sizeof(det)) < 0)
		return -1;
	if (!log)
		return strtoll(w[0], NULL, 10);
	log_quote(qa, sizeof(qa), acc, strlen(acc));
	log_quote(qw, sizeof(qw), who, strlen(who));
	log_quote(qd, sizeof(qd), det, strlen(det));
	/* the words before them have no space, yet come from Redis all the same */
	for (i = 0; i < 4; i++)
		log_escape_text(ew[i], sizeof(ew[i]), w[i], strlen(w[i]));
#define LIVE_EVENT_FMT "seq=%s what=%s policy=%s account=%s who=%s at_ms=%s detail=%s"
	if (strcmp(w[2], "reset") == 0)
		log_info("live_reset", LIVE_EVENT_FMT, ew[0], ew[2], ew[3], qa, qw, ew[1], qd);
	else
		log_info("live_override_change", LIVE_EVENT_FMT, ew[0], ew[2], ew[3], qa, qw, ew[1],
		         qd);
#undef LIVE_EVENT_FMT
	return strtoll(w[0], NULL, 10);
}

/* The events newer than lc->seq, logged oldest first (the first poll only
 * learns where the list is). */
static void live_read_events(struct live_control *lc)
{
	const char *argv[4] = { "LRANGE", LIVE_KEY_EVENTS, "0", "-1" };
	size_t len[4] = { 6, sizeof(LIVE_KEY_EVENTS) - 1, 1, 2 };
	char err[256];
	redisReply *r = redis_sync_command(lc->rs, LIVE_KEY_EVENTS, len[1], 4, argv, len, err,
	                                   sizeof(err));
	size_t i;
	long long newest = lc->seq;

	if (!r || r->type == REDIS_REPLY_ERROR) {
		log_limited(CONFIG_LOG_WARN, "live_poll", "live_poll_failed", "error=\"LRANGE: %s\"",
		            r ? r->str : err);
		if (r)
			freeReplyObject(r);
		return;
	}
	for (i = r->type == REDIS_REPLY_ARRAY ? r->elements : 0; i-- > 0;) {
		const redisReply *e = r->element[i];
		long long seq;
		char head[24];
		size_t hl;

		if (e->type != REDIS_REPLY_STRING)
			continue;
		hl = strcspn(e->str, " ");
		if (hl >= sizeof(head))
			continue;
		memcpy(head, e->str, hl);
		head[hl] = '\0';
		seq = strtoll(head, NULL, 10);
		if (seq <= lc->seq)
			continue;
		live_log_event(e->str, e->len, lc->have_version);
		if (seq > newest)
			newest = seq;
	}
	lc->seq = newest;
	freeReplyObject(r);
}

/* Would this agent apply <r>? Logged when it would not, once per rule. */
static void live_judge(struct live_control *lc, const struct live_rule *r, bool first)
{
	const struct window_policy *p = config_find_policy(lc->cfg, r->policy, r->policy_len);
	char why[256], lim[128], qa[LOG_QUOTED_MAX(WINDOW_KEY_MAX)];
	char qw[LOG_QUOTED_MAX(LIVE_WHO_MAX)], qr[LOG_QUOTED_MAX(LIVE_REASON_MAX)];
	char ep[LOG_ESCAPED_MAX(WINDOW_NAME_MAX)], ey[LOG_ESCAPED_MAX(sizeof(why))];

	/* the policy is a hash field's first word: no space, any other byte */
	log_escape_text(ep, sizeof(ep), r->policy, r->policy_len);
	if (!p)
		snprintf(why, sizeof(why), "no policy '%s' in this agent's configuration", r->policy);
	live_rule_format_limits(r, lim, sizeof(lim));
	log_quote(qa, sizeof(qa), r->key, r->key_len);
	log_quote(qw, sizeof(qw), r->who, strlen(r->who));
	if (!p || live_rule_check(p, r, why, sizeof(why)) == -1)
		log_warn("live_override_refused", "policy=%s account=%s limits=%s who=%s reason=\"%s\"",
		         ep, qa, lim, qw, log_escape_text(ey, sizeof(ey), why, strlen(why)));
	else if (first)
		log_info("live_override_active", "policy=%s account=%s limits=%s who=%s "
		         "expires_ms=%" PRId64 " reason=%s", ep, qa, lim, qw, r->expires_ms,
		         log_quote(qr, sizeof(qr), r->reason, strlen(r->reason)));
}

/* Read the rules into a new table (converting expiries to the monotonic
 * clock) and publish it: the table passes to lc->live, which frees the old
 * one; <lc> keeps reading it. Returns 0 or -1 with <err> (the old table
 * stays). */
static int live_read_rules(struct live_control *lc, char *err, size_t errlen)
{
	const char *argv[2] = { "HGETALL", LIVE_KEY_RULES };
	size_t len[2] = { 7, sizeof(LIVE_KEY_RULES) - 1 }, i, n = 0, k;
	int64_t redis_ms = redis_sync_time_ms(lc->rs, LIVE_KEY_RULES, len[1], err, errlen);
	uint64_t mono = metrics_now_us();
	struct live_entry *tab = NULL;
	redisReply *r;
	bool first = !lc->have_version;

	if (redis_ms < 0)
		return -1;
	r = redis_sync_command(lc->rs, LIVE_KEY_RULES, len[1], 2, argv, len, err, errlen);
	if (!r || r->type != REDIS_REPLY_ARRAY) {
		if (r) {
			snprintf(err, errlen, "HGETALL: %s", r->type == REDIS_REPLY_ERROR ? r->str :
			         "unexpected reply");
			freeReplyObject(r);
		}
		return -1;
	}
	if (r->elements && !(tab = calloc(r->elements / 2, sizeof(*tab)))) {
		snprintf(err, errlen, "out of memory");
		freeReplyObject(r);
		return -1;
	}
	for (i = 0; i + 1 < r->elements; i += 2) {
		struct live_entry *e = &tab[n];
		const redisReply *f = r->element[i], *v = r->element[i + 1];

		memset(e, 0, sizeof(*e));
		if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
		    f->len > sizeof(e->field) || live_rule_parse_field(f->str, f->len, &e->rule) == -1 ||
		    live_rule_decode(v->str, v->len, &e->rule) == -1 || e->rule.expires_ms <= redis_ms)
			continue;
		memcpy(e->field, f->str, f->len);
		e->field_len = f->len;
		e->expires_us = mono + (uint64_t)(e->rule.expires_ms - redis_ms) * 1000u;
		n++;
	}
	freeReplyObject(r);
	if (n)
		qsort(tab, n, sizeof(*tab), live_entry_cmp);
	/* log what this agent sees anew: set_ms tells a replaced rule apart */
	for (i = 0; i < n; i++) {
		struct live_entry *o = NULL;

		/* the only writer reads what it published unlocked */
		if (lc->n)
			o = bsearch(&tab[i], lc->tab, lc->n, sizeof(*lc->tab), live_entry_cmp);
		k = o && o->rule.set_ms == tab[i].rule.set_ms;
		if (!k)
			live_judge(lc, &tab[i].rule, first);
	}
	/* The first table changes no cached denial: one made before it, under
	 * limits that a live override now replaces, no longer matches its
	 * rule (deny_cache_rule), and a reset before the agent's start came
	 * before anything it cached. Emptying the caches then would only race
	 * the workers' first denials. */
	live_publish(lc->live, tab, n, !first);
	lc->tab = tab;
	lc->n = n;
	return 0;
}

/* One poll: the version, and on a change the rules and the events. */
static void live_poll(struct live_control *lc)
{
	const char *argv[2] = { "GET", LIVE_KEY_VERSION };
	size_t len[2] = { 3, sizeof(LIVE_KEY_VERSION) - 1 };
	char err[256];
	redisReply *r = redis_sync_command(lc->rs, LIVE_KEY_VERSION, len[1], 2, argv, len, err,
	                                   sizeof(err));
	long long v;

	if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL)) {
		log_limited(CONFIG_LOG_WARN, "live_poll", "live_poll_failed", "error=\"%s\"",
		            r && r->type == REDIS_REPLY_ERROR ? r->str : err);
		if (r)
			freeReplyObject(r);
		redis_sync_reset(lc->rs);
		return;
	}
	v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
	freeReplyObject(r);
	if (lc->have_version && v == lc->version)
		return;
	if (live_read_rules(lc, err, sizeof(err)) == -1) {
		log_limited(CONFIG_LOG_WARN, "live_poll", "live_poll_failed", "error=\"%s\"", err);
		redis_sync_reset(lc->rs);
		return;
	}
	live_read_events(lc);
	if (!lc->have_version)
		log_info("live_control_ready", "version=%lld overrides=%zu redis=%s", v,
		         lc->n, redis_sync_addr(lc->rs));
	lc->version = v;
	lc->have_version = true;
}

/* Live overrides in effect now, for the gauge. */
static size_t live_in_effect(struct live_control *lc)
{
	uint64_t now = metrics_now_us();
	size_t i, n = 0;

	/* the only writer reads what it published unlocked */
	for (i = 0; i < lc->n; i++)
		n += lc->tab[i].expires_us > now;
	return n;
}

/* The live-control thread: owns lc->cfg, lc->rs and builds every table. */
static void *live_main(void *arg)
{
	struct live_control *lc = arg;
	struct timespec at;
	unsigned tick = 0;
	char err[256];

	clock_gettime(CLOCK_MONOTONIC, &at);     /* the first poll at once */
	for (;;) {
		struct config *next;

		pthread_mutex_lock(&lc->cmu);
		while (!lc->stop && pthread_cond_timedwait(&lc->cv, &lc->cmu, &at) != ETIMEDOUT)
			;
		next = lc->next_cfg;
		lc->next_cfg = NULL;
		if (lc->stop) {
			pthread_mutex_unlock(&lc->cmu);
			live_free_config(next);
			break;
		}
		pthread_mutex_unlock(&lc->cmu);
		/* the next poll LIVE_POLL_MS after this one starts: a slow poll
		 * (Redis frozen: its timeouts) delays the next, never a burst */
		clock_gettime(CLOCK_MONOTONIC, &at);
		at.tv_nsec += LIVE_POLL_MS * 1000000L;
		at.tv_sec += at.tv_nsec / 1000000000L;
		at.tv_nsec %= 1000000000L;
		if (next) {
			live_free_config(lc->cfg);
			lc->cfg = next;
			redis_sync_free(lc->rs);
			lc->rs = NULL;
		}
		if (!lc->rs && !(lc->rs = redis_sync_new(lc->cfg->redis, &lc->cfg->tls, LIVE_REDIS_TIMEOUT_MS, err,
		                                          sizeof(err)))) {
			log_limited(CONFIG_LOG_WARN, "live_poll", "live_poll_failed", "error=\"%s\"", err);
			continue;
		}
		live_poll(lc);
		if (lc->denied && ++tick % (1000 / LIVE_POLL_MS) == 0 &&
		    denied_flush(lc->denied, lc->rs, err, sizeof(err)) == -1) {
			log_limited(CONFIG_LOG_WARN, "denied_flush", "denied_flush_failed", "error=\"%s\"",
			            err);
			redis_sync_reset(lc->rs);
		}
		/* the pools' gauges, each second with the flush; nothing to read
		 * without a pool, nobody to read them with metrics off */
		if (lc->metrics && lc->cfg->npools && lc->cfg->metrics[0] &&
		    tick % (1000 / LIVE_POLL_MS) == 0 &&
		    live_pools_read(lc->cfg, lc->rs, lc->metrics, err, sizeof(err)) == -1) {
			log_limited(CONFIG_LOG_WARN, "pool_read", "pool_read_failed", "error=\"%s\"", err);
			redis_sync_reset(lc->rs);
		}
		if (lc->metrics) {
			atomic_store(&lc->metrics->live_overrides, live_in_effect(lc));
			atomic_store(&lc->metrics->denied_dropped, denied_dropped(lc->denied));
		}
	}
	return NULL;
}

/* See live_control.h: the caller owns the result; <cfg> is copied, the
 * rest borrowed. */
struct live_control *live_control_new(const struct config *cfg, struct live *live,
                                      struct metrics *metrics, struct denied *denied,
                                      char *err, size_t errlen)
{
	struct live_control *lc = calloc(1, sizeof(*lc));
	pthread_condattr_t ca;

	if (!lc || !(lc->cfg = live_copy_config(cfg))) {
		snprintf(err, errlen, "out of memory");
		free(lc);
		return NULL;
	}
	lc->live = live;
	lc->metrics = metrics;
	lc->denied = denied;
	pthread_mutex_init(&lc->cmu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&lc->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&lc->thread, NULL, live_main, lc) != 0) {
		snprintf(err, errlen, "cannot start the live-control thread");
		live_control_free(lc);
		return NULL;
	}
	lc->started = true;
	return lc;
}

/* See live_control.h: <cfg> is copied, the thread takes the copy. */
int live_control_reconfigure(struct live_control *lc, const struct config *cfg)
{
	struct config *c = live_copy_config(cfg), *old;

	if (!c)
		return -1;
	pthread_mutex_lock(&lc->cmu);
	old = lc->next_cfg;
	lc->next_cfg = c;
	pthread_mutex_unlock(&lc->cmu);
	live_free_config(old);
	return 0;
}

/* See live_control.h: frees <lc> and all it owns, after the thread stopped. */
void live_control_free(struct live_control *lc)
{
	if (!lc)
		return;
	if (lc->started) {
		pthread_mutex_lock(&lc->cmu);
		lc->stop = true;
		pthread_cond_signal(&lc->cv);
		pthread_mutex_unlock(&lc->cmu);
		pthread_join(lc->thread, NULL);
	}
	redis_sync_free(lc->rs);
	live_free_config(lc->cfg);
	live_free_config(lc->next_cfg);
	pthread_cond_destroy(&lc->cv);
	pthread_mutex_destroy(&lc->cmu);
	free(lc);
}
