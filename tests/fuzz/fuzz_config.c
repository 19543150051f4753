/*
 * fuzz_config - libFuzzer harness for the configuration parser.
 *
 * The input is parsed as a whole file on top of the defaults, then (when it
 * parsed) validated, deep-copied and parsed a second time on top of itself,
 * the way a SIGHUP reload and the file-plus-flags merge reuse a struct.
 * Invariants checked with abort(): a failed parse always leaves a
 * "<name>:<line>: " message, counts stay in their bounds, overrides stay
 * sorted and findable, and a copy equals its source. The second text is
 * also checked as a routes map against the first config (config_routes.c):
 * it fails with a "<name>:<line>: " message or counts its routes.
 * AddressSanitizer's leak check covers the override tables on every path.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "window.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Borrows <c>: the structural invariants every parsed config keeps. */
static void fuzz_check_config(const struct config *c)
{
	size_t i, k;

	if (c->npolicies > CONFIG_MAX_POLICIES)
		abort();
	if (memchr(c->listen, '\0', sizeof(c->listen)) == NULL ||
	    memchr(c->redis, '\0', sizeof(c->redis)) == NULL ||
	    memchr(c->metrics, '\0', sizeof(c->metrics)) == NULL)
		abort();
	for (i = 0; i < c->npolicies; i++) {
		const struct window_policy *p = &c->policies[i];

		if (p->name_len == 0 || p->name_len > WINDOW_NAME_MAX || p->nwin > WINDOW_MAX_WINDOWS)
			abort();
		if (config_find_policy(c, p->name, p->name_len) != p)
			abort();
		if (p->noverrides && !p->overrides)
			abort();
		for (k = 0; k < p->noverrides; k++) {
			if (p->overrides[k].key_len == 0 || p->overrides[k].key_len > WINDOW_KEY_MAX ||
			    p->overrides[k].nwin > WINDOW_MAX_WINDOWS)
				abort();
			/* sorted strictly: duplicates were refused */
			if (k && window_override_cmp(&p->overrides[k - 1], &p->overrides[k]) >= 0)
				abort();
		}
	}
}

/* Borrows <err>: a failed parse names the file and the line. */
static void fuzz_check_error(const char *err, const char *name)
{
	size_t n = strlen(name);

	if (strncmp(err, name, n) != 0 || err[n] != ':')
		abort();
}

/* Borrows <c>/<err>: a message never repeats a redis URL with credentials. */
static void fuzz_check_secret(const struct config *c, const char *err)
{
	const char *at = strchr(c->redis, '@');

	if (at && at > c->redis + 8 && strstr(err, c->redis) != NULL)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char sep[] = "\n%%\n";
	struct config c, copy;
	char err[CONFIG_ERR_LEN];
	const char *text = (const char *)data, *second = text;
	size_t len1 = size, len2 = size, i;
	uint64_t ms;

	/* durations alone: any bytes, never past the length */
	if (config_parse_duration((const char *)data, size, &ms) == 0 && size == 0)
		abort();

	/* "A\n%%\nB": B is parsed on top of A (a reload, or flags over a file);
	 * without the separator the whole text is parsed twice */
	for (i = 0; i + sizeof(sep) - 1 <= size; i++) {
		if (memcmp(text + i, sep, sizeof(sep) - 1) == 0) {
			len1 = i + 1;
			second = text + i + sizeof(sep) - 1;
			len2 = size - i - (sizeof(sep) - 1);
			break;
		}
	}

	config_init(&c);
	if (config_parse(&c, "fuzz.conf", text, len1, err, sizeof(err)) == -1) {
		fuzz_check_error(err, "fuzz.conf");
		config_release(&c);
		return 0;
	}
	fuzz_check_config(&c);
	if (config_validate(&c, err, sizeof(err)) == -1)
		fuzz_check_secret(&c, err);

	if (config_copy(&copy, &c) == 0) {
		if (copy.npolicies != c.npolicies)
			abort();
		for (i = 0; i < c.npolicies; i++) {
			const struct window_policy *a = &c.policies[i], *b = &copy.policies[i];

			if (a->noverrides != b->noverrides ||
			    (a->noverrides && (a->overrides == b->overrides ||
			                       memcmp(a->overrides, b->overrides,
			                              a->noverrides * sizeof(*a->overrides)) != 0)))
				abort();
		}
		config_release(&copy);
	}

	/* the second text as a routes map naming the first config's policies */
	{
		int nroutes = config_check_routes(&c, "routes.map", second, len2, err, sizeof(err));

		if (nroutes == -1)
			fuzz_check_error(err, "routes.map");
		else if (nroutes < 0 || (size_t)nroutes > len2)
			abort();
	}

	/* the second text on top: directives repeat across parses, policies
	 * collide, overrides merge with the ones already sorted */
	if (config_parse(&c, "again.conf", second, len2, err, sizeof(err)) == -1)
		fuzz_check_error(err, "again.conf");
	else
		fuzz_check_config(&c);
	config_release(&c);
	return 0;
}
