/*
 * test_resp_cmd - the RESP text of a Redis command as the limiter sends it
 * (resp_cmd.c): every byte against a reference written here with snprintf,
 * every length boundary of an argument and of the argument count, empty
 * and binary arguments, and every buffer too small.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "resp_cmd.h"

#define CANARY 0xA5

/* The reference: RESP of <argc> arguments <argv>/<argvlen> into a new
 * buffer the caller frees, its length in <*len>. */
static char *reference(size_t argc, const char *const *argv, const size_t *argvlen, size_t *len)
{
	size_t cap = 32, i, at;
	char *out;

	for (i = 0; i < argc; i++)
		cap += argvlen[i] + 32;
	out = malloc(cap);
	assert_non_null(out);
	at = (size_t)snprintf(out, cap, "*%zu\r\n", argc);
	for (i = 0; i < argc; i++) {
		at += (size_t)snprintf(out + at, cap - at, "$%zu\r\n", argvlen[i]);
		if (argvlen[i])
			memcpy(out + at, argv[i], argvlen[i]);
		at += argvlen[i];
		out[at++] = '\r';
		out[at++] = '\n';
	}
	*len = at;
	return out;
}

/* Write <argc>/<argv>/<argvlen> into a buffer exactly its size, and into
 * every smaller one: the first is the reference byte for byte, each
 * smaller one is refused without a byte written at or past its end. */
static void check_command(size_t argc, const char *const *argv, const size_t *argvlen)
{
	size_t len, cap;
	char *want = reference(argc, argv, argvlen, &len);
	unsigned char *buf = malloc(len + 16);
	long n;

	assert_non_null(buf);
	assert_int_equal(resp_cmd_size(argc, argvlen), len);
	memset(buf, CANARY, len + 16);
	n = resp_cmd_write((char *)buf, len, argc, argv, argvlen);
	assert_int_equal(n, (long)len);
	assert_memory_equal(buf, want, len);
	assert_int_equal(buf[len], CANARY);   /* no NUL, nothing past the end */
	/* a larger buffer: the same bytes */
	memset(buf, CANARY, len + 16);
	assert_int_equal(resp_cmd_write((char *)buf, len + 16, argc, argv, argvlen), (long)len);
	assert_memory_equal(buf, want, len);
	for (cap = len; cap < len + 16; cap++)
		assert_int_equal(buf[cap], CANARY);
	for (cap = 0; cap < len; cap++) {
		size_t i;

		memset(buf, CANARY, len + 16);
		assert_int_equal(resp_cmd_write((char *)buf, cap, argc, argv, argvlen), -1);
		for (i = cap; i < len + 16; i++)
			assert_int_equal(buf[i], CANARY);
	}
	free(buf);
	free(want);
}

static void test_one_word(void **state)
{
	const char *argv[] = { "PING" };
	const size_t argvlen[] = { 4 };
	char buf[64];

	(void)state;
	assert_int_equal(resp_cmd_write(buf, sizeof(buf), 1, argv, argvlen), 14);
	assert_memory_equal(buf, "*1\r\n$4\r\nPING\r\n", 14);
	check_command(1, argv, argvlen);
}

/* What the module engine sends for one decision, written out by hand. */
static void test_decision(void **state)
{
	const char *argv[] = { "RATELIMIT.DECIDE", "1", "transfer:limit:v1:ACC-1001", "1", "3",
	                       "1000" };
	const size_t argvlen[] = { 16, 1, 26, 1, 1, 4 };
	static const char want[] = "*6\r\n$16\r\nRATELIMIT.DECIDE\r\n$1\r\n1\r\n"
	                           "$26\r\ntransfer:limit:v1:ACC-1001\r\n$1\r\n1\r\n$1\r\n3\r\n"
	                           "$4\r\n1000\r\n";
	char buf[256];

	(void)state;
	assert_int_equal(resp_cmd_write(buf, sizeof(buf), 6, argv, argvlen), (long)sizeof(want) - 1);
	assert_memory_equal(buf, want, sizeof(want) - 1);
	check_command(6, argv, argvlen);
}

/* An empty argument is "$0\r\n\r\n", with or without a pointer. */
static void test_empty_arguments(void **state)
{
	const char *argv[] = { "EVALSHA", "", NULL, "x" };
	const size_t argvlen[] = { 7, 0, 0, 1 };
	static const char want[] = "*4\r\n$7\r\nEVALSHA\r\n$0\r\n\r\n$0\r\n\r\n$1\r\nx\r\n";
	char buf[128];

	(void)state;
	assert_int_equal(resp_cmd_write(buf, sizeof(buf), 4, argv, argvlen), (long)sizeof(want) - 1);
	assert_memory_equal(buf, want, sizeof(want) - 1);
	check_command(4, argv, argvlen);
	/* no argument at all: the count alone */
	assert_int_equal(resp_cmd_write(buf, sizeof(buf), 0, NULL, NULL), 4);
	assert_memory_equal(buf, "*0\r\n", 4);
	assert_int_equal(resp_cmd_size(0, NULL), 4);
	assert_int_equal(resp_cmd_write(buf, 3, 0, NULL, NULL), -1);
}

/* Any byte travels as it is: NUL, CR, LF, '$', '*', 0xff. */
static void test_binary_bytes(void **state)
{
	static const char bin[] = { 'a', '\0', '\r', '\n', '$', '*', (char)0xff, '\r', '\n', '\0' };
	char all[256];
	const char *argv[] = { "SET", bin, all };
	size_t argvlen[] = { 3, sizeof(bin), sizeof(all) };
	unsigned i;

	(void)state;
	for (i = 0; i < sizeof(all); i++)
		all[i] = (char)i;
	check_command(3, argv, argvlen);
}

/* An argument's length at each change of its digit count, and around it. */
static void test_length_boundaries(void **state)
{
	static const size_t lens[] = { 0, 1, 8, 9, 10, 11, 98, 99, 100, 101, 999, 1000, 1001,
	                               9999, 10000, 10001, 99999, 100000 };
	char *big = malloc(100001);
	size_t i;

	(void)state;
	assert_non_null(big);
	for (i = 0; i < 100001; i++)
		big[i] = (char)('a' + i % 26);
	for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		const char *argv[] = { "K", big, "V" };
		const size_t argvlen[] = { 1, lens[i], 1 };
		size_t len;
		char *want = reference(3, argv, argvlen, &len);
		char *buf = malloc(len);
		long n;

		assert_non_null(buf);
		assert_int_equal(resp_cmd_size(3, argvlen), len);
		n = resp_cmd_write(buf, len, 3, argv, argvlen);
		assert_int_equal(n, (long)len);
		assert_memory_equal(buf, want, len);
		/* one byte short, at the end of the long argument or its CRLF */
		assert_int_equal(resp_cmd_write(buf, len - 1, 3, argv, argvlen), -1);
		assert_int_equal(resp_cmd_write(buf, len - 6, 3, argv, argvlen), -1);
		free(buf);
		free(want);
		if (lens[i] <= 1001)   /* every smaller buffer too (quadratic: the short ones) */
			check_command(3, argv, argvlen);
	}
	free(big);
}

/* The argument count at each change of its digit count (a batch's
 * command has hundreds of words). */
static void test_count_boundaries(void **state)
{
	static const size_t counts[] = { 9, 10, 11, 99, 100, 101, 999, 1000 };
	const char *argv[1000];
	size_t argvlen[1000], i, j;

	(void)state;
	for (i = 0; i < 1000; i++) {
		argv[i] = "abcdefghijk" + i % 11;
		argvlen[i] = 11 - i % 11;
	}
	for (j = 0; j < sizeof(counts) / sizeof(counts[0]); j++) {
		size_t len;
		char *want = reference(counts[j], argv, argvlen, &len);
		char *buf = malloc(len);

		assert_non_null(buf);
		assert_int_equal(resp_cmd_write(buf, len, counts[j], argv, argvlen), (long)len);
		assert_memory_equal(buf, want, len);
		assert_int_equal(resp_cmd_write(buf, len - 1, counts[j], argv, argvlen), -1);
		free(buf);
		free(want);
		if (counts[j] <= 101)
			check_command(counts[j], argv, argvlen);
	}
}

/* A command over RESP_CMD_MAX is refused by both, without reading the
 * argument (none is there to read). */
static void test_too_large(void **state)
{
	const char *argv[] = { "SET", NULL };
	size_t argvlen[] = { 3, RESP_CMD_MAX };
	char buf[64];

	(void)state;
	assert_int_equal(resp_cmd_size(2, argvlen), 0);
	assert_int_equal(resp_cmd_write(buf, sizeof(buf), 2, argv, argvlen), -1);
	argvlen[1] = SIZE_MAX;
	assert_int_equal(resp_cmd_size(2, argvlen), 0);
	assert_int_equal(resp_cmd_write(buf, sizeof(buf), 2, argv, argvlen), -1);
	/* many arguments that together pass the bound */
	{
		size_t lens[8];
		const char *none[8] = { 0 };
		size_t i;

		for (i = 0; i < 8; i++)
			lens[i] = RESP_CMD_MAX / 4;
		assert_int_equal(resp_cmd_size(8, lens), 0);
		assert_int_equal(resp_cmd_write(buf, sizeof(buf), 8, none, lens), -1);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_word),
		cmocka_unit_test(test_decision),
		cmocka_unit_test(test_empty_arguments),
		cmocka_unit_test(test_binary_bytes),
		cmocka_unit_test(test_length_boundaries),
		cmocka_unit_test(test_count_boundaries),
		cmocka_unit_test(test_too_large),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
