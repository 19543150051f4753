/*
 * fuzz_spop - libFuzzer harness for the SPOP codec on arbitrary bytes.
 *
 * The first input byte picks the frame-size limit the decoder is given (so
 * the fuzzer reaches both "too big" and "fits"); the rest is decoded as one
 * frame, then as a stream of frames. Every slice the decoder hands back is
 * read in full, so AddressSanitizer sees any slice that points outside the
 * input. Invariants checked with abort(): a decoded frame never spans more
 * than it was given, the NOTIFY iterators walk exactly the validated list,
 * and the stand-alone data/varint decoders agree with their contracts.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spop.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A sink the compiler cannot drop, so slice reads really happen. */
static volatile unsigned fuzz_sink;

/* Borrows <s> for the call only: read every byte of it. */
static void fuzz_touch(struct spop_str s)
{
	unsigned acc = 0;
	size_t i;

	if (s.len && !s.ptr)
		abort();
	for (i = 0; i < s.len; i++)
		acc += (unsigned char)s.ptr[i];
	fuzz_sink += acc;
}

/* Borrows <d>: read its payload when it is a slice. */
static void fuzz_touch_data(const struct spop_data *d)
{
	if ((unsigned)d->type >= SPOP_T_COUNT)
		abort();
	if (d->type == SPOP_T_STR || d->type == SPOP_T_BIN)
		fuzz_touch(d->v.s);
}

/* Borrows <f> (and the input it points into): walk everything it holds. */
static void fuzz_walk_frame(const struct spop_frame *f)
{
	struct spop_iter mit, ait;
	struct spop_message m;
	struct spop_arg a;
	struct spop_action act;
	const unsigned char *last;
	unsigned nmsg = 0, narg;

	switch (f->hdr.type) {
	case SPOP_FRAME_HAPROXY_HELLO:
	case SPOP_FRAME_AGENT_HELLO:
		fuzz_touch(f->u.hello.engine_id);
		fuzz_touch(f->u.hello.versions);
		break;
	case SPOP_FRAME_HAPROXY_DISCONNECT:
	case SPOP_FRAME_AGENT_DISCONNECT:
		fuzz_touch(f->u.disconnect.message);
		(void)spop_status_str(f->u.disconnect.status);
		break;
	case SPOP_FRAME_NOTIFY:
		last = f->u.notify.msgs;
		spop_iter_messages(&f->u.notify, &mit);
		while (spop_next_message(&mit, &m)) {
			/* messages tile the list: no gap, no overlap */
			if (m.name.ptr < (const char *)last || m.args < last)
				abort();
			fuzz_touch(m.name);
			narg = 0;
			spop_iter_args(&m, &ait);
			while (spop_next_arg(&ait, &a)) {
				fuzz_touch(a.name);
				fuzz_touch_data(&a.value);
				narg++;
			}
			/* the list was validated whole: every announced arg is there */
			if (narg != m.nb_args)
				abort();
			last = m.args + m.args_len;
			nmsg++;
		}
		if (f->u.notify.msgs && last != f->u.notify.msgs + f->u.notify.len)
			abort();
		fuzz_sink += nmsg;
		break;
	case SPOP_FRAME_ACK:
		/* validated whole: the walk ends exactly at the end */
		spop_iter_actions(&f->u.ack, &mit);
		while (spop_next_action(&mit, &act)) {
			if ((unsigned)act.scope >= SPOP_SCOPE_COUNT)
				abort();
			fuzz_touch(act.name);
			fuzz_touch_data(&act.value);
		}
		if (f->u.ack.acts && mit.p != f->u.ack.acts + f->u.ack.len)
			abort();
		break;
	default:
		break;
	}
}

/* Borrows <p>/<len>: the stand-alone decoders must stay inside it. */
static void fuzz_scalars(const unsigned char *p, size_t len)
{
	struct spop_data d;
	uint64_t v;
	int n;

	n = spop_decode_varint(p, len, &v);
	if (n == 0 || n > SPOP_VARINT_MAX_LEN || (n > 0 && (size_t)n > len))
		abort();
	if (n > 0) {
		unsigned char back[SPOP_VARINT_MAX_LEN];
		uint64_t v2;
		int m = spop_encode_varint(v, back, sizeof(back));

		/* what we decode we can encode, and it decodes to the same value */
		if (m < 1 || spop_decode_varint(back, (size_t)m, &v2) != m || v2 != v)
			abort();
	}
	n = spop_decode_data(p, len, &d);
	if (n == 0 || (n > 0 && (size_t)n > len))
		abort();
	if (n > 0)
		fuzz_touch_data(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint32_t limits[4] = { SPOP_MIN_FRAME_SIZE, 16380u, 65536u, SPOP_MAX_FRAME_SIZE };
	struct spop_frame f;
	enum spop_status st;
	uint32_t max, flen;
	size_t off = 0;
	int n, frames = 0;

	if (size < 1)
		return 0;
	/* the input as a binary header list too (a "ratelimit-done"'s hdrs):
	 * a value found lies inside the input */
	{
		struct spop_str v = { NULL, 0 };

		if (spop_hdrs_find(data, size, "x-usage-units", 13, &v) == 1) {
			if ((const uint8_t *)v.ptr < data || (const uint8_t *)v.ptr + v.len > data + size)
				abort();
			fuzz_touch(v);
		}
	}
	max = limits[data[0] & 3];
	data++;
	size--;

	fuzz_scalars(data, size);

	st = SPOP_ST_NORMAL;
	n = spop_peek_length(data, size, max, &flen, &st);
	if (n == 1 && (flen == 0 || flen > max))
		abort();
	if (n == -1 && st != SPOP_ST_INVALID && st != SPOP_ST_TOO_BIG)
		abort();

	/* a stream of frames, as conn_process() consumes it */
	while (off < size && frames < 64) {
		st = SPOP_ST_NORMAL;
		n = spop_decode_frame(data + off, size - off, max, &f, &st);
		if (n == 0)
			break;
		if (n < 0) {
			if ((unsigned)st >= SPOP_ST_COUNT || st == SPOP_ST_NORMAL)
				abort();
			break;
		}
		if ((size_t)n > size - off || n < 4 + 5 + 2)
			abort();
		fuzz_walk_frame(&f);
		off += (size_t)n;
		frames++;
	}
	return 0;
}
