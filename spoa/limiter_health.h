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
/* Queue CONFIG GET maxmemory-policy on <k>. */
void limiter_link_ask_eviction(struct limiter_link *k);
/* Queue INFO stats on <k>, unless refused or one waits. */
void limiter_link_ask_info(struct limiter_link *k);
/* libev: <k>'s eviction poll (k->evict_poll, repeating). */
void limiter_link_on_evict_poll(struct ev_loop *loop, ev_timer *w, int revents);

#endif /* SPOA_LIMITER_HEALTH_H */
