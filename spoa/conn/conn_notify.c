/*
 * conn_notify - the NOTIFY side of a connection, above the transport: a
 * NOTIFY's message checked and handed to the limiter, a "ratelimit-done"
 * message's release and settle, the decision counted and the ACK sent
 * (built in conn_ack.c: variables and RateLimit headers). It owns each
 * connection's requests, in-flight count and decisions (struct
 * conn_notify); when the connection closes first, that state stays, with
 * its requests, on ne->detached until their decisions came. What it needs
 * for a decision (the limiter's ops, the configuration, live control, the
 * denial counts) and its pools are in the worker's struct conn_notify_env
 * (conn_notify.h), never in the transport's. It calls the transport by name
 * (conn_int.h); the transport reaches it only through conn_notify_upper and
 * env->upper_ctx. See conn.h for the model.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "conn.h"
#include "conn_int.h"
#include "conn_notify.h"
#include "conn_notify_int.h"
#include "denied.h"
#include "headers.h"
#include "live.h"
#include "log.h"
#include "metrics.h"
#include "spop.h"

#define CONN_REQ_POOL_MAX 4096u            /* recycled requests kept per worker */
#define CONN_REQ_POOL_LOW 64u              /* ... and kept after a burst */

/* Borrow a request from the worker's pool (or the heap). Caller returns it
 * with conn_req_put(). */
static struct conn_req *conn_req_get(struct conn_notify_env *ne)
{
	struct conn_req *r = ne->free_reqs;

	if (r) {
		ne->free_reqs = r->next;
		ne->nfree_reqs--;
		memset(r, 0, offsetof(struct conn_req, key));
		return r;
	}
	return calloc(1, sizeof(*r));
}

static void conn_cfg_unref(struct conn_cfg_ref *ref)
{
	if (--ref->refs == 0)
		ref->release(ref);
}

static void conn_req_put(struct conn_notify_env *ne, struct conn_req *r)
{
	conn_cfg_unref(r->cfg);
	if (ne->nfree_reqs >= CONN_REQ_POOL_MAX) {
		free(r);
		return;
	}
	r->next = ne->free_reqs;
	ne->free_reqs = r;
	ne->nfree_reqs++;
}

unsigned conn_notify_trim(struct conn_notify_env *ne)
{
	struct conn_req *r;
	unsigned n = 0;

	while (ne->nfree_reqs > CONN_REQ_POOL_LOW && (r = ne->free_reqs)) {
		ne->free_reqs = r->next;
		ne->nfree_reqs--;
		free(r);
		n++;
	}
	return n;
}

static void conn_req_unlink(struct conn_notify *ns, struct conn_req *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		ns->reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
}

/* The decision histogram: <r> from its NOTIFY read to its ACK written (the
 * ACK leaves in this loop iteration's flush), under the policy and status
 * decisions_total counts it under. */
static void conn_observe_decision(struct conn_notify_env *ne, const struct conn_req *r)
{
	const struct config *cfg = r->cfg->cfg;

	if (ne->metrics && r->policy && r->acc.status != WINDOW_STATUS_COUNT)
		metrics_observe_decision(ne->metrics, (size_t)(r->policy - cfg->policies), &r->acc,
		                         metrics_now_us() - r->read_us);
}

/* Count <d> under policy <p> of generation <cfg> (per NOTIFY: a NOTIFY with
 * several messages counts once, under its first policy). */
static void conn_count_decision(struct conn_notify_env *ne, const struct config *cfg,
                                const struct window_policy *p,
                                const struct window_decision *d)
{
	size_t idx;

	/* every refusal shows at warn, a line a second per reason and thread (a
	 * live block is the operator's own: logged when the agent sees it) */
	if (d->status == WINDOW_ERROR ||
	    (d->reason != WINDOW_REASON_NONE && d->reason != WINDOW_REASON_SHADOW_DENY &&
	     d->reason != WINDOW_REASON_BLOCKED && d->status != WINDOW_DENY))
		log_limited(CONFIG_LOG_WARN, window_reason_str(d->reason),
		            d->status == WINDOW_ERROR ? "decision_refused" : "decision_fail_open",
		            "reason=%s policy=%s", window_reason_str(d->reason), p ? p->name : "-");
	if (!ne->metrics)
		return;
	if (p && p >= cfg->policies && p < cfg->policies + cfg->npolicies) {
		idx = (size_t)(p - cfg->policies);
		/* a shadow deny is its own status in the metrics, never an allow:
		 * "allow" then means what the policy itself admitted */
		if (d->reason == WINDOW_REASON_SHADOW_DENY)
			metrics_add(&ne->metrics->shadow_denies[idx], 1);
		else if ((unsigned)d->status < WINDOW_STATUS_COUNT)
			metrics_add(&ne->metrics->decisions[idx][d->status], 1);
		if (d->reason == WINDOW_REASON_POOL_FULL || d->reason == WINDOW_REASON_POOL_SHARE)
			metrics_add(&ne->metrics->pool_refusals[idx][d->reason == WINDOW_REASON_POOL_SHARE ?
			            METRICS_POOL_SHARE : METRICS_POOL_FULL], 1);
	}
	if (d->reason != WINDOW_REASON_NONE && (unsigned)d->reason < WINDOW_REASON_COUNT)
		metrics_add(&ne->metrics->errors_by_reason[d->reason], 1);
}

/* Take <ns> off ne->detached and free it (its connection closed and its
 * last request finished). */
static void conn_notify_free(struct conn_notify *ns)
{
	if (ns->prev)
		ns->prev->next = ns->next;
	else
		ns->ne->detached = ns->next;
	if (ns->next)
		ns->next->prev = ns->prev;
	free(ns);
}

/* All decisions of <r> are in: ACK it (if its conn is still there) and
 * recycle it; the last request of a closed conn frees its NOTIFY side. */
static void conn_req_finish(struct conn_req *r)
{
	struct conn_notify *ns = r->ns;
	struct conn_notify_env *ne = ns->ne;
	struct conn *c = ns->conn;

	if (ne->metrics)
		metrics_sub(&ne->metrics->notify_inflight, 1);
	if (r->acc.status != WINDOW_STATUS_COUNT)
		conn_count_decision(ne, r->cfg->cfg, r->policy, &r->acc);
	/* ctl top-denied: the one place a denial is counted for it */
	if (r->acc.status == WINDOW_DENY && r->policy && r->key_len) {
		if (r->acc.reason == WINDOW_REASON_POOL_FULL || r->acc.reason == WINDOW_REASON_POOL_SHARE)
			denied_note_pool(ne->denied, r->policy->name, r->policy->name_len,
			                 window_reason_str(r->acc.reason), r->key, r->key_len);
		else
			denied_note(ne->denied, r->policy->name, r->policy->name_len, r->key, r->key_len);
	}
	conn_req_unlink(ns, r);
	ns->inflight--;
	ns->decisions -= r->nmsgs;
	if (c) {
		if (conn_is_ready(c) && conn_send_ack(c, ne, r) == 0)
			conn_observe_decision(ne, r);
		if (ns->inflight == 0 && conn_is_draining(c) && conn_is_ready(c))
			conn_send_disconnect(c, SPOP_ST_NORMAL, "agent is shutting down");
	} else if (!ns->reqs) {
		conn_notify_free(ns);
	}
	conn_req_put(ne, r);
}

/* Limiter callback: one decision for one message of the request <arg>. */
static void conn_on_decision(void *arg, const struct window_decision *d)
{
	struct conn_req *r = arg;

	window_decision_merge(&r->acc, d);
	if (--r->pending == 0)
		conn_req_finish(r);
}

/*
 * The plan of <p> a request names (<plan>, or plan-default without one), or
 * NULL for the policy's own limits: no plan, a plan other policies have, or
 * one no policy has (counted and logged as unknown_plan: never an error,
 * never looser than the policy). Borrowed from <cfg>.
 */
static const struct window_plan *conn_plan_pick(struct conn_notify_env *ne,
                                                const struct config *cfg,
                                                const struct window_policy *p,
                                                struct spop_str plan)
{
	const struct window_plan *pl;
	char name[LOG_QUOTED_MAX(WINDOW_NAME_MAX)];

	if (!plan.len) {
		plan.ptr = cfg->plan_default;
		plan.len = cfg->plan_default_len;
	}
	if (!plan.len)
		return NULL;
	pl = window_plan_find(p, plan.ptr, plan.len);
	if (pl || config_plan_known(cfg, plan.ptr, plan.len))
		return pl;
	if (ne->metrics)
		metrics_add(&ne->metrics->unknown_plans, 1);
	/* the name comes from the caller's token or a map: quoted, cut */
	log_quote(name, sizeof(name), plan.ptr, plan.len > WINDOW_NAME_MAX ? WINDOW_NAME_MAX : plan.len);
	log_limited(CONFIG_LOG_WARN, "unknown_plan", "unknown_plan", "policy=%s plan=%s",
	            p->name, name);
	return NULL;
}

/*
 * Decide one "ratelimit" message <m> for request <r>: validate the args,
 * then ask the limiter (which answers through conn_on_decision). Invalid
 * input is decided here as an error, never passed on.
 */
static void conn_decide_message(struct conn_notify_env *ne, struct conn_req *r,
                                const struct spop_message *m)
{
	const struct config *cfg = r->cfg->cfg;
	const struct window_policy *p = NULL;
	struct window_decision d;
	struct spop_iter it;
	struct spop_arg a;
	struct spop_str key = { NULL, 0 };
	bool have_policy = false, have_key = false, have_cost = false, have_vars = false;
	int64_t cost = 1;
	enum window_reason why = WINDOW_REASON_NONE;
	enum live_verdict lv;
	struct window_policy live;      /* <p> with a live override's limits */
	struct window_policy planned;   /* <p> with its plan's limits */
	struct spop_str plan = { NULL, 0 };
	const struct window_plan *pl = NULL;
	const struct window_policy *base;
	const struct window_limit *lim;
	unsigned nwin;

	spop_iter_args(m, &it);
	while (spop_next_arg(&it, &a)) {
		if (!have_policy && spop_str_eq(a.name, "policy")) {
			have_policy = true;
			if (a.value.type == SPOP_T_STR || a.value.type == SPOP_T_BIN)
				p = config_find_policy(cfg, a.value.v.s.ptr, a.value.v.s.len);
		} else if (!have_key && spop_str_eq(a.name, "key")) {
			have_key = true;
			/* NULL (missing sample) and IP addresses are refused: the key is
			 * the authenticated account, never the client address */
			if (a.value.type == SPOP_T_STR || a.value.type == SPOP_T_BIN)
				key = a.value.v.s;
		} else if (!plan.ptr && spop_str_eq(a.name, "plan")) {
			/* NULL (HAProxy's var unset) is no plan */
			if (a.value.type == SPOP_T_STR || a.value.type == SPOP_T_BIN)
				plan = a.value.v.s;
		} else if (!have_cost && spop_str_eq(a.name, "cost")) {
			have_cost = true;
			if (spop_data_to_int64(&a.value, &cost) == -1)
				cost = 0;   /* rejected below as bad-cost */
		} else if (!have_vars && spop_str_eq(a.name, "vars")) {
			/* the lean answer: only what this edge's rules read */
			have_vars = true;
			if (a.value.type == SPOP_T_STR || a.value.type == SPOP_T_BIN)
				r->skip_vars = HEADERS_VARS_ALL &
				               ~headers_parse_vars(a.value.v.s.ptr, a.value.v.s.len);
		}
	}

	if (!p)
		why = WINDOW_REASON_UNKNOWN_POLICY;
	else if (window_check_key(key.ptr, key.len) == -1)
		why = WINDOW_REASON_BAD_KEY;
	else if (cost < 1)
		why = WINDOW_REASON_BAD_COST;
	if (why != WINDOW_REASON_NONE) {
		window_decide_error(NULL, why, &d);
		d.status = WINDOW_ERROR;   /* input errors never fail open */
		window_decision_merge(&r->acc, &d);
		return;
	}
	/* precedence, most specific first: live override > the account's
	 * override line > its plan > the policy (docs/configuration.md) */
	pl = conn_plan_pick(ne, cfg, p, plan);
	base = p;
	if (pl) {
		planned = *p;
		planned.nwin = pl->nwin;
		memcpy(planned.win, pl->win, pl->nwin * sizeof(pl->win[0]));
		planned.plans = NULL;
		planned.nplans = 0;
		base = &planned;
	}
	/* the one place a live override (ctl) enters a decision: its limits
	 * replace the config's for this call, a block is answered here */
	lv = live_apply(ne->live, base, key.ptr, key.len, &live, &d);
	if (lv != LIVE_NONE && ne->metrics)
		metrics_add(&ne->metrics->live_decisions[lv == LIVE_BLOCK ? METRICS_LIVE_BLOCK :
		                                          METRICS_LIVE_LIMITS], 1);
	if (!r->policy) {
		r->policy = p;
		if (lv == LIVE_LIMITS) {
			memcpy(r->live_win, live.win, live.nwin * sizeof(live.win[0]));
			r->lim = r->live_win;
			r->nwin = live.nwin;
		} else {
			lim = window_limits_for(base, key.ptr, key.len, &nwin);
			/* <planned> is this call's: the plan's own limits live in <cfg> */
			r->lim = pl && lim == planned.win ? pl->win : lim;
			r->nwin = nwin;
		}
		if (key.ptr) {      /* always, once window_check_key() passed */
			memcpy(r->key, key.ptr, key.len);
			r->key_len = key.len;
		}
	}
	r->nasked++;
	if (lv == LIVE_BLOCK) {
		window_decision_merge(&r->acc, &d);
		return;
	}

	r->pending++;
	/* the limiter borrows <live> for the call only (a call keeps a copy) */
	if (ne->ops.check(ne->ops.ctx, lv == LIVE_LIMITS ? &live : base, key.ptr, key.len,
	                   (uint64_t)cost, conn_on_decision, r) == -1) {
		r->pending--;
		window_decide_error(p, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
		window_decision_merge(&r->acc, &d);
	}
}

/* A cost sent as text <s> (a response header as HAProxy read it): its
 * value when it is 1..16 decimal digits, else -1 (malformed). */
static int64_t conn_done_cost(struct spop_str s)
{
	int64_t v = 0;
	size_t i;

	if (s.len < 1 || s.len > 16)
		return -1;
	for (i = 0; i < s.len; i++) {
		if (s.ptr[i] < '0' || s.ptr[i] > '9')
			return -1;
		v = v * 10 + (s.ptr[i] - '0');
	}
	return v;
}

/* Limiter callback: the settle of request <arg>'s "ratelimit-done"
 * answered (<st> borrowed; NULL: no answer, the fields stay as they were). */
static void conn_on_settled(void *arg, const struct stored_settle *st)
{
	struct conn_req *r = arg;

	if (st)
		r->settled = *st;
	if (--r->pending == 0)
		conn_req_finish(r);
}

/*
 * A "ratelimit-done" message <m> of request <r> (HAProxy's response
 * phase): the lease it names goes back (inflight=), and under settle= its
 * cost (the real cost, from the response's header; absent or not a whole
 * number >= 0: the reservation stands) is settled. Its args are policy,
 * key, lease, cost, hdrs (the response's headers, res.hdrs_bin: the
 * policy's settle= header in them is the cost, before "cost") and, as for
 * "ratelimit", vars; anything missing or
 * malformed, or a policy without inflight= or settle=, is ignored (logged
 * at debug): the lease then ends at lease=. A release's ACK does not wait
 * for Redis; a settle's waits for its first answer, which sets the
 * response's RateLimit fields to what the windows have left after it.
 */
static void conn_done_message(struct conn_notify_env *ne, struct conn_req *r,
                              const struct config *cfg, const struct spop_message *m)
{
	const struct window_policy *p = NULL;
	struct spop_iter it;
	struct spop_arg a;
	struct spop_str key = { NULL, 0 }, lease = { NULL, 0 }, hdrs = { NULL, 0 }, v;
	char id[WINDOW_LEASE_ID_LEN + 1];
	int64_t cost = -1;
	bool have_hdrs = false;

	spop_iter_args(m, &it);
	while (spop_next_arg(&it, &a)) {
		bool s = a.value.type == SPOP_T_STR || a.value.type == SPOP_T_BIN;

		if (s && !p && spop_str_eq(a.name, "policy"))
			p = config_find_policy(cfg, a.value.v.s.ptr, a.value.v.s.len);
		else if (s && spop_str_eq(a.name, "key"))
			key = a.value.v.s;
		else if (s && spop_str_eq(a.name, "lease"))
			lease = a.value.v.s;
		else if (s && spop_str_eq(a.name, "cost"))
			cost = conn_done_cost(a.value.v.s);
		else if (spop_str_eq(a.name, "cost") && spop_data_to_int64(&a.value, &cost) == -1)
			cost = -1;
		else if (s && spop_str_eq(a.name, "vars"))
			r->skip_vars = HEADERS_VARS_ALL & ~headers_parse_vars(a.value.v.s.ptr, a.value.v.s.len);
		else if (s && spop_str_eq(a.name, "hdrs")) {
			hdrs = a.value.v.s;
			have_hdrs = true;
		}
	}
	/* the response's headers (res.hdrs_bin) name the real cost by the
	 * policy's own settle= header, whatever header the edge reads into
	 * "cost": with them, that header decides (absent: the reservation
	 * stands) */
	if (have_hdrs && p && p->settle_hdr[0])
		cost = spop_hdrs_find((const unsigned char *)hdrs.ptr, hdrs.len, p->settle_hdr,
		                      strlen(p->settle_hdr), &v) == 1 ? conn_done_cost(v) : -1;
	if (cost > WINDOW_SETTLE_COST_MAX)
		cost = -1;
	if (!p || (!p->inflight && !p->settle_hdr[0]) || window_check_key(key.ptr, key.len) == -1 ||
	    lease.len != WINDOW_LEASE_ID_LEN) {
		log_debug("done_ignored", "policy=%s lease_len=%zu", p ? p->name : "-", lease.len);
		return;
	}
	memcpy(id, lease.ptr, lease.len);
	id[lease.len] = '\0';
	/* (beside a "ratelimit" message, which only a foreign client sends,
	 * the ACK is that message's: the settle is not waited for) */
	if (p->settle_hdr[0] && cost >= 0 && ne->ops.settle && r->nmsgs > 0) {
		if (ne->ops.settle(ne->ops.ctx, p, key.ptr, key.len, id, (uint64_t)cost, NULL,
		                   NULL) == -1)
			log_debug("done_ignored", "policy=%s reason=\"settle refused\"", p->name);
	} else if (p->settle_hdr[0] && cost >= 0 && ne->ops.settle) {
		/* (held until the settle answers; the key names its windows) */
		r->done_policy = p;
		memcpy(r->key, key.ptr, key.len);
		r->key_len = key.len;
		r->pending++;
		if (ne->ops.settle(ne->ops.ctx, p, key.ptr, key.len, id, (uint64_t)cost,
		                   conn_on_settled, r) == -1) {
			r->pending--;
			log_debug("done_ignored", "policy=%s reason=\"settle refused\"", p->name);
		}
	}
	if (p->inflight && ne->ops.release &&
	    ne->ops.release(ne->ops.ctx, p, key.ptr, key.len, id) == -1)
		log_debug("done_ignored", "policy=%s reason=\"release refused\"", p->name);
}

/* "ratelimit" messages in NOTIFY <f>. */
static unsigned conn_count_messages(const struct spop_frame *f)
{
	struct spop_iter it;
	struct spop_message m;
	unsigned n = 0;

	spop_iter_messages(&f->u.notify, &it);
	while (spop_next_message(&it, &m))
		if (spop_str_eq(m.name, "ratelimit"))
			n++;
	return n;
}

/*
 * NOTIFY: one request, at most one "ratelimit" message, one ACK. What a
 * NOTIFY may cost is checked before anything is asked. Two or more
 * "ratelimit" messages are an error (too-many-messages): their decisions
 * are separate Redis calls, possibly on different nodes, so one could
 * record a unit while another denies, and the ACK would say deny for a
 * request that was counted. HAProxy never sends two (spoe-message names
 * are unique in an SPOE file), so only a foreign client meets this. A
 * connection with decisions in flight takes no more than max-inflight in
 * all (the excess is shed: overload); an idle one always takes one NOTIFY.
 */
static void conn_notify_frame(void *st, const struct spop_frame *f)
{
	struct conn_notify *ns = st;
	struct conn_notify_env *ne = ns->ne;
	const struct config *cfg = ne->cfg->cfg;
	enum window_reason refuse = WINDOW_REASON_NONE;
	struct conn_req *r;
	struct spop_iter it;
	struct spop_message m;
	unsigned n;

	r = conn_req_get(ne);
	if (!r) {
		conn_send_disconnect(ns->conn, SPOP_ST_RES, "out of memory");
		return;
	}
	r->ns = ns;
	r->cfg = ne->cfg;
	r->cfg->refs++;
	r->stream_id = f->hdr.stream_id;
	r->frame_id = f->hdr.frame_id;
	r->read_us = metrics_now_us();
	r->pending = 1;     /* held while issuing, so a synchronous answer cannot finish it early */
	window_decision_init(&r->acc);
	r->next = ns->reqs;
	if (ns->reqs)
		ns->reqs->prev = r;
	ns->reqs = r;
	ns->inflight++;
	if (ne->metrics)
		metrics_add(&ne->metrics->notify_inflight, 1);

	n = conn_count_messages(f);
	/* max-notify-messages is still read (configs that set it load), but
	 * only one message can be decided all-or-nothing (docs/protocol.md) */
	if (n > 1 || n > cfg->max_notify_messages)
		refuse = WINDOW_REASON_TOO_MANY_MESSAGES;
	else if (ns->decisions && ns->decisions + n > cfg->max_inflight)
		refuse = WINDOW_REASON_OVERLOAD;
	if (refuse != WINDOW_REASON_NONE) {
		/* answered at once, as an error whatever the policy: nothing
		 * was asked, so nothing may pass */
		struct window_decision d;

		if (refuse == WINDOW_REASON_TOO_MANY_MESSAGES)
			log_debug("notify_refused", "conn=%llu messages=%u max=1",
			          (unsigned long long)conn_id(ns->conn), n);
		window_decide_error(NULL, refuse, &d);
		d.status = WINDOW_ERROR;
		window_decision_merge(&r->acc, &d);
	} else {
		r->nmsgs = n;
		ns->decisions += n;
		spop_iter_messages(&f->u.notify, &it);
		while (spop_next_message(&it, &m)) {
			if (spop_str_eq(m.name, "ratelimit"))
				conn_decide_message(ne, r, &m);
			else if (spop_str_eq(m.name, "ratelimit-done"))
				conn_done_message(ne, r, cfg, &m);
		}
	}
	if (--r->pending == 0)
		conn_req_finish(r);
}

/* A NOTIFY side for connection <c>, owned here until it closed and its
 * last request finished. */
static void *conn_notify_open(void *ctx, struct conn *c)
{
	struct conn_notify_env *ne = ctx;
	struct conn_notify *ns = calloc(1, sizeof(*ns));

	if (!ns)
		return NULL;
	ns->ne = ne;
	ns->conn = c;
	return ns;
}

static unsigned conn_notify_inflight(const void *st)
{
	const struct conn_notify *ns = st;

	return ns->inflight;
}

/* The connection closed: nothing more is written to it. With requests in
 * flight, <st> goes on ne->detached until the last one finished (their
 * decisions are counted, their ACKs dropped); else it is freed now. */
static void conn_notify_close(void *st)
{
	struct conn_notify *ns = st;
	struct conn_notify_env *ne = ns->ne;

	ns->conn = NULL;
	if (!ns->reqs) {
		free(ns);
		return;
	}
	ns->prev = NULL;
	ns->next = ne->detached;
	if (ne->detached)
		ne->detached->prev = ns;
	ne->detached = ns;
}

/* Every connection closed: free the request pool. Requests still in flight
 * stay on ne->detached (the limiter answers each exactly once, freeing
 * it; a worker frees its limiters first, which answers them all). */
static void conn_notify_env_close(void *ctx)
{
	struct conn_notify_env *ne = ctx;
	struct conn_req *r;

	while ((r = ne->free_reqs)) {
		ne->free_reqs = r->next;
		free(r);
	}
	ne->nfree_reqs = 0;
}

const struct conn_upper conn_notify_upper = {
	.open = conn_notify_open,
	.notify = conn_notify_frame,
	.inflight = conn_notify_inflight,
	.close = conn_notify_close,
	.env_close = conn_notify_env_close,
};
