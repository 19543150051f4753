/*
 * reload - the states of a reload and the one function that changes them.
 * Pure: no I/O, no clock, no locks. The same machine serves main's view of
 * a reload (all workers at once, main.c) and each worker's (worker.c); the
 * protocol between them is in worker.h.
 *
 *   IDLE --prepare--> PREPARING --ready--> READY  --commit--> IDLE
 *                         |                  \----abort---> IDLE
 *                         +------fail-----> FAILED --abort--> IDLE
 *                         +------abort----> IDLE   (stopped, or replaced,
 *                                                   before its verdict)
 *
 * Any other (state, event) is a bug in the caller: refused, state unchanged.
 */
#ifndef SPOA_RELOAD_H
#define SPOA_RELOAD_H

#include <stddef.h>

enum reload_state {
	RELOAD_IDLE = 0,        /* nothing staged */
	RELOAD_PREPARING,       /* a new generation staged, its verdict not in */
	RELOAD_READY,           /* prepared: waits for commit (or abort) */
	RELOAD_FAILED,          /* could not be prepared: waits for abort */
	RELOAD_STATE_COUNT
};

enum reload_event {
	RELOAD_EV_PREPARE = 0,  /* stage a new generation */
	RELOAD_EV_READY,        /* the verdict: prepared */
	RELOAD_EV_FAIL,         /* the verdict: cannot be prepared */
	RELOAD_EV_COMMIT,       /* switch to it */
	RELOAD_EV_ABORT,        /* drop it */
	RELOAD_EV_COUNT
};

/* The command that finishes a reload, as main sends it to each worker. */
enum reload_cmd {
	RELOAD_CMD_NONE = 0,    /* none posted */
	RELOAD_CMD_COMMIT,
	RELOAD_CMD_ABORT,
	RELOAD_CMD_COUNT
};

/* Move <*st> on <ev>: 0 with the new state in <*st>; -1 when <ev> is not
 * legal in <*st> (or either is out of range), <*st> unchanged and why in
 * <err>. The only writer of a reload's state. */
int reload_step(enum reload_state *st, enum reload_event ev, char *err, size_t errlen);
/* The event a finishing command is (RELOAD_EV_COUNT for RELOAD_CMD_NONE,
 * which no state takes). */
enum reload_event reload_cmd_event(enum reload_cmd cmd);
/* Names for logs ("?" out of range). */
const char *reload_state_str(enum reload_state st);
const char *reload_event_str(enum reload_event ev);

#endif /* SPOA_RELOAD_H */
