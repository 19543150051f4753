/*
 * spoa-floor - the SPOE floor of make bench: an SPOP agent that answers every
 * NOTIFY at once with the fixed variables of an allowed request and does no
 * other I/O (no Redis, no config, no logs, no metrics).
 *
 * HAProxy -> spoa-floor costs what SPOE itself costs: the filter, the frames,
 * the variables the rules read. What the project adds over it is the agent's
 * decision work and Redis. It is built from the agent's own codec
 * (spoa/spop/spop.c, spoa/spop/spop_write.c) and reads and writes the way the agent
 * does (one read per readable event, every whole frame in it answered, one
 * write per batch), so it is a floor for the agent, not a different design.
 *
 * A bench-only program: make builds it, make install never installs it, and
 * nothing in the agent's configuration can turn the agent into it.
 *
 * Usage: spoa-floor -a 127.0.0.1:PORT [-s]    (-s: set "status" only, to
 * see what the other variables and the header rules using them cost)
 *
 * The variables, as the agent sets them for "transfer 20/1s", allowed:
 *   status=allow limit=20 remaining=19 reset=1 window=1
 *   policy_hdr="transfer";q=20;w=1  ratelimit_hdr="transfer";r=19;t=1
 */
#include <errno.h>
#include <stddef.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <ev.h>

#include "spop.h"

#define FLOOR_IN_CAP    (64u * 1024u)   /* HAProxy's frames are <= 16 KiB */
#define FLOOR_OUT_CAP   (256u * 1024u)
#define FLOOR_ACK_ROOM  512u            /* one ACK with every variable fits */
#define FLOOR_MAX_FRAME 16380u

struct floor_conn {
	ev_io rw;                   /* first: the watcher is the connection */
	ev_io ww;
	struct floor_conn *prev, *next;     /* every open one, freed at exit */
	int fd;
	bool hello_done;
	bool closing;               /* flush what is queued, then close */
	uint32_t max_frame;
	size_t in_len;
	size_t out_len;
	size_t out_off;
	unsigned char in[FLOOR_IN_CAP];
	unsigned char out[FLOOR_OUT_CAP];
};

static bool floor_status_only;
static struct floor_conn *floor_conns;

/* Frees <c> (owned by the loop's watchers since floor_on_accept()). */
static void floor_conn_close(struct ev_loop *loop, struct floor_conn *c)
{
	ev_io_stop(loop, &c->rw);
	ev_io_stop(loop, &c->ww);
	close(c->fd);
	if (c->prev)
		c->prev->next = c->next;
	else
		floor_conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	free(c);
}

/* Write what is queued. Returns 0 when all of it went (or the peer is slow:
 * the write watcher takes over), -1 when the connection is dead. */
static int floor_conn_flush(struct ev_loop *loop, struct floor_conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				ev_io_start(loop, &c->ww);
				return 0;
			}
			return -1;
		}
		c->out_off += (size_t)n;
	}
	c->out_off = c->out_len = 0;
	ev_io_stop(loop, &c->ww);
	return 0;
}

/* The fixed ACK for one NOTIFY, appended to <c>'s output. Returns 0 or -1. */
static int floor_put_ack(struct floor_conn *c, uint64_t sid, uint64_t fid)
{
	static const char pol[] = "\"transfer\";q=20;w=1";
	static const char cur[] = "\"transfer\";r=19;t=1";
	struct spop_writer a;
	int n;

	if (FLOOR_OUT_CAP - c->out_len < FLOOR_ACK_ROOM)
		return -1;
	spop_ack_begin(&a, c->out + c->out_len, FLOOR_ACK_ROOM, sid, fid);
	spop_ack_set_str(&a, SPOP_SCOPE_TXN, "status", "allow", 5);
	if (!floor_status_only) {
		spop_ack_set_int(&a, SPOP_SCOPE_TXN, "limit", 20);
		spop_ack_set_int(&a, SPOP_SCOPE_TXN, "remaining", 19);
		spop_ack_set_int(&a, SPOP_SCOPE_TXN, "reset", 1);
		spop_ack_set_int(&a, SPOP_SCOPE_TXN, "window", 1);
		spop_ack_set_str(&a, SPOP_SCOPE_TXN, "policy_hdr", pol, sizeof(pol) - 1);
		spop_ack_set_str(&a, SPOP_SCOPE_TXN, "ratelimit_hdr", cur, sizeof(cur) - 1);
	}
	n = spop_ack_end(&a);
	if (n < 0)
		return -1;
	c->out_len += (size_t)n;
	return 0;
}

/* Answer one decoded frame. Returns 0, or -1 to drop the connection. */
static int floor_on_frame(struct floor_conn *c, const struct spop_frame *f)
{
	int n;

	switch (f->hdr.type) {
	case SPOP_FRAME_HAPROXY_HELLO:
		if (c->hello_done || !f->u.hello.version_ok || !f->u.hello.has_max_frame_size)
			return -1;
		c->max_frame = f->u.hello.max_frame_size < FLOOR_MAX_FRAME
			? f->u.hello.max_frame_size : FLOOR_MAX_FRAME;
		n = spop_encode_agent_hello(c->out + c->out_len, FLOOR_OUT_CAP - c->out_len,
		                            c->max_frame, f->u.hello.cap_pipelining);
		if (n < 0)
			return -1;
		c->out_len += (size_t)n;
		c->hello_done = true;
		c->closing = f->u.hello.healthcheck;
		return 0;
	case SPOP_FRAME_HAPROXY_DISCONNECT:
		n = spop_encode_agent_disconnect(c->out + c->out_len, FLOOR_OUT_CAP - c->out_len,
		                                 SPOP_ST_NORMAL, "normal");
		if (n < 0)
			return -1;
		c->out_len += (size_t)n;
		c->closing = true;
		return 0;
	case SPOP_FRAME_NOTIFY:
		if (!c->hello_done)
			return -1;
		return floor_put_ack(c, f->hdr.stream_id, f->hdr.frame_id);
	default:
		return -1;
	}
}

/* One read, every whole frame in the buffer answered, one write. */
static void floor_on_read(struct ev_loop *loop, ev_io *w, int revents)
{
	struct floor_conn *c = (struct floor_conn *)w;
	size_t off = 0;
	ssize_t n;

	(void)revents;
	n = read(c->fd, c->in + c->in_len, FLOOR_IN_CAP - c->in_len);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0)
		goto drop;
	c->in_len += (size_t)n;
	while (!c->closing) {
		struct spop_frame f;
		enum spop_status st;
		int used = spop_decode_frame(c->in + off, c->in_len - off,
		                             c->hello_done ? c->max_frame : FLOOR_MAX_FRAME, &f, &st);

		if (used < 0 || (used > 0 && floor_on_frame(c, &f) < 0))
			goto drop;
		if (used == 0)
			break;
		off += (size_t)used;
	}
	memmove(c->in, c->in + off, c->in_len - off);
	c->in_len -= off;
	if (floor_conn_flush(loop, c) < 0 || (c->closing && c->out_len == 0))
		goto drop;
	if (c->closing)
		ev_io_stop(loop, &c->rw);
	return;
drop:
	floor_conn_close(loop, c);
}

static void floor_on_write(struct ev_loop *loop, ev_io *w, int revents)
{
	struct floor_conn *c = (struct floor_conn *)((char *)w - offsetof(struct floor_conn, ww));

	(void)revents;
	if (floor_conn_flush(loop, c) < 0 || (c->closing && c->out_len == 0))
		floor_conn_close(loop, c);
}

/* Allocates a struct floor_conn per connection; floor_conn_close() frees it. */
static void floor_on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
	int one = 1;
	struct floor_conn *c;
	int fd;

	(void)revents;
	fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return;
	c = malloc(sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	memset(c, 0, offsetof(struct floor_conn, in));
	c->fd = fd;
	c->next = floor_conns;
	if (floor_conns)
		floor_conns->prev = c;
	floor_conns = c;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	ev_io_init(&c->rw, floor_on_read, fd, EV_READ);
	ev_io_init(&c->ww, floor_on_write, fd, EV_WRITE);
	ev_io_start(loop, &c->rw);
}

static void floor_on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
	(void)w;
	(void)revents;
	ev_break(loop, EVBREAK_ALL);
}

/* Parses "host:port" (IPv4 literal) into <sa>. Returns 0 or -1. */
static int floor_parse_addr(const char *s, struct sockaddr_in *sa)
{
	const char *colon = strrchr(s, ':');
	char host[64];
	char *end;
	long port;

	if (!colon || (size_t)(colon - s) >= sizeof(host))
		return -1;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	port = strtol(colon + 1, &end, 10);
	if (*end || port <= 0 || port > 65535)
		return -1;
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa;
	struct ev_loop *loop = EV_DEFAULT;
	ev_io accept_w;
	ev_signal sig_term, sig_int;
	const char *addr = NULL;
	struct floor_conn *c, *next;
	int opt, fd, one = 1;

	while ((opt = getopt(argc, argv, "a:sh")) != -1) {
		switch (opt) {
		case 'a': addr = optarg; break;
		case 's': floor_status_only = true; break;
		default:
			fprintf(stderr, "usage: %s -a 127.0.0.1:PORT [-s]\n"
			        "  the SPOE floor of make bench: answers every NOTIFY with fixed\n"
			        "  variables (-s: status only), no other I/O. Bench only.\n", argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	if (!addr || floor_parse_addr(addr, &sa) < 0) {
		fprintf(stderr, "spoa-floor: -a 127.0.0.1:PORT is required (IPv4 literal)\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 1024) < 0) {
		fprintf(stderr, "spoa-floor: listen on %s: %s\n", addr, strerror(errno));
		return 1;
	}
	ev_io_init(&accept_w, floor_on_accept, fd, EV_READ);
	ev_io_start(loop, &accept_w);
	ev_signal_init(&sig_term, floor_on_signal, SIGTERM);
	ev_signal_start(loop, &sig_term);
	ev_signal_init(&sig_int, floor_on_signal, SIGINT);
	ev_signal_start(loop, &sig_int);
	ev_run(loop, 0);
	for (c = floor_conns; c; c = next) {
		next = c->next;
		floor_conn_close(loop, c);
	}
	close(fd);
	return 0;
}
