/*
 * slow_dns - an LD_PRELOAD shim for tests/integration/t_hostnames.py: a
 * getaddrinfo() for "slow.test" that blocks until the test creates
 * $SLOW_DNS_DIR/release (then answers 127.0.0.1), so the test can see the
 * agent keep deciding while a lookup hangs. Every other name goes to libc.
 * It marks $SLOW_DNS_DIR/entered and .../left. Built by the test with cc.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int (*gai_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

static void mark(const char *dir, const char *name)
{
	char path[512];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd >= 0)
		close(fd);
}

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res)
{
	gai_fn real = (gai_fn)(uintptr_t)dlsym(RTLD_NEXT, "getaddrinfo");
	const char *dir = getenv("SLOW_DNS_DIR");

	if (dir && node && strcmp(node, "slow.test") == 0) {
		char release[512];
		struct timespec ts = { 0, 10 * 1000 * 1000 };

		snprintf(release, sizeof(release), "%s/release", dir);
		mark(dir, "entered");
		while (access(release, F_OK) != 0)
			nanosleep(&ts, NULL);
		mark(dir, "left");
		node = "127.0.0.1";
	}
	return real(node, service, hints, res);
}
