/*
 * live_pools - the pools' gauges (ratelimit_spoa_pool_used and
 * _accounts_active), read from Redis by the live-control thread once a
 * second: per pool the count of its log as its next decision counts it
 * (two O(log n) reads and Redis's clock) and HLEN of its hash. Never on a
 * decision's path.
 */
#ifndef SPOA_LIVE_POOLS_H
#define SPOA_LIVE_POOLS_H

#include <stddef.h>

struct config;
struct metrics;
struct redis_sync;

/* Read every pool of <cfg> through <rs> into <m>'s pool gauges (indexed
 * like cfg->pools). Borrows all. Returns 0, or -1 with <err> at the first
 * pool that could not be read (its gauges and the next ones keep their
 * last values). */
int live_pools_read(const struct config *cfg, struct redis_sync *rs, struct metrics *m,
                    char *err, size_t errlen);

#endif /* SPOA_LIVE_POOLS_H */
