/*
 * live - the live overrides (ratelimit-spoa ctl override) in the agent:
 * the table the workers read, and the thread that keeps it in step with
 * Redis. The thread GETs LIVE_KEY_VERSION every LIVE_POLL_MS on its own
 * connection (redis_sync) and, when it changed, reads the rules and the
 * events (which it logs: who, what, when, why); each second it also
 * flushes the denial counts (denied.h). A decision never waits for it:
 * it reads the table under a short lock, and only when the table is not
 * empty. Each rule ends at its expiry on the agent's monotonic clock
 * (converted from Redis's when read), even when a poll is late.
 */
#ifndef SPOA_LIVE_H
#define SPOA_LIVE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "window.h"

#define LIVE_POLL_MS 500

struct live;
struct denied;
struct metrics;

/* What a live override makes of one decision. */
enum live_verdict {
	LIVE_NONE = 0,                 /* none applies: the config's limits */
	LIVE_LIMITS,                   /* decide with its limits (<out> filled) */
	LIVE_BLOCK,                    /* denied without Redis (<d> filled) */
	LIVE_VERDICT_COUNT
};

/* Start the thread on <cfg> (copied). <metrics> (main's block: the gauge)
 * and <denied> (flushed each second) are borrowed, may be NULL. The caller
 * owns the result: live_free(). NULL with <err>. */
struct live *live_new(const struct config *cfg, struct metrics *metrics, struct denied *denied,
                      char *err, size_t errlen);

/* Bumped each time the thread sees a change in Redis (an override set,
 * replaced or removed, a reset): workers then empty their deny caches. */
uint64_t live_epoch(const struct live *lv);

/* A reload: the thread uses <cfg> (copied) from its next poll. 0 or -1. */
int live_reconfigure(struct live *lv, const struct config *cfg);

/* Stop the thread (at most one poll's wait) and free everything. */
void live_free(struct live *lv);

/*
 * The live override of <key> under <p>, if one is in effect and within the
 * ceiling of <p> (live_rule_check): LIMITS fills <out> with <p> carrying its
 * limits (no config overrides), BLOCK fills <d> with the deny (reason
 * blocked, Retry-After its time left, at most LIVE_BLOCK_RETRY_MAX_S).
 * Any worker thread; <lv> may be NULL.
 */
enum live_verdict live_apply(struct live *lv, const struct window_policy *p, const char *key,
                             size_t key_len, struct window_policy *out,
                             struct window_decision *d);

#endif /* SPOA_LIVE_H */
