/*
 * limiter_sentinel - sentinel:// : one link (limiter_link.h) whose address
 * a sentinel gives (SENTINEL get-master-addr-by-name), checked with ROLE;
 * asked again whenever the link is lost, and switched at once on
 * +switch-master (a subscription to one sentinel). The new primary gets
 * SCRIPT LOAD like any new link.
 */
#ifndef SPOA_LIMITER_SENTINEL_H
#define SPOA_LIMITER_SENTINEL_H

#include "limiter_int.h"

/* Start sentinel:// on <l>, which owns what is allocated here (l->sentinel,
 * freed by limiter_sentinel_stop(), and the main link): the subscription
 * and a first query; the link reaches the sentinel code through l->topo.
 * Returns 0, or -1 when memory runs out. */
int limiter_sentinel_start(struct limiter *l);
/* Close the sentinel connections of <l>, stop its timer, free
 * l->sentinel and unhook it from the links (l->topo). */
void limiter_sentinel_stop(struct limiter *l);

#endif /* SPOA_LIMITER_SENTINEL_H */
