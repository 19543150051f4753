/*
 * test_proc - the process_* metrics: /proc/<pid>/stat and /proc/stat
 * parsing (command names with spaces and parentheses, truncated or foreign
 * text refused), their exposition, and one read of this very process.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "metrics.h"
#include "proc.h"

/* Fields 3.. of a real line: utime 7, stime 3, starttime 301180, vsize
 * 3133440, rss 360 pages. */
#define STAT_TAIL " R 20980 20980 3002 0 -1 4194304 100 0 0 0 7 3 0 0 20 0 1 0 301180 " \
	"3133440 360 18446744073709551615 94393332252672 94393332272553 0 0 0 0 17 1 0 0\n"

static void test_parse_stat(void **state)
{
	static const char *const names[] = {
		"20982 (cat)", "1 (ratelimit-spoa)", "7 (a b) c)", "8 ())", "9 ( )",
	};
	struct proc_stat st;
	char buf[512];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(buf, sizeof(buf), "%s%s", names[i], STAT_TAIL);
		assert_int_equal(proc_parse_stat(buf, strlen(buf), &st), 0);
		assert_int_equal(st.utime_ticks, 7);
		assert_int_equal(st.stime_ticks, 3);
		assert_int_equal(st.start_ticks, 301180);
		assert_int_equal(st.vsize_bytes, 3133440);
		assert_int_equal(st.rss_pages, 360);
	}
}

/* Every truncation of a good line short of the rss field is refused, and so
 * are a missing ')' and a non-numeric field. */
static void test_parse_stat_bad(void **state)
{
	static const char line[] = "20982 (cat)" STAT_TAIL;
	const char *rss = strstr(line, " 360 ");
	struct proc_stat st;
	size_t cut;

	(void)state;
	for (cut = 0; cut <= (size_t)(rss - line) + 1; cut++)
		assert_int_equal(proc_parse_stat(line, cut, &st), -1);
	assert_int_equal(proc_parse_stat(line, (size_t)(rss - line) + 4, &st), 0);
	assert_int_equal(proc_parse_stat("20982 cat R 1 2 3", 17, &st), -1);
	{
		char bad[512];

		snprintf(bad, sizeof(bad), "%s", line);
		memcpy(strstr(bad, " 301180 ") + 1, "30118x", 6);
		assert_int_equal(proc_parse_stat(bad, strlen(bad), &st), -1);
	}
}

static void test_parse_btime(void **state)
{
	static const char text[] = "cpu  1 2 3\ncpu0 1 2 3\nintr 5\nbtime 1796237467\nprocesses 9\n";
	uint64_t bt = 0;

	(void)state;
	assert_int_equal(proc_parse_btime(text, strlen(text), &bt), 0);
	assert_int_equal(bt, 1796237467);
	assert_int_equal(proc_parse_btime("cpu 1\nintr 5\n", 13, &bt), -1);
	assert_int_equal(proc_parse_btime("btime x\n", 8, &bt), -1);
	assert_int_equal(proc_parse_btime("btime 12", 8, &bt), 0);   /* no final newline */
	assert_int_equal(bt, 12);
}

static void test_render_process(void **state)
{
	struct metrics_process p = {
		.cpu_us = 12340000, .resident_bytes = 4096 * 360, .virtual_bytes = 3133440,
		.open_fds = 12, .max_fds = 1024, .start_time_us = 1796240478990000,
	};
	char out[2048], small[64];
	int n;

	(void)state;
	n = metrics_render_process(&p, out, sizeof(out));
	assert_true(n > 0);
	assert_int_equal((size_t)n, strlen(out));
	assert_non_null(strstr(out, "# TYPE process_cpu_seconds_total counter\n"
	                            "process_cpu_seconds_total 12.340000\n"));
	assert_non_null(strstr(out, "\nprocess_resident_memory_bytes 1474560\n"));
	assert_non_null(strstr(out, "\nprocess_virtual_memory_bytes 3133440\n"));
	assert_non_null(strstr(out, "# TYPE process_open_fds gauge\nprocess_open_fds 12\n"));
	assert_non_null(strstr(out, "\nprocess_max_fds 1024\n"));
	assert_non_null(strstr(out, "\nprocess_start_time_seconds 1796240478.99\n"));
	assert_int_equal(metrics_render_process(&p, small, sizeof(small)), -1);
	assert_int_equal(metrics_render_process(&p, out, (size_t)n), -1);
	assert_int_equal(metrics_render_process(&p, out, (size_t)n + 1), n);
}

/* This process, read for real: plausible values, nothing asserted on
 * timing. */
static void test_read_self(void **state)
{
	struct metrics_process p;
	uint64_t now_us = (uint64_t)time(NULL) * 1000000u;
	FILE *f;
	uint64_t before;

	(void)state;
	assert_int_equal(proc_read_self(&p), 0);
	before = p.open_fds;
	assert_true(p.resident_bytes > 0);
	assert_true(p.virtual_bytes >= p.resident_bytes);
	assert_true(p.open_fds >= 3);
	assert_true(p.max_fds >= p.open_fds);
	assert_true(p.start_time_us <= now_us + 2000000u);
	assert_true(p.start_time_us + 3600u * 1000000u > now_us);
	f = tmpfile();          /* one more fd */
	assert_non_null(f);
	assert_int_equal(proc_read_self(&p), 0);
	assert_int_equal(p.open_fds, before + 1);
	fclose(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_stat),
		cmocka_unit_test(test_parse_stat_bad),
		cmocka_unit_test(test_parse_btime),
		cmocka_unit_test(test_render_process),
		cmocka_unit_test(test_read_self),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
