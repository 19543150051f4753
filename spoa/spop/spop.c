/*
 * spop - SPOP 2.0 frame codec. See spop.h for the contract and
 * docs/protocol.md for the byte layouts.
 *
 * Decoding uses cursor helpers spop_get_*(&p, end, ...) that check bounds
 * before every byte and move <p> only on success, so a failed read leaves
 * the cursor where it was and never touches memory at or past <end>.
 * Encoding is spop_write.c.
 */
#include <limits.h>
#include <string.h>

#include "spop.h"

/* ------------------------------------------------------------------ */
/* Status codes                                                        */
/* ------------------------------------------------------------------ */

static const char *const spop_status_text[SPOP_ST_COUNT] = {
	[SPOP_ST_NORMAL] = "normal",
	[SPOP_ST_IO] = "I/O error",
	[SPOP_ST_TIMEOUT] = "a timeout occurred",
	[SPOP_ST_TOO_BIG] = "frame is too big",
	[SPOP_ST_INVALID] = "invalid frame received",
	[SPOP_ST_NO_VSN] = "version value not found",
	[SPOP_ST_NO_FRAME_SIZE] = "max-frame-size value not found",
	[SPOP_ST_NO_CAP] = "capabilities value not found",
	[SPOP_ST_BAD_VSN] = "unsupported version",
	[SPOP_ST_BAD_FRAME_SIZE] = "max-frame-size too big or too small",
	[SPOP_ST_FRAG_NOT_SUPPORTED] = "payload fragmentation is not supported",
	[SPOP_ST_INTERLACED_FRAMES] = "invalid interlaced frames",
	[SPOP_ST_FRAMEID_NOTFOUND] = "frame-id not found",
	[SPOP_ST_RES] = "resource allocation error",
};

/* Text of status <st> (spec §3.5); "unknown status" outside the table. */
const char *spop_status_str(unsigned st)
{
	if (st < SPOP_ST_COUNT)
		return spop_status_text[st];
	if (st == SPOP_ST_UNKNOWN)
		return "an unknown error occurred";
	return "unknown status";
}

/* ------------------------------------------------------------------ */
/* Varint (HAProxy's "peers" encoding, spec §3.1; not LEB128)           */
/* ------------------------------------------------------------------ */

/* Writes into the caller's <dst>, at most <cap> bytes. Encodes <v>. */
int spop_encode_varint(uint64_t v, unsigned char *dst, size_t cap)
{
	unsigned char tmp[SPOP_VARINT_MAX_LEN];
	size_t n = 0;

	if (v < 240) {
		tmp[n++] = (unsigned char)v;
	} else {
		/* The first byte keeps the low 4 bits under a 0xF0 marker; every
		 * following byte carries 7 bits plus a continuation bit, and the
		 * subtractions make each length start where the previous ended. */
		tmp[n++] = (unsigned char)(v | 0xf0);
		v = (v - 240) >> 4;
		while (v >= 128) {
			tmp[n++] = (unsigned char)(v | 0x80);
			v = (v - 128) >> 7;
		}
		tmp[n++] = (unsigned char)v;
	}
	if (n > cap)
		return -1;
	memcpy(dst, tmp, n);
	return (int)n;
}

/* Borrows <p> for the call only. Decodes the varint at <p> (<len> bytes
 * readable) into <*v>. */
int spop_decode_varint(const unsigned char *p, size_t len, uint64_t *v)
{
	uint64_t val, term;
	unsigned shift = 4;
	size_t i;

	if (len == 0)
		return -1;
	val = p[0];
	if (val < 240) {
		*v = val;
		return 1;
	}
	for (i = 1; i < SPOP_VARINT_MAX_LEN; i++) {
		if (i >= len)
			return -1;
		/* The 10th byte lands at bit 60: anything above 0x0f there is
		 * either a continuation (an 11th byte) or bits past 64. */
		if (shift == 60 && p[i] > 0x0f)
			return -1;
		term = (uint64_t)p[i] << shift;
		if (term > UINT64_MAX - val)
			return -1;
		val += term;
		if (p[i] < 0x80) {
			*v = val;
			return (int)(i + 1);
		}
		shift += 7;
	}
	return -1;
}

/* ------------------------------------------------------------------ */
/* Cursor helpers: bounds-checked, move <*pp> only on success           */
/* ------------------------------------------------------------------ */

/* Borrows [<*pp>, <end>). Reads one varint into <*v>. Returns 0 or -1. */
static int spop_get_varint(const unsigned char **pp, const unsigned char *end,
                           uint64_t *v)
{
	int n;

	/* the one-byte form here, without the call: a NOTIFY is walked twice
	 * (validated whole, then iterated), and nearly all its varints are
	 * lengths and small numbers */
	if (*pp < end && **pp < 240) {
		*v = *(*pp)++;
		return 0;
	}
	n = spop_decode_varint(*pp, (size_t)(end - *pp), v);
	if (n < 0)
		return -1;
	*pp += n;
	return 0;
}

/* Borrows [<*pp>, <end>); <*s> points into it. Reads a STRING (varint
 * length + bytes, no type byte). Returns 0 or -1. */
static int spop_get_str(const unsigned char **pp, const unsigned char *end,
                        struct spop_str *s)
{
	const unsigned char *p = *pp;
	uint64_t n;

	if (spop_get_varint(&p, end, &n) < 0)
		return -1;
	/* Compare against what is left, never compute p + n first: a huge
	 * length would wrap the pointer. */
	if (n > (uint64_t)(end - p))
		return -1;
	s->ptr = (const char *)p;
	s->len = (size_t)n;
	*pp = p + n;
	return 0;
}

/* Two's complement reinterpretation without implementation-defined casts. */
static int64_t spop_u64_to_i64(uint64_t u)
{
	if (u <= (uint64_t)INT64_MAX)
		return (int64_t)u;
	return -(int64_t)(UINT64_MAX - u) - 1;
}

/* Borrows [<*pp>, <end>); strings in <*d> point into it. Reads one
 * TYPED-DATA. Returns 0, or -1 when truncated or of an unknown type. */
static int spop_get_data(const unsigned char **pp, const unsigned char *end,
                         struct spop_data *d)
{
	const unsigned char *p = *pp;
	struct spop_data out;
	unsigned type, flags;
	uint64_t u;

	if (p >= end)
		return -1;
	memset(&out, 0, sizeof(out));
	/* The spec draws <TYPE:4><FLAGS:4> but HAProxy puts the type in the
	 * low nibble and the flags in the high one (bool true = 0x11). */
	type = *p & SPOP_DATA_TYPE_MASK;
	flags = (unsigned)*p >> SPOP_DATA_FLAG_SHIFT;
	p++;
	switch (type) {
	case SPOP_T_NULL:
		break;
	case SPOP_T_BOOL:
		out.v.b = (flags & SPOP_DATA_FLAG_TRUE) != 0;
		break;
	case SPOP_T_INT32:
	case SPOP_T_INT64:
		if (spop_get_varint(&p, end, &u) < 0)
			return -1;
		out.v.i = spop_u64_to_i64(u);
		break;
	case SPOP_T_UINT32:
	case SPOP_T_UINT64:
		if (spop_get_varint(&p, end, &u) < 0)
			return -1;
		out.v.u = u;
		break;
	case SPOP_T_IPV4:
		if (end - p < 4)
			return -1;
		memcpy(out.v.ip, p, 4);
		p += 4;
		break;
	case SPOP_T_IPV6:
		if (end - p < 16)
			return -1;
		memcpy(out.v.ip, p, 16);
		p += 16;
		break;
	case SPOP_T_STR:
	case SPOP_T_BIN:
		if (spop_get_str(&p, end, &out.v.s) < 0)
			return -1;
		break;
	default:
		return -1;
	}
	out.type = (enum spop_type)type;
	*d = out;
	*pp = p;
	return 0;
}

/* Borrows <p>; strings in <d> point into it. See spop.h. */
int spop_decode_data(const unsigned char *p, size_t len, struct spop_data *d)
{
	const unsigned char *cur = p;

	if (len == 0 || spop_get_data(&cur, p + len, d) < 0 ||
	    cur - p > INT_MAX)
		return -1;
	return (int)(cur - p);
}

/* Borrows [<*pp>, <end>). Reads one KV item: a bare STRING name, then a
 * TYPED-DATA value. Returns 0 or -1; moves <*pp> only on success. */
static int spop_get_kv(const unsigned char **pp, const unsigned char *end,
                       struct spop_str *name, struct spop_data *val)
{
	const unsigned char *p = *pp;

	if (spop_get_str(&p, end, name) < 0 || spop_get_data(&p, end, val) < 0)
		return -1;
	*pp = p;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Small pure helpers                                                  */
/* ------------------------------------------------------------------ */

/* Borrows <s> and <cstr> for the call only. */
bool spop_str_eq(struct spop_str s, const char *cstr)
{
	size_t n = strlen(cstr);

	return s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}

/* Borrows <p>: the 4 bytes there as a big-endian number. */
static uint32_t spop_get_be32(const unsigned char *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
	       ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

int spop_data_to_int64(const struct spop_data *d, int64_t *out)
{
	switch (d->type) {
	case SPOP_T_INT32:
	case SPOP_T_INT64:
		*out = d->v.i;
		return 0;
	case SPOP_T_UINT32:
	case SPOP_T_UINT64:
		*out = d->v.u > INT64_MAX ? INT64_MAX : (int64_t)d->v.u;
		return 0;
	default:
		return -1;
	}
}

/* Any of the four integer types as an unsigned 32-bit value, clamped:
 * negative gives 0 and more than 32 bits gives UINT32_MAX, so the caller's
 * range check rejects or caps it. Returns 0, or -1 when <d> is no integer. */
static int spop_data_to_u32(const struct spop_data *d, uint32_t *out)
{
	int64_t v;

	if (spop_data_to_int64(d, &v) == -1)
		return -1;
	*out = v < 0 ? 0 : (uint64_t)v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
	return 0;
}

/*
 * Borrows <list>. Splits a comma-separated list into its next item: sets
 * <*item> to the item with blanks trimmed (spec §3.2.4: "Spaces must be
 * ignored") and advances <*list> past its comma. Returns 0 at the end.
 */
static int spop_next_list_item(struct spop_str *list, struct spop_str *item)
{
	const char *p, *end, *comma;

	if (list->len == 0)
		return 0;
	p = list->ptr;
	end = p + list->len;
	comma = memchr(p, ',', list->len);
	if (comma == NULL)
		comma = end;
	item->ptr = p;
	item->len = (size_t)(comma - p);
	while (item->len > 0 && (item->ptr[0] == ' ' || item->ptr[0] == '\t')) {
		item->ptr++;
		item->len--;
	}
	while (item->len > 0 && (item->ptr[item->len - 1] == ' ' ||
	                         item->ptr[item->len - 1] == '\t'))
		item->len--;
	if (comma == end) {
		list->ptr = end;
		list->len = 0;
	} else {
		list->ptr = comma + 1;
		list->len = (size_t)(end - comma - 1);
	}
	return 1;
}

/* Parses "<digits>.<digits>" in <v> into <*major>. Returns 0 or -1. */
static int spop_parse_version(struct spop_str v, unsigned *major)
{
	size_t i = 0, nd;
	unsigned m = 0;

	for (nd = 0; i < v.len && v.ptr[i] >= '0' && v.ptr[i] <= '9'; i++, nd++) {
		if (nd >= 4)    /* bounds the value; real majors are 1 digit */
			return -1;
		m = m * 10 + (unsigned)(v.ptr[i] - '0');
	}
	if (nd == 0 || i >= v.len || v.ptr[i] != '.')
		return -1;
	for (i++, nd = 0; i < v.len && v.ptr[i] >= '0' && v.ptr[i] <= '9'; i++)
		nd++;
	if (nd == 0 || i != v.len)
		return -1;
	*major = m;
	return 0;
}

/* Borrows <list>. True when a "2.x" is listed: per spec §3.2.4 a major
 * version announced by HAProxy implies all its minors, so 2.0 is among them. */
static bool spop_versions_have_2_0(struct spop_str list)
{
	struct spop_str item;
	unsigned major;

	while (spop_next_list_item(&list, &item))
		if (spop_parse_version(item, &major) == 0 && major == 2)
			return true;
	return false;
}

/* Borrows <list>. Sets the capability flags of <h> that <list> names. */
static void spop_parse_capabilities(struct spop_str list, struct spop_hello *h)
{
	struct spop_str item;

	while (spop_next_list_item(&list, &item)) {
		if (spop_str_eq(item, "pipelining"))
			h->cap_pipelining = true;
		else if (spop_str_eq(item, "async"))
			h->cap_async = true;
		else if (spop_str_eq(item, "fragmentation"))
			h->cap_fragmentation = true;
		/* spec §3.2.1: unknown capabilities are silently ignored */
	}
}

/* ------------------------------------------------------------------ */
/* Frame payloads                                                      */
/* ------------------------------------------------------------------ */

/*
 * Borrows [<p>, <end>); <h>'s slices point into it. Decodes a HELLO
 * KV-LIST whose versions are under <versions_key> ("supported-versions"
 * from HAProxy, "version" from an agent). Keys of the wrong type count as
 * absent (the caller then answers "not found"); unknown keys are skipped.
 * Returns 0, or -1 when the list itself is malformed.
 */
static int spop_decode_hello(const unsigned char *p, const unsigned char *end,
                             const char *versions_key, struct spop_hello *h)
{
	struct spop_str name;
	struct spop_data val;

	while (p < end) {
		if (spop_get_kv(&p, end, &name, &val) < 0)
			return -1;
		if (spop_str_eq(name, versions_key)) {
			if (val.type != SPOP_T_STR)
				continue;
			h->has_versions = true;
			h->versions = val.v.s;
			h->version_ok = spop_versions_have_2_0(val.v.s);
		} else if (spop_str_eq(name, "max-frame-size")) {
			/* the spec says UINT32, HAProxy accepts any int: so do we */
			if (spop_data_to_u32(&val, &h->max_frame_size) == 0)
				h->has_max_frame_size = true;
		} else if (spop_str_eq(name, "capabilities")) {
			if (val.type != SPOP_T_STR)
				continue;
			h->has_capabilities = true;
			h->cap_pipelining = h->cap_async = h->cap_fragmentation = false;
			spop_parse_capabilities(val.v.s, h);
		} else if (spop_str_eq(name, "healthcheck")) {
			h->healthcheck = val.type == SPOP_T_BOOL && val.v.b;
		} else if (spop_str_eq(name, "engine-id")) {
			if (val.type == SPOP_T_STR)
				h->engine_id = val.v.s;
		}
	}
	return 0;
}

/*
 * Borrows [<p>, <end>); <d>'s message points into it. Decodes a DISCONNECT
 * KV-LIST. A missing status-code reads as SPOP_ST_UNKNOWN: silence is not
 * "normal". Returns 0 or -1 when the list is malformed.
 */
static int spop_decode_disconnect(const unsigned char *p,
                                  const unsigned char *end,
                                  struct spop_disconnect *d)
{
	struct spop_str name;
	struct spop_data val;

	d->status = SPOP_ST_UNKNOWN;
	while (p < end) {
		if (spop_get_kv(&p, end, &name, &val) < 0)
			return -1;
		if (spop_str_eq(name, "status-code"))
			(void)spop_data_to_u32(&val, &d->status);
		else if (spop_str_eq(name, "message") && val.type == SPOP_T_STR)
			d->message = val.v.s;
	}
	return 0;
}

/* Borrows [<*pp>, <end>). Reads the head of one message: its name and its
 * 1-byte NB-ARGS. Returns 0 or -1; moves <*pp> only on success. */
static int spop_get_message_head(const unsigned char **pp,
                                 const unsigned char *end,
                                 struct spop_str *name, unsigned *nb_args)
{
	const unsigned char *p = *pp;

	if (spop_get_str(&p, end, name) < 0 || p >= end)
		return -1;
	*nb_args = *p++;
	*pp = p;
	return 0;
}

/* Borrows [<*pp>, <end>). Steps over one TYPED-DATA exactly as
 * spop_get_data() reads it (the same types, bounds and varint checks)
 * without building its value: the walks that only need where the next
 * item starts (validating a NOTIFY, finding a message's end, each done
 * for every decision) take this. Returns 0 or -1; moves <*pp> only on
 * success. */
static int spop_skip_data(const unsigned char **pp, const unsigned char *end)
{
	const unsigned char *p = *pp;
	struct spop_str s;
	uint64_t u;

	if (p >= end)
		return -1;
	switch (*p++ & SPOP_DATA_TYPE_MASK) {
	case SPOP_T_NULL:
	case SPOP_T_BOOL:
		break;
	case SPOP_T_INT32:
	case SPOP_T_INT64:
	case SPOP_T_UINT32:
	case SPOP_T_UINT64:
		if (spop_get_varint(&p, end, &u) < 0)
			return -1;
		break;
	case SPOP_T_IPV4:
		if (end - p < 4)
			return -1;
		p += 4;
		break;
	case SPOP_T_IPV6:
		if (end - p < 16)
			return -1;
		p += 16;
		break;
	case SPOP_T_STR:
	case SPOP_T_BIN:
		if (spop_get_str(&p, end, &s) < 0)
			return -1;
		break;
	default:
		return -1;
	}
	*pp = p;
	return 0;
}

/* Borrows [<*pp>, <end>). Skips <n> KV items (each checked as
 * spop_get_kv() would read it). Returns 0 or -1; moves <*pp> only on
 * success. */
static int spop_skip_kvs(const unsigned char **pp, const unsigned char *end,
                         unsigned n)
{
	const unsigned char *p = *pp;
	struct spop_str name;

	while (n-- > 0)
		if (spop_get_str(&p, end, &name) < 0 || spop_skip_data(&p, end) < 0)
			return -1;
	*pp = p;
	return 0;
}

/* Borrows [<p>, <end>). Validates a whole LIST-OF-MESSAGES once, so that
 * the iterators can walk it without error paths. Returns 0 or -1. */
static int spop_check_messages(const unsigned char *p, const unsigned char *end)
{
	struct spop_str name;
	unsigned nb_args;

	while (p < end) {
		if (spop_get_message_head(&p, end, &name, &nb_args) < 0 ||
		    spop_skip_kvs(&p, end, nb_args) < 0)
			return -1;
	}
	return 0;
}

/* Borrows [<*pp>, <end>); <a>'s slices point into it. Reads one ACK
 * action: SET-VAR (3 args: scope, name, value) or UNSET-VAR (2: scope,
 * name); any other type, count or scope is malformed. Returns 0 or -1;
 * moves <*pp> only on success. */
static int spop_get_action(const unsigned char **pp, const unsigned char *end,
                           struct spop_action *a)
{
	const unsigned char *p = *pp;
	unsigned type, nb_args, scope;

	if (end - p < 3)
		return -1;
	type = p[0];
	nb_args = p[1];
	scope = p[2];
	p += 3;
	if (scope >= SPOP_SCOPE_COUNT ||
	    !((type == SPOP_ACT_SET_VAR && nb_args == 3) ||
	      (type == SPOP_ACT_UNSET_VAR && nb_args == 2)) ||
	    spop_get_str(&p, end, &a->name) < 0)
		return -1;
	memset(&a->value, 0, sizeof(a->value));
	if (type == SPOP_ACT_SET_VAR && spop_get_data(&p, end, &a->value) < 0)
		return -1;
	a->type = (enum spop_action_type)type;
	a->scope = (enum spop_scope)scope;
	*pp = p;
	return 0;
}

/* Borrows [<p>, <end>). Validates a whole LIST-OF-ACTIONS once, so that
 * the iterator can walk it without error paths. Returns 0 or -1. */
static int spop_check_actions(const unsigned char *p, const unsigned char *end)
{
	struct spop_action a;

	while (p < end)
		if (spop_get_action(&p, end, &a) < 0)
			return -1;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Frames                                                              */
/* ------------------------------------------------------------------ */

/* Borrows <buf> for the call only. See spop.h. */
int spop_peek_length(const unsigned char *buf, size_t len, uint32_t max,
                     uint32_t *frame_len, enum spop_status *st)
{
	uint32_t n;

	if (len < 4)
		return 0;
	n = spop_get_be32(buf);
	/* the INT32_MAX bound keeps 4 + n representable as the int we return */
	if (n == 0 || n > max || n > INT32_MAX - 4) {
		if (st != NULL)
			*st = n == 0 ? SPOP_ST_INVALID : SPOP_ST_TOO_BIG;
		return -1;
	}
	*frame_len = n;
	return 1;
}

/* Borrows <buf>; slices in <f> point into it. See spop.h. */
int spop_decode_frame(const unsigned char *buf, size_t len, uint32_t max,
                      struct spop_frame *f, enum spop_status *st)
{
	const unsigned char *p, *end;
	enum spop_status err = SPOP_ST_INVALID;
	uint32_t flen;
	unsigned type;
	int r;

	r = spop_peek_length(buf, len, max, &flen, st);
	if (r <= 0)
		return r;
	if (len - 4 < flen)
		return 0;

	/* From here on the frame is all there: any shortfall inside it is a
	 * malformed frame, never "need more". */
	p = buf + 4;
	end = p + flen;
	memset(f, 0, sizeof(*f));

	/* Step 1: metadata. */
	if ((size_t)(end - p) < SPOP_HDR_FIXED)
		goto invalid;
	type = p[0];
	f->hdr.type = (enum spop_frame_type)type;
	f->hdr.flags = spop_get_be32(p + 1);
	p += SPOP_HDR_FIXED;
	if (spop_get_varint(&p, end, &f->hdr.stream_id) < 0 ||
	    spop_get_varint(&p, end, &f->hdr.frame_id) < 0)
		goto invalid;

	/* Step 2: no fragmentation, ever (we never announce it, and 3.x
	 * removed it): every frame must be a final one. */
	if (!(f->hdr.flags & SPOP_FLAG_FIN)) {
		err = SPOP_ST_FRAG_NOT_SUPPORTED;
		goto invalid;
	}

	/* Step 3: payload by type. */
	switch (type) {
	case SPOP_FRAME_HAPROXY_HELLO:
	case SPOP_FRAME_AGENT_HELLO:
		if (f->hdr.stream_id != 0 || f->hdr.frame_id != 0 ||
		    spop_decode_hello(p, end, type == SPOP_FRAME_HAPROXY_HELLO ?
		                      "supported-versions" : "version",
		                      &f->u.hello) < 0)
			goto invalid;
		break;
	case SPOP_FRAME_HAPROXY_DISCONNECT:
	case SPOP_FRAME_AGENT_DISCONNECT:
		if (f->hdr.stream_id != 0 || f->hdr.frame_id != 0 ||
		    spop_decode_disconnect(p, end, &f->u.disconnect) < 0)
			goto invalid;
		break;
	case SPOP_FRAME_NOTIFY:
		/* An empty list is legal: HAProxy 3.1-3.3 may send one. */
		if (spop_check_messages(p, end) < 0)
			goto invalid;
		f->u.notify.msgs = p;
		f->u.notify.len = (size_t)(end - p);
		break;
	case SPOP_FRAME_ACK:
		if (spop_check_actions(p, end) < 0)
			goto invalid;
		f->u.ack.acts = p;
		f->u.ack.len = (size_t)(end - p);
		break;
	default:
		break;
	}
	return (int)(4 + flen);

invalid:
	if (st != NULL)
		*st = err;
	return -1;
}

/* ------------------------------------------------------------------ */
/* NOTIFY iterators (input validated by spop_decode_frame)             */
/* ------------------------------------------------------------------ */

/* Borrows <n>'s buffer until the walk ends. */
void spop_iter_messages(const struct spop_notify *n, struct spop_iter *it)
{
	it->p = n->msgs;
	it->end = n->msgs != NULL ? n->msgs + n->len : NULL;
	it->left = 0;
}

/* Borrows the walked buffer; <m> points into it. */
int spop_next_message(struct spop_iter *it, struct spop_message *m)
{
	const unsigned char *p = it->p;

	if (p == NULL || p >= it->end)
		return 0;
	/* Cannot fail on a validated list; if handed a raw one, end the walk
	 * instead of reading garbage. */
	if (spop_get_message_head(&p, it->end, &m->name, &m->nb_args) < 0)
		goto stop;
	m->args = p;
	if (spop_skip_kvs(&p, it->end, m->nb_args) < 0)
		goto stop;
	m->args_len = (size_t)(p - m->args);
	it->p = p;
	return 1;

stop:
	it->p = it->end;
	return 0;
}

/* Borrows <m>'s buffer until the walk ends. */
void spop_iter_args(const struct spop_message *m, struct spop_iter *it)
{
	it->p = m->args;
	it->end = m->args != NULL ? m->args + m->args_len : NULL;
	it->left = m->nb_args;
}

/* Borrows the walked buffer; <a> points into it. */
int spop_next_arg(struct spop_iter *it, struct spop_arg *a)
{
	if (it->left == 0 || it->p == NULL || it->p >= it->end)
		return 0;
	if (spop_get_kv(&it->p, it->end, &a->name, &a->value) < 0) {
		it->left = 0;
		return 0;
	}
	it->left--;
	return 1;
}

/* Borrows <acts>'s buffer until the walk ends. */
void spop_iter_actions(const struct spop_actions *acts, struct spop_iter *it)
{
	it->p = acts->acts;
	it->end = acts->acts != NULL ? acts->acts + acts->len : NULL;
	it->left = 0;
}

/* Borrows the walked buffer; <a> points into it. */
int spop_next_action(struct spop_iter *it, struct spop_action *a)
{
	if (it->p == NULL || it->p >= it->end)
		return 0;
	/* Cannot fail on a validated list; on a raw one, end the walk. */
	if (spop_get_action(&it->p, it->end, a) < 0) {
		it->p = it->end;
		return 0;
	}
	return 1;
}
