/*
 * spop - SPOP 2.0 frame codec (HAProxy Stream Processing Offload Protocol),
 * both directions: what the agent reads and writes, and what a peer playing
 * HAProxy writes and reads (the load generator, bench/spoa-bench).
 *
 * Pure: no I/O, no allocation, libc only. Decoders never read past <len> and
 * return slices (struct spop_str) that point into the caller's buffer: they
 * stay valid until the caller consumes or overwrites those bytes.
 * Encoders write into a caller buffer <dst> of <cap> bytes and never past it.
 *
 * Wire facts (see docs/protocol.md, which cites the spec, HAProxy's doc/SPOE.txt §3):
 *   - every frame is <LENGTH:4 BE> <TYPE:1> <FLAGS:4 BE> <STREAM-ID:varint>
 *     <FRAME-ID:varint> <PAYLOAD>; LENGTH excludes itself;
 *   - varints are HAProxy's own encoding (not LEB128), at most 10 bytes;
 *   - typed data: type in the low nibble, flags in the high nibble
 *     (bool true = 0x11, false = 0x01).
 */
#ifndef SPOA_SPOP_H
#define SPOA_SPOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SPOP_VERSION            "2.0"
#define SPOP_MIN_FRAME_SIZE     256u        /* spec §3.2: peers must accept >= 256 */
#define SPOP_MAX_FRAME_SIZE     (1u << 20)  /* our hard cap, whatever HAProxy offers */
#define SPOP_VARINT_MAX_LEN     10
#define SPOP_FLAG_FIN           0x00000001u
#define SPOP_FLAG_ABORT         0x00000002u
/* wire details shared by the decoder (spop.c) and the encoder (spop_write.c) */
#define SPOP_HDR_FIXED          5u      /* type + 4 flag bytes */
#define SPOP_DATA_TYPE_MASK     0x0fu
#define SPOP_DATA_FLAG_SHIFT    4
#define SPOP_DATA_FLAG_TRUE     0x01u   /* in the flag nibble */

/* SPOP status codes (§3.2.8). Values are on the wire: do not renumber. */
enum spop_status {
	SPOP_ST_NORMAL = 0,
	SPOP_ST_IO = 1,
	SPOP_ST_TIMEOUT = 2,
	SPOP_ST_TOO_BIG = 3,
	SPOP_ST_INVALID = 4,
	SPOP_ST_NO_VSN = 5,
	SPOP_ST_NO_FRAME_SIZE = 6,
	SPOP_ST_NO_CAP = 7,
	SPOP_ST_BAD_VSN = 8,
	SPOP_ST_BAD_FRAME_SIZE = 9,
	SPOP_ST_FRAG_NOT_SUPPORTED = 10,
	SPOP_ST_INTERLACED_FRAMES = 11,
	SPOP_ST_FRAMEID_NOTFOUND = 12,
	SPOP_ST_RES = 13,
	SPOP_ST_COUNT,
	SPOP_ST_UNKNOWN = 99        /* on the wire, outside the dense range */
};

enum spop_frame_type {
	SPOP_FRAME_UNSET = 0,
	SPOP_FRAME_HAPROXY_HELLO = 1,
	SPOP_FRAME_HAPROXY_DISCONNECT = 2,
	SPOP_FRAME_NOTIFY = 3,
	SPOP_FRAME_AGENT_HELLO = 101,
	SPOP_FRAME_AGENT_DISCONNECT = 102,
	SPOP_FRAME_ACK = 103,
};

enum spop_type {
	SPOP_T_NULL = 0,
	SPOP_T_BOOL = 1,
	SPOP_T_INT32 = 2,
	SPOP_T_UINT32 = 3,
	SPOP_T_INT64 = 4,
	SPOP_T_UINT64 = 5,
	SPOP_T_IPV4 = 6,
	SPOP_T_IPV6 = 7,
	SPOP_T_STR = 8,
	SPOP_T_BIN = 9,
	SPOP_T_COUNT
};

/* ACK action types (§3.4). Values are on the wire. */
enum spop_action_type {
	SPOP_ACT_SET_VAR = 1,
	SPOP_ACT_UNSET_VAR = 2,
	SPOP_ACT_COUNT
};

enum spop_scope {
	SPOP_SCOPE_PROC = 0,
	SPOP_SCOPE_SESS = 1,
	SPOP_SCOPE_TXN = 2,
	SPOP_SCOPE_REQ = 3,
	SPOP_SCOPE_RES = 4,
	SPOP_SCOPE_COUNT
};

/* A borrowed slice of the input buffer. Not NUL-terminated. */
struct spop_str {
	const char *ptr;
	size_t len;
};

struct spop_data {
	enum spop_type type;
	union {
		bool b;
		int64_t i;          /* INT32, INT64 */
		uint64_t u;         /* UINT32, UINT64 */
		unsigned char ip[16]; /* IPV4 uses the first 4 bytes */
		struct spop_str s;  /* STR, BIN */
	} v;
};

struct spop_header {
	enum spop_frame_type type;
	uint32_t flags;
	uint64_t stream_id;
	uint64_t frame_id;
};

/* HAPROXY-HELLO or AGENT-HELLO payload, decoded. Unknown keys are skipped.
 * An AGENT-HELLO names one "version" where HAProxy lists
 * "supported-versions"; healthcheck and engine-id are HAProxy's only. */
struct spop_hello {
	bool has_versions;          /* "supported-versions" / "version" present */
	bool version_ok;            /* it lists a 2.x (spaces tolerated) */
	struct spop_str versions;   /* the list as sent */
	bool has_max_frame_size;
	uint32_t max_frame_size;
	bool has_capabilities;
	bool cap_pipelining;
	bool cap_async;
	bool cap_fragmentation;
	bool healthcheck;
	struct spop_str engine_id;  /* len 0 when absent */
};

/* HAPROXY-DISCONNECT / AGENT-DISCONNECT payload. */
struct spop_disconnect {
	uint32_t status;
	struct spop_str message;
};

/* NOTIFY payload: the raw LIST-OF-MESSAGES, already validated whole by
 * spop_decode_frame(), so the iterators below cannot fail on it. */
struct spop_notify {
	const unsigned char *msgs;
	size_t len;
};

/* ACK payload: the raw LIST-OF-ACTIONS, validated whole like a NOTIFY's
 * messages. */
struct spop_actions {
	const unsigned char *acts;
	size_t len;
};

struct spop_frame {
	struct spop_header hdr;
	union {
		struct spop_hello hello;            /* both HELLOs */
		struct spop_disconnect disconnect;  /* both DISCONNECTs */
		struct spop_notify notify;
		struct spop_actions ack;
	} u;
};

/* One message of a NOTIFY; its args are walked with spop_next_arg(). */
struct spop_message {
	struct spop_str name;
	unsigned nb_args;
	const unsigned char *args;  /* first byte of the KV-LIST */
	size_t args_len;
};

struct spop_arg {
	struct spop_str name;
	struct spop_data value;
};

/* One action of an ACK; <value> is set for SET-VAR only. */
struct spop_action {
	enum spop_action_type type;
	enum spop_scope scope;
	struct spop_str name;
	struct spop_data value;
};

struct spop_iter {
	const unsigned char *p;
	const unsigned char *end;
	unsigned left;              /* args left (arg iterator only) */
};

/* Human text for <st>; never NULL. */
const char *spop_status_str(unsigned st);

/* Encode <v> in HAProxy's varint into <dst>. Returns bytes written, -1 when
 * <cap> is too small. */
int spop_encode_varint(uint64_t v, unsigned char *dst, size_t cap);

/* Decode a varint at <p>. Returns bytes consumed (1..10), -1 when it runs
 * past <len> or over 10 bytes, or overflows 64 bits. */
int spop_decode_varint(const unsigned char *p, size_t len, uint64_t *v);

/* Decode one TYPED-DATA at <p>. Returns bytes consumed, -1 when truncated or
 * of an unknown type. Strings in <d> borrow <p>. */
int spop_decode_data(const unsigned char *p, size_t len, struct spop_data *d);

/*
 * Look at the 4-byte length prefix in <buf>. Returns 1 and sets <*frame_len>
 * when the prefix is complete and 1 <= length <= <max>; 0 when fewer than 4
 * bytes are there; -1 with <*st> (SPOP_ST_INVALID for 0, SPOP_ST_TOO_BIG for
 * > max) otherwise. Lets the caller refuse a length before buffering it.
 */
int spop_peek_length(const unsigned char *buf, size_t len, uint32_t max,
                     uint32_t *frame_len, enum spop_status *st);

/*
 * Decode one whole frame starting at its 4-byte length prefix, of either
 * direction (the caller refuses the types it does not expect).
 * Returns the bytes it spans (4 + length) when complete and valid, 0 when
 * <len> does not yet hold it all, -1 with <*st> set when it is malformed:
 * bad length, truncated varint/string/args/actions inside the frame,
 * unknown data type or action, FIN not set (SPOP_ST_FRAG_NOT_SUPPORTED),
 * non-zero ids on a HELLO or DISCONNECT (SPOP_ST_INVALID). Frame types it
 * does not know are decoded as a header only. <f> borrows <buf>.
 */
int spop_decode_frame(const unsigned char *buf, size_t len, uint32_t max,
                      struct spop_frame *f, enum spop_status *st);

/* Walk the messages of a decoded NOTIFY. Returns 1 with <*m> set, 0 at the end. */
void spop_iter_messages(const struct spop_notify *n, struct spop_iter *it);
int spop_next_message(struct spop_iter *it, struct spop_message *m);

/* Walk the args of one message. Returns 1 with <*a> set, 0 at the end. */
void spop_iter_args(const struct spop_message *m, struct spop_iter *it);
int spop_next_arg(struct spop_iter *it, struct spop_arg *a);

/* Walk the actions of a decoded ACK. Returns 1 with <*a> set, 0 at the end. */
void spop_iter_actions(const struct spop_actions *acts, struct spop_iter *it);
int spop_next_action(struct spop_iter *it, struct spop_action *a);

/* Any of the four integer types as a signed 64-bit value (unsigned ones
 * above INT64_MAX are clamped). Returns 0, or -1 when <d> is no integer. */
int spop_data_to_int64(const struct spop_data *d, int64_t *out);

/* Compare a slice with a C string. */
bool spop_str_eq(struct spop_str s, const char *cstr);

/* Header <name>/<name_len> (compared without case) in HAProxy's binary
 * header list <hdrs>/<len> (req.hdrs_bin / res.hdrs_bin: <str:name>
 * <str:value> per header, then two empty strings; spop_hdrs.c): 1 and its
 * first value in <value> (pointing into <hdrs>), 0 when absent, -1 when
 * the list is malformed, truncated or has bytes after its end. */
int spop_hdrs_find(const unsigned char *hdrs, size_t len, const char *name, size_t name_len,
                   struct spop_str *value);

/* Encode one TYPED-DATA <d> (any type; strings borrowed for the call).
 * Returns bytes written, -1 when <cap> is too small or the type unknown. */
int spop_encode_data(unsigned char *dst, size_t cap, const struct spop_data *d);

/*
 * A bounded writer over the caller's <dst>/<cap>: every write checks room
 * and latches <overflow> instead of writing past <cap>, so a frame is built
 * field by field and checked once at the end (spop_ack_end(),
 * spop_notify_end(): the frame's total size, or -1).
 */
struct spop_writer {
	unsigned char *dst;
	size_t cap;
	size_t len;
	bool overflow;
};

/* --- The agent's frames ------------------------------------------------ */

/* AGENT-HELLO: version "2.0", <max_frame_size>, capabilities "pipelining"
 * when <pipelining> else "". Returns bytes written (prefix included) or -1. */
int spop_encode_agent_hello(unsigned char *dst, size_t cap,
                            uint32_t max_frame_size, bool pipelining);

/* AGENT-DISCONNECT with <status> and <message> (NUL-terminated).
 * Returns bytes written (prefix included) or -1. */
int spop_encode_agent_disconnect(unsigned char *dst, size_t cap,
                                 unsigned status, const char *message);

/*
 * ACK builder. spop_ack_begin() writes the header for <stream_id>/<frame_id>;
 * each action appends; spop_ack_end() writes the length prefix and returns
 * the frame's total size, or -1 if anything overflowed <cap>.
 * Names are bare (no prefix); keep "<scope>.<prefix>.<name>" under 64 bytes.
 */
void spop_ack_begin(struct spop_writer *a, unsigned char *dst, size_t cap,
                    uint64_t stream_id, uint64_t frame_id);
void spop_ack_set_str(struct spop_writer *a, enum spop_scope scope,
                      const char *name, const char *val, size_t vlen);
void spop_ack_set_int(struct spop_writer *a, enum spop_scope scope,
                      const char *name, int64_t val);
void spop_ack_unset(struct spop_writer *a, enum spop_scope scope, const char *name);
int spop_ack_end(struct spop_writer *a);

/* --- HAProxy's frames (a peer playing HAProxy) ------------------------- */

/* HAPROXY-HELLO in HAProxy's key order: supported-versions "2.0",
 * max-frame-size (UINT32), capabilities (<capabilities>, e.g. "pipelining"
 * or ""), healthcheck true when <healthcheck>, engine-id unless NULL.
 * Returns bytes written (prefix included) or -1. */
int spop_encode_haproxy_hello(unsigned char *dst, size_t cap,
                              uint32_t max_frame_size, const char *capabilities,
                              bool healthcheck, const char *engine_id);

/* HAPROXY-DISCONNECT with <status> and <message> (NUL-terminated).
 * Returns bytes written (prefix included) or -1. */
int spop_encode_haproxy_disconnect(unsigned char *dst, size_t cap,
                                   unsigned status, const char *message);

/*
 * NOTIFY builder, like the ACK's: spop_notify_begin() writes the header;
 * spop_notify_message() starts a message of <nb_args> args (at most 255),
 * each given by spop_notify_arg(); spop_notify_end() writes the length
 * prefix and returns the frame's total size, or -1 on overflow or a bad
 * argument. Names and values are borrowed for the call only.
 */
void spop_notify_begin(struct spop_writer *w, unsigned char *dst, size_t cap,
                       uint64_t stream_id, uint64_t frame_id);
void spop_notify_message(struct spop_writer *w, const char *name,
                         unsigned nb_args);
void spop_notify_arg(struct spop_writer *w, const char *name,
                     const struct spop_data *value);
int spop_notify_end(struct spop_writer *w);

#endif /* SPOA_SPOP_H */
