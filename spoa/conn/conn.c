/*
 * conn - one HAProxy connection: the SPOP state machine, HELLO, buffers,
 * reads, coalesced writes, timers and lifecycle (the transport). What a
 * NOTIFY asks and the ACK that answers it are the layer above
 * (conn_notify.c), reached only through env->upper. See conn.h for the
 * model.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>

#include "config.h"
#include "conn.h"
#include "conn_int.h"
#include "log.h"
#include "metrics.h"
#include "spop.h"

#define CONN_IN_INIT      1024u            /* enough for HELLO and NOTIFYs */
#define CONN_OUT_INIT     1024u
#define CONN_SHRINK_ABOVE (64u * 1024u)    /* give back big buffers when idle */
#define CONN_PRE_HELLO_MAX 16380u          /* HAProxy's default, before negotiation */
#define CONN_OUT_HIGH     (256u * 1024u)   /* unsent bytes that pause reading */
#define CONN_OUT_LOW      (64u * 1024u)    /* ... and that resume it */
#define CONN_LOG_PEER_STR 128u             /* bytes of a peer's string logged */

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
	uint64_t id;                    /* for logs */
	void *up;                       /* env->upper's state for this conn */

	ev_io rd;
	ev_io wr;
	ev_timer timer;                 /* hello / stalled-frame / closing deadline */

	unsigned char *in;
	size_t in_len, in_cap;
	unsigned char *out;
	size_t out_len, out_off, out_cap;

	struct conn *prev, *next;       /* env->conns */
	struct conn *flush_next;        /* env->flush_head */
};

/* Shared by every worker thread: ids stay unique across the process. */
static _Atomic uint64_t conn_next_id;

static void conn_on_read(struct ev_loop *loop, ev_io *w, int revents);
static void conn_on_write(struct ev_loop *loop, ev_io *w, int revents);
static void conn_on_timer(struct ev_loop *loop, ev_timer *w, int revents);
static void conn_close(struct conn *c, const char *why);
static int conn_read_some(struct conn *c);

uint64_t conn_id(const struct conn *c)
{
	return c->id;
}

uint32_t conn_max_frame(const struct conn *c)
{
	return c->max_frame;
}

bool conn_is_ready(const struct conn *c)
{
	return c->state == CONN_ST_READY;
}

bool conn_is_draining(const struct conn *c)
{
	return c->env->draining;
}

/* NOTIFYs of <c> the layer above has not answered yet. */
static unsigned conn_inflight(const struct conn *c)
{
	return c->env->upper->inflight(c->up);
}

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

/* Make room for <need> more bytes in the output buffer (owned by <c>,
 * grown with realloc). Returns 0 or -1. */
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

/* Borrows <c>'s output buffer for one frame; see conn_int.h. */
unsigned char *conn_out_begin(struct conn *c, size_t need, size_t *cap)
{
	if (conn_out_reserve(c, need) == -1)
		return NULL;
	*cap = c->out_cap - c->out_len;
	return c->out + c->out_len;
}

void conn_out_commit(struct conn *c, size_t n, enum metrics_frame_out type)
{
	c->out_len += n;
	conn_count_out(c, type);
	conn_want_flush(c);
}

/* Queue AGENT-DISCONNECT and move to CLOSING: the conn closes once it left. */
void conn_send_disconnect(struct conn *c, unsigned status, const char *msg)
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

/* ------------------------------------------------------------- frames */

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
	if (log_enabled(CONFIG_LOG_INFO)) {
		char eng[LOG_QUOTED_MAX(CONN_LOG_PEER_STR)];

		log_info("spop_hello", "conn=%llu max_frame_size=%u pipelining=%d engine=%s",
		         (unsigned long long)c->id, max, h->cap_pipelining ? 1 : 0,
		         log_quote(eng, sizeof(eng), h->engine_id.ptr, h->engine_id.len));
	}
	c->flags |= CONN_F_WAS_READY;
	conn_set_state(c, CONN_ST_READY);
	if (c->env->draining && conn_inflight(c) == 0)
		conn_send_disconnect(c, SPOP_ST_NORMAL, "agent is shutting down");
}

/* Log HAPROXY-DISCONNECT <d> of <c>: its message is the peer's, so quoted. */
static void conn_log_disconnect(const struct conn *c, const struct spop_disconnect *d)
{
	char msg[LOG_QUOTED_MAX(CONN_LOG_PEER_STR)];

	if (!log_enabled(CONFIG_LOG_INFO))
		return;
	log_info("spop_disconnect_received", "conn=%llu status=%u message=%s",
	         (unsigned long long)c->id, d->status,
	         log_quote(msg, sizeof(msg), d->message.ptr, d->message.len));
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
			if (c->state != CONN_ST_READY)
				conn_protocol_error(c, SPOP_ST_INVALID, "NOTIFY before HELLO");
			else
				c->env->upper->notify(c->up, &f);
			break;
		case SPOP_FRAME_HAPROXY_DISCONNECT:
			conn_log_disconnect(c, &f.u.disconnect);
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

/* Close <c> now and free it: the layer above keeps its requests in flight
 * until their decisions come (which it then drops), buffers and the fd are
 * released. */
static void conn_close(struct conn *c, const char *why)
{
	struct conn_env *env = c->env;
	struct conn **pp;

	if (c->flags & CONN_F_WAS_READY)
		log_info("conn_close", "conn=%llu reason=\"%s\" inflight=%u",
		         (unsigned long long)c->id, why, conn_inflight(c));
	else
		log_debug("conn_close", "conn=%llu state=%s reason=\"%s\" inflight=%u",
		          (unsigned long long)c->id, conn_state_str(c->state), why, conn_inflight(c));
	ev_io_stop(env->loop, &c->rd);
	ev_io_stop(env->loop, &c->wr);
	ev_timer_stop(env->loop, &c->timer);
	close(c->fd);
	env->upper->close(c->up);
	c->up = NULL;
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
	conn_release(env->admitted);
	if (env->metrics)
		metrics_sub(&env->metrics->conn_open, 1);
	free(c->in);
	free(c->out);
	free(c);
	if (env->draining && env->nconns == 0 && env->on_idle)
		env->on_idle(env);
}

/* Takes <fd>; the conn it makes is owned by <env> until conn_close(). */
int conn_accept(struct conn_env *env, int fd)
{
	struct conn *c = calloc(1, sizeof(*c));

	if (!c || !(c->up = env->upper->open(env->upper_ctx, c))) {
		free(c);
		close(fd);
		conn_release(env->admitted);
		return -1;
	}
	c->env = env;
	c->fd = fd;
	c->id = atomic_fetch_add_explicit(&conn_next_id, 1, memory_order_relaxed) + 1;
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
		if (c->state == CONN_ST_READY && conn_inflight(c) == 0)
			conn_send_disconnect(c, SPOP_ST_NORMAL, "agent is shutting down");
	}
	if (env->nconns == 0 && env->on_idle)
		env->on_idle(env);
}

void conn_env_close_all(struct conn_env *env)
{
	struct conn *c, *next;

	for (c = env->conns; c; c = next) {
		next = c->next;
		conn_close(c, "shutdown");
	}
	env->upper->env_close(env->upper_ctx);
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

void conn_release(_Atomic unsigned *admitted)
{
	if (admitted)
		atomic_fetch_sub_explicit(admitted, 1, memory_order_relaxed);
}
