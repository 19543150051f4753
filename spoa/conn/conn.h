/*
 * conn - one HAProxy connection in two layers: the transport (conn.c: the
 * SPOP state machine, HELLO, buffers, reads, coalesced writes, timers,
 * lifecycle) and above it the NOTIFY side (conn_notify.[ch]: a NOTIFY's
 * message checked and handed to the limiter, its decision, the ACK).
 *
 * Calls run one way. The NOTIFY side calls the transport by name
 * (conn_int.h): it writes an ACK between conn_out_begin() and
 * conn_out_commit() and may end the connection. The transport never names
 * the NOTIFY side: it reaches it through env->upper, one table of
 * callbacks (struct conn_upper), and env->upper_ctx, that layer's own
 * state, as memcached's connection hands a command to its protocol or
 * HAProxy's SPOP mux hands a frame to the SPOE filter. This header knows
 * frames and connections only: what a decision needs (the limiter, the
 * configuration, live control, denial counts) is the NOTIFY side's
 * (conn_notify.h). struct conn is private to conn.c.
 *
 * Callbacks are thin: the read callback only moves bytes into the input
 * buffer and calls conn_process(), which decodes frames and is the one place
 * that changes a connection's state (conn_set_state). Writes are coalesced:
 * frames are appended to the output buffer and flushed once per loop
 * iteration by the owner's prepare watcher (conn_env_flush), so ACKs that
 * complete in the same iteration leave in one write(2).
 */
#ifndef SPOA_CONN_H
#define SPOA_CONN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ev_loop;
struct metrics;
struct conn;
struct spop_frame;

/*
 * The layer above the transport, as conn.c sees it: the only way conn.c
 * reaches the NOTIFY side (conn_notify_upper), or a fake in tests. <ctx>
 * is env->upper_ctx, the layer's state for all connections; <st> is what
 * open() returned for one connection; the layer owns both.
 */
struct conn_upper {
	/* A connection <c> was accepted: its state, or NULL (out of memory:
	 * the connection is refused). */
	void *(*open)(void *ctx, struct conn *c);
	/* One NOTIFY frame <f> on a connection past its HELLO. */
	void (*notify)(void *st, const struct spop_frame *f);
	/* NOTIFYs read and not answered yet (a draining conn waits for 0). */
	unsigned (*inflight)(const void *st);
	/* The connection is gone: <st> writes nothing more to it, and keeps
	 * its requests in flight until their decisions come (then frees
	 * itself), or until env_close(). */
	void (*close)(void *st);
	/* Every connection closed: free the layer's pools. Requests still in
	 * flight stay until their decisions come (each frees itself). */
	void (*env_close)(void *ctx);
};

/* Everything a worker shares with its connections. Owned by the worker. */
struct conn_env {
	struct ev_loop *loop;
	const struct conn_upper *upper; /* the NOTIFY side (conn_notify_upper) */
	void *upper_ctx;                /* ... and its state (struct conn_notify_env) */
	struct metrics *metrics;        /* frames and connections counted, may be NULL */
	bool draining;
	unsigned nconns;
	/* Connections of the whole process, counted by the acceptor before it
	 * hands a socket over (max-connections): every socket given to
	 * conn_accept() is released here when it closes. May be NULL. */
	_Atomic unsigned *admitted;
	struct conn *conns;             /* all open connections (conn.c) */
	struct conn *flush_head;        /* connections with output to send (conn.c) */
	double hello_timeout;           /* seconds to receive HAPROXY-HELLO */
	double frame_timeout;           /* seconds a partial frame may stall */
	void (*on_idle)(struct conn_env *env); /* last conn closed while draining */
};

enum conn_state {
	CONN_ST_HELLO = 0,      /* waiting for HAPROXY-HELLO */
	CONN_ST_READY,          /* NOTIFY/ACK */
	CONN_ST_CLOSING,        /* flushing a final frame, then close */
	CONN_ST_COUNT
};

const char *conn_state_str(enum conn_state s);

/* Take ownership of connected, non-blocking socket <fd>, counted in
 * env->admitted (released when it closes). Returns 0, or -1 (the fd is
 * closed and released). */
int conn_accept(struct conn_env *env, int fd);

/* Send AGENT-DISCONNECT <status>/<msg> to every connection without requests
 * in flight and close it; the others close as soon as their last ACK left.
 * Sets env->draining. */
void conn_env_drain(struct conn_env *env);

/* Write what every connection has queued (called once per loop iteration). */
void conn_env_flush(struct conn_env *env);

/* Close every connection at once, then env->upper->env_close() (the
 * NOTIFY side frees its request pool; requests in flight free themselves
 * when answered). */
void conn_env_close_all(struct conn_env *env);

/* A connection that never saw HELLO but must be refused (over the limit):
 * write AGENT-DISCONNECT <status> on <fd> best-effort, then close it. */
void conn_refuse(int fd, unsigned status, const char *msg);

/* Give back one of <admitted> (a socket counted by the acceptor was closed
 * without ever being a connection). <admitted> may be NULL. */
void conn_release(_Atomic unsigned *admitted);

#endif /* SPOA_CONN_H */
