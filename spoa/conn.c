/*
 * conn - one HAProxy connection. See conn.h for the model.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>

#include "config.h"
#include "conn.h"
#include "headers.h"
#include "log.h"
#include "metrics.h"
#include "spop.h"

#define CONN_IN_INIT      1024u            /* enough for HELLO and NOTIFYs */
#define CONN_OUT_INIT     1024u
#define CONN_SHRINK_ABOVE (64u * 1024u)    /* give back big buffers when idle */
#define CONN_PRE_HELLO_MAX 16380u          /* HAProxy's default, before negotiation */
/* an ACK with every variable fits */
#define CONN_ACK_ROOM     (512u + HEADERS_POLICY_MAX + HEADERS_RATELIMIT_MAX)
#define CONN_REQ_POOL_MAX 4096u            /* recycled requests kept per worker */
#define CONN_OUT_HIGH     (256u * 1024u)   /* unsent bytes that pause reading */
#define CONN_OUT_LOW      (64u * 1024u)    /* ... and that resume it */

enum conn_flag {
	CONN_F_HEALTHCHECK = 1u << 0,   /* close after AGENT-HELLO */
	CONN_F_PIPELINING  = 1u << 1,
	CONN_F_IN_FLUSH    = 1u << 2,   /* on env->flush_head list */
	CONN_F_DISCO_SENT  = 1u << 3,
	CONN_F_WAS_READY   = 1u << 4,   /* completed a traffic HELLO */
	CONN_F_RD_PAUSED   = 1u << 5,   /* peer not reading: input paused */
};

struct conn {
	struct conn_env *env;
	int fd;
	enum conn_state state;
	unsigned flags;
	uint32_t max_frame;             /* negotiated (HAProxy's), bytes */
	unsigned inflight;              /* NOTIFYs waiting for decisions */
	uint64_t id;                    /* for logs */

	ev_io rd;
	ev_io wr;
	ev_timer timer;                 /* hello / stalled-frame / closing deadline */

	unsigned char *in;
	size_t in_len, in_cap;
	unsigned char *out;
	size_t out_len, out_off, out_cap;

	struct conn_req *reqs;          /* in flight, doubly linked */
	struct conn *prev, *next;       /* env->conns */
	struct conn *flush_next;        /* env->flush_head */
};

/* One NOTIFY in flight: its ids, the decisions still pending, and the
 * merged outcome. Outlives its conn when the conn closes first. */
struct conn_req {
	struct conn_env *env;           /* owner of the pool; outlives requests */
	struct conn *conn;              /* NULL once the conn closed */
	struct conn_cfg_ref *cfg;       /* the generation it was decided under */
	uint64_t stream_id;
	uint64_t frame_id;
	unsigned pending;               /* decisions outstanding (+1 while issuing) */
	const struct window_policy *policy; /* first message's, for metrics */
	uint64_t read_us;               /* monotonic, when the NOTIFY was read */
	const struct window_limit *lim; /* its limits for the key (borrowed from cfg) */
	unsigned nwin;
	unsigned nasked;                /* messages handed to the limiter */
	struct window_decision acc;
	struct conn_req *prev, *next;
};

static uint64_t conn_next_id;

static void conn_on_read(struct ev_loop *loop, ev_io *w, int revents);
static void conn_on_write(struct ev_loop *loop, ev_io *w, int revents);
static void conn_on_timer(struct ev_loop *loop, ev_timer *w, int revents);
static void conn_close(struct conn *c, const char *why);
static int conn_read_some(struct conn *c);

const char *conn_state_str(enum conn_state s)
{
	static const char *const names[CONN_ST_COUNT] = {
		[CONN_ST_HELLO] = "hello",
		[CONN_ST_READY] = "ready",
		[CONN_ST_CLOSING] = "closing",
	};
	return (unsigned)s < CONN_ST_COUNT ? names[s] : "?";
}

/* The one place a connection's state changes. */
static void conn_set_state(struct conn *c, enum conn_state s)
{
	log_debug("conn_state", "conn=%llu from=%s to=%s", (unsigned long long)c->id,
	          conn_state_str(c->state), conn_state_str(s));
	c->state = s;
}

/* ---------------------------------------------------------------- buffers */

/* Make room for <need> more bytes in the output buffer. Returns 0 or -1. */
static int conn_out_reserve(struct conn *c, size_t need)
{
	size_t want, cap;
	unsigned char *p;

	if (c->out_off && c->out_off == c->out_len)
		c->out_off = c->out_len = 0;
	if (c->out_cap - c->out_len >= need)
		return 0;
	if (c->out_off) {
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
		if (c->out_cap - c->out_len >= need)
			return 0;
	}
	want = c->out_len + need;
	cap = c->out_cap ? c->out_cap : CONN_OUT_INIT;
	while (cap < want)
		cap *= 2;
	p = realloc(c->out, cap);
	if (!p)
		return -1;
	c->out = p;
	c->out_cap = cap;
	return 0;
}

/* Queue <c> for the next flush. */
static void conn_want_flush(struct conn *c)
{
	if (c->flags & CONN_F_IN_FLUSH)
		return;
	c->flags |= CONN_F_IN_FLUSH;
	c->flush_next = c->env->flush_head;
	c->env->flush_head = c;
}

/* Count one frame of <type> sent on <c>. */
static void conn_count_out(struct conn *c, enum metrics_frame_out type)
{
	if (c->env->metrics)
		metrics_add(&c->env->metrics->frames_out[type], 1);
}

/* Queue AGENT-DISCONNECT and move to CLOSING: the conn closes once it left. */
static void conn_send_disconnect(struct conn *c, unsigned status, const char *msg)
{
	int n;

	if (c->flags & CONN_F_DISCO_SENT)
		return;
	if (conn_out_reserve(c, 256 + strlen(msg)) == -1) {
		conn_set_state(c, CONN_ST_CLOSING);
		return;
	}
	n = spop_encode_agent_disconnect(c->out + c->out_len, c->out_cap - c->out_len,
	                                 status, msg);
	if (n > 0) {
		c->out_len += (size_t)n;
		conn_count_out(c, METRICS_OUT_DISCONNECT);
	}
	c->flags |= CONN_F_DISCO_SENT;
	log_info("spop_disconnect_sent", "conn=%llu status=%u message=\"%s\"",
	         (unsigned long long)c->id, status, msg);
	conn_set_state(c, CONN_ST_CLOSING);
	ev_io_stop(c->env->loop, &c->rd);
	/* do not wait forever for a peer that stopped reading */
	ev_timer_stop(c->env->loop, &c->timer);
	ev_timer_set(&c->timer, 2.0, 0.0);
	ev_timer_start(c->env->loop, &c->timer);
	conn_want_flush(c);
}

/* A protocol error from the peer: count it and disconnect with <st>. */
static void conn_protocol_error(struct conn *c, enum spop_status st, const char *what)
{
	if (c->env->metrics && (unsigned)st < SPOP_ST_COUNT)
		metrics_add(&c->env->metrics->malformed[st], 1);
	log_warn("spop_error", "conn=%llu status=%u reason=\"%s\" detail=\"%s\"",
	         (unsigned long long)c->id, (unsigned)st, spop_status_str(st), what);
	conn_send_disconnect(c, st, spop_status_str(st));
}

/* ------------------------------------------------------------- requests */

/* Borrow a request from the worker's pool (or the heap). Caller returns it
 * with conn_req_put(). */
static struct conn_req *conn_req_get(struct conn_env *env)
{
	struct conn_req *r = env->free_reqs;

	if (r) {
		env->free_reqs = r->next;
		env->nfree_reqs--;
		memset(r, 0, sizeof(*r));
		return r;
	}
	return calloc(1, sizeof(*r));
}

static void conn_cfg_unref(struct conn_cfg_ref *ref)
{
	if (--ref->refs == 0)
		ref->release(ref);
}

static void conn_req_put(struct conn_env *env, struct conn_req *r)
{
	conn_cfg_unref(r->cfg);
	if (env->nfree_reqs >= CONN_REQ_POOL_MAX) {
		free(r);
		return;
	}
	r->next = env->free_reqs;
	env->free_reqs = r;
	env->nfree_reqs++;
}

static void conn_req_unlink(struct conn *c, struct conn_req *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		c->reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
}

/* The decision histogram: <r> from its NOTIFY read to its ACK written (the
 * ACK leaves in this loop iteration's flush), under the policy and status
 * decisions_total counts it under. */
static void conn_observe_decision(struct conn_env *env, const struct conn_req *r)
{
	const struct config *cfg = r->cfg->cfg;

	if (env->metrics && r->policy && r->acc.status != WINDOW_STATUS_COUNT)
		metrics_observe_decision(env->metrics, (size_t)(r->policy - cfg->policies), &r->acc,
		                         metrics_now_us() - r->read_us);
}

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
	char pol[HEADERS_POLICY_MAX], cur[HEADERS_RATELIMIT_MAX];
	int np, nc = 0;

	if (r->nasked != 1 || !p || !r->lim || d->status == WINDOW_ERROR ||
	    d->window >= r->nwin || !(d->has_quota || d->limit > 0))
		return;
	np = headers_format_policy(p->name, p->name_len, r->lim, r->nwin, pol, sizeof(pol));
	if (d->has_quota)
		nc = headers_format_ratelimit(p->name, p->name_len, r->lim, r->nwin, d->window,
		                              d->remaining, d->reset, cur, sizeof(cur));
	if (np <= 0 || nc < 0 || a->len + 3 * VAR_ROOM + (size_t)np + (size_t)nc > max)
		return;
	spop_ack_set_int(a, SPOP_SCOPE_TXN, "window",
	                 headers_window_seconds(r->lim[d->window].window_ms));
	spop_ack_set_str(a, SPOP_SCOPE_TXN, "policy_hdr", pol, (size_t)np);
	if (nc > 0)
		spop_ack_set_str(a, SPOP_SCOPE_TXN, "ratelimit_hdr", cur, (size_t)nc);
}

/* Append the ACK for <r> (its merged decision as txn variables). */
static void conn_send_ack(struct conn *c, const struct conn_req *r)
{
	const struct window_decision *d = &r->acc;
	struct spop_writer a;
	int n;

	if (conn_out_reserve(c, CONN_ACK_ROOM) == -1) {
		conn_send_disconnect(c, SPOP_ST_RES, "out of memory");
		return;
	}
	spop_ack_begin(&a, c->out + c->out_len, c->out_cap - c->out_len,
	               r->stream_id, r->frame_id);
	if (d->status == WINDOW_STATUS_COUNT) {
		/* no ratelimit message: HAProxy still needs an action (3.1 hangs on
		 * an empty ACK), and one that cannot disturb a real decision */
		spop_ack_unset(&a, SPOP_SCOPE_TXN, "none");
	} else {
		const char *st = window_status_str(d->status);
		const char *why = window_reason_str(d->reason);

		spop_ack_set_str(&a, SPOP_SCOPE_TXN, "status", st, strlen(st));
		if (d->has_quota || d->limit > 0)
			spop_ack_set_int(&a, SPOP_SCOPE_TXN, "limit", d->limit);
		if (d->has_quota) {
			spop_ack_set_int(&a, SPOP_SCOPE_TXN, "remaining", d->remaining);
			spop_ack_set_int(&a, SPOP_SCOPE_TXN, "reset", d->reset);
			if (d->status == WINDOW_DENY)
				spop_ack_set_int(&a, SPOP_SCOPE_TXN, "retry_after", d->retry_after);
		}
		if (d->reason != WINDOW_REASON_NONE)
			spop_ack_set_str(&a, SPOP_SCOPE_TXN, "reason", why, strlen(why));
		/* the frame after its 4-byte length counts against max_frame */
		conn_ack_headers(&a, r, (size_t)c->max_frame + 4);
	}
	n = spop_ack_end(&a);
	if (n < 0) {
		conn_send_disconnect(c, SPOP_ST_RES, "ack does not fit");
		return;
	}
	c->out_len += (size_t)n;
	conn_count_out(c, METRICS_OUT_ACK);
	conn_observe_decision(c->env, r);
	conn_want_flush(c);
}

/* Count <d> under policy <p> of generation <cfg> (per NOTIFY: a NOTIFY with
 * several messages counts once, under its first policy). */
static void conn_count_decision(struct conn_env *env, const struct config *cfg,
                                const struct window_policy *p,
                                const struct window_decision *d)
{
	size_t idx;

	/* every refusal shows at warn, a line a second per reason and thread */
	if (d->status == WINDOW_ERROR ||
	    (d->reason != WINDOW_REASON_NONE && d->reason != WINDOW_REASON_SHADOW_DENY))
		log_limited(CONFIG_LOG_WARN, window_reason_str(d->reason),
		            d->status == WINDOW_ERROR ? "decision_refused" : "decision_fail_open",
		            "reason=%s policy=%s", window_reason_str(d->reason), p ? p->name : "-");
	if (!env->metrics)
		return;
	if (p && p >= cfg->policies && p < cfg->policies + cfg->npolicies) {
		idx = (size_t)(p - cfg->policies);
		/* a shadow deny is its own status in the metrics, never an allow:
		 * "allow" then means what the policy itself admitted */
		if (d->reason == WINDOW_REASON_SHADOW_DENY)
			metrics_add(&env->metrics->shadow_denies[idx], 1);
		else if ((unsigned)d->status < WINDOW_STATUS_COUNT)
			metrics_add(&env->metrics->decisions[idx][d->status], 1);
	}
	if (d->reason != WINDOW_REASON_NONE && (unsigned)d->reason < WINDOW_REASON_COUNT)
		metrics_add(&env->metrics->errors_by_reason[d->reason], 1);
}

/* All decisions of <r> are in: ACK it (if its conn is still there) and
 * recycle it. */
static void conn_req_finish(struct conn_env *env, struct conn_req *r)
{
	struct conn *c = r->conn;

	if (env->metrics)
		metrics_sub(&env->metrics->notify_inflight, 1);
	if (r->acc.status != WINDOW_STATUS_COUNT)
		conn_count_decision(env, r->cfg->cfg, r->policy, &r->acc);
	if (c) {
		conn_req_unlink(c, r);
		c->inflight--;
		if (c->state == CONN_ST_READY)
			conn_send_ack(c, r);
		if (env->draining && c->inflight == 0 && c->state == CONN_ST_READY)
			conn_send_disconnect(c, SPOP_ST_NORMAL, "agent is shutting down");
	}
	conn_req_put(env, r);
}

/* Limiter callback: one decision for one message of the request <arg>. */
static void conn_on_decision(void *arg, const struct window_decision *d)
{
	struct conn_req *r = arg;

	window_decision_merge(&r->acc, d);
	if (--r->pending == 0)
		conn_req_finish(r->env, r);
}

/* ------------------------------------------------------------- frames */

/*
 * Decide one "ratelimit" message <m> for request <r>: validate the args,
 * then ask the limiter (which answers through conn_on_decision). Invalid
 * input is decided here as an error, never passed on.
 */
static void conn_decide_message(struct conn *c, struct conn_req *r,
                                const struct spop_message *m)
{
	const struct config *cfg = r->cfg->cfg;
	const struct window_policy *p = NULL;
	struct window_decision d;
	struct spop_iter it;
	struct spop_arg a;
	struct spop_str key = { NULL, 0 };
	bool have_policy = false, have_key = false, have_cost = false;
	int64_t cost = 1;
	enum window_reason why = WINDOW_REASON_NONE;

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
		} else if (!have_cost && spop_str_eq(a.name, "cost")) {
			have_cost = true;
			if (spop_data_to_int64(&a.value, &cost) == -1)
				cost = 0;   /* rejected below as bad-cost */
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
	if (!r->policy) {
		r->policy = p;
		r->lim = window_limits_for(p, key.ptr, key.len, &r->nwin);
	}
	r->nasked++;

	r->pending++;
	if (c->env->ops.check(c->env->ops.ctx, p, key.ptr, key.len, (uint64_t)cost,
	                      conn_on_decision, r) == -1) {
		r->pending--;
		window_decide_error(p, WINDOW_REASON_REDIS_UNAVAILABLE, &d);
		window_decision_merge(&r->acc, &d);
	}
}

/* NOTIFY: one request, a decision per "ratelimit" message, one ACK. */
static void conn_handle_notify(struct conn *c, const struct spop_frame *f)
{
	struct conn_env *env = c->env;
	struct conn_req *r;
	struct spop_iter it;
	struct spop_message m;
	unsigned max_inflight = env->cfg->cfg->max_inflight;

	if (c->state != CONN_ST_READY) {
		conn_protocol_error(c, SPOP_ST_INVALID, "NOTIFY before HELLO");
		return;
	}
	r = conn_req_get(env);
	if (!r) {
		conn_send_disconnect(c, SPOP_ST_RES, "out of memory");
		return;
	}
	r->env = env;
	r->conn = c;
	r->cfg = env->cfg;
	r->cfg->refs++;
	r->stream_id = f->hdr.stream_id;
	r->frame_id = f->hdr.frame_id;
	r->read_us = metrics_now_us();
	r->pending = 1;     /* held while issuing, so a synchronous answer cannot finish it early */
	window_decision_init(&r->acc);
	r->next = c->reqs;
	if (c->reqs)
		c->reqs->prev = r;
	c->reqs = r;
	c->inflight++;
	if (env->metrics)
		metrics_add(&env->metrics->notify_inflight, 1);

	if (max_inflight && c->inflight > max_inflight) {
		/* shed: answer this one as an error at once instead of queueing */
		struct window_decision d;

		window_decide_error(NULL, WINDOW_REASON_OVERLOAD, &d);
		d.status = WINDOW_ERROR;
		window_decision_merge(&r->acc, &d);
	} else {
		spop_iter_messages(&f->u.notify, &it);
		while (spop_next_message(&it, &m)) {
			if (spop_str_eq(m.name, "ratelimit"))
				conn_decide_message(c, r, &m);
		}
	}
	if (--r->pending == 0)
		conn_req_finish(env, r);
}

/* HAPROXY-HELLO: negotiate, answer, and close at once for a healthcheck. */
static void conn_handle_hello(struct conn *c, const struct spop_frame *f)
{
	const struct spop_hello *h = &f->u.hello;
	uint32_t max;
	int n;

	if (c->state != CONN_ST_HELLO) {
		conn_protocol_error(c, SPOP_ST_INVALID, "second HELLO");
		return;
	}
	if (!h->has_versions) {
		conn_protocol_error(c, SPOP_ST_NO_VSN, "no supported-versions");
		return;
	}
	if (!h->version_ok) {
		conn_protocol_error(c, SPOP_ST_BAD_VSN, "2.0 not offered");
		return;
	}
	if (!h->has_max_frame_size) {
		conn_protocol_error(c, SPOP_ST_NO_FRAME_SIZE, "no max-frame-size");
		return;
	}
	if (h->max_frame_size < SPOP_MIN_FRAME_SIZE) {
		conn_protocol_error(c, SPOP_ST_BAD_FRAME_SIZE, "max-frame-size < 256");
		return;
	}
	if (!h->has_capabilities) {
		conn_protocol_error(c, SPOP_ST_NO_CAP, "no capabilities");
		return;
	}
	/* echo HAProxy's size: announcing less only makes HAProxy fail
	 * (docs/protocol.md, "What we answer, and why") */
	max = h->max_frame_size > SPOP_MAX_FRAME_SIZE ? SPOP_MAX_FRAME_SIZE : h->max_frame_size;
	c->max_frame = max;
	if (h->cap_pipelining)
		c->flags |= CONN_F_PIPELINING;
	if (conn_out_reserve(c, 128) == -1) {
		conn_send_disconnect(c, SPOP_ST_RES, "out of memory");
		return;
	}
	n = spop_encode_agent_hello(c->out + c->out_len, c->out_cap - c->out_len, max,
	                            h->cap_pipelining);
	if (n < 0) {
		conn_send_disconnect(c, SPOP_ST_RES, "hello does not fit");
		return;
	}
	c->out_len += (size_t)n;
	conn_count_out(c, METRICS_OUT_HELLO);
	conn_want_flush(c);
	ev_timer_stop(c->env->loop, &c->timer);
	if (h->healthcheck) {
		/* the checker only wants a valid AGENT-HELLO, then a close */
		c->flags |= CONN_F_HEALTHCHECK | CONN_F_DISCO_SENT;
		conn_set_state(c, CONN_ST_CLOSING);
		ev_io_stop(c->env->loop, &c->rd);
		return;
	}
	/* info: a handful per HAProxy process and reload, unlike healthchecks */
	log_info("spop_hello", "conn=%llu max_frame_size=%u pipelining=%d engine=%.*s",
	          (unsigned long long)c->id, max, h->cap_pipelining ? 1 : 0,
	          (int)(h->engine_id.len > 64 ? 64 : h->engine_id.len),
	          h->engine_id.ptr ? h->engine_id.ptr : "");
	c->flags |= CONN_F_WAS_READY;
	conn_set_state(c, CONN_ST_READY);
	if (c->env->draining && c->inflight == 0)
		conn_send_disconnect(c, SPOP_ST_NORMAL, "agent is shutting down");
}

/* Decode and act on every complete frame in the input buffer. */
static void conn_process(struct conn *c)
{
	struct spop_frame f;
	enum spop_status st = SPOP_ST_NORMAL;
	uint32_t max = c->state == CONN_ST_HELLO ? CONN_PRE_HELLO_MAX : c->max_frame;
	size_t off = 0;
	int n;

	while (c->state != CONN_ST_CLOSING && off < c->in_len) {
		n = spop_decode_frame(c->in + off, c->in_len - off, max, &f, &st);
		if (n == 0)
			break;
		if (n < 0) {
			conn_protocol_error(c, st, "malformed frame");
			break;
		}
		off += (size_t)n;
		if (c->env->metrics && f.hdr.type <= SPOP_FRAME_NOTIFY)
			metrics_add(&c->env->metrics->frames_in[f.hdr.type], 1);
		switch (f.hdr.type) {
		case SPOP_FRAME_HAPROXY_HELLO:
			conn_handle_hello(c, &f);
			max = c->max_frame;
			break;
		case SPOP_FRAME_NOTIFY:
			conn_handle_notify(c, &f);
			break;
		case SPOP_FRAME_HAPROXY_DISCONNECT:
			log_info("spop_disconnect_received", "conn=%llu status=%u message=\"%.*s\"",
			         (unsigned long long)c->id, f.u.disconnect.status,
			         (int)(f.u.disconnect.message.len > 128 ? 128 : f.u.disconnect.message.len),
			         f.u.disconnect.message.ptr ? f.u.disconnect.message.ptr : "");
			conn_send_disconnect(c, SPOP_ST_NORMAL, "bye");
			break;
		default:
			conn_protocol_error(c, SPOP_ST_INVALID, "unexpected frame type");
			break;
		}
	}
	if (off) {
		memmove(c->in, c->in + off, c->in_len - off);
		c->in_len -= off;
	}
	if (c->state == CONN_ST_CLOSING)
		return;
	if (c->in_len == 0 && c->in_cap > CONN_SHRINK_ABOVE) {
		free(c->in);
		c->in = NULL;
		c->in_cap = 0;
	}
	/* a partial frame must complete in time; a quiet line may stay open;
	 * while reading is paused the stall is ours, not the peer's. The
	 * deadline runs from the first byte of the frame now at the head: a
	 * busy peer whose reads keep ending mid-frame is making progress, so
	 * a completed frame restarts it */
	if (c->state == CONN_ST_READY && !(c->flags & CONN_F_RD_PAUSED)) {
		if (c->in_len && (off || !ev_is_active(&c->timer))) {
			ev_timer_stop(c->env->loop, &c->timer);
			ev_timer_set(&c->timer, c->env->frame_timeout, 0.0);
			ev_timer_start(c->env->loop, &c->timer);
		} else if (!c->in_len && ev_is_active(&c->timer)) {
			ev_timer_stop(c->env->loop, &c->timer);
		}
	}
}

/* Grow the input buffer so the frame announced at its head fits. Returns 0,
 * or -1 after a protocol error (length invalid) or allocation failure. */
static int conn_in_make_room(struct conn *c)
{
	uint32_t max = c->state == CONN_ST_HELLO ? CONN_PRE_HELLO_MAX : c->max_frame;
	uint32_t flen = 0;
	enum spop_status st = SPOP_ST_NORMAL;
	size_t want = CONN_IN_INIT;
	unsigned char *p;
	int r;

	/* refuse a bad length before buffering a single byte of it
	 * (docs/protocol.md, "What the codec enforces") */
	r = spop_peek_length(c->in, c->in_len, max, &flen, &st);
	if (r == -1) {
		conn_protocol_error(c, st, "bad frame length");
		return -1;
	}
	if (r == 1 && (size_t)flen + 4 > want)
		want = (size_t)flen + 4;
	if (c->in_cap >= want && c->in_len < c->in_cap)
		return 0;
	if (want <= c->in_len)
		want = c->in_len + CONN_IN_INIT;
	p = realloc(c->in, want);
	if (!p) {
		conn_send_disconnect(c, SPOP_ST_RES, "out of memory");
		return -1;
	}
	c->in = p;
	c->in_cap = want;
	return 0;
}

/* Read what the socket holds and process it. Returns 0, or -1 when the
 * conn was closed (do not touch it). */
static int conn_read_some(struct conn *c)
{
	ssize_t n;

	if (conn_in_make_room(c) == -1)
		goto out;
	n = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
	if (n == 0) {
		/* HAProxy 3.1+ may close (or RST) instead of DISCONNECT: normal */
		conn_close(c, "peer closed");
		return -1;
	}
	if (n == -1) {
		if (errno == EAGAIN || errno == EINTR)
			return 0;
		conn_close(c, errno == ECONNRESET ? "peer reset" : "read error");
		return -1;
	}
	c->in_len += (size_t)n;
	/* a complete length prefix may now announce a bigger frame */
	if (c->in_len == c->in_cap && conn_in_make_room(c) == -1)
		goto out;
	conn_process(c);
out:
	if (c->state == CONN_ST_CLOSING && c->out_len == c->out_off && !(c->flags & CONN_F_IN_FLUSH)) {
		conn_close(c, "closing");
		return -1;
	}
	return 0;
}

static void conn_on_read(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	conn_read_some(w->data);
}

/*
 * Backpressure on <c>: a peer that sends NOTIFYs but does not read its ACKs
 * would make the output buffer grow without bound, so reading stops while
 * more than CONN_OUT_HIGH bytes wait to be sent and resumes below
 * CONN_OUT_LOW. What is already buffered or in flight still completes, so
 * the output stays under CONN_OUT_HIGH plus one read's worth of ACKs plus
 * max-inflight ACKs. The frame deadline is off while paused: a frame we
 * stopped reading is not the peer's stall.
 */
static void conn_out_backpressure(struct conn *c)
{
	size_t pending = c->out_len - c->out_off;

	if (!(c->flags & CONN_F_RD_PAUSED) && pending >= CONN_OUT_HIGH) {
		c->flags |= CONN_F_RD_PAUSED;
		ev_io_stop(c->env->loop, &c->rd);
		/* a frame left half-read now waits on us: no frame deadline */
		if (c->state == CONN_ST_READY)
			ev_timer_stop(c->env->loop, &c->timer);
		log_debug("conn_paused", "conn=%llu unsent=%zu", (unsigned long long)c->id, pending);
	} else if ((c->flags & CONN_F_RD_PAUSED) && pending < CONN_OUT_LOW) {
		c->flags &= ~(unsigned)CONN_F_RD_PAUSED;
		/* a closing conn stopped reading for good */
		if (c->state != CONN_ST_READY)
			return;
		ev_io_start(c->env->loop, &c->rd);
		if (c->in_len && !ev_is_active(&c->timer)) {
			ev_timer_set(&c->timer, c->env->frame_timeout, 0.0);
			ev_timer_start(c->env->loop, &c->timer);
		}
	}
}

/* Write what is queued. Returns 0, or -1 when the conn was closed. */
static int conn_flush(struct conn *c)
{
	ssize_t n;

	while (c->out_off < c->out_len) {
		n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				ev_io_start(c->env->loop, &c->wr);
				conn_out_backpressure(c);
				return 0;
			}
			conn_close(c, "write error");
			return -1;
		}
		c->out_off += (size_t)n;
	}
	c->out_off = c->out_len = 0;
	ev_io_stop(c->env->loop, &c->wr);
	conn_out_backpressure(c);
	if (c->out_cap > CONN_SHRINK_ABOVE) {
		free(c->out);
		c->out = NULL;
		c->out_cap = 0;
	}
	if (c->state == CONN_ST_CLOSING) {
		conn_close(c, (c->flags & CONN_F_HEALTHCHECK) ? "healthcheck done" : "disconnected");
		return -1;
	}
	return 0;
}

static void conn_on_write(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	conn_flush(w->data);
}

static void conn_on_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct conn *c = w->data;

	(void)loop;
	(void)revents;
	switch (c->state) {
	case CONN_ST_HELLO:
		conn_protocol_error(c, SPOP_ST_TIMEOUT, "no HELLO in time");
		break;
	case CONN_ST_READY:
		conn_protocol_error(c, SPOP_ST_TIMEOUT, "partial frame stalled");
		break;
	default:
		conn_close(c, "closing timed out");
		return;
	}
	/* the DISCONNECT above is flushed by the next prepare */
}

void conn_env_flush(struct conn_env *env)
{
	struct conn *c;

	while ((c = env->flush_head)) {
		env->flush_head = c->flush_next;
		c->flush_next = NULL;
		c->flags &= ~(unsigned)CONN_F_IN_FLUSH;
		conn_flush(c);
	}
}

/* Close <c> now: requests in flight are orphaned (their late decisions are
 * dropped), buffers and the fd released. */
static void conn_close(struct conn *c, const char *why)
{
	struct conn_env *env = c->env;
	struct conn_req *r;
	struct conn **pp;

	if (c->flags & CONN_F_WAS_READY)
		log_info("conn_close", "conn=%llu reason=\"%s\" inflight=%u",
		         (unsigned long long)c->id, why, c->inflight);
	else
		log_debug("conn_close", "conn=%llu state=%s reason=\"%s\" inflight=%u",
		          (unsigned long long)c->id, conn_state_str(c->state), why, c->inflight);
	ev_io_stop(env->loop, &c->rd);
	ev_io_stop(env->loop, &c->wr);
	ev_timer_stop(env->loop, &c->timer);
	close(c->fd);
	for (r = c->reqs; r; r = r->next)
		r->conn = NULL;
	if (c->flags & CONN_F_IN_FLUSH) {
		for (pp = &env->flush_head; *pp; pp = &(*pp)->flush_next) {
			if (*pp == c) {
				*pp = c->flush_next;
				break;
			}
		}
	}
	if (c->prev)
		c->prev->next = c->next;
	else
		env->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	env->nconns--;
	if (env->metrics)
		metrics_sub(&env->metrics->conn_open, 1);
	free(c->in);
	free(c->out);
	free(c);
	if (env->draining && env->nconns == 0 && env->on_idle)
		env->on_idle(env);
}

int conn_accept(struct conn_env *env, int fd)
{
	struct conn *c = calloc(1, sizeof(*c));

	if (!c) {
		close(fd);
		return -1;
	}
	c->env = env;
	c->fd = fd;
	c->id = ++conn_next_id;
	c->state = CONN_ST_HELLO;
	c->max_frame = CONN_PRE_HELLO_MAX;
	ev_io_init(&c->rd, conn_on_read, fd, EV_READ);
	ev_io_init(&c->wr, conn_on_write, fd, EV_WRITE);
	ev_timer_init(&c->timer, conn_on_timer, env->hello_timeout, 0.0);
	c->rd.data = c->wr.data = c->timer.data = c;
	c->next = env->conns;
	if (env->conns)
		env->conns->prev = c;
	env->conns = c;
	env->nconns++;
	if (env->metrics) {
		metrics_add(&env->metrics->conn_accepted, 1);
		metrics_add(&env->metrics->conn_open, 1);
	}
	ev_io_start(env->loop, &c->rd);
	ev_timer_start(env->loop, &c->timer);
	log_debug("conn_open", "conn=%llu fd=%d", (unsigned long long)c->id, fd);
	return 0;
}

void conn_env_drain(struct conn_env *env)
{
	struct conn *c, *next;

	env->draining = true;
	for (c = env->conns; c; c = next) {
		next = c->next;
		if (c->state == CONN_ST_HELLO) {
			conn_close(c, "draining");
			continue;
		}
		/* a NOTIFY HAProxy already sent is in flight for HAProxy: take it in
		 * before calling the connection idle */
		if (c->state == CONN_ST_READY && conn_read_some(c) == -1)
			continue;
		if (c->state == CONN_ST_READY && c->inflight == 0)
			conn_send_disconnect(c, SPOP_ST_NORMAL, "agent is shutting down");
	}
	if (env->nconns == 0 && env->on_idle)
		env->on_idle(env);
}

void conn_env_close_all(struct conn_env *env)
{
	struct conn *c, *next;
	struct conn_req *r;

	for (c = env->conns; c; c = next) {
		next = c->next;
		conn_close(c, "shutdown");
	}
	while ((r = env->free_reqs)) {
		env->free_reqs = r->next;
		free(r);
	}
	env->nfree_reqs = 0;
}

void conn_refuse(int fd, unsigned status, const char *msg)
{
	unsigned char buf[256];
	int n = spop_encode_agent_disconnect(buf, sizeof(buf), status, msg);

	if (n > 0 && send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) == -1) {
		/* best effort: the peer learns from the close anyway */
	}
	close(fd);
}
