/* rl_module.h - what the module's files share: the error texts, one
 * window's state during a decision, the scratch arrays and the windows'
 * reads and writes (rl_log.c), the token bucket (rl_gcra.c). The module
 * only: the agent links rl_args alone. */
#ifndef RL_MODULE_H
#define RL_MODULE_H

#include <stdint.h>

#include "redismodule.h"
#include "rl_args.h"

#define RL_ERR_ENTRY_TEXT "ERR sliding_window: bad entry"
#define RL_ERR_OOM_TEXT     "OOM command not allowed when used memory > 'maxmemory'."
#define RL_ERR_WRONGTYPE    "WRONGTYPE Operation against a key holding the wrong kind of value"
#define RL_ERR_HASHINT_TEXT "ERR hash value is not an integer"

/* A bucket end beyond this (ms, year 2255) is not ours: dead. */
#define RL_MAX_BUCKET_END 9000000000000LL

/* Window i of the decision being made (see the script's slot). */
struct rl_state {
	RedisModuleString *name;       /* borrowed from argv */
	const struct rl_window *w;
	int64_t cut;                   /* us: an entry at or before it is out */
	int64_t count;                 /* units in the window */
	int64_t cum;                   /* cum of the newest entry (log) */
	int64_t top;                   /* newest entry's score / counted bucket end */
	int64_t oldest;                /* oldest in-window entry / counted bucket end */
	int64_t first;                 /* cost of the oldest in-window entry (log) */
	int64_t score;                 /* this admission's score / bucket end, us */
	int64_t bucket_ms;             /* this admission's bucket (bucketed) */
	int64_t bucket_units;          /* units already in it */
	int has_top, has_oldest;
	size_t b0, nb;                 /* counted buckets: scratch.b[b0 .. b0 + nb) */
	size_t d0, nd;                 /* dead fields: scratch.dead[d0 .. d0 + nd) */
	int pool;                      /* a pool's log: members carry the account */
	const char *acc;               /* pool: this decision's account (borrowed) */
	size_t acc_len;
};

struct pool_gone;

/* A decision's pool (rl_pool.c): its log read as a window's, the share,
 * and the expired entries read (owned: rl_pool_release()). */
struct rl_pool_state {
	struct rl_state log;           /* the log (log.pool = 1) */
	struct rl_window w;            /* the pool's limit and length, for log.w */
	const struct rl_pool *pool;    /* borrowed from the decision */
	RedisModuleString *hkey;       /* borrowed from argv: account -> units */
	int64_t room;                  /* units the rule lets the pool hold */
	int code;                      /* refusal's kind: 1 pool-full, 2 pool-share */
	int admits;
	int expired;                   /* the log has entries to trim */
	int orphan;                    /* the log is empty: the hash holds nothing */
	int64_t mine, na;              /* this account's units, accounts holding units */
	struct pool_gone *gone;        /* the expired entries, by account (owned) */
	size_t ngone;
};

/* a / b rounded down (C rounds toward zero; a fake clock may be < 0). */
static inline int64_t floor_div(int64_t a, int64_t b)
{
	int64_t q = a / b;

	return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* a / b rounded up, for b > 0 (the script's math.ceil). */
static inline int64_t ceil_div_pos(int64_t a, int64_t b)
{
	return a <= 0 ? -floor_div(-a, b) : (a + b - 1) / b;
}

/* Starts a decision's scratch (counted buckets, dead fields) empty. */
void rl_scratch_begin(void);
/* Frees the dead fields the scratch holds (strings retained by the scan). */
void rl_scratch_release_dead(void);
/* Frees the scratch arrays (they grow again from nothing); <fail_at> > 0
 * (test build) makes that growth from now on fail, as an out-of-memory
 * Realloc would. */
void rl_scratch_free(long long fail_at);

/* Log window <s>, read only. Returns NULL or the error reply text. */
const char *rl_log_read(RedisModuleCtx *ctx, struct rl_state *s);
/* Bucketed window <s>, read only (its counted buckets and dead fields go
 * to the scratch). Returns NULL or the error reply text. */
const char *rl_log_read_buckets(RedisModuleCtx *ctx, struct rl_state *s, int64_t now);
/* The TTL (ms) of window <s>'s key after this admission. */
int64_t rl_log_ttl_ms(const struct rl_state *s, int64_t now);
/* Writes this admission's entry into log window <s>, open as <k>.
 * Returns 0, or -1 when Redis refused the write. */
int rl_log_add(RedisModuleCtx *ctx, RedisModuleKey *k, struct rl_state *s, int64_t now,
               int64_t cost);
/* Adds <cost> to the bucket of <now> in bucketed window <s>, open as <k>. */
void rl_log_add_bucket(RedisModuleCtx *ctx, RedisModuleKey *k, struct rl_state *s, int64_t cost);
/* Drops the expired entries or dead fields of <s>, open as <k>; with
 * <ttl_ms> >= 0 sets the key's expiry to now + ttl_ms. */
void rl_log_trim(RedisModuleCtx *ctx, RedisModuleKey *k, struct rl_state *s, int64_t now,
                 int64_t ttl_ms);
/* Has window <s> anything to trim? */
int rl_log_has_expired(RedisModuleCtx *ctx, const struct rl_state *s);
/* Time (us) until <need> units have left log window <s>. Never early. */
int64_t rl_log_retry(RedisModuleCtx *ctx, const struct rl_state *s, int64_t need, int64_t now);
/* Time (us) until <need> units have left bucketed window <s>. Never early. */
int64_t rl_log_retry_buckets(const struct rl_state *s, int64_t need, int64_t now);

/* Reads pool <pool> of keys <key> (its log) and <hkey> (borrowed from
 * argv) at <now> for <cost> into <ps>, which then owns what it read until
 * rl_pool_release(). Returns NULL or the error text (nothing owned). */
const char *rl_pool_read(RedisModuleCtx *ctx, struct rl_pool_state *ps, const struct rl_pool *pool,
                         RedisModuleString *key, RedisModuleString *hkey, int64_t now,
                         int64_t cost);
/* Records an admission of <cost> in the pool read into <ps>, trims it and
 * sets both keys' expiry. Returns 0, or -1 when Redis refused the write. */
int rl_pool_admit(RedisModuleCtx *ctx, struct rl_pool_state *ps, int64_t now, int64_t cost);
/* A denial's trim of the pool read into <ps> (when it has expired entries). */
void rl_pool_trim(RedisModuleCtx *ctx, struct rl_pool_state *ps);
/* pool-share's exact retry after the pool's trim (see rl_pool.c): <hi>
 * the score at which the cost fits outside the headroom (when <bounded>).
 * Returns the retry in us, or -1 when none comes before <hi>. */
int64_t rl_pool_retry_share(RedisModuleCtx *ctx, const struct rl_pool_state *ps, int64_t cost,
                            int64_t hi, int bounded, int64_t now);
/* Frees what rl_pool_read() left in <ps>. */
void rl_pool_release(struct rl_pool_state *ps);

/* In-flight leases (rl_lease.c). Reads lease window <s>'s running leases
 * (count, earliest end in oldest, latest in top). NULL or the error text. */
const char *rl_lease_read(RedisModuleCtx *ctx, struct rl_state *s, int64_t now);
/* Adds this decision's lease to <k> (s->score = its end). 0 or -1. */
int rl_lease_add(RedisModuleCtx *ctx, RedisModuleKey *k, struct rl_state *s, int64_t now);
/* us until the <need>th running lease of <s> ends (need <= s->count). */
int64_t rl_lease_retry(RedisModuleCtx *ctx, const struct rl_state *s, int64_t need, int64_t now);
/* RATELIMIT.RELEASE's work on leases <name> (borrowed): lease <id> goes,
 * the ended ones too; *<code> 1 (it ran), 2 (it had ended) or 0 (absent),
 * *<live> the leases left. NULL or the error text. */
const char *rl_lease_release(RedisModuleCtx *ctx, RedisModuleString *name, RedisModuleString *id,
                             int64_t now, long long *code, long long *live);

/* Quota window <s> (rl_quota.c), read only: count, the end its units are
 * released (oldest) and the end an admission writes (score). Returns NULL
 * or the error reply text. */
const char *rl_quota_read(RedisModuleCtx *ctx, struct rl_state *s, int64_t now);
/* Records an admission of <cost> in quota window <s> with its expiry.
 * Returns 0, or -1 when Redis refused the write. */
int rl_quota_add(RedisModuleCtx *ctx, struct rl_state *s, int64_t now, int64_t cost);

/* A GCRA decision over the string key <name> (borrowed from argv), with
 * the quota of key <qname> beside it when the decision has a second window
 * (NULL otherwise); writes the reply. <oom>: Redis is over maxmemory. <rec>
 * (borrowed; NULL: none) gets the reservation's record of a settle=
 * admission. */
void rl_gcra_decide(RedisModuleCtx *ctx, RedisModuleString *name, RedisModuleString *qname,
                    const struct rl_decision *d, int64_t now, int oom, RedisModuleString *rec);

/* Reserve, then settle (rl_settle.c): at most this many windows settled */
#define RL_SETTLE_MAX RL_MAX_WINDOWS
/* Writes admission <d>'s reservation record to <name> (borrowed): its cost
 * and the <n> <scores> of its pairs, expiring after d->settle_ms. 0 or -1. */
int rl_settle_write(RedisModuleCtx *ctx, RedisModuleString *name, const struct rl_decision *d,
                    const int64_t *scores, size_t n, int64_t now);
/* One window after a settle: what a decision would answer of it. */
struct rl_settle_state {
	int known;                     /* 0: written under other limits, or unreadable */
	int64_t limit;                 /* its limit (a bucket's burst) */
	int64_t remaining;             /* >= 0 */
	int64_t reset;                 /* us until its oldest unit leaves (full again); 0 empty */
};

/* RATELIMIT.SETTLE's answer. */
struct rl_settled {
	long long code;                /* 1 settled, 0 no record */
	long long delta;               /* real - reserved */
	int known;                     /* every window's state read: <state> and <index> set */
	struct rl_settle_state state;  /* the window with the least left */
	size_t index;
};

/* RATELIMIT.SETTLE's work: <keys>/<nk> (borrowed: the windows', then the
 * record), <args>/<nargs> (the real cost, then the windows' pairs), into
 * <out>. NULL or the error text. */
const char *rl_settle(RedisModuleCtx *ctx, RedisModuleString **keys, size_t nk,
                      const struct rl_arg *args, size_t nargs, int64_t now,
                      struct rl_settled *out);

#endif
