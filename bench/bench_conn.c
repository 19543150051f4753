/*
 * spoa-bench: the connections of one client thread. Open, HELLO, keep
 * --depth NOTIFYs in flight, match the ACKs, goodbye, close; every error is
 * counted in the thread and the first one kept for the report.
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>

#include "bench.h"
#include "spop.h"

/* Remember the first error of thread <t>: the text in <msg> is what the
 * user sees at the end. */
void bench_thread_error(struct bench_thread *t, const char *msg)
{
	if (t->err[0] == '\0')
		snprintf(t->err, sizeof(t->err), "%s", msg);
}

static void bench_conn_on_read(struct ev_loop *loop, ev_io *w, int revents);
static void bench_conn_on_write(struct ev_loop *loop, ev_io *w, int revents);

/* Close <c> for good. <why> is NULL for a planned close; otherwise the
 * connection failed and the thread records why. */
void bench_conn_close(struct bench_conn *c, const char *why)
{
	struct bench_thread *t = c->t;

	if (c->state == BENCH_CONN_ST_CLOSED || c->state == BENCH_CONN_ST_INIT) {
		c->state = BENCH_CONN_ST_CLOSED;
		return;
	}
	if (c->state == BENCH_CONN_ST_CONNECTING || c->state == BENCH_CONN_ST_HELLO) {
		t->opening--;
		t->failed++;
	} else if (c->state == BENCH_CONN_ST_READY) {
		t->ready--;
	}
	ev_io_stop(t->loop, &c->rd);
	ev_io_stop(t->loop, &c->wr);
	close(c->fd);
	c->fd = -1;
	c->state = BENCH_CONN_ST_CLOSED;
	if (why != NULL) {
		char msg[BENCH_ERR_LEN];

		snprintf(msg, sizeof(msg), "connection %u: %s", (unsigned)(c - t->conns), why);
		bench_thread_error(t, msg);
		t->conn_errors++;
	}
	if (!c->idle) {
		/* what was in flight will never be answered */
		t->lost += t->o->depth - c->nfree;
		t->inflight -= t->o->depth - c->nfree;
		c->nfree = t->o->depth;
	}
}

/* A protocol violation on <c>: count it, close, and stop the whole run
 * (numbers measured against a broken peer are meaningless). */
static void bench_conn_protocol_error(struct bench_conn *c, const char *why)
{
	struct bench_thread *t = c->t;
	char msg[BENCH_ERR_LEN];

	snprintf(msg, sizeof(msg), "connection %u: %s", (unsigned)(c - t->conns), why);
	bench_thread_error(t, msg);
	t->proto_errors++;
	bench_conn_close(c, NULL);
	atomic_store_explicit(&bench_abort, true, memory_order_relaxed);
}

/* Write what <c> has buffered; arms the write watcher on a short write.
 * Returns 0 or -1 (connection closed). */
static int bench_conn_flush(struct bench_conn *c)
{
	while (c->woff < c->wlen) {
		ssize_t n = write(c->fd, c->wbuf + c->woff, c->wlen - c->woff);

		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				ev_io_start(c->t->loop, &c->wr);
				return 0;
			}
			bench_conn_close(c, strerror(errno));
			return -1;
		}
		c->woff += (size_t)n;
	}
	c->woff = 0;
	c->wlen = 0;
	ev_io_stop(c->t->loop, &c->wr);
	return 0;
}

/* Move what <c> has not written yet to the front of its write buffer, so
 * that its room is the whole rest of it. */
static void bench_conn_compact(struct bench_conn *c)
{
	if (c->woff > 0) {
		memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
		c->wlen -= c->woff;
		c->woff = 0;
	}
}

/* May thread <t> send one more NOTIFY? */
static bool bench_may_send(const struct bench_thread *t)
{
	if (t->phase != BENCH_PHASE_LOAD)
		return false;
	if (t->o->requests > 0 && t->quota == 0)
		return false;
	return true;
}

/* Fill every free slot of <c> with a new NOTIFY, then write. */
void bench_conn_fill(struct bench_conn *c)
{
	struct bench_thread *t = c->t;
	const struct bench_opts *o = t->o;
	uint64_t now;
	int n;

	if (c->state != BENCH_CONN_ST_READY || c->idle || c->nfree == 0 || !bench_may_send(t))
		return;
	bench_conn_compact(c);
	now = bench_now_ns();
	while (c->nfree > 0 && bench_may_send(t)) {
		unsigned slot = c->free_slots[c->nfree - 1];
		char key[BENCH_KEY_MAX];
		size_t klen = bench_pick_key(t, key);
		/* stream-id = seq * depth + slot + 1: unique on the conn, never 0
		 * (3.x refuses sid 0), and it names its slot, so an ACK finds
		 * its NOTIFY in O(1) whatever order it comes back in */
		uint64_t sid = c->seq * o->depth + slot + 1;

		n = bench_enc_notify(c->wbuf + c->wlen, c->wcap - c->wlen, o, sid, key, klen);
		if (n == -1) {
			/* cannot happen: wcap holds depth NOTIFYs of maximum size */
			bench_conn_protocol_error(c, "internal: write buffer overflow");
			return;
		}
		c->wlen += (size_t)n;
		c->nfree--;
		c->seq++;
		c->slots[slot].busy = true;
		c->slots[slot].stream_id = sid;
		c->slots[slot].t0_ns = now;
		if (o->done) {
			memcpy(c->keys + (size_t)slot * BENCH_KEY_MAX, key, klen);
			c->slots[slot].key_len = (uint16_t)klen;
			c->slots[slot].done = false;
		}
		t->inflight++;
		t->sent++;
		if (o->requests > 0)
			t->quota--;
		/* HAProxy 3.x sends each NOTIFY as soon as it is queued */
		if (o->split && bench_conn_flush(c) == -1)
			return;
	}
	bench_conn_flush(c);
}

/* The ACK of slot <slot> of <c> allowed a request that holds <lease>:
 * send its ratelimit-done in a NOTIFY of its own (a new stream-id, that
 * names the same slot), as HAProxy does at the response; the slot stays
 * busy until that is acknowledged. Written with the next flush. Returns 0
 * or -1 (connection closed). */
static int bench_conn_send_done(struct bench_conn *c, unsigned slot, struct spop_str lease)
{
	struct bench_thread *t = c->t;
	const struct bench_opts *o = t->o;
	struct bench_slot *s = &c->slots[slot];
	uint64_t sid = c->seq * o->depth + slot + 1;
	int n;

	bench_conn_compact(c);
	n = bench_enc_done(c->wbuf + c->wlen, c->wcap - c->wlen, o, sid,
	                   c->keys + (size_t)slot * BENCH_KEY_MAX, s->key_len, lease.ptr);
	if (n == -1) {
		/* cannot happen: a slot has one unwritten frame at most, and
		 * wcap holds depth of the largest */
		bench_conn_protocol_error(c, "internal: write buffer overflow");
		return -1;
	}
	c->wlen += (size_t)n;
	c->seq++;
	s->stream_id = sid;
	s->done = true;
	t->done_sent++;
	return 0;
}

/* Handle decoded frame <f> on <c>, received at <now>. Returns 0, or -1
 * when the connection was closed. */
static int bench_conn_frame(struct bench_conn *c, const struct spop_frame *f, uint64_t now)
{
	struct bench_thread *t = c->t;
	const struct bench_opts *o = t->o;
	uint64_t sid = f->hdr.stream_id, fid = f->hdr.frame_id;
	char err[BENCH_ERR_LEN];

	switch (f->hdr.type) {
	case SPOP_FRAME_AGENT_HELLO:
		if (c->state != BENCH_CONN_ST_HELLO) {
			snprintf(err, sizeof(err), "AGENT-HELLO after the handshake");
			goto proto;
		}
		if (bench_check_agent_hello(&f->u.hello, o->max_frame_size, o->depth > 1 && !c->idle,
		                            &c->frame_max, err, sizeof(err)) == -1)
			goto proto;
		c->state = BENCH_CONN_ST_READY;
		t->opening--;
		t->ready++;
		if (t->phase == BENCH_PHASE_SETUP)
			bench_thread_open_more(t);
		return 0;
	case SPOP_FRAME_ACK: {
		unsigned slot;
		enum bench_status st;
		struct spop_str lease = { NULL, 0 };

		if (c->state != BENCH_CONN_ST_READY) {
			snprintf(err, sizeof(err), "ACK before AGENT-HELLO");
			goto proto;
		}
		slot = sid == 0 ? o->depth : (unsigned)((sid - 1) % o->depth);
		if (slot >= o->depth || !c->slots[slot].busy ||
		    c->slots[slot].stream_id != sid || fid != 1) {
			snprintf(err, sizeof(err), "ACK for unknown stream-id %" PRIu64
			         " frame-id %" PRIu64, sid, fid);
			goto proto;
		}
		if (now > t->end_ns)
			t->end_ns = now;
		if (c->slots[slot].done) {
			/* the end of a request under --done: its slot is free */
			c->slots[slot].busy = false;
			c->slots[slot].done = false;
			c->free_slots[c->nfree++] = slot;
			t->inflight--;
			t->done_acked++;
			return 0;
		}
		st = bench_ack_status(t, &f->u.ack, o->done ? &lease : NULL);
		bench_hist_record(&t->hist, now - c->slots[slot].t0_ns);
		t->acked++;
		t->status[st]++;
		if (o->done && st == BENCH_STATUS_ALLOW && lease.len == BENCH_LEASE_LEN)
			return bench_conn_send_done(c, slot, lease);
		c->slots[slot].busy = false;
		c->free_slots[c->nfree++] = slot;
		t->inflight--;
		return 0;
	}
	case SPOP_FRAME_AGENT_DISCONNECT: {
		uint32_t status = f->u.disconnect.status;
		struct spop_str msg = f->u.disconnect.message;

		snprintf(err, sizeof(err), "AGENT-DISCONNECT status %" PRIu32 " (%s): %.*s",
		         status, spop_status_str(status), (int)msg.len, msg.ptr ? msg.ptr : "");
		/* status 0 is the agent draining: normal for an idle conn,
		 * a lost connection for a loaded one; anything else is a
		 * complaint about what we sent */
		if (status == SPOP_ST_NORMAL) {
			if (c->idle)
				t->idle_closed++;
			bench_conn_close(c, c->idle ? NULL : err);
			return -1;
		}
		goto proto;
	}
	default:
		snprintf(err, sizeof(err), "unexpected frame type %d", (int)f->hdr.type);
		goto proto;
	}
proto:
	bench_conn_protocol_error(c, err);
	return -1;
}

/* Decode every complete frame in <c>'s read buffer. Returns 0, or -1 when
 * the connection was closed. */
static int bench_conn_process(struct bench_conn *c)
{
	size_t off = 0;
	uint64_t now = bench_now_ns();
	uint32_t max = c->state == BENCH_CONN_ST_READY ? c->frame_max : c->t->o->max_frame_size;

	while (off < c->rlen) {
		struct spop_frame f;
		enum spop_status st = SPOP_ST_INVALID;
		int r = spop_decode_frame(c->rbuf + off, c->rlen - off, max, &f, &st);

		if (r == -1) {
			char err[BENCH_ERR_LEN];

			snprintf(err, sizeof(err), "bad frame: %s", spop_status_str(st));
			bench_conn_protocol_error(c, err);
			return -1;
		}
		if (r == 0)
			break;
		if (bench_conn_frame(c, &f, now) == -1)
			return -1;
		off += (size_t)r;
	}
	if (off > 0) {
		memmove(c->rbuf, c->rbuf + off, c->rlen - off);
		c->rlen -= off;
	}
	return 0;
}

/* Readable: pull what the agent sent into <w>'s conn, handle every whole
 * frame, refill the freed slots. <loop> and <revents> are implied. */
static void bench_conn_on_read(struct ev_loop *loop, ev_io *w, int revents)
{
	struct bench_conn *c = w->data;
	ssize_t n;

	(void)loop;
	(void)revents;
	n = read(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen);
	if (n == -1) {
		if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
			return;
		bench_conn_close(c, strerror(errno));
		return;
	}
	if (n == 0) {
		if (c->idle && c->state == BENCH_CONN_ST_READY) {
			c->t->idle_closed++;
			bench_conn_close(c, NULL);
		} else {
			bench_conn_close(c, "closed by the agent");
		}
		return;
	}
	c->rlen += (size_t)n;
	if (bench_conn_process(c) == -1)
		return;
	bench_conn_fill(c);
	/* the ratelimit-done frames queued by the ACKs, when no new NOTIFY
	 * was written with them (drain, -n reached, every slot still busy) */
	if (c->t->o->done && c->state == BENCH_CONN_ST_READY && c->wlen > c->woff)
		bench_conn_flush(c);
}

/* Send the HAPROXY-HELLO on <c> now that it is connected. */
static void bench_conn_hello(struct bench_conn *c)
{
	int n = bench_enc_hello(c->wbuf, c->wcap, c->t->o->max_frame_size, &c->t->rng);

	/* cannot fail: wcap is at least 1 KiB, a HELLO about 100 bytes */
	c->wlen = n > 0 ? (size_t)n : 0;
	c->woff = 0;
	c->state = BENCH_CONN_ST_HELLO;
	ev_io_start(c->t->loop, &c->rd);
	bench_conn_flush(c);
}

/* Writable: finish the connect (then send HELLO) or the pending writes of
 * <w>'s conn. <loop> and <revents> are implied. */
static void bench_conn_on_write(struct ev_loop *loop, ev_io *w, int revents)
{
	struct bench_conn *c = w->data;

	(void)loop;
	(void)revents;
	if (c->state == BENCH_CONN_ST_CONNECTING) {
		int soerr = 0;
		socklen_t sl = sizeof(soerr);

		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == -1)
			soerr = errno;
		if (soerr != 0) {
			bench_conn_close(c, strerror(soerr));
			return;
		}
		ev_io_stop(c->t->loop, &c->wr);
		bench_conn_hello(c);
		return;
	}
	bench_conn_flush(c);
}

/* Start connecting <c> to the target. Returns 0 or -1 (counted as failed). */
static int bench_conn_open(struct bench_conn *c)
{
	struct bench_thread *t = c->t;
	const struct bench_opts *o = t->o;
	int fd, one = 1;

	fd = socket(o->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1) {
		bench_thread_error(t, strerror(errno));
		t->failed++;
		t->conn_errors++;
		c->state = BENCH_CONN_ST_CLOSED;
		return -1;
	}
	if (o->sa.ss_family != AF_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->fd = fd;
	c->state = BENCH_CONN_ST_CONNECTING;
	t->opening++;
	ev_io_init(&c->rd, bench_conn_on_read, fd, EV_READ);
	ev_io_init(&c->wr, bench_conn_on_write, fd, EV_WRITE);
	c->rd.data = c;
	c->wr.data = c;
	if (connect(fd, (const struct sockaddr *)&o->sa, o->salen) == -1 && errno != EINPROGRESS) {
		bench_conn_close(c, strerror(errno));
		return -1;
	}
	ev_io_start(t->loop, &c->wr);
	return 0;
}

/* Allocates <c>'s buffers and slot table (and with --done its slots' keys);
 * bench_conn_release() frees them.
 * Idle connections get small buffers: they only ever see AGENT-HELLO. */
int bench_conn_alloc(struct bench_conn *c, struct bench_thread *t, bool idle)
{
	const struct bench_opts *o = t->o;
	unsigned i;

	memset(c, 0, sizeof(*c));
	c->t = t;
	c->fd = -1;
	c->idle = idle;
	c->state = BENCH_CONN_ST_INIT;
	c->rcap = idle ? 4096u : 2u * ((size_t)o->max_frame_size + 4u);
	c->wcap = 1024u + (idle ? 0u : o->depth * bench_notify_max(o));
	c->rbuf = malloc(c->rcap);
	c->wbuf = malloc(c->wcap);
	if (!idle) {
		c->slots = calloc(o->depth, sizeof(*c->slots));
		c->free_slots = calloc(o->depth, sizeof(*c->free_slots));
		if (o->done)
			c->keys = malloc((size_t)o->depth * BENCH_KEY_MAX);
	}
	if (c->rbuf == NULL || c->wbuf == NULL ||
	    (!idle && (c->slots == NULL || c->free_slots == NULL || (o->done && c->keys == NULL))))
		return -1;
	if (!idle) {
		/* pop order 0, 1, 2...: the stack holds them reversed */
		for (i = 0; i < o->depth; i++)
			c->free_slots[i] = o->depth - 1 - i;
		c->nfree = o->depth;
	}
	return 0;
}

/* Frees what bench_conn_alloc() allocated in <c>. */
void bench_conn_release(struct bench_conn *c)
{
	free(c->rbuf);
	c->rbuf = NULL;
	free(c->wbuf);
	c->wbuf = NULL;
	free(c->slots);
	c->slots = NULL;
	free(c->keys);
	c->keys = NULL;
	free(c->free_slots);
	c->free_slots = NULL;
}

/* Say goodbye like HAProxy does on shutdown, best effort, and close. */
void bench_conn_goodbye(struct bench_conn *c)
{
	int n;

	if (c->state != BENCH_CONN_ST_READY)
		return;
	if (c->woff == c->wlen) {
		n = spop_encode_haproxy_disconnect(c->wbuf, c->wcap, SPOP_ST_NORMAL, "normal");
		if (n > 0 && write(c->fd, c->wbuf, (size_t)n) == -1) {
			/* the agent may already be gone: nothing to report */
		}
	}
	c->wlen = c->woff = 0;
	bench_conn_close(c, NULL);
}

/* Open connections of <t> until BENCH_MAX_OPENING are in progress, so that
 * 1,000 idle connections do not overflow the agent's listen backlog. */
void bench_thread_open_more(struct bench_thread *t)
{
	while (t->next_open < t->nconns && t->opening < BENCH_MAX_OPENING)
		bench_conn_open(&t->conns[t->next_open++]);
}
