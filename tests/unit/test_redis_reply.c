/*
 * test_redis_reply - the reply objects every hiredis context of the agent
 * builds (redis_reply.c): for each reply below, the tree hiredis's own
 * functions build and the one ours build, from the same bytes, are equal
 * field by field (types, integers, strings byte for byte, element counts;
 * 1.x: doubles, verbatim types), fed whole, a byte at a time, and in
 * pieces. Then what a block must survive: replies larger than a block
 * (CLUSTER SLOTS-like, a 2 MB string), several replies in one read, two
 * readers with half-read replies at once, a protocol error and a reader
 * freed halfway (no leak: ASan, valgrind), and a reply too large refused
 * cleanly as out of memory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hiredis_compat.h"
#include <hiredis/hiredis.h>

#include "redis_reply.h"

/* Are the trees <a> and <b> equal in every field a caller reads? */
static void assert_same(const redisReply *a, const redisReply *b)
{
	size_t i;

	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(a->type, b->type);
	assert_true(a->integer == b->integer);
	assert_int_equal(a->len, b->len);
	if (a->str) {
		assert_non_null(b->str);
		assert_memory_equal(a->str, b->str, a->len + 1);   /* the NUL too */
	} else {
		assert_null(b->str);
	}
#if SPOA_HIREDIS_AT_LEAST(1, 0)
	assert_true(a->dval == b->dval || (a->dval != a->dval && b->dval != b->dval));
	assert_memory_equal(a->vtype, b->vtype, sizeof(a->vtype));
#endif
	assert_int_equal(a->elements, b->elements);
	if (!a->element) {
		assert_null(b->element);
		return;
	}
	assert_non_null(b->element);
	for (i = 0; i < a->elements; i++)
		assert_same(a->element[i], b->element[i]);
}

/* Feed <len> bytes of <resp> to both readers in pieces of <step> bytes
 * (0: whole), and compare the <nreplies> replies they give. */
static void check_fed(const char *resp, size_t len, size_t step, unsigned nreplies)
{
	redisReader *def = redisReaderCreate();
	redisReader *ours = redisReaderCreateWithFunctions(&redis_reply_functions);
	unsigned got = 0;
	size_t at = 0;

	assert_non_null(def);
	assert_non_null(ours);
	if (step == 0)
		step = len;
	while (at < len || got < nreplies) {
		size_t n = len - at < step ? len - at : step;
		void *a = NULL, *b = NULL;

		if (n) {
			assert_int_equal(redisReaderFeed(def, resp + at, n), REDIS_OK);
			assert_int_equal(redisReaderFeed(ours, resp + at, n), REDIS_OK);
			at += n;
		}
		for (;;) {
			assert_int_equal(redisReaderGetReply(def, &a), REDIS_OK);
			assert_int_equal(redisReaderGetReply(ours, &b), REDIS_OK);
			assert_true((a == NULL) == (b == NULL));
			if (!a)
				break;
			assert_same(a, b);
			freeReplyObject(a);
			redis_reply_functions.freeObject(b);
			got++;
		}
		if (n == 0)
			break;
	}
	assert_int_equal(got, nreplies);
	redisReaderFree(def);
	redisReaderFree(ours);
}

/* <resp> (a C string) whole, a byte at a time, and in pieces of 7. */
static void check(const char *resp, unsigned nreplies)
{
	size_t len = strlen(resp);

	check_fed(resp, len, 0, nreplies);
	check_fed(resp, len, 1, nreplies);
	check_fed(resp, len, 7, nreplies);
}

static void test_decision(void **state)
{
	(void)state;
	check("*6\r\n:1\r\n:3\r\n:2\r\n:1000000\r\n:0\r\n:0\r\n", 1);
	check("*6\r\n:0\r\n:3\r\n:0\r\n:999999\r\n:-1\r\n:9223372036854775807\r\n", 1);
}

/* A batch's reply: arrays of six integers, one element an error. */
static void test_batch(void **state)
{
	char buf[8192];
	size_t at = 0;
	unsigned i;

	(void)state;
	at += (size_t)snprintf(buf + at, sizeof(buf) - at, "*64\r\n");
	for (i = 0; i < 64; i++)
		if (i == 17)
			at += (size_t)snprintf(buf + at, sizeof(buf) - at, "-ERR decision %u failed\r\n", i);
		else
			at += (size_t)snprintf(buf + at, sizeof(buf) - at,
			                       "*6\r\n:1\r\n:20\r\n:%u\r\n:1000000\r\n:0\r\n:0\r\n", i);
	assert_true(at < sizeof(buf));
	check(buf, 1);
}

/* Errors, statuses, strings (binary, empty), nils, empty arrays, and the
 * deepest nesting 0.14 reads. */
static void test_shapes(void **state)
{
	static const char bin[] = "$10\r\na\0b\r\n$*\xff\r\n\r\n";

	(void)state;
	check("-NOSCRIPT No matching script. Please use EVAL.\r\n", 1);
	check("+OK\r\n", 1);
	check("$5\r\nhello\r\n", 1);
	check("$0\r\n\r\n", 1);
	check("$-1\r\n", 1);
	check("*-1\r\n", 1);
	check("*0\r\n", 1);
	check(":42\r\n", 1);
	check("*3\r\n$-1\r\n*0\r\n*-1\r\n", 1);
	check("*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:7\r\n", 1);
	check("*2\r\n*2\r\n+a\r\n-b\r\n*2\r\n$1\r\nc\r\n:-5\r\n", 1);
	check_fed(bin, sizeof(bin) - 1, 0, 1);
	check_fed(bin, sizeof(bin) - 1, 1, 1);
	/* a pipeline: several replies in one read */
	check("+OK\r\n:1\r\n*6\r\n:1\r\n:3\r\n:2\r\n:1000000\r\n:0\r\n:0\r\n-ERR x\r\n$-1\r\n", 5);
}

#if SPOA_HIREDIS_AT_LEAST(1, 0)
/* hiredis 1.x's RESP3 types, built as its own functions build them. */
static void test_resp3(void **state)
{
	(void)state;
	check(",3.25\r\n", 1);
	check(",inf\r\n", 1);
	check("#t\r\n", 1);
	check("#f\r\n", 1);
	check("_\r\n", 1);
	check("(3492890328409238509324850943850943825024385\r\n", 1);
	check("=15\r\ntxt:Some string\r\n", 1);
	check("%2\r\n+first\r\n:1\r\n+second\r\n,2.5\r\n", 1);
	check("~3\r\n:1\r\n#t\r\n$1\r\nx\r\n", 1);
	check(">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\nmsg\r\n", 1);
}
#endif

/* A reply far larger than a block: CLUSTER SLOTS of many ranges, each
 * with its nodes; it must come out whole, and the next (small) reply
 * too. */
static void test_large(void **state)
{
	size_t cap = 4u << 20, at = 0;
	char *buf = malloc(cap);
	unsigned i;

	(void)state;
	assert_non_null(buf);
	at += (size_t)snprintf(buf + at, cap - at, "*3000\r\n");
	for (i = 0; i < 3000; i++)
		at += (size_t)snprintf(buf + at, cap - at,
		                       "*4\r\n:%u\r\n:%u\r\n*3\r\n$9\r\n127.0.0.1\r\n:%u\r\n"
		                       "$40\r\n%040u\r\n*3\r\n$9\r\n127.0.0.2\r\n:%u\r\n$40\r\n%040u\r\n",
		                       i * 5, i * 5 + 4, 7000 + i % 6, i, 8000 + i % 6, i + 1);
	at += (size_t)snprintf(buf + at, cap - at, ":1\r\n");
	assert_true(at < cap);
	check_fed(buf, at, 0, 2);
	check_fed(buf, at, 4096, 2);
	free(buf);
}

/* A 2 MB string, as the root and as an element. */
static void test_long_string(void **state)
{
	size_t n = 2u << 20, at;
	char *buf = malloc(n + 64);

	(void)state;
	assert_non_null(buf);
	at = (size_t)sprintf(buf, "$%zu\r\n", n);
	memset(buf + at, 'x', n);
	buf[at + 100] = '\0';
	at += n;
	memcpy(buf + at, "\r\n", 2);
	check_fed(buf, at + 2, 0, 1);
	at = (size_t)sprintf(buf, "*2\r\n:1\r\n$%zu\r\n", n - 20);
	memset(buf + at, 'y', n - 20);
	at += n - 20;
	memcpy(buf + at, "\r\n", 2);
	check_fed(buf, at + 2, 0, 1);
	check_fed(buf, at + 2, 65536, 1);
	free(buf);
}

/* Two readers, each halfway through a reply, a third reply read and freed
 * in between: blocks are per reply, nothing is overwritten. */
static void test_interleaved(void **state)
{
	redisReader *a = redisReaderCreateWithFunctions(&redis_reply_functions);
	redisReader *b = redisReaderCreateWithFunctions(&redis_reply_functions);
	redisReply *ra = NULL, *rb = NULL, *rc = NULL;
	int i;

	(void)state;
	assert_int_equal(redisReaderFeed(a, "*3\r\n:1\r\n$3\r\nab", 14), REDIS_OK);
	assert_int_equal(redisReaderGetReply(a, (void **)&ra), REDIS_OK);
	assert_null(ra);
	assert_int_equal(redisReaderFeed(b, "*2\r\n+x\r\n", 8), REDIS_OK);
	assert_int_equal(redisReaderGetReply(b, (void **)&rb), REDIS_OK);
	assert_null(rb);
	for (i = 0; i < 10; i++) {
		/* whole replies on a: spares taken and given back meanwhile */
		redisReader *c = redisReaderCreateWithFunctions(&redis_reply_functions);

		assert_int_equal(redisReaderFeed(c, "*2\r\n:5\r\n:6\r\n", 12), REDIS_OK);
		assert_int_equal(redisReaderGetReply(c, (void **)&rc), REDIS_OK);
		assert_non_null(rc);
		assert_int_equal(rc->element[1]->integer, 6);
		redis_reply_functions.freeObject(rc);
		redisReaderFree(c);
	}
	assert_int_equal(redisReaderFeed(b, ":9\r\n", 4), REDIS_OK);
	assert_int_equal(redisReaderGetReply(b, (void **)&rb), REDIS_OK);
	assert_int_equal(redisReaderFeed(a, "c\r\n-E\r\n", 7), REDIS_OK);
	assert_int_equal(redisReaderGetReply(a, (void **)&ra), REDIS_OK);
	assert_non_null(ra);
	assert_non_null(rb);
	assert_int_equal(ra->elements, 3);
	assert_int_equal(ra->element[0]->integer, 1);
	assert_string_equal(ra->element[1]->str, "abc");
	assert_int_equal(ra->element[2]->type, REDIS_REPLY_ERROR);
	assert_string_equal(rb->element[0]->str, "x");
	assert_int_equal(rb->element[1]->integer, 9);
	/* freed in the other order than made */
	redis_reply_functions.freeObject(ra);
	redis_reply_functions.freeObject(rb);
	redisReaderFree(a);
	redisReaderFree(b);
}

/* A protocol error halfway through a reply, and a reader freed halfway:
 * the half-built tree goes with its block (ASan and valgrind see a leak
 * otherwise). */
static void test_halfway(void **state)
{
	redisReader *r = redisReaderCreateWithFunctions(&redis_reply_functions);
	void *reply = NULL;

	(void)state;
	assert_int_equal(redisReaderFeed(r, "*3\r\n:1\r\n*2\r\n:2\r\n!bad\r\n", 22), REDIS_OK);
	assert_int_equal(redisReaderGetReply(r, &reply), REDIS_ERR);
	assert_int_equal(r->err, REDIS_ERR_PROTOCOL);
	assert_null(reply);
	redisReaderFree(r);

	r = redisReaderCreateWithFunctions(&redis_reply_functions);
	assert_int_equal(redisReaderFeed(r, "*3\r\n:1\r\n$100000\r\nabc", 20), REDIS_OK);
	assert_int_equal(redisReaderGetReply(r, &reply), REDIS_OK);
	assert_null(reply);
	redisReaderFree(r);

	/* a big one, halfway, past the first block */
	r = redisReaderCreateWithFunctions(&redis_reply_functions);
	assert_int_equal(redisReaderFeed(r, "*100000\r\n", 9), REDIS_OK);
	{
		unsigned i;

		for (i = 0; i < 50000; i++)
			assert_int_equal(redisReaderFeed(r, ":12345\r\n", 8), REDIS_OK);
	}
	assert_int_equal(redisReaderGetReply(r, &reply), REDIS_OK);
	assert_null(reply);
	redisReaderFree(r);
}

/* A reply whose objects would pass REDIS_REPLY_MAX is refused as out of
 * memory before anything that large is asked for, at the root and as an
 * element; the reader then says so, as hiredis says a failed calloc. */
static void test_too_large(void **state)
{
	static const char *const huge[] = {
		"*200000000\r\n",
		"*2\r\n:1\r\n*200000000\r\n",
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
		redisReader *r = redisReaderCreateWithFunctions(&redis_reply_functions);
		void *reply = NULL;

		assert_int_equal(redisReaderFeed(r, huge[i], strlen(huge[i])), REDIS_OK);
		assert_int_equal(redisReaderGetReply(r, &reply), REDIS_ERR);
		assert_int_equal(r->err, REDIS_ERR_OOM);
		assert_null(reply);
		redisReaderFree(r);
	}
	/* and the next reply on a fresh reader is fine */
	check(":1\r\n", 1);
}

/* What a warm connection reuses: the same block, reply after reply (the
 * root of each at the same place), grown once to the largest reply. */
static void test_spare_reused(void **state)
{
	redisReader *r = redisReaderCreateWithFunctions(&redis_reply_functions);
	void *first = NULL, *reply = NULL;
	int i;

	(void)state;
	redis_reply_release();
	for (i = 0; i < 5; i++) {
		assert_int_equal(redisReaderFeed(r, "*2\r\n:1\r\n:2\r\n", 12), REDIS_OK);
		assert_int_equal(redisReaderGetReply(r, &reply), REDIS_OK);
		assert_non_null(reply);
		if (i == 0)
			first = reply;
		else
			assert_ptr_equal(reply, first);
		redis_reply_functions.freeObject(reply);
	}
	redisReaderFree(r);
}

/* The functions on a context: redis_open() puts them on its reader. */
static void test_use(void **state)
{
	redisReader *r = redisReaderCreate();

	(void)state;
	redis_reply_use(r);
	assert_ptr_equal(r->fn, &redis_reply_functions);
	redis_reply_use(NULL);
	redisReaderFree(r);
}

/* The spares go back at the end (valgrind: nothing left). */
static int teardown(void **state)
{
	(void)state;
	redis_reply_release();
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_decision, teardown),
		cmocka_unit_test_teardown(test_batch, teardown),
		cmocka_unit_test_teardown(test_shapes, teardown),
#if SPOA_HIREDIS_AT_LEAST(1, 0)
		cmocka_unit_test_teardown(test_resp3, teardown),
#endif
		cmocka_unit_test_teardown(test_large, teardown),
		cmocka_unit_test_teardown(test_long_string, teardown),
		cmocka_unit_test_teardown(test_interleaved, teardown),
		cmocka_unit_test_teardown(test_halfway, teardown),
		cmocka_unit_test_teardown(test_too_large, teardown),
		cmocka_unit_test_teardown(test_spare_reused, teardown),
		cmocka_unit_test_teardown(test_use, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
