/*
 * spop_write - SPOP 2.0 frame encoding, both directions (the agent's
 * frames and HAProxy's, for the load generator and the tests). See spop.h
 * for the contract and docs/protocol.md for the byte layouts.
 *
 * Everything goes through one bounded writer (struct spop_writer) that
 * latches an overflow flag instead of writing past <cap>.
 */
#include <limits.h>
#include <string.h>

#include "spop.h"

/* Writes <v> big-endian into the caller's 4 bytes at <p>. */
static void spop_put_be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

/* Writes <n> bytes of <src> into <w>'s buffer, or latches overflow. */
static void spop_put_bytes(struct spop_writer *w, const void *src, size_t n)
{
	if (w->overflow)
		return;
	if (n > w->cap - w->len || (src == NULL && n > 0)) {
		w->overflow = true;
		return;
	}
	if (n > 0)
		memcpy(w->dst + w->len, src, n);
	w->len += n;
}

/* Writes byte <b> into <w>'s buffer, or latches overflow. Stored directly,
 * not through memcpy: an ACK is mostly single bytes (types, scopes, short
 * lengths and values), and the call per byte showed in the agent's count. */
static void spop_put_byte(struct spop_writer *w, unsigned char b)
{
	if (w->overflow)
		return;
	if (w->len >= w->cap) {
		w->overflow = true;
		return;
	}
	w->dst[w->len++] = b;
}

/* Writes varint <v> into <w>'s buffer, or latches overflow. */
static void spop_put_varint(struct spop_writer *w, uint64_t v)
{
	unsigned char tmp[SPOP_VARINT_MAX_LEN];
	int n;

	if (v < 240) {              /* one byte, the varint's own short form */
		spop_put_byte(w, (unsigned char)v);
		return;
	}
	n = spop_encode_varint(v, tmp, sizeof(tmp));
	spop_put_bytes(w, tmp, (size_t)n);
}

/* Borrows <s> for the call only. Writes a bare STRING (length + bytes). */
static void spop_put_str(struct spop_writer *w, const char *s, size_t n)
{
	spop_put_varint(w, n);
	spop_put_bytes(w, s, n);
}

/* Starts a frame in <w> over the caller's <dst>/<cap>: room for the length
 * prefix, then type, FIN (always: we never fragment), ids. */
static void spop_put_header(struct spop_writer *w, unsigned char *dst, size_t cap,
                            enum spop_frame_type type, uint64_t stream_id,
                            uint64_t frame_id)
{
	unsigned char fixed[4 + SPOP_HDR_FIXED] = { 0 };

	w->dst = dst;
	w->cap = dst != NULL ? cap : 0;
	w->len = 0;
	w->overflow = false;
	fixed[4] = (unsigned char)type;
	spop_put_be32(fixed + 5, SPOP_FLAG_FIN);
	spop_put_bytes(w, fixed, sizeof(fixed));
	spop_put_varint(w, stream_id);
	spop_put_varint(w, frame_id);
}

/* Closes the frame in <w>: fills the length prefix. Returns the total size
 * or -1 if anything overflowed. */
static int spop_put_finish(struct spop_writer *w)
{
	if (w->overflow || w->len < 4 || w->len > INT_MAX)
		return -1;
	spop_put_be32(w->dst, (uint32_t)(w->len - 4));
	return (int)w->len;
}

/* Borrows <d>'s strings for the call only. Writes one TYPED-DATA; an
 * unknown type is a caller bug and fails the frame like an overflow. */
static void spop_put_data(struct spop_writer *w, const struct spop_data *d)
{
	switch (d->type) {
	case SPOP_T_NULL:
		spop_put_byte(w, SPOP_T_NULL);
		break;
	case SPOP_T_BOOL:
		spop_put_byte(w, (unsigned char)(SPOP_T_BOOL |
		              (d->v.b ? SPOP_DATA_FLAG_TRUE << SPOP_DATA_FLAG_SHIFT : 0)));
		break;
	case SPOP_T_INT32:
	case SPOP_T_INT64:
		spop_put_byte(w, (unsigned char)d->type);
		spop_put_varint(w, (uint64_t)d->v.i);
		break;
	case SPOP_T_UINT32:
	case SPOP_T_UINT64:
		spop_put_byte(w, (unsigned char)d->type);
		spop_put_varint(w, d->v.u);
		break;
	case SPOP_T_IPV4:
	case SPOP_T_IPV6:
		spop_put_byte(w, (unsigned char)d->type);
		spop_put_bytes(w, d->v.ip, d->type == SPOP_T_IPV4 ? 4 : 16);
		break;
	case SPOP_T_STR:
	case SPOP_T_BIN:
		spop_put_byte(w, (unsigned char)d->type);
		spop_put_str(w, d->v.s.ptr, d->v.s.len);
		break;
	default:
		w->overflow = true;
		break;
	}
}

/* Writes into the caller's <dst>; borrows <d> for the call only. */
int spop_encode_data(unsigned char *dst, size_t cap, const struct spop_data *d)
{
	struct spop_writer w = { dst, dst != NULL ? cap : 0, 0, false };

	spop_put_data(&w, d);
	return w.overflow || w.len > INT_MAX ? -1 : (int)w.len;
}

/* Borrows <name> and <d> for the call only. One KV item. */
static void spop_put_kv(struct spop_writer *w, const char *name,
                        const struct spop_data *d)
{
	spop_put_str(w, name, strlen(name));
	spop_put_data(w, d);
}

/* Borrows <s> for the call only. KV item with a STR value. */
static void spop_put_kv_str(struct spop_writer *w, const char *name, const char *s)
{
	struct spop_data d = { .type = SPOP_T_STR, .v.s = { s, strlen(s) } };

	spop_put_kv(w, name, &d);
}

/* KV item with a UINT32 value. */
static void spop_put_kv_u32(struct spop_writer *w, const char *name, uint32_t v)
{
	struct spop_data d = { .type = SPOP_T_UINT32, .v.u = v };

	spop_put_kv(w, name, &d);
}

/* Writes into the caller's <dst>, at most <cap> bytes. See spop.h. */
int spop_encode_agent_hello(unsigned char *dst, size_t cap,
                            uint32_t max_frame_size, bool pipelining)
{
	struct spop_writer w;

	spop_put_header(&w, dst, cap, SPOP_FRAME_AGENT_HELLO, 0, 0);
	spop_put_kv_str(&w, "version", SPOP_VERSION);
	spop_put_kv_u32(&w, "max-frame-size", max_frame_size);
	/* never "async" or "fragmentation": 3.x dropped both, and announcing
	 * fragmentation makes 2.6 send fragments we would reject */
	spop_put_kv_str(&w, "capabilities", pipelining ? "pipelining" : "");
	return spop_put_finish(&w);
}

/* Writes into the caller's <dst>; borrows <message> for the call only.
 * Both DISCONNECTs: <type> says whose. */
static int spop_encode_disconnect(unsigned char *dst, size_t cap,
                                  enum spop_frame_type type, unsigned status,
                                  const char *message)
{
	struct spop_writer w;

	spop_put_header(&w, dst, cap, type, 0, 0);
	spop_put_kv_u32(&w, "status-code", status);
	spop_put_kv_str(&w, "message", message != NULL ? message : "");
	return spop_put_finish(&w);
}

/* Writes into the caller's <dst>; borrows <message> for the call only. */
int spop_encode_agent_disconnect(unsigned char *dst, size_t cap,
                                 unsigned status, const char *message)
{
	return spop_encode_disconnect(dst, cap, SPOP_FRAME_AGENT_DISCONNECT,
	                              status, message);
}

/* Writes into the caller's <dst>; borrows <message> for the call only. */
int spop_encode_haproxy_disconnect(unsigned char *dst, size_t cap,
                                   unsigned status, const char *message)
{
	return spop_encode_disconnect(dst, cap, SPOP_FRAME_HAPROXY_DISCONNECT,
	                              status, message);
}

/* Writes into the caller's <dst>; borrows the strings for the call only. */
int spop_encode_haproxy_hello(unsigned char *dst, size_t cap,
                              uint32_t max_frame_size, const char *capabilities,
                              bool healthcheck, const char *engine_id)
{
	struct spop_data yes = { .type = SPOP_T_BOOL, .v.b = true };
	struct spop_writer w;

	spop_put_header(&w, dst, cap, SPOP_FRAME_HAPROXY_HELLO, 0, 0);
	spop_put_kv_str(&w, "supported-versions", SPOP_VERSION);
	spop_put_kv_u32(&w, "max-frame-size", max_frame_size);
	spop_put_kv_str(&w, "capabilities", capabilities != NULL ? capabilities : "");
	if (healthcheck)
		spop_put_kv(&w, "healthcheck", &yes);
	if (engine_id != NULL)
		spop_put_kv_str(&w, "engine-id", engine_id);
	return spop_put_finish(&w);
}

/* <w> borrows the caller's <dst> until spop_notify_end(). */
void spop_notify_begin(struct spop_writer *w, unsigned char *dst, size_t cap,
                       uint64_t stream_id, uint64_t frame_id)
{
	spop_put_header(w, dst, cap, SPOP_FRAME_NOTIFY, stream_id, frame_id);
}

/* Borrows <name> for the call only. NB-ARGS is one byte on the wire: more
 * than 255 is a caller bug and fails the frame. */
void spop_notify_message(struct spop_writer *w, const char *name,
                         unsigned nb_args)
{
	if (name == NULL || nb_args > 255) {
		w->overflow = true;
		return;
	}
	spop_put_str(w, name, strlen(name));
	spop_put_byte(w, (unsigned char)nb_args);
}

/* Borrows <name> and <value> for the call only. */
void spop_notify_arg(struct spop_writer *w, const char *name,
                     const struct spop_data *value)
{
	if (name == NULL) {
		w->overflow = true;
		return;
	}
	spop_put_kv(w, name, value);
}

/* Releases nothing: <w>'s buffer stays the caller's. See spop.h. */
int spop_notify_end(struct spop_writer *w)
{
	return spop_put_finish(w);
}

/* <a> borrows the caller's <dst> until spop_ack_end(). */
void spop_ack_begin(struct spop_writer *a, unsigned char *dst, size_t cap,
                    uint64_t stream_id, uint64_t frame_id)
{
	spop_put_header(a, dst, cap, SPOP_FRAME_ACK, stream_id, frame_id);
}

/* Action head: <type> <nb-args> <scope> <name>. A bad scope or name is a
 * caller bug; it fails the whole ACK like an overflow would. */
static void spop_put_action_head(struct spop_writer *a, unsigned type,
                                 unsigned nb_args, enum spop_scope scope,
                                 const char *name)
{
	if ((unsigned)scope >= SPOP_SCOPE_COUNT || name == NULL) {
		a->overflow = true;
		return;
	}
	spop_put_byte(a, (unsigned char)type);
	spop_put_byte(a, (unsigned char)nb_args);
	spop_put_byte(a, (unsigned char)scope);
	spop_put_str(a, name, strlen(name));
}

/* Borrows <name> for the call only. A SET-VAR's head and its value's type
 * byte, <type> <nb-args> <scope> <name-len> <name> <data-type>, stored at
 * once when <a> has room for all of it and the name's length is one
 * varint byte (every variable the agent sets): one bounds check instead of
 * one per byte, a sixth of an ACK's cost. Returns true when written; false
 * (nothing written) sends the caller down the byte-by-byte path, which
 * writes the same bytes or latches the overflow. */
static bool spop_put_set_var_head(struct spop_writer *a, enum spop_scope scope,
                                  const char *name, size_t n, enum spop_type type)
{
	unsigned char *p;

	if (a->overflow || (unsigned)scope >= SPOP_SCOPE_COUNT || name == NULL || n >= 240 ||
	    a->cap - a->len < 5 + n)
		return false;
	p = a->dst + a->len;
	p[0] = SPOP_ACT_SET_VAR;
	p[1] = 3;
	p[2] = (unsigned char)scope;
	p[3] = (unsigned char)n;
	memcpy(p + 4, name, n);
	p[4 + n] = (unsigned char)type;
	a->len += 5 + n;
	return true;
}

/* Borrows <name> and <val> for the call only. SET-VAR with a STR value. */
void spop_ack_set_str(struct spop_writer *a, enum spop_scope scope,
                      const char *name, const char *val, size_t vlen)
{
	struct spop_data d = { .type = SPOP_T_STR, .v.s = { val, vlen } };

	if (name != NULL && spop_put_set_var_head(a, scope, name, strlen(name), SPOP_T_STR)) {
		spop_put_str(a, val, vlen);
		return;
	}
	spop_put_action_head(a, SPOP_ACT_SET_VAR, 3, scope, name);
	spop_put_data(a, &d);
}

/* Borrows <name> for the call only. SET-VAR with an INT64 value (what
 * HAProxy itself uses for every integer sample). */
void spop_ack_set_int(struct spop_writer *a, enum spop_scope scope,
                      const char *name, int64_t val)
{
	struct spop_data d = { .type = SPOP_T_INT64, .v.i = val };

	if (name != NULL && spop_put_set_var_head(a, scope, name, strlen(name), SPOP_T_INT64)) {
		spop_put_varint(a, (uint64_t)val);
		return;
	}
	spop_put_action_head(a, SPOP_ACT_SET_VAR, 3, scope, name);
	spop_put_data(a, &d);
}

/* Borrows <name> for the call only. UNSET-VAR. */
void spop_ack_unset(struct spop_writer *a, enum spop_scope scope, const char *name)
{
	spop_put_action_head(a, SPOP_ACT_UNSET_VAR, 2, scope, name);
}

/* Releases nothing: <a>'s buffer stays the caller's. See spop.h. */
int spop_ack_end(struct spop_writer *a)
{
	return spop_put_finish(a);
}
