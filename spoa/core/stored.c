/*
 * stored - the engines' replies and stored windows read in C (see
 * stored.h). Members, bucket fields and GCRA values are parsed by
 * module/rl_args.c, the module's own parsers, so that this reading and
 * the module's cannot drift apart.
 */
#include <stdlib.h>
#include <string.h>

#include "rl_args.h"
#include "stored.h"

/* A bucket end beyond this (ms, year 2255) is not ours: the module's
 * RL_MAX_BUCKET_END (module/ratelimit.c), a dead field to both engines. */
#define STORED_MAX_BUCKET_END 9000000000000LL

/* See stored.h. Borrows <v>. */
int stored_read_reply(const int64_t *v, size_t n, unsigned nwin_max, bool pooled,
                      struct stored_reply *out)
{
	int64_t pool = 0;

	if (!v || n != (pooled ? 7u : 6u) || (v[0] != 0 && v[0] != 1) || v[1] < 1 || v[2] < 0 ||
	    v[3] < 0 || v[4] < 0 || v[5] < 0)
		return -1;
	if (pooled) {
		pool = v[6];
		if (pool < STORED_POOL_NONE || pool >= STORED_POOL_COUNT)
			return -1;
	}
	/* a pool's refusal is a deny whose index follows the windows */
	if (pool != STORED_POOL_NONE ? v[0] != 0 || v[5] > (int64_t)nwin_max
	                             : v[5] >= (int64_t)nwin_max)
		return -1;
	out->allowed = v[0] == 1;
	out->limit = v[1];
	out->remaining = v[2];
	out->reset_us = v[3];
	out->retry_after_us = v[4];
	out->window = pool != STORED_POOL_NONE ? nwin_max : (unsigned)v[5];
	out->pool = (enum stored_pool_verdict)pool;
	return 0;
}

/* See stored.h. */
int stored_read_settle(const int64_t *v, size_t n, unsigned nwin, struct stored_settle *out)
{
	if (!v || (n != 2 && n != 6) || (v[0] != 0 && v[0] != 1) ||
	    (n == 6 && (v[2] < 1 || v[3] < 0 || v[4] < 0 || v[5] < 0 || v[5] >= (int64_t)nwin)))
		return -1;
	memset(out, 0, sizeof(*out));
	out->settled = v[0] == 1;
	out->delta = v[1];
	if (n == 2)
		return 0;
	out->known = true;
	out->limit = v[2];
	out->remaining = v[3];
	out->reset_us = v[4];
	out->window = (unsigned)v[5];
	return 0;
}

/* <u> for quota <quota> with <used> units counted (negative: none) and
 * <reset_us>. */
static void usage_set(struct stored_usage *u, uint64_t quota, int64_t used, int64_t reset_us)
{
	u->quota = quota;
	u->used = used > 0 ? (uint64_t)used : 0;
	u->remaining = u->used >= quota ? 0 : quota - u->used;
	u->reset_us = reset_us > 0 ? reset_us : 0;
}

/* A key the engines refuse to decide on: nothing left, as its decisions
 * (which fail) would allow. */
static int usage_refused(struct stored_usage *u, uint64_t quota)
{
	usage_set(u, quota, (int64_t)quota, 0);
	return -1;
}

/* See stored.h. Borrows <e>. */
int stored_read_log(const struct stored_entry *e, size_t n, const struct window_limit *lim,
                    int64_t now_us, struct stored_usage *u)
{
	int64_t win_us = (int64_t)lim->window_ms * 1000, cut = now_us - win_us;
	int64_t c1, k1, c2, k2;
	size_t i;

	/* the oldest entry still in the window: its score is after the cut */
	for (i = 0; i < n && e[i].score <= cut; i++)
		;
	if (i == n) {
		usage_set(u, lim->limit, 0, 0);
		return 0;
	}
	if (rl_args_parse_member(e[i].member, e[i].len, &c1, &k1) == -1 ||
	    rl_args_parse_member(e[n - 1].member, e[n - 1].len, &c2, &k2) == -1)
		return usage_refused(u, lim->limit);
	usage_set(u, lim->limit, c2 - c1 + k1, e[i].score + win_us - now_us);
	return 0;
}

/* <a> / 1000 rounded toward minus infinity. */
static int64_t floor_ms(int64_t a)
{
	return a / 1000 - (a % 1000 < 0);
}

/* See stored.h. Borrows <f>. */
int stored_read_buckets(const struct stored_field *f, size_t n, const struct window_limit *lim,
                        int64_t now_us, struct stored_usage *u)
{
	int64_t win_us = (int64_t)lim->window_ms * 1000, cut_ms = floor_ms(now_us - win_us);
	int64_t count = 0, oldest = -1, end, v;
	size_t i;

	for (i = 0; i < n; i++) {
		/* e * 1000 > cut is e > floor(cut / 1000) for a whole e */
		if (rl_args_parse_int(f[i].name, f[i].name_len, &end) == -1 || !f[i].value ||
		    rl_args_parse_int(f[i].value, f[i].value_len, &v) == -1 ||
		    end > STORED_MAX_BUCKET_END || v < -RL_MAX_MEMBER || v > RL_MAX_MEMBER ||
		    end <= cut_ms)
			continue;
		count += v;
		if (oldest < 0 || end < oldest)
			oldest = end;
	}
	usage_set(u, lim->limit, count, oldest < 0 ? 0 : oldest * 1000 + win_us - now_us);
	return 0;
}

/* See stored.h. Borrows <v>. Exact in 128 bits: owed * limit may pass 2^63
 * where the value was written under another rate. */
int stored_read_gcra(const char *v, size_t len, const struct window_limit *lim, int64_t now_us,
                     struct stored_usage *u)
{
	struct rl_window rw = { .limit = (int64_t)lim->limit, .win_ms = (int64_t)lim->window_ms,
	                        .burst = (int64_t)lim->burst };
	struct rl_gcra_value val;
	int64_t d, f, w_us = (int64_t)lim->window_ms * 1000;
	__int128 dl, full;

	if (!v) {
		usage_set(u, lim->burst, 0, 0);
		return 0;
	}
	if (lim->limit == 0 || lim->burst == 0 || w_us <= 0 ||
	    rl_args_parse_gcra(v, len, &val) == -1 ||
	    rl_args_gcra_owed(&rw, now_us, &val, &d, &f) == -1)
		return usage_refused(u, lim->burst);
	dl = (__int128)d * (__int128)lim->limit + f;
	full = (__int128)lim->burst * (__int128)w_us;
	/* remaining = floor((burst * W - owed * limit) / W), none past a full debt */
	usage_set(u, lim->burst, dl >= full ? (int64_t)lim->burst :
	          (int64_t)lim->burst - (int64_t)((full - dl) / (__int128)w_us), d + (f > 0));
	return 0;
}

/* qsort order of pool accounts by name (borrowed, compared only). */
static int pool_by_name(const void *a, const void *b)
{
	const struct stored_pool_account *x = a, *y = b;
	size_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->account, y->account, n);

	return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* qsort order: most units first, then by name (borrowed). */
static int pool_by_units(const void *a, const void *b)
{
	const struct stored_pool_account *x = a, *y = b;

	if (x->units != y->units)
		return x->units < y->units ? 1 : -1;
	return pool_by_name(a, b);
}

/* See stored.h. Borrows <e>; <acc> points into it. */
int stored_read_pool(const struct stored_entry *e, size_t n, const struct window_pool *pl,
                     int64_t now_us, struct stored_usage *u, struct stored_pool_account *acc,
                     size_t *nacc)
{
	int64_t win_us = (int64_t)pl->window_ms * 1000, cut = now_us - win_us;
	int64_t c1, k1, c2, k2, cum, cost;
	const char *name;
	size_t i, j, k = 0, len;

	if (nacc)
		*nacc = 0;
	for (i = 0; i < n && e[i].score <= cut; i++)
		;
	if (i == n) {
		usage_set(u, pl->limit, 0, 0);
		return 0;
	}
	if (rl_args_parse_pool_member(e[i].member, e[i].len, &c1, &k1, &name, &len) == -1 ||
	    rl_args_parse_pool_member(e[n - 1].member, e[n - 1].len, &c2, &k2, &name, &len) == -1)
		return usage_refused(u, pl->limit);
	usage_set(u, pl->limit, c2 - c1 + k1, e[i].score + win_us - now_us);
	if (!acc)
		return 0;
	for (j = i; j < n; j++) {
		if (rl_args_parse_pool_member(e[j].member, e[j].len, &cum, &cost, &name, &len) == -1)
			return usage_refused(u, pl->limit);
		acc[k].account = name;
		acc[k].len = len;
		acc[k++].units = (uint64_t)cost;
	}
	/* one line per account: its entries' units summed */
	qsort(acc, k, sizeof(*acc), pool_by_name);
	for (i = 0, j = 0; i < k; i++) {
		if (j && pool_by_name(&acc[j - 1], &acc[i]) == 0)
			acc[j - 1].units += acc[i].units;
		else
			acc[j++] = acc[i];
	}
	qsort(acc, j, sizeof(*acc), pool_by_units);
	if (nacc)
		*nacc = j;
	return 0;
}

/* See stored.h. Borrows <v>. */
int stored_read_quota(const char *v, size_t len, const struct window_limit *lim, int64_t now_us,
                      struct stored_usage *u)
{
	struct rl_window rw = { .limit = (int64_t)lim->limit, .cal = lim->cal,
	                        .tz_min = lim->tz_min, .anchor = lim->anchor ? lim->anchor : 1 };
	struct rl_quota_value q;
	int64_t start, end;

	if (v && rl_args_parse_quota(v, len, &q) == -1)
		return usage_refused(u, lim->limit);
	rl_cal_period(&rw, now_us, &start, &end);
	if (v && q.end > now_us)
		usage_set(u, lim->limit, q.units, q.end - now_us);
	else
		usage_set(u, lim->limit, 0, end - now_us);
	return 0;
}
