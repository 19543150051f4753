/*
 * limiter_link - one connection to one Redis server (the only one, a
 * sentinel's primary, or a cluster primary): a struct limiter_link
 * (limiter_int.h) and its life.
 *
 * IDLE (waiting to retry) -> CONNECTING (TCP, then AUTH, SELECT, ROLE (not
 * for cluster links: a seed may be a replica), the eviction watch's CONFIG
 * GET maxmemory-policy and INFO stats, and each engine's part (the
 * module's probe, the script's SCRIPT LOAD: limiter_engine.h) pipelined)
 * -> READY (every engine's part through). Anything else (a replica
 * included) goes back to IDLE with exponential backoff and jitter. Every
 * attempt starts from the link's own retry timer (limiter_link_start():
 * due now), never inside a caller: a decision never connects. A READY link
 * whose Redis may evict keys refuses calls (redis-evicts-keys) unless
 * redis-allow-eviction is set. Our own timer bounds CONNECTING; a READY
 * link on which nothing has been answered for max(1 s, 10 x timeout) while
 * calls wait (a frozen Redis) is dropped at a call's deadline
 * (limiter_link_check_stall()), so new calls are answered "unavailable" at
 * once instead of piling up in hiredis's output buffer.
 *
 * Link structs are never freed before limiter_free(): a dropped link is
 * only retired (late hiredis callbacks compare their context to link->ac).
 * The gauges (redis_connected, redis_unsafe_eviction, redis_engine) follow
 * the links (limiter_health.h).
 */
#ifndef SPOA_LIMITER_LINK_H
#define SPOA_LIMITER_LINK_H

#include "limiter_health.h"
#include "limiter_int.h"

/* A link to <host>:<port> for <l>, reused or new, owned by <l>; does not
 * connect. NULL when LIMITER_LINKS_MAX are in use or memory runs out. */
struct limiter_link *limiter_link_get(struct limiter *l, const char *host, int port,
                                      bool is_unix);
/* The one link of <l> (l->links.main: redis://, unix://, sentinel://) to
 * <host>:<port>, shown as <addr>, started. NULL when memory runs out. */
struct limiter_link *limiter_link_start_main(struct limiter *l, const char *host, int port,
                                             bool is_unix, const char *addr);
/* The links of <l>, before the first: <seed> for the backoff's jitter. */
void limiter_links_init(struct limiter *l, uint64_t seed);
/* Retire every link of <l> in use (backend stop). */
void limiter_links_retire_all(struct limiter *l, const char *why);
/* A reload on the same Redis: reload a changed script, ask a changed
 * redis-engine again, ask the eviction policy again, on each ready link. */
void limiter_links_reconfigure(struct limiter *l, bool script_changed, bool engine_changed);
/* Free the link structs of <l> (limiter_free(), after the retire). */
void limiter_links_free(struct limiter *l);
/* Can any link of <l> be ready within <within_us>? */
bool limiter_links_soon(const struct limiter *l, int64_t within_us);
/* A wait in [<d>/2, <d>] ms from <l>'s jitter generator (l->links.rng). */
unsigned limiter_link_jitter(struct limiter *l, unsigned d);
/* Point <k> at <host>:<port> (<is_unix>: <host> is a socket path). */
void limiter_link_set_target(struct limiter_link *k, const char *host, int port, bool is_unix);
/* Connect <k> (and run its setup) on its own retry timer, due now: never
 * inside the caller. */
void limiter_link_start(struct limiter_link *k);
/* Point <k> at <host>:<port> (TCP) and connect there on its own time;
 * <fresh>: a new primary, the backoff starts over. */
void limiter_link_move(struct limiter_link *k, const char *host, int port, bool fresh);
/* Can <k> be ready within <within_us> (ready, connecting, or its next
 * attempt due by then)? */
bool limiter_link_soon(const struct limiter_link *k, int64_t within_us);
/* Close <k>'s connection now (its calls come back "unavailable"). */
void limiter_link_drop(struct limiter_link *k, const char *why);
/* Stop using <k>: drop it and stop its timers; the struct stays. */
void limiter_link_retire(struct limiter_link *k, const char *why);
/* Stop <k>'s own lookup in flight, if any, and the topology's for it. */
void limiter_link_stop_resolving(struct limiter_link *k);
/* Forget <k>'s context and plan a retry. */
void limiter_link_lost(struct limiter_link *k);
/* Arm <k>'s retry timer (backoff with jitter). */
void limiter_link_schedule_retry(struct limiter_link *k);
/* Count and log one failed connect attempt of <k>. */
void limiter_link_log_failure(struct limiter_link *k, const char *why);
/* hiredis now holds one more call on <k>, or <n> more (a batch). */
void limiter_link_hold(struct limiter_link *k);
void limiter_link_hold_n(struct limiter_link *k, unsigned n);
/* hiredis handed back <n> calls held on <k>. */
void limiter_link_release(struct limiter_link *k, unsigned n);
/* Write what hiredis holds for <k> now (ready links only), not on the
 * write watcher's next wakeup; only from a callback of the loop's own. */
void limiter_link_write_now(struct limiter_link *k);
/* A call's deadline passed on <k>: drop it if it stalled (nothing
 * answered for the stall limit while calls wait). */
void limiter_link_check_stall(struct limiter_link *k);
/* A topology's part of <k>'s attempt: under way (CONNECTING, the connect
 * timer armed), or failed (counted, backing off). */
void limiter_link_await(struct limiter_link *k);
void limiter_link_fail(struct limiter_link *k);
/* One engine's part of <k>'s setup is through: the last one makes <k>
 * ready (a ready link stays as it is). */
void limiter_link_setup_done(struct limiter_link *k);
/* One more failed step of <k>'s attempts; true for the first of a streak. */
bool limiter_link_count_failure(struct limiter_link *k);

#endif /* SPOA_LIMITER_LINK_H */
