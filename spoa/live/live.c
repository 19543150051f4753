/*
 * live - the table of live overrides the workers read (live.h): owned
 * here, replaced whole by the live-control thread (live_publish), read by
 * every worker under a read lock. No Redis and no thread of its own.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "live.h"
#include "live_rule.h"
#include "metrics.h"

/* Owned by main (live_new/live_free); the table by the struct. */
struct live {
	pthread_rwlock_t mu;            /* workers read in parallel */
	struct live_entry *tab;         /* sorted by field; owned */
	size_t n;
	_Atomic size_t count;           /* n, read without the lock */
	_Atomic uint64_t epoch;         /* live_epoch() */
};

/* Order of fields <a>/<al> and <b>/<bl>: bytewise, a shorter prefix first. */
static int live_field_cmp(const char *a, size_t al, const char *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);

	return c ? c : (al > bl) - (al < bl);
}

/* See live.h: compares entries <a> and <b> (borrowed) only. */
int live_entry_cmp(const void *a, const void *b)
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

/* See live.h: the caller owns the result. */
struct live *live_new(void)
{
	struct live *lv = calloc(1, sizeof(*lv));

	if (lv)
		pthread_rwlock_init(&lv->mu, NULL);
	return lv;
}

/* See live.h: frees <lv> and the table it owns. */
void live_free(struct live *lv)
{
	if (!lv)
		return;
	pthread_rwlock_destroy(&lv->mu);
	free(lv->tab);
	free(lv);
}

/* See live.h: takes <tab>, frees the table it replaces. */
void live_publish(struct live *lv, struct live_entry *tab, size_t n, bool stale)
{
	struct live_entry *old;

	pthread_rwlock_wrlock(&lv->mu);
	old = lv->tab;
	lv->tab = tab;
	lv->n = n;
	atomic_store_explicit(&lv->count, n, memory_order_release);
	pthread_rwlock_unlock(&lv->mu);
	free(old);
	if (stale)
		atomic_fetch_add(&lv->epoch, 1);
}

/* See live.h; reads <lv> only. */
uint64_t live_epoch(const struct live *lv)
{
	return atomic_load(&lv->epoch);
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
		unsigned i;

		*out = *p;
		out->nwin = r.nwin;
		memcpy(out->win, r.win, r.nwin * sizeof(r.win[0]));
		if (p->algorithm == WINDOW_ALGO_GCRA)
			out->win[0].burst = live_rule_gcra_burst(p, &r);
		/* A live override names no calendar period: the quotas of the
		 * limits it stands in for keep counting beside it, or a month's
		 * quota would be forgotten while it lasts. No room for them: the
		 * override is not applied (those limits are its ceiling). */
		lim = window_limits_for(p, key, key_len, &nwin);
		for (i = 0; i < nwin; i++) {
			if (!lim[i].cal)
				continue;
			if (out->nwin == WINDOW_MAX_WINDOWS)
				return LIVE_NONE;
			out->win[out->nwin++] = lim[i];
		}
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
