/*
 * test_reasons - the reason list in the docs is the code's, both ways.
 *
 * The code's reasons are one table: enum window_reason and its names
 * (window_reason_str(), spoa/core/window.c), the only text the agent ever puts
 * in txn.rl.reason (conn_ack.c). The docs list them in four places:
 * docs/protocol.md's `reason` row and its reason table, docs/configuration.md's
 * txn.rl.reason row (which adds the HAProxy block's own `no-decision`), and
 * docs/operations.md's errors_total row (which names other things too: only
 * checked one way). Run from the source tree's root, as make test does.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "window.h"

#define TOKENS_MAX 64
#define TOKEN_LEN  48

struct tokens {
	unsigned n;
	char v[TOKENS_MAX][TOKEN_LEN];
};

/* Adds every `word` of <s> (up to <end>) to <t>. */
static void tokens_scan(struct tokens *t, const char *s, const char *end)
{
	while (s < end && (s = memchr(s, '`', (size_t)(end - s))) != NULL) {
		const char *e = memchr(s + 1, '`', (size_t)(end - s - 1));
		size_t n;

		if (!e)
			return;
		n = (size_t)(e - s - 1);
		if (n > 0 && n < TOKEN_LEN && t->n < TOKENS_MAX) {
			memcpy(t->v[t->n], s + 1, n);
			t->v[t->n++][n] = '\0';
		}
		s = e + 1;
	}
}

/* Column <col> (0 = before the first '|') of <line>: its bounds. */
static int column(const char *line, unsigned col, const char **b, const char **e)
{
	const char *p = line;
	unsigned i;

	for (i = 0; i < col; i++) {
		p = strchr(p, '|');
		if (!p)
			return -1;
		p++;
	}
	*b = p;
	*e = strchr(p, '|');
	if (!*e)
		*e = p + strlen(p);
	return 0;
}

/* The words of column <col> of <path>'s line starting with <prefix>; with
 * <table>, of every row of the table under that header line instead. */
static void doc_tokens(const char *path, const char *prefix, unsigned col, int table,
                       struct tokens *t)
{
	char line[8192];
	FILE *f = fopen(path, "r");
	int in = 0;

	memset(t, 0, sizeof(*t));
	if (!f)
		fail_msg("cannot open %s (make test runs from the source root)", path);
	while (fgets(line, sizeof(line), f)) {
		const char *b, *e;

		if (!in && strncmp(line, prefix, strlen(prefix)) == 0) {
			if (!table) {
				if (column(line, col, &b, &e) == 0)
					tokens_scan(t, b, e);
				break;
			}
			in = 1;
			continue;
		}
		if (in) {
			if (line[0] != '|')
				break;
			if (strncmp(line, "|---", 4) != 0 && column(line, col, &b, &e) == 0)
				tokens_scan(t, b, e);
		}
	}
	fclose(f);
	if (t->n == 0)
		fail_msg("%s: no list found after '%s'", path, prefix);
}

static int tokens_has(const struct tokens *t, const char *w)
{
	unsigned i;

	for (i = 0; i < t->n; i++)
		if (strcmp(t->v[i], w) == 0)
			return 1;
	return 0;
}

static int is_reason(const char *w)
{
	unsigned r;

	for (r = 1; r < WINDOW_REASON_COUNT; r++)
		if (strcmp(window_reason_str((enum window_reason)r), w) == 0)
			return 1;
	return 0;
}

/* Every reason of the code is in <t>; with <exact>, nothing else is but
 * <extra> (NULL: none). */
static void check_list(const char *where, const struct tokens *t, int exact, const char *extra)
{
	unsigned r, i;

	for (r = 1; r < WINDOW_REASON_COUNT; r++) {
		const char *w = window_reason_str((enum window_reason)r);

		if (!tokens_has(t, w))
			fail_msg("%s does not list the reason '%s'", where, w);
	}
	if (!exact)
		return;
	for (i = 0; i < t->n; i++)
		if (!is_reason(t->v[i]) && !(extra && strcmp(t->v[i], extra) == 0))
			fail_msg("%s lists '%s', which the code never answers", where, t->v[i]);
}

/* Every reason has a name; none twice; NONE is the empty one. */
static void test_table(void **state)
{
	unsigned r, q;

	(void)state;
	assert_string_equal(window_reason_str(WINDOW_REASON_NONE), "");
	assert_string_equal(window_reason_str(WINDOW_REASON_COUNT), "");
	for (r = 1; r < WINDOW_REASON_COUNT; r++) {
		const char *w = window_reason_str((enum window_reason)r);

		assert_true(w[0] != '\0');
		for (q = 1; q < r; q++)
			assert_string_not_equal(w, window_reason_str((enum window_reason)q));
	}
}

static void test_protocol(void **state)
{
	struct tokens t;

	(void)state;
	doc_tokens("docs/protocol.md", "| `reason` | STR |", 4, 0, &t);
	check_list("docs/protocol.md's `reason` row", &t, 1, NULL);
	doc_tokens("docs/protocol.md", "| reason | status | meaning |", 1, 1, &t);
	check_list("docs/protocol.md's reason table", &t, 1, NULL);
}

static void test_configuration(void **state)
{
	struct tokens t;

	(void)state;
	doc_tokens("docs/configuration.md", "| `txn.rl.reason` |", 3, 0, &t);
	check_list("docs/configuration.md's txn.rl.reason row", &t, 1, "no-decision");
}

static void test_operations(void **state)
{
	struct tokens t;

	(void)state;
	doc_tokens("docs/operations.md", "| `errors_total` |", 4, 0, &t);
	check_list("docs/operations.md's errors_total row", &t, 0, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_protocol),
		cmocka_unit_test(test_configuration),
		cmocka_unit_test(test_operations),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
