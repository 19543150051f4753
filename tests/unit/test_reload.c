/*
 * test_reload - the reload's state machine on its own (pure): every
 * (state, event) pair, legal ones moving to their state and illegal ones
 * refused with the state unchanged and a reason; values out of range; the
 * finishing commands; the names logs use; and the walks main and a worker
 * make.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "reload.h"

/* The legal moves, written out as reload.h draws them. */
static const struct {
	enum reload_state from;
	enum reload_event ev;
	enum reload_state to;
} legal[] = {
	{ RELOAD_IDLE, RELOAD_EV_PREPARE, RELOAD_PREPARING },
	{ RELOAD_PREPARING, RELOAD_EV_READY, RELOAD_READY },
	{ RELOAD_PREPARING, RELOAD_EV_FAIL, RELOAD_FAILED },
	{ RELOAD_PREPARING, RELOAD_EV_ABORT, RELOAD_IDLE },
	{ RELOAD_READY, RELOAD_EV_COMMIT, RELOAD_IDLE },
	{ RELOAD_READY, RELOAD_EV_ABORT, RELOAD_IDLE },
	{ RELOAD_FAILED, RELOAD_EV_ABORT, RELOAD_IDLE },
};

static int legal_to(enum reload_state from, enum reload_event ev)
{
	size_t i;

	for (i = 0; i < sizeof(legal) / sizeof(legal[0]); i++)
		if (legal[i].from == from && legal[i].ev == ev)
			return (int)legal[i].to;
	return -1;
}

static void test_every_pair(void **state)
{
	unsigned s, e, nlegal = 0, nrefused = 0;

	(void)state;
	for (s = 0; s < RELOAD_STATE_COUNT; s++) {
		for (e = 0; e < RELOAD_EV_COUNT; e++) {
			enum reload_state st = (enum reload_state)s;
			char err[128] = "";
			int want = legal_to(st, (enum reload_event)e);
			int rc = reload_step(&st, (enum reload_event)e, err, sizeof(err));

			if (want >= 0) {
				assert_int_equal(rc, 0);
				assert_int_equal(st, want);
				nlegal++;
			} else {
				assert_int_equal(rc, -1);
				assert_int_equal(st, s);
				assert_non_null(strstr(err, reload_event_str((enum reload_event)e)));
				assert_non_null(strstr(err, reload_state_str((enum reload_state)s)));
				nrefused++;
			}
		}
	}
	assert_int_equal(nlegal, sizeof(legal) / sizeof(legal[0]));
	assert_int_equal(nlegal + nrefused, RELOAD_STATE_COUNT * RELOAD_EV_COUNT);
}

static void test_out_of_range(void **state)
{
	enum reload_state st = RELOAD_IDLE;
	char err[128];

	(void)state;
	assert_int_equal(reload_step(&st, RELOAD_EV_COUNT, err, sizeof(err)), -1);
	assert_int_equal(st, RELOAD_IDLE);
	assert_int_equal(reload_step(&st, (enum reload_event)-1, err, sizeof(err)), -1);
	assert_int_equal(st, RELOAD_IDLE);
	st = RELOAD_STATE_COUNT;
	assert_int_equal(reload_step(&st, RELOAD_EV_ABORT, err, sizeof(err)), -1);
	assert_int_equal(st, RELOAD_STATE_COUNT);
	/* a short buffer gets a cut reason, not an overflow */
	st = RELOAD_IDLE;
	assert_int_equal(reload_step(&st, RELOAD_EV_COMMIT, err, 4), -1);
	assert_int_equal(strlen(err), 3);
}

static void test_commands(void **state)
{
	enum reload_state st = RELOAD_READY;
	char err[128];

	(void)state;
	assert_int_equal(reload_cmd_event(RELOAD_CMD_COMMIT), RELOAD_EV_COMMIT);
	assert_int_equal(reload_cmd_event(RELOAD_CMD_ABORT), RELOAD_EV_ABORT);
	/* "none posted" is no event: every state refuses it */
	assert_int_equal(reload_cmd_event(RELOAD_CMD_NONE), RELOAD_EV_COUNT);
	assert_int_equal(reload_cmd_event(RELOAD_CMD_COUNT), RELOAD_EV_COUNT);
	assert_int_equal(reload_step(&st, reload_cmd_event(RELOAD_CMD_NONE), err, sizeof(err)), -1);
	assert_int_equal(st, RELOAD_READY);
}

static void test_names(void **state)
{
	(void)state;
	assert_string_equal(reload_state_str(RELOAD_IDLE), "idle");
	assert_string_equal(reload_state_str(RELOAD_PREPARING), "preparing");
	assert_string_equal(reload_state_str(RELOAD_READY), "ready");
	assert_string_equal(reload_state_str(RELOAD_FAILED), "failed");
	assert_string_equal(reload_state_str(RELOAD_STATE_COUNT), "?");
	assert_string_equal(reload_event_str(RELOAD_EV_PREPARE), "prepare");
	assert_string_equal(reload_event_str(RELOAD_EV_READY), "ready");
	assert_string_equal(reload_event_str(RELOAD_EV_FAIL), "fail");
	assert_string_equal(reload_event_str(RELOAD_EV_COMMIT), "commit");
	assert_string_equal(reload_event_str(RELOAD_EV_ABORT), "abort");
	assert_string_equal(reload_event_str(RELOAD_EV_COUNT), "?");
}

/* The walks the agent makes: a reload committed, one refused by a worker
 * and aborted, one replaced before its verdict (abort, then prepare). */
static void test_walks(void **state)
{
	enum reload_state st = RELOAD_IDLE;
	char err[128];

	(void)state;
	assert_int_equal(reload_step(&st, RELOAD_EV_PREPARE, err, sizeof(err)), 0);
	assert_int_equal(reload_step(&st, RELOAD_EV_READY, err, sizeof(err)), 0);
	assert_int_equal(reload_step(&st, RELOAD_EV_COMMIT, err, sizeof(err)), 0);
	assert_int_equal(st, RELOAD_IDLE);
	assert_int_equal(reload_step(&st, RELOAD_EV_PREPARE, err, sizeof(err)), 0);
	assert_int_equal(reload_step(&st, RELOAD_EV_FAIL, err, sizeof(err)), 0);
	assert_int_equal(reload_step(&st, RELOAD_EV_COMMIT, err, sizeof(err)), -1);
	assert_int_equal(reload_step(&st, RELOAD_EV_ABORT, err, sizeof(err)), 0);
	assert_int_equal(st, RELOAD_IDLE);
	assert_int_equal(reload_step(&st, RELOAD_EV_PREPARE, err, sizeof(err)), 0);
	assert_int_equal(reload_step(&st, RELOAD_EV_PREPARE, err, sizeof(err)), -1);
	assert_int_equal(reload_step(&st, RELOAD_EV_ABORT, err, sizeof(err)), 0);
	assert_int_equal(reload_step(&st, RELOAD_EV_PREPARE, err, sizeof(err)), 0);
	assert_int_equal(st, RELOAD_PREPARING);
}

/* A commit of N and the prepare of N+1 in one wake: N is committed
 * first; an abort of the reload being prepared comes after its prepare. */
static void test_finish_first(void **state)
{
	(void)state;
	assert_true(reload_finish_first(8, 7));            /* commit N, prepare N+1 */
	assert_false(reload_finish_first(8, 8));           /* prepare N+1, abort N+1 */
	assert_true(reload_finish_first(0, 0xffffffffu));  /* across the wrap */
	assert_false(reload_finish_first(0xffffffffu, 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_pair),
		cmocka_unit_test(test_out_of_range),
		cmocka_unit_test(test_commands),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_walks),
		cmocka_unit_test(test_finish_first),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
