/*
 * proc - this process's resource usage, read from /proc at scrape time for
 * the standard process_* metrics (the names Prometheus client libraries
 * use). The parsers are pure and unit-tested; proc_read_self() does the I/O.
 */
#ifndef SPOA_PROC_H
#define SPOA_PROC_H

#include <stddef.h>
#include <stdint.h>

struct metrics_process;

/* The fields of /proc/self/stat we use, in their own units. */
struct proc_stat {
	uint64_t utime_ticks, stime_ticks;  /* user and system CPU, clock ticks */
	uint64_t start_ticks;               /* start, ticks after boot */
	uint64_t vsize_bytes;
	uint64_t rss_pages;
};

/* Parse the text of /proc/<pid>/stat (<buf>/<len>, the command name may hold
 * spaces and parentheses). Returns 0, or -1 when it is not that format. */
int proc_parse_stat(const char *buf, size_t len, struct proc_stat *st);

/* The boot time (seconds since the epoch) from the text of /proc/stat.
 * Returns 0, or -1 without a "btime" line. */
int proc_parse_btime(const char *buf, size_t len, uint64_t *btime);

/* Fill <p> from /proc/self, /proc/stat and getrlimit(). Returns 0, or -1
 * when /proc cannot be read (then <p> is not to be rendered). */
int proc_read_self(struct metrics_process *p);

#endif /* SPOA_PROC_H */
