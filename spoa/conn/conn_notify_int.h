/*
 * conn_notify_int - what the NOTIFY side's files share (conn_notify.c:
 * requests in, decisions asked; conn_ack.c: the ACK built), never included
 * outside spoa/conn/.
 */
#ifndef SPOA_CONN_NOTIFY_INT_H
#define SPOA_CONN_NOTIFY_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "conn.h"
#include "conn_notify.h"
#include "headers.h"
#include "stored.h"
#include "window.h"

/* One connection's NOTIFY side: owned here, from conn_notify_open() until
 * the connection closed and its last request finished. */
struct conn_notify {
	struct conn_notify_env *ne;
	struct conn *conn;              /* NULL once the connection closed */
	struct conn_req *reqs;          /* in flight, doubly linked; owned */
	unsigned inflight;              /* NOTIFYs waiting for decisions */
	unsigned decisions;             /* their "ratelimit" messages (max-inflight) */
	struct conn_notify *prev, *next; /* ne->detached, once closed */
};

/* One NOTIFY in flight: its ids, the decisions still pending, and the
 * merged outcome. Owned by its struct conn_notify. */
struct conn_req {
	struct conn_notify *ns;         /* its connection's NOTIFY side */
	struct conn_cfg_ref *cfg;       /* the generation it was decided under */
	uint64_t stream_id;
	uint64_t frame_id;
	unsigned pending;               /* decisions outstanding (+1 while issuing) */
	unsigned nmsgs;                 /* counted in ns->decisions */
	const struct window_policy *policy; /* first message's, for metrics */
	uint64_t read_us;               /* monotonic, when the NOTIFY was read */
	const struct window_limit *lim; /* its limits for the key (borrowed from cfg, or <live>) */
	unsigned nwin;
	struct window_limit live_win[WINDOW_MAX_WINDOWS]; /* a live override's, when <lim> */
	size_t key_len;                 /* of <key>, 0 until it is set */
	unsigned nasked;                /* messages handed to the limiter */
	unsigned skip_vars;             /* HEADERS_VAR_BIT()s its "vars" left out (0: all) */
	struct window_decision acc;
	/* a "ratelimit-done" under settle=: its policy, and what the settle
	 * answered (settled.known: the response's RateLimit fields) */
	const struct window_policy *done_policy;
	struct stored_settle settled;
	struct conn_req *prev, *next;
	/* last, not cleared by conn_req_get(): valid for <key_len> bytes */
	char key[WINDOW_KEY_MAX];       /* first message's key, for the denial counts */
};

/* Whether <r>'s ACK sets variable <v> (its message's "vars" argument). */
static inline bool conn_wants(const struct conn_req *r, enum headers_var v)
{
	return !(r->skip_vars & HEADERS_VAR_BIT(v));
}

/* Append the ACK for <r> (its merged decision, or a settle's answer, as txn
 * variables) to <c>'s output, between conn_out_begin() and
 * conn_out_commit() (conn_ack.c). 0, or -1 when <c> was disconnected for it
 * (out of memory, an ACK that does not fit). */
int conn_send_ack(struct conn *c, struct conn_notify_env *ne, const struct conn_req *r);

#endif /* SPOA_CONN_NOTIFY_INT_H */
