/*
 * ctl_int - what ctl.c and ctl_pool.c share (one ctl run, its Redis calls
 * and output helpers); nobody else includes it.
 */
#ifndef SPOA_CTL_INT_H
#define SPOA_CTL_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "ctl_args.h"
#include "live_rule.h"
#include "log.h"

struct redis_sync;
struct redisReply;

/* One ctl run: owned by ctl_main(). */
struct ctl {
	struct ctl_args a;
	struct config cfg;
	struct redis_sync *rs;
	const struct window_policy *p;
	char who[LIVE_WHO_MAX + 1];
	char err[CONFIG_ERR_LEN];
	char eerr[LOG_ESCAPED_MAX(CONFIG_ERR_LEN)];   /* err as printed */
	bool refused;                   /* err is ctl's own verdict, not Redis's */
};

/* Run <argv>/<argc> on the node of <key>; the caller frees the reply. NULL
 * with x->err; an error reply is turned into NULL too. */
struct redisReply *ctl_cmd(struct ctl *x, const char *key, size_t keylen, int argc,
                           const char **argv, const size_t *len);

/* <s> as a JSON string (quotes included) on <f>. */
void ctl_json_str(FILE *f, const char *s, size_t len);

/* show-pool POOL (ctl_pool.c). Returns the exit status. */
int ctl_show_pool(struct ctl *x);

/* The units account x->a.account holds in pooled policy x->p's pool (its
 * hash), for reset's note (ctl_pool.c). -1 with x->err. */
int64_t ctl_pool_units(struct ctl *x);

/* An account's in-flight leases (ctl_leases.c): the policy's bound, those
 * running at the node's time, and when the first of them ends. */
struct ctl_leases {
	uint64_t limit;                 /* inflight= */
	long long running;
	int64_t now_us;                 /* the leases key's node's time */
	int64_t next_end_us;            /* from now; 0 when none runs */
	char key[WINDOW_REDIS_KEY_MAX + 1];
	size_t len;
};

/* Read the leases of x->a.account under inflight= policy x->p into <l>.
 * 0, or -1 with x->err. */
int ctl_leases_read(struct ctl *x, struct ctl_leases *l);

/* Print <l> as `ctl show` does: a JSON member (",\"inflight\":{...}"), or a line. */
void ctl_leases_print(const struct ctl_leases *l, bool json);

#endif /* SPOA_CTL_INT_H */
