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

#include <stdbool.h>
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
/* Which of a worker's two posted messages it handles first: true for
 * the finish of reload <finish_seq>, false for the prepare of <prep_seq>.
 * Main finishes a reload before it prepares the next (a SIGHUP that came
 * during reload N is prepared as N+1 right after N's commit), and both can
 * wait in the mailbox when the worker wakes: the older one goes first, so
 * a commit of N is not taken for a stale message after N+1's prepare has
 * replaced N. A finish of the reload being prepared (main aborting it)
 * comes after its prepare. */
bool reload_finish_first(unsigned prep_seq, unsigned finish_seq);

/* Names for logs ("?" out of range). */
const char *reload_state_str(enum reload_state st);
const char *reload_event_str(enum reload_event ev);

#endif /* SPOA_RELOAD_H */
