/*
 * limiter_health - what the links report and watch (a leaf below
 * limiter_link.c): the gauges redis_connected, redis_unsafe_eviction and
 * redis_engine recomputed from the links, why the last attempt failed (for
 * /readyz and a reload's verdict), and the eviction watch: CONFIG GET
 * maxmemory-policy and INFO stats's evicted_keys at setup and every
 * LIMITER_EVICT_POLL_MS on a ready link, either one refusing decisions
 * (redis-evicts-keys) unless redis-allow-eviction is set.
 */
#ifndef SPOA_LIMITER_HEALTH_H
#define SPOA_LIMITER_HEALTH_H

#include "limiter_int.h"

/* Set <l>'s connected gauge to <up>. */
void limiter_set_connected(struct limiter *l, bool up);
/* Recompute the connected and engine gauges from the links. */
void limiter_update_connected(struct limiter *l);
/* Recompute the unsafe-eviction gauge from the links. */
void limiter_update_eviction(struct limiter *l);
/* Remember why <l>'s last attempt failed (<what> about <addr>). */
void limiter_note_error(struct limiter *l, const char *addr, const char *what);
/* <k>'s eviction watch (k->watch, owned here) at the link's moments: made,
 * a new target, a new connection's setup, ready (the poll), a reload, lost. */
void limiter_link_watch_init(struct limiter_link *k);
void limiter_link_watch_reset(struct limiter_link *k);
void limiter_link_watch_start(struct limiter_link *k);
void limiter_link_watch_poll(struct limiter_link *k);
void limiter_link_watch_recheck(struct limiter_link *k);
void limiter_link_watch_stop(struct limiter_link *k);
/* Does <k> refuse decisions: its Redis may evict keys and
 * redis-allow-eviction is off? */
bool limiter_link_refuses(const struct limiter_link *k);

#endif /* SPOA_LIMITER_HEALTH_H */
