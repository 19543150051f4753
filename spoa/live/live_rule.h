/*
 * live_rule - one live override (ratelimit-spoa ctl override) as plain
 * values: its encoding in Redis, the ceiling it must respect, and the
 * words an operator types for it. No I/O, no clock: callers pass times.
 *
 * Redis (every key in the hash-tag slot "{ctl}", so one Cluster node holds
 * them all and a script or a pipeline may touch several):
 *   LIVE_KEY_VERSION   a counter, INCR on every change (agents poll it)
 *   LIVE_KEY_RULES     a hash: field "<policy> <account>", value
 *                      "v1 <expires ms> <set ms> <block|l/w,l/w...> <who> <reason>"
 *                      (times on the Redis clock, unix ms; who and reason
 *                      percent-encoded, "-" when empty); the hash's own TTL
 *                      is its latest expiry
 *   LIVE_KEY_EVENTS    a list, newest first, capped at LIVE_EVENTS_MAX:
 *                      "<seq> <ms> <what> <policy> <account%> <who> <detail%>"
 *   LIVE_KEY_DENIED    + "<unix minute>": a sorted set, member "<policy> <account>",
 *                      score the denials agents counted in that minute
 */
#ifndef SPOA_LIVE_RULE_H
#define SPOA_LIVE_RULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "window.h"

#define LIVE_KEY_VERSION  "ratelimit-spoa:{ctl}:version"
#define LIVE_KEY_RULES    "ratelimit-spoa:{ctl}:overrides"
#define LIVE_KEY_EVENTS   "ratelimit-spoa:{ctl}:events"
#define LIVE_KEY_DENIED   "ratelimit-spoa:{ctl}:denied:"
#define LIVE_EVENTS_MAX   100
#define LIVE_DENIED_TTL_S 3900        /* a minute's key outlives --minutes 60 */
#define LIVE_WHO_MAX      128         /* "user@host", bytes */
#define LIVE_REASON_MAX   200         /* --reason, bytes */
#define LIVE_FIELD_MAX    (WINDOW_NAME_MAX + 1 + WINDOW_KEY_MAX)
#define LIVE_VALUE_MAX    (128 + WINDOW_MAX_WINDOWS * 32 + 3 * (LIVE_WHO_MAX + LIVE_REASON_MAX))
#define LIVE_FOR_MAX_MS   (7ull * 24 * 3600 * 1000)   /* --for at most 7 days */
#define LIVE_BLOCK_RETRY_MAX_S 3600   /* Retry-After of a block: its time left, capped */

struct live_rule {
	char policy[WINDOW_NAME_MAX + 1];
	size_t policy_len;
	char key[WINDOW_KEY_MAX + 1];
	size_t key_len;
	bool block;                   /* deny every request (no windows) */
	unsigned nwin;                /* the limits, when not a block */
	struct window_limit win[WINDOW_MAX_WINDOWS];
	int64_t expires_ms;           /* Redis clock, unix ms */
	int64_t set_ms;
	char who[LIVE_WHO_MAX + 1];   /* "" unknown */
	char reason[LIVE_REASON_MAX + 1];
};

/* "<limit>/<window>" (window "1s", "500ms", "1m", "1h" or a bare unit)
 * appended to <win>/<*nwin>: limit 1..1000000, window 1ms..24h, a new
 * length, at most WINDOW_MAX_WINDOWS. Returns 0 or -1 with <why>. */
int live_rule_parse_limit(const char *s, size_t len, struct window_limit *win,
                          unsigned *nwin, char *why, size_t cap);

/* "--for" durations: "<n>ms|s|m|h" or "<n>d", 1 s..7 days. Returns 0 or -1. */
int live_rule_parse_for(const char *s, size_t len, uint64_t *ms);

/* The hash field "<policy> <account>" of <r> into <dst>/<cap> (no NUL
 * counted). Returns its length or -1. */
int live_rule_field(const struct live_rule *r, char *dst, size_t cap);

/* Fill <r>'s policy and key from hash field <f>/<len>. Returns 0 or -1. */
int live_rule_parse_field(const char *f, size_t len, struct live_rule *r);

/* The value of <r> into <dst>/<cap>, NUL-terminated. Returns its length or
 * -1 when it does not fit. */
int live_rule_encode(const struct live_rule *r, char *dst, size_t cap);

/* Parse value <v>/<len> into <r> (policy and key untouched). Returns 0, or
 * -1 when it is not one this version reads. */
int live_rule_decode(const char *v, size_t len, struct live_rule *r);

/* Limits <r> in the text form "3/1s,100/1h", or "block". Returns length or -1. */
int live_rule_format_limits(const struct live_rule *r, char *dst, size_t cap);

/*
 * May <r> apply to its account under <p>? A block always may (denying is
 * never looser). Limits must have the shape of a config override (the
 * policy's precision= divides them) and stay under the ceiling: the
 * policy's live-max windows when configured, else the limits configured for
 * that account (its config override, or the policy's). Every ceiling
 * window must be implied by some window of <r>: limit * ceil(ceiling window
 * / its window) <= the ceiling's limit (any span of the ceiling's length is
 * covered by that many of its windows). Returns 0, or -1 with <why>.
 */
int live_rule_check(const struct window_policy *p, const struct live_rule *r,
                    char *why, size_t cap);

/* The bucket of <r> on GCRA policy <p>: its limit (as a config override's
 * default burst), at most the ceiling's burst (a live-max window's: its
 * limit). A live override of a GCRA policy is one rate: live_rule_check()
 * also refuses one faster than the ceiling's. Whoever applies <r>'s window
 * sets its .burst to this. */
uint64_t live_rule_gcra_burst(const struct window_policy *p, const struct live_rule *r);

/* Percent-encode <s>/<len> (space, '%', controls and bytes >= 0x7f) into
 * <dst>/<cap>, "-" when empty, NUL-terminated. Returns its length or -1. */
int live_rule_escape(const char *s, size_t len, char *dst, size_t cap);

/* Reverse of live_rule_escape() into <dst>/<cap> NUL-terminated. Returns
 * its length or -1 (a bad escape, no room). */
int live_rule_unescape(const char *s, size_t len, char *dst, size_t cap);

#endif /* SPOA_LIVE_RULE_H */
