/*
 * test_spop - the SPOP codec against HAProxy's own bytes.
 *
 * Every decode runs on input that ends right before a PROT_NONE page
 * (harness.h), so reading one byte too far crashes instead of passing.
 * Expected bytes are written out by hand from spec §3 (HAProxy's doc/SPOE.txt) and
 * from frames captured from HAProxy 2.6.12 and 3.2.0 (tests/vectors, see its
 * README; $VECTORS_DIR overrides).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "spop.h"

#define MAX_FRAME   16380u      /* what HAProxy announces by default */

/* ------------------------------------------------------------------ */
/* Test-side helpers                                                   */
/* ------------------------------------------------------------------ */

/* A frame builder independent of the encoders under test (it only uses
 * spop_encode_varint, which the vector tests pin down first). */
struct tb {
	unsigned char b[4096];
	size_t len;
};

/* Borrows <p>: appends its <n> bytes to <t>. */
static void tb_bytes(struct tb *t, const void *p, size_t n)
{
	assert_true(n <= sizeof(t->b) - t->len);
	memcpy(t->b + t->len, p, n);
	t->len += n;
}

/* Appends byte <v> to <t>. */
static void tb_byte(struct tb *t, unsigned v)
{
	unsigned char c = (unsigned char)v;

	tb_bytes(t, &c, 1);
}

/* Appends varint <v> to <t>. */
static void tb_varint(struct tb *t, uint64_t v)
{
	int n = spop_encode_varint(v, t->b + t->len, sizeof(t->b) - t->len);

	assert_true(n > 0);
	t->len += (size_t)n;
}

/* Borrows <s>: appends it to <t> as a bare STRING. */
static void tb_str(struct tb *t, const char *s)
{
	tb_varint(t, strlen(s));
	tb_bytes(t, s, strlen(s));
}

/* Restarts <t> with a frame header: a length placeholder, <type>,
 * <flags>, <sid>, <fid>. */
static void tb_begin(struct tb *t, unsigned type, uint32_t flags,
                     uint64_t sid, uint64_t fid)
{
	unsigned char fl[4] = {
		(unsigned char)(flags >> 24), (unsigned char)(flags >> 16),
		(unsigned char)(flags >> 8), (unsigned char)flags,
	};

	t->len = 0;
	tb_bytes(t, "\0\0\0\0", 4);
	tb_byte(t, type);
	tb_bytes(t, fl, 4);
	tb_varint(t, sid);
	tb_varint(t, fid);
}

/* Fills <t>'s length prefix. Returns the frame's total size. */
static size_t tb_end(struct tb *t)
{
	size_t n = t->len - 4;

	t->b[0] = (unsigned char)(n >> 24);
	t->b[1] = (unsigned char)(n >> 16);
	t->b[2] = (unsigned char)(n >> 8);
	t->b[3] = (unsigned char)n;
	return t->len;
}

/* Appends KV item <name> = STR <val> to <t>. */
static void tb_kv_str(struct tb *t, const char *name, const char *val)
{
	tb_str(t, name);
	tb_byte(t, SPOP_T_STR);
	tb_str(t, val);
}

/* Appends KV item <name> = integer <v> of <type> to <t>. */
static void tb_kv_int(struct tb *t, const char *name, unsigned type, uint64_t v)
{
	tb_str(t, name);
	tb_byte(t, type);
	tb_varint(t, v);
}

/* Borrows <p>: its 4 bytes, big-endian. */
static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

/* Decodes <n> bytes of <src> placed against <b>'s guard page (mapped
 * here, freed by the caller: slices in <f> point into it). */
static int decode_guarded(struct harness_buf *b, const unsigned char *src,
                          size_t n, uint32_t max, struct spop_frame *f,
                          enum spop_status *st)
{
	assert_int_equal(harness_buf_init(b, n), 0);
	return spop_decode_frame(harness_buf_place(b, src, n), n, max, f, st);
}

/* The same, for a one-shot status check. Returns the decoder's result. */
static int decode_once(const unsigned char *src, size_t n, uint32_t max,
                       enum spop_status *st)
{
	struct harness_buf b;
	struct spop_frame f;
	int r = decode_guarded(&b, src, n, max, &f, st);

	harness_buf_free(&b);
	return r;
}

struct frame_ctx {
	uint32_t max;
	struct spop_frame f;
	enum spop_status st;
};

/* harness feed callback: spop_decode_frame() with <ctx>'s max, keeping
 * the frame and status in <ctx>. */
static int frame_cb(const unsigned char *buf, size_t len, void *ctx)
{
	struct frame_ctx *c = ctx;

	return spop_decode_frame(buf, len, c->max, &c->f, &c->st);
}

/* True when slice <s> holds exactly C string <c> (the test's own
 * comparison, not spop_str_eq's). */
static bool str_is(struct spop_str s, const char *c)
{
	return s.len == strlen(c) && memcmp(s.ptr, c, s.len) == 0;
}

/* Writes into <dst>: hex text <h> as bytes; fails the test if malformed. */
static size_t hex(const char *h, unsigned char *dst, size_t cap)
{
	long n = harness_hex_decode(h, dst, cap);

	assert_true(n >= 0);
	return (size_t)n;
}

/* ------------------------------------------------------------------ */
/* Varint                                                              */
/* ------------------------------------------------------------------ */

static const struct {
	uint64_t v;
	const char *hex;
} varint_vectors[] = {
	{ 0, "00" },
	{ 1, "01" },
	{ 239, "ef" },
	{ 240, "f0 00" },
	{ 255, "ff 00" },
	{ 256, "f0 01" },
	{ 2287, "ff 7f" },
	{ 2288, "f0 80 00" },
	{ 16380, "fc f0 06" },
	{ 264431, "ff ff 7f" },
	{ 264432, "f0 80 80 00" },
	{ 33818864, "f0 80 80 80 00" },
	{ UINT32_MAX, "ff f0 fe fe 7e" },
	{ UINT64_MAX, "ff f0 fe fe fe fe fe fe fe 0e" },
};

/* HAProxy's varint layout, both ways, on exact-size guarded input. */
static void test_varint_vectors(void **state)
{
	unsigned char want[16], got[16];
	struct harness_buf b;
	size_t i, n, k;
	uint64_t v;

	(void)state;
	assert_int_equal(harness_buf_init(&b, 16), 0);
	for (i = 0; i < sizeof(varint_vectors) / sizeof(varint_vectors[0]); i++) {
		n = hex(varint_vectors[i].hex, want, sizeof(want));
		assert_int_equal(spop_encode_varint(varint_vectors[i].v, got,
		                                    sizeof(got)), (int)n);
		assert_memory_equal(got, want, n);
		/* Decode both on exactly its bytes and with trailing bytes. */
		assert_int_equal(spop_decode_varint(harness_buf_place(&b, want, n),
		                                    n, &v), (int)n);
		assert_true(v == varint_vectors[i].v);
		got[n] = 0x7f;
		assert_int_equal(spop_decode_varint(got, n + 1, &v), (int)n);
		assert_true(v == varint_vectors[i].v);
		/* Every strict prefix is a truncated varint. */
		for (k = 0; k < n; k++)
			assert_int_equal(spop_decode_varint(
				harness_buf_place(&b, want, k), k, &v), -1);
	}
	/* int64 -1 travels as 2^64-1. */
	assert_int_equal(spop_encode_varint((uint64_t)(int64_t)-1, got,
	                                    sizeof(got)), 10);
	harness_buf_free(&b);
}

/* Bytes HAProxy's encoding needs for <v>, from the spec's length table
 * (each length starts where the previous one ends). */
static int varint_len_oracle(uint64_t v)
{
	uint64_t start = 240, span = 1u << 11;
	int n = 1;

	if (v < 240)
		return 1;
	for (n = 2; n < 10; n++) {
		if (v - start < span)
			return n;
		start += span;
		span <<= 7;
	}
	return 10;
}

/* Round trip of <v> in <b>: length per the oracle, same value back, and
 * refused one byte short of room. */
static void check_roundtrip(struct harness_buf *b, uint64_t v)
{
	unsigned char tmp[16];
	uint64_t back = 0;
	int n;

	n = spop_encode_varint(v, tmp, sizeof(tmp));
	if (n != varint_len_oracle(v))
		fail_msg("varint %llu: %d bytes, expected %d",
		         (unsigned long long)v, n, varint_len_oracle(v));
	if (spop_decode_varint(harness_buf_place(b, tmp, (size_t)n), (size_t)n,
	                       &back) != n || back != v)
		fail_msg("varint %llu did not round-trip", (unsigned long long)v);
	/* One byte short of room: refused, nothing written past <cap>. */
	if (spop_encode_varint(v, harness_buf_place(b, NULL, (size_t)n - 1),
	                       (size_t)n - 1) != -1)
		fail_msg("varint %llu encoded into %d bytes", (unsigned long long)v,
		         n - 1);
}

/* All values up to 300000, every power of two +-1, and random ones. */
static void test_varint_roundtrip(void **state)
{
	struct harness_buf b;
	uint64_t v, x = 0x9e3779b97f4a7c15ull;
	unsigned k;
	int i;

	(void)state;
	assert_int_equal(harness_buf_init(&b, 16), 0);
	for (v = 0; v < 300000; v++)
		check_roundtrip(&b, v);
	for (k = 0; k < 64; k++) {
		v = (uint64_t)1 << k;
		check_roundtrip(&b, v - 1);
		check_roundtrip(&b, v);
		check_roundtrip(&b, v + 1);
	}
	check_roundtrip(&b, UINT64_MAX);
	check_roundtrip(&b, UINT64_MAX - 1);
	for (i = 0; i < 200000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		check_roundtrip(&b, x >> (i % 64));
	}
	harness_buf_free(&b);
}

/* Over 10 bytes, over 64 bits, truncated: all refused. */
static void test_varint_reject(void **state)
{
	static const char *bad[] = {
		/* 11 bytes: continuation past the 10-byte cap */
		"f0 80 80 80 80 80 80 80 80 80 00",
		/* 10th byte still says "more" */
		"f0 80 80 80 80 80 80 80 80 80",
		/* 10 bytes, but over 64 bits */
		"ff f0 fe fe fe fe fe fe fe 0f",
		"ff f0 fe fe fe fe fe fe ff 0e",
		"f0 80 80 80 80 80 80 80 80 7f",
		/* 10th byte with bits at 64 and up (a shift would drop them) */
		"f0 80 80 80 80 80 80 80 80 10",
		"f0 80 80 80 80 80 80 80 80 20",
		"ff ff ff ff ff ff ff ff ff 40",
		/* truncated */
		"f0", "ff ff", "f0 80 80 80",
	};
	unsigned char in[16];
	struct harness_buf b;
	uint64_t v;
	size_t i, n;

	(void)state;
	assert_int_equal(harness_buf_init(&b, 16), 0);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		n = hex(bad[i], in, sizeof(in));
		if (spop_decode_varint(harness_buf_place(&b, in, n), n, &v) != -1)
			fail_msg("varint \"%s\" accepted", bad[i]);
	}
	assert_int_equal(spop_decode_varint(harness_buf_place(&b, NULL, 0), 0, &v),
	                 -1);
	/* The largest 10-byte value that fits is accepted. */
	n = hex("ff f0 fe fe fe fe fe fe fe 0e", in, sizeof(in));
	assert_int_equal(spop_decode_varint(harness_buf_place(&b, in, n), n, &v), 10);
	assert_true(v == UINT64_MAX);
	assert_int_equal(spop_encode_varint(5, NULL, 0), -1);
	harness_buf_free(&b);
}

/* ------------------------------------------------------------------ */
/* Typed data                                                          */
/* ------------------------------------------------------------------ */

/* Every TYPED-DATA type, its cuts, and the reserved types. */
static void test_data_types(void **state)
{
	static const struct {
		const char *hex;
		enum spop_type type;
		uint64_t num;       /* INT as two's complement, BOOL 0/1 */
		const char *str;
	} ok[] = {
		{ "00", SPOP_T_NULL, 0, NULL },
		{ "11", SPOP_T_BOOL, 1, NULL },
		{ "01", SPOP_T_BOOL, 0, NULL },
		/* 0x10 is NULL with the true flag (the negasus 1.0.5 bug), not a bool */
		{ "10", SPOP_T_NULL, 0, NULL },
		{ "02 05", SPOP_T_INT32, 5, NULL },
		{ "02 ff f0 fe fe fe fe fe fe fe 0e", SPOP_T_INT32, UINT64_MAX, NULL },
		{ "03 ff f0 fe fe 7e", SPOP_T_UINT32, UINT32_MAX, NULL },
		{ "04 01", SPOP_T_INT64, 1, NULL },
		{ "04 ff f0 fe fe fe fe fe fe fe 0e", SPOP_T_INT64, UINT64_MAX, NULL },
		{ "05 ff f0 fe fe fe fe fe fe fe 0e", SPOP_T_UINT64, UINT64_MAX, NULL },
		{ "06 7f 00 00 01", SPOP_T_IPV4, 0, NULL },
		{ "07 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01", SPOP_T_IPV6, 0, NULL },
		{ "08 08 41 43 43 2d 31 30 30 31", SPOP_T_STR, 0, "ACC-1001" },
		{ "08 00", SPOP_T_STR, 0, "" },
		{ "09 03 00 ff 41", SPOP_T_BIN, 0, "\0\377A" },
	};
	static const char *bad[] = {
		"", "0a", "0b", "0c", "0d", "0e", "0f", "1a", "ff 00",
		"02", "04 f0", "05 ff ff", "06 7f 00 00", "07 00",
		"07 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
		"08", "08 05 41 42 43 44", "09 f0", "08 ff ff 7f 41",
		"04 f0 80 80 80 80 80 80 80 80 80 00",
	};
	unsigned char in[32];
	struct harness_buf b;
	struct spop_data d;
	size_t i, n, k, slen;

	(void)state;
	assert_int_equal(harness_buf_init(&b, 32), 0);
	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		n = hex(ok[i].hex, in, sizeof(in));
		memset(&d, 0xee, sizeof(d));
		if (spop_decode_data(harness_buf_place(&b, in, n), n, &d) != (int)n)
			fail_msg("data \"%s\" not decoded whole", ok[i].hex);
		assert_int_equal(d.type, ok[i].type);
		switch (ok[i].type) {
		case SPOP_T_BOOL:
			assert_int_equal(d.v.b, ok[i].num != 0);
			break;
		case SPOP_T_INT32:
		case SPOP_T_INT64:
			assert_true((uint64_t)d.v.i == ok[i].num);
			break;
		case SPOP_T_UINT32:
		case SPOP_T_UINT64:
			assert_true(d.v.u == ok[i].num);
			break;
		case SPOP_T_IPV4:
			assert_memory_equal(d.v.ip, "\x7f\0\0\x01", 4);
			break;
		case SPOP_T_IPV6:
			assert_memory_equal(d.v.ip, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x01", 16);
			break;
		case SPOP_T_STR:
		case SPOP_T_BIN:
			slen = ok[i].type == SPOP_T_BIN ? 3 : strlen(ok[i].str);
			assert_int_equal(d.v.s.len, slen);
			assert_memory_equal(d.v.s.ptr, ok[i].str, slen);
			break;
		default:
			break;
		}
		/* Every cut of a value that has a body is an error. */
		for (k = 0; k < n; k++)
			if (spop_decode_data(harness_buf_place(&b, in, k), k, &d) != -1)
				fail_msg("data \"%s\" cut at %zu accepted", ok[i].hex, k);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		n = hex(bad[i], in, sizeof(in));
		if (spop_decode_data(harness_buf_place(&b, in, n), n, &d) != -1)
			fail_msg("data \"%s\" accepted", bad[i]);
	}
	harness_buf_free(&b);
}

/* ------------------------------------------------------------------ */
/* HAProxy's vectors                                                   */
/* ------------------------------------------------------------------ */

enum vec_kind {
	VEC_HELLO = 0,
	VEC_HEALTHCHECK,
	VEC_NOTIFY,
	VEC_DISCONNECT,
	VEC_OTHER,
	VEC_KIND_COUNT
};

/* File name prefix of each kind, as vec_classify() reads it. */
static const char *const vec_prefix[VEC_KIND_COUNT] = {
	[VEC_HELLO] = "haproxy-hello-",
	[VEC_HEALTHCHECK] = "haproxy-hello-healthcheck-",
	[VEC_NOTIFY] = "notify-",
	[VEC_DISCONNECT] = "haproxy-disconnect-",
	[VEC_OTHER] = "",
};

struct vec {
	const char *path;
	enum vec_kind kind;
	bool v26;               /* captured from HAProxy 2.6 (else 3.x) */
	int notify_n;           /* N of notify-N.hex */
	unsigned char bytes[1024];
	size_t len;
};

/* Sets <v>'s kind (the longest vec_prefix its name starts with), HAProxy
 * version and N from its path. */
static void vec_classify(struct vec *v)
{
	const char *base = strrchr(v->path, '/');
	size_t best = 0, plen;
	int k;

	base = base != NULL ? base + 1 : v->path;
	v->v26 = strstr(v->path, "haproxy-2.6/") != NULL;
	v->kind = VEC_OTHER;
	for (k = 0; k < VEC_OTHER; k++) {
		plen = strlen(vec_prefix[k]);
		if (plen > best && strncmp(base, vec_prefix[k], plen) == 0) {
			v->kind = (enum vec_kind)k;
			best = plen;
		}
	}
	if (v->kind == VEC_NOTIFY)
		v->notify_n = atoi(base + best);
}

/* Loads every vector into <vs> (<max> rows). Returns how many; fails the
 * test unless every kind the README lists is there for both HAProxy
 * versions (3.2 closed without a DISCONNECT), so a missing or partial copy
 * of tests/vectors cannot pass silently. */
static size_t vec_load_all(struct vec *vs, size_t max)
{
	static char paths[64][HARNESS_PATH_MAX];
	char dir[HARNESS_PATH_MAX];
	unsigned seen[2][VEC_KIND_COUNT] = { { 0 } };
	size_t n, i;
	long len;
	int k, v26;

	snprintf(dir, sizeof(dir), "%s", harness_vectors_dir());
	n = harness_find_files(dir, ".hex", paths, 64);
	if (n == 0)
		fail_msg("no *.hex under %s (run from the repo root, or set "
		         "VECTORS_DIR)", dir);
	assert_true(n <= max);
	for (i = 0; i < n; i++) {
		vs[i].path = paths[i];
		vec_classify(&vs[i]);
		len = harness_load_hex(paths[i], vs[i].bytes, sizeof(vs[i].bytes));
		if (len < 4)
			fail_msg("%s: not a hex frame", paths[i]);
		vs[i].len = (size_t)len;
		assert_int_equal(be32(vs[i].bytes) + 4, vs[i].len);
		seen[vs[i].v26][vs[i].kind]++;
	}
	for (v26 = 0; v26 < 2; v26++) {
		for (k = VEC_HELLO; k < VEC_OTHER; k++) {
			if (seen[v26][k] > 0 || (!v26 && k == VEC_DISCONNECT))
				continue;
			fail_msg("%s: no %s/%s*.hex (a partial copy?)", dir,
			         v26 ? "haproxy-2.6" : "haproxy-3.2", vec_prefix[k]);
		}
		if (seen[v26][VEC_NOTIFY] < 3)
			fail_msg("%s: %u notify vectors for %s, want 3", dir,
			         seen[v26][VEC_NOTIFY], v26 ? "2.6" : "3.2");
	}
	return n;
}

/* <s> looks like the random UUID HAProxy uses as engine-id. */
static void check_uuid(struct spop_str s)
{
	size_t i;

	assert_int_equal(s.len, 36);
	for (i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23)
			assert_int_equal(s.ptr[i], '-');
		else
			assert_true(harness_hex_nibble((unsigned char)s.ptr[i]) >= 0);
	}
}

/* Field-by-field expectations for one decoded vector <f>. */
static void vec_check_fields(const struct vec *v, const struct spop_frame *f)
{
	struct spop_iter mi, ai;
	struct spop_message m;
	struct spop_arg a;
	char key[16];
	unsigned nargs = 0;

	assert_int_equal(f->hdr.flags, SPOP_FLAG_FIN);
	switch (v->kind) {
	case VEC_HELLO:
	case VEC_HEALTHCHECK:
		assert_int_equal(f->hdr.type, SPOP_FRAME_HAPROXY_HELLO);
		assert_true(f->hdr.stream_id == 0 && f->hdr.frame_id == 0);
		assert_true(f->u.hello.has_versions);
		assert_true(f->u.hello.version_ok);
		assert_true(f->u.hello.has_max_frame_size);
		assert_int_equal(f->u.hello.max_frame_size, 16380);
		assert_true(f->u.hello.has_capabilities);
		assert_false(f->u.hello.cap_async);
		assert_false(f->u.hello.cap_fragmentation);
		if (v->kind == VEC_HELLO) {
			assert_true(f->u.hello.cap_pipelining);
			assert_false(f->u.hello.healthcheck);
			check_uuid(f->u.hello.engine_id);
		} else {
			assert_false(f->u.hello.cap_pipelining);
			assert_true(f->u.hello.healthcheck);
			assert_int_equal(f->u.hello.engine_id.len, 0);
		}
		break;
	case VEC_DISCONNECT:
		assert_int_equal(f->hdr.type, SPOP_FRAME_HAPROXY_DISCONNECT);
		assert_true(f->hdr.stream_id == 0 && f->hdr.frame_id == 0);
		assert_int_equal(f->u.disconnect.status, SPOP_ST_NORMAL);
		assert_true(str_is(f->u.disconnect.message, "normal"));
		break;
	case VEC_NOTIFY:
		assert_int_equal(f->hdr.type, SPOP_FRAME_NOTIFY);
		/* 2.6: process-wide counter from 0, stepping by 2 here;
		 * 3.x: per-connection odd ids. */
		assert_int_equal(f->hdr.stream_id, v->v26 ? 2 * (v->notify_n - 1)
		                                          : 2 * v->notify_n - 1);
		assert_int_equal(f->hdr.frame_id, 1);
		spop_iter_messages(&f->u.notify, &mi);
		assert_int_equal(spop_next_message(&mi, &m), 1);
		assert_true(str_is(m.name, "ratelimit"));
		assert_int_equal(m.nb_args, 3);
		spop_iter_args(&m, &ai);
		while (spop_next_arg(&ai, &a)) {
			if (nargs == 0) {
				assert_true(str_is(a.name, "policy"));
				assert_int_equal(a.value.type, SPOP_T_STR);
				assert_true(str_is(a.value.v.s, "transfer"));
			} else if (nargs == 1) {
				assert_true(str_is(a.name, "key"));
				if (v->notify_n == 3) {
					assert_int_equal(a.value.type, SPOP_T_NULL);
				} else {
					snprintf(key, sizeof(key), "ACC-100%d", v->notify_n);
					assert_int_equal(a.value.type, SPOP_T_STR);
					assert_true(str_is(a.value.v.s, key));
				}
			} else {
				assert_true(str_is(a.name, "cost"));
				assert_int_equal(a.value.type, SPOP_T_INT64);
				assert_int_equal(a.value.v.i, 1);
			}
			nargs++;
		}
		assert_int_equal(nargs, 3);
		assert_int_equal(spop_next_message(&mi, &m), 0);
		break;
	default:
		print_message("# no field checks for %s\n", v->path);
		break;
	}
}

/* Every captured frame: whole (fields checked), byte by byte, with a
 * following frame, and against a max one byte too small. */
static void test_vectors_decode(void **state)
{
	static struct vec vs[64];
	struct frame_ctx ctx;
	struct harness_buf b;
	struct spop_frame f;
	enum spop_status st;
	size_t n, i;
	int r;

	(void)state;
	n = vec_load_all(vs, 64);
	for (i = 0; i < n; i++) {
		/* Whole. */
		memset(&f, 0, sizeof(f));
		r = decode_guarded(&b, vs[i].bytes, vs[i].len, MAX_FRAME, &f, &st);
		if (r != (int)vs[i].len)
			fail_msg("%s: decoded %d of %zu bytes", vs[i].path, r, vs[i].len);
		vec_check_fields(&vs[i], &f);
		harness_buf_free(&b);
		/* Byte by byte: "need more" for every strict prefix. */
		ctx.max = MAX_FRAME;
		r = harness_feed_bytes(vs[i].bytes, vs[i].len, frame_cb, &ctx);
		if (r != (int)vs[i].len)
			fail_msg("%s: fed byte by byte, got %d", vs[i].path, r);
		/* Followed by more bytes (the next frame): still one frame. */
		memcpy(vs[i].bytes + vs[i].len, "\0\0", 2);
		r = harness_feed_whole(vs[i].bytes, vs[i].len + 2, frame_cb, &ctx);
		assert_int_equal(r, (int)vs[i].len);
		/* A max smaller than the frame: refused as too big. */
		r = decode_once(vs[i].bytes, vs[i].len, (uint32_t)vs[i].len - 5, &st);
		assert_int_equal(r, -1);
		assert_int_equal(st, SPOP_ST_TOO_BIG);
	}
	print_message("# %zu vector files decoded\n", n);
}

/* Size of a KV item named <name> whose TYPED-DATA is <vsize> bytes. */
static size_t kv_size(const char *name, size_t vsize)
{
	unsigned char tmp[16];

	return (size_t)spop_encode_varint(strlen(name), tmp, sizeof(tmp)) +
	       strlen(name) + vsize;
}

/* Size of a STR TYPED-DATA of <len> bytes. */
static size_t str_size(size_t len)
{
	unsigned char tmp[16];

	return 1 + (size_t)spop_encode_varint(len, tmp, sizeof(tmp)) + len;
}

/* Writes into <cuts>: the content lengths at which <v> is a complete,
 * valid frame of fewer items (header only, after each KV item). Returns
 * how many, the last being the full length. */
static size_t vec_boundaries(const struct vec *v, size_t *cuts)
{
	const unsigned char *p = v->bytes + 9;     /* past length, type, flags */
	size_t n = 0, left = v->len - 9;
	uint64_t sid, fid;
	int a, c;

	/* type + flags + the two varints as HAProxy wrote them */
	a = spop_decode_varint(p, left, &sid);
	assert_true(a > 0);
	c = spop_decode_varint(p + a, left - (size_t)a, &fid);
	assert_true(c > 0);
	cuts[n++] = 5 + (size_t)a + (size_t)c;
	switch (v->kind) {
	case VEC_HELLO:
	case VEC_HEALTHCHECK:
		cuts[n] = cuts[n - 1] + kv_size("supported-versions", str_size(3)), n++;
		cuts[n] = cuts[n - 1] + kv_size("max-frame-size", 1 + 3), n++;
		if (v->kind == VEC_HELLO) {
			cuts[n] = cuts[n - 1] + kv_size("capabilities", str_size(10)), n++;
			cuts[n] = cuts[n - 1] + kv_size("engine-id", str_size(36)), n++;
		} else {
			cuts[n] = cuts[n - 1] + kv_size("capabilities", str_size(0)), n++;
			cuts[n] = cuts[n - 1] + kv_size("healthcheck", 1), n++;
		}
		break;
	case VEC_DISCONNECT:
		cuts[n] = cuts[n - 1] + kv_size("status-code", 2), n++;
		cuts[n] = cuts[n - 1] + kv_size("message", str_size(6)), n++;
		break;
	case VEC_NOTIFY:
		/* A NOTIFY without messages is legal; one with a partial message
		 * is not, so the only other boundary is the end. */
		cuts[n++] = v->len - 4;
		break;
	default:
		return 0;
	}
	return n;
}

/* A frame whose length says N while its content needs more than N: the
 * frame is "complete" but its content is cut, at every offset. */
static void test_vectors_truncated_content(void **state)
{
	static struct vec vs[64];
	unsigned char cut[1024];
	size_t cuts[16], ncuts, n, i, k, j;
	enum spop_status st;
	bool boundary;
	int r;

	(void)state;
	n = vec_load_all(vs, 64);
	for (i = 0; i < n; i++) {
		ncuts = vec_boundaries(&vs[i], cuts);
		if (ncuts == 0)
			continue;
		/* The item sizes above must add up to the frame: this pins the
		 * key order and value sizes HAProxy sends. */
		assert_int_equal(cuts[ncuts - 1], vs[i].len - 4);
		for (k = 0; k < vs[i].len - 4; k++) {
			cut[0] = (unsigned char)(k >> 24);
			cut[1] = (unsigned char)(k >> 16);
			cut[2] = (unsigned char)(k >> 8);
			cut[3] = (unsigned char)k;
			memcpy(cut + 4, vs[i].bytes + 4, k);
			boundary = false;
			for (j = 0; j < ncuts; j++)
				boundary = boundary || cuts[j] == k;
			st = SPOP_ST_NORMAL;
			r = decode_once(cut, 4 + k, MAX_FRAME, &st);
			if (boundary && r != (int)(4 + k))
				fail_msg("%s cut at %zu (an item boundary): got %d",
				         vs[i].path, k, r);
			if (!boundary && (r != -1 || st != SPOP_ST_INVALID))
				fail_msg("%s cut at %zu: got %d status %d, expected -1/%d",
				         vs[i].path, k, r, st, SPOP_ST_INVALID);
		}
	}
}

/* ------------------------------------------------------------------ */
/* Malformed frames                                                    */
/* ------------------------------------------------------------------ */

/* The length prefix alone: need more, bounds, both statuses. */
static void test_peek_length(void **state)
{
	unsigned char in[8];
	enum spop_status st = SPOP_ST_NORMAL;
	uint32_t flen = 0;
	size_t n, k;

	(void)state;
	n = hex("00 00 3f fc", in, sizeof(in));
	for (k = 0; k < 4; k++)
		assert_int_equal(spop_peek_length(in, k, MAX_FRAME, &flen, &st), 0);
	assert_int_equal(spop_peek_length(in, n, MAX_FRAME, &flen, &st), 1);
	assert_int_equal(flen, 16380);
	n = hex("00 00 3f fd", in, sizeof(in));
	assert_int_equal(spop_peek_length(in, n, MAX_FRAME, &flen, &st), -1);
	assert_int_equal(st, SPOP_ST_TOO_BIG);
	n = hex("ff ff ff ff", in, sizeof(in));
	assert_int_equal(spop_peek_length(in, n, SPOP_MAX_FRAME_SIZE, &flen, &st), -1);
	assert_int_equal(st, SPOP_ST_TOO_BIG);
	n = hex("00 00 00 00", in, sizeof(in));
	assert_int_equal(spop_peek_length(in, n, MAX_FRAME, &flen, &st), -1);
	assert_int_equal(st, SPOP_ST_INVALID);
	n = hex("00 00 00 01", in, sizeof(in));
	assert_int_equal(spop_peek_length(in, n, MAX_FRAME, &flen, &st), 1);
	assert_int_equal(flen, 1);
}

/* Broken headers, ids and flags, each with its status code. */
static void test_malformed_hex(void **state)
{
	static const struct {
		const char *what;
		const char *hex;
		enum spop_status st;
	} cases[] = {
		{ "length 0", "00000000", SPOP_ST_INVALID },
		{ "length 0 with bytes after", "00000000 01 00000001 00 00", SPOP_ST_INVALID },
		{ "length > max", "00003ffd", SPOP_ST_TOO_BIG },
		{ "length 2^32-1", "ffffffff 01", SPOP_ST_TOO_BIG },
		{ "header: type only", "00000001 01", SPOP_ST_INVALID },
		{ "header: flags cut", "00000003 03 0000", SPOP_ST_INVALID },
		{ "header: no ids", "00000005 03 00000001", SPOP_ST_INVALID },
		{ "header: no frame-id", "00000006 03 00000001 00", SPOP_ST_INVALID },
		{ "header: truncated varint", "00000006 03 00000001 f0", SPOP_ST_INVALID },
		{ "header: truncated varint 2", "00000008 03 00000001 01 f0 80", SPOP_ST_INVALID },
		{ "overlong varint (11 bytes)",
		  "00000011 03 00000001 01 f0 80 80 80 80 80 80 80 80 80 00", SPOP_ST_INVALID },
		{ "varint over 64 bits",
		  "00000010 03 00000001 01 ff f0 fe fe fe fe fe fe fe 0f", SPOP_ST_INVALID },
		{ "HELLO without FIN", "00000007 01 00000000 00 00", SPOP_ST_FRAG_NOT_SUPPORTED },
		{ "NOTIFY without FIN", "00000007 03 00000000 01 01", SPOP_ST_FRAG_NOT_SUPPORTED },
		{ "NOTIFY ABORT without FIN", "00000007 03 00000002 01 01", SPOP_ST_FRAG_NOT_SUPPORTED },
		{ "UNSET fragment", "00000007 00 00000000 01 01", SPOP_ST_FRAG_NOT_SUPPORTED },
		{ "HELLO with stream-id 1", "00000007 01 00000001 01 00", SPOP_ST_INVALID },
		{ "HELLO with frame-id 1", "00000007 01 00000001 00 01", SPOP_ST_INVALID },
		{ "HELLO with big stream-id", "00000008 01 00000001 f0 00 00", SPOP_ST_INVALID },
		{ "DISCONNECT with stream-id 1", "00000007 02 00000001 01 00", SPOP_ST_INVALID },
		{ "DISCONNECT with frame-id 1", "00000007 02 00000001 00 01", SPOP_ST_INVALID },
	};
	unsigned char in[64];
	enum spop_status st;
	size_t i, n;
	int r;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		n = hex(cases[i].hex, in, sizeof(in));
		st = SPOP_ST_NORMAL;
		r = decode_once(in, n, MAX_FRAME, &st);
		if (r != -1 || st != cases[i].st)
			fail_msg("%s: got %d status %d, expected -1 status %d",
			         cases[i].what, r, st, cases[i].st);
	}
}

/* Malformed content built with the test's own builder. */
static void test_malformed_content(void **state)
{
	struct tb t;
	enum spop_status st;
	struct frame_ctx ctx;
	unsigned ty;
	size_t n;
	int r;

#define EXPECT_INVALID(what) do {                                           \
		n = tb_end(&t);                                                 \
		st = SPOP_ST_NORMAL;                                            \
		r = decode_once(t.b, n, MAX_FRAME, &st);                        \
		if (r != -1 || st != SPOP_ST_INVALID)                           \
			fail_msg("%s: got %d status %d", what, r, st);          \
		/* and it is not decided before it is complete */               \
		ctx.max = MAX_FRAME;                                            \
		assert_int_equal(harness_feed_bytes(t.b, n, frame_cb, &ctx), -1); \
		assert_int_equal(ctx.st, SPOP_ST_INVALID);                      \
	} while (0)

	(void)state;
	/* HELLO: KV name runs past the end. */
	tb_begin(&t, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0);
	tb_varint(&t, 32);
	tb_bytes(&t, "abc", 3);
	EXPECT_INVALID("HELLO name past the end");

	/* HELLO: name with a huge length (would wrap a pointer). */
	tb_begin(&t, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0);
	tb_varint(&t, UINT64_MAX);
	tb_bytes(&t, "abc", 3);
	EXPECT_INVALID("HELLO name of length 2^64-1");

	/* HELLO: STR value runs past the end. */
	tb_begin(&t, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0);
	tb_kv_str(&t, "supported-versions", "2.0");
	tb_str(&t, "engine-id");
	tb_byte(&t, SPOP_T_STR);
	tb_varint(&t, 100);
	tb_bytes(&t, "xyz", 3);
	EXPECT_INVALID("HELLO value past the end");

	/* HELLO: name without a value. */
	tb_begin(&t, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0);
	tb_kv_str(&t, "supported-versions", "2.0");
	tb_str(&t, "max-frame-size");
	EXPECT_INVALID("HELLO name without value");

	/* HELLO: truncated varint value. */
	tb_begin(&t, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0);
	tb_str(&t, "max-frame-size");
	tb_byte(&t, SPOP_T_UINT32);
	tb_byte(&t, 0xfc);
	tb_byte(&t, 0xf0);
	EXPECT_INVALID("HELLO truncated varint value");

	/* HELLO: an unknown key of an unknown type cannot be skipped. */
	for (ty = 10; ty < 16; ty++) {
		tb_begin(&t, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0);
		tb_kv_str(&t, "supported-versions", "2.0");
		tb_str(&t, "x-future");
		tb_byte(&t, ty);
		tb_bytes(&t, "\0\0\0\0", 4);
		EXPECT_INVALID("HELLO unknown data type");
	}

	/* DISCONNECT: value cut. */
	tb_begin(&t, SPOP_FRAME_HAPROXY_DISCONNECT, SPOP_FLAG_FIN, 0, 0);
	tb_kv_int(&t, "status-code", SPOP_T_UINT32, 3);
	tb_str(&t, "message");
	tb_byte(&t, SPOP_T_STR);
	tb_byte(&t, 10);
	EXPECT_INVALID("DISCONNECT message past the end");

	/* NOTIFY: name then nothing (NB-ARGS past the end). */
	tb_begin(&t, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, 1, 1);
	tb_str(&t, "ratelimit");
	EXPECT_INVALID("NOTIFY NB-ARGS past the end");

	/* NOTIFY: message name past the end. */
	tb_begin(&t, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, 1, 1);
	tb_varint(&t, 9);
	tb_bytes(&t, "rate", 4);
	EXPECT_INVALID("NOTIFY name past the end");

	/* NOTIFY: NB-ARGS 3, two args present. */
	tb_begin(&t, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, 1, 1);
	tb_str(&t, "ratelimit");
	tb_byte(&t, 3);
	tb_kv_str(&t, "policy", "transfer");
	tb_kv_str(&t, "key", "ACC-1001");
	EXPECT_INVALID("NOTIFY fewer args than NB-ARGS");

	/* NOTIFY: arg name without value. */
	tb_begin(&t, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, 1, 1);
	tb_str(&t, "ratelimit");
	tb_byte(&t, 1);
	tb_str(&t, "policy");
	EXPECT_INVALID("NOTIFY arg without value");

	/* NOTIFY: unknown data types, with and without flags. */
	for (ty = 10; ty < 16; ty++) {
		tb_begin(&t, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, 1, 1);
		tb_str(&t, "ratelimit");
		tb_byte(&t, 1);
		tb_str(&t, "key");
		tb_byte(&t, (ty & 1) ? ty | 0x10 : ty);
		tb_bytes(&t, "\x03""abc", 4);
		EXPECT_INVALID("NOTIFY unknown data type");
	}

	/* NOTIFY: a valid message followed by a broken one. */
	tb_begin(&t, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, 1, 1);
	tb_str(&t, "ratelimit");
	tb_byte(&t, 1);
	tb_kv_str(&t, "policy", "transfer");
	tb_str(&t, "other");
	tb_byte(&t, 1);
	tb_str(&t, "ip");
	tb_byte(&t, SPOP_T_IPV4);
	tb_bytes(&t, "\x7f\0\0", 3);
	EXPECT_INVALID("NOTIFY second message with truncated IPv4");

	/* NOTIFY: overlong varint in an INT64 arg. */
	tb_begin(&t, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, 1, 1);
	tb_str(&t, "ratelimit");
	tb_byte(&t, 1);
	tb_str(&t, "cost");
	tb_byte(&t, SPOP_T_INT64);
	tb_bytes(&t, "\xf0\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00", 11);
	EXPECT_INVALID("NOTIFY overlong varint");
#undef EXPECT_INVALID
}

/* A NOTIFY is validated (and its messages stepped over) without building
 * each value; the iterators read them whole (spop_decode_data's reader).
 * For every first byte of a value (each type, with flags) and payloads of
 * every shape: a NOTIFY whose one arg is the value's bytes, or any prefix
 * of them, is accepted exactly when the reader takes those bytes whole,
 * and its arg then iterates to the reader's value. */
static void check_notify_value(const unsigned char *val, size_t n, unsigned ty, size_t which)
{
	struct spop_data want;
	struct spop_frame fr;
	struct harness_buf b;
	struct spop_iter it, ia;
	struct spop_message m;
	struct spop_arg a;
	enum spop_status st = SPOP_ST_NORMAL;
	struct tb t;
	bool whole = spop_decode_data(val, n, &want) == (int)n;
	size_t len;
	int r;

	tb_begin(&t, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, 1, 1);
	tb_str(&t, "ratelimit");
	tb_byte(&t, 1);
	tb_str(&t, "v");
	tb_bytes(&t, val, n);
	len = tb_end(&t);
	r = decode_guarded(&b, t.b, len, MAX_FRAME, &fr, &st);
	if (!whole) {
		if (r != -1 || st != SPOP_ST_INVALID)
			fail_msg("type byte %#x payload %zu (%zu bytes): accepted, the reader refuses it",
			         ty, which, n);
		harness_buf_free(&b);
		return;
	}
	if (r != (int)len)
		fail_msg("type byte %#x payload %zu (%zu bytes): refused, the reader takes it", ty,
		         which, n);
	spop_iter_messages(&fr.u.notify, &it);
	assert_int_equal(spop_next_message(&it, &m), 1);
	spop_iter_args(&m, &ia);
	assert_int_equal(spop_next_arg(&ia, &a), 1);
	assert_int_equal(a.value.type, want.type);
	if (want.type == SPOP_T_STR || want.type == SPOP_T_BIN) {
		/* the same bytes, in the frame instead of <val> */
		assert_int_equal(a.value.v.s.len, want.v.s.len);
		assert_memory_equal(a.value.v.s.ptr, want.v.s.ptr, want.v.s.len);
	} else {
		assert_true(memcmp(&a.value.v, &want.v, sizeof(want.v)) == 0);
	}
	assert_int_equal(spop_next_arg(&ia, &a), 0);
	assert_int_equal(spop_next_message(&it, &m), 0);
	harness_buf_free(&b);
}

static void test_notify_skip_matches_read(void **state)
{
	static const struct {
		const char *p;
		size_t n;
	} payloads[] = {
		{ "", 0 }, { "\x05", 1 }, { "\xef", 1 }, { "\xf0", 1 }, { "\xf0\x80\x00", 3 },
		{ "\xf0\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00", 11 },
		{ "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 10 }, { "\x7f\0\0", 3 },
		{ "\x7f\0\0\1", 4 }, { "0123456789abcdef", 16 }, { "0123456789abcde", 15 },
		{ "\x03" "abc", 4 }, { "\x03" "ab", 3 }, { "\x00", 1 },
		{ "\xf0\x01" "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
		  "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
		  "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
		  "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 258 },
	};
	unsigned char val[300];
	unsigned ty;
	size_t i, k;

	(void)state;
	for (ty = 0; ty < 256; ty++) {
		for (i = 0; i < sizeof(payloads) / sizeof(payloads[0]); i++) {
			struct spop_data d;
			size_t n = 1 + payloads[i].n;
			int c;

			val[0] = (unsigned char)ty;
			memcpy(val + 1, payloads[i].p, payloads[i].n);
			c = spop_decode_data(val, n, &d);
			if (c == -1) {
				check_notify_value(val, n, ty, i);
				continue;
			}
			for (k = 1; k <= (size_t)c; k++)   /* the value and every prefix of it */
				check_notify_value(val, k, ty, i);
		}
	}
}

/* ------------------------------------------------------------------ */
/* HELLO and NOTIFY variants                                           */
/* ------------------------------------------------------------------ */

/* Decodes a HELLO built in <t> (after tb_end) into <h>; engine_id is
 * not kept (it would point into a freed buffer). */
static void decode_hello(struct tb *t, struct spop_hello *h)
{
	struct harness_buf b;
	struct spop_frame f;
	enum spop_status st;
	size_t n = tb_end(t);

	assert_int_equal(decode_guarded(&b, t->b, n, MAX_FRAME, &f, &st), (int)n);
	assert_int_equal(f.hdr.type, SPOP_FRAME_HAPROXY_HELLO);
	*h = f.u.hello;
	h->engine_id.ptr = NULL;
	harness_buf_free(&b);
}

/* HELLO leniency: version and capability lists with blanks, integer
 * types of max-frame-size, unknown keys skipped. */
static void test_hello_variants(void **state)
{
	static const struct {
		const char *versions;
		bool ok;
	} vsn[] = {
		{ "2.0", true }, { " 2.0 ", true }, { "1.0, 2.0", true },
		{ "2.0,1.0", true }, { "  3.0 ,\t2.0\t", true },
		{ "2.1", true },        /* a major implies its minors, 2.0 too */
		{ "1.0", false }, { "3.0", false }, { "", false }, { ",", false },
		{ "2", false }, { "2.", false }, { ".0", false }, { "2.0x", false },
		{ "20", false }, { "12.0", false }, { "2 .0", false },
		{ "99999.0, 2.0", true },
	};
	static const struct {
		const char *caps;
		bool pipe, async, frag;
	} caps[] = {
		{ "", false, false, false },
		{ "pipelining", true, false, false },
		{ " pipelining , async,fragmentation ", true, true, true },
		{ "async", false, true, false },
		{ "pipeliningx,xasync, frag mentation", false, false, false },
		{ ",,pipelining,,", true, false, false },
	};
	struct spop_hello h;
	struct tb t;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(vsn) / sizeof(vsn[0]); i++) {
		tb_begin(&t, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0);
		tb_kv_str(&t, "supported-versions", vsn[i].versions);
		decode_hello(&t, &h);
		assert_true(h.has_versions);
		if (h.version_ok != vsn[i].ok)
			fail_msg("versions \"%s\": version_ok %d", vsn[i].versions,
			         h.version_ok);
	}
	for (i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		tb_begin(&t, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0);
		tb_kv_str(&t, "capabilities", caps[i].caps);
		decode_hello(&t, &h);
		assert_true(h.has_capabilities);
		if (h.cap_pipelining != caps[i].pipe || h.cap_async != caps[i].async ||
		    h.cap_fragmentation != caps[i].frag)
			fail_msg("capabilities \"%s\"", caps[i].caps);
	}

	/* Nothing at all: the caller answers "not found". */
	tb_begin(&t, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0);
	decode_hello(&t, &h);
	assert_false(h.has_versions || h.has_max_frame_size || h.has_capabilities ||
	             h.healthcheck || h.version_ok);

	/* max-frame-size of every integer type; out of range is clamped so
	 * the caller's range check refuses it. */
	{
		static const struct {
			unsigned type;
			uint64_t v;
			uint32_t want;
		} mfs[] = {
			{ SPOP_T_UINT32, 16380, 16380 },
			{ SPOP_T_INT32, 16380, 16380 },
			{ SPOP_T_INT64, 65532, 65532 },
			{ SPOP_T_UINT64, 1024, 1024 },
			{ SPOP_T_UINT64, (uint64_t)1 << 40, UINT32_MAX },
			{ SPOP_T_INT64, UINT64_MAX, 0 },        /* -1 */
		};

		for (i = 0; i < sizeof(mfs) / sizeof(mfs[0]); i++) {
			tb_begin(&t, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0);
			tb_kv_int(&t, "max-frame-size", mfs[i].type, mfs[i].v);
			decode_hello(&t, &h);
			assert_true(h.has_max_frame_size);
			assert_int_equal(h.max_frame_size, mfs[i].want);
		}
	}
	/* ... but a string is not a size. */
	tb_begin(&t, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0);
	tb_kv_str(&t, "max-frame-size", "16380");
	decode_hello(&t, &h);
	assert_false(h.has_max_frame_size);

	/* healthcheck false, unknown keys of every known type skipped, keys
	 * in another order. */
	tb_begin(&t, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0);
	tb_str(&t, "x-null");
	tb_byte(&t, SPOP_T_NULL);
	tb_str(&t, "healthcheck");
	tb_byte(&t, 0x01);
	tb_str(&t, "x-ip6");
	tb_byte(&t, SPOP_T_IPV6);
	tb_bytes(&t, "0123456789abcdef", 16);
	tb_kv_str(&t, "capabilities", "pipelining");
	tb_str(&t, "x-bin");
	tb_byte(&t, SPOP_T_BIN);
	tb_str(&t, "\x01\x02");
	tb_kv_int(&t, "max-frame-size", SPOP_T_UINT32, 256);
	tb_str(&t, "x-ip4");
	tb_byte(&t, SPOP_T_IPV4);
	tb_bytes(&t, "\x0a\0\0\x01", 4);
	tb_kv_str(&t, "supported-versions", "2.0");
	tb_kv_int(&t, "x-int", SPOP_T_INT64, 12345678);
	decode_hello(&t, &h);
	assert_true(h.has_versions && h.version_ok && h.has_max_frame_size &&
	            h.has_capabilities && h.cap_pipelining);
	assert_false(h.healthcheck);
	assert_int_equal(h.max_frame_size, 256);

	/* A non-bool healthcheck does not make a healthcheck. */
	tb_begin(&t, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0);
	tb_kv_int(&t, "healthcheck", SPOP_T_INT32, 1);
	decode_hello(&t, &h);
	assert_false(h.healthcheck);
}

/* Restarts <t> with a NOTIFY of three messages, one without args, of
 * various types, with big ids (test_notify_iterators walks it, the NOTIFY
 * builder must write it). Returns its size. */
static size_t tb_three_messages(struct tb *t)
{
	tb_begin(t, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, 264432, UINT32_MAX);
	tb_str(t, "ratelimit");
	tb_byte(t, 3);
	tb_kv_str(t, "policy", "reads");
	tb_str(t, "key");
	tb_byte(t, SPOP_T_BIN);
	tb_str(t, "ACC-9");
	tb_kv_int(t, "cost", SPOP_T_UINT32, 5);
	tb_str(t, "empty");
	tb_byte(t, 0);
	tb_str(t, "");
	tb_byte(t, 2);
	tb_str(t, "src");
	tb_byte(t, SPOP_T_IPV4);
	tb_bytes(t, "\x7f\0\0\x01", 4);
	tb_str(t, "");
	tb_byte(t, 0x11);
	return tb_end(t);
}

/* Empty NOTIFY, and several messages of every shape, walked fully. */
static void test_notify_iterators(void **state)
{
	struct harness_buf b;
	struct spop_frame f;
	struct spop_message m;
	struct spop_iter mi, ai;
	struct spop_arg a;
	enum spop_status st;
	struct tb t;
	size_t n;

	(void)state;
	/* Empty NOTIFY (HAProxy 3.1-3.3 may send one): valid, no message. */
	tb_begin(&t, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, 7, 1);
	n = tb_end(&t);
	assert_int_equal(decode_guarded(&b, t.b, n, MAX_FRAME, &f, &st), (int)n);
	assert_int_equal(f.hdr.stream_id, 7);
	spop_iter_messages(&f.u.notify, &mi);
	assert_int_equal(spop_next_message(&mi, &m), 0);
	assert_int_equal(spop_next_message(&mi, &m), 0);
	harness_buf_free(&b);

	/* A zeroed notify walks as empty. */
	memset(&f, 0, sizeof(f));
	spop_iter_messages(&f.u.notify, &mi);
	assert_int_equal(spop_next_message(&mi, &m), 0);

	/* Three messages, one without args, various types; big ids. */
	n = tb_three_messages(&t);
	assert_int_equal(decode_guarded(&b, t.b, n, MAX_FRAME, &f, &st), (int)n);
	assert_true(f.hdr.stream_id == 264432 && f.hdr.frame_id == UINT32_MAX);
	spop_iter_messages(&f.u.notify, &mi);

	assert_int_equal(spop_next_message(&mi, &m), 1);
	assert_true(str_is(m.name, "ratelimit"));
	assert_int_equal(m.nb_args, 3);
	spop_iter_args(&m, &ai);
	assert_int_equal(spop_next_arg(&ai, &a), 1);
	assert_true(str_is(a.name, "policy") && str_is(a.value.v.s, "reads"));
	assert_int_equal(spop_next_arg(&ai, &a), 1);
	assert_true(str_is(a.name, "key") && a.value.type == SPOP_T_BIN &&
	            str_is(a.value.v.s, "ACC-9"));
	assert_int_equal(spop_next_arg(&ai, &a), 1);
	assert_true(str_is(a.name, "cost") && a.value.type == SPOP_T_UINT32 &&
	            a.value.v.u == 5);
	assert_int_equal(spop_next_arg(&ai, &a), 0);
	assert_int_equal(spop_next_arg(&ai, &a), 0);

	assert_int_equal(spop_next_message(&mi, &m), 1);
	assert_true(str_is(m.name, "empty"));
	assert_int_equal(m.nb_args, 0);
	assert_int_equal(m.args_len, 0);
	spop_iter_args(&m, &ai);
	assert_int_equal(spop_next_arg(&ai, &a), 0);

	assert_int_equal(spop_next_message(&mi, &m), 1);
	assert_int_equal(m.name.len, 0);
	assert_int_equal(m.nb_args, 2);
	spop_iter_args(&m, &ai);
	assert_int_equal(spop_next_arg(&ai, &a), 1);
	assert_true(str_is(a.name, "src") && a.value.type == SPOP_T_IPV4);
	assert_memory_equal(a.value.v.ip, "\x7f\0\0\x01", 4);
	assert_int_equal(spop_next_arg(&ai, &a), 1);
	assert_true(a.name.len == 0 && a.value.type == SPOP_T_BOOL && a.value.v.b);
	assert_int_equal(spop_next_arg(&ai, &a), 0);

	assert_int_equal(spop_next_message(&mi, &m), 0);
	harness_buf_free(&b);
}

/* Types we do not know: header decoded, success, payload untouched. (The
 * agent's types, 101-103, are decoded like HAProxy's: see
 * test_decode_agent_frames.) */
static void test_unknown_frame_types(void **state)
{
	static const unsigned types[] = { 0, 4, 42, 100, 104, 200, 255 };
	struct harness_buf b;
	struct spop_frame f;
	enum spop_status st;
	struct tb t;
	size_t i, n;

	(void)state;
	for (i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		/* Header only; the payload is not looked at, even garbage. */
		tb_begin(&t, types[i], SPOP_FLAG_FIN | 0x80000000u, 5, 6);
		tb_bytes(&t, "\xff\xff\xff", 3);
		n = tb_end(&t);
		assert_int_equal(decode_guarded(&b, t.b, n, MAX_FRAME, &f, &st), (int)n);
		assert_int_equal((unsigned)f.hdr.type, types[i]);
		assert_int_equal(f.hdr.flags, SPOP_FLAG_FIN | 0x80000000u);
		assert_true(f.hdr.stream_id == 5 && f.hdr.frame_id == 6);
		harness_buf_free(&b);
	}
}

/* ------------------------------------------------------------------ */
/* Encoders                                                            */
/* ------------------------------------------------------------------ */

/* Asserts that <len> bytes at <got> equal the hex text <want>. */
static void expect_bytes(const unsigned char *got, int len, const char *want)
{
	unsigned char w[512];
	size_t n = hex(want, w, sizeof(w));

	assert_int_equal(len, (int)n);
	assert_memory_equal(got, w, n);
}

#define HELLO_PIPE \
	"00 00 00 40  65  00 00 00 01  00 00" \
	"07 76 65 72 73 69 6f 6e  08 03 32 2e 30" \
	"0e 6d 61 78 2d 66 72 61 6d 65 2d 73 69 7a 65  03 fc f0 06" \
	"0c 63 61 70 61 62 69 6c 69 74 69 65 73  08 0a 70 69 70 65 6c 69 6e 69 6e 67"
/* The same bytes as HAProxy's DISCONNECT vector, type 0x66 instead of 02. */
#define DISC_NORMAL \
	"00 00 00 25  66  00 00 00 01  00 00" \
	"0b 73 74 61 74 75 73 2d 63 6f 64 65  03 00" \
	"07 6d 65 73 73 61 67 65  08 06 6e 6f 72 6d 61 6c"
#define DISC_TOO_BIG \
	"00 00 00 2f  66  00 00 00 01  00 00" \
	"0b 73 74 61 74 75 73 2d 63 6f 64 65  03 03" \
	"07 6d 65 73 73 61 67 65  08 10 66 72 61 6d 65 20 69 73 20 74 6f 6f 20 62 69 67"

/* AGENT-HELLO bytes, with and without pipelining, at every cap. */
static void test_encode_agent_hello(void **state)
{
	unsigned char out[256];
	struct harness_buf b;
	size_t cap;
	int n;

	(void)state;
	n = spop_encode_agent_hello(out, sizeof(out), 16380, true);
	expect_bytes(out, n, HELLO_PIPE);
	n = spop_encode_agent_hello(out, sizeof(out), 16380, false);
	expect_bytes(out, n, "00 00 00 36 65 00 00 00 01 00 00"
	             "07 76 65 72 73 69 6f 6e 08 03 32 2e 30"
	             "0e 6d 61 78 2d 66 72 61 6d 65 2d 73 69 7a 65 03 fc f0 06"
	             "0c 63 61 70 61 62 69 6c 69 74 69 65 73 08 00");

	/* At every smaller cap: refused, and nothing past <cap> touched. */
	assert_int_equal(harness_buf_init(&b, 256), 0);
	for (cap = 0; cap < 0x44; cap++)
		assert_int_equal(spop_encode_agent_hello(
			harness_buf_place(&b, NULL, cap), cap, 16380, true), -1);
	n = spop_encode_agent_hello(harness_buf_place(&b, NULL, 0x44), 0x44,
	                            16380, true);
	expect_bytes(b.guard - 0x44, n, HELLO_PIPE);
	for (cap = 0; cap < 0x3a; cap++)
		assert_int_equal(spop_encode_agent_hello(
			harness_buf_place(&b, NULL, cap), cap, 16380, false), -1);
	harness_buf_free(&b);
	assert_int_equal(spop_encode_agent_hello(NULL, 0, 16380, true), -1);
}

/* AGENT-DISCONNECT bytes and every cap. */
static void test_encode_agent_disconnect(void **state)
{
	unsigned char out[256];
	struct harness_buf b;
	size_t cap;
	int n;

	(void)state;
	n = spop_encode_agent_disconnect(out, sizeof(out), 0, "normal");
	expect_bytes(out, n, DISC_NORMAL);
	n = spop_encode_agent_disconnect(out, sizeof(out), SPOP_ST_TOO_BIG,
	                                 spop_status_str(SPOP_ST_TOO_BIG));
	expect_bytes(out, n, DISC_TOO_BIG);
	n = spop_encode_agent_disconnect(out, sizeof(out), SPOP_ST_UNKNOWN, NULL);
	expect_bytes(out, n, "00 00 00 1f 66 00 00 00 01 00 00"
	             "0b 73 74 61 74 75 73 2d 63 6f 64 65 03 63"
	             "07 6d 65 73 73 61 67 65 08 00");

	assert_int_equal(harness_buf_init(&b, 256), 0);
	for (cap = 0; cap < 0x29; cap++)
		assert_int_equal(spop_encode_agent_disconnect(
			harness_buf_place(&b, NULL, cap), cap, 0, "normal"), -1);
	n = spop_encode_agent_disconnect(harness_buf_place(&b, NULL, 0x29), 0x29,
	                                 0, "normal");
	expect_bytes(b.guard - 0x29, n, DISC_NORMAL);
	harness_buf_free(&b);
}

/* The ACK of the acceptance story's allowed request, plus edge values. */
#define ACK_ALLOW \
	"00 00 00 57  67  00 00 00 01  00 01" \
	"01 03 02  06 73 74 61 74 75 73  08 05 61 6c 6c 6f 77" \
	"01 03 02  05 6c 69 6d 69 74  04 03" \
	"01 03 02  09 72 65 6d 61 69 6e 69 6e 67  04 02" \
	"01 03 02  05 72 65 73 65 74  04 01" \
	"02 02 02  06 72 65 61 73 6f 6e" \
	"01 03 00  01 6e  04 ff f0 fe fe fe fe fe fe fe 0e"

/* Writes ACK_ALLOW into <dst> (<cap> bytes). Returns spop_ack_end(). */
static int build_ack(unsigned char *dst, size_t cap)
{
	struct spop_writer a;

	spop_ack_begin(&a, dst, cap, 0, 1);
	spop_ack_set_str(&a, SPOP_SCOPE_TXN, "status", "allow", 5);
	spop_ack_set_int(&a, SPOP_SCOPE_TXN, "limit", 3);
	spop_ack_set_int(&a, SPOP_SCOPE_TXN, "remaining", 2);
	spop_ack_set_int(&a, SPOP_SCOPE_TXN, "reset", 1);
	spop_ack_unset(&a, SPOP_SCOPE_TXN, "reason");
	spop_ack_set_int(&a, SPOP_SCOPE_PROC, "n", -1);
	return spop_ack_end(&a);
}

/* ACK bytes for set-var str/int and unset-var, every cap, bad args. */
static void test_encode_ack(void **state)
{
	unsigned char out[256];
	struct harness_buf b;
	struct spop_writer a;
	size_t cap;
	int n;

	(void)state;
	n = build_ack(out, sizeof(out));
	expect_bytes(out, n, ACK_ALLOW);

	assert_int_equal(harness_buf_init(&b, 256), 0);
	for (cap = 0; cap < 0x5b; cap++)
		assert_int_equal(build_ack(harness_buf_place(&b, NULL, cap), cap), -1);
	n = build_ack(harness_buf_place(&b, NULL, 0x5b), 0x5b);
	expect_bytes(b.guard - 0x5b, n, ACK_ALLOW);

	/* Ids copied from a 3.x NOTIFY (odd, large), one unset-var only: the
	 * "nothing to say" ACK; empty string value. */
	spop_ack_begin(&a, out, sizeof(out), 264432, 2288);
	spop_ack_unset(&a, SPOP_SCOPE_TXN, "status");
	n = spop_ack_end(&a);
	expect_bytes(out, n, "00 00 00 16 67 00 00 00 01 f0 80 80 00 f0 80 00"
	             "02 02 02 06 73 74 61 74 75 73");
	spop_ack_begin(&a, out, sizeof(out), 1, 1);
	spop_ack_set_str(&a, SPOP_SCOPE_TXN, "reason", NULL, 0);
	n = spop_ack_end(&a);
	expect_bytes(out, n, "00 00 00 13 67 00 00 00 01 01 01"
	             "01 03 02 06 72 65 61 73 6f 6e 08 00");

	/* A bad scope or a NULL name fails the whole ACK. */
	spop_ack_begin(&a, out, sizeof(out), 1, 1);
	spop_ack_set_int(&a, SPOP_SCOPE_COUNT, "limit", 3);
	assert_int_equal(spop_ack_end(&a), -1);
	spop_ack_begin(&a, out, sizeof(out), 1, 1);
	spop_ack_unset(&a, SPOP_SCOPE_TXN, NULL);
	assert_int_equal(spop_ack_end(&a), -1);
	/* Overflow latches: a later small action does not revive it. */
	spop_ack_begin(&a, harness_buf_place(&b, NULL, 20), 20, 1, 1);
	spop_ack_set_str(&a, SPOP_SCOPE_TXN, "status", "allow", 5);
	spop_ack_unset(&a, SPOP_SCOPE_TXN, "x");
	assert_int_equal(spop_ack_end(&a), -1);
	harness_buf_free(&b);
}

/* The reference of a one-action ACK (stream 7, frame 300): SET-VAR of
 * <name> in <scope>, an INT64 <iv> when <sval> is NULL, else the STR
 * <sval>/<slen>; laid out here by hand. Returns its length. */
static size_t ref_ack(unsigned char *out, size_t cap, enum spop_scope scope, const char *name,
                      int64_t iv, const char *sval, size_t slen)
{
	size_t n = strlen(name), at = 4;

	assert_true(cap >= 64 + n + slen);
	out[at++] = 0x67;
	memcpy(out + at, "\0\0\0\1", 4);
	at += 4;
	at += (size_t)spop_encode_varint(7, out + at, cap - at);
	at += (size_t)spop_encode_varint(300, out + at, cap - at);
	out[at++] = SPOP_ACT_SET_VAR;
	out[at++] = 3;
	out[at++] = (unsigned char)scope;
	at += (size_t)spop_encode_varint(n, out + at, cap - at);
	memcpy(out + at, name, n);
	at += n;
	if (sval == NULL) {
		out[at++] = SPOP_T_INT64;
		at += (size_t)spop_encode_varint((uint64_t)iv, out + at, cap - at);
	} else {
		out[at++] = SPOP_T_STR;
		at += (size_t)spop_encode_varint(slen, out + at, cap - at);
		memcpy(out + at, sval, slen);
		at += slen;
	}
	out[0] = (unsigned char)((at - 4) >> 24);
	out[1] = (unsigned char)((at - 4) >> 16);
	out[2] = (unsigned char)((at - 4) >> 8);
	out[3] = (unsigned char)(at - 4);
	return at;
}

/* The same ACK from the encoder into <dst>/<cap>. */
static int one_ack(unsigned char *dst, size_t cap, enum spop_scope scope, const char *name,
                   int64_t iv, const char *sval, size_t slen)
{
	struct spop_writer a;

	spop_ack_begin(&a, dst, cap, 7, 300);
	if (sval == NULL)
		spop_ack_set_int(&a, scope, name, iv);
	else
		spop_ack_set_str(&a, scope, name, sval, slen);
	return spop_ack_end(&a);
}

/* SET-VAR at every name length around the one-byte varint's end (239,
 * 240), integers at each varint length, strings of every length class:
 * the bytes are the reference's, and every smaller buffer is refused with
 * nothing written past it (the guard page). The agent's ACKs take a
 * faster path when the head fits; this pins it to the byte-by-byte one. */
static void test_encode_ack_shapes(void **state)
{
	static const size_t name_lens[] = { 1, 6, 13, 239, 240, 241, 300 };
	static const int64_t ints[] = { 0, 1, 239, 240, 2287, 2288, 264431, 264432, 1 << 30,
	                                INT64_MAX, INT64_MIN, -1 };
	static const size_t str_lens[] = { 0, 5, 239, 240, 241, 1000 };
	static unsigned char want[2048], out[2048];
	char name[301], sval[1001];
	struct harness_buf b;
	size_t i, j, cap;

	(void)state;
	memset(name, 'v', sizeof(name));
	for (i = 0; i < sizeof(sval); i++)
		sval[i] = (char)(i * 7);
	assert_int_equal(harness_buf_init(&b, 2048), 0);
	for (i = 0; i < sizeof(name_lens) / sizeof(name_lens[0]); i++) {
		name[name_lens[i]] = '\0';
		for (j = 0; j < sizeof(ints) / sizeof(ints[0]) + sizeof(str_lens) / sizeof(str_lens[0]); j++) {
			bool is_int = j < sizeof(ints) / sizeof(ints[0]);
			int64_t iv = is_int ? ints[j] : 0;
			const char *sv = is_int ? NULL : sval;
			size_t sl = is_int ? 0 : str_lens[j - sizeof(ints) / sizeof(ints[0])];
			enum spop_scope scope = (enum spop_scope)((i + j) % SPOP_SCOPE_COUNT);
			size_t len = ref_ack(want, sizeof(want), scope, name, iv, sv, sl);

			assert_int_equal(one_ack(out, sizeof(out), scope, name, iv, sv, sl), (int)len);
			assert_memory_equal(out, want, len);
			for (cap = 0; cap < len; cap++)
				assert_int_equal(one_ack(harness_buf_place(&b, NULL, cap), cap, scope, name,
				                         iv, sv, sl), -1);
			assert_int_equal(one_ack(harness_buf_place(&b, NULL, len), len, scope, name, iv,
			                         sv, sl), (int)len);
			assert_memory_equal(b.guard - len, want, len);
		}
		name[name_lens[i]] = 'v';
	}
	harness_buf_free(&b);
}

/* The test's own reading of an AGENT-HELLO KV list: version, size, caps. */
static void test_agent_hello_roundtrip(void **state)
{
	static const struct {
		uint32_t mfs;
		bool pipe;
	} cases[] = { { 16380, true }, { 256, false }, { SPOP_MAX_FRAME_SIZE, true },
	              { UINT32_MAX, false } };
	unsigned char out[256];
	struct harness_buf b;
	struct spop_frame f;
	enum spop_status st;
	struct spop_data d;
	const unsigned char *p, *end;
	const char *name;
	uint64_t nl;
	int n, k, seen;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		n = spop_encode_agent_hello(out, sizeof(out), cases[i].mfs,
		                            cases[i].pipe);
		assert_true(n > 0);
		assert_int_equal(decode_guarded(&b, out, (size_t)n, SPOP_MAX_FRAME_SIZE,
		                                &f, &st), n);
		assert_int_equal(f.hdr.type, SPOP_FRAME_AGENT_HELLO);
		assert_int_equal(f.hdr.flags, SPOP_FLAG_FIN);
		assert_true(f.hdr.stream_id == 0 && f.hdr.frame_id == 0);
		p = b.guard - n + 11;
		end = b.guard;
		seen = 0;
		while (p < end) {
			k = spop_decode_varint(p, (size_t)(end - p), &nl);
			assert_true(k > 0 && nl <= (uint64_t)(end - p - k));
			p += k;
			name = (const char *)p;
			p += nl;
			k = spop_decode_data(p, (size_t)(end - p), &d);
			assert_true(k > 0);
			p += k;
			if (nl == 7 && memcmp(name, "version", 7) == 0) {
				assert_int_equal(d.type, SPOP_T_STR);
				assert_true(str_is(d.v.s, "2.0"));
				seen |= 1;
			} else if (nl == 14 && memcmp(name, "max-frame-size", 14) == 0) {
				assert_int_equal(d.type, SPOP_T_UINT32);
				assert_true(d.v.u == cases[i].mfs);
				seen |= 2;
			} else if (nl == 12 && memcmp(name, "capabilities", 12) == 0) {
				assert_int_equal(d.type, SPOP_T_STR);
				assert_true(str_is(d.v.s, cases[i].pipe ? "pipelining" : ""));
				seen |= 4;
			} else {
				fail_msg("unexpected key in AGENT-HELLO");
			}
		}
		assert_int_equal(seen, 7);
		harness_buf_free(&b);
	}

	/* AGENT-DISCONNECT reads back through the decoder. */
	n = spop_encode_agent_disconnect(out, sizeof(out), SPOP_ST_BAD_VSN,
	                                 spop_status_str(SPOP_ST_BAD_VSN));
	assert_int_equal(decode_guarded(&b, out, (size_t)n, MAX_FRAME, &f, &st), n);
	assert_int_equal(f.hdr.type, SPOP_FRAME_AGENT_DISCONNECT);
	assert_int_equal(f.u.disconnect.status, SPOP_ST_BAD_VSN);
	assert_true(str_is(f.u.disconnect.message, "unsupported version"));
	harness_buf_free(&b);
}

/* ------------------------------------------------------------------ */
/* HAProxy's side: encoders against HAProxy's bytes, decoders of the    */
/* agent's frames                                                      */
/* ------------------------------------------------------------------ */

/* Writes into <dst>: vector <v> encoded again from its decoded fields
 * <f> by the HAProxy-side encoders, at most <cap> bytes. Returns the
 * encoder's result. */
static int vec_encode(const struct vec *v, const struct spop_frame *f,
                      unsigned char *dst, size_t cap)
{
	char key[16], engine[64];
	struct spop_data policy = { .type = SPOP_T_STR, .v.s = { "transfer", 8 } };
	struct spop_data k = { .type = SPOP_T_NULL };
	struct spop_data cost = { .type = SPOP_T_INT64, .v.i = 1 };
	struct spop_writer w;

	switch (v->kind) {
	case VEC_HELLO:
		assert_true(f->u.hello.engine_id.len < sizeof(engine));
		memcpy(engine, f->u.hello.engine_id.ptr, f->u.hello.engine_id.len);
		engine[f->u.hello.engine_id.len] = '\0';
		return spop_encode_haproxy_hello(dst, cap, 16380, "pipelining",
		                                 false, engine);
	case VEC_HEALTHCHECK:
		return spop_encode_haproxy_hello(dst, cap, 16380, "", true, NULL);
	case VEC_DISCONNECT:
		return spop_encode_haproxy_disconnect(dst, cap, SPOP_ST_NORMAL,
		                                      "normal");
	case VEC_NOTIFY:
		if (v->notify_n != 3) {
			snprintf(key, sizeof(key), "ACC-100%d", v->notify_n);
			k.type = SPOP_T_STR;
			k.v.s.ptr = key;
			k.v.s.len = strlen(key);
		}
		spop_notify_begin(&w, dst, cap, f->hdr.stream_id, f->hdr.frame_id);
		spop_notify_message(&w, "ratelimit", 3);
		spop_notify_arg(&w, "policy", &policy);
		spop_notify_arg(&w, "key", &k);
		spop_notify_arg(&w, "cost", &cost);
		return spop_notify_end(&w);
	default:
		fail_msg("%s: no encoder", v->path);
		return -1;
	}
}

/* Every captured frame, encoded again by the HAProxy-side encoders: the
 * same bytes, refused at every smaller cap without writing past it. */
static void test_encode_haproxy_vectors(void **state)
{
	static struct vec vs[64];
	unsigned char out[1024];
	struct harness_buf b, g;
	struct spop_frame f;
	enum spop_status st;
	size_t n, i, cap;
	int r;

	(void)state;
	n = vec_load_all(vs, 64);
	assert_int_equal(harness_buf_init(&g, sizeof(out)), 0);
	for (i = 0; i < n; i++) {
		r = decode_guarded(&b, vs[i].bytes, vs[i].len, MAX_FRAME, &f, &st);
		assert_int_equal(r, (int)vs[i].len);
		r = vec_encode(&vs[i], &f, out, sizeof(out));
		if (r != (int)vs[i].len || memcmp(out, vs[i].bytes, vs[i].len) != 0)
			fail_msg("%s: encoded again, %d bytes differ", vs[i].path, r);
		for (cap = 0; cap < vs[i].len; cap++)
			if (vec_encode(&vs[i], &f, harness_buf_place(&g, NULL, cap),
			               cap) != -1)
				fail_msg("%s: encoded into %zu bytes", vs[i].path, cap);
		r = vec_encode(&vs[i], &f, harness_buf_place(&g, NULL, vs[i].len),
		               vs[i].len);
		assert_int_equal(r, (int)vs[i].len);
		assert_memory_equal(g.guard - vs[i].len, vs[i].bytes, vs[i].len);
		harness_buf_free(&b);
	}
	harness_buf_free(&g);
}

/* Every data type encoded, then decoded back to the same value; the
 * exact bytes of a few; every smaller cap refused. */
static void test_encode_data(void **state)
{
	static const struct {
		struct spop_data d;
		const char *hex;
	} cases[] = {
		{ { .type = SPOP_T_NULL }, "00" },
		{ { .type = SPOP_T_BOOL, .v.b = true }, "11" },
		{ { .type = SPOP_T_BOOL, .v.b = false }, "01" },
		{ { .type = SPOP_T_INT32, .v.i = -1 }, "02 ff f0 fe fe fe fe fe fe fe 0e" },
		{ { .type = SPOP_T_INT64, .v.i = 1 }, "04 01" },
		{ { .type = SPOP_T_INT64, .v.i = INT64_MIN }, "04 f0 f1 fe fe fe fe fe fe fe 06" },
		{ { .type = SPOP_T_UINT32, .v.u = 16380 }, "03 fc f0 06" },
		{ { .type = SPOP_T_UINT64, .v.u = UINT64_MAX }, "05 ff f0 fe fe fe fe fe fe fe 0e" },
		{ { .type = SPOP_T_IPV4, .v.ip = { 10, 0, 0, 1 } }, "06 0a 00 00 01" },
		{ { .type = SPOP_T_IPV6, .v.ip = { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 } },
		  "07 20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 01" },
		{ { .type = SPOP_T_STR, .v.s = { "ACC-1001", 8 } }, "08 08 41 43 43 2d 31 30 30 31" },
		{ { .type = SPOP_T_STR, .v.s = { NULL, 0 } }, "08 00" },
		{ { .type = SPOP_T_BIN, .v.s = { "\0\xff", 2 } }, "09 02 00 ff" },
	};
	unsigned char out[64];
	struct harness_buf b;
	struct spop_data d, bad = { .type = SPOP_T_COUNT };
	size_t i, cap;
	int n;

	(void)state;
	assert_int_equal(harness_buf_init(&b, sizeof(out)), 0);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		n = spop_encode_data(out, sizeof(out), &cases[i].d);
		expect_bytes(out, n, cases[i].hex);
		assert_int_equal(spop_decode_data(out, (size_t)n, &d), n);
		assert_int_equal(d.type, cases[i].d.type);
		switch (d.type) {
		case SPOP_T_BOOL:
			assert_true(d.v.b == cases[i].d.v.b);
			break;
		case SPOP_T_INT32:
		case SPOP_T_INT64:
			assert_true(d.v.i == cases[i].d.v.i);
			break;
		case SPOP_T_UINT32:
		case SPOP_T_UINT64:
			assert_true(d.v.u == cases[i].d.v.u);
			break;
		case SPOP_T_IPV4:
		case SPOP_T_IPV6:
			assert_memory_equal(d.v.ip, cases[i].d.v.ip,
			                    d.type == SPOP_T_IPV4 ? 4 : 16);
			break;
		case SPOP_T_STR:
		case SPOP_T_BIN:
			assert_int_equal(d.v.s.len, cases[i].d.v.s.len);
			if (d.v.s.len > 0)
				assert_memory_equal(d.v.s.ptr, cases[i].d.v.s.ptr, d.v.s.len);
			break;
		default:
			break;
		}
		for (cap = 0; cap < (size_t)n; cap++)
			assert_int_equal(spop_encode_data(harness_buf_place(&b, NULL, cap),
			                                  cap, &cases[i].d), -1);
	}
	harness_buf_free(&b);
	assert_int_equal(spop_encode_data(out, sizeof(out), &bad), -1);
	assert_int_equal(spop_encode_data(NULL, 0, &cases[0].d), -1);
}

/* The NOTIFY builder: the bytes of the test's own builder for several
 * messages (which test_notify_iterators walks), decoded back whole and
 * byte by byte, refused at every smaller cap; bad arguments and overflow
 * fail the frame. */
static int build_three_messages(unsigned char *dst, size_t cap)
{
	struct spop_data policy = { .type = SPOP_T_STR, .v.s = { "reads", 5 } };
	struct spop_data key = { .type = SPOP_T_BIN, .v.s = { "ACC-9", 5 } };
	struct spop_data cost = { .type = SPOP_T_UINT32, .v.u = 5 };
	struct spop_data v4 = { .type = SPOP_T_IPV4, .v.ip = { 127, 0, 0, 1 } };
	struct spop_data yes = { .type = SPOP_T_BOOL, .v.b = true };
	struct spop_writer w;

	spop_notify_begin(&w, dst, cap, 264432, UINT32_MAX);
	spop_notify_message(&w, "ratelimit", 3);
	spop_notify_arg(&w, "policy", &policy);
	spop_notify_arg(&w, "key", &key);
	spop_notify_arg(&w, "cost", &cost);
	spop_notify_message(&w, "empty", 0);
	spop_notify_message(&w, "", 2);
	spop_notify_arg(&w, "src", &v4);
	spop_notify_arg(&w, "", &yes);
	return spop_notify_end(&w);
}

static void test_encode_notify(void **state)
{
	struct spop_data cost = { .type = SPOP_T_COUNT };
	unsigned char out[256];
	struct harness_buf b;
	struct frame_ctx ctx;
	struct spop_writer w;
	struct tb t;
	size_t n, cap;
	int r;

	(void)state;
	n = tb_three_messages(&t);
	r = build_three_messages(out, sizeof(out));
	assert_int_equal(r, (int)n);
	assert_memory_equal(out, t.b, n);
	ctx.max = MAX_FRAME;
	assert_int_equal(harness_feed_bytes(out, n, frame_cb, &ctx), (int)n);
	assert_int_equal(ctx.f.hdr.type, SPOP_FRAME_NOTIFY);
	assert_int_equal(harness_buf_init(&b, sizeof(out)), 0);
	for (cap = 0; cap < n; cap++)
		assert_int_equal(build_three_messages(harness_buf_place(&b, NULL, cap),
		                                      cap), -1);
	harness_buf_free(&b);

	/* An empty NOTIFY is a header only. */
	spop_notify_begin(&w, out, sizeof(out), 1, 1);
	expect_bytes(out, spop_notify_end(&w), "00 00 00 07 03 00 00 00 01 01 01");

	/* More than 255 args, a NULL name, an unknown type: the frame fails. */
	spop_notify_begin(&w, out, sizeof(out), 1, 1);
	spop_notify_message(&w, "m", 256);
	assert_int_equal(spop_notify_end(&w), -1);
	spop_notify_begin(&w, out, sizeof(out), 1, 1);
	spop_notify_message(&w, NULL, 0);
	assert_int_equal(spop_notify_end(&w), -1);
	spop_notify_begin(&w, out, sizeof(out), 1, 1);
	spop_notify_message(&w, "m", 1);
	spop_notify_arg(&w, NULL, &cost);
	assert_int_equal(spop_notify_end(&w), -1);
	spop_notify_begin(&w, out, sizeof(out), 1, 1);
	spop_notify_message(&w, "m", 1);
	spop_notify_arg(&w, "c", &cost);
	assert_int_equal(spop_notify_end(&w), -1);
	/* Overflow latches. */
	spop_notify_begin(&w, out, 12, 1, 1);
	spop_notify_message(&w, "ratelimit", 0);
	spop_notify_message(&w, "", 0);
	assert_int_equal(spop_notify_end(&w), -1);
}

/* The agent's frames through the same decoder: AGENT-HELLO fields, an
 * ACK's actions walked, and malformed ones refused at every cut. */
static void test_decode_agent_frames(void **state)
{
	static const struct {
		const char *what;
		const char *hex;
	} bad[] = {
		{ "unknown action type", "0000000a 67 00000001 01 01 03 03 02 00" },
		{ "set-var with 2 args", "0000000a 67 00000001 01 01 01 02 02 00" },
		{ "unset-var with 3 args", "0000000b 67 00000001 01 01 02 03 02 00 00" },
		{ "scope 5", "0000000a 67 00000001 01 01 02 02 05 00" },
		{ "set-var without value", "0000000b 67 00000001 01 01 01 03 02 01 78" },
		{ "action head cut", "00000009 67 00000001 01 01 01 03" },
		{ "AGENT-HELLO with stream-id 1", "00000007 65 00000001 01 00" },
		{ "AGENT-HELLO name past the end", "00000009 65 00000001 00 00 05 61" },
	};
	unsigned char out[256], cut[256], in[64];
	struct harness_buf b;
	struct spop_frame f;
	struct spop_action a;
	struct spop_iter it;
	struct frame_ctx ctx;
	enum spop_status st;
	size_t i, k, n;
	int r, rc, nact = 0;

	(void)state;
	r = spop_encode_agent_hello(out, sizeof(out), 4096, true);
	assert_int_equal(decode_guarded(&b, out, (size_t)r, MAX_FRAME, &f, &st), r);
	assert_int_equal(f.hdr.type, SPOP_FRAME_AGENT_HELLO);
	assert_true(f.u.hello.has_versions && f.u.hello.version_ok &&
	            str_is(f.u.hello.versions, "2.0"));
	assert_true(f.u.hello.has_max_frame_size && f.u.hello.max_frame_size == 4096);
	assert_true(f.u.hello.has_capabilities && f.u.hello.cap_pipelining);
	assert_false(f.u.hello.healthcheck);
	harness_buf_free(&b);
	/* An agent's "supported-versions" is not its "version". */
	r = spop_encode_haproxy_hello(out, sizeof(out), 4096, "", false, NULL);
	out[4] = SPOP_FRAME_AGENT_HELLO;
	assert_int_equal(decode_guarded(&b, out, (size_t)r, MAX_FRAME, &f, &st), r);
	assert_false(f.u.hello.has_versions);
	harness_buf_free(&b);

	r = build_ack(out, sizeof(out));
	assert_int_equal(decode_guarded(&b, out, (size_t)r, MAX_FRAME, &f, &st), r);
	assert_int_equal(f.hdr.type, SPOP_FRAME_ACK);
	assert_true(f.hdr.stream_id == 0 && f.hdr.frame_id == 1);
	spop_iter_actions(&f.u.ack, &it);
	while (spop_next_action(&it, &a) == 1) {
		nact++;
		if (nact == 1)
			assert_true(a.type == SPOP_ACT_SET_VAR && a.scope == SPOP_SCOPE_TXN &&
			            str_is(a.name, "status") && a.value.type == SPOP_T_STR &&
			            str_is(a.value.v.s, "allow"));
		else if (nact == 5)
			assert_true(a.type == SPOP_ACT_UNSET_VAR &&
			            str_is(a.name, "reason") && a.value.type == SPOP_T_NULL);
		else if (nact == 6)
			assert_true(a.scope == SPOP_SCOPE_PROC && a.value.type == SPOP_T_INT64 &&
			            a.value.v.i == -1);
	}
	assert_int_equal(nact, 6);
	assert_int_equal(spop_next_action(&it, &a), 0);
	/* Byte by byte: need more until the end. */
	ctx.max = MAX_FRAME;
	assert_int_equal(harness_feed_bytes(out, (size_t)r, frame_cb, &ctx), r);
	/* Its length cut to each size of the content: valid only between
	 * actions, malformed anywhere else. */
	for (k = 0; k < (size_t)r - 4; k++) {
		memcpy(cut, out, (size_t)r);
		cut[0] = (unsigned char)(k >> 24);
		cut[1] = (unsigned char)(k >> 16);
		cut[2] = (unsigned char)(k >> 8);
		cut[3] = (unsigned char)k;
		st = SPOP_ST_NORMAL;
		n = 4 + k;
		rc = decode_once(cut, n, MAX_FRAME, &st);
		if (rc != (int)n && (rc != -1 || st != SPOP_ST_INVALID))
			fail_msg("ACK cut at %zu: got %d status %d", k, rc, st);
	}
	harness_buf_free(&b);
	/* A zeroed ACK walks as empty. */
	memset(&f, 0, sizeof(f));
	spop_iter_actions(&f.u.ack, &it);
	assert_int_equal(spop_next_action(&it, &a), 0);

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		n = hex(bad[i].hex, in, sizeof(in));
		st = SPOP_ST_NORMAL;
		r = decode_once(in, n, MAX_FRAME, &st);
		if (r != -1 || st != SPOP_ST_INVALID)
			fail_msg("%s: got %d status %d", bad[i].what, r, st);
	}
}

/* Status texts and spop_str_eq. */
/* HAProxy's binary header list (res.hdrs_bin), as "ratelimit-done"'s
 * hdrs carries it: found without case, the first of two, absent, and
 * every truncation, a missing end, bytes after it and a length past the
 * end refused; a 300-byte value (a two-byte varint length). */
static void test_hdrs_find(void **state)
{
	unsigned char buf[512];
	struct spop_str v;
	size_t n = 0, i, cut;
	char big[300];

	(void)state;
#define PUT(str, len) do { n += (size_t)spop_encode_varint((len), buf + n, sizeof(buf) - n); \
	                       memcpy(buf + n, (str), (len)); n += (len); } while (0)
	PUT("content-type", 12);
	PUT("application/json", 16);
	PUT("X-Usage-Units", 13);
	PUT("5", 1);
	PUT("x-usage-units", 13);
	PUT("9", 1);
	PUT("", 0);
	PUT("", 0);
	assert_int_equal(spop_hdrs_find(buf, n, "x-usage-units", 13, &v), 1);
	assert_true(v.len == 1 && v.ptr[0] == '5');           /* the first, any case */
	assert_int_equal(spop_hdrs_find(buf, n, "X-TOKENS", 8, &v), 0);
	assert_int_equal(spop_hdrs_find(buf, n, "content-type", 12, &v), 1);
	assert_true(v.len == 16 && memcmp(v.ptr, "application/json", 16) == 0);
	/* a prefix of a name is another name */
	assert_int_equal(spop_hdrs_find(buf, n, "x-usage", 7, &v), 0);
	for (cut = 0; cut < n; cut++)
		assert_int_equal(spop_hdrs_find(buf, cut, "x-usage-units", 13, &v), -1);
	buf[n] = 'x';                                          /* a byte after the end */
	assert_int_equal(spop_hdrs_find(buf, n + 1, "x-usage-units", 13, &v), -1);
	assert_int_equal(spop_hdrs_find(buf, n, "", 0, &v), -1);
	assert_int_equal(spop_hdrs_find(NULL, 0, "a", 1, &v), -1);
	/* an empty name with a value: not the end */
	n = 0;
	PUT("", 0);
	PUT("x", 1);
	PUT("", 0);
	PUT("", 0);
	assert_int_equal(spop_hdrs_find(buf, n, "a", 1, &v), -1);
	/* a length past the end */
	n = 0;
	PUT("a", 1);
	buf[n++] = 0x20;                                       /* says 32, holds 1 */
	buf[n++] = '1';
	assert_int_equal(spop_hdrs_find(buf, n, "a", 1, &v), -1);
	/* a long value: a two-byte length */
	memset(big, '7', sizeof(big));
	n = 0;
	PUT("a", 1);
	PUT(big, sizeof(big));
	PUT("", 0);
	PUT("", 0);
	assert_int_equal(spop_hdrs_find(buf, n, "A", 1, &v), 1);
	assert_true(v.len == sizeof(big) && v.ptr[299] == '7');
	for (i = 0; i < 4; i++)   /* empty list: nothing */
		buf[i] = 0;
	assert_int_equal(spop_hdrs_find(buf, 2, "a", 1, &v), 0);
#undef PUT
}

static void test_misc(void **state)
{
	struct spop_str s = { "abc", 3 }, e = { NULL, 0 };
	unsigned st;

	(void)state;
	for (st = 0; st < SPOP_ST_COUNT; st++)
		assert_true(spop_status_str(st)[0] != '\0' &&
		            strcmp(spop_status_str(st), "unknown status") != 0);
	assert_string_equal(spop_status_str(SPOP_ST_NORMAL), "normal");
	assert_string_equal(spop_status_str(SPOP_ST_FRAG_NOT_SUPPORTED),
	                    "payload fragmentation is not supported");
	assert_string_equal(spop_status_str(SPOP_ST_UNKNOWN), "an unknown error occurred");
	assert_string_equal(spop_status_str(14), "unknown status");
	assert_string_equal(spop_status_str(1000), "unknown status");
	assert_true(spop_str_eq(s, "abc"));
	assert_false(spop_str_eq(s, "ab"));
	assert_false(spop_str_eq(s, "abcd"));
	assert_true(spop_str_eq(e, ""));
	assert_false(spop_str_eq(e, "a"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_varint_vectors),
		cmocka_unit_test(test_varint_roundtrip),
		cmocka_unit_test(test_varint_reject),
		cmocka_unit_test(test_data_types),
		cmocka_unit_test(test_vectors_decode),
		cmocka_unit_test(test_vectors_truncated_content),
		cmocka_unit_test(test_peek_length),
		cmocka_unit_test(test_malformed_hex),
		cmocka_unit_test(test_malformed_content),
		cmocka_unit_test(test_hello_variants),
		cmocka_unit_test(test_notify_iterators),
		cmocka_unit_test(test_unknown_frame_types),
		cmocka_unit_test(test_encode_agent_hello),
		cmocka_unit_test(test_encode_agent_disconnect),
		cmocka_unit_test(test_encode_ack),
		cmocka_unit_test(test_encode_ack_shapes),
		cmocka_unit_test(test_notify_skip_matches_read),
		cmocka_unit_test(test_agent_hello_roundtrip),
		cmocka_unit_test(test_encode_haproxy_vectors),
		cmocka_unit_test(test_encode_data),
		cmocka_unit_test(test_encode_notify),
		cmocka_unit_test(test_decode_agent_frames),
		cmocka_unit_test(test_misc),
		cmocka_unit_test(test_hdrs_find),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
