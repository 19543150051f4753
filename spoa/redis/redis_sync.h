/*
 * redis_sync - a short, synchronous Redis client over the agent's own
 * `redis` setting: redis://, unix://, sentinel:// (the primary asked of
 * the sentinels), cluster:// (each key sent to the node of its slot, the
 * slot learnt from MOVED and ASK), each over TLS with the redis-tls-*
 * directives when the URL says so, with the URL's credentials (AUTH,
 * SELECT). For ratelimit-spoa ctl and the agent's live-control thread:
 * never on an event loop, never on a decision's path.
 */
#ifndef SPOA_REDIS_SYNC_H
#define SPOA_REDIS_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "redis_tls.h"

struct redisReply;
struct redis_sync;

/* Parse the <redis> URL and <tls> settings (the config's redis and
 * redis-tls-*; secrets from the environment as the agent reads them);
 * nothing connects yet. Borrows both for the call only. The caller owns the
 * result: redis_sync_free(). NULL with <err> on a bad URL or TLS setting. */
struct redis_sync *redis_sync_new(const char *redis, const struct config_tls *tls,
                                  uint64_t timeout_ms, char *err, size_t errlen);

/* Close every connection and wipe the secrets. */
void redis_sync_free(struct redis_sync *s);

/* Drop the connections (the next command reconnects), e.g. after an error. */
void redis_sync_reset(struct redis_sync *s);

/*
 * Run one command on the node that serves <key>/<keylen> (any node when
 * <key> is NULL), following MOVED and ASK a few times. The caller owns the
 * reply (freeReplyObject); an error reply is a reply. NULL with <err> when
 * no node answered.
 */
struct redisReply *redis_sync_command(struct redis_sync *s, const char *key, size_t keylen,
                                      int argc, const char **argv, const size_t *argvlen,
                                      char *err, size_t errlen);

/*
 * Pipeline <n> commands whose keys are all in <key>'s slot: sent together,
 * the replies read in order into <out> (owned by the caller, each freed with
 * freeReplyObject), the whole pipeline sent once more to the right node
 * after a MOVED. Returns 0 or -1 with <err> (no reply kept).
 */
int redis_sync_pipeline(struct redis_sync *s, const char *key, size_t keylen, size_t n,
                        const int *argc, const char *const *argv[], const size_t *argvlen[],
                        struct redisReply **out, char *err, size_t errlen);

/* Redis's clock (TIME) in unix microseconds on <key>'s node. -1 with <err>. */
int64_t redis_sync_time_us(struct redis_sync *s, const char *key, size_t keylen,
                           char *err, size_t errlen);

/* The same in milliseconds. */
int64_t redis_sync_time_ms(struct redis_sync *s, const char *key, size_t keylen,
                           char *err, size_t errlen);

/* "redis://127.0.0.1:6379/0" form without secrets, for messages. Borrowed. */
const char *redis_sync_addr(const struct redis_sync *s);

#endif /* SPOA_REDIS_SYNC_H */
