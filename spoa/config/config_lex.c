/*
 * config_lex - read a file whole, split it into lines and words, format the
 * "<name>:<line>: <reason>" errors (see config_lex.h).
 *
 * A line is split into words on blanks; a word starting with '#' starts a
 * comment, so a '#' inside a word (a password, say) is kept. Words are
 * slices of the caller's text: nothing is copied.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config_lex.h"

/* Format "<name>:<line>: <fmt...>" into the context's error buffer. */
__attribute__((format(printf, 2, 3)))
int config_parse_fail(struct config_lex *x, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!x->err || !x->errlen)
		return -1;
	va_start(ap, fmt);
	n = snprintf(x->err, x->errlen, "%s:%u: ", x->name, x->line);
	if (n >= 0 && (size_t)n < x->errlen)
		vsnprintf(x->err + n, x->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

/* Split the line <s>/<len> into <w> (at most CONFIG_MAX_WORDS); a word
 * starting with '#' ends the line. Returns the count, or -1 if too many. */
static int split_words(const char *s, size_t len, struct word *w)
{
	size_t i = 0;
	int n = 0;

	for (;;) {
		size_t start;

		while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r'))
			i++;
		if (i == len || s[i] == '#')
			return n;
		if (n == CONFIG_MAX_WORDS)
			return -1;
		start = i;
		while (i < len && s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			i++;
		w[n].p = s + start;
		w[n].len = i - start;
		n++;
	}
}

/* The next line of <*p>..<end> with words, split into <w>; blank and
 * comment lines are skipped. <*p> moves past it, <*line>/<*line_len> are the
 * line itself (borrowed). Returns the word count, 0 at the end, or -1 with
 * the error set. */
int config_next_line(struct config_lex *x, const char **p, const char *end,
                     struct word *w, const char **line, size_t *line_len)
{
	int n = 0;

	while (n == 0 && *p < end) {
		const char *eol = memchr(*p, '\n', (size_t)(end - *p));

		*line = *p;
		*line_len = (size_t)((eol ? eol : end) - *p);
		*p = eol ? eol + 1 : end;
		x->line++;
		if (memchr(*line, '\0', *line_len))
			return config_parse_fail(x, "NUL byte in line");
		n = split_words(*line, *line_len, w);
		if (n == -1)
			return config_parse_fail(x, "too many words (at most %d)", CONFIG_MAX_WORDS);
	}
	return n;
}

/* Read <path> whole into a new buffer <*buf> (NUL-terminated, the caller
 * frees it) of <*len> bytes. Returns 0, or -1 with "<path>: reason". */
int config_read_file(const char *path, char **buf, size_t *len,
                     char *err, size_t errlen)
{
	FILE *f = NULL;
	struct stat st;
	int rc = -1;

	*buf = NULL;

	f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		goto out;
	}
	if (fstat(fileno(f), &st) == -1 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		goto out;
	}
	if ((uint64_t)st.st_size > CONFIG_FILE_MAX) {
		snprintf(err, errlen, "%s: too large (more than %u bytes)", path, CONFIG_FILE_MAX);
		goto out;
	}
	*buf = malloc((size_t)st.st_size + 1);
	if (!*buf) {
		snprintf(err, errlen, "%s: out of memory", path);
		goto out;
	}
	*len = fread(*buf, 1, (size_t)st.st_size, f);
	(*buf)[*len] = '\0';
	if (ferror(f)) {
		snprintf(err, errlen, "%s: read error", path);
		free(*buf);
		*buf = NULL;
		goto out;
	}
	rc = 0;
out:
	if (f)
		fclose(f);
	return rc;
}
