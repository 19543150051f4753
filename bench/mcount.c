/*
 * mcount - an LD_PRELOAD allocation counter for make bench (tools/bench.sh,
 * section d): counts malloc/calloc/realloc calls by the object that called
 * them (the agent, libhiredis, libev, other) into a file of 4 uint64
 * counters, $MCOUNT_FILE, mapped shared so the script reads it while the
 * agent runs. Built by the Makefile as build/<rel|san>/bench/mcount.so.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

enum { MC_AGENT = 0, MC_HIREDIS, MC_LIBEV, MC_OTHER, MC_COUNT };
struct mc_range { uintptr_t lo, hi; int obj; };
static struct mc_range mc_ranges[64];
static int mc_nranges;
static uint64_t *mc_counters;

static int mc_classify(uintptr_t a)
{
	for (int i = 0; i < mc_nranges; i++)
		if (a >= mc_ranges[i].lo && a < mc_ranges[i].hi)
			return mc_ranges[i].obj;
	return MC_OTHER;
}

static void mc_count(void *ret)
{
	if (mc_counters)
		__atomic_fetch_add(&mc_counters[mc_classify((uintptr_t)ret)], 1, __ATOMIC_RELAXED);
}

void *malloc(size_t n) { mc_count(__builtin_return_address(0)); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { mc_count(__builtin_return_address(0)); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { mc_count(__builtin_return_address(0)); return __libc_realloc(p, n); }

__attribute__((constructor)) static void mc_init(void)
{
	static char maps[65536], exe[4096];
	const char *path = getenv("MCOUNT_FILE");
	ssize_t n, len = 0, el;
	int fd;

	if (path == NULL)
		return;
	el = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[el > 0 ? el : 0] = '\0';
	fd = open("/proc/self/maps", O_RDONLY);
	while (fd != -1 && (n = read(fd, maps + len, sizeof(maps) - 1 - (size_t)len)) > 0)
		len += n;
	if (fd != -1)
		close(fd);
	maps[len] = '\0';
	for (char *line = maps; line && *line && mc_nranges < 64; ) {
		char *nl = strchr(line, '\n'), *p, *file;
		uintptr_t lo, hi;
		int obj = -1;

		if (nl)
			*nl = '\0';
		lo = strtoul(line, &p, 16);
		hi = strtoul(p + 1, &p, 16);
		file = strchr(line, '/');
		if (file && strstr(p, "x")) {
			if (strcmp(file, exe) == 0) obj = MC_AGENT;
			else if (strstr(file, "libhiredis")) obj = MC_HIREDIS;
			else if (strstr(file, "libev.so")) obj = MC_LIBEV;
		}
		if (obj != -1) {
			mc_ranges[mc_nranges].lo = lo;
			mc_ranges[mc_nranges].hi = hi;
			mc_ranges[mc_nranges++].obj = obj;
		}
		line = nl ? nl + 1 : NULL;
	}
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd == -1 || ftruncate(fd, 4096) == -1)
		return;
	mc_counters = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (mc_counters == MAP_FAILED)
		mc_counters = NULL;
	close(fd);
}
