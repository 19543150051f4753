/*
 * test_log - the one escaping every peer-supplied string goes through
 * (log_escape_text, and log_quote around it): every byte, every Unicode
 * character, decoded back to exactly the input; and what a whole line
 * looks like when a peer tries to forge fields with it.
 */
#include <locale.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>

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

/* The reverse of log_escape_text() (\\, \", \xHH), as a reader of the
 * text would do it, into <dst>; its length, or -1 on what the escaping
 * never writes (a lone backslash, a bad escape). */
static long unescape(const char *s, char *dst)
{
	long o = 0;
	unsigned v;

	while (*s) {
		if (*s != '\\') {
			dst[o++] = *s++;
			continue;
		}
		if (s[1] == '\\' || s[1] == '"') {
			dst[o++] = s[1];
			s += 2;
		} else if (s[1] == 'x' && sscanf(s + 2, "%2x", &v) == 1 && s[2] && s[3]) {
			dst[o++] = (char)v;
			s += 4;
		} else {
			return -1;
		}
	}
	return o;
}

/* Nothing in <s> can break or reorder a line: no control byte, no byte
 * >= 0x80 outside a printable UTF-8 character. Checked with the C library
 * (mbrtowc in C.UTF-8), not with the code under test. */
static bool one_printable_line(const char *s)
{
	size_t i = 0, len = strlen(s);
	mbstate_t st;

	memset(&st, 0, sizeof(st));
	while (i < len) {
		unsigned char c = (unsigned char)s[i];
		wchar_t w;
		size_t n;

		if (c < 0x80) {
			if (c < 0x20 || c == 0x7f)
				return false;
			i++;
			continue;
		}
		n = mbrtowc(&w, s + i, len - i, &st);
		if (n == (size_t)-1 || n == (size_t)-2 || n == 0)
			return false;
		if (w < 0xa0 || w == 0x2028 || w == 0x2029 || (w >= 0x202a && w <= 0x202e) ||
		    (w >= 0x2066 && w <= 0x2069) || w == 0x200e || w == 0x200f || w == 0x61c)
			return false;
		i += n;
	}
	return true;
}

/* Every byte alone and every pair of bytes: one printable line that
 * decodes back to the input, so two inputs never give one output (the
 * escape character itself escaped). */
static void test_escape_every_byte(void **state)
{
	char in[3], out[LOG_ESCAPED_MAX(2)], back[8];
	unsigned a, b;

	(void)state;
	assert_true(setlocale(LC_CTYPE, "C.UTF-8") != NULL);
	for (a = 0; a < 256; a++) {
		in[0] = (char)a;
		log_escape_text(out, sizeof(out), in, 1);
		if (a < 0x20 || a >= 0x7f)
			assert_int_equal(strlen(out), 4);   /* \xHH: no byte >= 0x80 alone is text */
		assert_true(one_printable_line(out));
		assert_int_equal(unescape(out, back), 1);
		assert_int_equal((unsigned char)back[0], a);
		for (b = 0; b < 256; b++) {
			in[1] = (char)b;
			log_escape_text(out, sizeof(out), in, 2);
			if (!one_printable_line(out) || unescape(out, back) != 2 || memcmp(back, in, 2))
				fail_msg("bytes %02x %02x gave \"%s\"", a, b, out);
		}
	}
	assert_string_equal(log_escape_text(out, sizeof(out), "\\x", 2), "\\\\x");
	assert_string_equal(log_escape_text(out, sizeof(out), "\"", 1), "\\\"");
}

/* Every Unicode scalar value as UTF-8, and the sequences that are not
 * UTF-8 (overlong, a surrogate, past U+10FFFF, cut short): printable ones
 * stay as they are, the rest become \xHH, and each decodes back. */
static void test_escape_unicode(void **state)
{
	static const char *const bad[] = {
		"\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80",
		"\xe2\x82", "\x80", "\xbf\xbf", "a\xff" "b", "\xc2\x9b[31m", "\xe2\x80\xae" "evil",
		"\xe2\x80\xa8", "\xd8\x9c",
	};
	char in[8], out[LOG_ESCAPED_MAX(8)], back[16];
	uint32_t cp;
	size_t i, n;

	(void)state;
	assert_true(setlocale(LC_CTYPE, "C.UTF-8") != NULL);
	for (cp = 0; cp <= 0x10ffff; cp++) {
		mbstate_t st;

		if (cp >= 0xd800 && cp <= 0xdfff)
			continue;
		memset(&st, 0, sizeof(st));
		n = wcrtomb(in, (wchar_t)cp, &st);
		assert_true(n != (size_t)-1);
		log_escape_text(out, sizeof(out), in, n);
		assert_true(one_printable_line(out));
		if ((long)n != unescape(out, back) || memcmp(back, in, n))
			fail_msg("U+%04X gave \"%s\"", (unsigned)cp, out);
		/* printable characters pass as they are */
		if (cp >= 0xa0 && cp != 0x2028 && cp != 0x2029 && !(cp >= 0x202a && cp <= 0x202e) &&
		    !(cp >= 0x2066 && cp <= 0x2069) && cp != 0x200e && cp != 0x200f && cp != 0x61c)
			assert_memory_equal(out, in, n);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		n = strlen(bad[i]);
		log_escape_text(out, sizeof(out), bad[i], n);
		assert_true(one_printable_line(out));
		assert_true(strstr(out, "\\x") != NULL);
		if ((long)n != unescape(out, back) || memcmp(back, bad[i], n))
			fail_msg("%zu gave \"%s\"", i, out);
	}
	/* a character is never split by the cut */
	assert_string_equal(log_escape_text(out, 9, "ab\xc3\xa9\xc3\xa9", 6), "ab\xc3\xa9...");
	assert_string_equal(log_escape_text(out, 3, "abc", 3), "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quote_plain),
		cmocka_unit_test(test_quote_escapes),
		cmocka_unit_test(test_quote_fits),
		cmocka_unit_test(test_line_cannot_be_forged),
		cmocka_unit_test(test_escape_every_byte),
		cmocka_unit_test(test_escape_unicode),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
