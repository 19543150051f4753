/*
 * conn_int - what the transport (conn.c) offers the layer above it
 * (conn_notify.c), and nobody else includes. The calls run this way only:
 * conn.c reaches that layer through env->upper (struct conn_upper in
 * conn.h), never by name. struct conn stays private to conn.c.
 */
#ifndef SPOA_CONN_INT_H
#define SPOA_CONN_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conn.h"
#include "metrics.h"

/* For logs: the connection's process-wide id. */
uint64_t conn_id(const struct conn *c);

/* The max-frame-size negotiated with HAProxy, in bytes. */
uint32_t conn_max_frame(const struct conn *c);

/* Past its HELLO and not closing: a frame written now is sent. */
bool conn_is_ready(const struct conn *c);

/* The agent is shutting down (conn_env_drain): an idle connection ends. */
bool conn_is_draining(const struct conn *c);

/*
 * Begin one frame on <c>'s output: room for at least <need> bytes, whose
 * size goes to <*cap>. Returns where to write, or NULL when memory runs
 * out (nothing changed). Nothing written there counts until
 * conn_out_commit(); another begin, or none, drops it. The pointer is
 * borrowed from <c> until then.
 */
unsigned char *conn_out_begin(struct conn *c, size_t need, size_t *cap);

/* Commit the <n> bytes written since conn_out_begin() as one frame of
 * <type>: counted, and sent by the next flush. */
void conn_out_commit(struct conn *c, size_t n, enum metrics_frame_out type);

/* Queue AGENT-DISCONNECT <status>/<msg> and close <c> once it left. */
void conn_send_disconnect(struct conn *c, unsigned status, const char *msg);

#endif /* SPOA_CONN_INT_H */
