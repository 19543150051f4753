/*
 * window_args - a decision's keys and script arguments, built into the
 * caller's struct window_args (see window.h): the argument writer, the key
 * forms, and the calls of a decision, a batch, a release and a settle.
 * Pure: no I/O.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decimal.h"
#include "rl_args.h"
#include "window.h"

/* A bounded writer over struct window_args: each piece becomes one argv
 * entry, NUL-terminated for readability in a debugger. */
struct args_writer {
	struct window_args *a;
	size_t used;
	int failed;
};

/* Start argv entry number a->argc at the current position. */
static char *args_begin(struct args_writer *w)
{
	if (w->a->argc >= WINDOW_SCRIPT_ARGC_MAX || w->used >= sizeof(w->a->buf)) {
		w->failed = 1;
		return NULL;
	}
	return w->a->buf + w->used;
}

/* Close the entry started at <start> with <len> bytes written. */
static void args_end(struct args_writer *w, const char *start, size_t len)
{
	struct window_args *a = w->a;

	a->argv[a->argc] = start;
	a->argvlen[a->argc] = len;
	a->argc++;
	w->used += len + 1;
}

/* Append <len> bytes of <s> as pieces of the current entry at <*pos>. */
static void args_put(struct args_writer *w, size_t *pos, const void *s, size_t len)
{
	if (w->failed || w->used + *pos + len + 1 > sizeof(w->a->buf)) {
		w->failed = 1;
		return;
	}
	memcpy(w->a->buf + w->used + *pos, s, len);
	*pos += len;
	w->a->buf[w->used + *pos] = '\0';
}

/* Append account <key>/<len> as the content of a hash tag at <*pos>: '}'
 * becomes "%7D" and '%' "%25", nothing else changes. The tag then ends at
 * our own '}' (never empty, the same for every window of the key), and
 * distinct accounts keep distinct keys (percent-decoding undoes it). */
static void args_put_tag(struct args_writer *w, size_t *pos, const char *key, size_t len)
{
	size_t i, run = 0;

	for (i = 0; i < len; i++) {
		if (key[i] != '}' && key[i] != '%')
			continue;
		args_put(w, pos, key + run, i - run);
		args_put(w, pos, key[i] == '}' ? "%7D" : "%25", 3);
		run = i + 1;
	}
	args_put(w, pos, key + run, len - run);
}

/* One whole argv entry from <s>/<len>. */
static void args_add(struct args_writer *w, const void *s, size_t len)
{
	char *start = args_begin(w);
	size_t pos = 0;

	if (!start)
		return;
	args_put(w, &pos, s, len);
	if (!w->failed)
		args_end(w, start, pos);
}

/* Append the decimal text of <v> at <*pos>. */
static void args_put_u64(struct args_writer *w, size_t *pos, uint64_t v)
{
	char tmp[DECIMAL_U64_LEN];

	args_put(w, pos, tmp, decimal_format(v, tmp));
}

/* One argv entry holding the decimal text of <v>, or "<v>:<v2>" when <v2>
 * is not 0 (a bucketed window's "<ms>:<precision ms>"). */
static void args_add_u64(struct args_writer *w, uint64_t v, uint64_t v2)
{
	char *start = args_begin(w);
	size_t pos = 0;

	if (!start)
		return;
	args_put_u64(w, &pos, v);
	if (v2) {
		args_put(w, &pos, ":", 1);
		args_put_u64(w, &pos, v2);
	}
	if (!w->failed)
		args_end(w, start, pos);
}

/*
 * Build "EVALSHA <sha> <nkeys> KEYS... <cost> (<limit> <ms>)..." for
 * <key> under <p> into <a> (argv borrows a->buf). Rejects a bad key
 * (BAD_KEY) and a cost of 0, above the policy's max-cost or above the
 * smallest limit that applies (BAD_COST); an argument that cannot fit (an oversized <sha>)
 * is reported as REDIS_ERROR. Returns 0, or -1 with <*why>.
 */
/* Borrows everything; see window.h. */
int window_build_batch(const struct window_args *one, size_t n, const char *cmd,
                       const char *head, size_t head_len, const char **argv,
                       size_t *argvlen, char *nums)
{
	size_t i, k, at = 0, keys = 0, pos = 0;
	int len;

	if (n == 0)
		return -1;
	for (i = 0; i < n; i++) {
		/* (a pooled one: its pool's two keys share one pair) */
		bool plain = one[i].nkeys <= WINDOW_MAX_WINDOWS + 1 &&
		             one[i].argc == 4 + 3 * (int)one[i].nkeys;
		bool pooled = one[i].nkeys >= 3 && one[i].nkeys <= WINDOW_MAX_WINDOWS + 4 &&
		              one[i].argc == 2 + 3 * (int)one[i].nkeys;

		if (one[i].nkeys < 1 || !(plain || pooled))
			return -1;
		keys += one[i].nkeys;
	}
	argv[at] = cmd;
	argvlen[at++] = strlen(cmd);
	argv[at] = head;
	argvlen[at++] = head_len;
	len = sprintf(nums + pos, "%zu", keys);
	argv[at] = nums + pos;
	argvlen[at++] = (size_t)len;
	pos += (size_t)len + 1;
	for (i = 0; i < n; i++)
		for (k = 0; k < one[i].nkeys; k++) {
			argv[at] = one[i].argv[3 + k];
			argvlen[at++] = one[i].argvlen[3 + k];
		}
	argv[at] = "batch";
	argvlen[at++] = 5;
	len = sprintf(nums + pos, "%zu", n);
	argv[at] = nums + pos;
	argvlen[at++] = (size_t)len;
	for (i = 0; i < n; i++) {
		/* its key count is argv[2] of its own call */
		argv[at] = one[i].argv[2];
		argvlen[at++] = one[i].argvlen[2];
		for (k = 3 + one[i].nkeys; k < (size_t)one[i].argc; k++) {
			argv[at] = one[i].argv[k];
			argvlen[at++] = one[i].argvlen[k];
		}
	}
	return (int)at;
}

/*
 * The one rule for an account's Redis keys: argv entry "<policy>:limit:"
 * then, by <form>,
 *   LOG      "v1:{<tag>}:<window>"   a window's log, whatever the count
 *   BUCKETS  "b1:{<tag>}:<window>"   a bucketed window (precision=)
 *   GCRA     "g1:{<tag>}"            a token bucket
 *   LEGACY_LOG / LEGACY_BUCKETS  "v1:<account>" / "b1:<account>": what
 *            1.0.x wrote for a one-window policy (read, written and
 *            deleted while an upgrade needs it, never for an account
 *            starting with '{', whose raw form could be a tagged key).
 *   POOL_LOG / POOL_ACCOUNTS  "<pool>:pool:p1:{<pool>}" and
 *            "<pool>:pool:a1:{<pool>}" (<policy> is then the pool's name):
 *            a pool's log and its account -> units hash, one slot.
 *   LEASES   "<policy>:inflight:l1:{<tag>}": the account's leases.
 * The tag (args_put_tag) ends at the first '}' and the window follows it,
 * so the forms never meet: distinct accounts, policies or windows give
 * distinct keys, and every key of an account shares one Cluster slot.
 * With p->pool_tag "{<tag>}" is "{<pool>}/<tag>" instead: the pool's slot,
 * and never an unpooled key, whose tag's '}' is followed by ':' or the end.
 */
static void args_add_key(struct args_writer *w, const struct window_policy *p,
                         enum window_key_form form, uint64_t window_ms,
                         const char *key, size_t key_len)
{
	static const char *const kind[WINDOW_KEY_FORM_COUNT] = {
		[WINDOW_KEY_LOG] = ":limit:v1:", [WINDOW_KEY_BUCKETS] = ":limit:b1:",
		[WINDOW_KEY_GCRA] = ":limit:g1:", [WINDOW_KEY_LEGACY_LOG] = ":limit:v1:",
		[WINDOW_KEY_LEGACY_BUCKETS] = ":limit:b1:", [WINDOW_KEY_POOL_LOG] = ":pool:p1:",
		[WINDOW_KEY_POOL_ACCOUNTS] = ":pool:a1:", [WINDOW_KEY_LEASES] = ":inflight:l1:",
		[WINDOW_KEY_QUOTA] = ":limit:c1:",
		[WINDOW_KEY_SETTLE] = ":settle:s1:",
	};
	const char *name = p->name;
	size_t name_len = p->name_len;
	char *start = args_begin(w);
	size_t pos = 0;
	bool pool_form = form == WINDOW_KEY_POOL_LOG || form == WINDOW_KEY_POOL_ACCOUNTS;
	char ws[32];
	int n;

	if (!start)
		return;
	if (pool_form) {
		name = p->pool.name;
		name_len = p->pool.name_len;
		key = name;
		key_len = name_len;
	}
	args_put(w, &pos, name, name_len);
	args_put(w, &pos, kind[form], strlen(kind[form]));
	if (form == WINDOW_KEY_LEGACY_LOG || form == WINDOW_KEY_LEGACY_BUCKETS) {
		args_put(w, &pos, key, key_len);
	} else {
		args_put(w, &pos, "{", 1);
		if (p->pool_tag && !pool_form) {
			args_put(w, &pos, p->pool.name, p->pool.name_len);
			args_put(w, &pos, "}/", 2);
			args_put_tag(w, &pos, key, key_len);
		} else {
			args_put_tag(w, &pos, key, key_len);
			args_put(w, &pos, "}", 1);
		}
		if (form == WINDOW_KEY_LOG || form == WINDOW_KEY_BUCKETS) {
			n = window_format_ms(window_ms, ws, sizeof(ws));
			args_put(w, &pos, ":", 1);
			args_put(w, &pos, ws, n > 0 ? (size_t)n : 0);
		} else if (form == WINDOW_KEY_QUOTA) {
			/* (<window_ms> is then the period, an enum window_cal) */
			args_put(w, &pos, ":", 1);
			args_put(w, &pos, window_cal_name((enum window_cal)window_ms),
			         strlen(window_cal_name((enum window_cal)window_ms)));
		}
		if (form == WINDOW_KEY_SETTLE) {
			args_put(w, &pos, ":", 1);
			args_put(w, &pos, p->lease_id, strlen(p->lease_id));
		}
	}
	if (!w->failed)
		args_end(w, start, pos);
}

/* The pool's pair of pooled policy <p> for account <key>/<key_len>:
 * <limit> "pool:<ms>:<headroom>:<key>" (the account as sent, raw: the
 * pool's members and hash fields carry it). */
static void args_add_pool(struct args_writer *w, const struct window_policy *p, const char *key,
                          size_t key_len)
{
	char *start;
	size_t pos = 0;

	args_add_u64(w, p->pool.limit, 0);
	start = args_begin(w);
	if (!start)
		return;
	args_put(w, &pos, "pool:", 5);
	args_put_u64(w, &pos, p->pool.window_ms);
	args_put(w, &pos, ":", 1);
	args_put_u64(w, &pos, p->pool.headroom);
	args_put(w, &pos, ":", 1);
	args_put(w, &pos, key, key_len);
	if (!w->failed)
		args_end(w, start, pos);
}

/* The leases' pair of inflight= policy <p>: <inflight>
 * "lease:<lease ms>:<lease id>". */
static void args_add_lease(struct args_writer *w, const struct window_policy *p)
{
	char *start;
	size_t pos = 0;

	args_add_u64(w, p->inflight, 0);
	start = args_begin(w);
	if (!start)
		return;
	args_put(w, &pos, "lease:", 6);
	args_put_u64(w, &pos, p->lease_ms);
	args_put(w, &pos, ":", 1);
	args_put(w, &pos, p->lease_id, strlen(p->lease_id));
	if (!w->failed)
		args_end(w, start, pos);
}

/* The settle pair of settle= policy <p>: 1 "settle:<lease ms>" (its key,
 * the reservation's record, after every other). */
static void args_add_settle(struct args_writer *w, const struct window_policy *p)
{
	char *start;
	size_t pos = 0;

	args_add_u64(w, 1, 0);
	start = args_begin(w);
	if (!start)
		return;
	args_put(w, &pos, "settle:", 7);
	args_put_u64(w, &pos, p->lease_ms);
	if (!w->failed)
		args_end(w, start, pos);
}

/* A token bucket's window argument "gcra:<ms>:<burst>" of <lim>. */
static void args_add_gcra(struct args_writer *w, const struct window_limit *lim)
{
	char *start = args_begin(w);
	size_t pos = 0;

	if (!start)
		return;
	args_put(w, &pos, "gcra:", 5);
	args_put_u64(w, &pos, lim->window_ms);
	args_put(w, &pos, ":", 1);
	args_put_u64(w, &pos, lim->burst);
	if (!w->failed)
		args_end(w, start, pos);
}

/* See window.h. */
int window_build_settle(const struct window_policy *p, const char *key, size_t key_len,
                        const char *lease, uint64_t real, struct window_args *a)
{
	struct args_writer w = { .a = a, .used = 0, .failed = 0 };
	const struct window_limit *lim;
	struct window_policy q;
	unsigned nwin, i;
	bool gcra = p->algorithm == WINDOW_ALGO_GCRA;

	a->argc = 0;
	a->nkeys = 0;
	a->lease_at = -1;
	if (!p->settle_hdr[0] || window_check_key(key, key_len) == -1 ||
	    strlen(lease) != WINDOW_LEASE_ID_LEN)
		return -1;
	lim = window_limits_for(p, key, key_len, &nwin);
	if (nwin == 0 || nwin > WINDOW_MAX_WINDOWS || (gcra && nwin != 1))
		return -1;
	q = *p;
	memcpy(q.lease_id, lease, WINDOW_LEASE_ID_LEN + 1);
	args_add(&w, "EVALSHA", 7);
	args_add(&w, "", 0);
	args_add_u64(&w, nwin + 1, 0);
	for (i = 0; i < nwin; i++)
		args_add_key(&w, p, gcra ? WINDOW_KEY_GCRA : WINDOW_KEY_LOG, lim[i].window_ms, key,
		             key_len);
	args_add_key(&w, &q, WINDOW_KEY_SETTLE, 0, key, key_len);
	args_add(&w, "settle", 6);
	args_add_u64(&w, real, 0);
	for (i = 0; i < nwin; i++) {
		args_add_u64(&w, lim[i].limit, 0);
		if (gcra)
			args_add_gcra(&w, &lim[i]);
		else
			args_add_u64(&w, lim[i].window_ms, 0);
	}
	if (w.failed) {
		a->argc = 0;
		return -1;
	}
	a->nkeys = nwin + 1;
	return 0;
}

/* See window.h. */
int window_build_release(const struct window_policy *p, const char *key, size_t key_len,
                         const char *lease, struct window_args *a)
{
	struct args_writer w = { .a = a, .used = 0, .failed = 0 };
	size_t n = strlen(lease);

	a->argc = 0;
	a->nkeys = 0;
	a->lease_at = -1;
	if (!p->inflight || window_check_key(key, key_len) == -1 || n < 1 ||
	    n > WINDOW_LEASE_ID_LEN)
		return -1;
	args_add(&w, "EVALSHA", 7);
	args_add(&w, "", 0);
	args_add_u64(&w, 1, 0);
	args_add_key(&w, p, WINDOW_KEY_LEASES, 0, key, key_len);
	args_add(&w, "release", 7);
	args_add(&w, lease, n);
	if (w.failed) {
		a->argc = 0;
		return -1;
	}
	a->nkeys = 1;
	return 0;
}

/* A quota's window argument "cal:<h|d|w|m>:<offset minutes>:<anchor>". */
static void args_add_cal(struct args_writer *w, const struct window_limit *lim)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof(tmp), "cal:%c:%d:%u", "-hdwm"[lim->cal < WINDOW_CAL_COUNT ?
	                 lim->cal : 0], (int)lim->tz_min, lim->anchor ? (unsigned)lim->anchor : 1u);

	args_add(w, tmp, n > 0 ? (size_t)n : 0);
}

/* The key form of window <lim> of log policy <p>. */
static enum window_key_form key_form(const struct window_policy *p, const struct window_limit *lim)
{
	if (lim->cal)
		return WINDOW_KEY_QUOTA;
	return window_is_bucketed(p, lim->window_ms) ? WINDOW_KEY_BUCKETS : WINDOW_KEY_LOG;
}

/* window_build_args() for GCRA policy <p> (one limit in <lim>/<nwin>,
 * checked): "EVALSHA" <sha> 1 "<policy>:limit:g1:{<key>}" <cost> <limit>
 * "gcra:<ms>:<burst>". Borrows as window_build_args(). */
static int build_gcra_args(const struct window_policy *p, const char *sha, const char *key,
                           size_t key_len, uint64_t cost, const struct window_limit *lim,
                           unsigned nwin, struct window_args *a, enum window_reason *why)
{
	struct args_writer w = { .a = a, .used = 0, .failed = 0 };
	bool settle = p->settle_hdr[0] != '\0';

	/* the bucket, and a calendar quota beside it; a reservation's record
	 * only beside the bucket alone */
	if (!lim[0].burst || !(nwin == 1 || (nwin == 2 && lim[1].cal)) ||
	    (settle && (nwin != 1 || strlen(p->lease_id) != WINDOW_LEASE_ID_LEN))) {
		*why = WINDOW_REASON_REDIS_ERROR;
		return -1;
	}
	args_add(&w, "EVALSHA", 7);
	args_add(&w, sha, strlen(sha));
	args_add_u64(&w, nwin + (settle ? 1 : 0), 0);
	args_add_key(&w, p, WINDOW_KEY_GCRA, 0, key, key_len);
	if (nwin == 2)
		args_add_key(&w, p, WINDOW_KEY_QUOTA, lim[1].cal, key, key_len);
	if (settle)
		args_add_key(&w, p, WINDOW_KEY_SETTLE, 0, key, key_len);
	args_add_u64(&w, cost, 0);
	args_add_u64(&w, lim[0].limit, 0);
	args_add_gcra(&w, &lim[0]);
	if (nwin == 2) {
		args_add_u64(&w, lim[1].limit, 0);
		args_add_cal(&w, &lim[1]);
	}
	if (settle)
		args_add_settle(&w, p);
	if (w.failed) {
		a->argc = 0;
		*why = WINDOW_REASON_REDIS_ERROR;
		return -1;
	}
	a->nkeys = nwin + (settle ? 1 : 0);
	*why = WINDOW_REASON_NONE;
	return 0;
}

/* See window.h: the one key builder (args_add_key), into <dst>. */
int window_pool_key(const struct window_pool *pl, enum window_key_form form, char *dst,
                    size_t cap)
{
	struct window_policy p;
	struct window_args a;
	struct args_writer w = { &a, 0, 0 };

	if (form != WINDOW_KEY_POOL_LOG && form != WINDOW_KEY_POOL_ACCOUNTS)
		return -1;
	memset(&p, 0, sizeof(p));
	p.pooled = true;
	p.pool = *pl;
	a.argc = 0;
	args_add_key(&w, &p, form, 0, NULL, 0);
	if (w.failed || a.argc != 1 || a.argvlen[0] >= cap)
		return -1;
	memcpy(dst, a.argv[0], a.argvlen[0]);
	dst[a.argvlen[0]] = '\0';
	return (int)a.argvlen[0];
}

int window_build_args(const struct window_policy *p, const char *sha,
                      const char *key, size_t key_len, uint64_t cost,
                      struct window_args *a,
                      enum window_reason *why)
{
	struct args_writer w = { .a = a, .used = 0, .failed = 0 };
	const struct window_limit *lim;
	unsigned nwin, i, nkeys;
	bool legacy, settle = p->settle_hdr[0] && !p->pooled;

	a->argc = 0;
	a->nkeys = 0;
	a->lease_at = -1;
	if (window_check_key(key, key_len) == -1) {
		*why = WINDOW_REASON_BAD_KEY;
		return -1;
	}
	lim = window_limits_for(p, key, key_len, &nwin);
	/* (inflight= alone: its leases are the decision's one pair) */
	if ((nwin == 0 && !p->inflight) || nwin > WINDOW_MAX_WINDOWS) {
		*why = WINDOW_REASON_REDIS_ERROR;
		return -1;
	}
	if (cost == 0 || (p->max_cost && cost > p->max_cost)) {
		*why = WINDOW_REASON_BAD_COST;
		return -1;
	}
	/* (never fits: a log window's limit, a GCRA bucket's burst) */
	for (i = 0; i < nwin; i++) {
		if (cost > window_limit_quota(&lim[i])) {
			*why = WINDOW_REASON_BAD_COST;
			return -1;
		}
	}
	if (p->pooled && (p->algorithm == WINDOW_ALGO_GCRA || cost > p->pool.limit)) {
		*why = p->algorithm == WINDOW_ALGO_GCRA ? WINDOW_REASON_REDIS_ERROR
		                                         : WINDOW_REASON_BAD_COST;
		return -1;
	}
	if (p->algorithm == WINDOW_ALGO_GCRA)
		return build_gcra_args(p, sha, key, key_len, cost, lim, nwin, a, why);

	/* an upgrade from 1.0.x: its one-window key is a second window of the
	 * same limit, so it counts (and gets) what either form admitted */
	legacy = p->legacy_key && !p->pool_tag && nwin == 1 && !lim[0].cal && key[0] != '{';
	nkeys = nwin + (legacy ? 1 : 0);
	/* (a lease id is what the caller drew: without one, no decision) */
	if ((p->inflight || settle) && strlen(p->lease_id) != WINDOW_LEASE_ID_LEN) {
		*why = WINDOW_REASON_REDIS_ERROR;
		return -1;
	}
	args_add(&w, "EVALSHA", 7);
	args_add(&w, sha, strlen(sha));
	args_add_u64(&w, nkeys + (p->inflight ? 1 : 0) + (settle ? 1 : 0) + (p->pooled ? 2 : 0), 0);
	for (i = 0; i < nwin; i++)
		args_add_key(&w, p, key_form(p, &lim[i]), lim[i].cal ? lim[i].cal : lim[i].window_ms,
		             key, key_len);
	if (legacy)
		args_add_key(&w, p, window_is_bucketed(p, lim[0].window_ms) ?
		             WINDOW_KEY_LEGACY_BUCKETS : WINDOW_KEY_LEGACY_LOG, 0, key, key_len);
	if (p->inflight)
		args_add_key(&w, p, WINDOW_KEY_LEASES, 0, key, key_len);
	if (settle)
		args_add_key(&w, p, WINDOW_KEY_SETTLE, 0, key, key_len);
	if (p->pooled) {
		args_add_key(&w, p, WINDOW_KEY_POOL_LOG, 0, key, key_len);
		args_add_key(&w, p, WINDOW_KEY_POOL_ACCOUNTS, 0, key, key_len);
	}
	args_add_u64(&w, cost, 0);
	for (i = 0; i < nkeys; i++) {
		const struct window_limit *li = &lim[i < nwin ? i : 0];

		args_add_u64(&w, li->limit, 0);
		if (li->cal)
			args_add_cal(&w, li);
		else
			args_add_u64(&w, li->window_ms,
			             window_is_bucketed(p, li->window_ms) ? p->precision_ms : 0);
	}
	if (p->inflight)
		args_add_lease(&w, p);
	if (settle)
		args_add_settle(&w, p);
	if (p->pooled)
		args_add_pool(&w, p, key, key_len);
	if (w.failed) {
		a->argc = 0;
		*why = WINDOW_REASON_REDIS_ERROR;
		return -1;
	}
	a->lease_at = p->inflight ? (int)nkeys : -1;
	a->nkeys = nkeys + (p->inflight ? 1 : 0) + (settle ? 1 : 0) + (p->pooled ? 2 : 0);
	*why = WINDOW_REASON_NONE;
	return 0;
}
