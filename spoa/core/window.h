/*
 * window - rate-limit policy math without I/O.
 *
 * Policies, the Redis key of a request, the script's arguments, and the
 * translation of the script's reply (a struct window_reply) into a decision.
 * No sockets, no libev, no clock: functions that need "now" take it.
 *
 * The script contract (lua/sliding_window.lua):
 *   KEYS[1..n]  one sorted set per window of the policy
 *   ARGV[1]     cost (units this request consumes)
 *   ARGV[2i]    limit of window i      ARGV[2i+1]  window i length in ms,
 *               or "<ms>:<precision ms>" for a bucketed window (a hash of
 *               per-bucket counts instead of the sorted-set log)
 * or, for a batch (redis-batch): ARGV[1] "batch", ARGV[2] n, then per
 * decision its key count, cost and limit/window pairs (KEYS:
 * the decisions' keys one after the other); returns n such results, an
 * error element for a decision that failed alone. One decision
 * returns an array of 6 integers:
 *   { allowed 0|1, limit, remaining, reset_us, retry_after_us, window_index }
 * of the deciding window (least remaining when allowed, longest retry when
 * denied); times are microseconds of Redis time, not yet rounded. A
 * pooled decision (its pool after the windows, see window_build_args)
 * returns 7: then { ..., pool } where pool is 0, or 1 (pool-full) / 2
 * (pool-share) when the pool decided the denial (the numbers are the
 * pool's). A policy with inflight= sends its leases as one more pair
 * after the windows, <inflight> "lease:<lease ms>:<lease id>" (its key
 * <policy>:inflight:l1:{<tag>}), before the pool's; the reply's index of
 * that pair means reason in-flight (window_args.lease_at says which).
 */
#ifndef SPOA_WINDOW_H
#define SPOA_WINDOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


#define WINDOW_NAME_MAX        48     /* policy name, bytes, without NUL */
#define WINDOW_KEY_MAX         256    /* account key, bytes */
#define WINDOW_MAX_WINDOWS     4      /* "10/1s 1000/1h": windows per policy */
/* a key's '}' and '%' take 3 bytes in a hash tag; a pooled policy's on a
 * Cluster has its pool's name and "}/" before them */
#define WINDOW_REDIS_KEY_MAX   (2 * WINDOW_NAME_MAX + 3 * WINDOW_KEY_MAX + 34)
/* "EVALSHA" sha nkeys, one key per window, cost, limit+window per window;
 * a pool: 2 keys and its limit+window */
/* "EVALSHA" sha nkeys, one key per window, cost, limit+window per window;
 * leases: a key and a pair */
#define WINDOW_SCRIPT_ARGC_MAX (4 + WINDOW_MAX_WINDOWS * 3 + 4 + 3 + 3)
/* a lease id: 128 random bits in lower-case hex */
#define WINDOW_LEASE_ID_LEN    32
/* settle=<header>: the response header's name, bytes */
#define WINDOW_SETTLE_HDR_MAX  63
/* the largest real cost a settle sends (the engines' bound) */
#define WINDOW_SETTLE_COST_MAX 1000000000000000LL
/* precision=<d>: bucket length bounds (a bucket per precision of window) */
#define WINDOW_PRECISION_MIN_MS      1000
#define WINDOW_PRECISION_MAX_BUCKETS 600

enum window_on_error {
	WINDOW_ON_ERROR_DENY = 0,   /* status=error: HAProxy answers 503 */
	WINDOW_ON_ERROR_ALLOW,      /* status=allow + reason: fail-open */
	WINDOW_ON_ERROR_COUNT
};

enum window_status {
	WINDOW_ALLOW = 0,
	WINDOW_DENY,
	WINDOW_ERROR,
	WINDOW_STATUS_COUNT
};

enum window_reason {
	WINDOW_REASON_NONE = 0,
	WINDOW_REASON_REDIS_UNAVAILABLE,
	WINDOW_REASON_REDIS_TIMEOUT,
	WINDOW_REASON_REDIS_ERROR,     /* script error, unexpected reply */
	WINDOW_REASON_UNKNOWN_POLICY,
	WINDOW_REASON_BAD_KEY,
	WINDOW_REASON_BAD_COST,
	WINDOW_REASON_SHADOW_DENY,
	WINDOW_REASON_OVERLOAD,        /* agent-side limit hit */
	WINDOW_REASON_REDIS_EVICTS,    /* maxmemory-policy is not noeviction */
	WINDOW_REASON_REDIS_OOM,       /* Redis over maxmemory: cannot record */
	WINDOW_REASON_TOO_MANY_MESSAGES, /* a NOTIFY over max-notify-messages */
	WINDOW_REASON_BLOCKED,         /* a live override blocks the account (ctl) */
	WINDOW_REASON_POOL_FULL,       /* deny: the account's pool has no room */
	WINDOW_REASON_POOL_SHARE,      /* deny: above its share, only headroom left */
	WINDOW_REASON_IN_FLIGHT,       /* deny: the account's leases are all taken */
	WINDOW_REASON_QUOTA,           /* deny: a calendar quota (/day, /month...) is spent */
	WINDOW_REASON_COUNT
};

/* algorithm=: how a policy counts (docs/configuration.md, "Choosing an
 * algorithm"). */
enum window_algorithm {
	WINDOW_ALGO_LOG = 0,           /* sliding-window log (precision=: buckets) */
	WINDOW_ALGO_GCRA,              /* token bucket as one TAT per account */
	WINDOW_ALGO_COUNT
};

/* GCRA: burst * window (us) at most 2^52 (module/rl_args.h's
 * RL_GCRA_MAX_SPAN: the script's doubles stay exact). */
#define WINDOW_GCRA_MAX_SPAN_US 4503599627370496ULL
#define WINDOW_BURST_MAX        1000000u

/* A calendar quota's period (<limit>/hour|day|week|month): the same
 * values as module/rl_args.h's enum rl_cal. */
enum window_cal {
	WINDOW_CAL_NONE = 0,
	WINDOW_CAL_HOUR,
	WINDOW_CAL_DAY,
	WINDOW_CAL_WEEK,
	WINDOW_CAL_MONTH,
	WINDOW_CAL_COUNT
};

struct window_limit {
	uint64_t limit;                /* requests (units) per window, >= 1 */
	uint64_t window_ms;            /* window length, >= 1 ms; a quota: its
	                                * period's longest (31 days for a month) */
	uint64_t burst;                /* gcra: the bucket's capacity (default the
	                                * limit); 0 for a log window */
	uint8_t cal;                   /* enum window_cal: NONE, or a quota */
	int16_t tz_min;                /* a quota: its fixed UTC offset, minutes */
	uint8_t anchor;                /* a monthly quota: its first day, 1..28 */
};

/* A pool (pool <name> <limit>/<window> [headroom=<n>]): one exact
 * sliding window on Redis's clock counting what every policy naming it
 * admits, with a fair share (docs/configuration.md, "Pools"). */
struct window_pool {
	char name[WINDOW_NAME_MAX + 1];
	size_t name_len;
	uint64_t limit;                /* units per window, >= 1 */
	uint64_t window_ms;
	uint64_t headroom;             /* < limit: what an account at or above its
	                                * share may not take */
};

/* A per-key override of a policy's limits ("override transfer ACC-VIP 30/1s"). */
struct window_override {
	char key[WINDOW_KEY_MAX + 1];
	size_t key_len;
	unsigned nwin;
	struct window_limit win[WINDOW_MAX_WINDOWS];
};

/* A plan's limits for one policy ("plan pro api 100/1s"): every account
 * whose request names the plan gets them, unless its own override wins. */
struct window_plan {
	char name[WINDOW_NAME_MAX + 1];
	size_t name_len;
	unsigned nwin;
	struct window_limit win[WINDOW_MAX_WINDOWS];
};

struct window_policy {
	char name[WINDOW_NAME_MAX + 1];
	size_t name_len;
	unsigned nwin;                 /* 1..WINDOW_MAX_WINDOWS */
	struct window_limit win[WINDOW_MAX_WINDOWS];
	enum window_on_error on_error;
	enum window_algorithm algorithm; /* default the log */
	bool shadow;                   /* decide and count, but answer allow */
	uint64_t max_cost;             /* largest cost of one request; 0: the
	                                * smallest limit that applies */
	uint64_t precision_ms;         /* 0: exact log; else windows longer than
	                                * this are counted in buckets of it */
	struct window_override *overrides; /* owned by the config, sorted by key */
	size_t noverrides;
	struct window_plan *plans;     /* owned by the config, in file order */
	size_t nplans;
	/* live-max: the ceiling of a live override (ctl); 0 windows: the
	 * limits configured for the account */
	unsigned live_nwin;
	struct window_limit live_win[WINDOW_MAX_WINDOWS];
	/* set by the caller per decision: with one window, also count and
	 * write the 1.0.x one-window key (an upgrade; see window_build_args) */
	bool legacy_key;
	/* pool=: the pool's limits, copied at parse (a log policy only) */
	bool pooled;
	struct window_pool pool;
	/* the account's keys carry the pool's hash tag, "{<pool>}/<tag>", so
	 * that they are in the pool's Cluster slot (config_tag_pool_accounts:
	 * a pooled policy on cluster://); kept when a caller clears pooled */
	bool pool_tag;
	/* inflight=: requests of one account running at once (0: no limit),
	 * each holding a lease of lease_ms until released or ended */
	uint64_t inflight;
	uint64_t lease_ms;
	/* set by the caller per decision of an inflight= policy: this
	 * request's lease id (NUL-terminated), and the index of the leases'
	 * pair in its arguments (window_args.lease_at) */
	char lease_id[WINDOW_LEASE_ID_LEN + 1];
	int lease_at;
	/* settle=: the response header with the real cost ("": none); an
	 * admission reserves its cost and answers a lease id (lease_id, drawn
	 * as for inflight=) that "ratelimit-done" settles */
	char settle_hdr[WINDOW_SETTLE_HDR_MAX + 1];
};

/* The forms of an account's Redis keys (window_build_args owns them). */
enum window_key_form {
	WINDOW_KEY_LOG = 0,            /* <policy>:limit:v1:{<tag>}:<window> */
	WINDOW_KEY_BUCKETS,            /* <policy>:limit:b1:{<tag>}:<window> */
	WINDOW_KEY_GCRA,               /* <policy>:limit:g1:{<tag>} */
	WINDOW_KEY_LEGACY_LOG,         /* <policy>:limit:v1:<account> (1.0.x) */
	WINDOW_KEY_LEGACY_BUCKETS,     /* <policy>:limit:b1:<account> (1.0.x) */
	WINDOW_KEY_POOL_LOG,           /* <pool>:pool:p1:{<pool>} */
	WINDOW_KEY_POOL_ACCOUNTS,      /* <pool>:pool:a1:{<pool>} */
	WINDOW_KEY_LEASES,             /* <policy>:inflight:l1:{<tag>} */
	WINDOW_KEY_QUOTA,              /* <policy>:limit:c1:{<tag>}:<period> */
	WINDOW_KEY_SETTLE,             /* <policy>:settle:s1:{<tag>}:<lease id> */
	WINDOW_KEY_FORM_COUNT
};

struct window_decision {
	enum window_status status;
	enum window_reason reason;     /* NONE unless error, fail-open or shadow */
	bool has_quota;                /* limit/remaining/reset are meaningful */
	int64_t limit;
	int64_t remaining;
	int64_t reset;                 /* seconds, rounded up */
	int64_t retry_after;           /* seconds, rounded up, >= 1 when denied */
	int64_t retry_after_us;        /* raw, for the local deny cache */
	int64_t reset_us;              /* raw, for the local deny cache */
	unsigned window;               /* index of the deciding window;
	                                * WINDOW_MAX_WINDOWS: the pool or the
	                                * leases */
	char lease[WINDOW_LEASE_ID_LEN + 1]; /* an admission under inflight=:
	                                      * its lease id; else "" */
};

/* Script arguments for one request. <argv>/<argvlen> borrow <buf>. */
struct window_args {
	int argc;
	const char *argv[WINDOW_SCRIPT_ARGC_MAX];
	size_t argvlen[WINDOW_SCRIPT_ARGC_MAX];
	unsigned nkeys;
	int lease_at;                  /* the leases' pair index, or -1 */
	char buf[(WINDOW_MAX_WINDOWS + 2) * (WINDOW_REDIS_KEY_MAX + 64) + 128 +
	         2 * (2 * WINDOW_NAME_MAX + 32) + WINDOW_KEY_MAX + 64];
};

const char *window_status_str(enum window_status s);
const char *window_reason_str(enum window_reason r);

/* Returns the limits that apply to <key> under <p>: an override's or the
 * policy's own. Borrowed from <p>. Sets <*nwin>. */
const struct window_limit *window_limits_for(const struct window_policy *p,
                                             const char *key, size_t key_len,
                                             unsigned *nwin);

/* The plan of <p> named <name>/<len>, or NULL; borrowed from <p>. A
 * linear search: a policy has few plans (config lines). */
const struct window_plan *window_plan_find(const struct window_policy *p,
                                           const char *name, size_t len);
/* The release of lease <lease> (NUL-terminated, 1..WINDOW_LEASE_ID_LEN hex
 * digits) of account <key> under inflight= policy <p>: "EVALSHA" <""> 1
 * <policy>:inflight:l1:{<tag>} "release" <lease> (the engine writes its
 * head; the module's command is RATELIMIT.RELEASE <key> <lease>).
 * Returns 0, or -1 (not an inflight= policy, a bad key or lease). */
int window_build_release(const struct window_policy *p, const char *key, size_t key_len,
                         const char *lease, struct window_args *a);

/* The settle of reservation <lease> (WINDOW_LEASE_ID_LEN hex digits) of
 * account <key> under settle= policy <p>, <real> units: "EVALSHA" <"">
 * <n + 1> <the windows' keys> <policy>:settle:s1:{<tag>}:<lease>
 * "settle" <real> <limit> <window>... (the module's command is
 * RATELIMIT.SETTLE <n + 1> <keys>... <real> <pairs>...). Returns 0, or -1
 * (not a settle= policy, no window, a bad key or lease). */
int window_build_settle(const struct window_policy *p, const char *key, size_t key_len,
                        const char *lease, uint64_t real, struct window_args *a);

/* Order of a policy's override table (qsort/bsearch on struct
 * window_override): bytewise on the key, a shorter prefix first. */
int window_override_cmp(const void *a, const void *b);

/* Write <ms> compactly into <dst>/<cap> ("1s", "1h", "90s", "500ms"), NUL
 * included. Returns the length, or -1 when <cap> is too small. */
int window_format_ms(uint64_t ms, char *dst, size_t cap);

/* What a GCRA limit <lim> announces in the draft's headers: quota = the
 * burst, window = the time the bucket takes to refill from empty (burst *
 * window / limit, ms rounded up). A log limit is itself. Into <out>. */
void window_announced(const struct window_limit *lim, struct window_limit *out);

/* The nominal length (ms) of calendar period <cal>: an hour, a day, a
 * week, 31 days for a month (the longest); 0 for NONE. */
uint64_t window_cal_ms(enum window_cal cal);

/* The name of period <cal> ("hour", "day", "week", "month"; "" for NONE).
 * Static storage. */
const char *window_cal_name(enum window_cal cal);

/* Does <p> count a calendar quota in any window, its own or an
 * override's (the module must then speak protocol 4)? */
bool window_policy_has_quota(const struct window_policy *p);

/* The units <lim> holds at most: a GCRA bucket's burst, a log window's
 * limit (the "limit" a decision announces, the largest cost that fits). */
static inline uint64_t window_limit_quota(const struct window_limit *lim)
{
	return lim->burst ? lim->burst : lim->limit;
}

/* Is a window of <window_ms> under <p> counted in buckets (precision=)? */
bool window_is_bucketed(const struct window_policy *p, uint64_t window_ms);

/* Check <precision_ms> against windows <win>/<nwin>: at least
 * WINDOW_PRECISION_MIN_MS, dividing every window longer than it into at
 * most WINDOW_PRECISION_MAX_BUCKETS buckets (shorter windows stay exact:
 * an override may have only those). Returns 0, or -1 with the
 * reason in <why>/<cap>. */
int window_check_precision(uint64_t precision_ms, const struct window_limit *win,
                           unsigned nwin, char *why, size_t cap);

/* Check a key: 1..WINDOW_KEY_MAX bytes. Returns 0 or -1. */
int window_check_key(const char *key, size_t key_len);

/*
 * Build the Redis key(s) and script argv for one request:
 * "EVALSHA" <sha> <nkeys> KEYS... ARGV... .
 * Every window has its own key, whatever the number of windows, so that a
 * change of limits (override, live override, reload) keeps counting:
 * "<policy>:limit:v1:{<tag>}:<window>" (e.g. ":1s"), where <tag> is <key>
 * with '}' and '%' written "%7D" and "%25", so that the tag is the whole
 * account, never empty, the same for every window (one Cluster slot), and
 * distinct accounts have distinct keys. A bucketed window (precision=) is
 * a hash under "b1" instead of "v1", so that a config change never reads a
 * sorted set as a hash or the reverse; its window argument is
 * "<ms>:<precision ms>". A GCRA policy (algorithm=gcra) has one window and
 * one key, a string "<policy>:limit:g1:{<tag>}", and its window argument
 * is "gcra:<ms>:<burst>"; a cost above its burst is BAD_COST.
 * With p->legacy_key, a decision of one (log or bucketed) window of an
 * account not starting with '{' has a second key: the 1.0.x form
 * "<policy>:limit:v1:<key>" (b1 likewise) with the same limit and window,
 * so that units 1.0.x agents admitted still count and they see ours.
 * A calendar quota (lim->cal) has a string "<policy>:limit:c1:{<tag>}:<period>"
 * (period "hour", "day", "week" or "month": never its limit, offset or
 * anchor, so that a change of those keeps counting) and the window
 * argument "cal:<h|d|w|m>:<offset minutes>:<anchor>".
 * A pooled policy (p->pooled, never GCRA) adds its pool after the windows:
 * two keys, "<pool>:pool:p1:{<pool>}" (the log) and "<pool>:pool:a1:{<pool>}"
 * (account -> units), and the pair <limit> "pool:<ms>:<headroom>:<key>";
 * a cost above the pool's limit is BAD_COST. With p->pool_tag the
 * account's own keys take the pool's tag instead of the account's:
 * "<policy>:limit:v1:{<pool>}/<tag>:<window>" (b1, l1 likewise), all in
 * the pool's slot; never a 1.0.x key then.
 * Returns 0, or -1 with the reason in <*why> (BAD_KEY, BAD_COST).
 */
int window_build_args(const struct window_policy *p, const char *sha,
                      const char *key, size_t key_len, uint64_t cost,
                      struct window_args *a,
                      enum window_reason *why);

/* Pool <pl>'s key <form> (WINDOW_KEY_POOL_LOG or WINDOW_KEY_POOL_ACCOUNTS)
 * as window_build_args() writes it, into <dst>/<cap> (NUL-terminated):
 * for ctl show-pool and the pool metrics. Returns its length, or -1. */
int window_pool_key(const struct window_pool *pl, enum window_key_form form, char *dst,
                    size_t cap);

/* A batch: per decision, what window_build_args() made (keys and ARGV)
 * joined into one call, "<cmd>" <head> <total keys> KEYS... "batch" <n>
 * then per decision <its key count> <cost> <limit window>...
 * (<cmd>/<head>: "EVALSHA" sha, or "EVAL" script). */
#define WINDOW_BATCH_ARGC(n)   (5 + (size_t)(n) * (WINDOW_SCRIPT_ARGC_MAX - 2))
#define WINDOW_BATCH_NUMS(n)   (48 + (size_t)(n) * 4)

/*
 * Join the <n> single-decision arguments <one> into <argv>/<argvlen> (room
 * for WINDOW_BATCH_ARGC(n)); the numbers are written into <nums> (room for
 * WINDOW_BATCH_NUMS(n)). <argv> borrows <one>, <head> and <nums>. Returns
 * the argument count, or -1 when <n> is 0 or an argument set is malformed.
 */
int window_build_batch(const struct window_args *one, size_t n, const char *cmd,
                       const char *head, size_t head_len, const char **argv,
                       size_t *argvlen, char *nums);

/* The script's reply as the window math reads it: plain values, so this
 * module needs no hiredis (the limiter fills it from a redisReply). */
enum window_reply_kind {
	WINDOW_REPLY_OTHER = 0,     /* nil, status, string, a mixed array, none */
	WINDOW_REPLY_ERROR,         /* an error reply: <str>/<len> */
	WINDOW_REPLY_INTEGERS,      /* an array of integers only: <n> of them */
	WINDOW_REPLY_KIND_COUNT
};

#define WINDOW_REPLY_INTS 7     /* integers of a script result: 6, or 7 pooled */

struct window_reply {
	enum window_reply_kind kind;
	const char *str;            /* ERROR: the text, borrowed */
	size_t len;
	size_t n;                   /* INTEGERS: how many */
	int64_t v[WINDOW_REPLY_INTS]; /* INTEGERS: the first ones */
};

/*
 * Turn the script's reply into a decision for <p> (applying shadow mode).
 * An error reply, a nil, or a reply of the wrong shape becomes the policy's
 * error decision (see window_decide_error) with WINDOW_REASON_REDIS_ERROR,
 * or WINDOW_REASON_REDIS_OOM for Redis's out-of-memory refusal.
 * Returns 0 when <r> was a proper script result, -1 otherwise (<d> is set
 * either way). <r> is borrowed.
 */
int window_decide_reply(const struct window_policy *p, const struct window_reply *r,
                        struct window_decision *d);

/* The decision when Redis cannot decide: error, or fail-open allow when the
 * policy says on-redis-error=allow (status=allow, reason, limit only).
 * Fail-open applies to the REDIS_* reasons only: any other <why> (bad key,
 * bad cost, unknown policy, overload) is status=error on every policy. */
void window_decide_error(const struct window_policy *p, enum window_reason why,
                         struct window_decision *d);

/* Does deny <d> of a request of <cost> under <p> keep its numbers until its
 * retry_after or reset (the first), only counting them down, so the deny
 * cache may answer it (spoa/limiter/deny_cache.h)? A log's deny does (nothing but
 * an admission changes its deciding window before its reset). A GCRA
 * bucket drains continuously: its remaining grows a unit at a time, so
 * only a deny one unit short (remaining + 1 == cost, every deny of cost 1)
 * keeps it until the request can pass. */
bool window_deny_holds(const struct window_policy *p, uint64_t cost,
                       const struct window_decision *d);

/* Is <r> Redis's NOSCRIPT error? (the agent then re-sends with EVAL) */
bool window_reply_is_noscript(const struct window_reply *r);

/* Is <r> Redis's out-of-memory refusal ("OOM command not allowed ...",
 * also wrapped in a script error by Redis 6)? */
bool window_reply_is_oom(const struct window_reply *r);

/* Is <r> the module's "EVICTS ..." error (RATELIMIT.DECIDE on a Redis whose
 * maxmemory-policy may evict keys)? Decided as redis-evicts-keys. */
bool window_reply_is_evicts(const struct window_reply *r);

/* Fold <d> into <acc>: error over deny over allow; among denies the longest
 * retry_after; among allows the least remaining (an allow without quota, the
 * fail-open kind, ranks below any allow with quota); ties keep <acc>.
 * window_decision_init() leaves <acc> "empty" (status WINDOW_STATUS_COUNT,
 * all else zero): the first merge copies <d>. An <acc> still empty after
 * the merges means there was nothing to decide. */
void window_decision_init(struct window_decision *acc);
void window_decision_merge(struct window_decision *acc, const struct window_decision *d);

/* Round microseconds up to whole seconds (0 stays 0). */
int64_t window_us_to_s_ceil(int64_t us);

#endif /* SPOA_WINDOW_H */
