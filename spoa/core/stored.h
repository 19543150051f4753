/*
 * stored - the one reading in C of what the engines store and answer
 * (lua/sliding_window.lua, module/ratelimit.c; docs/protocol.md "Redis
 * keys and entries"). Pure: plain values in (no hiredis, no clock, no
 * I/O), so the decision path and `ctl show` read alike and a unit test
 * checks both against tests/contract/decisions.txt.
 *
 *   (a) a decision's reply, { allowed, limit, remaining, reset_us,
 *       retry_after_us, window index }, into a struct stored_reply
 *       (window_decide_reply() reads it so);
 *   (b) what one window's key holds at a Redis time: a log's entries, a
 *       bucketed hash's fields, a GCRA string (through module/rl_args,
 *       the module's own reading), a quota's counter, into used /
 *       remaining / reset as the engines' next decision would count it
 *       (`ctl show`);
 *   (c) a pool's log: its count as (b), and the units each account holds
 *       in its window (`ctl show-pool`, the pool metrics);
 *   (d) a settle's reply, { settled, delta[, limit, remaining, reset_us,
 *       window index] }, into a struct stored_settle (the settled
 *       response's RateLimit fields).
 */
#ifndef SPOA_STORED_H
#define SPOA_STORED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "window.h"

#define STORED_REPLY_INTS 7     /* integers of one decision's reply: 6, or 7 pooled */

/* What a pooled decision's 7th integer says: the pool did not decide the
 * answer, or refused it (no room; the account above its share). */
enum stored_pool_verdict {
	STORED_POOL_NONE,
	STORED_POOL_FULL,
	STORED_POOL_SHARE,
	STORED_POOL_COUNT
};

/* One decision's reply, by name. */
struct stored_reply {
	bool allowed;
	int64_t limit;              /* the deciding window's limit (a bucket's burst), >= 1 */
	int64_t remaining;          /* >= 0 */
	int64_t reset_us;           /* until the deciding window frees its oldest unit
	                             * (a bucket: until it is full again), >= 0 */
	int64_t retry_after_us;     /* >= 0; 0 when allowed */
	unsigned window;            /* index of the deciding window (nwin_max: the pool) */
	enum stored_pool_verdict pool;  /* STORED_POOL_NONE unless the pool refused */
};

/* Read the <n> integers <v> of a reply into <out>: 6 of them, or 7 when
 * <pooled> (the 7th a stored_pool_verdict); allowed 0 or 1, limit >= 1,
 * the times and remaining >= 0, the index below <nwin_max> (a pool's
 * refusal: a deny whose index is at most <nwin_max>, read as <nwin_max>).
 * Returns 0, or -1 for any other shape (<out> then unset). Borrows <v>. */
int stored_read_reply(const int64_t *v, size_t n, unsigned nwin_max, bool pooled,
                      struct stored_reply *out);

/* A settle's answer (RATELIMIT.SETTLE, the script's settle mode). */
struct stored_settle {
	bool settled;               /* the reservation's record was there */
	int64_t delta;              /* real - reserved */
	bool known;                 /* the four below are set (protocol 6) */
	int64_t limit;              /* the window with the least left: its limit (a burst) */
	int64_t remaining;          /* >= 0 */
	int64_t reset_us;           /* until its oldest unit leaves (full again); 0 empty */
	unsigned window;            /* its index, below the settle's windows */
};

/* Read a settle's <n> integers <v> into <out>: 2 (code 0 or 1, delta), or
 * 6 (then limit >= 1, remaining and reset >= 0, an index below <nwin>).
 * Returns 0, or -1 for any other shape (<out> then unset). Borrows <v>. */
int stored_read_settle(const int64_t *v, size_t n, unsigned nwin, struct stored_settle *out);

/* One entry of a log window (a sorted set): its member and score. */
struct stored_entry {
	const char *member;         /* borrowed */
	size_t len;
	int64_t score;              /* Redis time, us */
};

/* One field of a bucketed window (a hash): bucket end (ms) and units. */
struct stored_field {
	const char *name;           /* borrowed */
	size_t name_len;
	const char *value;          /* borrowed */
	size_t value_len;
};

/* One window's key read at a Redis time, as its next decision counts it. */
struct stored_usage {
	uint64_t quota;             /* the window's limit; a bucket's burst */
	uint64_t used;              /* units counted now */
	uint64_t remaining;         /* quota - used, at least 0 */
	int64_t reset_us;           /* until the oldest counted unit leaves; a
	                             * bucket: until it is full again; 0 when empty */
};

/*
 * Read log window <lim> at <now_us> from its entries <e>/<n> in score
 * order (Redis's: all of the key, or those after the cut, or more; an
 * entry exactly one window old is out). Counted as the engines count:
 * cum(newest) - cum(oldest in the window) + cost(oldest in the window).
 * Returns 0, or -1 when an end holds a member the engines refuse (their
 * decisions on the key fail: 'bad entry'); <u> then reads full (used =
 * quota, remaining 0, reset 0). Borrows <e>.
 */
int stored_read_log(const struct stored_entry *e, size_t n, const struct window_limit *lim,
                    int64_t now_us, struct stored_usage *u);

/*
 * Read bucketed window <lim> at <now_us> from the hash's fields <f>/<n>
 * (any order): a bucket counts while its end is after the cut, a field
 * that is not two integers (or an end the engines never write) not at
 * all. Returns 0 (<u> set). Borrows <f>.
 */
int stored_read_buckets(const struct stored_field *f, size_t n, const struct window_limit *lim,
                        int64_t now_us, struct stored_usage *u);

/*
 * Read GCRA bucket <lim> (limit per window_ms, burst) at <now_us> from
 * its stored value <v>/<len> (NULL: no key, a full bucket), converted as
 * the engines convert a value written under another rate or burst
 * (rl_args_gcra_owed()): remaining = floor((burst * W - owed * limit) /
 * W), reset = the time owed, rounded up to a us. Returns 0, or -1 when
 * the value is not one the engines read (their decisions on it fail);
 * <u> then reads full (used = burst, remaining 0, reset 0). Borrows <v>.
 */
int stored_read_gcra(const char *v, size_t len, const struct window_limit *lim, int64_t now_us,
                     struct stored_usage *u);

/* One account's units in a pool's window (stored_read_pool). */
struct stored_pool_account {
	const char *account;        /* borrowed from the entries' members */
	size_t len;
	uint64_t units;
};

/*
 * Read pool <pl> at <now_us> from its log's entries <e>/<n> in score order
 * (members "<cum>:<cost>:<account>"), counted as stored_read_log counts a
 * window (the engines' pool count): <u> gets the pool's limit, used,
 * remaining (limit - used) and reset. With <acc> (room for one per entry
 * in the window: <n> is enough), each account holding units in the window
 * with its units, most units first (then by name), their number in
 * *<nacc>: the accounts the engines' next decision counts as holding
 * units. Returns 0, or -1 when a member in the window is not one the
 * engines write (their decisions on the pool fail); <u> then reads full,
 * *<nacc> 0. Borrows <e>; <acc> points into it.
 */
int stored_read_pool(const struct stored_entry *e, size_t n, const struct window_pool *pl,
                     int64_t now_us, struct stored_usage *u, struct stored_pool_account *acc,
                     size_t *nacc);

/*
 * Read calendar quota <lim> (lim->cal set) at <now_us> from its stored
 * counter <v>/<len> ("<end>:<units>"; NULL: no key): the units count
 * while end > now, and reset is then until that end, else until the end
 * of the period of <lim> that holds <now_us> (rl_cal_period()). Returns
 * 0, or -1 when the value is not one the engines read (<u> reads full).
 * Borrows <v>.
 */
int stored_read_quota(const char *v, size_t len, const struct window_limit *lim, int64_t now_us,
                      struct stored_usage *u);

#endif /* SPOA_STORED_H */
