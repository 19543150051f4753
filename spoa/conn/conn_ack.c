/*
 * conn_ack - the ACK of a NOTIFY: its decision (or a settle's answer) as
 * txn variables, and the draft's RateLimit header values the edge copies
 * (headers.c). What a request decided is conn_notify.c's; this only writes.
 */
#include <string.h>

#include "conn_int.h"
#include "conn_notify_int.h"
#include "metrics.h"
#include "spop.h"

/* an ACK with every variable fits */
#define CONN_ACK_ROOM     (512u + HEADERS_POLICY_MAX + HEADERS_RATELIMIT_MAX)

/*
 * The draft's header values and the deciding window, for a request that asked
 * one policy (what spoe-ratelimit.conf sends): with several messages the
 * merged decision may come from any of them, so none is named. Never on an
 * error; ratelimit_hdr only with a real count (not on a fail-open allow).
 * All of them or none: they are left out when the ACK would outgrow the
 * frame size HAProxy negotiated (<max>; 16380 by default, 256 at least).
 */
static void conn_ack_headers(struct spop_writer *a, const struct conn_req *r, size_t max)
{
	/* action head (3) + name (1 + 13) + type (1) + length varint (<= 3) */
	enum { VAR_ROOM = 21 };
	const struct window_decision *d = &r->acc;
	const struct window_policy *p = r->policy;
	/* a pool's four: name + limit, remaining, reset (names <= 14) */
	enum { POOL_ROOM = 4 * (VAR_ROOM + 1) + WINDOW_NAME_MAX };
	char pol[HEADERS_POLICY_MAX], cur[HEADERS_RATELIMIT_MAX];
	struct window_limit bucket[WINDOW_MAX_WINDOWS];
	const struct window_limit *lim = r->lim;
	int np, nc = 0, by_pool;

	/* the pool decided (its numbers): its item answers */
	by_pool = p && p->pooled && d->window == WINDOW_MAX_WINDOWS;
	if (r->nasked != 1 || !p || !lim || d->status == WINDOW_ERROR ||
	    (d->window >= r->nwin && !by_pool) || !(d->has_quota || d->limit > 0))
		return;
	if (!conn_wants(r, HEADERS_VAR_WINDOW) && !conn_wants(r, HEADERS_VAR_POLICY_HDR) &&
	    !conn_wants(r, HEADERS_VAR_RATELIMIT_HDR))
		return;
	/* a GCRA bucket is announced as the draft's quota over the time it
	 * takes to refill from empty (q = burst, w = burst * T) */
	if (p->algorithm == WINDOW_ALGO_GCRA) {
		/* (a quota beside it is announced as itself) */
		memcpy(bucket, lim, r->nwin * sizeof(*lim));
		window_announced(&lim[0], &bucket[0]);
		lim = bucket;
	}
	np = headers_format_policy(p->name, p->name_len, lim, r->nwin, pol, sizeof(pol));
	if (np > 0 && p->pooled)
		np = headers_append_pool_policy(&p->pool, pol, sizeof(pol), (size_t)np);
	if (d->has_quota && by_pool)
		nc = headers_format_pool_ratelimit(&p->pool, d->remaining, d->reset, cur, sizeof(cur));
	else if (d->has_quota)
		nc = headers_format_ratelimit(p->name, p->name_len, lim, r->nwin, d->window,
		                              d->remaining, d->reset, cur, sizeof(cur));
	if (np <= 0 || nc < 0 ||
	    a->len + 3 * VAR_ROOM + (p->pooled ? POOL_ROOM : 0) + (size_t)np + (size_t)nc > max)
		return;
	if (conn_wants(r, HEADERS_VAR_WINDOW))
		spop_ack_set_int(a, SPOP_SCOPE_TXN, "window",
		                 headers_window_seconds(by_pool ? p->pool.window_ms
		                                                : lim[d->window].window_ms));
	if (conn_wants(r, HEADERS_VAR_POLICY_HDR))
		spop_ack_set_str(a, SPOP_SCOPE_TXN, "policy_hdr", pol, (size_t)np);
	if (nc > 0 && conn_wants(r, HEADERS_VAR_RATELIMIT_HDR))
		spop_ack_set_str(a, SPOP_SCOPE_TXN, "ratelimit_hdr", cur, (size_t)nc);
	if (!p->pooled)
		return;
	/* the pool by itself, for logs and rules: its name and limit on every
	 * answer; its remaining and reset when it decided (an admission's
	 * reply carries the tightest window's numbers only) */
	spop_ack_set_str(a, SPOP_SCOPE_TXN, "pool", p->pool.name, p->pool.name_len);
	spop_ack_set_int(a, SPOP_SCOPE_TXN, "pool_limit", (int64_t)p->pool.limit);
	if (by_pool && d->has_quota) {
		spop_ack_set_int(a, SPOP_SCOPE_TXN, "pool_remaining", d->remaining);
		spop_ack_set_int(a, SPOP_SCOPE_TXN, "pool_reset", d->reset);
	}
}

/*
 * The ACK of a settled "ratelimit-done" (settle=): what the policy's
 * windows have left after the settle (the window with the least left), in
 * the variables the request's own answer set (limit, remaining, reset,
 * ratelimit_hdr; as its "vars" asks), so that the response's RateLimit
 * fields tell the client what it has left. Returns how many it set.
 */
static int conn_ack_settled(struct spop_writer *a, const struct conn_req *r, size_t max)
{
	/* action head (3) + name (1 + 13) + type (1) + length varint (<= 3) */
	enum { VAR_ROOM = 21, INT_ROOM = VAR_ROOM + 10 };
	const struct window_policy *p = r->done_policy;
	const struct stored_settle *st = &r->settled;
	const struct window_limit *lim;
	struct window_limit bucket;
	char cur[HEADERS_RATELIMIT_MAX];
	int64_t reset = window_us_to_s_ceil(st->reset_us);
	unsigned nwin;
	int nc, n = 0;

	lim = window_limits_for(p, r->key, r->key_len, &nwin);
	if (!st->known || st->window >= nwin || a->len + 3 * INT_ROOM > max)
		return 0;
	/* a bucket is announced as the request's answer announced it */
	if (p->algorithm == WINDOW_ALGO_GCRA) {
		window_announced(&lim[0], &bucket);
		lim = &bucket;
		nwin = 1;
	}
	if (conn_wants(r, HEADERS_VAR_LIMIT) && ++n)
		spop_ack_set_int(a, SPOP_SCOPE_TXN, "limit", st->limit);
	if (conn_wants(r, HEADERS_VAR_REMAINING) && ++n)
		spop_ack_set_int(a, SPOP_SCOPE_TXN, "remaining", st->remaining);
	if (conn_wants(r, HEADERS_VAR_RESET) && ++n)
		spop_ack_set_int(a, SPOP_SCOPE_TXN, "reset", reset);
	nc = headers_format_ratelimit(p->name, p->name_len, lim, nwin, st->window, st->remaining,
	                              reset, cur, sizeof(cur));
	if (nc > 0 && conn_wants(r, HEADERS_VAR_RATELIMIT_HDR) &&
	    a->len + VAR_ROOM + (size_t)nc <= max && ++n)
		spop_ack_set_str(a, SPOP_SCOPE_TXN, "ratelimit_hdr", cur, (size_t)nc);
	return n;
}

/* See conn_notify_int.h. */
int conn_send_ack(struct conn *c, struct conn_notify_env *ne, const struct conn_req *r)
{
	const struct window_decision *d = &r->acc;
	struct spop_writer a;
	unsigned char *buf;
	size_t cap;
	int n;

	buf = conn_out_begin(c, CONN_ACK_ROOM, &cap);
	if (!buf) {
		conn_send_disconnect(c, SPOP_ST_RES, "out of memory");
		return -1;
	}
	spop_ack_begin(&a, buf, cap, r->stream_id, r->frame_id);
	if (d->status == WINDOW_STATUS_COUNT) {
		/* no ratelimit message: HAProxy still needs an action (3.1 hangs on
		 * an empty ACK), and one that cannot disturb a real decision */
		if (!r->done_policy || conn_ack_settled(&a, r, (size_t)conn_max_frame(c) + 4) == 0)
			spop_ack_unset(&a, SPOP_SCOPE_TXN, "none");
	} else {
		const char *st = window_status_str(d->status);
		const char *why = window_reason_str(d->reason);

		spop_ack_set_str(&a, SPOP_SCOPE_TXN, "status", st, strlen(st));
		if ((d->has_quota || d->limit > 0) && conn_wants(r, HEADERS_VAR_LIMIT))
			spop_ack_set_int(&a, SPOP_SCOPE_TXN, "limit", d->limit);
		if (d->has_quota) {
			if (conn_wants(r, HEADERS_VAR_REMAINING))
				spop_ack_set_int(&a, SPOP_SCOPE_TXN, "remaining", d->remaining);
			if (conn_wants(r, HEADERS_VAR_RESET))
				spop_ack_set_int(&a, SPOP_SCOPE_TXN, "reset", d->reset);
			if (d->status == WINDOW_DENY && conn_wants(r, HEADERS_VAR_RETRY_AFTER))
				spop_ack_set_int(&a, SPOP_SCOPE_TXN, "retry_after", d->retry_after);
		}
		if (d->reason != WINDOW_REASON_NONE && conn_wants(r, HEADERS_VAR_REASON))
			spop_ack_set_str(&a, SPOP_SCOPE_TXN, "reason", why, strlen(why));
		/* an admission under inflight=: the lease "ratelimit-done" names */
		if (d->lease[0]) {
			spop_ack_set_str(&a, SPOP_SCOPE_TXN, "lease", d->lease, strlen(d->lease));
			if (ne->metrics)
				metrics_add(&ne->metrics->leases[METRICS_LEASE_TAKEN], 1);
		}
		/* the frame after its 4-byte length counts against max_frame */
		conn_ack_headers(&a, r, (size_t)conn_max_frame(c) + 4);
	}
	n = spop_ack_end(&a);
	if (n < 0) {
		conn_send_disconnect(c, SPOP_ST_RES, "ack does not fit");
		return -1;
	}
	conn_out_commit(c, (size_t)n, METRICS_OUT_ACK);
	return 0;
}
