/*
 * config_lex - the reader under every config-like file the agent checks (the
 * config itself, a routes map): a file read whole, its lines split into
 * words, and the "<name>:<line>: <reason>" error every message starts with.
 * A leaf: it calls no other config file.
 */
#ifndef SPOA_CONFIG_LEX_H
#define SPOA_CONFIG_LEX_H

#include <stddef.h>
#include <string.h>

#define CONFIG_MAX_WORDS      16
#define CONFIG_FILE_MAX       (16u << 20)

/* A slice of the text being parsed. */
struct word {
	const char *p;
	size_t len;
};

/* Where a reader is, and where its error goes. */
struct config_lex {
	const char *name;              /* file name in messages */
	unsigned line;                 /* 1-based, of the line last read */
	char *err;
	size_t errlen;
};

/* Is <w> exactly the C string <s>? */
static inline int config_word_is(struct word w, const char *s)
{
	size_t n = strlen(s);

	return w.p && w.len == n && memcmp(w.p, s, n) == 0;
}

/* Printable length of <w> for messages: long words are cut at 64 bytes. */
static inline int config_word_plen(struct word w)
{
	return w.len > 64 ? 64 : (int)w.len;
}

/* Format "<name>:<line>: <fmt...>" into <x>'s error buffer. Returns -1. */
__attribute__((format(printf, 2, 3)))
int config_parse_fail(struct config_lex *x, const char *fmt, ...);

/* The next line of <*p>..<end> with words, split into <w> (at most
 * CONFIG_MAX_WORDS); blank and comment lines are skipped. <*p> moves past
 * it, <*line>/<*line_len> are the line itself (borrowed). Returns the word
 * count, 0 at the end, or -1 with the error set. */
int config_next_line(struct config_lex *x, const char **p, const char *end,
                     struct word *w, const char **line, size_t *line_len);

/* Read <path> whole into a new buffer <*buf> (NUL-terminated, the caller
 * frees it) of <*len> bytes. Returns 0, or -1 with "<path>: reason". */
int config_read_file(const char *path, char **buf, size_t *len, char *err, size_t errlen);

#endif /* SPOA_CONFIG_LEX_H */
