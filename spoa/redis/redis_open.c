/*
 * redis_open - one hiredis async connection, 0.14 or >= 1.1, plain or TLS
 * (see redis_open.h).
 */
#include <stdio.h>
#include <sys/time.h>

#include <ev.h>
#include "hiredis_compat.h"
#include <hiredis/async.h>
#include <hiredis/adapters/libev.h>

#include "redis_open.h"
#include "redis_reply.h"
#include "redis_tls.h"

/* Creates the context; the caller owns what is returned. */
struct redisAsyncContext *redis_open(struct ev_loop *loop, const char *ip, int port,
                                     uint64_t connect_timeout_ms, struct redis_tls *tls,
                                     const char *tls_name, void *data, char *err, size_t errlen)
{
	redisAsyncContext *ac;

#if SPOA_HIREDIS_OPTIONS
	redisOptions o = { 0 };
	struct timeval tv = {
		.tv_sec = (time_t)(connect_timeout_ms / 1000),
		.tv_usec = (suseconds_t)(connect_timeout_ms % 1000 * 1000),
	};

	if (port)
		REDIS_OPTIONS_SET_TCP(&o, ip, port);
	else
		REDIS_OPTIONS_SET_UNIX(&o, ip);
	if (connect_timeout_ms)
		o.connect_timeout = &tv;
	ac = redisAsyncConnectWithOptions(&o);
#else
	(void)connect_timeout_ms;
	ac = port ? redisAsyncConnect(ip, port) : redisAsyncConnectUnix(ip);
#endif
	if (!ac) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (ac->err) {
		snprintf(err, errlen, "%s", ac->errstr);
		redisAsyncFree(ac);
		return NULL;
	}
	/* every reply on it built without an allocation per element */
	redis_reply_use(ac->c.reader);
	if (tls && redis_tls_start(tls, ac, tls_name, err, errlen) == -1) {
		redisAsyncFree(ac);
		return NULL;
	}
	if (redisLibevAttach(loop, ac) != REDIS_OK) {
		snprintf(err, errlen, "cannot attach to the event loop");
		redisAsyncFree(ac);
		return NULL;
	}
	ac->data = data;
	return ac;
}
