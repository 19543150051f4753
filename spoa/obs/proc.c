/*
 * proc - process_* metrics from /proc (see proc.h).
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "decimal.h"
#include "metrics.h"
#include "proc.h"

int proc_parse_stat(const char *buf, size_t len, struct proc_stat *st)
{
	/* fields after the command name, counted from 0 = field 3 (state) */
	enum { F_UTIME = 11, F_STIME = 12, F_START = 19, F_VSIZE = 20, F_RSS = 21 };
	const char *p = NULL, *end = buf + len, *tok;
	size_t i, field = 0;
	uint64_t v;

	/* the name is "(...)" and may hold anything: its end is the last ')' */
	for (i = len; i > 0; i--) {
		if (buf[i - 1] == ')') {
			p = buf + i;
			break;
		}
	}
	if (!p)
		return -1;
	memset(st, 0, sizeof(*st));
	while (p < end && field <= F_RSS) {
		while (p < end && (*p == ' ' || *p == '\n'))
			p++;
		tok = p;
		while (p < end && *p != ' ' && *p != '\n')
			p++;
		if (p == tok)
			break;
		if (field >= F_UTIME) {
			/* rss may be negative in theory, as a signed field: refuse */
			if (decimal_parse(tok, (size_t)(p - tok), UINT64_MAX, &v) != 0)
				return -1;
			switch (field) {
			case F_UTIME: st->utime_ticks = v; break;
			case F_STIME: st->stime_ticks = v; break;
			case F_START: st->start_ticks = v; break;
			case F_VSIZE: st->vsize_bytes = v; break;
			case F_RSS:   st->rss_pages = v; break;
			default: break;
			}
		}
		field++;
	}
	return field > F_RSS ? 0 : -1;
}

int proc_parse_btime(const char *buf, size_t len, uint64_t *btime)
{
	const char *p = buf, *end = buf + len, *eol;

	while (p < end) {
		eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		if ((size_t)(eol - p) > 6 && memcmp(p, "btime ", 6) == 0)
			return decimal_parse(p + 6, (size_t)(eol - p - 6), UINT64_MAX, btime) == 0 ? 0 : -1;
		p = eol + 1;
	}
	return -1;
}

/* Read <path> whole into <buf>/<cap> (NUL-terminated). Returns the length,
 * or -1. */
static ssize_t proc_slurp(const char *path, char *buf, size_t cap)
{
	size_t len = 0;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd == -1)
		return -1;
	while (len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0)
		len += (size_t)n;
	close(fd);
	buf[len] = '\0';
	return (ssize_t)len;
}

/* Entries of /proc/self/fd, less the one reading it. Returns -1 on error. */
static int64_t proc_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int64_t n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;
}

int proc_read_self(struct metrics_process *p)
{
	/* /proc/stat has a line per CPU before btime: room for a big machine */
	char *buf = malloc(64 * 1024);
	struct proc_stat st;
	struct rlimit rl;
	uint64_t btime, tck;
	long hz = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
	int64_t fds;
	ssize_t n;
	int rc = -1;

	if (!buf || hz <= 0 || page <= 0)
		goto out;
	tck = (uint64_t)hz;
	n = proc_slurp("/proc/self/stat", buf, 4096);
	if (n <= 0 || proc_parse_stat(buf, (size_t)n, &st) == -1)
		goto out;
	n = proc_slurp("/proc/stat", buf, 64 * 1024);
	if (n <= 0 || proc_parse_btime(buf, (size_t)n, &btime) == -1)
		goto out;
	fds = proc_count_fds();
	if (fds < 0 || getrlimit(RLIMIT_NOFILE, &rl) == -1)
		goto out;
	p->cpu_us = (st.utime_ticks + st.stime_ticks) * 1000000u / tck;
	p->resident_bytes = st.rss_pages * (uint64_t)page;
	p->virtual_bytes = st.vsize_bytes;
	p->open_fds = (uint64_t)fds;
	p->max_fds = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
	p->start_time_us = btime * 1000000u + st.start_ticks * 1000000u / tck;
	rc = 0;
out:
	free(buf);
	return rc;
}
