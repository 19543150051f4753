/*
 * spoa-bench: the frames. What HAProxy sends (HELLO, NOTIFY, and with
 * --done the response's ratelimit-done), written by the agent's codec
 * (spop.h) straight into a connection's write buffer, and what the bench
 * expects of what the agent sends back (AGENT-HELLO, ACK). No I/O.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "spop.h"

/* HAPROXY-HELLO as HAProxy 2.6 writes it: supported-versions, max-frame-size
 * (UINT32), capabilities "pipelining", a random UUID as engine-id. Writes
 * into the caller's <dst>; returns bytes or -1. */
int bench_enc_hello(unsigned char *dst, size_t cap, uint32_t max_frame,
                    uint64_t *rng)
{
	char uuid[40];
	uint64_t a = bench_rng_next(rng), b = bench_rng_next(rng);

	snprintf(uuid, sizeof(uuid), "%08x-%04x-4%03x-%04x-%012" PRIx64,
	         (unsigned)(a >> 32), (unsigned)(a >> 16) & 0xffffu,
	         (unsigned)a & 0xfffu, ((unsigned)(b >> 48) & 0x3fffu) | 0x8000u,
	         b & 0xffffffffffffu);
	return spop_encode_haproxy_hello(dst, cap, max_frame, "pipelining", false, uuid);
}

/* Decimal digits of <v> into <dst> (room for 20). Returns the length. */
static size_t bench_fmt_u64(char *dst, uint64_t v)
{
	char tmp[20];
	size_t n = 0, i;

	do {
		tmp[n++] = (char)('0' + v % 10u);
		v /= 10u;
	} while (v != 0);
	for (i = 0; i < n; i++)
		dst[i] = tmp[n - 1 - i];
	return n;
}

/* The account for the next request of thread <t>: uniform over --keys, or
 * one of the first --hot accounts with probability --hot-pct. Writes the key
 * into <key> (BENCH_KEY_MAX bytes), returns its length. */
size_t bench_pick_key(struct bench_thread *t, char *key)
{
	const struct bench_opts *o = t->o;
	size_t plen = strlen(o->key_prefix);
	uint64_t id;

	if (o->hot > 0 && (double)bench_rng_below(&t->rng, 1000000u) < o->hot_pct * 10000.0)
		id = bench_rng_below(&t->rng, o->hot);
	else
		id = bench_rng_below(&t->rng, o->keys);
	memcpy(key, o->key_prefix, plen);
	return plen + bench_fmt_u64(key + plen, id);
}

/* One NOTIFY with message "ratelimit" {policy STR, key STR, cost INT64},
 * written into the caller's <dst>. Returns bytes or -1. */
int bench_enc_notify(unsigned char *dst, size_t cap, const struct bench_opts *o,
                     uint64_t sid, const char *key, size_t key_len)
{
	struct spop_data policy = { .type = SPOP_T_STR, .v.s = { o->policy, strlen(o->policy) } };
	struct spop_data k = { .type = SPOP_T_STR, .v.s = { key, key_len } };
	struct spop_data cost = { .type = SPOP_T_INT64, .v.i = o->cost };
	struct spop_writer w;

	spop_notify_begin(&w, dst, cap, sid, 1);
	spop_notify_message(&w, "ratelimit", 3);
	spop_notify_arg(&w, "policy", &policy);
	spop_notify_arg(&w, "key", &k);
	spop_notify_arg(&w, "cost", &cost);
	return spop_notify_end(&w);
}

/* The response phase's NOTIFY, as HAProxy sends it for a request that
 * holds a lease: message "ratelimit-done" {policy STR, key STR, lease STR
 * (<lease>, BENCH_LEASE_LEN hex digits), cost INT64 with --done-cost},
 * written into the caller's <dst>. Returns bytes or -1. */
int bench_enc_done(unsigned char *dst, size_t cap, const struct bench_opts *o,
                   uint64_t sid, const char *key, size_t key_len, const char *lease)
{
	struct spop_data policy = { .type = SPOP_T_STR, .v.s = { o->policy, strlen(o->policy) } };
	struct spop_data k = { .type = SPOP_T_STR, .v.s = { key, key_len } };
	struct spop_data l = { .type = SPOP_T_STR, .v.s = { lease, BENCH_LEASE_LEN } };
	struct spop_data cost = { .type = SPOP_T_INT64, .v.i = o->done_cost };
	struct spop_writer w;

	spop_notify_begin(&w, dst, cap, sid, 1);
	spop_notify_message(&w, "ratelimit-done", o->done_cost >= 0 ? 4 : 3);
	spop_notify_arg(&w, "policy", &policy);
	spop_notify_arg(&w, "key", &k);
	spop_notify_arg(&w, "lease", &l);
	if (o->done_cost >= 0)
		spop_notify_arg(&w, "cost", &cost);
	return spop_notify_end(&w);
}

/* Upper bound of one NOTIFY's size for options <o>: the ratelimit message,
 * or with --done the larger ratelimit-done. */
size_t bench_notify_max(const struct bench_opts *o)
{
	size_t check = 4 + 1 + 4 + 2 * SPOP_VARINT_MAX_LEN + 10 + 1 +
	               (7 + 1 + SPOP_VARINT_MAX_LEN + strlen(o->policy)) +
	               (4 + 1 + SPOP_VARINT_MAX_LEN + BENCH_KEY_MAX) +
	               (5 + 1 + SPOP_VARINT_MAX_LEN);

	if (!o->done)
		return check;
	/* the done message: a longer name (15 against 10) and the lease */
	return check + 5 + (6 + 1 + SPOP_VARINT_MAX_LEN + BENCH_LEASE_LEN);
}

/* ------------------------------------------------------------------------
 * What the agent sends (AGENT-HELLO, ACK, AGENT-DISCONNECT), decoded by the
 * codec's spop_decode_frame(); here only what the bench expects of it.
 */

/* Check decoded AGENT-HELLO <h>: version "2.0", a max-frame-size in
 * [256, <ours>] and "pipelining" when <want_pipelining>. Sets <*frame_max>.
 * Returns 0 or -1 with <err>. */
int bench_check_agent_hello(const struct spop_hello *h, uint32_t ours,
                            bool want_pipelining, uint32_t *frame_max,
                            char *err, size_t errlen)
{
	if (!h->has_versions || !h->has_max_frame_size || !h->has_capabilities) {
		snprintf(err, errlen, "AGENT-HELLO lacks %s", !h->has_versions ? "version" :
		         !h->has_max_frame_size ? "max-frame-size" : "capabilities");
		return -1;
	}
	if (!spop_str_eq(h->versions, SPOP_VERSION)) {
		snprintf(err, errlen, "AGENT-HELLO version is not \"2.0\"");
		return -1;
	}
	if (h->max_frame_size < SPOP_MIN_FRAME_SIZE || h->max_frame_size > ours) {
		snprintf(err, errlen, "AGENT-HELLO max-frame-size %" PRIu32
		         " outside [256, %" PRIu32 "]", h->max_frame_size, ours);
		return -1;
	}
	if (want_pipelining && !h->cap_pipelining) {
		snprintf(err, errlen, "agent did not announce pipelining (use -d 1)");
		return -1;
	}
	*frame_max = h->max_frame_size;
	return 0;
}

/* Count <reason> (an error's reason variable) in thread <t>'s small table;
 * the name is copied, <reason> is only borrowed. */
static void bench_count_reason(struct bench_thread *t, struct spop_str reason)
{
	unsigned i;

	for (i = 0; i < BENCH_REASONS; i++) {
		struct bench_reason *r = &t->reasons[i];

		if (r->n == 0) {
			size_t n = reason.len < sizeof(r->name) - 1 ? reason.len : sizeof(r->name) - 1;

			memcpy(r->name, reason.ptr, n);
			r->name[n] = '\0';
			r->n = 1;
			return;
		}
		if (strlen(r->name) == reason.len && memcmp(r->name, reason.ptr, reason.len) == 0) {
			r->n++;
			return;
		}
	}
	t->reasons_other++;
}

/* The status of decoded ACK <acts> (its "status" set-var), counting an
 * error's reason in thread <t>. With <lease> (--done), also its "lease"
 * set-var, borrowed from <acts>, or { NULL, 0 }. */
enum bench_status bench_ack_status(struct bench_thread *t,
                                   const struct spop_actions *acts,
                                   struct spop_str *lease)
{
	struct spop_str reason = { "-", 1 };
	enum bench_status st = BENCH_STATUS_NONE;
	struct spop_action a;
	struct spop_iter it;

	if (lease != NULL)
		*lease = (struct spop_str){ NULL, 0 };
	spop_iter_actions(acts, &it);
	while (spop_next_action(&it, &a)) {
		if (a.type != SPOP_ACT_SET_VAR || a.value.type != SPOP_T_STR)
			continue;
		if (spop_str_eq(a.name, "status")) {
			if (spop_str_eq(a.value.v.s, "allow"))
				st = BENCH_STATUS_ALLOW;
			else if (spop_str_eq(a.value.v.s, "deny"))
				st = BENCH_STATUS_DENY;
			else if (spop_str_eq(a.value.v.s, "error"))
				st = BENCH_STATUS_ERROR;
		} else if (spop_str_eq(a.name, "reason")) {
			reason = a.value.v.s;
		} else if (lease != NULL && spop_str_eq(a.name, "lease")) {
			*lease = a.value.v.s;
		}
	}
	if (st == BENCH_STATUS_ERROR)
		bench_count_reason(t, reason);
	return st;
}
