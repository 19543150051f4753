/*
 * live - the agent's live overrides: the table the workers read and the
 * thread that polls Redis for it (live.h). The table and the thread's
 * state are owned here; main owns the struct live.
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

#include "denied.h"
#include "live.h"
#include "live_rule.h"
#include "log.h"
#include "metrics.h"
#include "redis_sync.h"

#define LIVE_REDIS_TIMEOUT_MS 400      /* below the poll interval */

/* One rule as the workers read it. */
struct live_entry {
	char field[LIVE_FIELD_MAX];    /* "<policy> <account>": the sort key */
	size_t field_len;
	struct live_rule rule;
	uint64_t expires_us;           /* the agent's monotonic clock */
};

/* Owned by main (live_new/live_free). */
struct live {
	/* the table: replaced whole by the thread, read by workers */
	pthread_rwlock_t mu;            /* workers read in parallel */
	struct live_entry *tab;        /* sorted by field; owned */
	size_t n;
	_Atomic size_t count;          /* n, read without the lock */
	_Atomic uint64_t epoch;        /* live_epoch() */
	/* the thread and what main hands it */
	pthread_t thread;
	bool started;
	pthread_mutex_t cmu;
	pthread_cond_t cv;
	bool stop;                     /* under cmu */
	struct config *next_cfg;       /* under cmu: a reload's, owned */
	/* the thread's own */
	struct config *cfg;            /* owned */
	struct redis_sync *rs;
	bool have_version;
	long long version;
	long long seq;                 /* newest event logged */
	struct metrics *metrics;       /* borrowed, may be NULL */
	struct denied *denied;         /* borrowed, may be NULL */
};

/* Order of fields <a>/<al> and <b>/<bl>: bytewise, a shorter prefix first. */
static int live_field_cmp(const char *a, size_t al, const char *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);

	return c ? c : (al > bl) - (al < bl);
}

/* qsort/bsearch order of entries (borrowed, compared only). */
static int live_entry_cmp(const void *a, const void *b)
{
	const struct live_entry *x = a, *y = b;

	return live_field_cmp(x->field, x->field_len, y->field, y->field_len);
}

/* A lookup's key: a field not copied into a whole entry. */
struct live_key {
	const char *field;
	size_t len;
};

/* bsearch of a struct live_key among entries (both borrowed). */
static int live_key_cmp(const void *k, const void *e)
{
	const struct live_key *x = k;
	const struct live_entry *y = e;

	return live_field_cmp(x->field, x->len, y->field, y->field_len);
}

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

/* See live.h: borrows <p> and <key>; <out> and <d> are the caller's. */
enum live_verdict live_apply(struct live *lv, const struct window_policy *p, const char *key,
                             size_t key_len, struct window_policy *out,
                             struct window_decision *d)
{
	char field[LIVE_FIELD_MAX];
	struct live_key probe = { field, p->name_len + 1 + key_len };
	struct live_entry *e;
	struct live_rule r;
	const struct window_limit *lim;
	uint64_t now, expires, left_us, cap_us = (uint64_t)LIVE_BLOCK_RETRY_MAX_S * 1000000u;
	unsigned nwin;
	char why[256];

	if (!lv || atomic_load_explicit(&lv->count, memory_order_acquire) == 0 ||
	    probe.len > sizeof(field))
		return LIVE_NONE;
	memcpy(field, p->name, p->name_len);
	field[p->name_len] = ' ';
	memcpy(field + p->name_len + 1, key, key_len);
	pthread_rwlock_rdlock(&lv->mu);
	e = lv->n ? bsearch(&probe, lv->tab, lv->n, sizeof(*lv->tab), live_key_cmp) : NULL;
	if (e) {
		r = e->rule;
		expires = e->expires_us;
	}
	pthread_rwlock_unlock(&lv->mu);
	if (!e)
		return LIVE_NONE;   /* (no clock read for the accounts without one) */
	now = metrics_now_us();
	/* the ceiling is this generation's: a reload that lowers it applies at once */
	if (now >= expires || live_rule_check(p, &r, why, sizeof(why)) == -1)
		return LIVE_NONE;
	if (!r.block) {
		*out = *p;
		out->nwin = r.nwin;
		memcpy(out->win, r.win, r.nwin * sizeof(r.win[0]));
		if (p->algorithm == WINDOW_ALGO_GCRA)
			out->win[0].burst = live_rule_gcra_burst(p, &r);
		out->overrides = NULL;
		out->noverrides = 0;
		return LIVE_LIMITS;
	}
	left_us = expires - now;
	if (left_us > cap_us)
		left_us = cap_us;
	lim = window_limits_for(p, key, key_len, &nwin);
	memset(d, 0, sizeof(*d));
	d->status = WINDOW_DENY;
	d->reason = WINDOW_REASON_BLOCKED;
	d->has_quota = true;
	d->limit = (int64_t)window_limit_quota(&lim[0]);   /* a bucket's: its burst */
	d->remaining = 0;
	d->retry_after_us = d->reset_us = (int64_t)left_us;
	d->retry_after = d->reset = window_us_to_s_ceil((int64_t)left_us);
	d->window = 0;
	return LIVE_BLOCK;
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

/* The events newer than lv->seq, logged oldest first (the first poll only
 * learns where the list is). */
static void live_read_events(struct live *lv)
{
	const char *argv[4] = { "LRANGE", LIVE_KEY_EVENTS, "0", "-1" };
	size_t len[4] = { 6, sizeof(LIVE_KEY_EVENTS) - 1, 1, 2 };
	char err[256];
	redisReply *r = redis_sync_command(lv->rs, LIVE_KEY_EVENTS, len[1], 4, argv, len, err,
	                                   sizeof(err));
	size_t i;
	long long newest = lv->seq;

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
		if (seq <= lv->seq)
			continue;
		live_log_event(e->str, e->len, lv->have_version);
		if (seq > newest)
			newest = seq;
	}
	lv->seq = newest;
	freeReplyObject(r);
}

/* Would this agent apply <r>? Logged when it would not, once per rule. */
static void live_judge(struct live *lv, const struct live_rule *r, bool first)
{
	const struct window_policy *p = config_find_policy(lv->cfg, r->policy, r->policy_len);
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
 * clock) and swap it in; the table is owned by <lv>, the old one freed.
 * Returns 0 or -1 with <err> (the old table stays). */
static int live_read_rules(struct live *lv, char *err, size_t errlen)
{
	const char *argv[2] = { "HGETALL", LIVE_KEY_RULES };
	size_t len[2] = { 7, sizeof(LIVE_KEY_RULES) - 1 }, i, n = 0, k;
	int64_t redis_ms = redis_sync_time_ms(lv->rs, LIVE_KEY_RULES, len[1], err, errlen);
	uint64_t mono = metrics_now_us();
	struct live_entry *tab = NULL, *old;
	redisReply *r;
	bool first = !lv->have_version;

	if (redis_ms < 0)
		return -1;
	r = redis_sync_command(lv->rs, LIVE_KEY_RULES, len[1], 2, argv, len, err, errlen);
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

		/* the only writer reads its own table unlocked */
		if (lv->n)
			o = bsearch(&tab[i], lv->tab, lv->n, sizeof(*lv->tab), live_entry_cmp);
		k = o && o->rule.set_ms == tab[i].rule.set_ms;
		if (!k)
			live_judge(lv, &tab[i].rule, first);
	}
	pthread_rwlock_wrlock(&lv->mu);
	old = lv->tab;
	lv->tab = tab;
	lv->n = n;
	atomic_store_explicit(&lv->count, n, memory_order_release);
	pthread_rwlock_unlock(&lv->mu);
	free(old);
	return 0;
}

/* One poll: the version, and on a change the rules and the events. */
static void live_poll(struct live *lv)
{
	const char *argv[2] = { "GET", LIVE_KEY_VERSION };
	size_t len[2] = { 3, sizeof(LIVE_KEY_VERSION) - 1 };
	char err[256];
	redisReply *r = redis_sync_command(lv->rs, LIVE_KEY_VERSION, len[1], 2, argv, len, err,
	                                   sizeof(err));
	long long v;

	if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL)) {
		log_limited(CONFIG_LOG_WARN, "live_poll", "live_poll_failed", "error=\"%s\"",
		            r && r->type == REDIS_REPLY_ERROR ? r->str : err);
		if (r)
			freeReplyObject(r);
		redis_sync_reset(lv->rs);
		return;
	}
	v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
	freeReplyObject(r);
	if (lv->have_version && v == lv->version)
		return;
	if (live_read_rules(lv, err, sizeof(err)) == -1) {
		log_limited(CONFIG_LOG_WARN, "live_poll", "live_poll_failed", "error=\"%s\"", err);
		redis_sync_reset(lv->rs);
		return;
	}
	live_read_events(lv);
	if (!lv->have_version)
		log_info("live_control_ready", "version=%lld overrides=%zu redis=%s", v,
		         atomic_load(&lv->count), redis_sync_addr(lv->rs));
	lv->version = v;
	lv->have_version = true;
	atomic_fetch_add(&lv->epoch, 1);
}

/* See live.h; reads <lv> only. */
uint64_t live_epoch(const struct live *lv)
{
	return atomic_load(&lv->epoch);
}

/* Live overrides in effect now, for the gauge. */
static size_t live_in_effect(struct live *lv)
{
	uint64_t now = metrics_now_us();
	size_t i, n = 0;

	/* the only writer reads its own table unlocked */
	for (i = 0; i < lv->n; i++)
		n += lv->tab[i].expires_us > now;
	return n;
}

/* The live-control thread: owns lv->cfg, lv->rs and builds every table. */
static void *live_main(void *arg)
{
	struct live *lv = arg;
	struct timespec at;
	unsigned tick = 0;
	char err[256];

	clock_gettime(CLOCK_MONOTONIC, &at);     /* the first poll at once */
	for (;;) {
		struct config *next;

		pthread_mutex_lock(&lv->cmu);
		while (!lv->stop && pthread_cond_timedwait(&lv->cv, &lv->cmu, &at) != ETIMEDOUT)
			;
		next = lv->next_cfg;
		lv->next_cfg = NULL;
		if (lv->stop) {
			pthread_mutex_unlock(&lv->cmu);
			live_free_config(next);
			break;
		}
		pthread_mutex_unlock(&lv->cmu);
		/* the next poll LIVE_POLL_MS after this one starts: a slow poll
		 * (Redis frozen: its timeouts) delays the next, never a burst */
		clock_gettime(CLOCK_MONOTONIC, &at);
		at.tv_nsec += LIVE_POLL_MS * 1000000L;
		at.tv_sec += at.tv_nsec / 1000000000L;
		at.tv_nsec %= 1000000000L;
		if (next) {
			live_free_config(lv->cfg);
			lv->cfg = next;
			redis_sync_free(lv->rs);
			lv->rs = NULL;
		}
		if (!lv->rs && !(lv->rs = redis_sync_new(lv->cfg->redis, &lv->cfg->tls, LIVE_REDIS_TIMEOUT_MS, err,
		                                          sizeof(err)))) {
			log_limited(CONFIG_LOG_WARN, "live_poll", "live_poll_failed", "error=\"%s\"", err);
			continue;
		}
		live_poll(lv);
		if (lv->denied && ++tick % (1000 / LIVE_POLL_MS) == 0 &&
		    denied_flush(lv->denied, lv->rs, err, sizeof(err)) == -1) {
			log_limited(CONFIG_LOG_WARN, "denied_flush", "denied_flush_failed", "error=\"%s\"",
			            err);
			redis_sync_reset(lv->rs);
		}
		if (lv->metrics) {
			atomic_store(&lv->metrics->live_overrides, live_in_effect(lv));
			atomic_store(&lv->metrics->denied_dropped, denied_dropped(lv->denied));
		}
	}
	return NULL;
}

/* See live.h: the caller owns the result; <cfg> is copied. */
struct live *live_new(const struct config *cfg, struct metrics *metrics, struct denied *denied,
                      char *err, size_t errlen)
{
	struct live *lv = calloc(1, sizeof(*lv));
	pthread_condattr_t ca;

	if (!lv || !(lv->cfg = live_copy_config(cfg))) {
		snprintf(err, errlen, "out of memory");
		free(lv);
		return NULL;
	}
	lv->metrics = metrics;
	lv->denied = denied;
	pthread_rwlock_init(&lv->mu, NULL);
	pthread_mutex_init(&lv->cmu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&lv->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&lv->thread, NULL, live_main, lv) != 0) {
		snprintf(err, errlen, "cannot start the live-control thread");
		live_free(lv);
		return NULL;
	}
	lv->started = true;
	return lv;
}

/* See live.h: <cfg> is copied, the thread takes the copy. */
int live_reconfigure(struct live *lv, const struct config *cfg)
{
	struct config *c = live_copy_config(cfg), *old;

	if (!c)
		return -1;
	pthread_mutex_lock(&lv->cmu);
	old = lv->next_cfg;
	lv->next_cfg = c;
	pthread_mutex_unlock(&lv->cmu);
	live_free_config(old);
	return 0;
}

/* See live.h: frees <lv> and all it owns, after the thread stopped. */
void live_free(struct live *lv)
{
	if (!lv)
		return;
	if (lv->started) {
		pthread_mutex_lock(&lv->cmu);
		lv->stop = true;
		pthread_cond_signal(&lv->cv);
		pthread_mutex_unlock(&lv->cmu);
		pthread_join(lv->thread, NULL);
	}
	redis_sync_free(lv->rs);
	live_free_config(lv->cfg);
	live_free_config(lv->next_cfg);
	pthread_cond_destroy(&lv->cv);
	pthread_mutex_destroy(&lv->cmu);
	pthread_rwlock_destroy(&lv->mu);
	free(lv->tab);
	free(lv);
}
