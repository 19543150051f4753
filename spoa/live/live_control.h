/*
 * live_control - the live-control thread: keeps the workers' table of live
 * overrides (live.h) in step with Redis. It GETs LIVE_KEY_VERSION every
 * LIVE_POLL_MS on its own connection (redis_sync) and, when it changed,
 * reads the rules (handed to the table: live_publish) and the events (which
 * it logs: who, what, when, why); each second it also flushes the denial
 * counts (denied_flush.c). A decision never waits for it. One per process,
 * owned by main; never on a decision's path.
 */
#ifndef SPOA_LIVE_CONTROL_H
#define SPOA_LIVE_CONTROL_H

#include <stddef.h>

#define LIVE_POLL_MS 500

struct config;
struct denied;
struct live;
struct live_control;
struct metrics;

/* Start the thread on <cfg> (copied), filling <live>. <live> is borrowed
 * until live_control_free(); <metrics> (main's block: the gauges) and
 * <denied> (flushed each second) are borrowed, may be NULL. The caller
 * owns the result: live_control_free(). NULL with <err>. */
struct live_control *live_control_new(const struct config *cfg, struct live *live,
                                      struct metrics *metrics, struct denied *denied,
                                      char *err, size_t errlen);

/* A reload: the thread uses <cfg> (copied) from its next poll. 0 or -1. */
int live_control_reconfigure(struct live_control *lc, const struct config *cfg);

/* Stop the thread (at most one poll's wait) and free what it owns (NULL:
 * nothing); the table stays its owner's. */
void live_control_free(struct live_control *lc);

#endif /* SPOA_LIVE_CONTROL_H */
