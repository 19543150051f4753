/*
 * limiter_cluster - cluster:// : one link (limiter_link.h) per primary,
 * from a slot map (CLUSTER SLOTS, parsed by cluster.h). A call goes to the
 * primary of its key's slot; MOVED patches the map and re-sends, ASK
 * re-sends once after ASKING, TRYAGAIN waits a few ms and re-sends, all
 * within the call's deadline. The map is refreshed on redirects, and on a
 * timer: fast while a primary is missing, slow otherwise. A slot whose
 * primary is away is answered "unavailable" (fail-closed) until the map
 * names a reachable one.
 */
#ifndef SPOA_LIMITER_CLUSTER_H
#define SPOA_LIMITER_CLUSTER_H

#include "limiter_int.h"

/* Start cluster:// on <l>, which owns l->cluster (freed by
 * limiter_cluster_stop()): the refresh timer and the seeds' links.
 * Returns 0, or -1 when memory runs out. */
int limiter_cluster_start(struct limiter *l);
/* Stop the refresh timer, free l->cluster and unhook it from the links
 * (l->topo); the links stay <l>'s. */
void limiter_cluster_stop(struct limiter *l);
/* Ask for a new slot map soon (<why> for the debug log). */
void limiter_topo_refresh(struct limiter *l, const char *why);
/* The link serving Redis key <key>/<len> now, or NULL. */
struct limiter_link *limiter_route(struct limiter *l, const char *key, size_t len);
/* Where a MOVED or ASK sends a call. */
enum limiter_redirect {
	LIMITER_REDIRECT_GIVE_UP = 0,   /* the caller answers it */
	LIMITER_REDIRECT_SEND,          /* to the link given (after ASKING if asked) */
	LIMITER_REDIRECT_PARK,          /* wait LIMITER_TRYAGAIN_MS, then route again */
	LIMITER_REDIRECT_COUNT
};
/* Learn the MOVED or ASK <reply> to call <c> and give the verdict; <*to>
 * and <*asking> say where for LIMITER_REDIRECT_SEND. Sends nothing. */
enum limiter_redirect limiter_cluster_redirect(struct limiter *l, const struct limiter_call *c,
                                               const redisReply *reply, struct limiter_link **to,
                                               bool *asking);

#endif /* SPOA_LIMITER_CLUSTER_H */
