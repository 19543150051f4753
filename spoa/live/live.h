/*
 * live - the live overrides (ratelimit-spoa ctl override) as the workers
 * read them: one table, looked up on each decision (live_apply()) under a
 * short read lock, and only when it is not empty. No Redis, no thread: the
 * live-control thread (live_control.h) reads Redis and hands this table
 * each new set of rules (live_publish()). Each rule ends at its expiry on
 * the agent's monotonic clock, even when a poll is late.
 */
#ifndef SPOA_LIVE_H
#define SPOA_LIVE_H

#include <stddef.h>
#include <stdint.h>

#include "live_rule.h"
#include "window.h"

struct live;

/* What a live override makes of one decision. */
enum live_verdict {
	LIVE_NONE = 0,                 /* none applies: the config's limits */
	LIVE_LIMITS,                   /* decide with its limits (<out> filled) */
	LIVE_BLOCK,                    /* denied without Redis (<d> filled) */
	LIVE_VERDICT_COUNT
};

/* One rule as the workers read it. */
struct live_entry {
	char field[LIVE_FIELD_MAX];    /* "<policy> <account>": the sort key */
	size_t field_len;
	struct live_rule rule;
	uint64_t expires_us;           /* the agent's monotonic clock */
};

/* An empty table. The caller owns the result: live_free(). NULL when out
 * of memory. */
struct live *live_new(void);

/* Free <lv> and its table (NULL: nothing); no reader may be left. */
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

/* Bumped at each live_publish() that says so (an override set, replaced
 * or removed, a reset): workers then empty their deny caches. */
uint64_t live_epoch(const struct live *lv);

/* For the one writer (the live-control thread): replace the table with the
 * <n> entries of <tab>, sorted by live_entry_cmp(), and bump the epoch when
 * <stale> (what the workers cached may no longer hold). <tab> (calloc'ed,
 * or NULL when <n> is 0) passes to <lv>, which frees the table it replaces;
 * the writer may keep reading <tab> until its next call. */
void live_publish(struct live *lv, struct live_entry *tab, size_t n, bool stale);

/* The table's order (qsort/bsearch of struct live_entry): bytewise by
 * field, a shorter prefix first. */
int live_entry_cmp(const void *a, const void *b);

#endif /* SPOA_LIVE_H */
