/*
 * denied - denials per (policy, account) added up in the agent and
 * written to Redis about once a second (ctl top-denied): one pipelined
 * ZINCRBY per account to the minute's sorted set, never a Redis write per
 * denial. Workers note (denied.c, no Redis); the live-control thread
 * flushes (denied_flush.c). Bounded: at most
 * DENIED_SHARD_MAX accounts per shard (DENIED_SHARDS of them, by a hash of
 * the account) between two flushes, the rest counted as dropped.
 */
#ifndef SPOA_DENIED_H
#define SPOA_DENIED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "live_rule.h"

#define DENIED_SHARDS 8u
#define DENIED_SLOTS  128u              /* a shard's table (open addressing) */
#define DENIED_SHARD_MAX (DENIED_SLOTS * 3 / 4) /* accounts in it: probes stay short */
/* "<policy> <account>", or "<policy>/<pool reason> <account>" */
#define DENIED_MEMBER_MAX (LIVE_FIELD_MAX + 16)

struct denied;
struct redis_sync;

/* One account's count in a shard's table. */
struct denied_entry {
	uint32_t count;                 /* 0: free */
	uint16_t len;
	char member[DENIED_MEMBER_MAX]; /* "<policy>[/<pool reason>] <account>" */
};

/* The caller owns the result (denied_free). NULL when out of memory. */
struct denied *denied_new(void);
void denied_free(struct denied *d);

/* Count one denial of <key> under <policy> (any thread; a short lock on
 * one of the shards; memory taken at a shard's first denial). */
void denied_note(struct denied *d, const char *policy, size_t policy_len, const char *key,
                 size_t key_len);

/* As denied_note(), for a refusal by the policy's pool: counted apart, as
 * policy "<policy>/<reason>" (<reason>: "pool-full" or "pool-share"), which
 * ctl top-denied shows so. */
void denied_note_pool(struct denied *d, const char *policy, size_t policy_len,
                      const char *reason, const char *key, size_t key_len);

/* Write what was counted since the last flush (the live-control thread;
 * denied_flush.c). Returns the accounts written, 0 when there was nothing,
 * -1 with <err> (those counts are dropped). */
int denied_flush(struct denied *d, struct redis_sync *rs, char *err, size_t errlen);

/* For the flusher: take every busy shard's table (DENIED_SLOTS entries
 * each, count 0 for a free one) into <taken> (NULL for the others), giving
 * the shard an empty one. Returns the accounts taken. The tables are the
 * caller's until denied_give_back(). */
size_t denied_take(struct denied *d, struct denied_entry *taken[DENIED_SHARDS]);

/* Give back what denied_take() took (kept for the next swap or freed);
 * with <lost> (the write failed), their counts add to the dropped ones. */
void denied_give_back(struct denied *d, struct denied_entry *taken[DENIED_SHARDS], bool lost);

/* Denials not recorded: a full table, a failed flush. */
uint64_t denied_dropped(const struct denied *d);

#endif /* SPOA_DENIED_H */
