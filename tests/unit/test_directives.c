/*
 * test_directives - the one table of directives (spoa/config/
 * config_directives.c): its rows are whole, config_init() gives exactly
 * what its defaults parse to, and --help's directive list is printed from
 * it, each default named in its help line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "config_int.h"

/* --help's directive list as config_print_directives() prints it, in a
 * buffer the caller frees. */
static char *help_text(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	config_print_directives(f);
	assert_int_equal(fclose(f), 0);
	assert_non_null(buf);
	return buf;
}

/* Every row has a name of [a-z-], a parser, a shape, --help text; names are
 * unique; a repeatable directive has no default (it adds, never replaces). */
static void test_rows(void **state)
{
	size_t i, j, k;

	(void)state;
	assert_true(config_ndirectives >= 20);
	assert_true(config_ndirectives <= CONFIG_DIRECTIVES_MAX);
	for (i = 0; i < config_ndirectives; i++) {
		const struct config_directive *d = &config_directives[i];

		assert_non_null(d->name);
		assert_true(d->name[0] != '\0');
		for (k = 0; d->name[k]; k++)
			assert_true((d->name[k] >= 'a' && d->name[k] <= 'z') || d->name[k] == '-');
		assert_non_null(d->parse);
		assert_true((unsigned)d->shape < CONFIG_ARG_COUNT);
		assert_non_null(d->args);
		assert_non_null(d->help);
		assert_true(d->help[0] != '\0');
		assert_true((d->shape == CONFIG_ARG_NONE) == (d->args[0] == '\0'));
		if (d->shape == CONFIG_ARG_LINE)
			assert_null(d->def);
		for (j = 0; j < i; j++)
			assert_string_not_equal(config_directives[j].name, d->name);
	}
}

/* config_init() is the table's defaults: writing "<name> <default>" on top
 * of it changes nothing (on a build without TLS the redis-tls-* lines are
 * refused, so they are left out there). */
static void test_defaults_are_the_table(void **state)
{
	struct config a, b;
	char text[256], err[CONFIG_ERR_LEN];
	size_t i, ndef = 0;

	(void)state;
	config_init(&a);
	for (i = 0; i < config_ndirectives; i++) {
		const struct config_directive *d = &config_directives[i];

		if (!d->def || (d->tls_only && !SPOA_TLS))
			continue;
		ndef++;
		config_init(&b);
		snprintf(text, sizeof(text), "%s %s\n", d->name, d->def);
		assert_int_equal(config_parse(&b, "t.conf", text, strlen(text), err, sizeof(err)), 0);
		b.tls.any = a.tls.any;         /* writing any redis-tls-* sets it */
		if (memcmp(&a, &b, sizeof(a)) != 0)
			fail_msg("'%s' parses to something config_init() does not give", text);
		config_release(&b);
	}
	assert_true(ndef >= 15);
	/* the values the agent has always started with */
	assert_string_equal(a.listen, "127.0.0.1:12345");
	assert_string_equal(a.redis, "redis://127.0.0.1:6379/0");
	assert_int_equal(a.redis_timeout_ms, 50);
	assert_int_equal(a.redis_batch, 32);
	assert_int_equal(a.threads, 1);
	assert_int_equal(a.log_level, CONFIG_LOG_INFO);
	assert_string_equal(a.metrics, "");
	assert_int_equal(a.max_connections, 10000);
	assert_int_equal(a.max_inflight, 256);
	assert_int_equal(a.max_notify_messages, 16);
	assert_int_equal(a.hello_timeout_ms, 10000);
	assert_int_equal(a.frame_timeout_ms, 10000);
	assert_true(a.deny_cache);
	assert_int_equal(a.deny_cache_size, 4096);
	assert_false(a.redis_allow_eviction);
	assert_int_equal(a.redis_engine, CONFIG_REDIS_ENGINE_AUTO);
	assert_true(a.tls.verify);
	assert_false(a.tls.any);
	assert_false(a.allow_remote_listen);
	assert_int_equal(a.npolicies, 0);
}

/* --help lists the table's directives, in its order, each at the start of a
 * line ("  <name>"), and no other; each help names its default. */
static void test_help_is_the_table(void **state)
{
	char *help = help_text(), *line, *save = NULL, want[96];
	size_t row = 0, i;

	(void)state;
	for (line = strtok_r(help, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (strncmp(line, "  ", 2) != 0 || line[2] < 'a' || line[2] > 'z')
			continue;
		assert_true(row < config_ndirectives);
		snprintf(want, sizeof(want), "  %s", config_directives[row].name);
		assert_memory_equal(line, want, strlen(want));
		assert_true(line[strlen(want)] == ' ' || line[strlen(want)] == '\0');
		row++;
	}
	assert_int_equal(row, config_ndirectives);
	free(help);

	for (i = 0; i < config_ndirectives; i++) {
		const struct config_directive *d = &config_directives[i];
		char named[64], first[64];

		if (!d->def)
			continue;
		snprintf(named, sizeof(named), "default %s", d->def);
		snprintf(first, sizeof(first), "%s (default)", d->def);
		if (!strstr(d->help, named) && !strstr(d->help, first))
			fail_msg("%s: its help does not name its default '%s'", d->name, d->def);
	}
}

/* The layout: a short first column puts the help at column 30, a long one
 * beside it when the line fits in 80 columns, else below; later help lines
 * at column 30. */
static void test_help_layout(void **state)
{
	char *help = help_text();

	(void)state;
	assert_non_null(strstr(help,
		"  threads N                   worker threads, default 1 (1..64)\n"));
	assert_non_null(strstr(help,
		"  listen ADDR                 default 127.0.0.1:12345 (loopback or unix only\n"
		"                              unless 'allow-remote-listen')\n"));
	assert_non_null(strstr(help,
		"  redis-engine auto|script|module  how Redis decides: the module's command\n"
		"                              RATELIMIT.DECIDE, or the script; auto (default):\n"));
	assert_non_null(strstr(help,
		"  override POLICY KEY LIMIT/WINDOW [LIMIT/WINDOW...] [burst=N]\n"
		"                              limits of one account (e.g. a partner) in POLICY\n"));
	assert_non_null(strstr(help,
		"         [max-cost=N] [precision=DURATION] [algorithm=log|gcra] [burst=N] [pool=POOL]\n"
		"         [inflight=N] [lease=DURATION] [settle=HEADER]\n"
		"                              shadow: decide and count, but answer allow with\n"));
	assert_non_null(strstr(help,
		"  allow-remote-listen         permit a non-loopback listen/metrics address\n"));
	free(help);
}

/* The dispatch holds each row to its shape, with the messages the parser
 * has always given. */
static void test_shapes(void **state)
{
	static const struct {
		const char *text, *err;
	} cases[] = {
		{ "threads 2\nthreads 3\n", "t.conf:2: duplicate directive 'threads' (first at line 1)" },
		{ "threads\n", "t.conf:1: threads takes exactly one argument" },
		{ "threads 1 2\n", "t.conf:1: threads takes exactly one argument" },
		{ "allow-remote-listen yes\n", "t.conf:1: allow-remote-listen takes no argument" },
		{ "allow-remote-listen\nallow-remote-listen\n",
		  "t.conf:2: duplicate directive 'allow-remote-listen' (first at line 1)" },
		{ "treads 2\n", "t.conf:1: unknown directive 'treads'" },
	};
	char err[CONFIG_ERR_LEN];
	struct config c;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		config_init(&c);
		assert_int_equal(config_parse(&c, "t.conf", cases[i].text, strlen(cases[i].text),
		                              err, sizeof(err)), -1);
		assert_string_equal(err, cases[i].err);
		config_release(&c);
	}
	/* repeatable: a second policy is no duplicate */
	config_init(&c);
	assert_int_equal(config_parse(&c, "t.conf", "policy a 1/s\npolicy b 1/s\n",
	                              strlen("policy a 1/s\npolicy b 1/s\n"), err, sizeof(err)), 0);
	assert_int_equal(c.npolicies, 2);
	config_release(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows),
		cmocka_unit_test(test_defaults_are_the_table),
		cmocka_unit_test(test_help_is_the_table),
		cmocka_unit_test(test_help_layout),
		cmocka_unit_test(test_shapes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
