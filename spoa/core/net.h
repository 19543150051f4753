/*
 * net - listening sockets. No event loop here.
 */
#ifndef SPOA_NET_H
#define SPOA_NET_H

#include <stddef.h>
#include <sys/types.h>

#define NET_UNIX_PATH_MAX 108           /* sizeof(sockaddr_un.sun_path) */

/* The unix socket a listener created, so that only that one is removed:
 * another process may have put its own at the same path since. */
struct net_unix {
	char path[NET_UNIX_PATH_MAX];   /* "" when the listener is not unix */
	dev_t dev;
	ino_t ino;
};

/*
 * Open a non-blocking, close-on-exec listening socket on <addr>
 * ("host:port", "[v6]:port" or "unix:/path"), recording a unix socket in
 * <u>. A unix path that exists is replaced only when it is a stale socket
 * (nothing accepts on it); a live socket or anything that is not a socket
 * is refused, never removed. Returns the fd, or -1 with <err>.
 */
int net_listen(const char *addr, struct net_unix *u, char *err, size_t errlen);

/* Remove the socket file of <u> if the path still names the one
 * net_listen() created, then forget it. */
void net_unix_remove(struct net_unix *u);

#endif /* SPOA_NET_H */
