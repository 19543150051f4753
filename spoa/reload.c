/*
 * reload - the reload's state machine (reload.h).
 */
#include <stdio.h>

#include "reload.h"

#define RELOAD_NONE (-1)

/* next[state][event]: the state <event> leads to, RELOAD_NONE if illegal */
static const signed char reload_next[RELOAD_STATE_COUNT][RELOAD_EV_COUNT] = {
	[RELOAD_IDLE] = {
		[RELOAD_EV_PREPARE] = RELOAD_PREPARING, [RELOAD_EV_READY] = RELOAD_NONE,
		[RELOAD_EV_FAIL] = RELOAD_NONE, [RELOAD_EV_COMMIT] = RELOAD_NONE,
		[RELOAD_EV_ABORT] = RELOAD_NONE,
	},
	[RELOAD_PREPARING] = {
		[RELOAD_EV_PREPARE] = RELOAD_NONE, [RELOAD_EV_READY] = RELOAD_READY,
		[RELOAD_EV_FAIL] = RELOAD_FAILED, [RELOAD_EV_COMMIT] = RELOAD_NONE,
		[RELOAD_EV_ABORT] = RELOAD_IDLE,
	},
	[RELOAD_READY] = {
		[RELOAD_EV_PREPARE] = RELOAD_NONE, [RELOAD_EV_READY] = RELOAD_NONE,
		[RELOAD_EV_FAIL] = RELOAD_NONE, [RELOAD_EV_COMMIT] = RELOAD_IDLE,
		[RELOAD_EV_ABORT] = RELOAD_IDLE,
	},
	[RELOAD_FAILED] = {
		[RELOAD_EV_PREPARE] = RELOAD_NONE, [RELOAD_EV_READY] = RELOAD_NONE,
		[RELOAD_EV_FAIL] = RELOAD_NONE, [RELOAD_EV_COMMIT] = RELOAD_NONE,
		[RELOAD_EV_ABORT] = RELOAD_IDLE,
	},
};

static const char *const reload_state_names[RELOAD_STATE_COUNT] = {
	[RELOAD_IDLE] = "idle",
	[RELOAD_PREPARING] = "preparing",
	[RELOAD_READY] = "ready",
	[RELOAD_FAILED] = "failed",
};

static const char *const reload_event_names[RELOAD_EV_COUNT] = {
	[RELOAD_EV_PREPARE] = "prepare",
	[RELOAD_EV_READY] = "ready",
	[RELOAD_EV_FAIL] = "fail",
	[RELOAD_EV_COMMIT] = "commit",
	[RELOAD_EV_ABORT] = "abort",
};

const char *reload_state_str(enum reload_state st)
{
	return (unsigned)st < RELOAD_STATE_COUNT ? reload_state_names[st] : "?";
}

const char *reload_event_str(enum reload_event ev)
{
	return (unsigned)ev < RELOAD_EV_COUNT ? reload_event_names[ev] : "?";
}

int reload_step(enum reload_state *st, enum reload_event ev, char *err, size_t errlen)
{
	int to = RELOAD_NONE;

	if ((unsigned)*st < RELOAD_STATE_COUNT && (unsigned)ev < RELOAD_EV_COUNT)
		to = reload_next[*st][ev];
	if (to == RELOAD_NONE) {
		snprintf(err, errlen, "event %s refused in state %s", reload_event_str(ev),
		         reload_state_str(*st));
		return -1;
	}
	*st = (enum reload_state)to;
	return 0;
}

enum reload_event reload_cmd_event(enum reload_cmd cmd)
{
	switch (cmd) {
	case RELOAD_CMD_COMMIT:
		return RELOAD_EV_COMMIT;
	case RELOAD_CMD_ABORT:
		return RELOAD_EV_ABORT;
	default:
		return RELOAD_EV_COUNT;
	}
}

/* See reload.h. Sequence numbers grow by one per reload (unsigned: they
 * may wrap), so the finish is older when it is behind the prepare. */
bool reload_finish_first(unsigned prep_seq, unsigned finish_seq)
{
	return (int)(prep_seq - finish_seq) > 0;
}
