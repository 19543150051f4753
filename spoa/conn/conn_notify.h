/*
 * conn_notify - the NOTIFY side of a connection, above the transport
 * (conn.h): what a worker hands its connections so that a NOTIFY becomes
 * decisions and an ACK. The transport never sees this: it reaches the
 * NOTIFY side through env->upper (conn_notify_upper) and env->upper_ctx
 * (a struct conn_notify_env).
 *
 * Decisions come from a limiter through a small ops table, so the NOTIFY
 * side can be driven by a fake in tests.
 */
#ifndef SPOA_CONN_NOTIFY_H
#define SPOA_CONN_NOTIFY_H

#include <stddef.h>
#include <stdint.h>

#include "conn.h"
#include "limiter.h"
#include "window.h"

struct config;
struct denied;
struct live;
struct metrics;
struct conn_notify;
struct conn_req;

/* How a connection asks for one decision; same contract as limiter_check(). */
struct limiter_ops {
	int (*check)(void *ctx, const struct window_policy *p, const char *key,
	             size_t key_len, uint64_t cost, limiter_cb cb, void *arg);
	/* a "ratelimit-done" message's release; same contract as
	 * limiter_release(); may be NULL (releases ignored) */
	int (*release)(void *ctx, const struct window_policy *p, const char *key,
	               size_t key_len, const char *lease);
	/* a "ratelimit-done" message's settle (its cost); same contract as
	 * limiter_settle(); may be NULL (settles ignored) */
	int (*settle)(void *ctx, const struct window_policy *p, const char *key,
	              size_t key_len, const char *lease, uint64_t real, limiter_settle_cb cb,
	              void *arg);
	void *ctx;
};

/* Per-config-generation reference held by requests in flight, so a reload
 * never frees a policy that a pending decision still points to. */
struct conn_cfg_ref {
	const struct config *cfg;
	unsigned refs;                  /* requests in flight + 1 while current */
	void (*release)(struct conn_cfg_ref *ref);  /* called when refs hits 0 */
};

/* What a worker shares with its connections' NOTIFY sides: owned by the
 * worker, set before its first connection; the pools are conn_notify.c's. */
struct conn_notify_env {
	struct conn_cfg_ref *cfg;       /* current generation */
	struct limiter_ops ops;
	struct metrics *metrics;        /* decisions counted, may be NULL */
	struct live *live;              /* live overrides (live.h), may be NULL */
	struct denied *denied;          /* denial counts (denied.h), may be NULL */
	/* conn_notify.c's own */
	struct conn_req *free_reqs;     /* recycled requests */
	unsigned nfree_reqs;
	struct conn_notify *detached;   /* closed connections' requests still in flight */
};

/* The NOTIFY side: what a worker puts in env->upper, with its struct
 * conn_notify_env in env->upper_ctx. */
extern const struct conn_upper conn_notify_upper;

/* Free the recycled requests above a low-water mark (after a burst).
 * Returns how many were freed. */
unsigned conn_notify_trim(struct conn_notify_env *ne);

#endif /* SPOA_CONN_NOTIFY_H */
