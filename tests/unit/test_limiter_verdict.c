/*
 * test_limiter_verdict - what a decision's Redis reply says
 * (limiter_verdict.c, pure): every verdict of one call's reply, for each
 * engine (NOSCRIPT is the script's "missing", an unknown or refused
 * RATELIMIT.DECIDE the module's), and of each call of a batch (its
 * element, the batch's error, a reply that is not a batch's), and the
 * view window.c reads. Replies are built by hand as hiredis builds them:
 * no socket, no hiredis call.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "limiter_verdict.h"

#define NELEM 8

/* A reply tree on the test's stack: one root and up to NELEM children. */
struct tree {
	redisReply root;
	redisReply kid[NELEM];
	redisReply *kids[NELEM];
};

/* An error reply <text> in <r>. */
static const redisReply *error_of(redisReply *r, const char *text)
{
	memset(r, 0, sizeof(*r));
	r->type = REDIS_REPLY_ERROR;
	r->str = (char *)text;
	r->len = strlen(text);
	return r;
}

/* An array of the <n> integers <v> (a script's result) in <t>. */
static const redisReply *ints_of(struct tree *t, const long long *v, size_t n)
{
	size_t i;

	memset(t, 0, sizeof(*t));
	t->root.type = REDIS_REPLY_ARRAY;
	t->root.elements = n;
	t->root.element = t->kids;
	for (i = 0; i < n; i++) {
		t->kid[i].type = REDIS_REPLY_INTEGER;
		t->kid[i].integer = v[i];
		t->kids[i] = &t->kid[i];
	}
	return &t->root;
}

static const long long result[6] = { 1, 4, 1000, 0, 5, 1 };

/* The verdict of <r> under each engine. */
static void assert_verdicts(const redisReply *r, enum limiter_verdict script,
                            enum limiter_verdict module)
{
	assert_int_equal(limiter_verdict_of(r, LIMITER_ENGINE_SCRIPT), script);
	assert_int_equal(limiter_verdict_of(r, LIMITER_ENGINE_MODULE), module);
}

static void test_one_call(void **state)
{
	struct tree t;
	redisReply e;

	(void)state;
	assert_verdicts(NULL, LIMITER_VERDICT_LOST, LIMITER_VERDICT_LOST);
	assert_verdicts(ints_of(&t, result, 6), LIMITER_VERDICT_RESULT, LIMITER_VERDICT_RESULT);
	assert_verdicts(error_of(&e, "MOVED 3999 127.0.0.1:6381"),
	                LIMITER_VERDICT_REDIRECT, LIMITER_VERDICT_REDIRECT);
	assert_verdicts(error_of(&e, "ASK 3999 127.0.0.1:6381"),
	                LIMITER_VERDICT_REDIRECT, LIMITER_VERDICT_REDIRECT);
	assert_verdicts(error_of(&e, "TRYAGAIN Multiple keys request during rehashing of slot"),
	                LIMITER_VERDICT_TRYAGAIN, LIMITER_VERDICT_TRYAGAIN);
	assert_verdicts(error_of(&e, "CLUSTERDOWN The cluster is down"),
	                LIMITER_VERDICT_CLUSTERDOWN, LIMITER_VERDICT_CLUSTERDOWN);
	assert_verdicts(error_of(&e, "READONLY You can't write against a read only replica."),
	                LIMITER_VERDICT_READONLY, LIMITER_VERDICT_READONLY);
}

/* "Missing" is the engine's own: NOSCRIPT says nothing of the module, an
 * unknown RATELIMIT.DECIDE nothing of the script. */
static void test_missing_by_engine(void **state)
{
	redisReply e;

	(void)state;
	assert_verdicts(error_of(&e, "NOSCRIPT No matching script. Please use EVAL."),
	                LIMITER_VERDICT_MISSING, LIMITER_VERDICT_RESULT);
	assert_verdicts(error_of(&e, "ERR unknown command 'RATELIMIT.DECIDE', with args beginning "
	                         "with: '2' 'a' 'b' "), LIMITER_VERDICT_RESULT, LIMITER_VERDICT_MISSING);
	/* case aside (Redis 6 writes the name as sent) */
	assert_verdicts(error_of(&e, "ERR unknown command `ratelimit.decide`, with args beginning "
	                         "with: "), LIMITER_VERDICT_RESULT, LIMITER_VERDICT_MISSING);
	/* an ACL without +ratelimit.decide */
	assert_verdicts(error_of(&e, "NOPERM this user has no permissions to run the "
	                         "'ratelimit.decide' command"),
	                LIMITER_VERDICT_RESULT, LIMITER_VERDICT_MISSING);
	/* another command unknown, another refusal: the module's own errors */
	assert_verdicts(error_of(&e, "ERR unknown command 'EVALSHA'"),
	                LIMITER_VERDICT_RESULT, LIMITER_VERDICT_RESULT);
	assert_verdicts(error_of(&e, "NOPERM this user has no permissions to access one of the keys"),
	                LIMITER_VERDICT_RESULT, LIMITER_VERDICT_RESULT);
}

/* Errors that are the engine's answer: window.c decides them (an error
 * decision, each reason named there). */
static void test_results(void **state)
{
	static const char *const errors[] = {
		"OOM command not allowed when used memory > 'maxmemory'.",
		"ERR Error running script (call to f_x): @user_script:1: OOM command not allowed",
		"EVICTS maxmemory-policy allkeys-lru evicts keys",
		"ERR wrong number of arguments",
		"ERR Error running script: MOVED 1 127.0.0.1:1",   /* not a redirect: a script's text */
		"",
	};
	redisReply e, other;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		assert_verdicts(error_of(&e, errors[i]), LIMITER_VERDICT_RESULT, LIMITER_VERDICT_RESULT);
	/* an error without text, a status, a string, an integer, nil */
	error_of(&e, "");
	e.str = NULL;
	assert_verdicts(&e, LIMITER_VERDICT_RESULT, LIMITER_VERDICT_RESULT);
	memset(&other, 0, sizeof(other));
	other.type = REDIS_REPLY_STATUS;
	other.str = (char *)"NOSCRIPT";   /* a status, not an error */
	other.len = 8;
	assert_verdicts(&other, LIMITER_VERDICT_RESULT, LIMITER_VERDICT_RESULT);
	other.type = REDIS_REPLY_STRING;
	assert_verdicts(&other, LIMITER_VERDICT_RESULT, LIMITER_VERDICT_RESULT);
	memset(&other, 0, sizeof(other));
	other.type = REDIS_REPLY_INTEGER;
	assert_verdicts(&other, LIMITER_VERDICT_RESULT, LIMITER_VERDICT_RESULT);
	other.type = REDIS_REPLY_NIL;
	assert_verdicts(&other, LIMITER_VERDICT_RESULT, LIMITER_VERDICT_RESULT);
}

/* Each call of a batch of 3: its element of an array of 3 (a result
 * each); the batch's error, every verdict of it, for each call; no reply
 * at all; a reply that is not a batch's (another length, a hole, a
 * status): nothing each, an error decision. */
static void test_batch_elements(void **state)
{
	static const char *const errors[] = {
		"MOVED 3999 127.0.0.1:6381", "ASK 3999 127.0.0.1:6381", "TRYAGAIN x",
		"CLUSTERDOWN The cluster is down", "READONLY replica", "NOSCRIPT No matching script.",
	};
	static const enum limiter_verdict want[] = {
		LIMITER_VERDICT_REDIRECT, LIMITER_VERDICT_REDIRECT, LIMITER_VERDICT_TRYAGAIN,
		LIMITER_VERDICT_CLUSTERDOWN, LIMITER_VERDICT_READONLY, LIMITER_VERDICT_MISSING,
	};
	struct tree calls[3], batch, single;
	struct window_reply v;
	const redisReply *el;
	redisReply e;
	unsigned i, j;

	(void)state;
	memset(&batch, 0, sizeof(batch));
	batch.root.type = REDIS_REPLY_ARRAY;
	batch.root.elements = 3;
	batch.root.element = batch.kids;
	for (i = 0; i < 3; i++) {
		long long r[6] = { i != 1, 9 - i, 1000, 0, 10, 1 };

		batch.kids[i] = (redisReply *)ints_of(&calls[i], r, 6);
	}
	assert_int_equal(limiter_verdict_of(&batch.root, LIMITER_ENGINE_SCRIPT), LIMITER_VERDICT_RESULT);
	for (i = 0; i < 3; i++) {
		el = limiter_verdict_element(&batch.root, 3, i);
		assert_ptr_equal(el, &calls[i].root);
		assert_verdicts(el, LIMITER_VERDICT_RESULT, LIMITER_VERDICT_RESULT);
		limiter_verdict_view(el, &v);
		assert_int_equal(v.kind, WINDOW_REPLY_INTEGERS);
		assert_int_equal(v.n, 6);
		assert_int_equal(v.v[0], i != 1);
		assert_int_equal(v.v[1], 9 - i);
	}
	/* the batch's error is every call's, each verdict */
	for (j = 0; j < sizeof(errors) / sizeof(errors[0]); j++) {
		error_of(&e, errors[j]);
		for (i = 0; i < 3; i++) {
			el = limiter_verdict_element(&e, 3, i);
			assert_ptr_equal(el, &e);
			assert_int_equal(limiter_verdict_of(el, LIMITER_ENGINE_SCRIPT), want[j]);
		}
	}
	/* the connection lost: each call's is none */
	for (i = 0; i < 3; i++) {
		assert_null(limiter_verdict_element(NULL, 3, i));
		assert_verdicts(limiter_verdict_element(NULL, 3, i), LIMITER_VERDICT_LOST,
		                LIMITER_VERDICT_LOST);
	}
	/* not a batch's reply: a single decision's six integers, an array of
	 * 2 for 3 calls, a hole, a call past the end, a status */
	ints_of(&single, result, 6);
	batch.root.elements = 2;
	for (i = 0; i < 3; i++) {
		const redisReply *not_batch[2] = { &single.root, &batch.root };

		for (j = 0; j < 2; j++) {
			el = limiter_verdict_element(not_batch[j], 3, i);
			assert_non_null(el);
			assert_int_equal(el->type, REDIS_REPLY_NIL);
			assert_verdicts(el, LIMITER_VERDICT_RESULT, LIMITER_VERDICT_RESULT);
			limiter_verdict_view(el, &v);
			assert_int_equal(v.kind, WINDOW_REPLY_OTHER);
		}
	}
	batch.root.elements = 3;
	batch.kids[1] = NULL;
	assert_int_equal(limiter_verdict_element(&batch.root, 3, 1)->type, REDIS_REPLY_NIL);
	assert_ptr_equal(limiter_verdict_element(&batch.root, 3, 2), &calls[2].root);
	assert_int_equal(limiter_verdict_element(&batch.root, 3, 3)->type, REDIS_REPLY_NIL);
	memset(&e, 0, sizeof(e));
	e.type = REDIS_REPLY_STATUS;
	assert_int_equal(limiter_verdict_element(&e, 3, 0)->type, REDIS_REPLY_NIL);
}

/* The view window.c reads: an error's text, an array of integers (the
 * first WINDOW_REPLY_INTS kept, all counted), anything else nothing. */
static void test_view(void **state)
{
	static const long long eight[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct window_reply v;
	struct tree t;
	redisReply e;

	(void)state;
	limiter_verdict_view(NULL, &v);
	assert_int_equal(v.kind, WINDOW_REPLY_OTHER);
	limiter_verdict_view(error_of(&e, "NOSCRIPT x"), &v);
	assert_int_equal(v.kind, WINDOW_REPLY_ERROR);
	assert_ptr_equal(v.str, e.str);
	assert_int_equal(v.len, 10);
	limiter_verdict_view(ints_of(&t, eight, 8), &v);
	assert_int_equal(v.kind, WINDOW_REPLY_INTEGERS);
	assert_int_equal(v.n, 8);
	assert_int_equal(v.v[WINDOW_REPLY_INTS - 1], WINDOW_REPLY_INTS);
	/* a mixed array: nothing */
	ints_of(&t, eight, 3);
	t.kid[2].type = REDIS_REPLY_STRING;
	limiter_verdict_view(&t.root, &v);
	assert_int_equal(v.kind, WINDOW_REPLY_OTHER);
	/* an empty array: no integers, read as such (window.c refuses it) */
	ints_of(&t, eight, 0);
	limiter_verdict_view(&t.root, &v);
	assert_int_equal(v.kind, WINDOW_REPLY_INTEGERS);
	assert_int_equal(v.n, 0);
}

/* Every verdict is named above once: the enum has nothing else. */
static void test_count(void **state)
{
	(void)state;
	assert_int_equal(LIMITER_VERDICT_COUNT, 7);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_call),
		cmocka_unit_test(test_missing_by_engine),
		cmocka_unit_test(test_results),
		cmocka_unit_test(test_batch_elements),
		cmocka_unit_test(test_view),
		cmocka_unit_test(test_count),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
