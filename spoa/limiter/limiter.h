/*
 * limiter - asks Redis for decisions: hiredis async on one thread's libev loop.
 *
 * One struct limiter per worker thread, never shared. It connects (and
 * reconnects with backoff), asks each Redis with its engine (redis-engine:
 * the module's RATELIMIT.DECIDE, or the script by EVALSHA, EVAL after a
 * NOSCRIPT), and enforces its own per-call deadline (hiredis 0.14 has none).
 *
 * Callback contract: limiter_check() either returns -1 and never calls <cb>,
 * or returns 0 and calls <cb> exactly once: on the reply, on the deadline, on
 * disconnect, or from limiter_free(); never before limiter_check() has
 * returned (an answer given inside it is queued). limiter_check() never
 * connects: links connect, reconnect and set up on their own timers. A
 * decision whose link is not ready yet (start-up, a reconnect) waits for
 * it, within its deadline, on a bounded list (LIMITER_WAIT_MAX), and is
 * answered with the policy's error decision (redis-unavailable) when the
 * deadline passes first; when the link cannot be ready by then (its next
 * attempt comes later) or the list is full, that answer comes at once (on
 * the next loop iteration).
 */
#ifndef SPOA_LIMITER_H
#define SPOA_LIMITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "window.h"

struct ev_loop;
struct limiter;
struct metrics;

typedef void (*limiter_cb)(void *arg, const struct window_decision *d);
struct stored_settle;
/* A settle's first answer: what the windows have left (<s> borrowed for
 * the call), or NULL when Redis gave none (it is still tried again). */
typedef void (*limiter_settle_cb)(void *arg, const struct stored_settle *s);

/* redis-engine: how Redis decides. Checked at every (re)connect of a link
 * (COMMAND INFO ratelimit.decide). Same order as config.h's
 * config_redis_engine. */
enum limiter_engine_mode {
	LIMITER_ENGINE_AUTO = 0,        /* RATELIMIT.DECIDE when Redis has it, else the script */
	LIMITER_ENGINE_ONLY_SCRIPT,     /* the script (lua/sliding_window.lua) always */
	LIMITER_ENGINE_ONLY_MODULE,     /* the module; a Redis without it cannot decide */
	LIMITER_ENGINE_MODE_COUNT
};

struct limiter_settings {
	const char *redis_url;          /* redis://, unix://, cluster://, sentinel:// (redis_url.h) */
	uint64_t timeout_ms;            /* per-call deadline */
	unsigned batch;                 /* decisions per script call (0, 1: one each;
	                                 * never on cluster://) */
	const char *script;             /* Lua source, borrowed until limiter_free() */
	size_t script_len;
	struct metrics *metrics;        /* this thread's counters, may be NULL; set once by
	                                 * limiter_new() (a reconfigure keeps them) */
	bool allow_eviction;            /* decide even when Redis may evict keys */
	enum limiter_engine_mode engine;    /* redis-engine, default auto */
	bool standby;                   /* prepared for a reload: leave the gauges alone */
	const struct config_tls *tls;   /* redis-tls-* (copied), for a TLS URL; may be NULL */
	/* The config's policy table, in metrics index order, so a deny answered
	 * from the local cache is counted in cache_denies[index]. Only the names
	 * are read (copied) by limiter_new()/limiter_reconfigure(); may be NULL. */
	const struct window_policy *policies;
	size_t npolicies;
	/* count and write the 1.0.x one-window keys beside the new ones while
	 * an upgrade needs them (limiter.c: limiter_legacy_on) */
	bool legacy_keys;
};

/* Create a limiter on <loop>; its links connect from the loop's first
 * iteration on (decisions made before wait for them). Returns NULL with <err>
 * on a bad URL or allocation failure. Caller frees with limiter_free(). */
struct limiter *limiter_new(struct ev_loop *loop, const struct limiter_settings *s,
                            char *err, size_t errlen);

/* Ask for one decision. <p> and <key> are borrowed only during the call. */
int limiter_check(struct limiter *l, const struct window_policy *p,
                  const char *key, size_t key_len, uint64_t cost,
                  limiter_cb cb, void *arg);

/* Replace the Redis settings (reload): reconnects if the URL changed.
 * Returns 0 or -1 with <err>. */
int limiter_reconfigure(struct limiter *l, const struct limiter_settings *s,
                        char *err, size_t errlen);

/* Turn the local deny cache on (the default) or off, with room for <size>
 * entries (deny-cache-size); off, or a new size, also empties it. An
 * account denied until t is answered "deny" locally until t, without
 * Redis (never for shadow policies). */
void limiter_set_deny_cache(struct limiter *l, bool on, unsigned size);

/* Forget every account the deny cache holds (a ctl reset or override
 * changed what Redis would answer); the cache stays on. */
void limiter_forget_denies(struct limiter *l);

/* Give back memory a burst left: idle pool calls and idle batches above a
 * low-water mark, an empty answer queue, and the deny cache's table once
 * none of its entries is live. Cheap when there is nothing to free; call
 * it on a timer, never from a limiter_cb. Returns how many blocks were
 * freed. */
unsigned limiter_trim(struct limiter *l);

/* Does <url> (with the secrets the environment gives now) name the Redis
 * and credentials <l> runs on? 1 yes, 0 no (a reload must connect anew),
 * -1 with <err> when it is invalid. */
int limiter_same_redis(const struct limiter *l, const char *url, char *err, size_t errlen);

/* Can <l> decide now: every link it needs is set up (AUTH, SELECT, ROLE,
 * eviction check, script) and none evicts keys unless allowed? If not,
 * <why> says what failed last. */
bool limiter_ready(const struct limiter *l, char *why, size_t whylen);

/* A standby limiter (being prepared by a reload, or draining after one)
 * leaves the connected and eviction gauges alone; leaving standby writes
 * them from its own state. */
void limiter_set_standby(struct limiter *l, bool standby);

/* The Redis address of <l> for logs (never a secret); borrowed from <l>. */
const char *limiter_addr(const struct limiter *l);

/* Calls still waiting for a reply (a limiter retired by a reload is freed
 * once this is 0). */
unsigned limiter_pending(const struct limiter *l);

/* Answer every pending call with an error decision, disconnect, free. */
void limiter_free(struct limiter *l);

/* Release lease <lease> (window_decision.lease of an admission) of account
 * <key> under inflight= policy <p> (limiter_lease.c): sent to Redis now or
 * when a link is ready, tried again until the lease would have ended,
 * counted in the lease metrics either way; nothing answers. Borrows its
 * arguments. Returns 0, or -1 (not an inflight= policy, a bad key or lease,
 * out of memory, shutting down). */
int limiter_release(struct limiter *l, const struct window_policy *p, const char *key,
                    size_t key_len, const char *lease);

/* Settle reservation <lease> (window_decision.lease of an admission) of
 * account <key> under settle= policy <p> at <real> units (limiter_lease.c):
 * sent and tried again as a release is, until the reservation's record
 * would have ended (lease=); logged when it cannot be. <cb> (may be NULL)
 * is called once, with <arg>, at the first answer or failure (a stored_settle
 * whose "known" says whether Redis said what the windows have left; NULL on
 * a failure, perhaps before this returns), never after limiter_free().
 * Borrows its arguments. Returns 0, or -1 (not a settle= policy, a bad key
 * or lease, out of memory, shutting down; <cb> then never called). */
int limiter_settle(struct limiter *l, const struct window_policy *p, const char *key,
                   size_t key_len, const char *lease, uint64_t real, limiter_settle_cb cb,
                   void *arg);

#endif /* SPOA_LIMITER_H */
