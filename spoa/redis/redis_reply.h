/*
 * redis_reply - the reply objects of every hiredis context the agent opens
 * (redis_open() installs them: the one place that knows), without an
 * allocation per element.
 *
 * hiredis builds each reply through its reader's object functions
 * (redisReplyObjectFunctions: a calloc per element, a malloc per string
 * and per element array, a free for each of them after the callback). A
 * decision's reply is an array of six integers, a batch's an array of
 * such arrays: seven to two hundred allocations and frees per reply, a
 * quarter of the agent's instructions per decision. Here every object of
 * one reply is carved from one block:
 *
 *   - the objects are hiredis's own struct redisReply, filled exactly as
 *     hiredis's default functions fill them (0.14, and 1.x with its RESP3
 *     types), so every callback, and hiredis itself where it looks into a
 *     reply (a spontaneous error's ->type and ->str, a subscription's
 *     elements, 1.x's push replies), reads what it always read;
 *   - the root object sits at the start of its block, so freeObject(),
 *     which hiredis only ever calls on a root, finds the block from it;
 *     an element finds it through its read task's parents (the root
 *     task's object);
 *   - a reply larger than its block goes on in further chunks, freed with
 *     it (CLUSTER SLOTS, INFO: nothing is cut); one whose objects would
 *     take more than REDIS_REPLY_MAX bytes is refused as out of memory
 *     (hiredis then drops the connection, as its own failed calloc would);
 *   - a freed block is kept as a spare of the thread (a few, each at most
 *     REDIS_REPLY_KEEP bytes), so a warm connection allocates nothing per
 *     reply. Spares are per thread, not per context: a reply's block
 *     never depends on its context outliving it, and hiredis frees a
 *     context whenever it likes. A thread's spares are freed when it ends.
 *
 * A reply is only valid until hiredis frees it after the callback (as
 * before): nothing may keep a pointer into it.
 */
#ifndef SPOA_REDIS_REPLY_H
#define SPOA_REDIS_REPLY_H

#include <stddef.h>

#include "hiredis_compat.h"
#include <hiredis/read.h>

/* The most bytes the objects of one reply may take. */
#define REDIS_REPLY_MAX ((size_t)1 << 30)

/* Make reader <r> (a context's, c.reader) build its replies here. */
void redis_reply_use(redisReader *r);

/* hiredis's object functions, for a reader made with
 * redisReaderCreateWithFunctions() (the unit tests). */
extern redisReplyObjectFunctions redis_reply_functions;

/* Free the calling thread's spare blocks (they are freed at the thread's
 * end anyway; for a caller that wants the memory back now). */
void redis_reply_release(void);

#endif /* SPOA_REDIS_REPLY_H */
