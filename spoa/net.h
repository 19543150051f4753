/*
 * net - listening sockets. No event loop here.
 */
#ifndef SPOA_NET_H
#define SPOA_NET_H

#include <stddef.h>

/* Open a non-blocking, close-on-exec listening socket on <addr>
 * ("host:port", "[v6]:port" or "unix:/path"). For a unix socket its path is
 * copied into <unix_path> (else it is set to ""), so the caller can unlink it.
 * Returns the fd, or -1 with <err>. */
int net_listen(const char *addr, char *unix_path, size_t unix_path_len,
               char *err, size_t errlen);

#endif /* SPOA_NET_H */
