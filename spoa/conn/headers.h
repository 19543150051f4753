/*
 * headers - the field values of draft-ietf-httpapi-ratelimit-headers-11 that
 * the agent sends HAProxy preformatted (ACK variables policy_hdr and
 * ratelimit_hdr), so haproxy.cfg copies them and knows no window itself.
 * Pure formatting: no I/O, no allocation.
 *
 *   RateLimit-Policy: "transfer";q=3;w=1                      (one window)
 *   RateLimit-Policy: "api-1s";q=10;w=1, "api-1h";q=1000;w=3600   (several)
 *   RateLimit:        "api-1h";r=12;t=1800                    (deciding window)
 *
 *   RateLimit-Policy: "transfer";q=3;w=1, "pool-transfers";q=5;w=1  (pooled)
 *   RateLimit:        "pool-transfers";r=0;t=1                (the pool decided)
 *
 * A policy with one window names its item after the policy; with several,
 * each item is "<policy>-<window>" (the window as the config writes it:
 * 1s, 1h, 500ms), so every item name is distinct and the RateLimit item
 * names the RateLimit-Policy item that decided.
 */
#ifndef SPOA_HEADERS_H
#define SPOA_HEADERS_H

#include <stddef.h>
#include <stdint.h>

#include "window.h"

/* One item: quote, name, "-", window, quote, ";q=" 20 digits ";w=" 20 digits ", " */
#define HEADERS_ITEM_MAX      (WINDOW_NAME_MAX + 24 + 4 + 20 + 3 + 20 + 2)
/* (the windows' items, then a pool's: "pool-<name>" is shorter than the
 * longest "<policy>-<window>") */
#define HEADERS_POLICY_MAX    ((WINDOW_MAX_WINDOWS + 1) * HEADERS_ITEM_MAX + 1)
#define HEADERS_RATELIMIT_MAX (HEADERS_ITEM_MAX + 1)

/* Whole seconds of a window for the draft's "w" and the window variable:
 * rounded up, at least 1 (a 500ms window is announced as w=1). */
int64_t headers_window_seconds(uint64_t window_ms);

/* Write the RateLimit-Policy value listing every window of <lim>/<nwin>
 * (borrowed) under policy name <name>/<name_len> into <dst>/<cap>, NUL
 * included. Returns the length, or -1 (nothing usable) when it does not fit
 * or the input is empty. */
int headers_format_policy(const char *name, size_t name_len,
                          const struct window_limit *lim, unsigned nwin,
                          char *dst, size_t cap);

/* Write the RateLimit value for window <idx> of <lim>/<nwin> (borrowed):
 * remaining <remaining>, reset in <reset_s> seconds. Returns the length,
 * or -1 when it does not fit, <idx> is out of range or a count is negative. */
int headers_format_ratelimit(const char *name, size_t name_len,
                             const struct window_limit *lim, unsigned nwin,
                             unsigned idx, int64_t remaining, int64_t reset_s,
                             char *dst, size_t cap);

/* Append ", " and pool <pool>'s item ("pool-<name>";q=<limit>;w=<s>) to the
 * RateLimit-Policy value of <len> bytes at <dst>/<cap>, NUL included: a
 * pool is its own item, so a client tells "you are out" (the policy's
 * items) from "the service is full" (the pool's). Returns the new length,
 * or -1 when it does not fit. */
int headers_append_pool_policy(const struct window_pool *pool, char *dst, size_t cap, size_t len);

/* Write the RateLimit value of pool <pool> (its item, remaining
 * <remaining>, reset in <reset_s> seconds) into <dst>/<cap>. Returns the
 * length, or -1 when it does not fit or a count is negative. */
int headers_format_pool_ratelimit(const struct window_pool *pool, int64_t remaining,
                                  int64_t reset_s, char *dst, size_t cap);
/* The variables an ACK may set (docs/protocol.md), in the order of
 * headers_parse_vars()'s names. */
enum headers_var {
	HEADERS_VAR_STATUS,
	HEADERS_VAR_LIMIT,
	HEADERS_VAR_REMAINING,
	HEADERS_VAR_RESET,
	HEADERS_VAR_RETRY_AFTER,
	HEADERS_VAR_REASON,
	HEADERS_VAR_WINDOW,
	HEADERS_VAR_POLICY_HDR,
	HEADERS_VAR_RATELIMIT_HDR,
	HEADERS_VAR_COUNT
};
#define HEADERS_VAR_BIT(v) (1u << (v))
#define HEADERS_VARS_ALL   ((1u << HEADERS_VAR_COUNT) - 1u)

/* The variables a message's "vars" argument <s>/<len> (borrowed) names:
 * names separated by spaces, commas, '+' or '|', "ietf" standing for
 * status, retry_after, reason, policy_hdr and ratelimit_hdr. Returns a mask
 * of HEADERS_VAR_BIT()s, always with status (the edge cannot tell allow
 * from deny without it); unknown names are left out, so an edge newer than
 * the agent still gets the variables this agent knows. */
unsigned headers_parse_vars(const char *s, size_t len);

#endif /* SPOA_HEADERS_H */
