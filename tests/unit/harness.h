/*
 * harness - shared helpers for the cmocka unit tests (no sockets).
 *
 *   struct harness_buf    a buffer whose last usable byte sits right before a
 *                         PROT_NONE page, so reading or writing one byte past
 *                         the end crashes the test (also under ASan/valgrind,
 *                         which do not watch mmap'd memory as closely)
 *   harness_hex_decode()  "00 0a ff" (blanks and newlines ignored) -> bytes
 *   harness_load_hex()    the same, from a file (tests/vectors/ *.hex)
 *   harness_vectors_dir() $VECTORS_DIR, else "tests/vectors" (the repo's
 *                         copy, when run from the repo root)
 *   harness_find_files()  files under a directory tree with a suffix, sorted
 *   harness_feed_whole()  run a decoder on a whole input in a guarded buffer
 *   harness_feed_bytes()  run it on every strict prefix (each must answer 0,
 *                         "need more"), then on the whole input
 *
 * A decoder under test has the shape
 *   int decode(const unsigned char *buf, size_t len, void *ctx)
 * returning 0 (need more), > 0 (bytes consumed) or -1 (error).
 *
 * Everything is static inline so a test that uses only part of it still
 * builds with -Werror.
 */
#ifndef TESTS_UNIT_HARNESS_H
#define TESTS_UNIT_HARNESS_H

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#define HARNESS_PATH_MAX  512

struct harness_buf {
	unsigned char *map;     /* whole mapping: usable pages + guard page */
	size_t map_len;
	unsigned char *guard;   /* first byte of the PROT_NONE page */
	size_t cap;             /* at most this many bytes fit before <guard> */
};

/* Owns <b>'s mapping until harness_buf_free(). Maps room for <cap> bytes
 * followed by an inaccessible page. Returns 0 or -1. */
static inline int harness_buf_init(struct harness_buf *b, size_t cap)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t usable = (cap + page - 1) / page * page;
	void *m;

	if (usable == 0)
		usable = page;
	memset(b, 0, sizeof(*b));
	m = mmap(NULL, usable + page, PROT_READ | PROT_WRITE,
	         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return -1;
	b->map = m;
	b->map_len = usable + page;
	b->guard = b->map + usable;
	b->cap = cap;
	if (mprotect(b->guard, page, PROT_NONE) == -1) {
		munmap(b->map, b->map_len);
		memset(b, 0, sizeof(*b));
		return -1;
	}
	return 0;
}

/* Frees <b>'s mapping. */
static inline void harness_buf_free(struct harness_buf *b)
{
	if (b->map != NULL)
		munmap(b->map, b->map_len);
	memset(b, 0, sizeof(*b));
}

/* Borrows <b>'s mapping: the returned pointer is valid until the next
 * harness_buf_place() or harness_buf_free(). Copies <n> bytes of <src>
 * (or fills 0xA5 when <src> is NULL, to spot unwritten bytes) so that they
 * end exactly at the guard page. */
static inline unsigned char *harness_buf_place(struct harness_buf *b,
                                               const void *src, size_t n)
{
	unsigned char *p;

	assert_true(n <= b->cap);
	p = b->guard - n;
	if (n > 0) {
		if (src != NULL)
			memcpy(p, src, n);
		else
			memset(p, 0xa5, n);
	}
	return p;
}

/* Value of hex digit <c>, or -1. */
static inline int harness_hex_nibble(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Writes into the caller's <dst>. Decodes hex text <hex> (blanks, newlines
 * and ':' ignored) into at most <cap> bytes. Returns bytes or -1 on an odd
 * digit count, a stray character or overflow. */
static inline long harness_hex_decode(const char *hex, unsigned char *dst,
                                      size_t cap)
{
	size_t n = 0;
	int hi = -1, v;

	for (; *hex != '\0'; hex++) {
		if (*hex == ' ' || *hex == '\n' || *hex == '\r' ||
		    *hex == '\t' || *hex == ':')
			continue;
		v = harness_hex_nibble((unsigned char)*hex);
		if (v < 0)
			return -1;
		if (hi < 0) {
			hi = v;
			continue;
		}
		if (n >= cap)
			return -1;
		dst[n++] = (unsigned char)(hi << 4 | v);
		hi = -1;
	}
	return hi < 0 ? (long)n : -1;
}

/* Writes into the caller's <dst>; the file is opened and closed here.
 * Loads a hex file <path>. Returns bytes or -1. */
static inline long harness_load_hex(const char *path, unsigned char *dst,
                                    size_t cap)
{
	char text[65536];
	size_t got;
	FILE *fp;
	long r = -1;

	fp = fopen(path, "r");
	if (fp == NULL)
		return -1;
	got = fread(text, 1, sizeof(text) - 1, fp);
	if (ferror(fp) || !feof(fp))
		goto out;
	text[got] = '\0';
	r = harness_hex_decode(text, dst, cap);
out:
	fclose(fp);
	return r;
}

/* Returns $VECTORS_DIR, else "tests/vectors" (the repo carries its own
 * copy: a clone must test alone). Borrowed from the environment or a
 * literal: do not free. */
static inline const char *harness_vectors_dir(void)
{
	const char *d = getenv("VECTORS_DIR");

	return d != NULL && *d != '\0' ? d : "tests/vectors";
}

/* qsort() order for harness_find_files(): plain strcmp of the rows. */
static inline int harness_path_cmp(const void *a, const void *b)
{
	return strcmp((const char *)a, (const char *)b);
}

/* Writes into the caller's <paths> from row <n> on (<max> rows in all).
 * Walks <dir> for names ending in <suffix>, <depth> levels deep so far.
 * Returns the new row count. */
static inline size_t harness_find_walk(const char *dir, const char *suffix,
                                       char (*paths)[HARNESS_PATH_MAX],
                                       size_t max, size_t n, int depth)
{
	char path[HARNESS_PATH_MAX];
	size_t sl = strlen(suffix), nl;
	struct dirent *de;
	struct stat st;
	DIR *d;

	if (depth > 8)
		return n;
	d = opendir(dir);
	if (d == NULL)
		return n;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >=
		    (int)sizeof(path))
			continue;
		if (stat(path, &st) == -1)
			continue;
		if (S_ISDIR(st.st_mode)) {
			n = harness_find_walk(path, suffix, paths, max, n, depth + 1);
			continue;
		}
		nl = strlen(de->d_name);
		if (!S_ISREG(st.st_mode) || nl < sl ||
		    strcmp(de->d_name + nl - sl, suffix) != 0 || n >= max)
			continue;
		memcpy(paths[n++], path, strlen(path) + 1);
	}
	closedir(d);
	return n;
}

/* Writes into the caller's <paths> (<max> rows). Lists the regular files
 * under <dir> (recursively) whose name ends in <suffix>, sorted. Returns
 * how many. */
static inline size_t harness_find_files(const char *dir, const char *suffix,
                                        char (*paths)[HARNESS_PATH_MAX],
                                        size_t max)
{
	size_t n = harness_find_walk(dir, suffix, paths, max, 0, 0);

	qsort(paths, n, sizeof(paths[0]), harness_path_cmp);
	return n;
}

/* Borrows <src> for the call only. Runs <decode> once on all <len> bytes,
 * placed against a guard page. Returns what <decode> returned. */
static inline int harness_feed_whole(const unsigned char *src, size_t len,
                                     int (*decode)(const unsigned char *buf,
                                                   size_t len, void *ctx),
                                     void *ctx)
{
	struct harness_buf b;
	int r;

	assert_int_equal(harness_buf_init(&b, len), 0);
	r = decode(harness_buf_place(&b, src, len), len, ctx);
	harness_buf_free(&b);
	return r;
}

/* Borrows <src> for the call only. Runs <decode> on each strict prefix of
 * <src> (0 .. len-1 bytes, each against the guard page): all must answer 0.
 * Then on the whole input; returns what that call returned. */
static inline int harness_feed_bytes(const unsigned char *src, size_t len,
                                     int (*decode)(const unsigned char *buf,
                                                   size_t len, void *ctx),
                                     void *ctx)
{
	struct harness_buf b;
	size_t k;
	int r;

	assert_int_equal(harness_buf_init(&b, len), 0);
	for (k = 0; k < len; k++) {
		r = decode(harness_buf_place(&b, src, k), k, ctx);
		if (r != 0) {
			harness_buf_free(&b);
			fail_msg("prefix of %zu/%zu bytes: decoder returned %d, "
			         "expected 0 (need more)", k, len, r);
		}
	}
	r = decode(harness_buf_place(&b, src, len), len, ctx);
	harness_buf_free(&b);
	return r;
}

#endif /* TESTS_UNIT_HARNESS_H */
