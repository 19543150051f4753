/*
 * test_regress - regression tests for what the hardening work found.
 *
 * 1. Every input a fuzzer ever crashed on (table below, hex), replayed
 *    through the very harness code that found it: tests/fuzz/fuzz_*.c are
 *    compiled in here, so their invariants (abort() on violation) and the
 *    sanitizers/valgrind of the unit-test builds guard the fix.
 * 2. The committed fuzz seeds and minimized corpora (tests/fuzz/seeds/ and
 *    tests/fuzz/corpus/<harness>/), replayed the same way: a cheap pass
 *    over a few hundred interesting inputs.
 * 3. Bugs found by the end-to-end limit tests, pinned at unit level:
 *    a peer that sends NOTIFYs but never reads its ACKs must be pushed back
 *    (the agent stops reading) instead of growing the output buffer; a busy
 *    peer whose every read ends mid-frame is making progress and must not
 *    hit the frame deadline (it used to run from the first partial frame).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

/* The harnesses, each entry point renamed so the three link together. */
#define LLVMFuzzerTestOneInput regress_fuzz_spop
#include "../fuzz/fuzz_spop.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput regress_fuzz_conn
#include "../fuzz/fuzz_conn.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput regress_fuzz_config
#include "../fuzz/fuzz_config.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput regress_fuzz_module_args
#include "../fuzz/fuzz_module_args.c"
#undef LLVMFuzzerTestOneInput
/* (the Redis module's parser is not an agent object: compiled in) */
#include "../../module/rl_args.c"

#include "harness.h"

#define REGRESS_INPUT_MAX (64u * 1024u)
#define REGRESS_CORPUS_MAX 300     /* committed corpus files per harness */

typedef int (*regress_fn)(const uint8_t *data, size_t size);

/* ------------------------------------------------------------ crash inputs */

struct regress_crash {
	const char *harness;    /* fuzz_spop, fuzz_conn or fuzz_config */
	const char *what;       /* the bug, and the fix's commit subject */
	const char *hex;        /* the minimized input */
};

static const struct regress_crash regress_crashes[] = {
	{ NULL, NULL, NULL },
};

/* The harness entry point called <name>, or NULL. */
static regress_fn regress_harness(const char *name)
{
	if (strcmp(name, "fuzz_spop") == 0)
		return regress_fuzz_spop;
	if (strcmp(name, "fuzz_conn") == 0)
		return regress_fuzz_conn;
	if (strcmp(name, "fuzz_config") == 0)
		return regress_fuzz_config;
	if (strcmp(name, "fuzz_module_args") == 0)
		return regress_fuzz_module_args;
	return NULL;
}

/* Owns a scratch buffer for the call: each crash input, decoded, through
 * its harness. */
static void test_crash_inputs(void **state)
{
	unsigned char *buf = malloc(REGRESS_INPUT_MAX);
	size_t i;
	long n;

	(void)state;
	assert_non_null(buf);
	for (i = 0; regress_crashes[i].harness; i++) {
		regress_fn fn = regress_harness(regress_crashes[i].harness);

		assert_non_null(fn);
		n = harness_hex_decode(regress_crashes[i].hex, buf, REGRESS_INPUT_MAX);
		assert_true(n >= 0);
		printf("# %s: %s\n", regress_crashes[i].harness, regress_crashes[i].what);
		assert_int_equal(fn(buf, (size_t)n), 0);
	}
	free(buf);
}

/* ------------------------------------------------------------ corpora */

/* Owns a scratch buffer for the call. Replay every file of
 * tests/fuzz/<kind>/<name>/ through harness <name>.
 * Returns how many; -1 when the directory is not there (not run from the
 * repository root, as make test does). */
static long regress_replay_dir(const char *kind, const char *name)
{
	char dir[HARNESS_PATH_MAX], path[HARNESS_PATH_MAX * 2];
	regress_fn fn = regress_harness(name);
	unsigned char *buf = malloc(REGRESS_INPUT_MAX);
	struct dirent *de;
	long n = 0;
	DIR *d;

	assert_non_null(fn);
	assert_non_null(buf);
	snprintf(dir, sizeof(dir), "tests/fuzz/%s/%s", kind, name);
	d = opendir(dir);
	if (!d) {
		free(buf);
		return -1;
	}
	while ((de = readdir(d))) {
		FILE *f;
		size_t len;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		f = fopen(path, "rb");
		assert_non_null(f);
		len = fread(buf, 1, REGRESS_INPUT_MAX, f);
		fclose(f);
		assert_int_equal(fn(buf, len), 0);
		n++;
	}
	closedir(d);
	free(buf);
	return n;
}

/* Seeds and corpus of harness <name>; skipped outside the repository root. */
static void regress_replay_corpus(const char *name)
{
	long seeds = regress_replay_dir("seeds", name);
	long corpus = regress_replay_dir("corpus", name);

	if (seeds == -1 && corpus == -1) {
		skip();     /* not run from the repository root */
		return;
	}
	printf("# %s: %ld seeds and %ld corpus inputs replayed\n", name, seeds, corpus);
	assert_true(seeds > 0);
	/* The repository keeps the minimized corpus only (tools/fuzz.sh's
	 * merge: edges, less the seeds'); make fuzz grows the rest in build/. */
	assert_true(corpus <= REGRESS_CORPUS_MAX);
}

static void test_corpus_spop(void **state)
{
	(void)state;
	regress_replay_corpus("fuzz_spop");
}

static void test_corpus_conn(void **state)
{
	(void)state;
	regress_replay_corpus("fuzz_conn");
}

static void test_corpus_config(void **state)
{
	(void)state;
	regress_replay_corpus("fuzz_config");
}

static void test_corpus_module_args(void **state)
{
	(void)state;
	regress_replay_corpus("fuzz_module_args");
}

/* ------------------------------------------------- a peer that never reads */

/* Writes into the caller's <dst> (room for 64 bytes): one NOTIFY
 * "ratelimit" (policy transfer, key ACC-BP) with stream-id <sid>. Returns
 * its size. */
static size_t regress_notify(unsigned char *dst, uint64_t sid)
{
	struct spop_data policy = { .type = SPOP_T_STR, .v.s = { "transfer", 8 } };
	struct spop_data key = { .type = SPOP_T_STR, .v.s = { "ACC-BP", 6 } };
	struct spop_writer w;
	int n;

	spop_notify_begin(&w, dst, 64, sid, 1);
	spop_notify_message(&w, "ratelimit", 2);
	spop_notify_arg(&w, "policy", &policy);
	spop_notify_arg(&w, "key", &key);
	n = spop_notify_end(&w);
	assert_true(n > 0);
	return (size_t)n;
}

static const unsigned char regress_hello[] = {
	0, 0, 0, 0x4b, SPOP_FRAME_HAPROXY_HELLO, 0, 0, 0, 1, 0, 0,
	18, 's', 'u', 'p', 'p', 'o', 'r', 't', 'e', 'd', '-', 'v', 'e', 'r', 's', 'i', 'o', 'n', 's',
	SPOP_T_STR, 3, '2', '.', '0',
	14, 'm', 'a', 'x', '-', 'f', 'r', 'a', 'm', 'e', '-', 's', 'i', 'z', 'e',
	SPOP_T_UINT32, 0xfc, 0xf0, 0x06,
	12, 'c', 'a', 'p', 'a', 'b', 'i', 'l', 'i', 't', 'i', 'e', 's',
	SPOP_T_STR, 10, 'p', 'i', 'p', 'e', 'l', 'i', 'n', 'i', 'n', 'g',
};

/* Set up <env>/<ne>/<ref>/<cfg> on <loop> with a fake limiter that allows at
 * once (fz.mode 0) and the given deadlines. <cfg> is the caller's to
 * config_release(). */
static void regress_env_init(struct ev_loop *loop, struct conn_env *env,
                             struct conn_notify_env *ne,
                             struct conn_cfg_ref *ref, struct config *cfg,
                             double hello_timeout, double frame_timeout)
{
	static const char text[] = "policy transfer 1000000/1s\n";
	char err[256];

	assert_non_null(loop);
	config_init(cfg);
	assert_int_equal(config_parse(cfg, "t.conf", text, sizeof(text) - 1, err, sizeof(err)), 0);
	memset(ref, 0, sizeof(*ref));
	ref->cfg = cfg;
	ref->refs = 1;
	ref->release = fuzz_release;
	memset(ne, 0, sizeof(*ne));
	ne->cfg = ref;
	ne->ops.check = fuzz_check;
	memset(env, 0, sizeof(*env));
	env->loop = loop;
	env->upper = &conn_notify_upper;
	env->upper_ctx = ne;
	env->hello_timeout = hello_timeout;
	env->frame_timeout = frame_timeout;
	memset(&fz, 0, sizeof(fz));
}

/* Owns a loop, a socketpair and a config for the call: a peer whose every
 * write ends mid-frame keeps its connection past the frame deadline. */
static void test_busy_peer_keeps_its_connection(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct conn_env env;
	struct conn_notify_env ne;
	struct conn_cfg_ref ref;
	struct config cfg;
	unsigned char frame[64], stream[128], rd[65536];
	size_t flen, half, got = 0, nacks = 0, nframes = 0, k;
	int sv[2], disco = 0;
	ev_tstamp start;
	ssize_t n;

	(void)state;
	regress_env_init(loop, &env, &ne, &ref, &cfg, 30.0, 1.0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	assert_int_equal(conn_accept(&env, sv[1]), 0);
	assert_int_equal(write(sv[0], regress_hello, sizeof(regress_hello)),
	                 (ssize_t)sizeof(regress_hello));

	/* Every write is the second half of a frame, then the first half of
	 * the next one: the agent always holds a partial frame, and completes
	 * one every 10 ms, for 2.5 times the frame deadline. Only a stall of
	 * a whole second between two turns of this loop could fail it. */
	flen = regress_notify(frame, 1);
	half = flen / 2;
	memcpy(stream, frame, flen);
	memcpy(stream + flen, frame, flen);
	assert_int_equal(write(sv[0], frame, half), (ssize_t)half);
	start = ev_time();
	while (ev_time() - start < 2.5 && env.nconns == 1) {
		assert_int_equal(write(sv[0], stream + half, flen), (ssize_t)flen);
		nframes++;
		for (k = 0; k < 4; k++) {
			ev_run(loop, EVRUN_NOWAIT);
			conn_env_flush(&env);
		}
		while ((n = read(sv[0], rd + got, sizeof(rd) - got)) > 0)
			got += (size_t)n;
		while (got >= 4) {
			size_t len = (size_t)rd[0] << 24 | (size_t)rd[1] << 16 | (size_t)rd[2] << 8 | rd[3];

			if (got < len + 4)
				break;
			nacks += rd[4] == SPOP_FRAME_ACK;
			disco += rd[4] == SPOP_FRAME_AGENT_DISCONNECT;
			memmove(rd, rd + len + 4, got - len - 4);
			got -= len + 4;
		}
		usleep(10000);
	}
	printf("# %zu frames over %.1f s, each write ending mid-frame; %zu ACKs\n",
	       nframes, ev_time() - start, nacks);
	assert_int_equal(disco, 0);
	assert_int_equal(env.nconns, 1);
	assert_int_equal(nacks, nframes);

	conn_env_close_all(&env);
	close(sv[0]);
	ev_loop_destroy(loop);
	config_release(&cfg);
}

/* Owns a loop, a socketpair and a config for the call: a peer that never
 * reads is pushed back, then gets every ACK once it reads. */
static void test_unread_acks_push_back(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct conn_env env;
	struct conn_notify_env ne;
	struct conn_cfg_ref ref;
	struct config cfg;
	unsigned char frame[64], rd[65536];
	size_t flen, taken = 0, got = 0, nsent = 0, nacks = 0, want = 0;
	uint64_t sid = 1;
	int sv[2], small = 4096, round;
	ssize_t n;

	(void)state;
	regress_env_init(loop, &env, &ne, &ref, &cfg, 30.0, 30.0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	assert_int_equal(conn_accept(&env, sv[1]), 0);
	assert_int_equal(write(sv[0], regress_hello, sizeof(regress_hello)),
	                 (ssize_t)sizeof(regress_hello));

	/* Step 1: send NOTIFYs and never read. Without backpressure the agent
	 * takes them all and queues the ACKs (64 MB here); with it, the socket
	 * fills and our writes stop being accepted. */
	for (round = 0; round < 200000 && taken < (64u << 20); round++) {
		flen = regress_notify(frame, sid);
		n = send(sv[0], frame, flen, MSG_NOSIGNAL);
		if (n == (ssize_t)flen) {
			taken += flen;
			nsent++;
			sid += 2;
		} else if (n > 0) {
			fail_msg("partial write of a NOTIFY");
		}
		ev_run(loop, EVRUN_NOWAIT);
		conn_env_flush(&env);
		if (n == -1 && errno == EAGAIN && round > 1000) {
			/* full: give the agent a few more turns, then look again */
			int k;

			for (k = 0; k < 8; k++) {
				ev_run(loop, EVRUN_NOWAIT);
				conn_env_flush(&env);
			}
			if (send(sv[0], frame, flen, MSG_NOSIGNAL | MSG_DONTWAIT) == -1)
				break;
			taken += flen;
			nsent++;
			sid += 2;
		}
	}
	printf("# the agent took %zu NOTIFYs (%zu bytes) from a peer that reads nothing\n",
	       nsent, taken);
	assert_true(taken < (8u << 20));
	assert_int_equal(env.nconns, 1);

	/* Step 2: the peer reads again; every NOTIFY taken gets its ACK. */
	want = nsent;
	for (round = 0; round < 100000 && nacks < want; round++) {
		ev_run(loop, EVRUN_NOWAIT);
		conn_env_flush(&env);
		n = read(sv[0], rd + got, sizeof(rd) - got);
		if (n > 0)
			got += (size_t)n;
		while (got >= 4) {
			size_t len = (size_t)rd[0] << 24 | (size_t)rd[1] << 16 | (size_t)rd[2] << 8 | rd[3];

			assert_true(len + 4 <= sizeof(rd));
			if (got < len + 4)
				break;
			if (rd[4] == SPOP_FRAME_ACK)
				nacks++;
			memmove(rd, rd + len + 4, got - len - 4);
			got -= len + 4;
		}
	}
	assert_int_equal(nacks, want);

	conn_env_close_all(&env);
	close(sv[0]);
	ev_loop_destroy(loop);
	config_release(&cfg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crash_inputs),
		cmocka_unit_test(test_corpus_spop),
		cmocka_unit_test(test_corpus_conn),
		cmocka_unit_test(test_corpus_config),
		cmocka_unit_test(test_corpus_module_args),
		cmocka_unit_test(test_unread_acks_push_back),
		cmocka_unit_test(test_busy_peer_keeps_its_connection),
	};

	log_set_level(CONFIG_LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
