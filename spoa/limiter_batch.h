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

/* Send what limiter_check() queued in this loop iteration. */
void limiter_flush(struct limiter *l);
/* libev: the loop is about to wait (l->flush): limiter_flush(). */
void limiter_on_flush(struct ev_loop *loop, ev_prepare *w, int revents);

#endif /* SPOA_LIMITER_BATCH_H */
