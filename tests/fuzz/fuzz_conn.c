/*
 * fuzz_conn - libFuzzer harness for the connection state machine (conn.c)
 * fed an arbitrary byte stream over a socketpair, with a fake limiter.
 *
 * Input: two mode bytes, then the stream HAProxy would send.
 *   byte 0  bits 0-1  limiter: 0 sync allow, 1 sync deny, 2 async, 3 refuse (-1)
 *           bit  2    async answers arrive after the connection closed
 *           bit  3    max-inflight 2 (the shed path)
 *           bit  4    frame-timeout 0 (a partial frame times out at once)
 *           bits 5-7  write chunk size: 1, 3, 7, 16, 64, 256, 1024, all
 *                     (raised so that an input takes at most ~16 writes)
 *   byte 1  bit  0    drain (SIGTERM) after half the stream
 *           bit  1    async answers are errors (fail-open policy: allow+reason)
 *           bit  2    answer async calls in reverse order
 *           bit  3    the peer reads nothing until the stream is sent, over
 *                     4 KB socket buffers (the backpressure path)
 * Invariants checked with abort(): every frame the agent writes decodes
 * whole, is of an agent type, has FIN set and a non-zero length; the fake
 * limiter is only asked with a known policy, a valid key and a cost >= 1;
 * and when everything is over no connection, config reference or in-flight
 * gauge is left behind (AddressSanitizer's leak check covers memory).
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>

#include "config.h"
#include "conn.h"
#include "conn_notify.h"
#include "log.h"
#include "metrics.h"
#include "spop.h"
#include "window.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_CALLS   1024
#define FUZZ_OUT_MAX     (2u << 20)

struct fuzz_call {
	limiter_cb cb;
	void *arg;
	const struct window_policy *p;
};

struct fuzz_state {
	unsigned mode;                  /* limiter mode, bits 0-1 of byte 0 */
	bool async_errors;
	bool deaf;                      /* the peer does not read (yet) */
	struct fuzz_call calls[FUZZ_MAX_CALLS];
	unsigned ncalls;
	/* the agent's output, reassembled into frames */
	unsigned char out[FUZZ_OUT_MAX];
	size_t out_len;
};

static struct fuzz_state fz;
static struct ev_loop *fuzz_loop;
static struct config fuzz_cfg;

/* A decision as the real limiter would give it for <p>. */
static void fuzz_decision(const struct window_policy *p, enum window_status s,
                          struct window_decision *d)
{
	memset(d, 0, sizeof(*d));
	d->status = s;
	d->has_quota = true;
	d->limit = p ? (int64_t)p->win[0].limit : 3;
	d->remaining = s == WINDOW_ALLOW ? 1 : 0;
	d->reset = 1;
	d->retry_after = s == WINDOW_DENY ? 1 : 0;
}

/* Fake limiter with limiter_check()'s contract: -1 and never <cb>, or 0
 * and <cb> exactly once (now, or later from fuzz_answer_all()). */
static int fuzz_check(void *ctx, const struct window_policy *p, const char *key,
                      size_t key_len, uint64_t cost, limiter_cb cb, void *arg)
{
	struct window_decision d;

	(void)ctx;
	/* conn.c validated these before asking: hold it to that */
	if (!p || window_check_key(key, key_len) == -1 || cost < 1)
		abort();
	switch (fz.mode) {
	case 0:
	case 1:
		fuzz_decision(p, fz.mode == 0 ? WINDOW_ALLOW : WINDOW_DENY, &d);
		cb(arg, &d);
		return 0;
	case 2:
		if (fz.ncalls == FUZZ_MAX_CALLS)
			return -1;
		fz.calls[fz.ncalls].cb = cb;
		fz.calls[fz.ncalls].arg = arg;
		fz.calls[fz.ncalls].p = p;
		fz.ncalls++;
		return 0;
	default:
		return -1;
	}
}

/* Answer every async call held, in order or in <reverse>. */
static void fuzz_answer_all(bool reverse)
{
	struct window_decision d;
	unsigned i, n = fz.ncalls;

	fz.ncalls = 0;
	for (i = 0; i < n; i++) {
		struct fuzz_call *c = &fz.calls[reverse ? n - 1 - i : i];

		if (fz.async_errors)
			window_decide_error(c->p, WINDOW_REASON_REDIS_TIMEOUT, &d);
		else
			fuzz_decision(c->p, (i & 1) ? WINDOW_DENY : WINDOW_ALLOW, &d);
		c->cb(c->arg, &d);
	}
}

/* The config generation <ref> is static here: nothing to free. */
static void fuzz_release(struct conn_cfg_ref *ref)
{
	(void)ref;
}

/* Borrows fz.out: check the agent's output there, whole frames only, each
 * valid. Consumes the complete frames, keeps a partial tail. */
static void fuzz_check_output(void)
{
	size_t off = 0;

	while (fz.out_len - off >= 4) {
		const unsigned char *b = fz.out + off;
		uint32_t len = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 |
		               (uint32_t)b[2] << 8 | b[3];
		struct spop_frame f;
		enum spop_status st;
		int n;

		if (len == 0 || len > SPOP_MAX_FRAME_SIZE)
			abort();        /* never a zero-length or oversized frame */
		if (fz.out_len - off < 4 + (size_t)len)
			break;
		n = spop_decode_frame(b, 4 + len, SPOP_MAX_FRAME_SIZE, &f, &st);
		if (n != (int)(4 + len))
			abort();
		if (f.hdr.type != SPOP_FRAME_AGENT_HELLO && f.hdr.type != SPOP_FRAME_ACK &&
		    f.hdr.type != SPOP_FRAME_AGENT_DISCONNECT)
			abort();
		if (!(f.hdr.flags & SPOP_FLAG_FIN))
			abort();
		off += 4 + len;
	}
	memmove(fz.out, fz.out + off, fz.out_len - off);
	fz.out_len -= off;
}

/* Read what the agent wrote to <peer> into fz.out (static storage); -1 or
 * a deaf peer reads nothing. */
static void fuzz_drain_peer(int peer)
{
	ssize_t n;

	if (peer == -1 || fz.deaf)
		return;
	for (;;) {
		if (fz.out_len == sizeof(fz.out))
			fuzz_check_output();
		if (fz.out_len == sizeof(fz.out))
			abort();        /* one frame bigger than 2 MB */
		n = read(peer, fz.out + fz.out_len, sizeof(fz.out) - fz.out_len);
		if (n <= 0)
			break;
		fz.out_len += (size_t)n;
	}
	fuzz_check_output();
}

/* Let the connection on <fd> run until it consumed what is readable. */
static void fuzz_pump(struct conn_env *env, int fd, int peer)
{
	int i, pending = 0;

	for (i = 0; i < 64; i++) {
		ev_run(fuzz_loop, EVRUN_NOWAIT);
		conn_env_flush(env);
		fuzz_drain_peer(peer);
		if (env->nconns == 0)
			break;
		if (ioctl(fd, FIONREAD, &pending) == -1 || pending == 0)
			break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t chunks[8] = { 1, 3, 7, 16, 64, 256, 1024, (size_t)-1 };
	struct conn_env env;
	struct conn_notify_env ne;
	struct conn_cfg_ref ref;
	struct metrics *m;
	unsigned b0, b1;
	size_t chunk, off = 0, half;
	bool drained = false;
	int sv[2], fd;

	if (size < 2)
		return 0;
	if (!fuzz_loop) {
		static const char text[] =
			"policy transfer 3/1s\n"
			"policy reads 100/1m on-redis-error=allow\n"
			"policy two 5/1s 20/1m\n";
		char err[256];

		log_set_level(CONFIG_LOG_ERROR);
		fuzz_loop = ev_loop_new(EVFLAG_AUTO);
		config_init(&fuzz_cfg);
		if (!fuzz_loop || config_parse(&fuzz_cfg, "fuzz.conf", text, sizeof(text) - 1,
		                               err, sizeof(err)) == -1)
			abort();
	}
	b0 = data[0];
	b1 = data[1];
	data += 2;
	size -= 2;
	memset(&fz.calls, 0, sizeof(fz.calls));
	fz.ncalls = 0;
	fz.out_len = 0;
	fz.mode = b0 & 3;
	fz.async_errors = (b1 & 2) != 0;
	fz.deaf = (b1 & 8) != 0;
	fuzz_cfg.max_inflight = (b0 & 8) ? 2 : 256;
	chunk = chunks[b0 >> 5];
	/* at most ~16 writes per input: byte-by-byte on short streams only,
	 * or the fuzzer spends its time in syscalls */
	if (size / 16 > chunk)
		chunk = size / 16;

	m = calloc(1, sizeof(*m));
	if (!m)
		return 0;
	memset(&ref, 0, sizeof(ref));
	ref.cfg = &fuzz_cfg;
	ref.refs = 1;
	ref.release = fuzz_release;
	memset(&ne, 0, sizeof(ne));
	ne.cfg = &ref;
	ne.ops.check = fuzz_check;
	ne.metrics = m;
	memset(&env, 0, sizeof(env));
	env.loop = fuzz_loop;
	env.upper = &conn_notify_upper;
	env.upper_ctx = &ne;
	env.metrics = m;
	env.hello_timeout = 5.0;
	env.frame_timeout = (b0 & 16) ? 0.0 : 5.0;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == -1) {
		free(m);
		return 0;
	}
	fd = sv[1];
	if (fz.deaf) {
		int small = 4096;

		setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	}
	if (conn_accept(&env, fd) == -1)
		abort();

	half = size / 2;
	while (off < size && env.nconns > 0) {
		size_t n = size - off < chunk ? size - off : chunk;
		ssize_t w;

		if ((b1 & 1) && !drained && off + n > half && off <= half) {
			n = half - off;
			if (n == 0) {
				conn_env_drain(&env);
				drained = true;
				fuzz_pump(&env, fd, sv[0]);
				continue;
			}
		}
		w = send(sv[0], data + off, n, MSG_NOSIGNAL);
		if (w <= 0)
			break;  /* the agent closed, or stopped reading (closing) */
		off += (size_t)w;
		fuzz_pump(&env, fd, sv[0]);
		if (fz.mode == 2 && !(b0 & 4) && fz.ncalls > 0 && (off & 1))
			fuzz_answer_all((b1 & 4) != 0);
	}
	fz.deaf = false;
	/* decisions that come back while the conn is still open, or after */
	if (!(b0 & 4))
		fuzz_answer_all((b1 & 4) != 0);
	fuzz_pump(&env, fd, sv[0]);
	close(sv[0]);
	fuzz_pump(&env, fd, -1);
	conn_env_close_all(&env);
	fuzz_answer_all((b1 & 4) != 0);
	conn_env_close_all(&env);       /* the pool refilled by late answers */

	if (env.nconns != 0 || env.conns || ref.refs != 1 ||
	    atomic_load(&m->notify_inflight) != 0)
		abort();
	free(m);
	return 0;
}
