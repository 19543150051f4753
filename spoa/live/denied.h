/*
 * denied - denials per (policy, account) added up in the agent and
 * written to Redis about once a second (ctl top-denied): one pipelined
 * ZINCRBY per account to the minute's sorted set, never a Redis write per
 * denial. Workers note; the live-control thread flushes. Bounded: at most
 * DENIED_SHARD_MAX accounts per shard (DENIED_SHARDS of them, by a hash of
 * the account) between two flushes, the rest counted as dropped.
 */
#ifndef SPOA_DENIED_H
#define SPOA_DENIED_H

#include <stddef.h>
#include <stdint.h>

#define DENIED_SHARDS 8u
#define DENIED_SLOTS  128u              /* a shard's table (open addressing) */
#define DENIED_SHARD_MAX (DENIED_SLOTS * 3 / 4) /* accounts in it: probes stay short */

struct denied;
struct redis_sync;

/* The caller owns the result (denied_free). NULL when out of memory. */
struct denied *denied_new(void);
void denied_free(struct denied *d);

/* Count one denial of <key> under <policy> (any thread; a short lock on
 * one of the shards; memory taken at a shard's first denial). */
void denied_note(struct denied *d, const char *policy, size_t policy_len, const char *key,
                 size_t key_len);

/* Write what was counted since the last flush (the live-control thread).
 * Returns the accounts written, 0 when there was nothing, -1 with <err>
 * (those counts are dropped). */
int denied_flush(struct denied *d, struct redis_sync *rs, char *err, size_t errlen);

/* Denials not recorded: a full table, a failed flush. */
uint64_t denied_dropped(const struct denied *d);

#endif /* SPOA_DENIED_H */
