/*
 * test_log - the one escaping every peer-supplied string goes through
 * (log_quote) and what a whole line looks like when a peer tries to forge
 * fields with it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "log.h"

static const char *quote(char *dst, size_t cap, const char *s)
{
	return log_quote(dst, cap, s, s ? strlen(s) : 0);
}

static void test_quote_plain(void **state)
{
	char b[LOG_QUOTED_MAX(32)];

	(void)state;
	assert_string_equal(quote(b, sizeof(b), "haproxy-1"), "\"haproxy-1\"");
	assert_string_equal(quote(b, sizeof(b), ""), "\"\"");
	assert_string_equal(log_quote(b, sizeof(b), NULL, 0), "\"\"");
	/* UTF-8 passes as is: only quotes, backslashes and control bytes change */
	assert_string_equal(quote(b, sizeof(b), "caf\xc3\xa9"), "\"caf\xc3\xa9\"");
}

static void test_quote_escapes(void **state)
{
	char b[LOG_QUOTED_MAX(64)];

	(void)state;
	assert_string_equal(quote(b, sizeof(b), "a\"b"), "\"a\\\"b\"");
	assert_string_equal(quote(b, sizeof(b), "a\\b"), "\"a\\\\b\"");
	/* a trailing backslash cannot eat the closing quote */
	assert_string_equal(quote(b, sizeof(b), "x\\"), "\"x\\\\\"");
	assert_string_equal(quote(b, sizeof(b), "l1\nl2\r\t\x7f\x01"),
	                    "\"l1\\x0al2\\x0d\\x09\\x7f\\x01\"");
	assert_string_equal(log_quote(b, sizeof(b), "a\0b", 3), "\"a\\x00b\"");
}

static void test_quote_fits(void **state)
{
	char all[256], big[LOG_QUOTED_MAX(256)];
	char small[12];
	size_t i;

	(void)state;
	/* LOG_QUOTED_MAX is enough for the worst case: nothing is cut */
	for (i = 0; i < sizeof(all); i++)
		all[i] = (char)(i < 32 ? i : '"');
	log_quote(big, sizeof(big), all, sizeof(all));
	assert_int_equal(strlen(big), 2 + 32 * 4 + (256 - 32) * 2);
	assert_null(strstr(big, "..."));
	/* a cut keeps the quotes closed and says so */
	assert_string_equal(quote(small, sizeof(small), "0123456789abc"), "\"012345...\"");
	assert_string_equal(quote(small, sizeof(small), "\"\"\"\"\"\""), "\"\\\"\\\"\\\"...\"");
	/* an escape is never split by the cut */
	assert_string_equal(quote(small, sizeof(small), "ab\ncd"), "\"ab\\x0a...\"");
	assert_string_equal(quote(small, 6, "abc"), "\"...\"");
	small[0] = 'x';
	assert_string_equal(quote(small, 5, "abc"), "");
}

/* Split <line> into key=value tokens the way a log parser would (a value
 * may be "..." with backslash escapes) and count the tokens equal to
 * <tok> outside quotes. */
static int count_bare_tokens(const char *line, const char *tok)
{
	const char *p = line;
	int n = 0;

	while (*p) {
		const char *start;
		size_t len;

		while (*p == ' ' || *p == '\n')
			p++;
		if (!*p)
			break;
		start = p;
		while (*p && *p != ' ' && *p != '\n') {
			if (*p == '"') {
				for (p++; *p && *p != '"'; p++)
					if (*p == '\\' && p[1])
						p++;
				if (*p)
					p++;
				continue;
			}
			p++;
		}
		len = (size_t)(p - start);
		if (len == strlen(tok) && memcmp(start, tok, len) == 0)
			n++;
	}
	return n;
}

/* A whole line written by log_event with a peer's value quoted. */
static void test_line_cannot_be_forged(void **state)
{
	static const char *const evil[] = {
		"x level=error event=redis_stalled",
		"x\" level=error event=redis_stalled \"",
		"x\\\" level=error event=redis_stalled",
		"x\\",
		"x\nts=0 level=error event=redis_stalled",
	};
	char line[8192], q[LOG_QUOTED_MAX(128)];
	int fds[2], saved;
	size_t i;
	ssize_t n;

	(void)state;
	log_set_level(CONFIG_LOG_INFO);
	for (i = 0; i < sizeof(evil) / sizeof(evil[0]); i++) {
		assert_int_equal(pipe(fds), 0);
		saved = dup(STDERR_FILENO);
		dup2(fds[1], STDERR_FILENO);
		log_info("spop_hello", "conn=1 engine=%s",
		         log_quote(q, sizeof(q), evil[i], strlen(evil[i])));
		dup2(saved, STDERR_FILENO);
		close(saved);
		close(fds[1]);
		n = read(fds[0], line, sizeof(line) - 1);
		close(fds[0]);
		assert_true(n > 0);
		line[n] = '\0';
		/* one line, and the only level/event pairs are the real ones */
		assert_ptr_equal(strchr(line, '\n'), line + n - 1);
		assert_int_equal(count_bare_tokens(line, "level=error"), 0);
		assert_int_equal(count_bare_tokens(line, "event=redis_stalled"), 0);
		assert_int_equal(count_bare_tokens(line, "level=info"), 1);
		assert_int_equal(count_bare_tokens(line, "event=spop_hello"), 1);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quote_plain),
		cmocka_unit_test(test_quote_escapes),
		cmocka_unit_test(test_quote_fits),
		cmocka_unit_test(test_line_cannot_be_forged),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
