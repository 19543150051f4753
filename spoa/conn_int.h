/*
 * conn_int - what conn.c (the transport) and conn_notify.c (NOTIFY ->
 * decisions -> ACK) share, and nobody else includes.
 */
#ifndef SPOA_CONN_INT_H
#define SPOA_CONN_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ev.h>

#include "conn.h"
#include "headers.h"
#include "metrics.h"
#include "spop.h"

#define CONN_IN_INIT      1024u            /* enough for HELLO and NOTIFYs */
#define CONN_OUT_INIT     1024u
#define CONN_SHRINK_ABOVE (64u * 1024u)    /* give back big buffers when idle */
#define CONN_PRE_HELLO_MAX 16380u          /* HAProxy's default, before negotiation */
/* an ACK with every variable fits */
#define CONN_ACK_ROOM     (512u + HEADERS_POLICY_MAX + HEADERS_RATELIMIT_MAX)
#define CONN_REQ_POOL_MAX 4096u            /* recycled requests kept per worker */
#define CONN_REQ_POOL_LOW 64u              /* ... and kept after a burst */
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
	unsigned inflight;              /* NOTIFYs waiting for decisions */
	unsigned decisions;             /* their "ratelimit" messages (max-inflight) */
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
	unsigned nmsgs;                 /* counted in conn->decisions */
	const struct window_policy *policy; /* first message's, for metrics */
	uint64_t read_us;               /* monotonic, when the NOTIFY was read */
	const struct window_limit *lim; /* its limits for the key (borrowed from cfg) */
	unsigned nwin;
	unsigned nasked;                /* messages handed to the limiter */
	struct window_decision acc;
	struct conn_req *prev, *next;
};

/* conn.c: the output buffer and the ways a connection ends. */
int conn_out_reserve(struct conn *c, size_t need);
void conn_want_flush(struct conn *c);
void conn_count_out(struct conn *c, enum metrics_frame_out type);
void conn_send_disconnect(struct conn *c, unsigned status, const char *msg);
void conn_protocol_error(struct conn *c, enum spop_status st, const char *what);

/* conn_notify.c: one NOTIFY frame of <c>. */
void conn_handle_notify(struct conn *c, const struct spop_frame *f);

#endif /* SPOA_CONN_INT_H */
