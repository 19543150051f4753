/* rl_args.h - the pure half of the module: RATELIMIT.DECIDE's argument
 * layout (the script's KEYS and ARGV, lua/sliding_window.lua), the stored
 * members and bucket fields. No Redis, no I/O, no allocation: the fuzz
 * harness (tests/fuzz/fuzz_module_args.c) and the module share it. */
#ifndef RL_ARGS_H
#define RL_ARGS_H

#include <stddef.h>
#include <stdint.h>

/* Windows of one decision (the agent sends at most 4). */
#define RL_MAX_WINDOWS 64
/* Bounds that keep every sum and product below 2^53 (exact in the
 * script's doubles as well as in int64): cost and limit, window and
 * precision in ms (about 31 years). */
#define RL_MAX_UNITS   1000000000000000LL
#define RL_MAX_MS      1000000000000LL
/* A stored cum or cost above this is not ours (2^53). */
#define RL_MAX_MEMBER  9007199254740992LL

/* The script's error replies, word for word (the agent reads them alike). */
#define RL_ERR_ARGS_TEXT   "ERR sliding_window: bad arguments"
#define RL_ERR_WINDOW_TEXT "ERR sliding_window: bad limit or window"
#define RL_ERR_BATCH_TEXT  "ERR sliding_window: bad batch"

enum rl_err {
	RL_OK = 0,
	RL_ERR_ARGS,      /* arity, cost */
	RL_ERR_WINDOW,    /* a limit, window or precision */
	RL_ERR_BATCH,     /* a batch whose counts do not match its arguments */
	RL_ERR_COUNT
};

/* One argument as Redis holds it (borrowed). */
struct rl_arg {
	const char *p;
	size_t len;
};

/* GCRA: burst * window in us is at most this (2^52), so that every
 * quantity of the decision stays below 2^53 in the script's doubles. */
#define RL_GCRA_MAX_SPAN 4503599627370496LL

/* A lease id: 1..this many hex digits (the agent sends 32). */
#define RL_LEASE_ID_MAX 64
/* Calendar periods (protocol 4, "cal:<kind>:<tz minutes>:<anchor>"). */
enum rl_cal {
	RL_CAL_NONE = 0,
	RL_CAL_HOUR,       /* 'h': the offset's clock hour */
	RL_CAL_DAY,        /* 'd': 00:00 of the offset to 00:00 */
	RL_CAL_WEEK,       /* 'w': Monday 00:00 of the offset */
	RL_CAL_MONTH,      /* 'm': day <anchor> 00:00 of the offset */
	RL_CAL_COUNT
};
/* A fixed UTC offset: -14:00 .. +14:00, in minutes. */
#define RL_CAL_TZ_MAX     840
#define RL_CAL_ANCHOR_MAX 28

struct rl_window {
	int64_t limit;
	int64_t win_ms;
	int64_t prec_ms;   /* 0: a sliding log (sorted set); else a bucketed hash */
	int64_t burst;     /* 0; else GCRA ("gcra:<ms>:<burst>"): a string key */
	/* 0; else in-flight leases ("lease:<ms>:<id>", protocol 4): win_ms 0,
	 * the key a sorted set of lease id -> end (us), limit the bound */
	int64_t lease_ms;
	const char *lease_id;   /* borrowed from the argument */
	size_t lease_id_len;
	/* 0; else a reservation's record ("settle:<ms>"): the
	 * decision's last pair, no window (rl_decision.settle_ms) */
	int64_t settle_ms;
	int cal;           /* enum rl_cal; not NONE: a quota's counter "<end>:<units>"
	                    * (win_ms, prec_ms, burst 0) */
	int64_t tz_min;    /* cal: the offset, minutes */
	int64_t anchor;    /* cal: a month's first day, 1..28 */
};

/* A quota's stored counter: the units admitted in the period that ends at
 * <end> (us, Redis time). */
struct rl_quota_value {
	int64_t end;
	int64_t units;
};

/* A stored GCRA value (the script's gcra() header): "<tat>:<frac>", the
 * TAT tat + frac / limit us (win_ms 0: read under the current rate), or
 * "<tat>:<frac>:<win_ms>:<limit>:<owed>", written under rate limit/win_ms
 * at tat - owed. */
struct rl_gcra_value {
	int64_t tat;
	int64_t frac;
	int64_t win_ms;
	int64_t limit;
	int64_t owed;
};

/* A GCRA decision (see the script's gcra()): in, the stored value; out,
 * the reply and what an admission stores (with the window's rate, and
 * owed = tat - now). */
struct rl_gcra {
	int64_t allowed;
	int64_t remaining;
	int64_t reset;     /* us until the bucket is full again, rounded up */
	int64_t retry;     /* us, rounded up; 0 when allowed */
	int64_t tat;       /* admitted: the TAT to store, tat + frac / limit us */
	int64_t frac;
	int64_t ttl_ms;    /* admitted: its TTL from now, ms */
};

/* A pool's account name: at most this many bytes (its log's members
 * carry it). */
#define RL_POOL_ACC_MAX 1024

/* A pool (pool=, protocol 3): a decision's last pair, <limit>
 * "pool:<ms>:<headroom>:<account>", its keys after the windows': the
 * pool's log, then its hash account -> units. */
struct rl_pool {
	int64_t limit;
	int64_t win_ms;
	int64_t headroom;  /* 0 .. limit - 1 */
	const char *acc;   /* borrowed from the argument, 1..RL_POOL_ACC_MAX bytes */
	size_t acc_len;
};

/* One decision: its keys are KEYS[key0 .. key0 + nwin - 1], and with
 * <pooled> the pool's two after them. */
struct rl_decision {
	size_t key0;
	size_t nwin;
	int64_t cost;
	struct rl_window w[RL_MAX_WINDOWS];
	int pooled;
	struct rl_pool pool;
	/* 0; else the record of this reservation (settle=) is written, for
	 * settle_ms, to the key after the windows' (its pair not in w[]) */
	int64_t settle_ms;
};

/* Walks a batch's decisions after rl_args_batch_check() accepted it. */
struct rl_batch_iter {
	size_t ki;   /* next decision's first key */
	size_t ai;   /* next decision's key-count argument */
};

/* The error reply text of <e> (RL_OK: NULL). */
const char *rl_args_err_text(enum rl_err e);

/* A decimal integer (optional '-', 1..18 digits, nothing else) into <out>.
 * Returns 0 or -1. */
int rl_args_parse_int(const char *p, size_t len, int64_t *out);

/* Is <args> (ARGV, <nargs> long) the batch form ("batch" first)? */
int rl_args_is_batch(const struct rl_arg *args, size_t nargs);

/* A single decision over all <nkeys> keys: ARGV = cost, limit/window
 * pairs. Fills <d> (key0 = 0). */
enum rl_err rl_args_parse_single(const struct rl_arg *args, size_t nargs, size_t nkeys,
                                 struct rl_decision *d);

/* Checks a batch's layout (ARGV[1] = "batch", ARGV[2] = n, then per
 * decision: key count, cost, pairs) against <nargs> and <nkeys> before
 * anything is decided: RL_OK and *<n> decisions, or RL_ERR_BATCH. */
enum rl_err rl_args_batch_check(const struct rl_arg *args, size_t nargs, size_t nkeys,
                                size_t *n);

/* The next decision of a checked batch into <d>: RL_OK, or the error of
 * that decision alone (its cost or a window: the others stand). Advances
 * <it> either way. */
enum rl_err rl_args_batch_next(const struct rl_arg *args, struct rl_batch_iter *it,
                               struct rl_decision *d);

/* A pool's member "<cum>:<cost>:<account>" (<p> borrowed; the account
 * 1.. bytes, pointed into <p>) into <cum>, <cost>, <acc>/<acc_len>.
 * Returns 0, or -1 for anything else. */
int rl_args_parse_pool_member(const char *p, size_t len, int64_t *cum, int64_t *cost,
                              const char **acc, size_t *acc_len);

/* Writes pool member "<cum>:<cost>:<account>" into <buf> of <size>
 * bytes; returns its length (0: it does not fit). */
size_t rl_args_format_pool_member(char *buf, size_t size, int64_t cum, int64_t cost,
                                  const char *acc, size_t acc_len);

/* A stored member "<cum>:<cost>" (hex, both < 2^53) into <cum>, <cost>.
 * Returns 0, or -1 for anything else (an old-form member among them). */
int rl_args_parse_member(const char *p, size_t len, int64_t *cum, int64_t *cost);

/* Writes member "<cum>:<cost>" (lower-case hex, as the script's %x) into
 * <buf> of <size> bytes; returns its length. */
size_t rl_args_format_member(char *buf, size_t size, int64_t cum, int64_t cost);

/* A stored GCRA value (decimal; <p> borrowed) into <v>: tat, frac and
 * owed 0..2^53, owed <= tat, win_ms 1..RL_MAX_MS, limit 1..RL_MAX_UNITS.
 * Returns 0, or -1 for anything else. */
int rl_args_parse_gcra(const char *p, size_t len, struct rl_gcra_value *v);

/* Writes <v> (borrowed; the script's '%d:%d:%d:%d:%d', or '%d:%d' when
 * win_ms is 0) into <buf> of <size> bytes; returns its length (0: it does
 * not fit). */
size_t rl_args_format_gcra(char *buf, size_t size, const struct rl_gcra_value *v);

/* What stored <v> (borrowed; NULL: no key) owes at <now> under GCRA window
 * <w> (borrowed), max(TAT, now) - now = *<d> + *<f> / limit us, as the
 * script reads it. Returns 0, or -1 when <v> is not ours (written more
 * than 2^52 us after <now>). */
int rl_args_gcra_owed(const struct rl_window *w, int64_t now, const struct rl_gcra_value *v,
                      int64_t *d, int64_t *f);

/* Decides GCRA window <w> (borrowed) for <cost> at <now> over the stored
 * <v> (borrowed; NULL: no key) into <out>, exactly as the script does.
 * Returns 0, or -1 as rl_args_gcra_owed() (nothing decided). */
int rl_args_gcra(const struct rl_window *w, int64_t cost, int64_t now,
                 const struct rl_gcra_value *v, struct rl_gcra *out);

/* Is <p>/<len> a lease id (1..RL_LEASE_ID_MAX hex digits, the script's
 * '^%x+$')? */
int rl_args_is_lease_id(const char *p, size_t len);
/* A limit/window pair (<limit>, <win>) as a decision's into <w>. 0 or -1. */
int rl_args_parse_window_pair(const struct rl_arg *limit, const struct rl_arg *win,
                              struct rl_window *w);

/* The end (ms) of the <prec_ms> bucket that holds <now_us>
 * (epoch-aligned: the script's (floor(floor(now / 1000) / p) + 1) * p). */
int64_t rl_args_bucket_end(int64_t now_us, int64_t prec_ms);

/* Days since 1970-01-01 of the proleptic Gregorian date <y>-<m>-<d>
 * (Hinnant's days_from_civil; the script has the same steps). */
int64_t rl_cal_days_from_civil(int64_t y, int64_t m, int64_t d);

/* The date of day <z> since 1970-01-01 (Hinnant's civil_from_days). */
void rl_cal_civil_from_days(int64_t z, int64_t *y, int64_t *m, int64_t *d);

/* The period of calendar window <w> (borrowed, cal not NONE) that holds
 * <now> (us): [*<start>, *<end>) in us. */
void rl_cal_period(const struct rl_window *w, int64_t now, int64_t *start, int64_t *end);

/* A stored quota counter "<end>:<units>" (decimal, both 0..2^53; <p>
 * borrowed) into <v>. Returns 0, or -1 for anything else. */
int rl_args_parse_quota(const char *p, size_t len, struct rl_quota_value *v);

/* Writes <v> (borrowed) as "<end>:<units>" into <buf> of <size> bytes;
 * returns its length (0: it does not fit). */
size_t rl_args_format_quota(char *buf, size_t size, const struct rl_quota_value *v);

#endif
