/*
 * limiter_batch - redis-batch: the calls limiter_check() queues in one loop
 * iteration (l->queue, all for one link) are sent by an ev_prepare before
 * the loop next blocks (no added wait), as one script call (struct
 * limiter_batch, limiter_int.h) whose reply answers each call from its own
 * element; one queued call alone goes as redis-batch 1 would send it.
 */
#ifndef SPOA_LIMITER_BATCH_H
#define SPOA_LIMITER_BATCH_H

#include "limiter_int.h"

/* The batcher of <l> (l->batch, owned here) with the limiter's life: made
 * with redis-batch <size>, a new size (a reload: what is queued goes
 * first), idle batches given back after a burst (the blocks freed), and
 * freed (at limiter_free(): what is queued answered "unavailable"). */
void limiter_batch_init(struct limiter *l, unsigned size);
void limiter_batch_set_size(struct limiter *l, unsigned n);
unsigned limiter_batch_trim(struct limiter *l);
void limiter_batch_free(struct limiter *l);

/* A decision limiter_check() validated and did not answer itself (<a>: its
 * request, <p> and <key> borrowed): a call sent now, queued for this loop
 * iteration's batch, waiting for its link, or answered without Redis.
 * Returns 0, or -1 when no answer could be queued (<cb> never called). */
int limiter_batch_submit(struct limiter *l, const struct window_policy *p, const char *key,
                         size_t key_len, uint64_t cost, struct window_args *a,
                         limiter_cb cb, void *arg);
/* Send what limiter_check() queued in this loop iteration. */
void limiter_flush(struct limiter *l);

#endif /* SPOA_LIMITER_BATCH_H */
