/*
 * metrics - counters and gauges, and their Prometheus text rendering.
 *
 * Each worker thread owns one struct metrics and is its only writer, so the
 * hot path is a plain relaxed load+store (no lock, no RMW); the main thread
 * owns one more (refused connections, reloads). The scraper in the main
 * thread sums the blocks with relaxed loads: a scrape may be one event
 * behind, never torn. Per-policy counters are indexed like the policies of
 * the configuration the worker runs (a reload keeps a policy's index when it
 * can, and the worker moves the counters by name when it cannot).
 */
#ifndef SPOA_METRICS_H
#define SPOA_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "config.h"
#include "spop.h"
#include "window.h"

enum metrics_redis_error {
	METRICS_REDIS_ERR_TIMEOUT = 0,
	METRICS_REDIS_ERR_REFUSED,     /* not connected / connect failed */
	METRICS_REDIS_ERR_SCRIPT,      /* error reply or bad shape */
	METRICS_REDIS_ERR_NOSCRIPT,
	METRICS_REDIS_ERR_OOM,         /* Redis over maxmemory refused a write */
	METRICS_REDIS_ERR_EVICTS,      /* the module refused: maxmemory-policy evicts */
	METRICS_REDIS_ERR_COUNT
};

/* frames_in[] index: HAProxy's frame type (SPOP_FRAME_UNSET..NOTIFY). */
#define METRICS_FRAMES_IN (SPOP_FRAME_NOTIFY + 1)

/* frames_out[] index: the agent's frames. */
enum metrics_frame_out {
	METRICS_OUT_OTHER = 0,
	METRICS_OUT_HELLO,
	METRICS_OUT_DISCONNECT,
	METRICS_OUT_ACK,
	METRICS_OUT_COUNT
};

enum metrics_reload {
	METRICS_RELOAD_SUCCESS = 0,
	METRICS_RELOAD_FAILURE,        /* the file was rejected, the old one serves */
	METRICS_RELOAD_COUNT
};

/* Histogram bucket bounds in microseconds (le); last bucket is +Inf. */
#define METRICS_LAT_BUCKETS 14

/* The decision histogram: 25 us .. 1 s, for a path that is sub-millisecond
 * when healthy. Its status label is the decision's, with shadow-deny apart
 * (as decisions_total counts it). */
#define METRICS_DEC_BUCKETS      15
#define METRICS_DEC_SHADOW_DENY  WINDOW_STATUS_COUNT
#define METRICS_DEC_STATUS_COUNT (WINDOW_STATUS_COUNT + 1)

/* The engines a link decides with (limiter_engine.h's ids, same order). */
enum metrics_engine {
	METRICS_ENGINE_SCRIPT = 0,
	METRICS_ENGINE_MODULE,
	METRICS_ENGINE_COUNT
};

/* What Redis's reply to a decision was: one that decided (an allow or a
 * deny), or an error (the script's or the module's). */
enum metrics_reply {
	METRICS_REPLY_DECISION = 0,
	METRICS_REPLY_ERROR,
	METRICS_REPLY_COUNT
};

/* live_decisions[] index: what a live override (ctl) made of a decision */
enum metrics_live {
	METRICS_LIVE_LIMITS = 0,       /* decided with its limits */
	METRICS_LIVE_BLOCK,            /* denied by a block, without Redis */
	METRICS_LIVE_COUNT
};

/* pool_refusals[][] index: the pool's reasons */
enum metrics_pool_refusal {
	METRICS_POOL_FULL = 0,         /* pool-full: no room */
	METRICS_POOL_SHARE,            /* pool-share: above its share, headroom left */
	METRICS_POOL_REFUSAL_COUNT
};

/* leases[] index: in-flight leases (inflight=), what became of them */
enum metrics_lease {
	METRICS_LEASE_TAKEN = 0,       /* an admission answered with a lease */
	METRICS_LEASE_RELEASED,        /* released while it ran */
	METRICS_LEASE_ENDED_EARLY,     /* released after its lease had ended */
	METRICS_LEASE_GONE,            /* released, but Redis had no such lease */
	METRICS_LEASE_RELEASE_FAILED,  /* no release reached Redis before its end */
	METRICS_LEASE_COUNT
};

/* settles[] index: what a settle (settle=, ratelimit-done) did */
enum metrics_settle {
	METRICS_SETTLE_CHARGED = 0,    /* the real cost above the reservation: charged more */
	METRICS_SETTLE_REFUNDED,       /* below it: the difference given back */
	METRICS_SETTLE_EVEN,           /* equal: nothing changed */
	METRICS_SETTLE_GONE,           /* Redis had no such reservation (settled twice, ended) */
	METRICS_SETTLE_FAILED,         /* not settled: Redis not reached in time, or refused it */
	METRICS_SETTLE_COUNT
};

struct metrics {
	/* decisions[policy index][status]; shadow-deny counted apart */
	_Atomic uint64_t decisions[CONFIG_MAX_POLICIES][WINDOW_STATUS_COUNT];
	_Atomic uint64_t shadow_denies[CONFIG_MAX_POLICIES];
	_Atomic uint64_t cache_denies[CONFIG_MAX_POLICIES];
	/* NOTIFY read -> ACK written, [policy][status incl. shadow-deny][bucket] */
	_Atomic uint64_t decision_latency[CONFIG_MAX_POLICIES][METRICS_DEC_STATUS_COUNT]
	                                 [METRICS_DEC_BUCKETS + 1];
	_Atomic uint64_t decision_latency_sum_us[CONFIG_MAX_POLICIES][METRICS_DEC_STATUS_COUNT];
	_Atomic uint64_t errors_by_reason[WINDOW_REASON_COUNT];
	_Atomic uint64_t redis_latency[METRICS_LAT_BUCKETS + 1];
	_Atomic uint64_t redis_latency_sum_us;
	_Atomic uint64_t redis_latency_count;
	_Atomic uint64_t redis_errors[METRICS_REDIS_ERR_COUNT];
	_Atomic uint64_t redis_reconnects;
	_Atomic uint64_t redis_connected;          /* gauge 0/1 */
	_Atomic uint64_t redis_unsafe_eviction;    /* gauge 0/1: a link evicts keys */
	_Atomic uint64_t redis_engine[METRICS_ENGINE_COUNT]; /* gauge 0/1: a ready link uses it */
	/* replies to decisions, by the engine that answered */
	_Atomic uint64_t redis_replies[METRICS_ENGINE_COUNT][METRICS_REPLY_COUNT];
	_Atomic uint64_t late_admissions;          /* admitted by Redis after the deadline */
	_Atomic uint64_t unknown_outcome;          /* in flight on a link that dropped */
	_Atomic uint64_t conn_accepted;
	_Atomic uint64_t conn_open;                /* gauge */
	_Atomic uint64_t conn_rejected;            /* over max-connections */
	_Atomic uint64_t frames_in[METRICS_FRAMES_IN];   /* by HAProxy frame type */
	_Atomic uint64_t frames_out[METRICS_OUT_COUNT];
	_Atomic uint64_t malformed[SPOP_ST_COUNT];
	_Atomic uint64_t notify_inflight;          /* gauge */
	_Atomic uint64_t config_reloads[METRICS_RELOAD_COUNT]; /* main thread's block */
	_Atomic uint64_t live_decisions[METRICS_LIVE_COUNT];
	_Atomic uint64_t unknown_plans;            /* a plan arg no policy has */
	_Atomic uint64_t live_overrides;           /* gauge, main's block: set by live.c */
	_Atomic uint64_t denied_dropped;           /* main's block: set by live.c */
	/* refused by their pool, by the policy (its pool= names the pool) */
	_Atomic uint64_t pool_refusals[CONFIG_MAX_POLICIES][METRICS_POOL_REFUSAL_COUNT];
	/* gauges, main's block, by the index of the configuration's pools: set
	 * by the live-control thread from Redis (live_pools.c) each second */
	_Atomic uint64_t pool_used[CONFIG_MAX_POOLS];
	_Atomic uint64_t pool_accounts[CONFIG_MAX_POOLS];
	_Atomic uint64_t leases[METRICS_LEASE_COUNT];
	_Atomic uint64_t settles[METRICS_SETTLE_COUNT];
};

static inline void metrics_add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
	                      memory_order_relaxed);
}

static inline void metrics_sub(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) - n,
	                      memory_order_relaxed);
}

/* Microseconds of CLOCK_MONOTONIC: durations that a wall-clock step cannot
 * bend. */
static inline uint64_t metrics_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Record one Redis call latency of <us> microseconds. */
void metrics_observe_redis_latency(struct metrics *m, uint64_t us);

/* Record one decision of <d> under policy index <policy>, <us> microseconds
 * from its NOTIFY read to its ACK written. */
void metrics_observe_decision(struct metrics *m, size_t policy, const struct window_decision *d,
                              uint64_t us);

/* Move the per-policy counters of <m> so that policy <j> gets what index
 * <from>[j] had (CONFIG_MAX_POLICIES: a new policy, starting at 0), for
 * j < <n>; indices from <n> on are zeroed. Only the block's writer may call
 * it (a reload that moved policies). */
void metrics_move_policies(struct metrics *m, const size_t *from, size_t n);

/* The process_* metrics' values, as read at scrape time (proc.h). */
struct metrics_process {
	uint64_t cpu_us;                /* user + system */
	uint64_t resident_bytes;
	uint64_t virtual_bytes;
	uint64_t open_fds;
	uint64_t max_fds;
	uint64_t start_time_us;         /* since the epoch */
};

/* Render <p> as the standard process_* families (no ratelimit_spoa_ prefix)
 * into <dst>/<cap>. Returns bytes written or -1 when <cap> is too small. */
int metrics_render_process(const struct metrics_process *p, char *dst, size_t cap);

/*
 * Render the sum of <n> thread blocks <ms> as Prometheus text exposition
 * into <dst>/<cap>, naming policies from <c>. Returns bytes written or -1
 * when <cap> is too small.
 */
int metrics_render(const struct metrics *const *ms, size_t n, const struct config *c,
                   const char *version, char *dst, size_t cap);

#endif /* SPOA_METRICS_H */
