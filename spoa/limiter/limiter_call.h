/*
 * limiter_call - one decision's call to Redis (struct limiter_call,
 * limiter_int.h): answers that need no Redis (queued, delivered on the
 * next loop iteration), the call pool, sending a call (its reply is
 * handed to l->on_reply: limiter_reply.c acts on it), a result answered,
 * its deadline, TRYAGAIN parking.
 *
 * Life of a call: limiter_check() (limiter.c) validates the request and
 * asks the deny cache; limiter_call_take() takes a call from the pool and
 * arms its deadline, and it is sent (or queued for a batch,
 * limiter_batch.c), or waits for its link (l->calls.waiting). It is answered exactly once, by whichever comes first:
 * the reply, the deadline, the loss of the connection, or limiter_free().
 * hiredis holds the call as privdata until it hands it back (reply or
 * NULL), so a call answered by its deadline stays out of the pool until
 * then, and its late reply is ignored.
 */
#ifndef SPOA_LIMITER_CALL_H
#define SPOA_LIMITER_CALL_H

#include "limiter_int.h"

/* The calls' part of <l> (l->calls, owned here) with the limiter's life:
 * made (the deny cache seeded with <seed>, on), the policy table of the
 * deny cache's metric (copied; the cache emptied), the deny cache on or off
 * with room for <size> (deny-cache, deny-cache-size), memory given back
 * after a burst (the blocks freed), and everything freed (every answer
 * queued delivered first; the calls hiredis holds are answered by the
 * links' retire before). */
void limiter_calls_init(struct limiter *l, uint64_t seed);
void limiter_calls_set_policies(struct limiter *l, const struct window_policy *policies,
                                size_t n);
void limiter_calls_set_cache(struct limiter *l, bool on, unsigned size);
/* Empty the deny cache (limiter_forget_denies()). */
void limiter_calls_forget_denies(struct limiter *l);
unsigned limiter_calls_trim(struct limiter *l);
void limiter_calls_free(struct limiter *l);

/* Send the command of <argc> words <argv>/<argvlen> (borrowed) on <ac>,
 * answered to <fn>/<privdata>: written as RESP into <l>'s own buffer and
 * handed to hiredis whole (redisAsyncFormattedCommand), not formatted by
 * hiredis. Every decision's command goes this way. Returns REDIS_OK, or
 * REDIS_ERR (nothing sent: out of memory, a dying context). */
int limiter_call_command(struct limiter *l, redisAsyncContext *ac, redisCallbackFn *fn,
                         void *privdata, int argc, const char **argv, const size_t *argvlen);

/* Queue <d> for <cb>/<arg>, delivered on the next loop iteration (the
 * queue is owned by <l>). Returns 0, or -1 when memory runs out. */
int limiter_defer(struct limiter *l, limiter_cb cb, void *arg, const struct window_decision *d);

/* Is the account <key> of policy <p> known to be denied for <cost>? Then
 * the cached answer is queued for <cb>/<arg> (counted in cache_denies),
 * limiter_defer()'s result in <*rc>. */
bool limiter_call_cached(struct limiter *l, const struct window_policy *p, const char *key,
                         size_t key_len, uint64_t cost, limiter_cb cb, void *arg, int *rc);
/* A call for the decision limiter_check() validated (<a>: its request,
 * borrowed), its deadline armed. <*out> is the call to send now on its
 * link (c->link, ready); NULL when it was answered without Redis (no link
 * can be ready in time, an evicting Redis, the bound: queued answers) or
 * waits for its link (sent by limiter_wake()). Returns 0, or -1 when an
 * answer could not be queued (out of memory: <cb> never called). */
int limiter_call_take(struct limiter *l, const struct window_policy *p, const char *key,
                      size_t key_len, uint64_t cost, const struct window_args *a,
                      limiter_cb cb, void *arg, struct limiter_call **out);
/* Send <c> on its ready link <k> with <a> (built by limiter_check(); its
 * head is made the link engine's here). Returns 0 (a failed send answers
 * <c> "unavailable" on the next iteration). */
int limiter_call_start(struct limiter *l, struct limiter_call *c, struct limiter_link *k,
                       struct window_args *a);
/* Send <c> on link <k> (its key's link when NULL), ASKING first when
 * <asking>; a link not ready yet: <c> waits for it (l->calls.waiting)
 * within its deadline. 0: hiredis holds <c>, or it waits; -1: neither
 * (the caller answers it). */
int limiter_call_send(struct limiter *l, struct limiter_call *c, struct limiter_link *k,
                      bool asking);
/* limiter_call_send() of <c> on <k> with its request <a> as
 * limiter_check() built it (the engine's head is put on it here), not
 * built again. */
int limiter_call_send_args(struct limiter *l, struct limiter_call *c, struct limiter_link *k,
                           struct window_args *a);
/* l->wake: send the waiting calls whose link is ready now. */
void limiter_wake(struct limiter *l);
/* Answer every waiting call "unavailable" (limiter_free()). */
void limiter_call_unwait_all(struct limiter *l);

/* Give <c> back to its limiter's pool (hiredis no longer holds it). */
void limiter_call_put(struct limiter_call *c);
/* Answer <c> from its result <view> (borrowed) given on <k> at <now>
 * (limiter_reply.c, for one call or each of a batch's); the caller gives
 * <c> back to the pool. */
void limiter_call_finish(struct limiter *l, struct limiter_link *k, struct limiter_call *c,
                         const struct window_reply *view, int64_t now);
/* Answer <c> "unavailable" if it still waits (<defer>: on the next loop
 * iteration) and give it back to the pool. */
void limiter_call_fail(struct limiter *l, struct limiter_call *c, bool defer);
/* TRYAGAIN (the keys of a slot are mid-migration), or a MOVED between
 * two nodes that disagree: <c> (sent, its reply in) is re-sent a few
 * milliseconds later by its key's route, within its deadline. */
void limiter_call_park(struct limiter *l, struct limiter_call *c);

#endif /* SPOA_LIMITER_CALL_H */
