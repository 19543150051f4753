/*
 * ctl_keys - the Redis keys of one account under a policy, as the agent
 * writes them (window_build_args(): the one key builder), for ctl's show
 * and reset. The one place that maps a policy to its key forms: an
 * algorithm with keys of its own adds its case here. Pure.
 */
#ifndef SPOA_CTL_KEYS_H
#define SPOA_CTL_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#include "window.h"

/* A key's layout, which says how show reads it. */
enum ctl_key_kind {
	CTL_KEY_LOG = 0,               /* sorted set: one entry per admission */
	CTL_KEY_BUCKETS,               /* hash: units per bucket end (precision=) */
	CTL_KEY_GCRA,                  /* string: a token bucket's "<tat>:<frac>" */
	CTL_KEY_QUOTA,                 /* string: a calendar quota's "<end>:<units>" */
	CTL_KEY_KIND_COUNT
};

struct ctl_key {
	char name[WINDOW_REDIS_KEY_MAX + 16];
	size_t len;
	enum ctl_key_kind kind;
	struct window_limit lim;       /* the window it counts */
	bool legacy;                   /* the 1.0.x one-window form (an upgrade's) */
};

/* All the key forms any of these limits may have written: the policy's,
 * a config override's, a live override's and each of its (at most 32,
 * config.h's CONFIG_MAX_PLANS) plans' */
#define CTL_KEYS_MAX ((3 + 32) * WINDOW_MAX_WINDOWS)

/*
 * The keys of <key>/<key_len> under <p> when its limits are <win>/<nwin>,
 * one per window (with one window, also its 1.0.x form), appended to <out> (room for CTL_KEYS_MAX) unless already
 * there. Returns how many <out> holds then, or -1 for a bad key.
 */
int ctl_keys_for(const struct window_policy *p, const struct window_limit *win, unsigned nwin,
                 const char *key, size_t key_len, struct ctl_key *out, size_t have);

#endif /* SPOA_CTL_KEYS_H */
